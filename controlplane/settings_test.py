"""Settings of the test suite: production's (``controlplane.settings``), in a test environment.

The environment is completed here, before the production settings read it, so
that every process the suite starts (the Celery worker, ``manage.py``,
gunicorn), which inherits this environment, signs, encrypts and sends webhooks
the way the tests' own process does:

* ``SECRET_KEY``: a key for tests (DEBUG is off, so the settings demand one);
  webhook secrets are encrypted with a key derived from it, in the tests and the
  worker alike.
* ``SLUICE_SIGNING_KEY`` and ``SLUICE_AUDIT_KEYS``: keys for tests, so that every
  process signs bundles and keys audit entries alike (never a key made on disk).
* ``SLUICE_WEBHOOK_ALLOW_PRIVATE``: the tests' webhook receivers listen on
  loopback. The egress rule itself is tested with it off
  (``tests/limits/core/test_egress.py``).

A variable already set (by CI or a developer) is kept.
"""

import os

os.environ.setdefault("SECRET_KEY", "sluice-tests-only-not-a-secret")
os.environ.setdefault("SLUICE_WEBHOOK_ALLOW_PRIVATE", "1")
os.environ.setdefault(
    "SLUICE_SIGNING_KEY",
    "-----BEGIN PRIVATE KEY-----\n"
    "MC4CAQAwBQYDK2VwBCIEIHNsdWljZS10ZXN0cy1vbmx5LW5vdC1hLXNlY3JldCEh\n"
    "-----END PRIVATE KEY-----\n",
)
os.environ.setdefault(
    "SLUICE_AUDIT_KEYS", "test-1:c2x1aWNlLXRlc3RzLW9ubHktYXVkaXQta2V5"
)

from controlplane.settings import *  # noqa: F403
