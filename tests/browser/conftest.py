"""Browser tests: Playwright drives Debian's Chromium against the live control plane.

Chromium comes from the project's setup (`.ci/apt-packages`); Playwright never
downloads a browser. Each journey saves a screenshot of its last page under
``artifacts/browser/``.
"""

from pathlib import Path

import pytest
from django.core.management import call_command
from playwright.sync_api import Page, sync_playwright

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
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS)
        yield browser
        browser.close()


@pytest.fixture
def demo(transactional_db, redis_client):
    """The demo rules, users and version 1, as `make run` sets them up."""
    call_command("seed_demo", verbosity=0)


@pytest.fixture
def page(browser, live_server, demo):
    context = browser.new_context(
        base_url=live_server.url, viewport={"width": 1280, "height": 900}
    )
    context.set_default_timeout(15_000)
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


def save_screenshot(page: Page, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
