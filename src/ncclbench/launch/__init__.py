"""Starting and joining a job: launcher detection, host communicators, the TCP
rendezvous, ncclbench's own launchers and the pre-flight checks.

Names are imported lazily so that `import ncclbench.launch` stays cheap (it
runs in every rank of a 64-process job on a 2-core machine).
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "LaunchInfo": "detect", "detect_launch": "detect", "expand_hostlist": "detect", "derive_token": "detect",
    "HostComm": "hostcomm", "SingleHostComm": "hostcomm", "MpiHostComm": "hostcomm",
    "TcpHostComm": "rendezvous", "format_ranks": "rendezvous",
    "make_host_comm": "bootstrap", "default_timeout": "bootstrap", "mpi_impossible_reason": "bootstrap",
    "host_comm_name": "bootstrap",
    "LocalSpawnLauncher": "spawn", "spawn_mpiexec": "spawn", "find_mpiexec": "spawn", "strip_nprocs": "spawn",
    "RankFacts": "facts", "GpuFact": "facts", "collect_rank_facts": "facts",
    "Finding": "preflight_checks", "check_facts": "preflight_checks", "format_rank_table": "preflight_checks",
    "format_host_lines": "preflight_checks", "local_ranks": "preflight_checks",
    "run_checks": "preflight_checks", "assigned_gpus": "preflight_checks",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module 'ncclbench.launch' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{mod}", __name__), name)
