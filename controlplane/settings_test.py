"""Settings of the test suite: production's (``controlplane.settings``), in a test environment.

The environment is completed here, before the production settings read it, so
that every process the suite starts (the Celery worker, ``manage.py``,
gunicorn), which inherits this environment, signs, encrypts and sends webhooks
the way the tests' own process does:

* ``SECRET_KEY``: a key for tests (DEBUG is off, so the settings demand one);
  webhook secrets are encrypted with a key derived from it, in the tests and the
  worker alike.
* ``SLUICE_WEBHOOK_ALLOW_PRIVATE``: the tests' webhook receivers listen on
  loopback. The egress rule itself is tested with it off
  (``tests/limits/core/test_egress.py``).

A variable already set (by CI or a developer) is kept.
"""

import os

os.environ.setdefault("SECRET_KEY", "sluice-tests-only-not-a-secret")
os.environ.setdefault("SLUICE_WEBHOOK_ALLOW_PRIVATE", "1")

from controlplane.settings import *  # noqa: F403
