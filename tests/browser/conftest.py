"""Browser fixtures: real Chromium (Debian's, never a downloaded one) driving a real uvicorn
server with a real Celery worker behind it; emulated agents form the domains.

The server and worker live for the whole module (they only need the test database to exist);
every test still gets a clean database (transactional tests flush). Trays use this suite's
loopback range 127.13.<rack>.<slot>.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
from django.contrib.sessions.backends.db import SessionStore

from testbed import factories
from testbed.processes import ARTIFACTS, running, start_server, start_worker

IP_PREFIX = factories.tray_ip_prefix(13)  # 127.13 unless TEST_TRAY_IP_BASE moves it
CHROMIUM = "/usr/bin/chromium"
SCREENSHOTS = ARTIFACTS / "screenshots"


@pytest.fixture(scope="module")
def portal_url(django_db_setup, django_db_blocker) -> Iterator[str]:
    server, url = start_server()
    worker = start_worker(concurrency=4)
    with running(worker, server):
        yield url


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    if not Path(CHROMIUM).exists():
        pytest.skip("Chromium is not installed at /usr/bin/chromium")
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an event loop running in this thread; the ORM calls the
    # tests make meanwhile are plain synchronous ones, so Django's guard must stand aside.
    # Module scope: the loop and the flag end with the browser tests and never leak into
    # the rest of the session (a deploy check in a child process would inherit the flag).
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox"],
            # To watch the tests: PORTAL_BROWSER_HEADED=1 (needs a display, or xvfb-run),
            # and PORTAL_BROWSER_SLOW_MO_MS to slow every action down.
            headless=os.environ.get("PORTAL_BROWSER_HEADED", "") in ("", "0"),
            slow_mo=float(os.environ.get("PORTAL_BROWSER_SLOW_MO_MS", "0")),
        )
        yield chromium
        chromium.close()
    if previous is None:
        os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)


class Session:
    """Opens logged-in pages for one user (a server-side session, as login would make)."""

    def __init__(self, browser, url: str, user) -> None:
        self.url = url
        store = SessionStore()
        store[SESSION_KEY] = str(user.pk)
        store[BACKEND_SESSION_KEY] = settings.AUTHENTICATION_BACKENDS[0]
        store[HASH_SESSION_KEY] = user.get_session_auth_hash()
        store.save()
        self.context = browser.new_context(base_url=url, viewport={"width": 1400, "height": 1000})
        self.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=url)
        host = url.split("://", 1)[1].split(":")[0]
        self.context.add_cookies(
            [{"name": settings.SESSION_COOKIE_NAME, "value": store.session_key,
              "domain": host, "path": "/"}]
        )  # fmt: skip
        self.context.set_default_timeout(15_000)

    def page(self, path: str = "/"):
        page = self.context.new_page()
        page.goto(path)
        return page

    def close(self) -> None:
        self.context.close()


@pytest.fixture
def login(browser, portal_url) -> Iterator:
    sessions: list[Session] = []

    def open_as(user) -> Session:
        session = Session(browser, portal_url, user)
        sessions.append(session)
        return session

    yield open_as
    for session in sessions:
        session.close()


def screenshot(page, name: str, *, full_page: bool = True) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page)
    return path


def wait_live(page) -> None:
    """The page's websocket is connected (the indicator says Live)."""
    page.wait_for_selector('#live-status[data-state="live"]')
