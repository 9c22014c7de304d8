"""Rules as code: ``manage.py rules export | diff FILE | apply FILE``.

Exit codes: 0 done (for ``diff``: the file matches the active rules), 2 for
``diff`` when the file and the active rules differ, 1 on any error (a bad file,
a refused change request). ``FILE`` may be ``-`` for standard input.
"""

from __future__ import annotations

import getpass
import os
import sys
from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from limits.ascode.remote import (
    Remote,
    RemoteError,
    remote_rules_apply,
    remote_rules_diff,
)
from limits.ascode.services import (
    SHOWN,
    FileDiff,
    rules_export,
    rules_export_write,
    rules_file_apply,
    rules_file_diff,
    rules_file_read,
)
from limits.core.audit import Actor
from limits.management.commands.publish import _moment
from limits.versions.selectors import snapshot_get_active

#: ``rules diff`` exits with this when the file and the active rules differ.
DIFFERS = 2


class ExitOneParser(CommandParser):
    """argparse exits 2 on a usage error, which ``rules diff`` uses for "the file
    differs": usage errors exit 1, like every other error."""

    def exit(self, status=0, message=None):
        super().exit(1 if status == DIFFERS else status, message)


def actor_for(username: str | None, command: str) -> Actor:
    """The system, named after the command and the shell user; or the user ``--user``
    names, acting with that user's role (an operator with shell access)."""
    if not username:
        return Actor.system(f"manage.py {command} ({getpass.getuser()})")
    user = get_user_model().objects.filter(username=username, is_active=True).first()
    if user is None:
        raise CommandError(f"--user: there is no active user {username!r}.")
    return Actor(user=user, request_id=f"manage.py {command}")


