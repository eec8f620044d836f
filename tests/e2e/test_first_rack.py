"""A first real rack: each tray run as on real hardware, one agent process per tray (and, in
the Kubernetes layout, the IMEX runner beside it), against a real server and worker.

What a real GB200 tray does to an agent: a restart of the agent's process (crash, OOM kill,
rolling update) while the tray serves a domain, NVML that cannot be loaded, the host's own
`nvidia-imex.service`, a fabric registration still in progress at boot.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import jsonschema
import pytest
from django.test import Client

from agentwire.messages import STATUS_REPORT_SCHEMA, ConditionType
from domains.audit.events import Actor
from domains.audit.models import Event
from domains.computedomains.fabric import topology_snapshot
from domains.computedomains.models import Phase
from domains.inventory.models import Node, NodeCondition
from domains.placement.model import TrayStatus
from domains.tenancy.tokens import token_create
from testbed import factories
from testbed.agents import wait_for
from testbed.emulator.tray import daemon_starts, set_faults
from testbed.trays import Tray, facts_of, trays_of
from tests.e2e.conftest import phase_of, release_domain, request_domain, verbs

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

IP_PREFIX = factories.tray_ip_prefix(7)  # this module's loopback range


@pytest.fixture
def nodes(transactional_db) -> list[Node]:
    (rack,) = factories.make_racks("2", ip_prefix=IP_PREFIX)
    return list(Node.objects.filter(rack=rack).order_by("slot"))


@pytest.fixture
def operator_api(transactional_db, portal) -> Iterator[httpx.Client]:
    user = factories.make_user("e2e-operator", staff=True)
    _, raw = token_create(actor=Actor.for_user(user), user=user, name="e2e-operator")
    client = httpx.Client(
        base_url=f"{portal}/api/v1", headers={"Authorization": f"Bearer {raw}"}, timeout=30
    )
    yield client
    client.close()


def tray_status(hostname: str) -> str:
    return next(
        t.status for c in topology_snapshot().cliques for t in c.trays if t.hostname == hostname
    )


def conditions(operator_api: httpx.Client, hostname: str) -> dict[str, dict]:
    body = operator_api.get(f"/nodes/{hostname}/").json()
    return {c["type"]: c for c in body["conditions"]}


# --- item 2: the daemon outlives the agent --------------------------------------------------
@pytest.mark.parametrize("runner", [False, True], ids=["bare-metal", "kubernetes-runner"])
def test_a_killed_agent_leaves_the_daemon_serving_and_its_successor_adopts_it(
    portal, tenant_api, nodes, tmp_path, runner
):
    with trays_of(portal, nodes, tmp_path, runner=runner) as trays:
        domain = request_domain(tenant_api, "steady", 2)
        wait_for(lambda: phase_of(domain) == Phase.READY, 60, "domain Ready")
        victim, peer = trays
        pid = victim.daemon_pid()
        starts = victim.runner_status().get("starts")
        assert pid and daemon_starts(victim.root) == daemon_starts(peer.root) == 1

        victim.kill_agent()  # kill -9: a crash, an OOM kill at the memory limit, an eviction
        for _ in range(10):  # while no agent runs, the daemon serves on and nobody notices
            assert victim.daemon_pid() == pid
            assert victim.domain_status() == peer.domain_status() == "UP"
            time.sleep(0.3)
        victim.start_agent()
        wait_for(lambda: "re-adopted" in victim.log(), 30, "the new agent to re-adopt")

        # A rolling update: SIGTERM, and a new agent version whose IMEX config differs (another
        # log level): neither is a decision to stop the daemon.
        victim.kill_agent(signal.SIGTERM)
        victim.args = ("--imex-log-level", "3")
        victim.start_agent()
        wait_for(lambda: "re-adopted" in victim.log(), 30, "the next agent to re-adopt")
        wait_for(lambda: victim.health().get("ok"), 30, "the agent to report again")
        assert victim.daemon_pid() == pid
        assert peer.domain_status() == victim.domain_status() == "UP"
        # no daemon started again, by the runner or by anyone (the emulator counts instances)
        assert daemon_starts(victim.root) == daemon_starts(peer.root) == 1
        if runner:
            assert victim.runner_status()["starts"] == starts
        assert phase_of(domain) == Phase.READY
        assert "domain.degraded" not in verbs(domain)

        # Releasing is a decision: the daemon stops, the tray comes back clean.
        release_domain(tenant_api, "steady")
        wait_for(lambda: phase_of(domain) == Phase.RELEASED, 60, "domain Released")
        assert victim.daemon_pid() is None and peer.daemon_pid() is None


# --- item 4: NVIDIA's grace time -------------------------------------------------------------
def peer_cells(tray: Tray) -> set[str]:
    """How this tray's daemon sees its peers (`-N -j`: CONNECTED, RECOVERING, …)."""
    doc = json.loads(tray.ctl("-N", "-j") or "{}")
    node = next((n for n in doc.get("nodes", {}).values() if n.get("host") == tray.facts.ip), {})
    return {c.get("status", "") for c in node.get("connections", {}).values()}


