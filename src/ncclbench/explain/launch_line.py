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
from collections.abc import Callable
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


_LAUNCHERS = ("mpirun", "mpiexec", "orterun", "srun", "prun", "torchrun")


def _program_word(f: LaunchFacts, w: str, nxt: str | None, after: str | None) -> int | None:
    """A variable set before the command, the launcher, the nccl-tests binary, and every word after
    the binary (its own options: -g, -t).  The words it takes after `w`, or None: not its word."""
    base = w.rsplit("/", 1)[-1]
    if m := _ENV_ASSIGN.match(w):
        f.env.setdefault(m.group("k"), m.group("v"))
    elif base in _LAUNCHERS and f.launcher is None:
        f.launcher = base
    elif base.endswith(("_perf", "_perf_mpi")) and f.binary is None:
        f.binary = base
    elif f.binary is not None:  # nccl-tests' own options
        if w in ("-g", "--ngpus"):
            f.ngpus = _int(nxt)
            return 1
        if w in ("-t", "--nthreads"):
            f.nthreads = _int(nxt)
            return 1
    else:
        return None
    return 0


def _read_hosts(f: LaunchFacts, hosts: str | None) -> None:
    """`-H a:8,b:8` -> {"a": 8, "b": 8}; a host without slots -> None."""
    for item in (hosts or "").split(","):
        name, _, slots = item.partition(":")
        if name:
            f.hosts[name] = _int(slots) if slots else None


def _count_word(f: LaunchFacts, w: str, nxt: str | None, after: str | None) -> int | None:
    """The launcher's counts: processes, hosts, nodes, processes per node (the same letters mean
    different things to srun and to Open MPI).  The words it takes after `w`, or None."""
    if w in ("-np", "-n", "--np", "--ntasks", "-c") and f.launcher != "srun" or \
            (f.launcher == "srun" and w in ("-n", "--ntasks")):
        if w == "-c":
            return 0
        f.nprocs = _int(nxt)
    elif w.startswith(("--ntasks=", "--np=")):
        f.nprocs = _int(w.split("=", 1)[1])
        return 0
    elif w in ("-H", "--host", "-host", "--hosts"):
        _read_hosts(f, nxt)
    elif w in ("-N", "--nodes") and f.launcher == "srun":
        f.nnodes = _int((nxt or "").split("-")[0])
    elif w.startswith("--nodes="):
        f.nnodes = _int(w.split("=", 1)[1].split("-")[0])
        return 0
    elif w in ("-N", "--npernode", "-npernode") and f.launcher != "srun":
        f.per_node = _int(nxt)
    elif w == "--ntasks-per-node" or w.startswith("--ntasks-per-node="):
        f.per_node = _int(w.split("=", 1)[1] if "=" in w else nxt)
        return 0 if "=" in w else 1
    elif w == "--map-by" and nxt and (m := re.match(r"ppr:(\d+):node", nxt)):
        f.per_node = int(m.group(1))
    else:
        return None
    return 1


def _env_word(f: LaunchFacts, w: str, nxt: str | None, after: str | None) -> int | None:
    """srun's MPI plugin and the variables the launcher passes (-x, --export=, -genv/--env).  The
    words it takes after `w`, or None."""
    if w.startswith("--mpi="):
        f.mpi_plugin = w.split("=", 1)[1]
    elif w == "--mpi":
        f.mpi_plugin = nxt
        return 1
    elif w == "-x" and nxt:
        if m := _ENV_ASSIGN.match(nxt):
            f.env.setdefault(m.group("k"), m.group("v"))
        elif nxt.startswith(("NCCL_", "CUDA_", "FI_")):
            f.env_by_name.append(nxt)
        return 1
    elif w.startswith("--export="):
        for item in w.split("=", 1)[1].split(","):
            if m := _ENV_ASSIGN.match(item):
                f.env.setdefault(m.group("k"), m.group("v"))
    elif w in ("-genv", "--env") and nxt and after is not None:
        if nxt.startswith("NCCL_"):
            f.env.setdefault(nxt, after)
        return 2
    else:
        return None
    return 0


# In order: the first that knows a word reads it (and the words after it that it takes).
_WORD_RULES: tuple[Callable[[LaunchFacts, str, str | None, str | None], int | None], ...] = (
    _program_word, _count_word, _env_word)


def _read_word(f: LaunchFacts, words: list[str], i: int) -> int:
    """Read words[i] into `f`; the number of words after it that it took."""
    nxt = words[i + 1] if i + 1 < len(words) else None
    after = words[i + 2] if i + 2 < len(words) else None
    for rule in _WORD_RULES:
        if (taken := rule(f, words[i], nxt, after)) is not None:
            return taken
    return 0


def parse_launch_line(line: str) -> LaunchFacts | None:
    """The facts of one pasted command line, or None when it names no launcher and no nccl-tests binary."""
    text = line.strip().lstrip("$#> ").strip()
    try:
        words = shlex.split(text, posix=True)
    except ValueError:
        words = text.split()
    f = LaunchFacts(line=line.strip())
    i = 0
    while i < len(words):
        i += _read_word(f, words, i) + 1
    if f.launcher is None and f.binary is None:
        return None
    return f


def launch_facts(lines: list[str]) -> LaunchFacts | None:
    """The first pasted line that reads as a launch (the one the output belongs to)."""
    for line in lines:
        if (f := parse_launch_line(line)) is not None:
            return f
    return None
