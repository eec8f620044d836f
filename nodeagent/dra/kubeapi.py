# SPDX-License-Identifier: Apache-2.0
"""The agent's few calls to the Kubernetes API: read a ResourceClaim, own a ResourceSlice.

`resource.k8s.io` is `v1` from Kubernetes 1.34 and `v1beta1` in 1.32-1.33 (the field
layout differs a little, see `slices`). Which one the server speaks is asked once, by API
discovery (`GET /apis/resource.k8s.io`), preferring v1.

The official `kubernetes` client, configured the standard way: the kubeconfig given (or
named by KUBECONFIG), else the pod's service account.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import urllib3
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

GROUP = "resource.k8s.io"
VERSIONS = ("v1", "v1beta1")  # in the order we prefer them


class KubeError(RuntimeError):
    """The API server refused or could not be reached; the text says which and why."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


def api_client(kubeconfig: Path | None) -> client.ApiClient:
    if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        cfg = client.Configuration()
        config.load_incluster_config(client_configuration=cfg)
        return client.ApiClient(cfg)
    path = str(kubeconfig) if kubeconfig else os.environ.get("KUBECONFIG") or None
    api: client.ApiClient = config.new_client_from_config(config_file=path)
    return api


class ResourceApi:
    """`resource.k8s.io` objects as plain JSON dicts, in the version the server speaks."""

    def __init__(self, api: client.ApiClient, version: str = "") -> None:
        self.api = api
        self.custom = client.CustomObjectsApi(api)
        self._version = version

    @property
    def version(self) -> str:
        if not self._version:
            self._version = self.discover()
        return self._version

    def discover(self) -> str:
        try:
            group = self._call(client.ResourceApi(self.api).get_api_group)
        except KubeError as exc:
            if exc.status != 404:
                raise
            group = None
        served = {v.version for v in (group.versions if group else None) or []}
        for version in VERSIONS:
            if version in served:
                return version
        raise KubeError(
            f"the API server serves no {GROUP} version this agent speaks ({', '.join(VERSIONS)})"
            f"; it serves {sorted(v for v in served if v) or 'none'}: DRA needs Kubernetes 1.32+"
        )

    def get_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._get(
            self.custom.get_namespaced_custom_object,
            GROUP, self.version, namespace, "resourceclaims", name,
        )  # fmt: skip

    def get_slice(self, name: str) -> dict[str, Any] | None:
        return self._get(
            self.custom.get_cluster_custom_object, GROUP, self.version, "resourceslices", name
        )

    def create_slice(self, body: dict[str, Any]) -> dict[str, Any]:
        return _dict(self._call(
            self.custom.create_cluster_custom_object, GROUP, self.version, "resourceslices", body
        ))  # fmt: skip

    def replace_slice(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        return _dict(self._call(
            self.custom.replace_cluster_custom_object,
            GROUP, self.version, "resourceslices", name, body,
        ))  # fmt: skip

    def list_slices(self, name: str) -> dict[str, Any]:
        """The slice named `name` as a list (empty when there is none), with the list's
        resourceVersion to watch from."""
        return _dict(self._call(
            self.custom.list_cluster_custom_object,
            GROUP, self.version, "resourceslices", field_selector=f"metadata.name={name}",
        ))  # fmt: skip

    def watch_slices(
        self, name: str, resource_version: str, timeout_s: int
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """(event type, object) for the slice named `name`, from `resource_version` on; the
        stream goes on across the server's timeouts and ends when the version expired (the
        caller lists again). Refusals and broken connections are KubeErrors."""
        stream = watch.Watch().stream(
            self.custom.list_cluster_custom_object,
            GROUP, self.version, "resourceslices",
            field_selector=f"metadata.name={name}",
            resource_version=resource_version,
            allow_watch_bookmarks=True,  # keeps the version fresh: no 410 after a quiet hour
            timeout_seconds=timeout_s,
            _request_timeout=timeout_s + 10,
        )  # fmt: skip
        try:
            for event in stream:
                obj = event["raw_object"]
                if (obj.get("metadata") or {}).get("name") == name:
                    yield str(event["type"]), obj
        except ApiException as exc:
            if exc.status == 410:  # Gone: the version expired
                return
            raise KubeError(f"API server answered {exc.status}: {exc.reason}", exc.status or 0)
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
            raise KubeError(f"watch of ResourceSlice {name} broke: {exc}") from exc

    def delete_slice(self, name: str) -> None:
        try:
            self._call(
                self.custom.delete_cluster_custom_object,
                GROUP, self.version, "resourceslices", name,
            )  # fmt: skip
        except KubeError as exc:
            if exc.status != 404:
                raise

    def _get(self, fn: Any, *args: Any) -> dict[str, Any] | None:
        try:
            return _dict(self._call(fn, *args))
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    @staticmethod
    def _call(fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs, _request_timeout=10)
        except ApiException as exc:
            reason = str(exc.body or exc.reason or "")[:300]
            raise KubeError(f"API server answered {exc.status}: {reason}", exc.status or 0)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise KubeError(f"API server unreachable: {exc}") from exc


def _dict(answer: object) -> dict[str, Any]:
    return cast(dict[str, Any], answer)