@pytest.mark.slow
def test_ninety_seconds_of_cut_peer_traffic_heal_without_a_restart(
    portal, tenant_api, nodes, tmp_path
):
    """With grace time -1 (NVIDIA's default) a peer that vanishes is waited for forever:
    nothing it shared is cleaned up, and when the network comes back the domain is UP
    again with the same daemons, as if the blip never happened."""
    with trays_of(portal, nodes, tmp_path, runner=True) as trays:
        domain = request_domain(tenant_api, "blip", 2)
        wait_for(lambda: phase_of(domain) == Phase.READY, 60, "domain Ready")
        left, right = trays
        pids = [t.daemon_pid() for t in trays]
        set_faults(left.root, {"cut_peers": [right.facts.ip]})  # the network between them dies
        wait_for(lambda: peer_cells(left) == {"RECOVERING"}, 30, "the peer to be recovering")
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:  # 90 s: never cleaned up (D), never restarted
            assert peer_cells(left) == {"RECOVERING"} and peer_cells(right) == {"RECOVERING"}
            assert [t.daemon_pid() for t in trays] == pids
            time.sleep(5)
        set_faults(left.root, {})  # the network is back
        wait_for(lambda: left.domain_status() == right.domain_status() == "UP", 60, "UP")
        wait_for(lambda: phase_of(domain) == Phase.READY, 60, "the domain Ready again")
        assert [t.daemon_pid() for t in trays] == pids
        assert daemon_starts(left.root) == daemon_starts(right.root) == 1
        assert left.runner_status()["starts"] == right.runner_status()["starts"] == 1


# --- a daemon that will not stay up ----------------------------------------------------------
def test_a_daemon_that_exits_at_once_is_restarted_with_backoff_not_in_a_loop(
    portal, tenant_api, nodes, tmp_path
):
    """The installed nvidia-imex is not the loaded driver's release: it refuses to start.
    The agent says so and starts it again 1, 2, 4 … s later, not on every readiness poll."""
    with trays_of(portal, nodes[:1], tmp_path) as (tray,):
        set_faults(tray.root, {"imex_version": "570.172.08"})
        domain = request_domain(tenant_api, "refused", 1)
        member = wait_for(
            lambda: domain.members.filter(message__contains="exit code 1").first(), 30
        )
        assert "nvidia-imex exited (exit code 1)" in member.message
        # The cause is in the daemon's log, not its exit code: the report carries its end,
        # which the tray's page shows operators; the tenant reads one sentence.
        assert "\n" not in member.message
        member.node.refresh_from_db()
        error = member.node.agent_report["error"]
        assert "\nIts log ends:\n" in error
        assert "does not match the loaded NVIDIA driver" in error
        time.sleep(8)
        starts = tray.log().count("started nvidia-imex pid")
        assert 2 <= starts <= 5, starts  # ~t = 0, 1, 3, 7 s
        assert "starting it again in" in tray.log()
        assert phase_of(domain) == Phase.FORMING
        set_faults(tray.root, {})  # the matching nvidia-imex is installed
        wait_for(lambda: phase_of(domain) == Phase.READY, 90, "the domain Ready")


