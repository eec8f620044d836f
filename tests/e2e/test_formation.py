"""Domains form for real: agents configure emulated IMEX daemons that really connect."""

from __future__ import annotations

from pathlib import Path

import pytest

from domains.computedomains.models import ChannelAllocation, DomainMember, MemberState, Phase
from domains.inventory.models import Node
from nodeagent.config import Paths
from testbed import factories
from testbed.agents import AgentFleet, wait_for
from testbed.emulator.tray import EMU_DIR
from testbed.processes import pods_supported
from tests.e2e.conftest import IP_PREFIX, phase_of, release_domain, request_domain, verbs

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def imex_processes_using(config: Path) -> list[int]:
    """Every live process whose command line names this tray's IMEX config."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        if "imex.py" in cmdline and str(config) in cmdline and state != "Z":
            found.append(int(proc.name))
    return found


def test_an_18_tray_domain_forms_end_to_end_and_release_leaves_nothing(portal, tenant_api):
    """As the Helm chart runs it: the agents in one pod, each tray's IMEX runner (the parent
    of its daemon) in another, each pod its own PID and mount namespace."""
    (rack,) = factories.make_racks("18", ip_prefix=IP_PREFIX)
    with AgentFleet(portal, Node.objects.filter(rack=rack), pods=pods_supported()) as fleet:
        fleet.wait_joined()
        domain = request_domain(tenant_api, "rack-wide", 18, request_id="e2e-rack-wide-1")
        wait_for(lambda: phase_of(domain) == Phase.READY, 60, "domain Ready")

        members = list(DomainMember.objects.filter(domain=domain).select_related("node"))
        assert len(members) == 18 and all(m.state == MemberState.READY for m in members)
        (channel,) = ChannelAllocation.objects.filter(domain=domain).values_list(
            "channel", flat=True
        )
        expected_nodes = "".join(
            f"{m.ip_address}\n" for m in sorted(members, key=lambda m: m.index)
        )
        majors = set()
        for m in members:
            host = m.node.hostname
            assert fleet.nodes_file(host) == expected_nodes  # identical, index-stable
            config = Paths(fleet.tray_root(host)).imex_config
            assert imex_processes_using(config) == [fleet.daemon_pid(host)]  # one daemon
            major = fleet.proc_devices_major(host)
            majors.add(major)
            assert fleet.channel_devices(host) == {f"channel{channel}": (major, channel)}
            (device,) = fleet.cdi_spec(host)["devices"]
            assert device["containerEdits"]["deviceNodes"][0]["major"] == major
        assert len(majors) > 1  # majors are per tray and were read, not assumed
        # one request id from the HTTP request to every agent's log lines
        assert domain.request_id == "e2e-rack-wide-1"
        assert fleet.log().count("[e2e-rack-wide-1] reported ready") == 18

        release_domain(tenant_api, "rack-wide")
        wait_for(lambda: phase_of(domain) == Phase.RELEASED, 60, "domain Released")
        for m in members:
            assert fleet.leftovers(m.node.hostname) == []
        assert verbs(domain)[-1] == "domain.released"


def test_an_all_channels_domain_gets_every_channel_zero_included(portal, tenant_api):
    (rack,) = factories.make_racks("4", ip_prefix=IP_PREFIX)
    with AgentFleet(portal, Node.objects.filter(rack=rack)) as fleet:
        fleet.wait_joined()
        domain = request_domain(tenant_api, "every-channel", 2, channel={"allocationMode": "All"})
        wait_for(lambda: phase_of(domain) == Phase.READY, 30, "domain Ready")
        member = DomainMember.objects.filter(domain=domain).select_related("node").first()
        devices = fleet.channel_devices(member.node.hostname)
        assert sorted(devices) == sorted(f"channel{n}" for n in range(2048))  # as NVIDIA's
        assert [d["name"] for d in fleet.cdi_spec(member.node.hostname)["devices"]] == ["all"]
        release_domain(tenant_api, "every-channel")
        wait_for(lambda: phase_of(domain) == Phase.RELEASED, 30, "domain Released")
        assert fleet.leftovers(member.node.hostname) == []


def test_a_new_daemon_is_looked_at_with_one_call_once_it_listens(portal, tenant_api):
    """`nvidia-imex-ctl -N -j` carries the daemon's own word: a daemon READY when it first
    listens is never asked `-q` as well (each call is a process on the tray)."""
    (rack,) = factories.make_racks("2", ip_prefix=IP_PREFIX)
    with AgentFleet(portal, Node.objects.filter(rack=rack)) as fleet:
        fleet.wait_joined()
        domain = request_domain(tenant_api, "one-look", 2)
        wait_for(lambda: phase_of(domain) == Phase.READY, 30, "domain Ready")
        release_domain(tenant_api, "one-look")
        wait_for(lambda: phase_of(domain) == Phase.RELEASED, 30, "domain Released")
        for node in Node.objects.filter(rack=rack):
            # Written by the daemon as it stopped: -q and -N answered, rows sent to peers.
            served = (fleet.tray_root(node.hostname) / EMU_DIR / "served").read_text().split()
            asked_q, asked_n = int(served[0]), int(served[1])
            assert (asked_q, asked_n >= 1) == (0, True)
