"""The default policy for all routes: created here, and the database refuses to delete it.

Without it a request that matches no other policy would be unlimited.
"""

from django.db import migrations

GUARD = """
CREATE FUNCTION limits_policy_keep_default() RETURNS trigger AS $$
BEGIN
    IF OLD.scope = 'default' AND OLD.route_id IS NULL AND OLD.expires_at IS NULL THEN
        IF TG_OP = 'DELETE' THEN
            RAISE EXCEPTION 'the default policy for all routes cannot be deleted'
                USING ERRCODE = 'integrity_constraint_violation';
        END IF;
        IF NEW.scope <> 'default' OR NEW.route_id IS NOT NULL OR NEW.expires_at IS NOT NULL THEN
            RAISE EXCEPTION 'the default policy for all routes cannot change scope or route'
                USING ERRCODE = 'integrity_constraint_violation';
        END IF;
    END IF;
    RETURN CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER limits_policy_keep_default
    BEFORE UPDATE OR DELETE ON limits_policy
    FOR EACH ROW EXECUTE FUNCTION limits_policy_keep_default();
"""

UNGUARD = """
DROP TRIGGER IF EXISTS limits_policy_keep_default ON limits_policy;
DROP FUNCTION IF EXISTS limits_policy_keep_default();
"""


def create_default_policy(apps, schema_editor):
    from limits.rules.baseline import default_policy_ensure

    default_policy_ensure(apps)


class Migration(migrations.Migration):
    dependencies = [("limits", "0002_audit_append_only")]
    operations = [
        migrations.RunPython(create_default_policy, migrations.RunPython.noop),
        migrations.RunSQL(GUARD, UNGUARD),
    ]
