"""The chart's IMEX runner pod: the daemon's parent owns what the daemon reads."""

from __future__ import annotations

import pytest

from tests.kube.test_chart import VALUES, daemonsets, mounts, render


@pytest.fixture(scope="module")
def objects():
    return {(o["kind"], o["metadata"]["name"]): o for o in render(VALUES)}


def test_the_runner_pod_writes_its_own_hosts_file_and_reaches_the_imex_management_device(
    objects,
):
    _, runner = daemonsets(objects)
    pod = runner["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    # Its own /etc/hosts (the kubelet's per-pod copy) is what its nvidia-imex resolves.
    assert "--hosts-file=/etc/hosts" in container["args"] and "--root=/" in container["args"]
    assert "/etc/hosts" not in mounts(pod)  # the kubelet's own mount, nobody else's file
    # /dev/nvidia-caps/nvidia-cap<minor>: made by the runner in the host's /dev.
    assert mounts(pod)["/dev"][0] == "/dev" and container["securityContext"]["privileged"]
    assert pod["hostNetwork"] and not pod.get("hostPID")  # its pids are its own


def test_the_runner_pod_asks_dns_for_no_peer_name_with_search_domains(objects):
    """NVIDIA's users saw IMEX flood CoreDNS: with Kubernetes' default ndots:5 a name that
    is not in /etc/hosts is asked of every search domain, again at every resolve. Every
    peer name is in the runner's hosts file, and ndots:1 keeps one that is not from being
    multiplied (NVIDIA's daemon pods set the same)."""
    _, runner = daemonsets(objects)
    pod = runner["spec"]["template"]["spec"]
    assert pod["dnsConfig"]["options"] == [{"name": "ndots", "value": "1"}]
    assert pod["dnsPolicy"] == "ClusterFirstWithHostNet"  # cluster DNS, for anything else
