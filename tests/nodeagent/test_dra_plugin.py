"""The agent's DRA kubelet plugin, driven by a kubelet stand-in over the real gRPC contract
(unix sockets), against the Kubernetes API mock in both `resource.k8s.io` versions.

These tests cover the plugin alone: registration, the tray's ResourceSlice, and the claims
it refuses before the portal is asked. The way through the portal (admission, joining,
the daemon, CDI) is in tests/kube/test_dra_e2e.py, with real agents and a real server,
upstream's control plane and the kubelet's own DRA code.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeagent.client import PortalClient
from nodeagent.config import Paths
from nodeagent.dra import DRIVER_NAME
from nodeagent.dra.checkpoint import ClaimState
from nodeagent.dra.claims import ClaimDriver, NotTold, Refused, Serving
from nodeagent.dra.kubeapi import KubeError, ResourceApi, api_client
from nodeagent.dra.plugin import DraPlugin, PluginConfig
from nodeagent.dra.server import ClaimRef
from testbed.emulator.tray import TrayFacts, prepare_tray, reboot_tray
from testbed.kube import kubemock
from testbed.kube.kubelet import Kubelet, PodClaim, RegistrationFailed
from testbed.kube.schemas import assert_valid_dra, dra_errors
from tests.support.cdi import assert_valid_cdi, resolve

CLIQUE = {"cluster_uuid": "6f0b9b84-4c1e-4a8e-9d9e-2f1f3c0d9a11", "clique_id": 3}
FACTS = {**CLIQUE, "gpus": [{"index": i} for i in range(4)]}


class IdleTray:
    """The agent loop's side, for a tray that serves nothing."""

    def nudge(self) -> None:
        pass

    def wait_serving(self, domain_uid: str, timeout: float):
        return None


@pytest.fixture(params=["v1", "v1beta1"])
def cluster(request, tmp_path) -> Iterator[kubemock.KubeMock]:
    with kubemock.running() as mock:
        mock.resource_version = request.param
        for plural in ("resourceslices", "resourceclaims"):
            mock.validators[plural] = dra_errors  # what that Kubernetes release accepts
        mock.put_namespace("team-a")
        yield mock


@pytest.fixture
def tmp_path() -> Iterator[Path]:
    """Short: a unix socket's path must fit in 107 bytes (pytest's tmp_path may not)."""
    with tempfile.TemporaryDirectory(prefix="dra-") as path:
        yield Path(path)


@pytest.fixture
def plugin(cluster, tmp_path) -> Iterator[DraPlugin]:
    with running_plugin(cluster, tmp_path) as made:
        yield made


@contextlib.contextmanager
def running_plugin(cluster, root: Path) -> Iterator[DraPlugin]:
    config = PluginConfig(
        kubelet_dir=root / "kubelet",
        kubeconfig=cluster.write_kubeconfig(root / "kubeconfig"),
        cdi_dir=root / "cdi",
        state_dir=root / "state",
        prepare_wait_s=0.1,
    )
    client = PortalClient("http://127.0.0.1:9")  # never joined: no token
    made = DraPlugin(config, node_name="tray-1", root=root, client=client, tray=IdleTray())
    made.start()
    try:
        yield made
    finally:
        made.stop()
        client.close()


def test_the_kubelet_registers_the_plugin_with_both_dra_versions(plugin, tmp_path):
    kubelet = Kubelet(tmp_path / "kubelet")
    info = kubelet.register()
    assert info.type == "DRAPlugin" and info.name == DRIVER_NAME
    assert list(info.supported_versions) == ["v1.DRAPlugin", "v1beta1.DRAPlugin"]
    assert info.endpoint == str(tmp_path / "kubelet/plugins" / DRIVER_NAME / "dra.sock")
    assert plugin.server.registration.registered.wait(5)
    kubelet.close()


def test_a_kubelet_speaking_only_v1beta1_gets_v1beta1(plugin, tmp_path):
    kubelet = Kubelet(tmp_path / "kubelet", speaks=("v1beta1",))
    kubelet.register()
    assert kubelet.version == "v1beta1"
    claim = PodClaim("team-a", str(uuid.uuid4()), "gone")
    assert "not found" in kubelet.prepare(claim)[claim.uid]["error"]
    kubelet.close()


