import pytest
from rest_framework.test import APIClient


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
