"""Print or save the public keys gateways must trust: ``manage.py signing_keys``.

The same document as ``/.well-known/sluice-keys.json``; give it to gateways in
their configuration (``--public-keys``, ``SLUICE_PUBLIC_KEYS``, the nginx
module's ``public_keys``).
"""

import json
from pathlib import Path

from django.core.management.base import BaseCommand

from limits.core.signing import public_keyring


class Command(BaseCommand):
    help = "Write the sluice-keys.json document of the keys bundles are signed with."

    def add_arguments(self, parser):
        parser.add_argument("--output", help="Write it to this file (default: stdout).")

    def handle(self, *args, output: str | None = None, **options):
        text = json.dumps(public_keyring().to_json(), indent=2) + "\n"
        if output is None:
            self.stdout.write(text, ending="")
            return
        path = Path(output)
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.tmp")
        temporary.write_text(text, encoding="utf-8")
        temporary.replace(path)
        self.stdout.write(f"Public keys written to {path}.")
