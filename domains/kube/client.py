"""The official `kubernetes` client, configured the standard way, and error classification.

Off unless configured: `settings.PORTAL["KUBE_ENABLED"]` (on by default when KUBECONFIG is
set). In a pod, the service account is used (`load_incluster_config`); elsewhere the
kubeconfig named by KUBECONFIG (or ~/.kube/config).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

import urllib3
from django.conf import settings
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from domains.errors import TransientError

T = TypeVar("T")

# Statuses worth retrying: conflicts (someone wrote first), throttling, server trouble.
TRANSIENT_STATUSES = frozenset({409, 429, 500, 502, 503, 504})


class KubeUnavailable(TransientError):
    """The API server did not answer, or answered with a status worth retrying."""


class KubeRejected(Exception):
    """The API server refused the request for good (403, 404 namespace, 422 …)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


def kube_enabled() -> bool:
    return settings.PORTAL["KUBE_ENABLED"]


def api_client() -> client.ApiClient:
    """A new ApiClient: in-cluster when running in a pod, else from the kubeconfig."""
    if os.environ.get("KUBERNETES_SERVICE_HOST") and not os.environ.get("KUBECONFIG"):
        cfg = client.Configuration()
        config.load_incluster_config(client_configuration=cfg)
        return client.ApiClient(cfg)
    try:
        api: client.ApiClient = config.new_client_from_config(
            config_file=os.environ.get("KUBECONFIG") or None
        )
    except ConfigException as exc:
        raise KubeRejected(0, f"no usable kubeconfig: {exc}") from exc
    return api


def call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run one API call; transient trouble → KubeUnavailable, other refusals → KubeRejected.

    404 is left to the caller as ApiException: "not there" is an answer, not an error.
    """
    try:
        return fn(*args, **kwargs)
    except ApiException as exc:
        if exc.status == 404:
            raise
        if exc.status in TRANSIENT_STATUSES:
            raise KubeUnavailable(f"API server answered {exc.status}: {exc.reason}") from exc
        raise KubeRejected(exc.status or 0, str(exc.body or exc.reason)[:500]) from exc
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise KubeUnavailable(f"API server unreachable: {exc}") from exc


def is_not_found(exc: BaseException) -> bool:
    return isinstance(exc, ApiException) and exc.status == 404