def test_a_kubelet_speaking_no_version_of_ours_refuses_and_says_so(plugin, tmp_path):
    kubelet = Kubelet(tmp_path / "kubelet", speaks=("v1alpha4",))
    with pytest.raises(RegistrationFailed, match="none of the versions"):
        kubelet.register()
    assert not plugin.server.registration.registered.is_set()
    assert "none of the versions" in plugin.server.registration.error


def test_the_tray_publishes_one_valid_slice_and_keeps_it_current(plugin, cluster):
    plugin.publish_slice(FACTS)
    name = f"tray-1-{DRIVER_NAME}"
    published = cluster.get("resourceslices", name)
    assert_valid_dra(published)
    version = cluster.resource_version
    assert published["apiVersion"] == f"resource.k8s.io/{version}"
    spec = published["spec"]
    assert spec["driver"] == DRIVER_NAME and spec["nodeName"] == "tray-1"
    assert spec["pool"] == {"name": "tray-1", "generation": 1, "resourceSliceCount": 1}
    (device,) = spec["devices"]
    attributes = device["attributes"] if version == "v1" else device["basic"]["attributes"]
    assert device["name"] == "channel"
    assert attributes["clique"] == {"string": f"{CLIQUE['cluster_uuid']}.3"}
    plugin.publish_slice(FACTS)  # unchanged: no write at all
    assert cluster.count("PUT", "resourceslices") == 0

    plugin.publish_slice({**FACTS, "clique_id": 4})  # the tray moved to another clique
    moved = cluster.get("resourceslices", name)
    assert_valid_dra(moved)
    assert moved["spec"]["pool"]["generation"] == 2

    plugin.stop()  # the agent stops: its slice stays, as NVIDIA's plugin leaves its own
    assert cluster.get("resourceslices", name)["spec"] == moved["spec"]


def test_a_slice_the_api_server_refuses_is_tried_again_later(plugin, cluster):
    cluster.fail_next("POST", "resourceslices", status=503, times=3)
    plugin.publish_slice(FACTS)  # refused: logged, the agent's cycle goes on
    assert plugin.slice_retry_at > 0
    # Refused again until the faults are used up (by this cycle's retry or by the slice's
    # watch, which publishes a wanted slice it finds missing): then it is there.
    for _ in range(3):
        plugin.slice_retry_at = 0  # the retry delay has passed
        plugin.publish_slice(FACTS)
    assert wait_for_slice(cluster, f"tray-1-{DRIVER_NAME}", 5) is not None
    assert cluster.count("POST", "resourceslices") == 4  # 3 refused, 1 created


def claim_object(
    name: str, *, pool: str = "tray-1", config: bool = True, **parameters: object
) -> dict:
    devices: dict = {
        "results": [
            {"request": "channel", "driver": DRIVER_NAME, "pool": pool, "device": "channel"}
        ]
    }
    if config:
        devices["config"] = [
            {
                "source": "FromClaim",
                "requests": ["channel"],
                "opaque": {
                    "driver": DRIVER_NAME,
                    "parameters": {
                        "apiVersion": "portal.domains/v1",
                        "kind": "ComputeDomainChannelConfig",
                        "domainID": str(uuid.uuid4()),
                        "allocationMode": "Single",
                        **parameters,
                    },
                },
            }
        ]
    return {
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {"devices": {"requests": []}},
        "status": {"allocation": {"devices": devices}},
    }