# --- item 1: NVML that cannot be loaded ------------------------------------------------------
def test_nvml_that_cannot_be_loaded_is_a_condition_not_a_crash_loop(
    portal, operator_api, tenant_api, nodes, tmp_path
):
    with trays_of(portal, nodes, tmp_path) as trays:
        broken = trays[0]
        broken.kill_agent(signal.SIGTERM)
        # The real NVML path: no --fabric-facts, an empty driver root, no GPU on this machine.
        broken.fabric_file = False
        broken.args = ("--driver-root", str(tmp_path / "no-driver"))
        broken.start_agent()
        found = wait_for(
            lambda: conditions(operator_api, broken.hostname).get(ConditionType.NVML_UNAVAILABLE),
            30,
            "the NVML condition",
        )
        assert found["blocking"] and "libnvidia-ml.so.1" in found["message"]
        assert "NVML Shared Library Not Found" in found["message"]
        # the tray keeps its clique (the probe could not tell) but is not offered to anyone
        node = Node.objects.get(hostname=broken.hostname)
        assert node.clique is not None and tray_status(broken.hostname) == TrayStatus.BLOCKED
        domain = request_domain(tenant_api, "needs-both", 2)
        wait_for(lambda: unschedulable(domain), 20, "the domain to wait, saying why")
        assert "held back by a tray condition" in domain.message
        assert phase_of(domain) == Phase.ADMITTED
        # ... and the agent lives, heartbeats, and says why on the tray page
        wait_for(lambda: broken.health("/healthz").get("ok"), 20, "agent alive")
        assert broken.agent is not None and broken.agent.alive()
        assert "NvmlUnavailable" in page_of(broken.hostname)

        # NVML comes back (the driver container finished): the condition clears by itself
        broken.kill_agent(signal.SIGTERM)
        broken.fabric_file, broken.args = True, ()
        broken.start_agent()
        wait_for(lambda: phase_of(domain) == Phase.READY, 60, "the queued domain placed")
        assert not NodeCondition.objects.filter(node__hostname=broken.hostname).exists()


def page_of(hostname: str) -> str:
    """The operator's tray page."""
    client = Client()
    client.force_login(factories.make_user(staff=True))
    return client.get(f"/fabric/nodes/{hostname}/").content.decode()


def unschedulable(domain) -> bool:
    domain.refresh_from_db()
    return domain.reason == "Unschedulable"


# --- item 3: the host's own IMEX service -----------------------------------------------------
def test_the_hosts_own_imex_service_holds_the_tray_back(portal, operator_api, nodes, tmp_path):
    with trays_of(portal, nodes, tmp_path) as trays:
        tray = trays[0]
        # The host package's unit, enabled: a link under the tray's /etc/systemd/system
        wants = tray.root / "etc/systemd/system/multi-user.target.wants"
        wants.mkdir(parents=True)
        (wants / "nvidia-imex.service").symlink_to("/lib/systemd/system/nvidia-imex.service")
        # ... and running: a real process named nvidia-imex, in the tray's /proc
        impostor = start_named_process(tmp_path, "nvidia-imex")
        try:
            (tray.root / "proc" / str(impostor.pid)).symlink_to(f"/proc/{impostor.pid}")
            found = wait_for(
                lambda: conditions(operator_api, tray.hostname).get(
                    ConditionType.HOST_IMEX_SERVICE
                ),
                30,
                "the host IMEX condition",
            )
            assert found["blocking"]
            assert f"pid {impostor.pid}" in found["message"]
            assert "nvidia-imex.service is enabled" in found["message"]
            assert "systemctl disable --now nvidia-imex.service" in found["message"]
            assert tray_status(tray.hostname) == TrayStatus.BLOCKED
        finally:
            impostor.kill()
            impostor.wait(5)
        # The operator disables the unit: the agent clears the condition by itself.
        (wants / "nvidia-imex.service").unlink()
        wait_for(lambda: not conditions(operator_api, tray.hostname), 30, "the condition to clear")
        assert tray_status(tray.hostname) == TrayStatus.FREE
        assert "node.condition_cleared" in node_verbs(tray.hostname)


