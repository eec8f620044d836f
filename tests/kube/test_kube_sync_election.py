"""Two `manage.py kube_sync` processes against upstream's kube-apiserver: one holds the Lease
and watches, the other waits; the waiting one takes over when the leader dies (after the
lease) or stops (at once), and a leader whose Lease is taken stops writing and exits."""

from __future__ import annotations

import signal
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest

from domains.inventory.models import Node, NodeSource
from testbed.agents import wait_for
from testbed.kube.cluster import ClusterKube
from testbed.kube.objects import RACK_LABEL, gpu_labels
from testbed.processes import VENV_BIN, Proc, process_env

pytestmark = [pytest.mark.cluster, pytest.mark.django_db(transaction=True)]

LEASE_S, DEADLINE_S, RETRY_S = 4.0, 3.0, 0.5


@pytest.fixture
def lease(real_kube: ClusterKube) -> Iterator[str]:
    name = f"kube-sync-{uuid.uuid4().hex[:6]}"
    yield name
    real_kube.delete("leases", name, "default")


def kube_sync(real_kube: ClusterKube, lease: str, name: str) -> Proc:
    argv = [
        str(VENV_BIN / "python"),
        "manage.py",
        "kube_sync",
        "--watch-timeout=5",
        "--leader-elect",
        f"--lease-name={lease}",
        "--lease-namespace=default",
        f"--lease-duration={LEASE_S}",
        f"--renew-deadline={DEADLINE_S}",
        f"--retry-period={RETRY_S}",
    ]
    env = process_env(
        KUBECONFIG=str(real_kube.cluster.kubeconfig),
        PORTAL_KUBE_ENABLED="1",
        PORTAL_KUBE_RACK_LABEL=RACK_LABEL,
    )
    env.pop("KUBERNETES_SERVICE_HOST", None)
    proc = Proc(name, argv, env)
    wait_for(lambda: "waiting for the lease" in proc.log() or not proc.alive(), 30, "a candidate")
    assert proc.alive(), proc.log()
    return proc


def leads(proc: Proc) -> bool:
    return "watching nodes" in proc.log()


def holder(real_kube: ClusterKube, lease: str) -> str:
    return record(real_kube, lease).get("holderIdentity") or ""


def record(real_kube: ClusterKube, lease: str) -> dict[str, Any]:
    """The Lease's spec: holder, duration, acquire and renew times, transitions."""
    obj = real_kube.get("leases", lease, "default") or {}
    return obj.get("spec") or {}


def stamp(micro_time: str) -> datetime:
    return datetime.fromisoformat(micro_time)


def synced(hostname: str) -> Node | None:
    return Node.objects.filter(hostname=hostname, source=NodeSource.KUBERNETES).first()


def test_one_of_two_watches_and_the_other_takes_over_when_it_dies(real_kube, lease):
    first = kube_sync(real_kube, lease, "kube-sync-a")
    try:
        wait_for(lambda: leads(first), 30, "the first to lead")
        second = kube_sync(real_kube, lease, "kube-sync-b")
        try:
            real_kube.put_node("gb-e1", labels=gpu_labels(clique=1), ip="10.3.0.1")
            wait_for(lambda: synced("gb-e1"), 30, "the leader to sync the node")
            time.sleep(3 * LEASE_S)  # three leases: the second never leads beside the first
            assert not leads(second), second.log()
            identity = first.log().split("leading as ")[1].split()[0]
            assert holder(real_kube, lease) == identity

            first.kill(signal.SIGKILL)  # no release: the lease must run out
            first.popen.wait(10)
            last = record(real_kube, lease)  # the dead leader's last renewal
            wait_for(lambda: leads(second), 4 * LEASE_S, "the second to take over")
            taken = record(real_kube, lease)
            # Taken over, and not before the dead leader's lease ran out: the candidate waits
            # until the record it saw has stood unchanged for a whole lease (the times are the
            # two processes' own, in the Lease; a second's slack is the candidate's read).
            assert taken["holderIdentity"] not in ("", identity), taken
            expired = stamp(last["renewTime"]) + timedelta(seconds=last["leaseDurationSeconds"])
            assert stamp(taken["acquireTime"]) > expired - timedelta(seconds=1), (last, taken)
            assert taken["leaseTransitions"] == (last.get("leaseTransitions") or 0) + 1
            real_kube.put_node("gb-e2", labels=gpu_labels(clique=1), ip="10.3.0.2")
            wait_for(lambda: synced("gb-e2"), 30, "the new leader to sync a new node")

            # A leader that is stopped hands over at once: a third takes over well within
            # a lease.
            third = kube_sync(real_kube, lease, "kube-sync-c")
            try:
                second.popen.send_signal(signal.SIGTERM)
                assert second.popen.wait(15) == 0, second.log()
                assert "released" in second.log()
                wait_for(lambda: leads(third), 2 * LEASE_S, "the third to take over")
                # The third took a released Lease (holder emptied), not one it waited out: a
                # lease taken from a holder counts a transition, one taken from nobody does not.
                now = record(real_kube, lease)
                assert now["holderIdentity"] not in ("", taken["holderIdentity"]), now
                assert now["leaseTransitions"] == taken["leaseTransitions"], (taken, now)
            finally:
                third.stop()
        finally:
            second.stop()
    finally:
        first.stop()


def test_a_leader_whose_lease_is_taken_stops_writing_and_exits(real_kube, lease):
    leader = kube_sync(real_kube, lease, "kube-sync-a")
    try:
        wait_for(lambda: leads(leader), 30, "the leader")
        obj = real_kube.get("leases", lease, "default")
        assert obj is not None
        obj["spec"]["holderIdentity"] = "intruder"  # e.g. a partition: another took it
        obj["spec"]["leaseDurationSeconds"] = 3600
        intruded = real_kube.apply(obj)["metadata"]["resourceVersion"]
        assert leader.popen.wait(DEADLINE_S + 10) == 1, leader.log()
        assert "lost the lease" in leader.log()
        after = real_kube.get("leases", lease, "default") or {}
        # It wrote nothing once the Lease was taken: no renewal over it, no release of it.
        assert after["metadata"]["resourceVersion"] == intruded, after
        assert holder(real_kube, lease) == "intruder"
        # What changes meanwhile is left for the next leader: nothing synced it.
        real_kube.put_node("gb-e3", labels=gpu_labels(clique=1), ip="10.3.0.3")
        time.sleep(2)
        assert synced("gb-e3") is None
    finally:
        leader.stop()
