"""The client never loads Django: gateways embed it without the control plane."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

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
