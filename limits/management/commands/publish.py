"""Publish the working copy as the next version: ``manage.py publish --message "..."``."""

import getpass
from datetime import datetime

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from limits.core.audit import Actor
from limits.publishing.services import snapshot_publish


def _moment(text: str) -> datetime:
    """An ISO 8601 time with a zone: 2026-12-15T00:00:00Z or +01:00."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"not an ISO 8601 time: {text!r}") from None
    if moment.tzinfo is None:
        raise ValueError("give a time zone, e.g. 2026-12-15T00:00:00Z")
    return moment


class Command(BaseCommand):
    help = (
        "Validate the rules, compile them and store them as the next version "
        "(effective now, or at --effective-at). A version that lowers limits needs "
        "the notice period, or --emergency-reason."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--message", "-m", required=True, help="What changes and why."
        )
        parser.add_argument(
            "--effective-at",
            type=_moment,
            help="When gateways switch to it, ISO 8601 with a zone (default: now).",
        )
        parser.add_argument(
            "--note",
            default="",
            help="Public note for the changelog and notifications.",
        )
        parser.add_argument(
            "--emergency-reason",
            default="",
            help="Why a lowering must take effect before the notice period "
            "(SLUICE_NOTICE_PERIOD_DAYS) ends; marks the version as an emergency.",
        )

    def handle(self, *args, message, effective_at, note, emergency_reason, **options):
        actor = Actor.system(f"manage.py publish ({getpass.getuser()})")
        try:
            row = snapshot_publish(
                actor=actor,
                message=message,
                effective_at=effective_at,
                note=note,
                emergency_reason=emergency_reason,
            )
        except ValidationError as exc:
            raise CommandError(
                "Not published:\n  " + "\n  ".join(exc.messages)
            ) from None
        counts = ", ".join(f"{n} {kind}" for kind, n in row.diff["counts"].items() if n)
        when = (
            "now"
            if row.activated_at
            else f"at {row.effective_at:%Y-%m-%d %H:%M:%S} UTC"
        )
        self.stdout.write(
            f"Published version {row.version} ({row.hash[:12]}), effective {when}: "
            f"{counts or 'no changes'}."
            + (" Published as an EMERGENCY." if emergency_reason.strip() else "")
        )
