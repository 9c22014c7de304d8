"""What every management viewset shares: strict query parameters, ETags, the actor."""

from rest_framework import exceptions, mixins, viewsets

from api.etags import ETagMixin, expected_revision
from limits.core.audit import Actor

PAGINATION_PARAMS = {"limit", "offset"}


def actor_from(request) -> Actor:
    return Actor.from_request(request)


class StrictQueryMixin:
    """Answer 400 for a query parameter the endpoint does not know (a typo'd filter would
    otherwise silently match everything)."""

    #: Ids in URLs: at most 18 digits, within Postgres' bigint (a longer one is a 404,
    #: never a query Postgres refuses). Slug-addressed viewsets set their own.
    lookup_value_regex = r"[0-9]{1,18}"

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)
        unknown = set(request.query_params) - self.known_query_params()
        if unknown:
            raise exceptions.ValidationError(
                {name: ["Unknown query parameter."] for name in sorted(unknown)}
            )

    def known_query_params(self) -> set[str]:
        known = {"format"}
        action = getattr(self, "action", None)  # viewsets; generic list views have none
        lists = action == "list" if action else isinstance(self, mixins.ListModelMixin)
        if lists:
            filterset = getattr(self, "filterset_class", None)
            known |= set(filterset.base_filters) if filterset else set()
            known |= set(getattr(self, "filterset_fields", ()) or ())
            known |= {"ordering"} if getattr(self, "ordering_fields", None) else set()
            known |= {"search"} if getattr(self, "search_fields", None) else set()
            known |= (
                PAGINATION_PARAMS if getattr(self, "pagination_class", None) else set()
            )
        return known


class ManagementViewSet(ETagMixin, StrictQueryMixin, viewsets.ModelViewSet):
    """Base of the CRUD endpoints; subclasses route writes to a service."""

    def expected_revision(self) -> int | None:
        return expected_revision(self.request)


class ReadOnlyManagementViewSet(StrictQueryMixin, viewsets.ReadOnlyModelViewSet):
    pass
