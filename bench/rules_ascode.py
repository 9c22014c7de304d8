"""Rules as code at scale: export, diff, apply and publish a file of 100,000 tenants.

Each step runs ``manage.py`` as an operator would, in its own process, so the
figures include starting Django and the peak resident memory is the command's
own (``wait4``'s ``ru_maxrss``). On the bench database (``bench/run.py`` sets it
up) and a second one, ``<bench name>_target_bench``, re-created for "apply into a
fresh database". Alone::

    DJANGO_SETTINGS_MODULE=bench.settings DATABASE_URL=<...>_bench REDIS_URL=<private> \\
        python -m bench.rules_ascode --tenants 100000 --overrides 20000

Steps, in order: load the rules with ``bulk_create`` (``bench_rules``), the first
publish, ``rules export``, ``rules diff`` of the unchanged file, ``rules apply
--publish`` of the file with 10 tenants moved to another tier, a small edit's
publish (``bench_publish``), then ``rules apply --publish`` of the exported file
into the fresh database and ``rules diff`` there (the round trip). Each figure
comes with the load average when its step ended: other work shares the machine.
Prints Markdown; never asserts on time.
"""

from __future__ import annotations

import argparse
import os
import selectors
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from bench.common import PYTHON, ROOT, machine_line, table

#: The targets of issue 29 (seconds, MiB); None: no target for that figure.
TARGETS = {
    "first publish": (10, None),
    "rules export": (10, None),
    "rules diff, unchanged file": (5, None),
    "rules apply --publish, 10 tenants changed": (5, None),
    "publish of a small edit": (2, None),
    "rules apply --publish into a fresh database": (60, 500),
    "rules diff in the fresh database": (5, None),
}


def target_url(url: str) -> str:
    """The second bench database: ``<name>_target_bench`` for ``<name>_bench``."""
    parts = urlsplit(url)
    name = parts.path.lstrip("/").removesuffix("_bench") + "_target_bench"
    return urlunsplit(parts._replace(path=f"/{name}"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tenants", type=int, default=100_000)
    parser.add_argument("--overrides", type=int, default=20_000)
    options = parser.parse_args()
    # as an installed control plane runs: with its bytecode cached after the first
    # step (an install compiles it); with PYTHONDONTWRITEBYTECODE set, as on the
    # shared machines, each step compiled ~550 modules again (0.5 to 1.5 s)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    target = {**env, "DATABASE_URL": target_url(env["DATABASE_URL"])}
    rows: list[tuple[str, float, float, str]] = []

    def step(title: str, environ, *args: str, ok=(0,)) -> str:
        out, seconds, peak = timed_run(environ, *args, ok=ok)
        rows.append((title, seconds, peak, f"{os.getloadavg()[0]:.1f}"))
        return out

    print(f"## Rules as code: {options.tenants:,} tenants\n\n{machine_line()}\n")
    loaded = step(
        "load the rules (bulk_create, not measured against a target)",
        env,
        "bench_rules",
        "--tenants",
        str(options.tenants),
        "--overrides",
        str(options.overrides),
    )
    print(f"Rules: {loaded.strip()}\n")
    step("first publish", env, "publish", "-m", "bench: first")
    with tempfile.TemporaryDirectory() as folder:
        exported = Path(folder) / "rules.yaml"
        step("rules export", env, "rules", "export", "-o", str(exported))
        text = exported.read_text()
        print(
            f"File: {len(text.encode()) / 2**20:.1f} MiB, {text.count(chr(10)):,} lines\n"
        )
        step("rules diff, unchanged file", env, "rules", "diff", str(exported))
        edited = Path(folder) / "edited.yaml"
        edited.write_text(_edit_tenants(text, 10))
        step(
            "rules apply --publish, 10 tenants changed",
            env,
            "rules",
            "apply",
            str(edited),
            "--publish",
            ok=(0,),
        )
        step("publish of a small edit", env, "bench_publish")
        step("create and migrate the fresh database", target, "bench_db", "--recreate")
        step("(migrate)", target, "migrate", "--noinput", "-v", "0")
        fresh = exported  # the export of the first version, before the edits
        step(
            "rules apply --publish into a fresh database",
            target,
            "rules",
            "apply",
            str(fresh),
            "--publish",
        )
        step("rules diff in the fresh database", target, "rules", "diff", str(fresh))
    print(
        table(
            [
                "step",
                "wall s",
                "target s",
                "peak RSS MiB",
                "target MiB",
                "load (1 min)",
            ],
            [
                (
                    title,
                    f"{seconds:.1f}",
                    TARGETS.get(title, ("", ""))[0] or "",
                    f"{peak:.0f}",
                    TARGETS.get(title, ("", ""))[1] or "",
                    load,
                )
                for title, seconds, peak, load in rows
            ],
        )
    )


def timed_run(env: dict[str, str], *args: str, ok=(0,)) -> tuple[str, float, float]:
    """``manage.py *args`` in a child: (stdout, wall seconds, peak RSS in MiB)."""
    began = time.perf_counter()
    process = subprocess.Popen(
        [PYTHON, str(ROOT / "manage.py"), *args],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out = _drain(process)
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - began
    code = os.waitstatus_to_exitcode(status)
    if code not in ok:
        raise RuntimeError(
            f"manage.py {' '.join(args)} exited {code}:\n{out[1][-3000:]}"
        )
    return out[0], seconds, usage.ru_maxrss / 1024  # Linux: KiB


def _drain(process: subprocess.Popen) -> tuple[str, str]:
    """Read both pipes to their end without reaping the child (``wait4`` does)."""
    chunks: dict[int, list[bytes]] = {
        process.stdout.fileno(): [],
        process.stderr.fileno(): [],
    }
    with selectors.DefaultSelector() as selector:
        for pipe in (process.stdout, process.stderr):
            selector.register(pipe, selectors.EVENT_READ)
        while selector.get_map():
            for key, _ in selector.select():
                data = os.read(key.fd, 65536)
                if data:
                    chunks[key.fd].append(data)
                else:
                    selector.unregister(key.fileobj)
    out, err = (
        b"".join(chunks[p.fileno()]).decode() for p in (process.stdout, process.stderr)
    )
    return out, err


def _edit_tenants(text: str, count: int) -> str:
    """``text`` with ``count`` tenants changed: half renamed, half new (on tier free):
    no one's limits go down, so neither notice nor a second approver is needed."""
    renamed = count // 2
    for index in range(renamed):
        text = text.replace(
            f"\n    name: Tenant {index}\n",
            f"\n    name: Tenant {index} (renamed)\n",
            1,
        )
    added = "".join(
        f"  zz-new-{index:02d}:\n    name: New {index}\n    tier: free\n"
        for index in range(count - renamed)
    )
    return text.replace("\nroutes:\n", f"\n{added}routes:\n", 1)


if __name__ == "__main__":
    main()
