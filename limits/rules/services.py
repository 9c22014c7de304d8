"""Services that change the rule tables: validate, write and audit in one transaction.

The admin and the REST API both call these; neither writes rule rows itself.
Optimistic concurrency: pass ``expected_revision`` and the row is locked and
compared before the write (``limits.core.audit.StaleRevision`` when someone else
got there first).
"""

from __future__ import annotations

from collections.abc import Sequence

from django.core.exceptions import NON_FIELD_ERRORS, PermissionDenied, ValidationError
from django.db import models as db
from django.db import transaction
from django.db.models import Max, Q
from django.utils import timezone

from limits.choices import LimitKind, Role
from limits.core.audit import (
    Actor,
    RowDeleted,
    StaleRevision,
    audited_delete,
    audited_save,
    row_lock,
)
from limits.core.chain import chain_lock
from limits.core.roles import can_edit_policy, require_role, user_role
from limits.models import Limit, Policy, Route, Tenant, Tier
from limits.rules.claims import route_claims_checked
from limits.rules.compiling import (
    policy_to_snapshot,
    route_table_error,
    route_to_snapshot,
)
from sluice.model import policy_problems

__all__ = [
    "limit_delete",
    "limit_save",
    "policy_save",
    "policy_validate",
    "rule_delete",
    "rule_save",
    "rule_validate",
]

RuleObject = Tier | Tenant | Route | Policy


@transaction.atomic
def rule_save(
    *,
    obj: Tier | Tenant | Route,
    actor: Actor,
    expected_revision: int | None = None,
    reason: str = "",
) -> Tier | Tenant | Route:
    """Create or update a tier, tenant or route; validated, audited, revision bumped."""
    require_role(actor, Role.PRODUCT, to="change this")
    before = row_lock(obj, expected_revision=expected_revision)
    rule_validate(obj=obj)
    # A new row took no lock yet: the chain comes before the write (lock order), so a
    # writer that validated at the same moment finds this route stored when it
    # writes, and the database refuses its claim (RouteClaimed, a 409).
    chain_lock()
    with route_claims_checked():
        audited_save(obj, actor=actor, before=before, reason=reason)
    return obj


def rule_validate(*, obj: Tier | Tenant | Route) -> None:
    """Raise ValidationError (by field) unless ``obj`` can be saved as it is."""
    obj.full_clean()
    if isinstance(obj, Route):
        _check_route_cost(obj)
        _check_route_unclaimed(obj)


def _check_route_unclaimed(route: Route) -> None:
    """Refuse a route whose method and path another route already has (gateways could
    not tell which of the two a request is)."""
    others = Route.objects.exclude(pk=route.pk) if route.pk else Route.objects.all()
    problem = route_table_error(
        [route_to_snapshot(other) for other in others] + [route_to_snapshot(route)]
    )
    if problem is not None:
        raise ValidationError(
            {"path_pattern": f"{problem}: one method and path belong to one route."}
        )


def _check_route_cost(route: Route) -> None:
    """Refuse a route cost (or max cost) that some policy's limit is too small to ever
    admit: a bucket's burst or a sliding window's limit below what a request may cost."""
    largest = route_to_snapshot(route).largest_cost
    for_route = Q(policy__route_id=route.pk) if route.pk else Q(pk__in=[])
    too_small = Limit.objects.filter(
        Q(kind=LimitKind.RATE, burst__lt=largest)
        | Q(kind=LimitKind.SLIDING_WINDOW, rate__lt=largest),
        for_route | Q(policy__route__isnull=True),
        cost__isnull=True,
    ).select_related("policy__tier", "policy__tenant", "policy__route")
    if too_small:
        names = "; ".join(
            f"{limit.policy} ({limit.describe()})" for limit in too_small[:5]
        )
        field, what = (
            ("max_cost", "Max cost") if largest > route.cost else ("cost", "Cost")
        )
        raise ValidationError(
            {
                field: f"{what} {largest} is above the burst or limit of: {names}. "
                "Raise those first."
            }
        )