@pytest.mark.parametrize(
    ("claim", "error"),
    [
        (claim_object("elsewhere", pool="tray-2"), "is not allocated to a device of driver"),
        (claim_object("bare", config=False), "carries no ComputeDomainChannelConfig"),
        # NVIDIA's unknown-field test: its claim, in our driver's name.
        (
            claim_object("typo", unexpectedField="foo"),
            "is not a portal.domains/v1 ComputeDomainChannelConfig: strict decoding error: "
            'unknown field "unexpectedField"',
        ),
        (claim_object("other-kind", kind="ComputeDomainDaemonConfig"), "kind"),
        (claim_object("no-domain", domainID=""), "domainID must name the ComputeDomain"),
        (claim_object("mode", allocationMode="Some"), "allocationMode must be one of"),
        (claim_object("ok"), "has not joined the portal yet"),
    ],
)
def test_a_claim_it_cannot_serve_is_refused_with_a_reason_and_nothing_is_left(
    plugin, cluster, tmp_path, claim, error
):
    stored = cluster.apply(claim)
    kubelet = Kubelet(tmp_path / "kubelet")
    kubelet.register()
    ref = PodClaim("team-a", stored["metadata"]["uid"], stored["metadata"]["name"])
    answer = kubelet.prepare(ref)[ref.uid]
    assert error in answer["error"] and answer["devices"] == []
    assert answer["error"].startswith(f"ResourceClaim team-a/{ref.name}: ")
    assert list((tmp_path / "cdi").glob("*")) == []
    assert kubelet.unprepare(ref) == {ref.uid: ""}  # nothing to undo, and idempotent
    assert plugin.driver.prepared() == {}
    kubelet.close()


def test_a_claim_recreated_under_the_same_name_is_not_the_one_asked_for(plugin, cluster, tmp_path):
    cluster.apply(claim_object("again"))
    kubelet = Kubelet(tmp_path / "kubelet")
    kubelet.register()
    stale = PodClaim("team-a", str(uuid.uuid4()), "again")
    assert "deleted and created again" in kubelet.prepare(stale)[stale.uid]["error"]
    kubelet.close()


def test_an_api_server_without_dra_is_named_in_the_error(tmp_path):
    with kubemock.running() as mock:
        mock.resource_version = "v1alpha3"
        api = ResourceApi(api_client(mock.write_kubeconfig(tmp_path / "kc")))
        with pytest.raises(KubeError, match=r"DRA needs Kubernetes 1\.32"):
            api.discover()


class ServingTray:
    """The agent's side for a tray whose daemon serves every domain it is asked for."""

    node_name = "tray-1"

    def __init__(self, root: Path) -> None:
        self.root = root
        self.admitted: list[str] = []

    def admit(self, claim, domain_uid: str) -> dict:
        self.admitted.append(claim.uid)
        return {"domain_name": "team-a/train"}

    def leave(self, claim) -> None:
        pass

    def wait_serving(self, domain_uid: str, timeout: float) -> Serving:
        return Serving(domain_uid, "READY", [0], 237, "Single", 0o666, None)


def test_after_a_reboot_a_claim_is_prepared_again_with_a_fresh_cdi_spec(cluster, tmp_path):
    """The checkpoint survives a reboot; /var/run/cdi and the channel nodes do not."""
    prepare_tray(
        tmp_path, TrayFacts(hostname="tray-1", ip="127.0.0.1", cluster_uuid="", clique_id=0)
    )
    api = ResourceApi(api_client(cluster.write_kubeconfig(tmp_path / "kubeconfig")))
    stored = cluster.apply(claim_object("train-0"))
    ref = ClaimRef("team-a", stored["metadata"]["uid"], "train-0")
    paths = Paths(tmp_path)
    tray = ServingTray(tmp_path)

    def driver() -> ClaimDriver:
        return ClaimDriver(
            tray, api, state_dir=paths.state_dir, cdi_dir=paths.cdi_run_dir,
            boot_id_file=paths.boot_id,
        )  # fmt: skip

    first = driver()
    (device,) = first.prepare([ref])[ref.uid].devices
    spec_path = first.cdi_path(ref.uid)
    assert spec_path.exists()
    assert driver().prepare([ref])[ref.uid].devices == [device]  # an agent restart: cached
    assert tray.admitted == [ref.uid]

    reboot_tray(tmp_path)
    assert not spec_path.exists()
    again = driver()  # the agent starts after the reboot
    answer = again.prepare([ref])[ref.uid]
    assert answer.error == "" and answer.devices == [device]
    assert spec_path.exists(), "the CDI id returned must resolve"
    assert tray.admitted == [ref.uid, ref.uid]  # asked again: the daemon may be new too
    assert driver().prepare([ref])[ref.uid].devices == [device]  # cached again, same boot
    assert tray.admitted == [ref.uid, ref.uid]


