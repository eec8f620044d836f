"""A kubelet stand-in for the DRA plugin's wire-level tests: the real gRPC contract over
unix sockets, each call made by the test itself.

End-to-end tests use the kubelet's own DRA code instead (`testbed.kube.kubelet_dra`, built
from upstream's packages, with its startup slice wipe and its 10-15 s retry backoff); this
stand-in stays for what that cannot be asked to do: call the plugin directly with a chosen
claim and read the answer field by field (tests/nodeagent/test_dra_plugin.py: versions
offered and refused at registration, idempotent prepare and unprepare, a claim the plugin
cannot serve), and the stand-in mode of bench/dra.py, a baseline without the kubelet's
backoff.

It does what the kubelet's plugin manager and DRA manager do with a DRA driver, in order:

1. find the driver's registration socket in its registry directory
   (`<kubelet dir>/plugins_registry/<driver>-reg.sock`), call `GetInfo`, check the answer
   (type `DRAPlugin`, a version it speaks among `supported_versions`, an endpoint), and
   call `NotifyRegistrationStatus` with the outcome;
2. then, on the endpoint, `NodePrepareResources` / `NodeUnprepareResources` of the version
   it chose (v1 unless told to speak v1beta1 only), with the claims of a pod;
3. like the kubelet, `prepare_until_ready` calls again while a claim answers an error;
4. `restart`: as a kubelet that starts, delete every ResourceSlice of its node (whatever
   the driver) before the plugins register again.

The stubs are generated from the project's own .proto files (nodeagent/dra/pb), so a
mistake there would be shared; what keeps them honest is that the package, message and
field numbers are written from the kubelet's contract and `test_dra_proto` pins them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from kubernetes import client, config

from nodeagent.dra import DRIVER_NAME
from nodeagent.dra.kubeapi import ResourceApi
from nodeagent.dra.pb import (
    dra_v1_pb2,
    dra_v1_pb2_grpc,
    dra_v1beta1_pb2,
    dra_v1beta1_pb2_grpc,
    registration_pb2,
    registration_pb2_grpc,
)

CALL_TIMEOUT_S = 45  # the kubelet's own timeout for a DRA call (its defaultClientCallTimeout)

VERSIONS = {
    "v1": (dra_v1_pb2, dra_v1_pb2_grpc),
    "v1beta1": (dra_v1beta1_pb2, dra_v1beta1_pb2_grpc),
}


@dataclass(frozen=True)
class PodClaim:
    namespace: str
    uid: str
    name: str


class RegistrationFailed(AssertionError):
    pass


class Kubelet:
    def __init__(self, kubelet_dir: Path, *, speaks: tuple[str, ...] = ("v1", "v1beta1")):
        self.dir = kubelet_dir
        self.speaks = speaks
        self.version = ""
        self.info: Any = None
        self.channel: grpc.Channel | None = None
        self.stub: Any = None
        self.pb2: Any = None

    @property
    def registration_socket(self) -> Path:
        return self.dir / "plugins_registry" / f"{DRIVER_NAME}-reg.sock"

    def register(self, timeout: float = 20) -> Any:
        """Wait for the registration socket, then register the plugin as the kubelet does."""
        deadline = time.monotonic() + timeout
        while not self.registration_socket.exists():
            if time.monotonic() > deadline:
                raise RegistrationFailed(f"no registration socket at {self.registration_socket}")
            time.sleep(0.05)
        with grpc.insecure_channel(f"unix://{self.registration_socket}") as channel:
            registration = registration_pb2_grpc.RegistrationStub(channel)
            info = registration.GetInfo(registration_pb2.InfoRequest(), timeout=5)
            error = self._check(info)
            registration.NotifyRegistrationStatus(
                registration_pb2.RegistrationStatus(plugin_registered=not error, error=error),
                timeout=5,
            )
        if error:
            raise RegistrationFailed(error)
        self.info = info
        self.channel = grpc.insecure_channel(f"unix://{info.endpoint}")
        self.pb2, grpc_module = VERSIONS[self.version]
        self.stub = grpc_module.DRAPluginStub(self.channel)
        return info

    def _check(self, info: Any) -> str:
        if info.type != "DRAPlugin":
            return f"plugin type {info.type!r} is not DRAPlugin"
        if info.name != DRIVER_NAME:
            return f"plugin name {info.name!r} is not the socket's driver {DRIVER_NAME!r}"
        if not info.endpoint or not Path(info.endpoint).is_absolute():
            return f"endpoint {info.endpoint!r} is not an absolute socket path"
        offered = [v.removesuffix(".DRAPlugin") for v in info.supported_versions]
        chosen = [v for v in self.speaks if v in offered]
        if not chosen:
            return f"none of the versions {list(info.supported_versions)} is supported"
        self.version = chosen[0]
        return ""

    def close(self) -> None:
        if self.channel is not None:
            self.channel.close()

    def restart(self, kubeconfig: Path, node: str) -> list[str]:
        """A kubelet restart: connections dropped, the node's slices wiped, registered
        again; returns the names of the slices it deleted."""
        self.close()
        wiped = wipe_node_slices(kubeconfig, node)
        self.register()
        return wiped

    # --- the DRA service ------------------------------------------------------------------
    def _claims(self, claims: list[PodClaim]) -> list[Any]:
        return [self.pb2.Claim(namespace=c.namespace, uid=c.uid, name=c.name) for c in claims]

    def prepare(self, *claims: PodClaim) -> dict[str, Any]:
        """claim uid → {"error": str, "devices": [{pool, device, cdi_device_ids, requests}]}."""
        request = self.pb2.NodePrepareResourcesRequest(claims=self._claims(list(claims)))
        answer = self.stub.NodePrepareResources(request, timeout=CALL_TIMEOUT_S)
        return {
            uid: {
                "error": entry.error,
                "devices": [
                    {
                        "pool": d.pool_name,
                        "device": d.device_name,
                        "cdi_device_ids": list(d.cdi_device_ids),
                        "requests": list(d.request_names),
                    }
                    for d in entry.devices
                ],
            }
            for uid, entry in answer.claims.items()
        }

    def unprepare(self, *claims: PodClaim) -> dict[str, str]:
        request = self.pb2.NodeUnprepareResourcesRequest(claims=self._claims(list(claims)))
        answer = self.stub.NodeUnprepareResources(request, timeout=CALL_TIMEOUT_S)
        return {uid: entry.error for uid, entry in answer.claims.items()}

    def prepare_until_ready(
        self, claim: PodClaim, timeout: float = 30, interval: float = 0.1
    ) -> dict[str, Any]:
        """Ask again while the claim answers an error, as the kubelet's pod sync does."""
        deadline = time.monotonic() + timeout
        while True:
            result = self.prepare(claim)[claim.uid]
            if not result["error"] or time.monotonic() > deadline:
                return result
            time.sleep(interval)


def wipe_node_slices(kubeconfig: Path, node: str) -> list[str]:
    """Delete every ResourceSlice whose `spec.nodeName` is `node`, as the kubelet does at its
    start (it cannot know which drivers still serve the node until they register again)."""
    api = client.CustomObjectsApi(config.new_client_from_config(config_file=str(kubeconfig)))
    version = ResourceApi(api.api_client).version
    listed = api.list_cluster_custom_object(
        "resource.k8s.io", version, "resourceslices", field_selector=f"spec.nodeName={node}"
    )
    names = [
        item["metadata"]["name"]
        for item in listed.get("items") or []
        if item["spec"].get("nodeName") == node  # not every server filters by this field
    ]
    for name in names:
        api.delete_cluster_custom_object("resource.k8s.io", version, "resourceslices", name)
    api.api_client.close()
    return names
