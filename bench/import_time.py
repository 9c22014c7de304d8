"""What ``import sluice`` costs, against redis-py alone (issue 27).

    python -m bench.import_time [--runs 21]

Each statement runs in a fresh interpreter (no module cached), ``--runs`` times,
in turn with the others so a busy moment hits them all alike; the child times
the statement itself (``time.perf_counter``, interpreter start-up excluded) and
counts the modules it brought in. Prints median [min .. max] ms, and each
against ``import redis`` of the same run. Never asserts.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

from bench.common import machine_line, median, spread

STATEMENTS = {
    "import redis": "import redis",
    "import sluice": "import sluice",
    "sluice.Limiter (the sync decision path)": "from sluice import Limiter",
    "sluice.AsyncLimiter": "from sluice import AsyncLimiter",
    "every name of sluice (the import before issue 27)": "from sluice import *",
}
CHILD = """
import json, sys, time
before = set(sys.modules)
began = time.perf_counter()
exec({statement!r})
took = time.perf_counter() - began
print(json.dumps([took * 1000, len(set(sys.modules) - before)]))
"""


def measure(statement: str) -> tuple[float, int]:
    """One fresh interpreter's time (ms) for ``statement``, and the modules it loaded."""
    out = subprocess.run(
        [sys.executable, "-c", CHILD.format(statement=statement)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    took, modules = json.loads(out)
    return took, modules


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    options = parser.parse_args()
    print(machine_line())
    times: dict[str, list[float]] = {name: [] for name in STATEMENTS}
    modules: dict[str, int] = {}
    for _ in range(options.runs):
        for name, statement in STATEMENTS.items():
            took, modules[name] = measure(statement)
            times[name].append(took)
    base = median(times["import redis"])
    for name in STATEMENTS:
        ratio = median(times[name]) / base
        print(
            f"{name}: {spread(times[name])} ms, {modules[name]} modules, "
            f"{ratio:.2f} x import redis"
        )
    print(machine_line())


if __name__ == "__main__":
    main()
