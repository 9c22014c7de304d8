"""The environment bench/peers.py runs in: a gateway's, with the client and its peers.

``var/bench/peers-venv``: a virtualenv with ``./client[hiredis,service]`` and
``bench/peers-requirements.txt`` (alisaifee/limits), made once and again when
either changes. The control plane's venv cannot hold alisaifee/limits: both own
the import name ``limits``.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / "var" / "bench" / "peers-venv"
REQUIREMENTS = ROOT / "bench" / "peers-requirements.txt"

__all__ = ["peers_python"]


def _fingerprint() -> str:
    inputs = [REQUIREMENTS, ROOT / "client" / "pyproject.toml"]
    return hashlib.sha256(b"".join(p.read_bytes() for p in inputs)).hexdigest()


def peers_python() -> Path:
    """The peers venv's python, made (or brought up to date) first."""
    python, stamp = VENV / "bin" / "python", VENV / ".installed"
    if stamp.exists() and stamp.read_text() == _fingerprint():
        return python
    venv.EnvBuilder(with_pip=True, clear=True).create(VENV)
    subprocess.run(
        [
            python,
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            "-e",
            f"{ROOT / 'client'}[hiredis,service]",
            "-r",
            REQUIREMENTS,
        ],
        check=True,
    )
    stamp.write_text(_fingerprint())
    return python


if __name__ == "__main__":
    print(peers_python())
    sys.exit(0)
