"""Set up the owner and runtime database roles: ``manage.py db_roles`` (as a superuser)."""

import psycopg
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from controlplane.dbroles import RolePlan, RolesRefused, roles_ensure
from controlplane.preflight import redact


class Command(BaseCommand):
    help = (
        "Create or update the owner role (DATABASE_MIGRATE_URL) and the runtime role "
        "(DATABASE_URL), give the owner every object of the database and the runtime "
        "role only the grants it needs. Connects as DATABASE_ADMIN_URL, a superuser. "
        "Safe to run again."
    )

    def add_arguments(self, parser):
        parser.add_argument("--admin-url", help="default: DATABASE_ADMIN_URL")
        parser.add_argument("--owner-url", help="default: DATABASE_MIGRATE_URL")
        parser.add_argument("--runtime-url", help="default: DATABASE_URL")
        parser.add_argument(
            "--if-two-roles",
            action="store_true",
            help="When both URLs name one role, say so and do nothing (make run).",
        )

    def handle(self, *args, admin_url=None, owner_url=None, runtime_url=None, **opts):
        owner_url = owner_url or settings.DATABASE_MIGRATE_URL
        runtime_url = runtime_url or settings.DATABASE_URL
        admin_url = admin_url or settings.DATABASE_ADMIN_URL
        if opts["if_two_roles"] and owner_url == runtime_url:
            self.stdout.write(
                "One database role for migrations and the application "
                f"({redact(runtime_url)}): no roles to set up."
            )
            return
        try:
            plan = RolePlan.from_urls(owner_url=owner_url, runtime_url=runtime_url)
            with psycopg.connect(admin_url, autocommit=False) as conn:
                roles_ensure(conn, plan)
        except RolesRefused as exc:
            raise CommandError(f"db_roles: {exc}.") from None
        except psycopg.Error as exc:
            raise CommandError(
                f"db_roles: as {redact(admin_url)}: {str(exc).strip()}"
            ) from None
        self.stdout.write(
            f"Roles ready in {plan.database}: {plan.owner} owns the tables "
            f"(migrations), {plan.runtime} runs the application."
        )
