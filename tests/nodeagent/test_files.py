"""The agent's file writes on files it cannot rename onto: a pod's `/etc/hosts`.

In a pod, `/etc/hosts` is the kubelet's bind mount of a per-pod copy, and `rename(2)` onto a
mount point fails with EBUSY. These tests make that mount for real, in a mount namespace of
their own (`unshare -m`, private propagation), and run the agent's own functions inside it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from nodeagent.imex.files import (
    MAX_NODES,
    UNUSED_SLOT_IP,
    legacy_peers,
    peer_hosts,
    slot_name,
    write_hosts,
)

POD_HOSTS = "127.0.0.1\tlocalhost\n10.1.2.3\tworker-0\n"

needs_mounts = pytest.mark.skipif(
    shutil.which("unshare") is None or shutil.which("mount") is None,
    reason="needs unshare(1) and mount(8)",
)


def run_on_bind_mount(tmp_path: Path, code: str) -> Path:
    """Bind-mount a pod's hosts file over `etc-hosts` and run `code` with `target` bound to
    it, in a private mount namespace; returns (the pod's copy, the file mounted over)."""
    pod_copy = tmp_path / "pod-hosts"
    pod_copy.write_text(POD_HOSTS)
    target = tmp_path / "etc-hosts"
    target.write_text("# the node's own hosts file\n")
    script = "from pathlib import Path\n" + f"target = Path({str(target)!r})\n" + code
    done = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-ec",
         'mount --bind "$1" "$2" && exec "$3" -c "$4"',
         "sh", str(pod_copy), str(target), sys.executable, script],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    if done.returncode != 0 and "Operation not permitted" in done.stderr:
        pytest.skip(f"no mount namespaces here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    return pod_copy


@needs_mounts
def test_the_peer_names_reach_a_bind_mounted_hosts_file(tmp_path):
    code = textwrap.dedent("""
        from nodeagent.imex.files import peer_hosts, write_hosts
        assert write_hosts(target, peer_hosts({0: "10.9.0.1", 1: "10.9.0.2"}, "d00d"))
        assert not write_hosts(target, peer_hosts({0: "10.9.0.1", 1: "10.9.0.2"}, "d00d"))
    """)
    pod_copy = run_on_bind_mount(tmp_path, code)
    written = pod_copy.read_text()
    # The mount's source is what the daemon's resolver reads: the pod's lines are kept and
    # the names follow them.
    assert written.startswith(POD_HOSTS)
    assert f"10.9.0.1\t{slot_name(0, 'd00d')}\n10.9.0.2\t{slot_name(1, 'd00d')}\n" in written
    # Every other name of the nodes file resolves here too, to an address nobody answers
    # at: none of them is ever looked up in DNS (NVIDIA's daemons flooded CoreDNS so).
    unused = [f"{UNUSED_SLOT_IP}\t{slot_name(i, 'd00d')}" for i in range(2, MAX_NODES)]
    assert written.splitlines()[5:-1] == unused
    # No temp file is left beside the mount point.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["etc-hosts", "pod-hosts"]


@needs_mounts
def test_a_member_that_leaves_is_removed_from_a_bind_mounted_hosts_file(tmp_path):
    code = textwrap.dedent("""
        from nodeagent.imex.files import peer_hosts, write_hosts
        write_hosts(target, peer_hosts({0: "10.9.0.1", 1: "10.9.0.2", 2: "10.9.0.3"}))
        write_hosts(target, peer_hosts({0: "10.9.0.1"}))
    """)
    pod_copy = run_on_bind_mount(tmp_path, code)
    lines = pod_copy.read_text().splitlines()
    assert f"10.9.0.1\t{slot_name(0)}" in lines
    assert not any("10.9.0.2" in line or "10.9.0.3" in line for line in lines)
    assert f"{UNUSED_SLOT_IP}\t{slot_name(1)}" in lines  # its name now points nowhere
    assert pod_copy.read_text().startswith(POD_HOSTS)


@needs_mounts
def test_the_agents_block_is_taken_out_of_a_bind_mounted_hosts_file_on_release(tmp_path):
    code = textwrap.dedent("""
        from nodeagent.imex.files import peer_hosts, remove_hosts, write_hosts
        write_hosts(target, peer_hosts({0: "10.9.0.1"}))
        remove_hosts(target)
    """)
    pod_copy = run_on_bind_mount(tmp_path, code)
    assert pod_copy.read_text() == POD_HOSTS


def test_a_block_an_older_agent_marked_as_its_own_is_replaced_not_doubled(tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text(
        "127.0.0.1\tlocalhost\n"
        "# BEGIN domain-portal IMEX peers (written by the node agent)\n"
        "10.9.0.7\tportal-imex-0\n"
        "# END domain-portal IMEX peers\n"
    )
    assert write_hosts(hosts, {"portal-imex-0": "10.9.0.1"})
    assert hosts.read_text() == (
        "127.0.0.1\tlocalhost\n"
        "# BEGIN domain-portal IMEX peers\n10.9.0.1\tportal-imex-0\n"
        "# END domain-portal IMEX peers\n"
    )


def test_names_without_a_token_are_a_domains_from_before_tokens():
    assert (
        slot_name(3) == "portal-imex-3" and slot_name(3, "0b7e6a9c0d") == "portal-imex-0b7e6a9c0d-3"
    )
    assert legacy_peers(peer_hosts({0: "10.9.0.1", 4: "10.9.0.5"})) == {
        0: "10.9.0.1",
        4: "10.9.0.5",
    }
    assert legacy_peers(peer_hosts({0: "10.9.0.1"}, "0b7e6a9c0d")) == {}
