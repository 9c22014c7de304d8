from django.apps import AppConfig
from django.conf import settings
from django.db.models.signals import post_migrate, pre_delete


class LimitsConfig(AppConfig):
    """The domain app: rate-limit rules, snapshots, audit log and announcements."""

    name = "limits"
    verbose_name = "Rate limits"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Models are not ready when this module is imported; ready() is Django's hook.
        from limits.core.roles import sync_role_groups
        from limits.gateways.users import user_deleting

        post_migrate.connect(
            sync_role_groups, sender=self, dispatch_uid="limits.sync_role_groups"
        )
        pre_delete.connect(
            user_deleting,
            sender=settings.AUTH_USER_MODEL,
            dispatch_uid="limits.user_deleting",
        )
