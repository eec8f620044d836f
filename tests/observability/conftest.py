"""A web process as the chart runs it: DEBUG and the test settings off, the HTTPS redirect on,
static files collected as the image collects them."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tests.support.staticfiles import collected_static

METRICS_TOKEN = "observability-metrics-token"


def production_env(static_root: Path) -> dict[str, str]:
    return {
        "PORTAL_TESTING": "0",
        "DEBUG": "0",
        "SECRET_KEY": "observability-" + uuid.uuid4().hex * 2,
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "STATIC_ROOT": str(static_root),
        "PORTAL_METRICS_TOKEN": METRICS_TOKEN,
    }


@pytest.fixture(scope="session")
def static_root() -> Path:
    """`collectstatic` as the image runs it: with DEBUG off the server starts only after it."""
    return Path(collected_static())
