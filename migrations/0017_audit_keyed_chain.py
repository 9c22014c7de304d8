"""The audit chain is keyed: each new entry's hash is an HMAC under the
application's audit key (``limits.core.auditkeys``), which the database does not
hold, and the database refuses an entry without a key id.

Existing entries keep their plain SHA-256 links. The old chain is verified first
(the migration stops, naming the entry, if it is broken), then sealed: one keyed
entry (action ``seal``) is appended after its head, and a signed checkpoint of it
is written out of the database (``limits.core.checkpoints``), so no unkeyed entry
can be accepted after it. Reversing drops the trigger and keeps the column's rows.
"""

from django.db import migrations, models
from django.utils import timezone

KEYED_FORWARD = """
CREATE FUNCTION limits_refuse_unkeyed() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'audit entries carry the application''s key: key_id is required'
        USING ERRCODE = 'insufficient_privilege';
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER limits_audit_keyed
    BEFORE INSERT ON limits_auditentry
    FOR EACH ROW WHEN (NEW.key_id = '') EXECUTE FUNCTION limits_refuse_unkeyed();
"""

KEYED_REVERSE = """
DROP TRIGGER IF EXISTS limits_audit_keyed ON limits_auditentry;
DROP FUNCTION IF EXISTS limits_refuse_unkeyed();
"""


def seal_existing_chain(apps, schema_editor):
    """Verify the unkeyed chain, then append the keyed seal and checkpoint it."""
    from limits.core.chain import CHAINED_FIELDS, chain_head, chain_verify, entry_seal
    from limits.core.checkpoints import checkpoint_take, checkpoint_write

    entry_model = apps.get_model("limits", "AuditEntry")
    rows = entry_model.objects.using(schema_editor.connection.alias).order_by("id")
    if not rows.exists():
        return  # nothing to seal: the first entry will be keyed
    fields = ("id", "hash", "key_id", *CHAINED_FIELDS)
    state = chain_verify(rows.values(*fields).iterator(), keys=())
    if not state.intact:
        raise RuntimeError(
            f"audit chain broken at entry {state.broken_id}: {state.problem}; "
            "it is not sealed into the keyed chain (see docs/operator-guide.md)"
        )
    seal = entry_model(
        created_at=timezone.now(),
        action="seal",
        actor="system",
        object_type="auditlog",
        object_repr=f"{state.verified} unkeyed entries, up to {state.last_verified_id}",
        after={"entries": state.verified, "head": state.head},
        reason="the audit chain is keyed from here on (migration audit_keyed_chain)",
        prev_hash=chain_head(),
    )
    entry_seal(seal)
    seal.save(force_insert=True)
    checkpoint = checkpoint_take()
    if checkpoint is not None:
        checkpoint_write(checkpoint)


class Migration(migrations.Migration):
    dependencies = [
        ("limits", "0016_gateway_timeout_outcome"),
    ]

    operations = [
        migrations.AddField(
            model_name="auditentry",
            name="key_id",
            field=models.CharField(
                blank=True,
                default="",
                editable=False,
                help_text="The audit key the hash was made with; empty before keys existed.",
                max_length=32,
            ),
        ),
        migrations.AlterField(
            model_name="auditentry",
            name="action",
            field=models.CharField(
                choices=[
                    ("create", "Create"),
                    ("update", "Update"),
                    ("delete", "Delete"),
                    ("publish", "Publish"),
                    ("rollback", "Rollback"),
                    ("activate", "Activate"),
                    ("token_create", "token created"),
                    ("token_revoke", "token revoked"),
                    ("resend", "notification resent"),
                    ("approve", "change request approved"),
                    ("seal", "audit chain sealed"),
                ],
                max_length=12,
            ),
        ),
        migrations.AlterField(
            model_name="auditentry",
            name="hash",
            field=models.CharField(
                editable=False,
                help_text="HMAC-SHA256, under the application's audit key, of this entry's content and the previous hash (plain SHA-256 for entries from before keys).",
                max_length=64,
            ),
        ),
        migrations.RunSQL(KEYED_FORWARD, reverse_sql=KEYED_REVERSE),
        migrations.RunPython(seal_existing_chain, migrations.RunPython.noop),
    ]
