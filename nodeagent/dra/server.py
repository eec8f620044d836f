# SPDX-License-Identifier: Apache-2.0
"""The plugin's two gRPC servers on unix sockets, as the kubelet expects them.

- **Registration** on `<registry dir>/<driver>-reg.sock` (the kubelet watches that
  directory): `GetInfo` says "DRAPlugin", the driver name, the service socket and the
  services served there (`v1.DRAPlugin`, `v1beta1.DRAPlugin`); the kubelet answers with
  `NotifyRegistrationStatus`.
- **DRAPlugin** v1 and v1beta1 on `<plugin dir>/dra.sock`: both versions have the same
  messages, so one `Driver` answers both.

The servers only translate between protobuf and the driver's plain types; what a prepare
means is `claims.ClaimDriver`'s business.
"""

from __future__ import annotations

import logging
import threading
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import grpc

from nodeagent import metrics
from nodeagent.dra import DRIVER_NAME
from nodeagent.dra.pb import (
    dra_v1_pb2,
    dra_v1_pb2_grpc,
    dra_v1beta1_pb2,
    dra_v1beta1_pb2_grpc,
    registration_pb2,
    registration_pb2_grpc,
)
from nodeagent.files import remove

log = logging.getLogger("nodeagent.dra")

SUPPORTED_VERSIONS = ["v1.DRAPlugin", "v1beta1.DRAPlugin"]
SUN_PATH_MAX = 107  # a unix socket's path, without the terminating NUL


@dataclass(frozen=True)
class ClaimRef:
    namespace: str
    uid: str
    name: str


@dataclass(frozen=True)
class PreparedDevice:
    pool_name: str
    device_name: str
    cdi_device_ids: list[str]
    request_names: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class PrepareResult:
    devices: list[PreparedDevice] = field(default_factory=list)
    error: str = ""


class Driver(Protocol):
    def prepare(self, claims: list[ClaimRef]) -> dict[str, PrepareResult]: ...

    def unprepare(self, claims: list[ClaimRef]) -> dict[str, str]: ...


class MeteredDriver:
    """A driver with each prepare timed and its refused claims counted (the agent's
    /metrics)."""

    def __init__(self, driver: Driver) -> None:
        self.driver = driver

    def prepare(self, claims: list[ClaimRef]) -> dict[str, PrepareResult]:
        with metrics.PREPARE.time():
            results = self.driver.prepare(claims)
        metrics.PREPARE_ERRORS.inc(sum(1 for r in results.values() if r.error))
        return results

    def unprepare(self, claims: list[ClaimRef]) -> dict[str, str]:
        return self.driver.unprepare(claims)


def _claims(request: Any) -> list[ClaimRef]:
    return [ClaimRef(c.namespace, c.uid, c.name) for c in request.claims]


def _servicer(pb2: Any, base: type, driver: Driver) -> Any:
    """A DRAPlugin servicer for one version's generated module."""

    class Servicer(base):  # type: ignore[misc]
        def NodePrepareResources(self, request: Any, context: Any) -> Any:
            answer = pb2.NodePrepareResourcesResponse()
            for uid, result in driver.prepare(_claims(request)).items():
                entry = answer.claims[uid]
                entry.error = result.error
                for device in result.devices:
                    entry.devices.add(
                        request_names=device.request_names,
                        pool_name=device.pool_name,
                        device_name=device.device_name,
                        cdi_device_ids=device.cdi_device_ids,
                    )
            return answer

        def NodeUnprepareResources(self, request: Any, context: Any) -> Any:
            answer = pb2.NodeUnprepareResourcesResponse()
            for uid, error in driver.unprepare(_claims(request)).items():
                answer.claims[uid].error = error
            return answer

    return Servicer()


class Registration(registration_pb2_grpc.RegistrationServicer):
    def __init__(self, endpoint: Path) -> None:
        self.endpoint = endpoint
        self.registered = threading.Event()
        self.error = ""

    def GetInfo(self, request: Any, context: Any) -> Any:
        return registration_pb2.PluginInfo(
            type="DRAPlugin",
            name=DRIVER_NAME,
            endpoint=str(self.endpoint),
            supported_versions=SUPPORTED_VERSIONS,
        )

    def NotifyRegistrationStatus(self, request: Any, context: Any) -> Any:
        self.error = request.error
        if request.plugin_registered:
            self.registered.set()
            log.info("registered with the kubelet as DRA driver %s", DRIVER_NAME)
        else:
            self.registered.clear()
            log.error("the kubelet refused the registration: %s", request.error or "(no reason)")
        return registration_pb2.RegistrationStatusResponse()


class PluginServer:
    """Both servers; `start()` binds the sockets, `stop()` closes them and removes the files."""

    def __init__(self, driver: Driver, *, registry_dir: Path, plugin_dir: Path) -> None:
        self.driver = driver
        self.registration_socket = registry_dir / f"{DRIVER_NAME}-reg.sock"
        self.endpoint = plugin_dir / "dra.sock"
        self.registration = Registration(self.endpoint)
        self.servers: list[grpc.Server] = []

    def start(self) -> None:
        self.endpoint.parent.mkdir(parents=True, exist_ok=True)
        self.registration_socket.parent.mkdir(parents=True, exist_ok=True)
        plugin = grpc.server(futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="dra"))
        dra_v1_pb2_grpc.add_DRAPluginServicer_to_server(
            _servicer(dra_v1_pb2, dra_v1_pb2_grpc.DRAPluginServicer, self.driver), plugin
        )
        dra_v1beta1_pb2_grpc.add_DRAPluginServicer_to_server(
            _servicer(dra_v1beta1_pb2, dra_v1beta1_pb2_grpc.DRAPluginServicer, self.driver),
            plugin,
        )
        # The service socket first: once the registration socket exists, the kubelet may
        # dial the endpoint at once.
        self._serve(plugin, self.endpoint)
        reg = grpc.server(futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="reg"))
        registration_pb2_grpc.add_RegistrationServicer_to_server(self.registration, reg)
        self._serve(reg, self.registration_socket)
        log.info("DRA plugin serving %s (registration %s)", self.endpoint, self.registration_socket)

    def _serve(self, server: grpc.Server, path: Path) -> None:
        if len(str(path).encode()) > SUN_PATH_MAX:
            raise ValueError(
                f"unix socket path {path} is longer than {SUN_PATH_MAX} bytes: give the kubelet "
                "directory a shorter path"
            )
        remove(path)  # a socket file left by an earlier process
        server.add_insecure_port(f"unix://{path}")
        server.start()
        self.servers.append(server)

    def stop(self) -> None:
        # The registration socket goes first, so the kubelet stops calling us.
        for server in reversed(self.servers):
            server.stop(grace=1).wait(2)
        self.servers.clear()
        remove(self.registration_socket)
        remove(self.endpoint)
