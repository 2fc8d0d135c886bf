"""NCCL's environment variables, read the way NCCL reads them (NVIDIA/nccl v2.28.9-1).

Kept in one place because both the ceiling (which NICs, which algorithms) and
the traps (a HCA list naming an absent device, P2P switched off) depend on the
exact semantics, and a near-miss reimplementation would give wrong verdicts.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..nccl.envlist import nccl_list_match  # noqa: F401  (kept here for explain's readers)

ALGORITHMS = ("Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT")  # ncclAlgoStr
NCCL_FUNC = {"all_reduce": "AllReduce", "all_gather": "AllGather", "reduce_scatter": "ReduceScatter",
             "broadcast": "Broadcast", "reduce": "Reduce"}  # ncclFuncStr
PATH_RANK = {"LOC": 0, "NVL": 1, "NVB": 2, "C2C": 3, "PIX": 4, "PXB": 5, "P2C": 6, "PXN": 7, "PHB": 8,
             "NODE": 8, "SYS": 9}  # topoPathTypeStr (src/graph/topo.h); nvidia-smi's NODE is NCCL's PHB
_OLD_LEVELS = ("LOC", "PIX", "PXB", "PHB", "SYS", "SYS")  # src/graph/paths.cc levelsOldToNew

# NCCL settings that choose the algorithm the platform runs with (NVLS is kept off on some machines:
# reference/baseline-h200.md) are part of a healthy ceiling (health judges against the ceiling they
# allow); settings that degrade the path (NCCL_P2P_DISABLE, NCCL_MAX_NCHANNELS, NCCL_ALGO, ...) are
# not: they are causes the traps name.
PLATFORM_SETTINGS = ("NCCL_NVLS_ENABLE",)


def env_set(env: Mapping[str, str], name: str) -> str | None:
    v = env.get(name)
    return v if v not in (None, "") else None


def list_items(value: str) -> tuple[bool, bool, list[str]]:
    """(exclude, exact, device names) of an NCCL device list."""
    neg = value.startswith("^")
    v = value[1:] if neg else value
    exact = v.startswith("=")
    v = v[1:] if exact else v
    return neg, exact, [x.partition(":")[0] for x in v.split(",") if x.partition(":")[0]]


def allowed_algorithms(value: str, collective: str) -> set[str] | None:
    """Algorithms NCCL_ALGO allows for a collective (src/graph/tuning.cc parseList: 'ring,tree',
    '^nvls', 'allreduce:ring;allgather:ring'); None when it does not restrict this collective."""
    if not value:
        return None
    func = NCCL_FUNC.get(collective, "").lower()
    allowed: set[str] | None = None
    for part in (p for p in value.split(";") if p):
        prefix, sep, items = part.partition(":")
        if not sep:
            items, prefix = prefix, ""
        if prefix and prefix.lower() != func:
            continue
        neg = items.startswith("^")
        names = {x.strip().lower() for x in (items[1:] if neg else items).split(",") if x.strip()}
        allowed = {a for a in ALGORITHMS if (a.lower() in names) != neg}
    return allowed


def p2p_level(env: Mapping[str, str]) -> tuple[int | None, str]:
    """(the farthest path NCCL allows P2P over, the setting that says so), or (None, '') when the
    user set neither NCCL_P2P_DISABLE nor NCCL_P2P_LEVEL (then NCCL's default applies: PXB, or
    SYS on AMD CPUs with at most 2 GPUs; src/graph/paths.cc ncclTopoCheckP2p)."""
    disable = env_set(env, "NCCL_P2P_DISABLE")
    if disable is not None and disable != "0":
        return 0, f"NCCL_P2P_DISABLE={disable}"
    level = env_set(env, "NCCL_P2P_LEVEL")
    if level is None:
        return None, ""
    name = level.upper()
    if name in PATH_RANK:
        return PATH_RANK[name], f"NCCL_P2P_LEVEL={level}"
    if level.isdigit():
        return PATH_RANK[_OLD_LEVELS[min(int(level), len(_OLD_LEVELS) - 1)]], f"NCCL_P2P_LEVEL={level}"
    return None, ""


def host_settings(host: str, env: Mapping[str, str], host_env: Mapping[str, Mapping[str, str]] | None,
                  log_env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The NCCL settings in force on `host`: its ranks' (`host_env[host]`, gathered at start) where
    known, else the job's `env` (rank 0's).  NCCL's own ENV lines (`log_env`, merged over every
    rank) fill in only what no rank's environment set (a value from nccl.conf): a value one host's
    ranks set is that host's, never another's (NCCL_SOCKET_IFNAME, NCCL_HOSTID are set per host)."""
    host_env = host_env or {}
    mine = host_env.get(host)
    out = dict(env) if mine is None else dict(mine)
    ranks_set = {k for e in host_env.values() for k in e}
    for k, v in (log_env or {}).items():
        if mine is None or k not in ranks_set:
            out.setdefault(k, v)  # what NCCL said was set; the ranks' own environment wins
    return out
