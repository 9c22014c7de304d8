"""Write the gateway bundle (active and scheduled snapshots) to a file, signed.

The file is a gateway's last-known-good file (``sluice.bundle.write_bundle_file``):
the signature, then the bundle byte for byte. The demo gateway can read its rules
from such a file (``SLUICE_BUNDLE_FILE``) instead of polling the control plane; it
re-reads the file when it changes and checks its signature each time.
"""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from limits.core.signing import public_keyring
from limits.gateways.bundle import snapshot_bundle_get
from sluice.bundle import verify_bundle_bytes, write_bundle_file


class Command(BaseCommand):
    help = (
        "Write the bundle gateways poll (what GET /api/v1/snapshot serves) to a file."
    )

    def add_arguments(self, parser):
        parser.add_argument("--output", required=True, help="Where to write it.")

    def handle(self, *args, output: str, **options):
        bundle = snapshot_bundle_get()
        if bundle is None:
            raise CommandError(
                "Nothing is published yet: run `manage.py publish` first."
            )
        path = Path(output)
        signed = verify_bundle_bytes(
            bundle.body, bundle.signature, public_keyring(), etag=bundle.etag
        )
        write_bundle_file(path, signed)  # atomic: a gateway never reads half a file
        self.stdout.write(
            f"Version {bundle.active} written to {path} ({len(bundle.body):,} bytes)."
        )
