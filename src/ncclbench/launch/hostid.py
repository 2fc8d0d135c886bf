"""Which host a process is on: decided once, as NCCL decides it, and read everywhere.

NCCL puts two ranks on one host when their host hashes match (`getHostHash` in NCCL's
src/misc/utils.cc): the hash of NCCL_HOSTID when that is set, else of the full host name
followed by the kernel's boot id.  Ranks on one host talk over P2P/SHM, ranks on different
hosts over the network transport, so this is the grouping every judgement of a run needs:
the banner's host list, explain's per-host topology (and which rank reads it), health's
node groups and the store's hosts.  With NCCL_HOSTID, fake hosts on one machine (one per
value) are hosts everywhere, and two containers on one machine are one host or two exactly
when NCCL says so.

nccl-tests' own local rank (which CUDA device a process takes) hashes the short host name
and the boot id without NCCL_HOSTID: that stays `nccl.runmodel.host_identity`, for
compatibility with nccl-tests' device choice.

What is shown for a host (its label) is NCCL_HOSTID when set, else the short host name
(the name nccl-tests prints).  Known gap: two machines whose short names are equal (and
whose full names or boot ids differ) are two hosts to NCCL but share a label here.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping, Sequence

HOSTID_ENV = "NCCL_HOSTID"
BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"


def _boot_id(path: str = BOOT_ID_PATH) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def nccl_host_key(environ: Mapping[str, str] | None = None, hostname: str | None = None,
                  boot_id: str | None = None) -> str:
    """The string NCCL hashes for this process's host: NCCL_HOSTID if set (even empty, as
    getenv sees it), else the full host name followed by the boot id."""
    env = os.environ if environ is None else environ
    hostid = env.get(HOSTID_ENV)
    if hostid is not None:
        return hostid
    name = hostname if hostname is not None else socket.gethostname()
    return name + (boot_id if boot_id is not None else _boot_id())


def host_label(environ: Mapping[str, str] | None = None, hostname: str | None = None) -> str:
    """This process's host as ncclbench names it everywhere: NCCL_HOSTID when set and not
    empty, else the short host name (cut at the first '.', as nccl-tests prints it)."""
    env = os.environ if environ is None else environ
    hostid = (env.get(HOSTID_ENV) or "").strip()
    if hostid:
        return hostid
    return (hostname if hostname is not None else socket.gethostname()).split(".")[0]


def local_ranks_by_host(labels: Sequence[str]) -> list[int]:
    """Per process (world order): how many lower-numbered processes share its host.  The
    host's first process (0) is the one that reads the host's facts."""
    seen: dict[str, int] = {}
    out = []
    for label in labels:
        out.append(seen.get(label, 0))
        seen[label] = seen.get(label, 0) + 1
    return out


def distinct_hosts(labels: Sequence[str]) -> list[str]:
    """The hosts in the order their first process appears."""
    return list(dict.fromkeys(labels))
