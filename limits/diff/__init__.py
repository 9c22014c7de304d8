"""What changed between two rule sets, pure: no ORM, no Django, no Redis.

``diffing`` (the diff of two ``sluice.rules.Rules``: :class:`RulesDiff`, stored
with every version and read back typed), ``changes`` (one change per tier,
tenant, route or policy), ``limit_changes`` (per bucket and cap), ``impact``
(direction: raised or lowered, and reach: the tiers and tenants a change can
alter), ``kinds`` (the change kinds). The ORM side (which versions to compare)
is ``limits.versions``.
"""
