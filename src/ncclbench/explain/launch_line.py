"""The command line pasted with a log: launcher, hosts, ranks, and the NCCL settings it passed.

People paste `mpirun -np 16 -H a:8,b:8 -x NCCL_DEBUG=INFO ./all_reduce_perf -b 8 -e 1G -g 1` or
`srun -N 2 --ntasks-per-node 8 --mpi=pmix --export=ALL,NCCL_IB_HCA=mlx5 all_reduce_perf ...` above
their output.  What such a line states is a fact about the launch (the hosts asked for, the
variables passed); what it leaves out stays unknown: a value passed by name only (`-x NCCL_X`) was
taken from the shell, which the paste does not show.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

_ENV_ASSIGN = re.compile(r"^(?P<k>(?:NCCL|CUDA|FI|OFI|UCX|NVSHMEM)_\w+)=(?P<v>.*)$")


@dataclass
class LaunchFacts:
    line: str
    launcher: str | None = None  # "mpirun" / "srun" / "torchrun" / None (the binary alone)
    binary: str | None = None  # "all_reduce_perf"
    nprocs: int | None = None  # -np / -n / --ntasks
    hosts: dict[str, int | None] = field(default_factory=dict)  # -H a:8,b:8 -> {"a": 8, "b": 8}
    nnodes: int | None = None  # srun -N / --nodes
    per_node: int | None = None  # --ntasks-per-node, -N/--npernode (Open MPI), ppr:8:node
    mpi_plugin: str | None = None  # srun --mpi=pmix
    env: dict[str, str] = field(default_factory=dict)  # NCCL_*=value passed on the line
    env_by_name: list[str] = field(default_factory=list)  # -x NCCL_X: passed from the shell, value unknown
    ngpus: int | None = None  # nccl-tests -g
    nthreads: int | None = None  # nccl-tests -t

    def describe(self) -> str:
        parts = [self.launcher or "the binary alone"]
        if self.nprocs:
            parts.append(f"{self.nprocs} process(es)")
        if self.hosts:
            parts.append("hosts " + ",".join(f"{h}:{n}" if n else h for h, n in self.hosts.items()))
        if self.nnodes:
            parts.append(f"{self.nnodes} node(s)")
        if self.per_node:
            parts.append(f"{self.per_node} per node")
        if self.mpi_plugin:
            parts.append(f"--mpi={self.mpi_plugin}")
        if self.ngpus:
            parts.append(f"-g {self.ngpus}")
        if self.env:
            parts.append("sets " + " ".join(f"{k}={v}" for k, v in self.env.items()))
        if self.env_by_name:
            parts.append("passes " + " ".join(self.env_by_name) + " (values from the shell, not in the log)")
        return ", ".join(parts)


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def parse_launch_line(line: str) -> LaunchFacts | None:  # noqa: C901 - complexity 31 when the limit came; split it (issue 33)
    """The facts of one pasted command line, or None when it names no launcher and no nccl-tests binary."""
    text = line.strip().lstrip("$#> ").strip()
    try:
        words = shlex.split(text, posix=True)
    except ValueError:
        words = text.split()
    f = LaunchFacts(line=line.strip())
    i = 0
    while i < len(words):
        w = words[i]
        nxt = words[i + 1] if i + 1 < len(words) else None
        base = w.rsplit("/", 1)[-1]
        if m := _ENV_ASSIGN.match(w):
            f.env.setdefault(m.group("k"), m.group("v"))
        elif base in ("mpirun", "mpiexec", "orterun", "srun", "prun", "torchrun") and f.launcher is None:
            f.launcher = base
        elif base.endswith(("_perf", "_perf_mpi")) and f.binary is None:
            f.binary = base
        elif f.binary is not None:  # nccl-tests' own options
            if w in ("-g", "--ngpus"):
                f.ngpus, i = _int(nxt), i + 1
            elif w in ("-t", "--nthreads"):
                f.nthreads, i = _int(nxt), i + 1
        elif w in ("-np", "-n", "--np", "--ntasks", "-c") and f.launcher != "srun" or \
                (f.launcher == "srun" and w in ("-n", "--ntasks")):
            if w != "-c":
                f.nprocs, i = _int(nxt), i + 1
        elif w.startswith(("--ntasks=", "--np=")):
            f.nprocs = _int(w.split("=", 1)[1])
        elif w in ("-H", "--host", "-host", "--hosts"):
            for item in (nxt or "").split(","):
                name, _, slots = item.partition(":")
                if name:
                    f.hosts[name] = _int(slots) if slots else None
            i += 1
        elif w in ("-N", "--nodes") and f.launcher == "srun":
            f.nnodes, i = _int((nxt or "").split("-")[0]), i + 1
        elif w.startswith("--nodes="):
            f.nnodes = _int(w.split("=", 1)[1].split("-")[0])
        elif w in ("-N", "--npernode", "-npernode") and f.launcher != "srun":
            f.per_node, i = _int(nxt), i + 1
        elif w == "--ntasks-per-node" or w.startswith("--ntasks-per-node="):
            value = w.split("=", 1)[1] if "=" in w else nxt
            f.per_node = _int(value)
            i += 0 if "=" in w else 1
        elif w == "--map-by" and nxt and (m := re.match(r"ppr:(\d+):node", nxt)):
            f.per_node, i = int(m.group(1)), i + 1
        elif w.startswith("--mpi="):
            f.mpi_plugin = w.split("=", 1)[1]
        elif w == "--mpi":
            f.mpi_plugin, i = nxt, i + 1
        elif w == "-x" and nxt:
            if m := _ENV_ASSIGN.match(nxt):
                f.env.setdefault(m.group("k"), m.group("v"))
            elif nxt.startswith(("NCCL_", "CUDA_", "FI_")):
                f.env_by_name.append(nxt)
            i += 1
        elif w.startswith("--export="):
            for item in w.split("=", 1)[1].split(","):
                if m := _ENV_ASSIGN.match(item):
                    f.env.setdefault(m.group("k"), m.group("v"))
        elif w in ("-genv", "--env") and nxt and i + 2 < len(words):
            if nxt.startswith("NCCL_"):
                f.env.setdefault(nxt, words[i + 2])
            i += 2
        i += 1
    if f.launcher is None and f.binary is None:
        return None
    return f


def launch_facts(lines: list[str]) -> LaunchFacts | None:
    """The first pasted line that reads as a launch (the one the output belongs to)."""
    for line in lines:
        if (f := parse_launch_line(line)) is not None:
            return f
    return None
