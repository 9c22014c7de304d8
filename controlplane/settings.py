"""Settings of Sluice's control plane: the only settings module.

Every value comes from an environment variable. The defaults are safe for
production where safety is at stake (``DEBUG`` off, a ``SECRET_KEY`` required,
webhooks to public addresses only) and otherwise suit a developer machine where
Postgres (127.0.0.1:5432, user postgres) and Redis (127.0.0.1:6379) are running.
``make run`` turns ``DEBUG`` on (``Procfile.dev``); the test suite runs with
``controlplane.settings_test``. The README lists every variable.
"""

import os
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    if value.lower() in ("1", "true", "yes", "on"):
        return True
    if value.lower() in ("0", "false", "no", "off"):
        return False
    raise ImproperlyConfigured(
        f"{name}={value!r}: expected 1/0, true/false, yes/no or on/off"
    )


def env_list(name: str, default: str) -> list[str]:
    return [
        item.strip()
        for item in os.environ.get(name, default).split(",")
        if item.strip()
    ]


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    try:
        return int(value) if value else default
    except ValueError:
        raise ImproperlyConfigured(
            f"{name}={value!r}: expected a whole number"
        ) from None


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def env_durations(name: str, default: str) -> list[int]:
    """Durations such as ``7d,1d`` or ``12h,30m,90s``, as whole seconds, largest first."""
    seconds = []
    for item in env_list(name, default):
        number, unit = item[:-1], item[-1:]
        if unit not in _UNITS or not number.isdigit() or int(number) < 1:
            raise ImproperlyConfigured(
                f"{name}: {item!r} is not a duration such as 7d, 12h, 30m or 90s"
            )
        seconds.append(int(number) * _UNITS[unit])
    return sorted(set(seconds), reverse=True)


# Off unless asked for: a server started without configuration must not show
# tracebacks, nor sign sessions with a key anyone can read in this file.
DEBUG = env_bool("DEBUG", False)
SECRET_KEY = os.environ.get("SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured(
            "SECRET_KEY must be set when DEBUG is off (DEBUG=1 only on a developer machine)"
        )
    SECRET_KEY = "sluice-insecure-development-key-do-not-use-in-production"
# Django's debug page (DEBUG on) only for signed-in superusers, never printing
# connection URLs: controlplane.debug.
DEFAULT_EXCEPTION_REPORTER = "controlplane.debug.GuardedExceptionReporter"
DEFAULT_EXCEPTION_REPORTER_FILTER = "controlplane.debug.SluiceExceptionReporterFilter"
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", "")

DATABASE_URL = os.environ.get(
    "DATABASE_URL", "postgres://postgres@127.0.0.1:5432/sluice"
)
# Migrations run as the owner of the tables, the application as a role that owns
# nothing (manage.py db_roles sets both up, as DATABASE_ADMIN_URL, a superuser).
DATABASE_MIGRATE_URL = os.environ.get("DATABASE_MIGRATE_URL", "") or DATABASE_URL
DATABASE_ADMIN_URL = os.environ.get("DATABASE_ADMIN_URL", "") or DATABASE_MIGRATE_URL
# Persistent connections are checked before a request reuses them: after a Postgres
# restart, each process would otherwise fail one request on its dead connection.
# A Postgres that accepts connections and never answers, or a query stuck on a
# lock, must not hold a worker until gunicorn kills it (30 s): connecting gives up
# after SLUICE_DB_CONNECT_TIMEOUT seconds, a statement after
# SLUICE_DB_STATEMENT_TIMEOUT_MS (0: no limit); the API then answers 503. The web
# processes get 20 s (gunicorn.conf.py); Celery tasks and commands, which may run
# long statements on large rule sets, none unless it is set.
SLUICE_DB_CONNECT_TIMEOUT = env_int("SLUICE_DB_CONNECT_TIMEOUT", 5)
SLUICE_DB_STATEMENT_TIMEOUT_MS = env_int("SLUICE_DB_STATEMENT_TIMEOUT_MS", 0)
DATABASES = {
    "default": dj_database_url.parse(
        DATABASE_URL, conn_max_age=60, conn_health_checks=True
    )
}
DATABASES["default"]["OPTIONS"] = {
    "connect_timeout": SLUICE_DB_CONNECT_TIMEOUT,
    "options": f"-c statement_timeout={SLUICE_DB_STATEMENT_TIMEOUT_MS}",
    **DATABASES["default"].get("OPTIONS", {}),
}
REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")

INSTALLED_APPS = [
    "controlplane.apps.SluiceAdminConfig",  # django.contrib.admin, Sluice's home page
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_filters",
    "limits.apps.LimitsConfig",
    "api.apps.ApiConfig",
]
MIGRATION_MODULES = {"limits": "migrations"}

