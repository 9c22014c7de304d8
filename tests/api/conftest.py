import pytest
from rest_framework.test import APIClient


@pytest.fixture(autouse=True)
def _patient_poll_redis(patient_poll_redis):
    """Polls here are judged on what they record, not on how fast Redis answered them
    (tests/conftest.py: ``patient_poll_redis``)."""


@pytest.fixture
def api():
    """A client for the API, signed in as nobody until ``as_user`` is called."""
    return ApiClient()


class ApiClient(APIClient):
    def as_user(self, user):
        self.force_login(user)
        return self

    def bearer(self, secret):
        self.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
        return self
