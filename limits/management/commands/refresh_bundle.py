"""Rebuild the gateways' bundle in Redis from Postgres (after a restore, or a lost Redis)."""

from django.core.management.base import BaseCommand

from limits.gateways.bundle import snapshot_bundle_refresh


class Command(BaseCommand):
    help = "Rebuild the snapshot bundle gateways poll, from the versions in Postgres."

    def handle(self, *args, **options):
        bundle = snapshot_bundle_refresh(force=True)
        if bundle is None:
            self.stdout.write("Nothing published yet: there is no bundle to build.")
            return
        scheduled = ", ".join(map(str, bundle.scheduled)) or "none"
        self.stdout.write(
            f"Bundle rebuilt: active version {bundle.active}, scheduled {scheduled}, ETag {bundle.etag}."
        )
