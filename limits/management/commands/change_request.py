"""Change requests from the shell: ``manage.py change_request list | show | approve |
publish | withdraw``.

Commands act as the system unless ``--user`` names the person they act for (an
operator with shell access): approvals always come from a product person, so
``approve`` needs ``--user``.
"""

from __future__ import annotations

from django.core.exceptions import PermissionDenied, ValidationError
from django.core.management.base import BaseCommand, CommandError

from limits.changes.previews import change_request_preview, change_requests_live
from limits.changes.publishing import change_request_publish
from limits.changes.services import change_request_approve, change_request_withdraw
from limits.management.commands.publish import _moment
from limits.management.commands.rules import actor_for
from limits.models import ChangeRequest


class Command(BaseCommand):
    help = "List, show, approve, publish or withdraw change requests."

    def add_arguments(self, parser):
        commands = parser.add_subparsers(dest="action", required=True)
        commands.add_parser("list", help="Drafts and open requests.")
        for name, text in (
            ("show", "What a request changes, and what stands in its way."),
            ("approve", "Approve a request (needs --user, a product person)."),
            ("publish", "Publish a request."),
            ("withdraw", "Withdraw a request."),
        ):
            command = commands.add_parser(name, help=text)
            command.add_argument("id", type=int)
            command.add_argument("--user", help="Act as this user, with their role.")
            if name == "publish":
                command.add_argument("--effective-at", type=_moment)
                command.add_argument("--note", default="")
                command.add_argument("--emergency-reason", default="")

    def handle(self, *args, action, **options):
        try:
            getattr(self, f"_{action}")(**options)
        except (ValidationError, PermissionDenied) as exc:
            messages = getattr(exc, "messages", None) or [str(exc)]
            raise CommandError("\n  ".join(messages)) from None

    def _request(self, pk: int) -> ChangeRequest:
        request = ChangeRequest.objects.filter(pk=pk).first()
        if request is None:
            raise CommandError(f"There is no change request #{pk}.")
        return request

    def _list(self, **_):
        for request in change_requests_live():
            said = "lowers, " if request.lowers else ""
            self.stdout.write(
                f"#{request.pk} [{request.state}] {request.title} — by "
                f"{request.author_name}, {said}reaches {request.reach} tenant(s)"
            )

    def _show(self, *, id, **_):
        preview = change_request_preview(self._request(id))
        request = preview.request
        self.stdout.write(f"#{request.pk} [{request.state}] {request.title}")
        self.stdout.write(f"By {request.author_name}. {request.reason}".rstrip())
        for view in preview.edits:
            for words in view.words:
                self.stdout.write(f"  {view.kind:<8} {words}")
        tenants = preview.diff.affected_tenants
        self.stdout.write(
            f"Tenants reached ({len(tenants)}): {', '.join(tenants[:50])}"
        )
        for text in (*preview.conflicts, *preview.problems):
            self.stdout.write(f"  ! {getattr(text, 'text', text)}")
        if preview.approval_reasons:
            who = ", ".join(a.user_name for a in preview.approvals) or "nobody yet"
            self.stdout.write(
                f"Needs approval ({' and '.join(preview.approval_reasons)}): {who}."
            )

    def _approve(self, *, id, user=None, **_):
        actor = actor_for(user, "change_request approve")
        change_request_approve(change_request=self._request(id), actor=actor)
        self.stdout.write(f"Approved change request #{id}.")

    def _publish(self, *, id, user=None, effective_at=None, note="", **options):
        done = change_request_publish(
            change_request=self._request(id),
            actor=actor_for(user, "change_request publish"),
            effective_at=effective_at,
            note=note,
            emergency_reason=options["emergency_reason"],
        )
        shown = f"version {done.version.version}" if done.version else "the tables only"
        carried = ", ".join(str(row.version) for row in done.carried)
        self.stdout.write(
            f"Published change request #{id} as {shown}"
            + (f"; carried into version(s) {carried}." if carried else ".")
        )

    def _withdraw(self, *, id, user=None, **_):
        actor = actor_for(user, "change_request withdraw")
        change_request_withdraw(change_request=self._request(id), actor=actor)
        self.stdout.write(f"Withdrew change request #{id}.")
