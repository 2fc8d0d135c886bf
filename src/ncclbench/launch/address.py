"""The address at which the other ranks of a job reach this process.

A server one rank starts for the others (health's coordinator) must be advertised at an
address they can reach: not loopback when they run on other hosts.  The host name often
resolves to 127.0.1.1 (Debian's /etc/hosts) or not at all (a container, a network
namespace), so it is the last resort, not the first.  In order:

1. NCCLBENCH_HEALTH_ADDR (the user's word);
2. the local address the kernel routes from toward MASTER_ADDR (an env launch: torchrun,
   a Kubernetes job, ranks started by hand); loopback only when every rank is on this host
   (LOCAL_WORLD_SIZE = WORLD_SIZE), since a host name may resolve to 127.0.1.1 on its own host;
3. the address of the interface NCCL_SOCKET_IFNAME names (NCCL's own choice of network);
4. what the host name resolves to, when it is not a loopback address;
5. the first interface that is up and not loopback (NCCL's default skips lo and docker*);
6. 127.0.0.1 (one host).
"""

from __future__ import annotations

import fcntl
import os
import socket
import struct
from collections.abc import Callable, Mapping

from ..nccl.envlist import nccl_list_match

ADDR_ENV = "NCCLBENCH_HEALTH_ADDR"
_SIOCGIFADDR = 0x8915


def interface_ipv4(ifname: str) -> str | None:
    """The IPv4 address of interface `ifname`, or None (no such interface, no address)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            raw = fcntl.ioctl(s.fileno(), _SIOCGIFADDR, struct.pack("256s", ifname.encode()[:15]))
    except OSError:
        return None
    return socket.inet_ntoa(raw[20:24])


def interface_names() -> list[str]:
    try:
        return [name for _, name in socket.if_nameindex()]
    except OSError:
        return []


def route_source(dest: str, port: int = 9) -> str | None:
    """The local address the kernel would send from toward `dest` (a UDP connect sends nothing)."""
    try:
        infos = socket.getaddrinfo(dest, port, socket.AF_INET, socket.SOCK_DGRAM)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(infos[0][4])
            return str(s.getsockname()[0])
    except (OSError, IndexError):
        return None


def _loopback(addr: str | None) -> bool:
    return addr is None or addr.startswith("127.") or addr == "0.0.0.0"


def advertised_address(environ: Mapping[str, str] | None = None,
                       ifaddr: Callable[[str], str | None] = interface_ipv4,
                       ifnames: Callable[[], list[str]] = interface_names,
                       route: Callable[[str], str | None] = route_source,
                       resolve: Callable[[], str | None] | None = None) -> str:
    """Where the other ranks can reach this process (the module docstring gives the order).
    The lookups are parameters so that tests drive every branch without a network."""
    env = os.environ if environ is None else environ
    given = env.get(ADDR_ENV, "").strip()
    if given:
        return given
    master = env.get("MASTER_ADDR", "").strip()
    if master:
        src = route(master)
        one_host = env.get("WORLD_SIZE") is not None and env.get("LOCAL_WORLD_SIZE") == env.get("WORLD_SIZE")
        if src and (not _loopback(src) or one_host):
            return src
        # loopback toward a master on this host (MASTER_ADDR=$(hostname), which Debian's /etc/hosts
        # maps to 127.0.1.1) says nothing of how the other hosts reach it: the rules below do
    spec = env.get("NCCL_SOCKET_IFNAME", "").strip()
    if spec:
        for name in (n for n in ifnames() if nccl_list_match(spec, n, None)):
            addr = ifaddr(name)
            if not _loopback(addr):
                return str(addr)
    addr = resolve() if resolve is not None else _resolve_hostname()
    if not _loopback(addr):
        return str(addr)
    for name in ifnames():
        if name == "lo" or name.startswith("docker"):
            continue
        addr = ifaddr(name)
        if not _loopback(addr):
            return str(addr)
    return "127.0.0.1"


def _resolve_hostname() -> str | None:
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return None
