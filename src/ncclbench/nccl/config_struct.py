"""`ncclConfig_t` mirrored in ctypes, for any libnccl from 2.14 on.

NCCL's config struct is append-only and self-describing: a header
(`size`, `magic` = 0xcafebeef, `version`) followed by fields that each
appeared in some release, all initialised to "undefined" sentinels
(`INT_MIN` / NULL).  The library copies `min(size, its own sizeof)` bytes
and ignores fields newer than `version` (src/init.cc `parseCommConfig`).

So we build, per loaded library, exactly the struct its own nccl.h would
have declared: the fields that existed in that release, `size` = their
extent and `version` = the library's code.  Setting a field the library
does not know is refused here instead of being silently dropped.

Field history (from NVIDIA/nccl `src/nccl.h.in` at each tag):
2.14 blocking; 2.17 cgaClusterSize minCTAs maxCTAs netName; 2.18 splitShare;
2.26 trafficClass; 2.27 commName collnetEnable CTAPolicy shrinkShare nvlsCTAs;
2.28 nChannelsPerNetPeer nvlinkCentricSched; 2.29 graphUsageMode numRmaCtx;
2.30 maxP2pPeers; 2.30.5 graphStreamOrdering; by 2.32 launchOrderImplicit
numRmaSig rmaEagerInit hostCftMode nvlsHostMode.
"""

from __future__ import annotations

import ctypes
from functools import cache

from .version_text import version_text

NCCL_API_MAGIC = 0xCAFEBEEF
NCCL_CONFIG_UNDEF_INT = -(2 ** 31)  # INT_MIN

CTA_POLICY_DEFAULT = 0
CTA_POLICY_EFFICIENCY = 1
CTA_POLICY_ZERO = 2

_INT, _PTR = ctypes.c_int, ctypes.c_char_p

# (name, ctypes type, first NCCL version code whose header has it)
CONFIG_FIELDS: tuple[tuple[str, type, int], ...] = (
    ("blocking", _INT, 21400),
    ("cgaClusterSize", _INT, 21700),
    ("minCTAs", _INT, 21700),
    ("maxCTAs", _INT, 21700),
    ("netName", _PTR, 21700),
    ("splitShare", _INT, 21800),
    ("trafficClass", _INT, 22600),
    ("commName", _PTR, 22700),
    ("collnetEnable", _INT, 22700),
    ("CTAPolicy", _INT, 22700),
    ("shrinkShare", _INT, 22700),
    ("nvlsCTAs", _INT, 22700),
    ("nChannelsPerNetPeer", _INT, 22800),
    ("nvlinkCentricSched", _INT, 22800),
    ("graphUsageMode", _INT, 22900),
    ("numRmaCtx", _INT, 22900),
    ("maxP2pPeers", _INT, 23000),
    ("graphStreamOrdering", _INT, 23005),
    ("launchOrderImplicit", _INT, 23200),
    ("numRmaSig", _INT, 23200),
    ("rmaEagerInit", _INT, 23200),
    ("hostCftMode", _INT, 23200),
    ("nvlsHostMode", _INT, 23200),
)

FIELD_SINCE: dict[str, int] = {name: since for name, _, since in CONFIG_FIELDS}


def fields_for(version_code: int) -> list[str]:
    """Names of the config fields the library `version_code` knows."""
    return [name for name, _, since in CONFIG_FIELDS if since <= version_code]


@cache
def struct_type(version_code: int) -> type[ctypes.Structure]:
    """The ncclConfig_t layout of that release (header + known fields)."""
    fields: list[tuple[str, type]] = [("size", ctypes.c_size_t), ("magic", ctypes.c_uint), ("version", ctypes.c_uint)]
    fields += [(name, ctype) for name, ctype, since in CONFIG_FIELDS if since <= version_code]
    return type(f"ncclConfig_v{version_code}", (ctypes.Structure,), {"_fields_": fields})


def make_config(version_code: int, **values: int) -> ctypes.Structure:
    """A config initialised like NCCL_CONFIG_INITIALIZER, then `values` set.

    Raises ValueError for a field this library version does not have: the
    caller decides what to do (nccl-tests prints a note and ignores -x)."""
    if version_code < 21400:
        raise ValueError(f"ncclConfig_t needs NCCL >= 2.14 (library is {version_text(version_code)})")
    cls = struct_type(version_code)
    cfg = cls()
    cfg.size = ctypes.sizeof(cls)
    cfg.magic = NCCL_API_MAGIC
    cfg.version = version_code
    for name, ctype, since in CONFIG_FIELDS:
        if since <= version_code:
            setattr(cfg, name, None if ctype is _PTR else NCCL_CONFIG_UNDEF_INT)
    for name, value in values.items():
        first = FIELD_SINCE.get(name)
        if first is None:
            raise ValueError(f"unknown ncclConfig_t field {name!r}")
        if first > version_code:
            raise ValueError(f"ncclConfig_t.{name} needs NCCL >= {version_text(first)} "
                             f"(library is {version_text(version_code)})")
        setattr(cfg, name, value)
    return cfg


def config_values(cfg: ctypes.Structure) -> dict[str, object]:
    """Field -> value of a config built by `make_config` (for logs and tests)."""
    return {field[0]: getattr(cfg, field[0]) for field in cfg._fields_}
