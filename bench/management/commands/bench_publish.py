"""Bench only: ``manage.py bench_publish`` changes one limit and publishes: a new
version for a running fleet to download."""

from django.core.management.base import BaseCommand

from limits.audit import Actor
from limits.choices import ScopeKind
from limits.models import Limit
from limits.publishing import snapshot_publish


class Command(BaseCommand):
    help = "Raise or lower the default policy's limit by one and publish (bench only)."

    def handle(self, *args, **options):
        limit = Limit.objects.filter(
            policy__scope=ScopeKind.DEFAULT, policy__route=None
        ).first()
        limit.rate = limit.rate + 1 if limit.rate % 2 else limit.rate - 1
        limit.save(update_fields=["rate"])
        row = snapshot_publish(actor=Actor.system("bench"), message="bench: fleet")
        self.stdout.write(str(row.version))