MIDDLEWARE = [
    # /healthz and /readyz, before any host check, redirect, authentication or log
    "controlplane.health.HealthCheckMiddleware",
    "api.middleware.ApiProblemMiddleware",  # then every error under /api/ as a problem
    "controlplane.middleware.RequestIdMiddleware",
    "controlplane.middleware.RequestLogMiddleware",
    "controlplane.middleware.InputGuardMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # innermost: a view that failed because Postgres or Redis is down answers 503
    "controlplane.middleware.OutageMiddleware",
]

ROOT_URLCONF = "controlplane.urls"
WSGI_APPLICATION = "controlplane.wsgi.application"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": "sluice",
    }
}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LANGUAGE_CODE = "en-us"
#: One way to write dates on every page (controlplane/formats/en/formats.py).
FORMAT_MODULE_PATH = ["controlplane.formats"]
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True
STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
LOGIN_URL = "admin:login"

REST_FRAMEWORK = {
    "DEFAULT_SCHEMA_CLASS": "api.schema.SluiceAutoSchema",
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "api.authentication.ApiTokenAuthentication",
        "api.authentication.GatewayTokenAuthentication",  # then refused by role: 403
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["api.permissions.RolePermission"],
    "PAGE_SIZE": 50,
    "DEFAULT_FILTER_BACKENDS": [
        "api.filters.FilterBackend",
        "api.filters.SearchFilter",
        "api.filters.OrderingFilter",
    ],
    "EXCEPTION_HANDLER": "api.exceptions.sluice_exception_handler",
    "DEFAULT_PARSER_CLASSES": ["api.parsers.BoundedJSONParser"],
    "DEFAULT_PAGINATION_CLASS": "api.pagination.BoundedLimitOffsetPagination",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Sluice API",
    "DESCRIPTION": "Rate-limit rules, snapshots for gateways, and their audit log.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # Request bodies get their own components, which state what writes require
    # (minLength 1 for text that may not be blank) without read-only members.
    "COMPONENT_SPLIT_REQUEST": True,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "api.schema.strict_request_bodies",  # write bodies refuse unknown members
    ],
    # Several models have a field named "kind"; name each enum after its choices.
    "ENUM_NAME_OVERRIDES": {
        "LimitKindEnum": "limits.choices.LimitKind",
        "SnapshotKindEnum": "limits.choices.SnapshotKind",
        "DeliveryKindEnum": "limits.choices.DeliveryKind",
    },
}

CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/1")
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_IGNORE_RESULT = True
CELERY_TIMEZONE = "UTC"

EMAIL_BACKEND = os.environ.get(
    "EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend"
)
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "sluice@localhost")

#: A gateway that has not polled for this many seconds is shown as silent.
SLUICE_FLEET_SILENT_AFTER = env_int("SLUICE_FLEET_SILENT_AFTER", 60)
#: A gateway behind the active version for longer than this many seconds is stale.
SLUICE_FLEET_STALE_AFTER = env_int("SLUICE_FLEET_STALE_AFTER", 60)
#: How long a web process answers gateway polls from what it last heard from Redis
#: (ETag, token validity), buffering fleet reports meanwhile; 0: every poll asks Redis.
SLUICE_POLL_WINDOW_MS = env_int("SLUICE_POLL_WINDOW_MS", 1000)
#: How long a gateway poll waits for the control plane's Redis before it is answered
#: from this process's memory or Postgres instead (docs/gateway-protocol.md).
SLUICE_POLL_REDIS_TIMEOUT_MS = env_int("SLUICE_POLL_REDIS_TIMEOUT_MS", 250)
#: Seconds between two runs of the beat task that activates scheduled snapshots.
SLUICE_ACTIVATION_INTERVAL = env_int("SLUICE_ACTIVATION_INTERVAL", 5)

