"""What the benchmarks share: figures (median and spread), private servers, the bench database.

Every bench prints figures and ratios against a reference measured in the same
run (``/shared/BENCHMARKING.md``); none asserts anything about time.
"""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # ``python bench/x.py`` as well as ``python -m bench.x``
    sys.path.insert(0, str(ROOT))

PYTHON = sys.executable
DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/sluice"


def percentile(ordered: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) of an already sorted sequence; nan when empty."""
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def spread(values: Iterable[float], digits: int = 1) -> str:
    """``median [min .. max]`` of repeated measurements."""
    values = list(values)
    if not values:
        return "n/a"
    low, mid, high = min(values), statistics.median(values), max(values)
    return f"{mid:.{digits}f} [{low:.{digits}f} .. {high:.{digits}f}]"


def median(values: Iterable[float]) -> float:
    return statistics.median(list(values))


def machine_line() -> str:
    """One line about the machine and the load on it when the bench ran."""
    load = os.getloadavg()
    cpus = sorted(os.sched_getaffinity(0))
    return (
        f"python {platform.python_version()}, {os.cpu_count()} CPUs (allowed {cpus}), "
        f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )


def bench_database_url() -> str:
    """``DATABASE_URL`` with ``_bench`` appended to the database name.

    The benches drop and refill this database; the developer's own stays untouched.
    """
    parts = urlsplit(os.environ.get("DATABASE_URL", DEFAULT_DATABASE_URL))
    name = parts.path.lstrip("/") or "sluice"
    if not name.endswith("_bench"):
        name += "_bench"
    return urlunsplit(parts._replace(path=f"/{name}"))


def bench_env(redis_url: str, **extra: str) -> dict[str, str]:
    """Environment for Django processes of the bench: bench settings, bench DB, private Redis."""
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "bench.settings",
        "DATABASE_URL": bench_database_url(),
        "REDIS_URL": redis_url,
        "CELERY_BROKER_URL": redis_url.rsplit("/", 1)[0] + "/1",
        "DEBUG": "0",
        "SECRET_KEY": "sluice-bench-only-not-a-secret",
        "LOG_LEVEL": "WARNING",
        # this checkout's control plane and client, whatever the virtualenv installed
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "client")]),
        **extra,
    }


def manage(env: dict[str, str], *args: str, timeout: float = 600) -> str:
    """Run ``manage.py`` with ``env``; return its standard output, raise on failure."""
    done = subprocess.run(
        [PYTHON, str(ROOT / "manage.py"), *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if done.returncode != 0:
        raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return done.stdout


def fresh_database(env: dict[str, str]) -> float:
    """Drop and re-create the bench database, then migrate it; return the seconds taken."""
    began = time.perf_counter()
    manage(env, "bench_db", "--recreate")
    manage(env, "migrate", "--noinput", "-v", "0")
    return time.perf_counter() - began


def rss_mb(pid: int | None = None) -> float:
    """Resident memory of a process in MiB (Linux /proc)."""
    status = Path(f"/proc/{pid or os.getpid()}/status").read_text()
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)
