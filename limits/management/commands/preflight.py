"""Check that Postgres and Redis answer, in one clear line each, before anything else runs."""

from django.conf import settings
from django.core.management.base import BaseCommand

from controlplane.preflight import redact, wait_for_services


class Command(BaseCommand):
    help = "Check that Postgres and Redis (REDIS_URL, CELERY_BROKER_URL) are reachable; optionally create the database."

    def add_arguments(self, parser):
        parser.add_argument(
            "--create-database",
            action="store_true",
            help="Create the database if missing.",
        )
        parser.add_argument(
            "--wait",
            type=float,
            default=0,
            metavar="SECONDS",
            help="Keep trying this long while a service does not answer (one that is starting).",
        )

    def handle(self, *args, create_database: bool = False, wait: float = 0, **options):
        created = wait_for_services(timeout=wait, create_database=create_database)
        if created:
            self.stdout.write(
                f"Created database {settings.DATABASES['default']['NAME']}."
            )
        self.stdout.write(
            f"Postgres {redact(settings.DATABASE_URL)} and Redis {redact(settings.REDIS_URL)} answer."
        )
