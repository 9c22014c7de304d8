"""The client never loads Django: gateways embed it without the control plane."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import pytest

import sluice


def test_import__every_client_module__loads_no_django():
    # Given every module of the client (the decision service's too) but the Django adapter
    modules = [
        info.name
        for info in pkgutil.walk_packages(sluice.__path__, "sluice.")
        if info.name != "sluice.django"
    ]
    assert {"sluice.limiter", "sluice.service.rls"} <= set(modules)
    code = "\n".join(
        [
            "import sys",
            "import sluice",
            *(f"import {name}" for name in modules),
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'django'))",
        ]
    )
    # When they are imported in a fresh interpreter
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    # Then no django module was loaded
    assert result.stdout.strip() == "[]"


def _loaded_after(statement: str) -> set[str]:
    code = f"import sys\n{statement}\nprint(' '.join(sorted(sys.modules)))"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    return set(result.stdout.split())


def test_import__sluice_alone__loads_no_submodule_and_no_redis():
    # When a process only imports the package
    loaded = _loaded_after("import sluice")
    # Then nothing of it is loaded until a name is used (module __getattr__)
    assert {m for m in loaded if m.startswith("sluice.")} == set()
    assert "redis" not in loaded


def test_import__the_sync_limiter__loads_its_decision_path_only():
    # When a process takes the sync limiter
    loaded = _loaded_after("from sluice import Limiter")
    # Then it has the limiter and redis-py, not asyncio's limiter, the poller,
    # YAML, the test fixtures or any framework adapter
    assert {"sluice.limiter", "sluice.engine", "redis"} <= loaded
    unused = {"sluice.aio", "sluice.source", "sluice.rulesfile", "sluice.yamlread"}
    unused |= {"yaml", "sluice.testing", "pytest", "sluice.fastapi", "sluice.flask"}
    assert unused & loaded == set()


def test_import__unknown_name__attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        sluice.Nope  # noqa: B018
