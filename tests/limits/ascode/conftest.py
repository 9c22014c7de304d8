"""Fixtures of the rules-as-code tests."""

from __future__ import annotations

import psycopg
import pytest
from django.db import connection

from tests.celery_fixtures import database_url


@pytest.fixture
def fresh_database():
    """An empty database of its own, migrated by the command line like a new install."""
    name = f"{connection.settings_dict['NAME']}_fresh"
    url = database_url().rsplit("/", 1)[0]
    with psycopg.connect(f"{url}/postgres", autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        admin.execute(f'CREATE DATABASE "{name}"')
    yield f"{url}/{name}"
    with psycopg.connect(f"{url}/postgres", autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
