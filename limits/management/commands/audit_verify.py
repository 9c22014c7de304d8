"""Walk the audit log's hash chain: ``manage.py audit_verify`` (exit 1 when it is broken)."""

from django.core.management.base import BaseCommand, CommandError

from limits.core.chain import chain_verify


class Command(BaseCommand):
    help = (
        "Recompute every audit entry's hash, oldest first, and check that each one "
        "links to the entry before it. Names the first entry that does not match "
        "and exits 1; prints the head hash to keep outside the database otherwise."
    )

    def handle(self, *args, **options):
        state = chain_verify()
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
        )