#: Days a version that lowers anyone's limits must be published ahead of taking effect.
SLUICE_NOTICE_PERIOD_DAYS = env_int("SLUICE_NOTICE_PERIOD_DAYS", 14)
#: Reminders to the tenants affected, this long before a lowering takes effect.
SLUICE_REMINDERS = env_durations("SLUICE_REMINDERS", "7d,1d")
#: Seconds between two runs of the beat task that sends due reminders and
#: re-queues announcements and deliveries whose task was lost.
SLUICE_ANNOUNCE_INTERVAL = env_int("SLUICE_ANNOUNCE_INTERVAL", 60)
#: Seconds between two runs of the beat task that tells opted-in tenants of the
#: calendar quota thresholds (80 %, 100 %) they reached (limits.announcements.quota_reminders).
SLUICE_QUOTA_REMINDER_INTERVAL = env_int("SLUICE_QUOTA_REMINDER_INTERVAL", 300)
#: Seconds a webhook endpoint has to answer one delivery attempt.
SLUICE_WEBHOOK_TIMEOUT = env_int("SLUICE_WEBHOOK_TIMEOUT", 10)
# Webhooks to private, loopback and link-local addresses (limits.core.egress): refused
# unless allowed in so many words, DEBUG or not (a webhook URL must not become a way
# to probe the operator's network from a server someone started with DEBUG=1).
SLUICE_WEBHOOK_ALLOW_PRIVATE = env_bool("SLUICE_WEBHOOK_ALLOW_PRIVATE", False)
#: Fernet keys that encrypt webhook signing secrets at rest, comma-separated: the
#: first encrypts, every one decrypts (rotation). Empty: one derived from SECRET_KEY.
SLUICE_SECRET_KEYS = env_list("SLUICE_SECRET_KEYS", "")
#: The address customers reach the changelog at, for links in webhooks and emails.
SLUICE_PUBLIC_URL = os.environ.get("SLUICE_PUBLIC_URL", "http://127.0.0.1:8000")
#: The operator's name for its API, in the changelog's and the feed's titles.
SLUICE_BRAND = os.environ.get("SLUICE_BRAND", "Sluice")
#: Where change request events go for the team's chat tool (a Standard Webhooks
#: POST; empty: none), and the whsec_ secret they are signed with.
SLUICE_TEAM_WEBHOOK_URL = os.environ.get("SLUICE_TEAM_WEBHOOK_URL", "")
SLUICE_TEAM_WEBHOOK_SECRET = os.environ.get("SLUICE_TEAM_WEBHOOK_SECRET", "")
# Where customers read about the limits (the docs, or the changelog's URL), linked
# from every 429: published in the snapshot, so gateways carry it from the next publish.
SLUICE_DOCUMENTATION_URL = os.environ.get("SLUICE_DOCUMENTATION_URL", "")
#: The Redis stream gateways write decision events to (sluice.DecisionEvents).
SLUICE_DECISION_STREAM = os.environ.get("SLUICE_DECISION_STREAM", "sluice:decisions")
#: Seconds between two runs of the beat task that rolls the decision stream up.
SLUICE_STATS_INTERVAL = env_int("SLUICE_STATS_INTERVAL", 10)
#: Days of per-minute decision counts kept for the dashboards.
SLUICE_STATS_RETENTION_DAYS = env_int("SLUICE_STATS_RETENTION_DAYS", 30)
#: Days, and rows per tenant, of the recent-rejections log.
SLUICE_STATS_REJECTION_RETENTION_DAYS = env_int(
    "SLUICE_STATS_REJECTION_RETENTION_DAYS", 7
)
SLUICE_STATS_REJECTIONS_PER_TENANT = env_int("SLUICE_STATS_REJECTIONS_PER_TENANT", 200)
#: Days the ids of aggregated stream entries are remembered (they are never counted twice).
SLUICE_STATS_LEDGER_RETENTION_DAYS = env_int("SLUICE_STATS_LEDGER_RETENTION_DAYS", 7)
#: Days of recorded traffic the impact estimate of a change replays (at most the retention).
SLUICE_IMPACT_DAYS = env_int("SLUICE_IMPACT_DAYS", 7)
#: Seconds an estimate of a scheduled version is reused by the dashboards and reminders.
SLUICE_IMPACT_CACHE_SECONDS = env_int("SLUICE_IMPACT_CACHE_SECONDS", 300)
#: Seconds between two runs of the beat task that prunes old statistics.
SLUICE_STATS_PRUNE_INTERVAL = env_int("SLUICE_STATS_PRUNE_INTERVAL", 3600)
#: A change request that lowers anyone's limits needs a second product person's approval.
SLUICE_APPROVAL_LOWERING = env_bool("SLUICE_APPROVAL_LOWERING", True)
#: A change request that reaches more than this many tenants needs that approval too.
SLUICE_APPROVAL_TENANTS = env_int("SLUICE_APPROVAL_TENANTS", 25)
#: Whether new tenants count towards that reach. Off: onboarding (tenants added,
#: with their own policies) that lowers no one needs no second person.
SLUICE_APPROVAL_NEW_TENANTS = env_bool("SLUICE_APPROVAL_NEW_TENANTS", False)
#: The longest a temporary override may last, in days from when it is set.
SLUICE_OVERRIDE_MAX_DAYS = env_int("SLUICE_OVERRIDE_MAX_DAYS", 90)
#: Reminders to an override's author and to support, this long before it expires.
SLUICE_OVERRIDE_REMINDER = env_durations("SLUICE_OVERRIDE_REMINDER", "3d")
#: Days a one-click renewal extends an override by (never past the maximum).
SLUICE_OVERRIDE_RENEW_DAYS = env_int("SLUICE_OVERRIDE_RENEW_DAYS", 30)
#: Days an expired override stays in the rules before beat prunes it.
SLUICE_OVERRIDE_GRACE_DAYS = env_int("SLUICE_OVERRIDE_GRACE_DAYS", 7)
#: Seconds between two runs of the beat task that reminds of and prunes overrides.
SLUICE_OVERRIDE_INTERVAL = env_int("SLUICE_OVERRIDE_INTERVAL", 600)
#: When set, GET /metrics requires "Authorization: Bearer <this token>".
SLUICE_METRICS_TOKEN = os.environ.get("SLUICE_METRICS_TOKEN", "")
#: Without a token, GET /metrics answers only clients in these networks (loopback),
#: and only requests that did not come through an untrusted proxy.
SLUICE_METRICS_NETWORKS = env_list("SLUICE_METRICS_NETWORKS", "127.0.0.0/8,::1")
# The Ed25519 key that signs gateway bundles and audit checkpoints: the PEM in
# SLUICE_SIGNING_KEY (an environment secret) or a file; neither: a development key
# made on first use in .sluice/ (limits.core.signing). Extra public keys to publish
# (a rotation's next or previous key): a sluice-keys.json file.
SLUICE_SIGNING_KEY = os.environ.get("SLUICE_SIGNING_KEY", "")
SLUICE_SIGNING_KEY_FILE = os.environ.get("SLUICE_SIGNING_KEY_FILE", "")
SLUICE_SIGNING_PUBLIC_KEYS_FILE = os.environ.get("SLUICE_SIGNING_PUBLIC_KEYS_FILE", "")
# The audit log's HMAC keys ("<id>:<base64>[:<last entry>]", the first keys new
# entries), inline or in a file; neither: a development key made in .sluice/
# (limits.core.auditkeys). Signed checkpoints of its head: every N entries, every
# so many seconds (Celery beat), appended to a file when set, always logged.
SLUICE_AUDIT_KEYS = os.environ.get("SLUICE_AUDIT_KEYS", "")
SLUICE_AUDIT_KEYS_FILE = os.environ.get("SLUICE_AUDIT_KEYS_FILE", "")
SLUICE_AUDIT_CHECKPOINT_EVERY = env_int("SLUICE_AUDIT_CHECKPOINT_EVERY", 100)
SLUICE_AUDIT_CHECKPOINT_INTERVAL = env_int("SLUICE_AUDIT_CHECKPOINT_INTERVAL", 3600)
SLUICE_AUDIT_CHECKPOINT_FILE = os.environ.get("SLUICE_AUDIT_CHECKPOINT_FILE", "")

