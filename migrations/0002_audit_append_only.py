"""The audit log is append-only: the database refuses UPDATE and DELETE on it."""

from django.db import migrations

FORWARD = """
CREATE FUNCTION limits_audit_refuse_change() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'the audit log is append-only: % on limits_auditentry is refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER limits_audit_append_only
    BEFORE UPDATE OR DELETE ON limits_auditentry
    FOR EACH ROW EXECUTE FUNCTION limits_audit_refuse_change();
"""

REVERSE = """
DROP TRIGGER IF EXISTS limits_audit_append_only ON limits_auditentry;
DROP FUNCTION IF EXISTS limits_audit_refuse_change();
"""


class Migration(migrations.Migration):
    dependencies = [("limits", "0001_rules_and_audit")]
    operations = [migrations.RunSQL(FORWARD, REVERSE)]
