"""Browser tests: Playwright drives Debian's Chromium against the live control plane.

Chromium comes from the project's setup (`.ci/apt-packages`); Playwright never
downloads a browser. Each journey saves a screenshot of its last page under
``artifacts/browser/``.
"""

from pathlib import Path

import pytest
from django.core.management import call_command
from playwright.sync_api import Page, expect, sync_playwright

from tests.conftest import PATIENT_REDIS_TIMEOUT
from tests.receiver import receiver  # noqa: F401  (fixture: a customer's webhook endpoint)

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts" / "browser"
#: Milliseconds Playwright waits for Chromium to start, for an element, a navigation or
#: an ``expect``: generous (its defaults are 30 s and 5 s), as on a loaded machine
#: Chromium and the live server are slow. A passing test never waits it out; a page
#: that never shows what is expected still fails, after this long.
TIMEOUT_MS = 120_000
#: Seconds a gateway's poll or a limiter's Redis call may take in a journey (their
#: defaults, 2 s and 5 ms, would turn a slow answer into a failed poll or a fail-open)
PATIENT = PATIENT_REDIS_TIMEOUT


@pytest.fixture(scope="module")
def browser():
    """Chromium for one module's tests. Not for the session: Playwright's sync API keeps
    an event loop running in this thread while it lives, and other tests on the same
    worker call ``asyncio.run``."""
    if not CHROMIUM.exists():
        pytest.fail(
            "Chromium is missing: apt-get install chromium (the CI setup installs it)"
        )
    # Playwright's sync API keeps an event loop running in this thread for as long as
    # the browser lives; Django's ORM calls made meanwhile (tests, database flushes)
    # are still plain synchronous calls, so its async-context guard is lifted.
    with pytest.MonkeyPatch.context() as patch, sync_playwright() as playwright:
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        expect.set_options(timeout=TIMEOUT_MS)
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=FLAGS, timeout=TIMEOUT_MS
        )
        yield browser
        browser.close()


@pytest.fixture(autouse=True)
def _patient_poll_redis(patient_poll_redis):
    """The live server's poll path waits for Redis as long as it takes: a journey checks
    what the fleet page shows, not how fast Redis answered (tests/conftest.py)."""


@pytest.fixture
def demo(transactional_db, redis_client):
    """The demo rules, users and version 1, as `make run` sets them up."""
    call_command("seed_demo", verbosity=0)


@pytest.fixture
def page(browser, live_server, demo):
    context = browser.new_context(
        base_url=live_server.url, viewport={"width": 1280, "height": 900}
    )
    context.set_default_timeout(TIMEOUT_MS)
    context.set_default_navigation_timeout(TIMEOUT_MS)
    page = context.new_page()
    yield page
    context.close()


def login(page: Page, username: str) -> None:
    """Sign in through the admin's login form (demo passwords are the user names)."""
    page.goto("/admin/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", username)
    page.click("input[type=submit]")
    page.wait_for_url("**/admin/")


def submit(page: Page, selector: str) -> None:
    """Click a button that posts a form and wait for the page that answers it.

    For a form whose answer comes back at the same URL (a change request's own
    buttons): ``wait_for_url`` would return at once, and the next step would act on
    the page that is going away.
    """
    with page.expect_navigation():
        page.click(selector)


def save_screenshot(page: Page, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def decide_until_limited(limiter, **request) -> list:
    """Decide ``request`` until the limiter limits it, and return every decision.

    A bucket refills while a loaded machine decides slowly: a fixed number of calls
    may all be admitted, so the loop stops at the first limited one (at most 1,000).
    """
    decisions = []
    while all(d.allowed for d in decisions) and len(decisions) < 1000:
        decisions.append(limiter.decide(**request))
    return decisions
