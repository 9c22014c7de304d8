"""Walk the audit log's keyed hash chain: ``manage.py audit_verify`` (exit 1 when it is broken).

``--checkpoint FILE`` (a file of signed checkpoints, ``limits.core.checkpoints``)
also proves that the log still reaches every checkpoint in it: nothing cut off
or rewritten since.
"""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from limits.core.chain import chain_verify
from limits.core.checkpoints import CheckpointError, checkpoints_read


class Command(BaseCommand):
    help = (
        "Recompute every audit entry's keyed hash, oldest first, and check that each "
        "one links to the entry before it; with --checkpoint FILE, that the log still "
        "reaches each signed checkpoint of FILE. Names the first entry that does not "
        "match and exits 1."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--checkpoint",
            help="A file of signed checkpoints (SLUICE_AUDIT_CHECKPOINT_FILE, or a "
            "copy kept elsewhere).",
        )

    def handle(self, *args, checkpoint: str | None = None, **options):
        marks = {}
        checkpoints = []
        if checkpoint:
            try:
                checkpoints = checkpoints_read(Path(checkpoint))
            except CheckpointError as exc:
                raise CommandError(f"checkpoint refused: {exc}") from None
            marks = {c.entry: (c.count, c.head) for c in checkpoints}
        state = chain_verify(marks=marks)
        if not state.intact:
            after = (
                f"after entry {state.last_verified_id}"
                if state.last_verified_id
                else "at the start"
            )
            raise CommandError(
                f"audit chain broken at entry {state.broken_id}: {state.problem} "
                f"({state.verified} entries verified {after})."
            )
        self.stdout.write(
            f"audit chain intact: {state.verified} entries verified"
            + (f", up to entry {state.last_verified_id}" if state.verified else "")
            + f"; head {state.head}"
            + (f"; {state.legacy} from before keys, sealed" if state.legacy else "")
        )
        if checkpoints:
            last = max(checkpoints, key=lambda c: c.entry)
            self.stdout.write(
                f"{len(checkpoints)} checkpoints reached; the last, of {last.taken_at}, "
                f"at entry {last.entry}: {state.verified - last.count} entries "
                "appended since, each keyed by the application."
            )
