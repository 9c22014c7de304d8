"""Settings of the benchmarks: the control plane's, plus the bench app and a trivial view.

Only ``bench/`` (never installed, see ``pyproject.toml``) names this module, so
the trivial view and the bench-only commands are not reachable in production.
"""

from controlplane.settings import *  # noqa: F403
from controlplane.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "bench"]
ROOT_URLCONF = "bench.urls"
