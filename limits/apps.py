from django.apps import AppConfig
from django.db.models.signals import post_migrate


class LimitsConfig(AppConfig):
    """The domain app: rate-limit rules, snapshots, audit log and announcements."""

    name = "limits"
    verbose_name = "Rate limits"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Models are not ready when this module is imported; ready() is Django's hook.
        from limits.core.roles import sync_role_groups

        post_migrate.connect(
            sync_role_groups, sender=self, dispatch_uid="limits.sync_role_groups"
        )
