"""The real node's link, when another node holds the usual addresses.

A run killed before the node's `stop()` leaves its namespace, its link and its address behind; a
second address on the host in the node's /30 sends the API server's answers down the wrong link, and
the next node's kubelet sees only `i/o timeout`. These make both situations for real (namespaces and
veth links of the tests' own, in 198.19.0.0/24) and remove everything they made, also on failure.
"""

import os
import subprocess
import tempfile
from pathlib import Path

import pytest

from harness import node as real_node
from harness import orphans

pytestmark = [pytest.mark.node, pytest.mark.skipif(bool(real_node.missing()), reason=real_node.missing() or "")]


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


def host_addresses() -> str:
    return subprocess.run(["ip", "-o", "-4", "addr"], check=True, capture_output=True, text=True).stdout


def test_a_node_left_by_a_killed_run_is_removed_and_its_address_reused():
    tag = "dead01"
    left_dir = Path(tempfile.mkdtemp(prefix=f"ss-node-{tag}-", dir="/tmp"))
    node = None
    try:
        # What a killed run leaves: its namespace, its link holding the first /30, its directory.
        netns, host_link, node_link = real_node.netns_of(tag), real_node.host_link_of(tag), real_node.node_link_of(tag)
        ip("netns", "add", netns)
        ip("link", "add", host_link, "type", "veth", "peer", "name", node_link)
        ip("link", "set", node_link, "netns", netns)
        ip("addr", "add", "198.19.0.1/30", "dev", host_link)
        (left_dir / orphans.OWNER_FILE).write_text(str(orphans.no_such_pid()))

        node = real_node.Node.network()

        assert not left_dir.exists()
        assert real_node.host_link_of(tag) not in host_addresses()
        assert (node.host_address, node.node_address) == ("198.19.0.1", "198.19.0.2")
    finally:
        if node is not None:
            assert node.stop() == []
        subprocess.run(["ip", "netns", "del", real_node.netns_of(tag)], capture_output=True)
        subprocess.run(["ip", "link", "del", real_node.host_link_of(tag)], capture_output=True)
        subprocess.run(["rm", "-rf", str(left_dir)])


def test_an_address_held_by_something_else_is_left_alone_and_the_next_pair_used():
    # Not a node's (its owner, this process, is alive): it must stay, and be routed around.
    held = "ssheld0a"
    node = None
    try:
        ip("link", "add", held, "type", "veth", "peer", "name", "ssheld0b")
        ip("addr", "add", "198.19.0.1/30", "dev", held)
        ip("link", "set", held, "up")

        node = real_node.Node.network()

        assert (node.host_address, node.node_address) == ("198.19.0.5", "198.19.0.6")
        assert f"{held}    inet 198.19.0.1/30" in host_addresses()
        probe = subprocess.run(["ip", "netns", "exec", node.netns, "ip", "-o", "route", "get", "198.19.0.5"],
                               capture_output=True, text=True, check=True).stdout
        assert real_node.node_link_of(node.tag) in probe
    finally:
        if node is not None:
            assert node.stop() == []
        subprocess.run(["ip", "link", "del", held], capture_output=True)
    assert os.path.exists(f"/sys/class/net/{held}") is False
