"""The Django admin of Sluice: rules (saved as change requests), change requests,
audit log, versions and publishing, announcements, traffic dashboards. Its site,
with the home page, is ``controlplane.admin_site``."""

from . import (  # noqa: F401  (registers the model admins)
    announcements,
    audit,
    changes,
    dashboards,
    deliveries,
    rules,
    snapshots,
    tokens,
    users,
)
