"""Write the gateway bundle (active and scheduled snapshots) to a file, byte for byte.

The demo gateway can read its rules from such a file (``SLUICE_BUNDLE_FILE``)
instead of polling the control plane; it re-reads the file when it changes.
"""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from limits.gateways.bundle import snapshot_bundle_get


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
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.tmp")
        temporary.write_bytes(bundle.body)
        temporary.replace(path)  # atomic: a gateway never reads half a file
        self.stdout.write(
            f"Version {bundle.active} written to {path} ({len(bundle.body):,} bytes)."
        )
