"""The audit log becomes a hash chain, and the database refuses TRUNCATE on it and
on published snapshots (row triggers do not fire on TRUNCATE); API tokens outlive
their user.

Existing entries are linked in id order, with the append-only trigger held off for
that one UPDATE (the migration runs as the tables' owner).
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

TRUNCATE_FORWARD = """
CREATE FUNCTION limits_refuse_truncate() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'history is kept: TRUNCATE on % is refused', TG_TABLE_NAME
        USING ERRCODE = 'insufficient_privilege';
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER limits_audit_no_truncate
    BEFORE TRUNCATE ON limits_auditentry
    FOR EACH STATEMENT EXECUTE FUNCTION limits_refuse_truncate();

CREATE TRIGGER limits_snapshot_no_truncate
    BEFORE TRUNCATE ON limits_snapshot
    FOR EACH STATEMENT EXECUTE FUNCTION limits_refuse_truncate();
"""

TRUNCATE_REVERSE = """
DROP TRIGGER IF EXISTS limits_snapshot_no_truncate ON limits_snapshot;
DROP TRIGGER IF EXISTS limits_audit_no_truncate ON limits_auditentry;
DROP FUNCTION IF EXISTS limits_refuse_truncate();
"""


def link_existing_entries(apps, schema_editor):
    from limits.core.chain import CHAINED_FIELDS, GENESIS, entry_digest

    entry_model = apps.get_model("limits", "AuditEntry")
    rows = entry_model.objects.using(schema_editor.connection.alias).order_by("id")
    schema_editor.execute(
        "ALTER TABLE limits_auditentry DISABLE TRIGGER limits_audit_append_only"
    )
    previous = GENESIS
    for row in rows.values("id", *[f for f in CHAINED_FIELDS if f != "prev_hash"]):
        row["prev_hash"] = previous
        previous = entry_digest(row)
        rows.filter(pk=row["id"]).update(prev_hash=row["prev_hash"], hash=previous)
    schema_editor.execute(
        "ALTER TABLE limits_auditentry ENABLE TRIGGER limits_audit_append_only"
    )


class Migration(migrations.Migration):
    dependencies = [
        ("limits", "0012_route_failure_mode_open_unbounded"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name="auditentry",
            name="prev_hash",
            field=models.CharField(
                default="",
                editable=False,
                help_text="The hash of the entry before it.",
                max_length=64,
            ),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name="auditentry",
            name="hash",
            field=models.CharField(
                default="",
                editable=False,
                help_text="SHA-256 of this entry's content and the previous hash.",
                max_length=64,
            ),
            preserve_default=False,
        ),
        migrations.RunPython(link_existing_entries, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name="auditentry",
            constraint=models.UniqueConstraint(
                fields=("prev_hash",),
                name="limits_auditentry_unique_prev_hash",
                violation_error_message="Another entry already follows this one.",
            ),
        ),
        migrations.AddConstraint(
            model_name="auditentry",
            constraint=models.UniqueConstraint(
                fields=("hash",),
                name="limits_auditentry_unique_hash",
                violation_error_message="An entry with this hash exists.",
            ),
        ),
        migrations.RunSQL(TRUNCATE_FORWARD, TRUNCATE_REVERSE),
        # An API token outlives its user, revoked (limits.gateways.users).
        migrations.AlterField(
            model_name="apitoken",
            name="user",
            field=models.ForeignKey(
                help_text="Empty once the user was deleted (the token is revoked then).",
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="api_tokens",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
    ]
