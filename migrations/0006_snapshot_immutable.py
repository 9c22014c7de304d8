"""Published snapshots are immutable: the database refuses DELETE and any UPDATE
except setting a lifecycle column (activated_at, superseded_at, superseded_by) once."""

from django.db import migrations

FORWARD = """
CREATE FUNCTION limits_snapshot_refuse_change() RETURNS trigger AS $$
DECLARE
    lifecycle CONSTANT text[] := ARRAY['activated_at', 'superseded_at', 'superseded_by'];
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'published snapshots are immutable: DELETE on limits_snapshot is refused'
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF (to_jsonb(NEW) - lifecycle) IS DISTINCT FROM (to_jsonb(OLD) - lifecycle)
        OR (OLD.activated_at IS NOT NULL AND NEW.activated_at IS DISTINCT FROM OLD.activated_at)
        OR (OLD.superseded_at IS NOT NULL AND NEW.superseded_at IS DISTINCT FROM OLD.superseded_at)
        OR (OLD.superseded_by IS NOT NULL AND NEW.superseded_by IS DISTINCT FROM OLD.superseded_by)
    THEN
        RAISE EXCEPTION 'published snapshots are immutable: only an empty lifecycle column may be set'
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER limits_snapshot_immutable
    BEFORE UPDATE OR DELETE ON limits_snapshot
    FOR EACH ROW EXECUTE FUNCTION limits_snapshot_refuse_change();
"""

REVERSE = """
DROP TRIGGER IF EXISTS limits_snapshot_immutable ON limits_snapshot;
DROP FUNCTION IF EXISTS limits_snapshot_refuse_change();
"""


class Migration(migrations.Migration):
    dependencies = [("limits", "0005_snapshots")]
    operations = [migrations.RunSQL(FORWARD, REVERSE)]
