"""The notice period: a version that lowers limits is published well before it takes effect.

A version whose diff has any change with ``lowers`` (``limits.diff.changes``: some
client, of some tenant or anonymous, gets less than before) cannot take effect
sooner than ``settings.SLUICE_NOTICE_PERIOD_DAYS`` after it is published,
unless it is published as an emergency, with a reason. Raises and new routes
may take effect at once. ``snapshot_store`` enforces it, so publish, rollback,
the admin, the API and ``manage.py publish`` all obey the same rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.core.exceptions import ValidationError

from limits.diff.diffing import RulesDiff

__all__ = [
    "NoticePeriodTooShort",
    "NoticePreview",
    "notice_check",
    "notice_days",
    "notice_preview",
]


def notice_days() -> int:
    return int(settings.SLUICE_NOTICE_PERIOD_DAYS)


class NoticePeriodTooShort(ValidationError):
    """A lowering would take effect before the notice period ends; no emergency reason."""

    def __init__(self, *, lowered: list[str], earliest: datetime) -> None:
        self.lowered, self.earliest = lowered, earliest
        shown = "; ".join(lowered[:10]) + (" …" if len(lowered) > 10 else "")
        super().__init__(
            {
                "effective_at": (
                    f"This version lowers limits ({shown}), so it cannot take effect "
                    f"before {earliest:%Y-%m-%d %H:%M:%S} UTC, {notice_days()} days "
                    "after publishing. Give that time or a later one, or publish it "
                    "as an emergency with a reason."
                )
            },
            code="notice_period",
        )


@dataclass(frozen=True)
class NoticePreview:
    """What the notice rule says about a diff published at a given moment."""

    lowered: list[str]  #: the changes that lower, in words
    earliest: datetime  #: the soonest it may take effect without an emergency
    days: int

    @property
    def needed(self) -> bool:
        return bool(self.lowered) and self.days > 0


def notice_preview(*, diff: RulesDiff, published_at: datetime) -> NoticePreview:
    """What the notice rule asks of ``diff`` if it is published at ``published_at``."""
    days = notice_days()
    return NoticePreview(diff.lowered(), published_at + timedelta(days=days), days)


def notice_check(
    *,
    diff: RulesDiff,
    published_at: datetime,
    effective_at: datetime,
    emergency_reason: str,
) -> None:
    """Raise NoticePeriodTooShort unless the version may take effect at ``effective_at``."""
    preview = notice_preview(diff=diff, published_at=published_at)
    if preview.needed and effective_at < preview.earliest and not emergency_reason:
        raise NoticePeriodTooShort(lowered=preview.lowered, earliest=preview.earliest)
