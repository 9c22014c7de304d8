"""Django's ``migrate``, run as the owner role when ``DATABASE_MIGRATE_URL`` names one.

The web and worker processes connect as the runtime role (``DATABASE_URL``), which
owns no table and so cannot create or alter any. Migrations connect as the owner
instead, and end by giving the runtime role its privileges on whatever they created
(``controlplane.dbroles.grants_apply``).

Migrations run without the statement timeout requests have
(``SLUICE_DB_STATEMENT_TIMEOUT_MS``): building an index on a large table may
rightly take longer.
"""

import dj_database_url
from django.conf import settings
from django.core.management.commands import migrate
from django.db import connections

from controlplane.dbroles import RolePlan, grants_apply


class Command(migrate.Command):
    help = migrate.Command.help + " Runs as the owner role of DATABASE_MIGRATE_URL."

    def handle(self, *args, **options):
        connection = connections[options["database"]]
        saved = dict(connection.settings_dict)
        connection.close()
        connection.settings_dict["OPTIONS"] = {
            **saved.get("OPTIONS", {}),
            "options": "-c statement_timeout=0",
        }
        if settings.DATABASE_MIGRATE_URL != settings.DATABASE_URL:
            owner = dj_database_url.parse(settings.DATABASE_MIGRATE_URL)
            connection.settings_dict.update(
                {key: owner[key] for key in ("USER", "PASSWORD", "HOST", "PORT")}
            )
        try:
            super().handle(*args, **options)
            if settings.DATABASE_MIGRATE_URL == settings.DATABASE_URL:
                return  # one role for everything: no grants to give
            plan = RolePlan.from_urls(
                owner_url=settings.DATABASE_MIGRATE_URL,
                runtime_url=settings.DATABASE_URL,
            )
            connection.ensure_connection()
            grants_apply(connection.connection, plan)
        finally:
            connection.close()
            connection.settings_dict.clear()
            connection.settings_dict.update(saved)
