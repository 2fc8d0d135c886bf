"""NCCL's interface and HCA lists (NCCL_SOCKET_IFNAME, NCCL_IB_HCA), matched as NCCL matches them.

In the base layer because both explain (which NICs NCCL uses) and launch (which interface's
address a rank advertises to the others) read these lists, and a near-miss second copy would
disagree with NCCL.
"""

from __future__ import annotations


def nccl_list_match(value: str, name: str, port: int | None) -> bool | None:
    """Does NCCL_IB_HCA / NCCL_SOCKET_IFNAME `value` select device `name` (port `port`)?
    src/misc/utils.cc parseStringList/matchIfList and their callers: a leading '^' excludes,
    then '=' asks for exact names, otherwise each item is a prefix; 'dev:port' limits the port.
    None when `value` is empty (no list: everything is selected)."""
    if not value:
        return None
    neg = value.startswith("^")
    v = value[1:] if neg else value
    exact = v.startswith("=")
    v = v[1:] if exact else v
    hit = False
    for item in (x for x in v.split(",") if x):
        prefix, _, p = item.partition(":")
        if not prefix:
            continue
        ok = name == prefix if exact else name.startswith(prefix)
        if ok and (not p or port is None or not p.isdigit() or int(p) == port):
            hit = True
            break
    return hit != neg
