"""The audit log, read only."""

from api.filters import AuditFilter
from api.serializers.audit import (
    AuditEntrySerializer,
)
from limits.models import AuditEntry

from .base import ReadOnlyManagementViewSet


class AuditEntryViewSet(ReadOnlyManagementViewSet):
    """Every recorded change, newest first. There is no way to change or delete an entry."""

    queryset = AuditEntry.objects.all()
    serializer_class = AuditEntrySerializer
    filterset_class = AuditFilter
    search_fields = ("object_repr", "reason")