#: Proxies whose X-Forwarded-For is believed when recording who made a change.
SLUICE_TRUSTED_PROXIES = env_list("SLUICE_TRUSTED_PROXIES", "")

# Input bounds (api.parsers, controlplane.middleware, api.pagination): what a request
# may carry before it is refused with 413, 414 or 400 instead of reaching a view.
#: Bytes of a request body; larger: 413 (the rules of 100,000 tenants are about 6 MB).
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("SLUICE_MAX_BODY_BYTES", 10 * 1024 * 1024)
#: Characters of a URL (path and query); longer: 414.
SLUICE_MAX_URL_LENGTH = 4000
#: Nesting of JSON bodies (objects and lists); deeper: 400.
SLUICE_JSON_MAX_DEPTH = 32
#: The largest page a list endpoint answers (?limit=).
SLUICE_MAX_PAGE_SIZE = 1000

#: ``plain`` (text) or ``json`` (one object a line: controlplane.logs).
SLUICE_LOG_FORMAT = os.environ.get("SLUICE_LOG_FORMAT", "plain")
if SLUICE_LOG_FORMAT not in ("plain", "json"):
    raise ImproperlyConfigured(
        f"SLUICE_LOG_FORMAT={SLUICE_LOG_FORMAT!r}: expected plain or json"
    )
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
        "json": {"()": "controlplane.logs.JsonFormatter"},
    },
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": SLUICE_LOG_FORMAT}
    },
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    "loggers": {
        # runserver's access lines (every gateway poll's 304) bury everything else;
        # the request log (controlplane.middleware) replaces them. Errors stay.
        "django.server": {
            "handlers": ["console"],
            "level": "ERROR",
            "propagate": False,
        },
    },
}
