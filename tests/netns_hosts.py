"""Several "hosts" on one machine: Linux network namespaces joined by a bridge.

Each host is a namespace with its own veth interface and address (10.231.0.x/24),
and runs its processes with its own host name (a UTS namespace via unshare), so
ranks on different hosts meet only over the veth links, as on real machines.
The bridge lives in a namespace of its own, so nothing touches the machine's
own network.  `ip netns exec` also mounts /etc/netns/<ns>/hosts over /etc/hosts,
which gives each host name resolution for the others, like a cluster's DNS.
Not a test module: tests/test_netns.py uses it.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

SUBNET = "10.231.0"


@dataclass
class Host:
    name: str  # namespace name == host name inside it
    addr: str
    veth: str

    def cmd(self, argv: list[str]) -> list[str]:
        """argv run on this host: its network namespace, its own host name."""
        inner = f"hostname {shlex.quote(self.name)} && exec " + " ".join(shlex.quote(a) for a in argv)
        return ["ip", "netns", "exec", self.name, "unshare", "--uts", "sh", "-c", inner]

    def rx_bytes(self) -> int:
        out = subprocess.run(["ip", "netns", "exec", self.name, "cat", f"/sys/class/net/{self.veth}/statistics/rx_bytes"],
                             capture_output=True, text=True, check=True, timeout=10).stdout
        return int(out)


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=20)


def unavailable_reason() -> str | None:
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None or shutil.which("unshare") is None:
        return "iproute2 (ip) and util-linux (unshare) are needed: apt-get install iproute2"
    return None


def skip_or_fail(reason: str) -> None:
    """CI sets NCCLBENCH_REQUIRE_NETNS=1: there a missing capability is a failure, not a skip."""
    msg = f"network-namespace hosts unavailable: {reason}"
    if os.environ.get("NCCLBENCH_REQUIRE_NETNS") == "1":
        pytest.fail(msg)
    pytest.skip(msg)


@contextmanager
def netns_hosts(n: int) -> Iterator[list[Host]]:
    reason = unavailable_reason()
    if reason:
        skip_or_fail(reason)
    tag = f"nbt{os.getpid() % 100000}"
    switch = f"{tag}sw"
    hosts = [Host(f"{tag}h{i}", f"{SUBNET}.{i + 1}", f"{tag}v{i}") for i in range(n)]
    made: list[str] = []
    etc = Path("/etc/netns")
    try:
        try:
            _ip("netns", "add", switch)
            made.append(switch)
            _ip("-n", switch, "link", "add", "br0", "type", "bridge")
            _ip("-n", switch, "link", "set", "br0", "up")
            for i, h in enumerate(hosts):
                _ip("netns", "add", h.name)
                made.append(h.name)
                peer = f"{tag}p{i}"
                _ip("link", "add", h.veth, "type", "veth", "peer", "name", peer)
                _ip("link", "set", h.veth, "netns", h.name)
                _ip("link", "set", peer, "netns", switch)
                _ip("-n", switch, "link", "set", peer, "master", "br0")
                _ip("-n", switch, "link", "set", peer, "up")
                _ip("-n", h.name, "addr", "add", f"{h.addr}/24", "dev", h.veth)
                _ip("-n", h.name, "link", "set", h.veth, "up")
                _ip("-n", h.name, "link", "set", "lo", "up")
        except (subprocess.CalledProcessError, OSError) as e:
            detail = getattr(e, "stderr", "") or str(e)
            skip_or_fail(f"creating namespaces failed ({detail.strip()}); needs CAP_NET_ADMIN")
        hosts_file = "127.0.0.1 localhost\n" + "".join(f"{h.addr} {h.name}\n" for h in hosts)
        for h in hosts:
            (etc / h.name).mkdir(parents=True, exist_ok=True)
            (etc / h.name / "hosts").write_text(hosts_file)
        yield hosts
    finally:
        for name in reversed(made):
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=20)
            shutil.rmtree(etc / name, ignore_errors=True)