def _expired_override_hint(policy: Policy) -> str | None:
    """What to do when a new override collides with an expired one (one per tenant and
    route: the expired one is kept, for the record, until someone edits or deletes it)."""
    if policy.pk is not None or policy.expires_at is None:
        return None
    twin = Policy.objects.filter(
        scope=policy.scope,
        tenant_id=policy.tenant_id,
        route_id=policy.route_id,
        expires_at__lte=timezone.now(),
    ).first()
    if twin is None:
        return None
    return (
        f"That override expired on {twin.expires_at:%Y-%m-%d %H:%M} UTC: edit it "
        f"(policy {twin.pk}) with a new expiry and reason, or delete it first."
    )


def policy_validate(*, policy: Policy, limits: Sequence[Limit], actor: Actor) -> None:
    """Raise ValidationError (by field) or PermissionDenied unless ``policy`` may be saved."""
    _check_policy_permission(actor, policy)
    errors: dict[str, list[str]] = {}
    try:
        policy.full_clean()
    except ValidationError as exc:
        errors.update(exc.message_dict)
        hint = _expired_override_hint(policy)
        if hint and NON_FIELD_ERRORS in errors:
            errors[NON_FIELD_ERRORS].append(hint)
    for number, limit in enumerate(limits, start=1):
        try:
            limit.full_clean(exclude=["policy"], validate_constraints=False)
        except ValidationError as exc:
            for field, messages in exc.message_dict.items():
                errors.setdefault("limits", []).extend(
                    f"limit {number}, {field}: {message}" for message in messages
                )
    if not errors:
        route_cost = (
            route_to_snapshot(policy.route).largest_cost
            if policy.route_id
            else _largest_route_cost()
        )
        compiled = policy_to_snapshot(policy, limits)
        rows = _row_numbers(limits)
        for problem in policy_problems(compiled, route_cost=route_cost):
            errors.setdefault("limits", []).append(
                _limit_message(problem.field, problem.message, rows)
            )
    if errors:
        raise ValidationError(errors)


def _row_numbers(limits: Sequence[Limit]) -> dict[str, list[int]]:
    """Rows (from one) of the compiled ``limits`` and ``concurrency`` lists, in order."""
    rows: dict[str, list[int]] = {"limits": [], "concurrency": []}
    for number, limit in enumerate(limits, start=1):
        rows["concurrency" if limit.kind == LimitKind.CONCURRENT else "limits"].append(
            number
        )
    return rows


def _limit_message(field: str, message: str, rows: dict[str, list[int]]) -> str:
    """``limits[1].burst`` -> ``limit 2, burst: ...`` (people count from one).

    Indices of the compiled policy are turned back into the rows people edited
    (rate and concurrent limits are one list for them, two in the snapshot).
    """
    member, _, rest = field.partition("[")
    if member in rows and rest:
        index, _, rest = rest.partition("]")
        where = f"limit {rows[member][int(index)]}" + (
            f", {rest.lstrip('.')}" if rest else ""
        )
        return f"{where}: {message}"
    return message[0].upper() + message[1:] + "."


def _largest_route_cost() -> int:
    """The most a request of any route may cost (``Route.largest_cost`` of the largest)."""
    largest = Route.objects.aggregate(cost=Max("cost"), max_cost=Max("max_cost"))
    return max(largest["cost"] or 1, largest["max_cost"] or 0)


@transaction.atomic
def policy_save(
    *,
    policy: Policy,
    limits: Sequence[Limit],
    actor: Actor,
    expected_revision: int | None = None,
) -> Policy:
    """Create or update ``policy`` so that its limits are exactly ``limits``; audited.

    ``limits`` may mix saved and new rows; saved limits of the policy that are
    not in it are deleted.
    """
    before = row_lock(policy, expected_revision=expected_revision)
    if before is not None:
        stored = Policy(scope=before["scope"], expires_at=before["expires_at"])
        _check_policy_permission(actor, stored, stored=True)
        _check_limits_still_stored(policy, limits)
    policy_validate(policy=policy, limits=limits, actor=actor)

    def write() -> None:
        policy.save()
        keep = [limit.pk for limit in limits if limit.pk is not None]
        policy.limits.exclude(pk__in=keep).delete()
        for limit in limits:
            limit.policy = policy
            if limit.pk is not None:
                limit.revision += 1
            limit.save()

    audited_save(policy, actor=actor, before=before, reason=policy.reason, write=write)
    return policy