class Command(BaseCommand):
    help = (
        "Rules as code. export: the active rules as YAML; diff FILE: the changes a "
        "file makes, in words (exit 2 when it differs, 0 when equal, 1 on error); "
        "apply FILE: open a change request of those changes (--publish to publish it)."
    )

    def create_parser(self, prog_name, subcommand, **kwargs):
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        parser.__class__ = ExitOneParser
        return parser

    def add_arguments(self, parser):
        commands = parser.add_subparsers(
            dest="action", required=True, parser_class=ExitOneParser
        )
        export = commands.add_parser("export", help="Write the active rules as YAML.")
        export.add_argument(
            "--output", "-o", help="Write to this file instead of standard output."
        )
        diff = commands.add_parser("diff", help="Compare a file with the active rules.")
        diff.add_argument("file", help="A rules file, or - for standard input.")
        apply = commands.add_parser(
            "apply", help="Open (and publish) a change request from a file."
        )
        apply.add_argument("file", help="A rules file, or - for standard input.")
        diff.add_argument(
            "--against",
            metavar="URL",
            help="Diff against another installation's active rules (its API), "
            "with an API token of it (--token or SLUICE_TARGET_TOKEN).",
        )
        promote = commands.add_parser(
            "promote",
            help="Apply this installation's active rules to another (staging → "
            "production) through its API.",
        )
        promote.add_argument("--to", required=True, metavar="URL")
        promote.add_argument("--title", default="", help="The change request's title.")
        promote.add_argument(
            "--publish", action="store_true", help="Publish it there once opened."
        )
        for remote in (diff, promote):
            remote.add_argument(
                "--token",
                default=None,
                help="An API token of the other installation (default: "
                "$SLUICE_TARGET_TOKEN; the environment keeps it out of shell history).",
            )
        for told in (diff, apply):
            told.add_argument(
                "--full",
                action="store_true",
                help=f"Show every change (by default the first {SHOWN} and counts).",
            )
            told.add_argument(
                "--changes-file",
                help="Also write every change, in words, to this file.",
            )
        apply.add_argument("--title", default="", help="The change request's title.")
        apply.add_argument("--reason", default="", help="Why: for reviewers.")
        apply.add_argument(
            "--publish", action="store_true", help="Publish it once opened."
        )
        apply.add_argument(
            "--effective-at",
            type=_moment,
            help="With --publish: ISO 8601, with a zone.",
        )
        apply.add_argument("--note", default="", help="With --publish: public note.")
        apply.add_argument(
            "--emergency-reason",
            default="",
            help="With --publish: why a lowering cannot wait for the notice period.",
        )
        apply.add_argument(
            "--user", help="Act as this user (with their role) instead of the system."
        )

    def handle(self, *args, action, **options):
        try:
            getattr(self, f"_{action}")(**options)
        except (ValidationError, PermissionDenied) as exc:
            messages = getattr(exc, "messages", None) or [str(exc)]
            raise CommandError("\n  ".join(messages)) from None

    def _text(self, name: str) -> tuple[str, str]:
        """(the file's text, its name in messages)."""
        if name == "-":
            return sys.stdin.read(), "<stdin>"
        path = Path(name)
        try:
            return path.read_text(encoding="utf-8"), path.name
        except OSError as exc:
            raise CommandError(f"Cannot read {name}: {exc.strerror}.") from None

    def _read(self, name: str):
        text, shown = self._text(name)
        return rules_file_read(text, name=shown)

    def _export(self, *, output=None, **_):
        if output:
            with open(output, "w", encoding="utf-8") as out:
                rules_export_write(out.write)
            self.stderr.write(f"Wrote the active rules to {output}.")
        else:
            rules_export_write(lambda text: self.stdout.write(text, ending=""))

    def _tell(self, found: FileDiff, *, full: bool, changes_file: str | None) -> None:
        self.stdout.write(found.text(limit=None if full else SHOWN), ending="")
        if changes_file:
            Path(changes_file).write_text(found.text(limit=None), encoding="utf-8")
            self.stderr.write(f"Wrote every change to {changes_file}.")

    def _remote(self, url: str, token: str | None) -> Remote:
        token = token or os.environ.get("SLUICE_TARGET_TOKEN", "")
        if not token:
            raise CommandError(
                "Give an API token of the other side: --token or SLUICE_TARGET_TOKEN."
            )
        return Remote(url, token)

    def _diff(
        self, *, file, full=False, changes_file=None, against=None, token=None, **_
    ):
        if against:
            return self._diff_against(file, self._remote(against, token))
        found = rules_file_diff(self._read(file))
        self._tell(found, full=full, changes_file=changes_file)
        if not found.equal:
            sys.exit(DIFFERS)

    def _diff_against(self, file: str, remote: Remote) -> None:
        text, name = self._text(file)
        rules_file_read(text, name=name)  # refused here, at its line, before it is sent
        found = self._call(remote_rules_diff, remote, text=text, name=name)
        self.stdout.write(found["text"], ending="")
        self.stdout.write(
            f"Rules digest: the file {found['file_digest']}, "
            f"{remote.url} {found['active_digest']}."
        )
        if not found["equal"]:
            sys.exit(DIFFERS)

    def _promote(self, *, to, token=None, title="", publish=False, **_):
        remote = self._remote(to, token)
        text = rules_export()
        digest = snapshot_get_active(light=True).rules_digest
        done = self._call(
            remote_rules_apply,
            remote,
            text=text,
            name="promoted.yaml",
            title=title or "Promote the rules of another installation",
            publish=publish,
        )
        self.stdout.write(done["diff"]["text"], ending="")
        request = done["change_request"]
        if request is None:
            self.stdout.write(f"{to} has these rules already (digest {digest}).")
            return
        self.stdout.write(f"Opened change request #{request['id']} on {to}.")
        if done["not_published"]:
            raise CommandError(f"Not published on {to}: {done['not_published']}")
        if done["published_version"] is not None:
            self.stdout.write(
                f"Published on {to} as version {done['published_version']}; "
                f"rules digest {digest} on both sides."
            )

    def _call(self, call, remote: Remote, **kwargs):
        try:
            return call(remote, **kwargs)
        except RemoteError as exc:
            raise CommandError(str(exc)) from None

    def _apply(self, *, file, user=None, **options):
        rules_file = self._read(file)
        done = rules_file_apply(
            rules_file,
            actor=actor_for(user, "rules apply"),
            title=options["title"],
            reason=options["reason"],
            publish=options["publish"],
            effective_at=options["effective_at"],
            note=options["note"],
            emergency_reason=options["emergency_reason"],
        )
        self._tell(
            done.diff, full=options["full"], changes_file=options["changes_file"]
        )
        request = done.change_request
        if request is None:
            self.stdout.write("Nothing to apply.")
            return
        self.stdout.write(f"Opened change request #{request.pk}: {request.title}")
        if done.not_published:
            raise CommandError(
                f"Change request #{request.pk} is open but not published: "
                f"{done.not_published}"
            )
        if done.published:
            version = done.published.version
            self.stdout.write(
                f"Published as version {version.version}."
                if version
                else "Published (the rule tables only: nothing gateways see changed)."
            )
