"""The two database roles: an owner that migrations run as, and the runtime role that
web and worker processes run as, which owns nothing and may not erase history.

The roles are named by the URLs: ``DATABASE_MIGRATE_URL`` names the owner,
``DATABASE_URL`` the runtime role. :func:`roles_ensure` (``manage.py db_roles``, as
a superuser) creates or updates both and hands every object of the database to the
owner; :func:`grants_apply` (also run by ``manage.py migrate`` as the owner, so new
tables are covered) gives the runtime role what it needs and nothing more:

- everywhere: SELECT, INSERT, UPDATE, DELETE, and the sequences;
- the audit log: SELECT and INSERT only;
- snapshots: SELECT and INSERT, and UPDATE of the lifecycle columns alone
  (``activated_at``, ``superseded_at``, ``superseded_by``);
- Django's migration record: SELECT only.

No TRUNCATE, REFERENCES or TRIGGER anywhere, no CREATE on the schema, and no
ownership: only an owner may disable or drop a trigger or replace its function.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

import psycopg
from psycopg import sql

__all__ = ["RolePlan", "RolesRefused", "grants_apply", "roles_ensure"]

#: Tables whose history the runtime role may only add to.
APPEND_ONLY = ("limits_auditentry",)
#: Snapshots: the columns set once when a version takes effect or is superseded.
SNAPSHOT_LIFECYCLE = ("activated_at", "superseded_at", "superseded_by")
#: Tables the runtime role reads and never writes.
READ_ONLY = ("django_migrations",)


class RolesRefused(Exception):
    """The URLs do not describe two roles that can be set up safely."""


@dataclass(frozen=True, slots=True)
class RolePlan:
    """Who owns the tables and who runs the application, in one database."""

    database: str
    owner: str
    runtime: str
    owner_password: str | None = None
    runtime_password: str | None = None

    @classmethod
    def from_urls(cls, *, owner_url: str, runtime_url: str) -> RolePlan:
        """The roles the two URLs connect as; RolesRefused when they are one role or
        name different databases."""
        owner, runtime = urlsplit(owner_url), urlsplit(runtime_url)
        if owner.path != runtime.path:
            raise RolesRefused("the owner and runtime URLs name different databases")
        if not owner.username or not runtime.username:
            raise RolesRefused("both URLs must name their role (user@host)")
        if owner.username == runtime.username:
            raise RolesRefused(
                f"DATABASE_MIGRATE_URL and DATABASE_URL both connect as "
                f"{owner.username!r}: give the runtime a role of its own"
            )
        return cls(
            database=unquote(owner.path.lstrip("/")),
            owner=unquote(owner.username),
            runtime=unquote(runtime.username),
            owner_password=unquote(owner.password) if owner.password else None,
            runtime_password=unquote(runtime.password) if runtime.password else None,
        )


def roles_ensure(conn: psycopg.Connection, plan: RolePlan) -> None:
    """As a superuser connected to ``plan.database``: create or update both roles,
    make the owner own the database and every table, sequence and function in it,
    then apply the grants. Safe to run again."""
    for role, password in (
        (plan.owner, plan.owner_password),
        (plan.runtime, plan.runtime_password),
    ):
        _role_ensure(conn, role, password)
    owner, runtime = sql.Identifier(plan.owner), sql.Identifier(plan.runtime)
    db = sql.Identifier(plan.database)
    for statement in (
        # Membership would let the runtime role act as the owner.
        sql.SQL("REVOKE {} FROM {}").format(owner, runtime),
        sql.SQL("ALTER DATABASE {} OWNER TO {}").format(db, owner),
        sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(db, runtime),
        sql.SQL("REVOKE CREATE ON SCHEMA public FROM PUBLIC"),
        sql.SQL("GRANT USAGE, CREATE ON SCHEMA public TO {}").format(owner),
    ):
        conn.execute(statement)
    _ownership_transfer(conn, plan.owner)
    grants_apply(conn, plan)


def _role_ensure(conn: psycopg.Connection, role: str, password: str | None) -> None:
    found = conn.execute(
        "SELECT rolsuper FROM pg_roles WHERE rolname = %s", [role]
    ).fetchone()
    if found and found[0]:
        raise RolesRefused(
            f"{role!r} is a superuser: it cannot be the owner or runtime role"
        )
    name = sql.Identifier(role)
    if not found:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(name))
    attributes = sql.SQL(
        "ALTER ROLE {} WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION "
        "NOBYPASSRLS"
    ).format(name)
    if password:  # a URL without one leaves the role's password as it is
        attributes += sql.SQL(" PASSWORD {}").format(sql.Literal(password))
    conn.execute(attributes)


def _ownership_transfer(conn: psycopg.Connection, owner: str) -> None:
    """Every relation and function of the public schema (not an extension's) to ``owner``."""
    objects = conn.execute(
        """
        SELECT CASE c.relkind WHEN 'S' THEN 'SEQUENCE' WHEN 'v' THEN 'VIEW'
                              WHEN 'm' THEN 'MATERIALIZED VIEW' ELSE 'TABLE' END,
               format('%%I.%%I', n.nspname, c.relname)
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p', 'v', 'm', 'S')
          AND pg_get_userbyid(c.relowner) <> %(owner)s
          AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = c.oid
                          AND d.deptype IN ('e', 'a', 'i'))
        UNION ALL
        SELECT 'FUNCTION', p.oid::regprocedure::text
        FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE n.nspname = 'public' AND pg_get_userbyid(p.proowner) <> %(owner)s
          AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = p.oid
                          AND d.deptype = 'e')
        """,
        {"owner": owner},
    ).fetchall()
    for kind, name in objects:
        conn.execute(
            sql.SQL("ALTER {} {} OWNER TO {}").format(
                sql.SQL(kind), sql.SQL(name), sql.Identifier(owner)
            )
        )


def grants_apply(conn: psycopg.Connection, plan: RolePlan) -> None:
    """Give the runtime role its privileges on what exists now, and by default on what
    the owner creates later; as the owner or a superuser. Safe to run again."""
    runtime, owner = sql.Identifier(plan.runtime), sql.Identifier(plan.owner)
    statements = [
        sql.SQL("GRANT USAGE ON SCHEMA public TO {}").format(runtime),
        sql.SQL("REVOKE CREATE ON SCHEMA public FROM {}").format(runtime),
        sql.SQL(
            "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {}"
        ).format(runtime),
        sql.SQL(
            "REVOKE TRUNCATE, REFERENCES, TRIGGER ON ALL TABLES IN SCHEMA public FROM {}"
        ).format(runtime),
        sql.SQL("GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO {}").format(
            runtime
        ),
        sql.SQL(
            "ALTER DEFAULT PRIVILEGES FOR ROLE {} IN SCHEMA public "
            "GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO {}"
        ).format(owner, runtime),
        sql.SQL(
            "ALTER DEFAULT PRIVILEGES FOR ROLE {} IN SCHEMA public "
            "GRANT USAGE, SELECT ON SEQUENCES TO {}"
        ).format(owner, runtime),
    ]
    existing = _tables(conn)
    for table in APPEND_ONLY:
        if table in existing:
            statements.append(_revoke(table, "UPDATE, DELETE", runtime))
    if "limits_snapshot" in existing:
        statements += [
            _revoke("limits_snapshot", "UPDATE, DELETE", runtime),
            sql.SQL("GRANT UPDATE ({}) ON limits_snapshot TO {}").format(
                sql.SQL(", ").join(map(sql.Identifier, SNAPSHOT_LIFECYCLE)), runtime
            ),
        ]
    for table in READ_ONLY:
        if table in existing:
            statements.append(_revoke(table, "INSERT, UPDATE, DELETE", runtime))
    for statement in statements:
        conn.execute(statement)


def _revoke(table: str, privileges: str, role: sql.Identifier) -> sql.Composed:
    return sql.SQL("REVOKE {} ON {} FROM {}").format(
        sql.SQL(privileges), sql.Identifier(table), role
    )


def _tables(conn: psycopg.Connection) -> set[str]:
    rows = conn.execute(
        "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
    ).fetchall()
    return {row[0] for row in rows}