def _check_limits_still_stored(policy: Policy, limits: Sequence[Limit]) -> None:
    """Raise RowDeleted for a saved limit of ``limits`` that another request removed
    meanwhile (saving it would insert it again)."""
    saved = {limit.pk for limit in limits if limit.pk is not None}
    stored = set(
        Limit.objects.filter(policy_id=policy.pk, pk__in=saved).values_list(
            "pk", flat=True
        )
    )
    for limit in limits:
        if limit.pk is not None and limit.pk not in stored:
            raise RowDeleted(limit)


@transaction.atomic
def limit_save(
    *, limit: Limit, actor: Actor, expected_revision: int | None = None
) -> Limit:
    """Create or change one limit; its policy is saved with it, validated and audited
    as a whole (a limit is only valid with the others of its policy)."""
    others = _other_limits(limit, expected_revision)
    policy_save(policy=limit.policy, limits=[*others, limit], actor=actor)
    return limit


@transaction.atomic
def limit_delete(
    *, limit: Limit, actor: Actor, expected_revision: int | None = None
) -> None:
    """Delete one limit; its policy is saved without it, validated and audited."""
    others = _other_limits(limit, expected_revision)
    policy_save(policy=limit.policy, limits=others, actor=actor)


def _other_limits(limit: Limit, expected_revision: int | None) -> list[Limit]:
    """The other limits of ``limit``'s policy, read with the policy locked (every writer
    of a policy's limits locks it); StaleRevision if ``limit`` changed meanwhile."""
    chain_lock()  # before the policy's row lock (limits.core.chain: lock order)
    if not Policy.objects.select_for_update().filter(pk=limit.policy_id).exists():
        raise RowDeleted(limit.policy)
    if limit.pk is not None:
        # Saving a limit deleted meanwhile would insert it again: refuse instead.
        current = Limit.objects.filter(pk=limit.pk).values_list("revision", flat=True)
        if not current:
            raise RowDeleted(limit)
        if expected_revision is not None and current[0] != expected_revision:
            raise StaleRevision(limit, current[0])
    return [other for other in limit.policy.limits.all() if other.pk != limit.pk]


@transaction.atomic
def rule_delete(
    *,
    obj: RuleObject,
    actor: Actor,
    expected_revision: int | None = None,
    reason: str = "",
) -> None:
    """Delete a tier, tenant, route or policy; refuse what the rules still need."""
    if isinstance(obj, Policy):
        _check_policy_permission(actor, obj, stored=True)
        if obj.is_default:
            raise ValidationError(
                "The default policy for all routes cannot be deleted: without it some "
                "requests would be unlimited. Change its limits instead."
            )
    else:
        require_role(actor, Role.PRODUCT, to="change this")
    before = row_lock(obj, expected_revision=expected_revision)
    shown = str(obj)
    try:
        with transaction.atomic():
            audited_delete(obj, actor=actor, before=before, reason=reason)
    except db.ProtectedError as exc:
        users = ", ".join(sorted(str(o) for o in list(exc.protected_objects)[:5]))
        raise ValidationError(
            f"{shown} is still used by: {users}. Change or delete those first."
        ) from None


def _check_policy_permission(
    actor: Actor, policy: Policy, *, stored: bool = False
) -> None:
    """Product may change any policy; support only temporary tenant overrides."""
    if actor.user is None:  # the system: data migrations, management commands
        return
    if not can_edit_policy(actor.user, scope=policy.scope):
        raise PermissionDenied("Your role may not change this policy.")
    if user_role(actor.user) == Role.SUPPORT and policy.expires_at is None:
        if stored:  # an existing permanent policy: not support's to change or remove
            raise PermissionDenied("Support may only change temporary overrides.")
        raise ValidationError(
            {"expires_at": "Support overrides are temporary: give an expiry time."}
        )