def start_named_process(directory: Path, name: str) -> subprocess.Popen[bytes]:
    """A process whose name (comm) is `name`: `sleep` run through a link of that name."""
    link = directory / name
    link.symlink_to("/bin/sleep")
    return subprocess.Popen([str(link), "300"])


def node_verbs(hostname: str) -> list[str]:
    return list(
        Event.objects.filter(node__hostname=hostname).order_by("id").values_list("verb", flat=True)
    )


# --- item 5: a fabric registration still in progress -----------------------------------------
def test_a_registration_in_progress_is_probed_again_until_the_tray_joins_its_clique(
    portal, operator_api, nodes, tmp_path
):
    node = nodes[0]
    clique = node.clique
    # A tray the portal has never heard of, booting while NVLink registration runs.
    Node.objects.filter(pk=node.pk).delete()
    tray = Tray(portal, facts_of(node, fabric_state="IN_PROGRESS"), root=tmp_path / "t1")
    with tray:
        tray.wait_ready()
        joined = Node.objects.get(hostname=node.hostname)
        assert joined.clique is None
        assert conditions(operator_api, node.hostname)[ConditionType.FABRIC_NOT_READY]["blocking"]
        wait_for(lambda: tray.log().count("fabric probe not settled") >= 2, 30, "two probes")
        tray.set_fabric(gpu_state="COMPLETED")
        wait_for(
            lambda: Node.objects.get(hostname=node.hostname).clique_id == clique.pk,
            30,
            "the tray to join its clique",
        )
        assert not conditions(operator_api, node.hostname)
        assert "fabric probe settled" in tray.log()
        assert "agent.facts_changed" in node_verbs(node.hostname)
        assert tray.agent is not None and tray.agent.alive()


# --- item 6 and the contract: channel devices a non-root job can open -----------------------
def test_channel_devices_get_the_configured_mode_and_group_and_the_cdi_spec_agrees(
    portal, tenant_api, nodes, tmp_path
):
    group = 4242
    with trays_of(
        portal, nodes, tmp_path, args=("--channel-mode", "0660", "--channel-group", str(group))
    ) as trays:
        domain = request_domain(tenant_api, "shared", 2)
        wait_for(lambda: phase_of(domain) == Phase.READY, 60, "domain Ready")
        channel = domain.channels.get().channel
        for tray in trays:
            device = tray.paths.channels_dir / f"channel{channel}"
            st = device.lstat()
            assert stat.S_ISCHR(st.st_mode)
            assert (stat.S_IMODE(st.st_mode), st.st_gid) == (0o660, group)
            spec = json.loads(tray.paths.cdi_spec.read_text())
            (node,) = spec["devices"][0]["containerEdits"]["deviceNodes"]
            assert (node["fileMode"], node["gid"], node["permissions"]) == (0o660, group, "rw")
        # what every agent reported is the contract's status report
        for node in Node.objects.filter(pk__in=[n.pk for n in nodes]):
            report = {k: v for k, v in node.agent_report.items() if k != "received_at"}
            jsonschema.validate(report, STATUS_REPORT_SCHEMA)
        release_domain(tenant_api, "shared")
        wait_for(lambda: phase_of(domain) == Phase.RELEASED, 60, "domain Released")
        assert not os.listdir(trays[0].paths.channels_dir)
