"""Bench only: ``manage.py bench_publish`` changes one limit and publishes: a new
version for a running fleet to download."""

from django.core.management.base import BaseCommand

from limits.choices import ScopeKind
from limits.core.audit import Actor
from limits.models import Limit
from limits.publishing.services import snapshot_publish


class Command(BaseCommand):
    help = "Raise the default policy's rate by one and publish (bench only)."

    def handle(self, *args, **options):
        limit = Limit.objects.filter(
            policy__scope=ScopeKind.DEFAULT, policy__route=None
        ).first()
        limit.rate += 1  # always a new value, even after a publish that failed
        limit.burst = max(limit.burst, limit.rate)
        limit.save(update_fields=["rate", "burst"])
        row = snapshot_publish(actor=Actor.system("bench"), message="bench: fleet")
        self.stdout.write(str(row.version))
