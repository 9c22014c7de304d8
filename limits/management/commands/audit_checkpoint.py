"""Take a signed checkpoint of the audit chain's head now: ``manage.py audit_checkpoint``."""

from django.core.management.base import BaseCommand, CommandError

from limits.core.checkpoints import checkpoint_take, checkpoint_write


class Command(BaseCommand):
    help = (
        "Sign the audit chain's head and write it out of the database: appended to "
        "SLUICE_AUDIT_CHECKPOINT_FILE when set, logged, and printed here."
    )

    def handle(self, *args, **options):
        checkpoint = checkpoint_take()
        if checkpoint is None:
            raise CommandError("The audit log is empty: nothing to checkpoint.")
        checkpoint_write(checkpoint)
        self.stdout.write(checkpoint.to_line())