def test_a_claim_prepared_before_a_reboot_is_still_given_back_by_unprepare(cluster, tmp_path):
    prepare_tray(
        tmp_path, TrayFacts(hostname="tray-1", ip="127.0.0.1", cluster_uuid="", clique_id=0)
    )
    api = ResourceApi(api_client(cluster.write_kubeconfig(tmp_path / "kubeconfig")))
    stored = cluster.apply(claim_object("train-1"))
    ref = ClaimRef("team-a", stored["metadata"]["uid"], "train-1")
    paths = Paths(tmp_path)
    left: list[str] = []
    tray = ServingTray(tmp_path)
    tray.leave = lambda claim: left.append(claim.uid)  # type: ignore[method-assign]
    kwargs = {"state_dir": paths.state_dir, "cdi_dir": paths.cdi_run_dir,
              "boot_id_file": paths.boot_id}  # fmt: skip
    ClaimDriver(tray, api, **kwargs).prepare([ref])
    reboot_tray(tmp_path)
    after = ClaimDriver(tray, api, **kwargs)
    assert after.unprepare([ref]) == {ref.uid: ""}
    assert left == [ref.uid]  # the portal hears of it: the tray leaves the domain
    assert after.prepared() == {}


def wait_until(check, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def wait_for_slice(cluster, name: str, timeout: float) -> dict | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = cluster.get("resourceslices", name)
        if found is not None:
            return found
        time.sleep(0.05)
    return None


def test_a_kubelet_restart_wipes_the_slice_and_the_tray_publishes_it_again_unasked(
    plugin, cluster, tmp_path
):
    kubelet = Kubelet(tmp_path / "kubelet")
    kubelet.register()
    plugin.publish_slice(FACTS)
    name = f"tray-1-{DRIVER_NAME}"
    before = cluster.get("resourceslices", name)
    cluster.apply({**before, "metadata": {"name": "tray-1-other.example.com"}})  # another driver
    wiped = kubelet.restart(tmp_path / "kubeconfig", "tray-1")
    assert sorted(wiped) == sorted([name, "tray-1-other.example.com"])
    back = wait_for_slice(cluster, name, 5)  # the plugin's watch saw the deletion
    assert back is not None, "the tray's slice was not published again"
    assert back["spec"] == before["spec"]
    # The agent's own cycle, facts unchanged, finds nothing more to do.
    plugin.publish_slice(FACTS)
    assert cluster.count("POST", "resourceslices") == 2  # created, and created again: no more
    assert cluster.get("resourceslices", "tray-1-other.example.com") is None  # not ours
    kubelet.close()


def test_a_slice_deleted_while_the_watch_was_down_is_found_by_the_relist(cluster, tmp_path):
    cluster.max_watch_seconds = 0.3  # the server ends every watch soon; the agent watches again
    watches = r"resourceslices\?.*watch="
    with running_plugin(cluster, tmp_path) as plugin:
        plugin.publish_slice(FACTS)
        name = f"tray-1-{DRIVER_NAME}"
        assert wait_until(lambda: cluster.count("GET", watches) >= 2, 5), "not watching"
        # Every new watch fails for a while (the API server restarting): a deletion then is
        # seen by the list that follows.
        cluster.fail_next("GET", watches, status=503, times=1000)
        time.sleep(0.6)
        cluster.delete("resourceslices", name)
        cluster.faults.clear()
        assert wait_for_slice(cluster, name, 5) is not None


def test_a_stopped_agent_leaves_its_slice_and_republishes_it_no_more(plugin, cluster):
    """The kubelet's own wipe of a plugin that stays unregistered removes the slice of an
    agent that is really gone: the stopped agent's watch must not publish it again."""
    plugin.publish_slice(FACTS)
    name = f"tray-1-{DRIVER_NAME}"
    plugin.stop()
    assert cluster.get("resourceslices", name) is not None
    cluster.delete("resourceslices", name)  # the kubelet's delayed wipe
    time.sleep(1)  # the watch saw the deletion
    assert cluster.get("resourceslices", name) is None


class SlowTray(ServingTray):
    """A tray whose daemon turns READY `ready_in` seconds from now, and whose portal fails
    `failures` admissions first."""

    def __init__(self, root: Path, *, ready_in: float = 0.0, failures: int = 0) -> None:
        super().__init__(root)
        self.ready_at = time.monotonic() + ready_in
        self.failures = failures
        self.waits: list[float] = []  # how long each call let the daemon take to be ready

    def admit(self, claim, domain_uid: str) -> dict:
        if self.failures:
            self.failures -= 1
            raise Refused("the portal did not answer (503); the kubelet retries")
        return super().admit(claim, domain_uid)

    def wait_serving(self, domain_uid: str, timeout: float) -> Serving:
        self.waits.append(timeout)
        time.sleep(max(0.0, min(timeout, self.ready_at - time.monotonic())))
        state = "READY" if time.monotonic() >= self.ready_at else "WAITING_FOR_PEERS"
        return Serving(domain_uid, state, [0], 237, "Single", 0o666, None)


def slow_driver(cluster, tmp_path: Path, tray: ServingTray, **kwargs) -> ClaimDriver:
    api = ResourceApi(api_client(cluster.write_kubeconfig(tmp_path / "kubeconfig")))
    paths = Paths(tmp_path)
    return ClaimDriver(tray, api, state_dir=paths.state_dir, cdi_dir=paths.cdi_run_dir, **kwargs)


def test_a_daemon_ready_within_the_kubelets_call_is_served_in_that_call(cluster, tmp_path):
    """NVIDIA's driver keeps trying inside the call for up to 45 s; an answer "not yet" costs
    the pod the kubelet's 10-15 s backoff."""
    stored = cluster.apply(claim_object("train-2"))
    ref = ClaimRef("team-a", stored["metadata"]["uid"], "train-2")
    driver = slow_driver(cluster, tmp_path, SlowTray(tmp_path, ready_in=3))
    answer = driver.prepare([ref])[ref.uid]
    assert answer.error == "" and answer.devices


def test_a_portal_briefly_away_is_asked_again_within_the_call(cluster, tmp_path):
    stored = cluster.apply(claim_object("train-3"))
    ref = ClaimRef("team-a", stored["metadata"]["uid"], "train-3")
    tray = SlowTray(tmp_path, failures=2)
    answer = slow_driver(cluster, tmp_path, tray).prepare([ref])[ref.uid]
    assert answer.error == "" and tray.admitted == [ref.uid]


def test_a_prepare_that_cannot_pass_answers_at_once_and_one_that_lasts_at_the_deadline(
    cluster, tmp_path
):
    tray = SlowTray(tmp_path, ready_in=3600)
    driver = slow_driver(cluster, tmp_path, tray, wait_s=1.5)
    gone = ClaimRef("team-a", str(uuid.uuid4()), "never-made")
    assert "not found" in driver.prepare([gone])[gone.uid].error
    assert cluster.count("GET", "resourceclaims/never-made") == 1  # a refusal: not asked again
    assert tray.waits == []  # nor the tray
    stored = cluster.apply(claim_object("train-4"))
    stuck = ClaimRef("team-a", stored["metadata"]["uid"], "train-4")
    assert "is not ready for ComputeDomain" in driver.prepare([stuck])[stuck.uid].error
    # The daemon was given what was left of the call's deadline, once: not "not yet" at
    # once, and not past the deadline (it stays inside the kubelet's own call timeout).
    assert len(tray.waits) == 1 and 0 < tray.waits[0] <= 1.5, tray.waits


class LedgerTray(ServingTray):
    """A tray serving a domain whose channel, in the portal's ledger, is 5 (Single) or every
    channel from 1 to 3 (All)."""

    def __init__(self, root: Path, mode: str) -> None:
        super().__init__(root)
        self.mode = mode

    def wait_serving(self, domain_uid: str, timeout: float) -> Serving:
        channels = [5] if self.mode == "Single" else [1, 2, 3]
        return Serving(domain_uid, "READY", channels, 237, self.mode, 0o666, None)


def test_in_single_mode_the_container_sees_channel0_as_with_nvidias_driver(cluster, tmp_path):
    stored = cluster.apply(claim_object("nvbandwidth-0"))
    ref = ClaimRef("team-a", stored["metadata"]["uid"], "nvbandwidth-0")
    driver = slow_driver(cluster, tmp_path, LedgerTray(tmp_path, "Single"))
    (device,) = driver.prepare([ref])[ref.uid].devices
    spec = json.loads(driver.cdi_path(ref.uid).read_text())
    assert_valid_cdi(spec)
    # The oldest version CDI's rules allow, so that runtimes that read older ones take it:
    # 0.3.0, unless the device's name (the claim's uid) starts with a digit (0.5.0).
    assert spec["cdiVersion"] == ("0.3.0" if ref.uid[0].isalpha() else "0.5.0")
    assert "annotations" not in spec
    edits = resolve([driver.cdi_dir], device.cdi_device_ids[0])["containerEdits"]
    # What NVIDIA's examples list in the container: /dev/nvidia-caps-imex-channels/channel0,
    # minor 0, made by the runtime in the container (nothing of the host's named).
    assert edits["deviceNodes"] == [
        {
            "path": "/dev/nvidia-caps-imex-channels/channel0",
            "type": "c",
            "major": 237,
            "minor": 0,
            "permissions": "rw",
            "fileMode": 0o666,
        }
    ]


def test_in_all_mode_the_container_sees_every_channel_of_the_domain(cluster, tmp_path):
    stored = cluster.apply(claim_object("all-0"))
    ref = ClaimRef("team-a", stored["metadata"]["uid"], "all-0")
    driver = slow_driver(cluster, tmp_path, LedgerTray(tmp_path, "All"))
    (device,) = driver.prepare([ref])[ref.uid].devices
    nodes = resolve([driver.cdi_dir], device.cdi_device_ids[0])["containerEdits"]["deviceNodes"]
    assert [(n["path"], n["minor"]) for n in nodes] == [
        (f"/dev/nvidia-caps-imex-channels/channel{i}", i) for i in (1, 2, 3)
    ]
    assert nodes[0]["hostPath"] == str(tmp_path / "dev/nvidia-caps-imex-channels/channel1")
    spec = json.loads(driver.cdi_path(ref.uid).read_text())
    assert spec["cdiVersion"] == "0.5.0"  # hostPath in a device node came with 0.5.0


def test_a_checkpointed_claim_whose_resourceclaim_is_gone_is_unprepared(cluster, tmp_path):
    """The kubelet lost track of it (a reboot while its pod was deleted, a prepare that never
    finished): the portal must not hold the claim, and the tray, for good."""
    left: list[str] = []
    tray = ServingTray(tmp_path)
    tray.leave = lambda claim: left.append(claim.uid)  # type: ignore[method-assign]
    driver = slow_driver(cluster, tmp_path, tray)
    refs = {}
    for name in ("kept", "deleted", "recreated"):
        stored = cluster.apply(claim_object(name))
        refs[name] = ClaimRef("team-a", stored["metadata"]["uid"], name)
        assert driver.prepare([refs[name]])[refs[name].uid].error == ""
    cluster.delete("resourceclaims", "deleted", "team-a")
    cluster.delete("resourceclaims", "recreated", "team-a")
    cluster.apply(claim_object("recreated"))  # same name, another claim: ours is gone

    cluster.fail_next("GET", "resourceclaims", status=503)
    assert driver.drop_stale() == []  # the API server away: nothing undone, tried later
    assert sorted(driver.drop_stale()) == sorted([refs["deleted"].uid, refs["recreated"].uid])
    assert sorted(left) == sorted([refs["deleted"].uid, refs["recreated"].uid])
    assert set(driver.prepared()) == {refs["kept"].uid}
    assert not driver.cdi_path(refs["deleted"].uid).exists()
    assert driver.cdi_path(refs["kept"].uid).exists()
    assert driver.drop_stale() == []  # idempotent


class PlainTray(ServingTray):
    """A GPU node in no NVLink clique: the portal admits the claim with index -1."""

    def admit(self, claim, domain_uid: str) -> dict:
        self.admitted.append(claim.uid)
        return {"domain_name": "team-a/train", "index": -1, "joined": False}

    def wait_serving(self, domain_uid: str, timeout: float) -> Serving:
        raise AssertionError("no IMEX daemon serves a tray in no clique: nothing to wait for")


def test_a_tray_in_no_clique_prepares_the_claim_without_a_channel(cluster, tmp_path):
    """As NVIDIA's driver does on a node that is not fabric-attached: the claim is prepared
    (the pod starts), with no CDI device and no IMEX channel; unprepare gives it back."""
    left: list[str] = []
    tray = PlainTray(tmp_path)
    tray.leave = lambda claim: left.append(claim.uid)  # type: ignore[method-assign]
    stored = cluster.apply(claim_object("plain-0"))
    ref = ClaimRef("team-a", stored["metadata"]["uid"], "plain-0")
    driver = slow_driver(cluster, tmp_path, tray)
    answer = driver.prepare([ref])[ref.uid]
    assert answer.error == ""
    (device,) = answer.devices
    assert device.cdi_device_ids == [] and device.device_name == "channel"
    assert not driver.cdi_path(ref.uid).exists()
    assert driver.prepare([ref])[ref.uid].devices == [device]  # asked again: the same
    assert tray.admitted == [ref.uid]
    assert driver.unprepare([ref]) == {ref.uid: ""} and left == [ref.uid]


class AwayPortalTray(ServingTray):
    """A tray whose portal is away (the web, its database or Redis) until `back` is set."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.back = True
        self.left: list[str] = []

    def admit(self, claim, domain_uid: str) -> dict:
        if not self.back:
            raise Refused("the portal is away (no answer); the kubelet retries")
        return super().admit(claim, domain_uid)

    def leave(self, claim) -> None:
        if not self.back:
            raise NotTold("no answer (connection refused)")
        self.left.append(claim.uid)


def test_unprepare_completes_from_the_checkpoint_while_the_portal_is_away(cluster, tmp_path):
    """A pod's end never waits for the portal: the claim is let go of on the tray at once,
    kept as `leaving`, and the portal is told when it answers again (then a domain that
    follows its workload lets the tray go). New claims wait for the portal meanwhile."""
    tray = AwayPortalTray(tmp_path)
    stored = cluster.apply(claim_object("w-0"))
    ref = ClaimRef("team-a", stored["metadata"]["uid"], "w-0")
    driver = slow_driver(cluster, tmp_path, tray, wait_s=0.5)
    assert driver.prepare([ref])[ref.uid].error == ""
    tray.back = False
    assert driver.unprepare([ref]) == {ref.uid: ""}
    assert not driver.cdi_path(ref.uid).exists()
    assert driver.prepared()[ref.uid].state == ClaimState.LEAVING and driver.leaving() == 1
    assert driver.unprepare([ref]) == {ref.uid: ""}  # the kubelet asks again: the same
    assert driver.tell_portal() == [] and tray.left == []  # still away
    assert driver.drop_stale() == []  # nothing to undo: unprepared already

    newcomer = cluster.apply(claim_object("w-1"))
    other = ClaimRef("team-a", newcomer["metadata"]["uid"], "w-1")
    assert "the portal is away" in driver.prepare([other])[other.uid].error

    restarted = slow_driver(cluster, tmp_path, tray)  # an agent restart meanwhile
    assert restarted.leaving() == 1
    tray.back = True
    assert restarted.tell_portal() == [ref.uid] and tray.left == [ref.uid]
    assert restarted.leaving() == 0 and ref.uid not in restarted.prepared()
