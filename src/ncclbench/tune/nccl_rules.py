"""What NCCL lets a tuner choose, per library version, as NCCL's source says.

Every rule here is read from NVIDIA/nccl at the tag named beside it (see
docs/tuning.md for the table and the lines); nothing is guessed.  The rules
are the ones NCCL applies before any measurement: a combination refused here
would never run, whatever the hardware.  What depends on the machine (NVLS
needs NVLink SHARP, CollNet a CollNet plugin, PAT one GPU per node ...) is
left to NCCL itself: such a candidate is tried, and NCCL's own error
(ncclGetLastError) is the reason it is dropped.

Pure functions, so the CPU tests cover the rules the GPU path uses.
"""

from __future__ import annotations

from ..nccl.version_text import version_text

# src/init.cc ncclAlgoStr / ncclProtoStr / ncclFuncStr (v2.18.6 .. v2.30.7):
# PAT appended in 2.23.
ALGORITHMS: tuple[tuple[str, int], ...] = (
    ("Tree", 0), ("Ring", 0), ("CollNetDirect", 0), ("CollNetChain", 0),
    ("NVLS", 0), ("NVLSTree", 0), ("PAT", 22300),
)
PROTOCOLS: tuple[str, ...] = ("LL", "LL128", "Simple")

# ncclbench collective -> NCCL's function name (ncclFuncStr); the others run as
# point-to-point send/receive, which NCCL_ALGO/NCCL_PROTO and tuners do not reach.
NCCL_FUNCTION = {
    "broadcast": "Broadcast",
    "reduce": "Reduce",
    "all_gather": "AllGather",
    "reduce_scatter": "ReduceScatter",
    "all_reduce": "AllReduce",
}

# The spelling NCCL's example tuner plugin reads (ext-tuner/example/plugin.c
# parseCollType / parseAlgorithm / parseProtocol, v2.27.7 .. v2.30.7).
PLUGIN_COLLECTIVE = {"broadcast": "broadcast", "reduce": "reduce", "all_gather": "allgather",
                     "reduce_scatter": "reducescatter", "all_reduce": "allreduce"}
PLUGIN_ALGORITHM = {"Tree": "tree", "Ring": "ring", "CollNetDirect": "collnet_direct",
                    "CollNetChain": "collnet_chain", "NVLS": "nvls", "NVLSTree": "nvls_tree", "PAT": "pat"}
PLUGIN_PROTOCOL = {"LL": "ll", "LL128": "ll128", "Simple": "simple"}

# Per-function prefixes in NCCL_ALGO/NCCL_PROTO ("allreduce:ring") and an error
# for unknown names: src/graph/tuning.cc parseList from v2.24.3.  Before that
# parseList knew no prefixes and skipped unknown names without a word.
PREFIX_SYNTAX_SINCE = 22400
# ncclConfig_t.minCTAs / maxCTAs: src/nccl.h.in from v2.17.1.
CTA_FIELDS_SINCE = 21700
# The newest release whose source these rules were read from.
RULES_READ_UP_TO = 23007


def newer_than_rules_note(version_code: int) -> str | None:
    """A note when the loaded NCCL is newer than the source these rules come from."""
    if version_code <= RULES_READ_UP_TO:
        return None
    return (f"NCCL {version_text(version_code)} is newer than the last release tune's rules were read from "
            f"({version_text(RULES_READ_UP_TO)}): candidates follow 2.30's rules, and NCCL itself refuses "
            "what it no longer runs")


def algorithms(version_code: int) -> list[str]:
    """NCCL_ALGO names the library `version_code` knows, in NCCL's order."""
    return [name for name, since in ALGORITHMS if since <= version_code]


def canonical_algorithm(name: str) -> str | None:
    """NCCL's spelling of an algorithm (case-insensitive; the tuner plugin's
    spellings such as nvls_tree or collnet_direct are accepted too)."""
    key = name.strip().lower()
    for algo, _ in ALGORITHMS:
        if key in (algo.lower(), PLUGIN_ALGORITHM[algo]):
            return algo
    return None


def canonical_protocol(name: str) -> str | None:
    key = name.strip().lower()
    for proto in PROTOCOLS:
        if key == proto.lower():
            return proto
    return None


def function_reason(collective: str) -> str | None:
    """Why NCCL offers no algorithm choice for this collective, or None."""
    if collective in NCCL_FUNCTION:
        return None
    return (f"NCCL runs {collective} as point-to-point send/receive: NCCL_ALGO, NCCL_PROTO and "
            "tuner plugins choose only for " + ", ".join(NCCL_FUNCTION.values())
            + " (ncclFuncStr, src/init.cc)")


def combination_reason(collective: str, algo: str, proto: str, version_code: int,
                       nnodes: int | None = None) -> str | None:
    """Why NCCL `version_code` never runs `algo`/`proto` for `collective`, or
    None when NCCL may run it (the machine may still refuse: see module doc).

    Source: src/graph/tuning.cc ncclTopoTuneModel, the loop that fills
    comm->bandwidths (a zero bandwidth means "never chosen"), at each tag."""
    fn = NCCL_FUNCTION.get(collective)
    if fn is None:
        return function_reason(collective)
    v = version_text(version_code)
    if algo not in algorithms(version_code):
        return f"NCCL {v} has no {algo} algorithm (PAT came in 2.23)"
    if fn in ("Broadcast", "Reduce") and algo != "Ring":
        return f"NCCL runs {fn} only with Ring (tuning.cc)"
    if fn in ("AllGather", "ReduceScatter"):
        allowed = ["Ring"]
        if version_code >= 21900:
            allowed.append("NVLS")
        if version_code >= 22000:
            allowed.append("CollNetDirect")
        if version_code >= 22300:
            allowed.append("PAT")
        if algo not in allowed:
            return f"NCCL {v} runs {fn} only with {', '.join(allowed)} (tuning.cc)"
    if fn == "AllReduce" and algo == "PAT":
        return "NCCL has no PAT AllReduce (tuning.cc)"
    if algo in ("NVLS", "NVLSTree", "CollNetDirect", "CollNetChain", "PAT") and proto != "Simple":
        return f"NCCL runs {algo} only with the Simple protocol (tuning.cc)"
    if algo == "NVLSTree" and nnodes == 1:
        return "NCCL disables NVLSTree on a single node (tuning.cc: nNodes == 1)"
    return None


def env_value(collective: str, name: str, version_code: int) -> str:
    """The NCCL_ALGO / NCCL_PROTO value selecting `name` for this collective
    only where the library reads per-function prefixes (2.24+), else for all."""
    if version_code >= PREFIX_SYNTAX_SINCE:
        return f"{NCCL_FUNCTION[collective].lower()}:{name}"
    return name
