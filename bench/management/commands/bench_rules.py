"""Bench only: ``manage.py bench_rules --tenants N --overrides M`` bulk-loads a working copy
(``bench/rules_data.py``) and prints the counts."""

import json

from django.core.management.base import BaseCommand

from bench.rules_data import RuleSet, load_rules


class Command(BaseCommand):
    help = "Replace the working copy with a large generated one (bench only)."

    def add_arguments(self, parser):
        parser.add_argument("--tenants", type=int, default=100_000)
        parser.add_argument("--overrides", type=int, default=20_000)
        parser.add_argument("--routes", type=int, default=200)

    def handle(self, *args, tenants, overrides, routes, **options):
        counts = load_rules(RuleSet(tenants, overrides, routes))
        self.stdout.write(json.dumps(counts))
