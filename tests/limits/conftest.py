"""Rule sets and users for the tests of the domain services."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from limits.choices import Role
from limits.core.audit import Actor
from tests.limits.announce_fixtures import published  # noqa: F401  (fixture)
from tests.receiver import receiver  # noqa: F401  (fixture)


@pytest.fixture(autouse=True)
def _patient_poll_redis(patient_poll_redis):
    """Polls here are judged on what they record, not on how fast Redis answered them
    (tests/conftest.py: ``patient_poll_redis``)."""


def _user(username: str, role: Role | None):
    users = get_user_model()
    if role is None:
        return users.objects.create_superuser(username, f"{username}@x.test", username)
    user = users.objects.create_user(
        username, f"{username}@x.test", username, is_staff=True
    )
    user.groups.add(Group.objects.get(name=role.value))
    return user


@pytest.fixture
def product(db):
    return _user("product", Role.PRODUCT)


@pytest.fixture
def support(db):
    return _user("support", Role.SUPPORT)


@pytest.fixture
def viewer(db):
    return _user("viewer", Role.VIEWER)


@pytest.fixture
def publisher(product):
    """The actor of a product user, who may publish."""
    return Actor(user=product, request_id="test-request", ip="127.0.0.1")
