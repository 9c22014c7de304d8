"""Bench only: ``manage.py bench_check`` prints, as JSON, whether the published versions are whole.

Versions consecutive from 1; every stored document parses and its hash is the
row's; the active version is the highest activated; the bundle in Redis is the
one Postgres gives (or Redis has none yet).
"""

import json

from django.core.management.base import BaseCommand

from limits.gateways.bundle import snapshot_bundle_build, snapshot_bundle_etag
from limits.models import Snapshot
from limits.versions.selectors import snapshot_get_active
from sluice import Snapshot as Document


class Command(BaseCommand):
    help = "Check that every published version is whole (bench only)."

    def handle(self, *args, **options):
        rows = list(Snapshot.objects.order_by("version"))
        versions = [row.version for row in rows]
        whole = all(
            Document.from_bytes(bytes(row.content)).hash == row.hash for row in rows
        )
        active = snapshot_get_active(light=True)
        built, stored = snapshot_bundle_build(), snapshot_bundle_etag()
        report = {
            "versions": versions,
            "consecutive": versions == list(range(1, len(versions) + 1)),
            "documents_whole": whole,
            "active": active.version if active else None,
            "bundle_matches": stored is None or built is None or stored == built.etag,
        }
        self.stdout.write(json.dumps(report))
