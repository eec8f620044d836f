"""Start-up checks of the web UI's own needs.

With DEBUG off the static files are served from STATIC_ROOT under hashed names read from
the manifest that `manage.py collectstatic` writes. Without it every page that links a
stylesheet fails with a 500, so the server refuses to start instead and says why.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.staticfiles.storage import ManifestFilesMixin
from django.core.checks import Error, register
from django.core.exceptions import ImproperlyConfigured
from django.core.files.storage import storages

HOW = "run `python manage.py collectstatic --noinput` (make demo and the image do)"


def missing_static_manifest() -> str | None:
    """Why pages cannot name their static files, or None when they can."""
    # Typed as `object`: django-stubs' Storage and ManifestFilesMixin disagree on a method's
    # signature, so mypy would call the isinstance branch unreachable.
    storage: object = storages["staticfiles"]
    if not isinstance(storage, ManifestFilesMixin):
        return None  # DEBUG or tests: files straight from static/
    manifests = storage.manifest_storage
    if manifests is not None and manifests.exists(storage.manifest_name):
        return None
    return f"static files were not collected into {settings.STATIC_ROOT}: {HOW}"


@register(deploy=True)  # only `check --deploy`: collectstatic itself runs the checks
def static_manifest_check(app_configs: Any, **kwargs: Any) -> list[Error]:
    problem = missing_static_manifest()
    return [Error(problem, id="portal_web.E001")] if problem else []


def require_static_manifest() -> None:
    problem = missing_static_manifest()
    if problem:
        raise ImproperlyConfigured(problem)
