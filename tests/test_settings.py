"""Production-safe defaults (controlplane/settings.py, controlplane/debug.py).

The settings module is read in a fresh interpreter, with the environment an
operator would give it, since the suite's own process runs ``settings_test``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from rest_framework.test import APIClient

from limits.core.audit import Actor
from limits.gateways.tokens import token_create
from limits.models import ApiToken
from tests.factories import UserFactory

ROOT = Path(__file__).resolve().parent.parent
#: Seconds a command may take: it only stops one that hangs (a loaded machine starts
#: Python and Django slowly).
COMMAND_TIMEOUT = 240
#: What the fresh interpreter reports of the settings it loaded.
REPORT = """
import json, django
django.setup()
from django.conf import settings
from limits.core.egress import url_problem
print(json.dumps({
    "debug": settings.DEBUG,
    "allow_private": settings.SLUICE_WEBHOOK_ALLOW_PRIVATE,
    "loopback_hook": url_problem("http://127.0.0.1:9000/hooks"),
}))
"""


def _settings_of(**env: str) -> subprocess.CompletedProcess:
    """Load ``controlplane.settings`` with only ``env`` set of the variables at stake."""
    environment = {
        key: value
        for key, value in os.environ.items()
        if key not in {"DEBUG", "SECRET_KEY", "SLUICE_WEBHOOK_ALLOW_PRIVATE"}
    }
    environment |= {"DJANGO_SETTINGS_MODULE": "controlplane.settings", **env}
    return subprocess.run(
        [sys.executable, "-c", REPORT],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT,
    )


@pytest.mark.parametrize("debug", [None, "0"])
def test_settings__debug_off_without_secret_key__refuses_to_start(debug):
    # Given no SECRET_KEY, and DEBUG unset or off
    env = {} if debug is None else {"DEBUG": debug}
    # When the settings are loaded
    result = _settings_of(**env)
    # Then nothing starts, and the error says what is missing
    assert result.returncode != 0
    assert "SECRET_KEY must be set when DEBUG is off" in result.stderr


def test_settings__nothing_set_but_a_key__debug_off_and_no_private_webhooks():
    # Given a production environment that sets only the key
    result = _settings_of(SECRET_KEY="a-real-secret")
    # Then DEBUG is off and a loopback webhook URL is refused
    assert result.returncode == 0, result.stderr
    loaded = json.loads(result.stdout)
    assert (loaded["debug"], loaded["allow_private"]) == (False, False)
    assert "public addresses only" in loaded["loopback_hook"]


def test_settings__debug_on__private_webhooks_still_refused_unless_allowed():
    # Given DEBUG on without a key (the development key is then used)
    debug = json.loads(_settings_of(DEBUG="1").stdout)
    # When private webhook targets are allowed in so many words as well
    allowed = json.loads(
        _settings_of(DEBUG="1", SLUICE_WEBHOOK_ALLOW_PRIVATE="1").stdout
    )
    # Then DEBUG alone does not allow them; the explicit setting does
    assert (debug["debug"], debug["allow_private"]) == (True, False)
    assert "public addresses only" in debug["loopback_hook"]
    assert (allowed["allow_private"], allowed["loopback_hook"]) == (True, None)


@pytest.fixture
def failing_api(settings):
    """DEBUG on (as under make run) and an API view that fails."""
    settings.DEBUG = True
    settings.ROOT_URLCONF = "tests.debug_urls"
    return APIClient(raise_request_exception=False)


@pytest.mark.django_db
@pytest.mark.parametrize("accept", ["text/html", "*/*"])
def test_debug_page__viewer_api_token__one_line_no_settings(failing_api, accept):
    # Given a viewer's API token
    viewer = UserFactory(username="val-viewer", role="viewer")
    secret = token_create(token=ApiToken(user=viewer, name="t"), actor=Actor.system())
    # When the viewer hits a failure with DEBUG on
    response = failing_api.get(
        "/api/v1/fails",
        HTTP_AUTHORIZATION=f"Bearer {secret}",
        HTTP_ACCEPT=accept,
        HTTP_X_REQUEST_ID="req-42",
    )
    # Then a 500 problem document naming the request, and nothing of the settings
    # or the code (under /api/ every error is the API's one shape)
    body = response.content.decode()
    assert response.status_code == 500
    assert response["Content-Type"] == "application/problem+json"
    assert "request req-42" in response.json()["detail"]
    assert django_settings.DATABASE_URL not in body
    for leak in ("DATABASE_URL", "Traceback", "a bug the debug page would show"):
        assert leak not in body


@pytest.mark.django_db
def test_debug_page__superuser_in_the_admin__page_without_connection_urls(
    failing_api,
):
    # Given a superuser signed in (a developer at make run's admin)
    failing_api.force_login(UserFactory(username="root", is_superuser=True))
    # When a page outside the API fails with DEBUG on
    response = failing_api.get("/fails", HTTP_ACCEPT="text/html")
    # Then Django's debug page shows the error, with the connection URLs hidden
    body = response.content.decode()
    assert response.status_code == 500
    assert "a bug the debug page would show" in body
    assert "DATABASE_URL" in body
    assert django_settings.DATABASE_URL not in body
    assert django_settings.CELERY_BROKER_URL not in body


@pytest.mark.parametrize("target", ["run", "traffic"])
def test_make_developer_targets__turn_on_debug_and_private_webhooks(target):
    # When make prints what its developer targets run
    recipe = subprocess.run(
        ["make", "-n", target],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT,
    ).stdout
    # Then they set DEBUG and SLUICE_WEBHOOK_ALLOW_PRIVATE, which default to off
    assert "DEBUG=${DEBUG:-1}" in recipe
    assert "SLUICE_WEBHOOK_ALLOW_PRIVATE=${SLUICE_WEBHOOK_ALLOW_PRIVATE:-1}" in recipe


def test_database_statement_timeout__web_processes_only():
    # Given the settings loaded after gunicorn.conf.py ran, as gunicorn's workers
    # load them, and without it, as a command or a Celery worker does
    environment = {
        **{
            k: v for k, v in os.environ.items() if k != "SLUICE_DB_STATEMENT_TIMEOUT_MS"
        },
        "DJANGO_SETTINGS_MODULE": "controlplane.settings",
    }
    report = (
        "import django; django.setup(); from django.conf import settings; "
        "print(settings.DATABASES['default']['OPTIONS']['options'])"
    )

    def options(*, web: bool) -> str:
        first = "exec(open('gunicorn.conf.py').read()); " if web else ""
        return subprocess.run(
            [sys.executable, "-c", first + report],
            cwd=ROOT,
            env=environment,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT,
        ).stdout.strip()

    # Then a web request's statements stop after 20 s, under gunicorn's 30 s,
    # and the others' are not cut
    assert options(web=True) == "-c statement_timeout=20000"
    assert options(web=False) == "-c statement_timeout=0"
