"""Check that Postgres and Redis answer, in one clear line each, before anything else runs."""

from django.conf import settings
from django.core.management.base import BaseCommand

from controlplane.preflight import check_postgres, check_redis, redact


class Command(BaseCommand):
    help = (
        "Check that Postgres and Redis are reachable; optionally create the database."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--create-database",
            action="store_true",
            help="Create the database if missing.",
        )

    def handle(self, *args, create_database: bool = False, **options):
        created = check_postgres(create_database=create_database)
        check_redis(settings.REDIS_URL)
        if created:
            self.stdout.write(
                f"Created database {settings.DATABASES['default']['NAME']}."
            )
        self.stdout.write(
            f"Postgres {redact(settings.DATABASE_URL)} and Redis {redact(settings.REDIS_URL)} answer."
        )
