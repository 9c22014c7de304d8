"""The pure model (``sluice.model``): usable where redis is not installed.

The control plane reads, validates, resolves and compares rule sets with it;
``pyproject.toml``'s import contract keeps the runtime out of it, and this
test proves the result in an interpreter that cannot import redis at all.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import sluice.model

CLIENT = Path(sluice.model.__file__).resolve().parent.parent.parent

#: Runs with ``python -S``: no site-packages, so redis, cryptography and PyYAML
#: are as good as uninstalled; only the client's own directory is on the path.
_WITHOUT_REDIS = """
import json, sys
try:
    import redis
except ImportError:
    pass
else:
    raise SystemExit("redis is importable: the test proves nothing")
from sluice import model
rules = model.fallback_rules(rate=10, burst=20)
again = model.parse_rules(json.loads(json.dumps(rules.to_json())))
from datetime import UTC, datetime
moment = datetime(2026, 1, 1, tzinfo=UTC)
snapshot = model.Snapshot.build(
    version=1, parent=None, published_at=moment, effective_at=moment, rules=again
)
resolution = model.resolve(snapshot, tenant=None, route="anything")
limit = resolution.policy.limits[0]
lower = model.Limit(limit.dimension, limit.rate // 2, limit.period, limit.burst)
print(json.dumps({
    "problems": [str(p) for p in model.validate_rules(again)],
    "rate": limit.rate,
    "kind": model.kind_of(limit).name,
    "direction": model.kind_of(limit).direction(limit, lower, route_cost=1),
    "loaded": sorted(m for m in sys.modules if m.split(".")[0] in
                     ("redis", "cryptography", "yaml", "hiredis")),
}))
"""


def test_model__redis_not_installed__parses_validates_resolves_and_compares():
    # Given an interpreter where redis cannot be imported, with the client on its path
    env = {**os.environ, "PYTHONPATH": str(CLIENT)}
    # When it uses the model: parse, validate, resolve, and compare two limits
    result = subprocess.run(
        [sys.executable, "-S", "-c", _WITHOUT_REDIS],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    # Then everything works, and none of the runtime's dependencies was loaded
    assert result.returncode == 0, result.stderr
    said = json.loads(result.stdout)
    assert said == {
        "problems": [],
        "rate": 10,
        "kind": "gcra",
        "direction": "lowered",
        "loaded": [],
    }


def test_model__its_names__are_the_modules_own():
    # Given a name of the model and the module that defines it
    # Then they are the same object: one place for each idea
    from sluice import kinds, resolver, rules

    assert sluice.model.Policy is rules.Policy
    assert sluice.model.Resolver is resolver.Resolver
    assert sluice.model.GCRA is kinds.GCRA
    assert set(sluice.model.__all__) <= set(dir(sluice.model))
