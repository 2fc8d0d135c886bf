"""`ncclbench preflight`: the "MPI hello world" maintainers ask for, built in.

It forms the job exactly as a benchmark would (same launcher detection, same
host communicator, a 128-byte broadcast like the NCCL unique id, a barrier),
gathers every rank's facts, and runs pure checks over them for the launch
mistakes that cost users days: ranks that do not form one job, two ranks on
one GPU, more ranks than GPUs, NCCL_* set on some ranks only, a tiny
/dev/shm, versions that differ between hosts.  No collective runs, and it
works on machines without GPUs.  Exit 0 when clean, 6 (invalid usage) on any
trap.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..core.config import Backend
from ..core.errors import BenchError, ExitCode
from .detect import LaunchInfo
from .facts import SHM_MIN_BYTES, RankFacts
from .hostid import local_ranks_by_host
from .rendezvous import format_ranks

ERROR, WARN, INFO = "error", "warn", "info"


@dataclass(frozen=True)
class Finding:
    level: str  # error (a trap: exit non-zero), warn, info
    message: str
    check: str = ""  # short id: independent-copies, duplicate-gpu, too-few-gpus, nccl-env, shm, version...

    def __str__(self) -> str:
        return f"{self.level.upper()}: {self.message}"


def _mib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def local_ranks(facts: Sequence[RankFacts]) -> list[int]:
    """nccl-tests' localRank: lower-numbered processes with the same host hash (docs/behaviour.md §2.2)."""
    seen: dict[tuple[str, str], int] = defaultdict(int)
    out = []
    for f in facts:
        out.append(seen[f.host_key])
        seen[f.host_key] += 1
    return out


def assigned_gpus(facts: Sequence[RankFacts], gpus_per_rank: int = 1) -> list[list[int]]:
    """CUDA ordinals each rank will use: NCCL_TESTS_DEVICE or localRank*T*G, then T*G in a row."""
    out = []
    for f, lr in zip(facts, local_ranks(facts)):
        base_env = f.env.get("NCCL_TESTS_DEVICE", "").strip()
        base = int(base_env) if base_env.lstrip("-").isdigit() else lr * gpus_per_rank
        out.append(list(range(base, base + gpus_per_rank)))
    return out


# Settings that name a host's own things (its identity, its interfaces and HCAs): they may differ
# between hosts, and only a difference within one host (as NCCL groups them) is a trap.  An
# NCCL_HOSTID set on some ranks and not others is one: the unset ones group by host name.
PER_HOST_ENV = ("NCCL_HOSTID", "NCCL_SOCKET_IFNAME", "NCCL_IB_HCA")


def _per_host_conflict(name: str, groups: dict[object, list[int]],
                       facts: Sequence[RankFacts]) -> dict[object, list[int]]:
    """The value groups worth a warning for a per-host setting: all of them when it differs
    inside one host (or NCCL_HOSTID is unset on some ranks), else one (no warning)."""
    if name == "NCCL_HOSTID":
        return groups if None in groups else {}
    by_host: dict[str, set[str | None]] = defaultdict(set)
    for f in facts:
        by_host[f.host_label].add(f.env.get(name))
    return groups if any(len(v) > 1 for v in by_host.values()) else {}


def _by_value(facts: Sequence[RankFacts], key: Callable[[RankFacts], object]) -> dict[object, list[int]]:
    groups: dict[object, list[int]] = defaultdict(list)
    for f in facts:
        groups[key(f)].append(f.rank)
    return groups


def _env_value(name: str) -> Callable[[RankFacts], str | None]:
    """A rank's value of environment variable `name` (None when unset)."""
    return lambda f: f.env.get(name)


def _describe_groups(groups: dict[object, list[int]], facts: Sequence[RankFacts]) -> str:
    hosts = {f.rank: f.host for f in facts}
    parts = []
    for value, ranks in sorted(groups.items(), key=lambda kv: kv[1][0]):
        shown = "unset" if value is None else repr(value)
        hs = sorted({hosts[r] for r in ranks})
        parts.append(f"{shown} on ranks {format_ranks(ranks)} ({', '.join(hs[:4])}{', ...' if len(hs) > 4 else ''})")
    return "; ".join(parts)


def _check_one_job(facts: Sequence[RankFacts], expected_size: int) -> list[Finding]:
    """Whether the processes the launcher started formed one world (not independent copies)."""
    out: list[Finding] = []
    n = len(facts)
    if n != expected_size:
        out.append(Finding(ERROR, (
            f"the launcher started {expected_size} processes but they formed a world of {n}: the ranks are "
            f"independent copies, not one job. Under mpirun this means mpi4py uses another MPI than the "
            f"mpirun; under srun, that srun lacks PMI for it (use --mpi=pmix / --mpi=pmi2, or let ncclbench "
            f"join the tasks over TCP)"), "independent-copies"))
    sizes = _by_value(facts, lambda f: f.size)
    if len(sizes) > 1:
        out.append(Finding(ERROR, f"ranks disagree on the world size: {_describe_groups(sizes, facts)}",
                           "independent-copies"))
    return out


def _check_gpus(facts: Sequence[RankFacts], gpus_per_rank: int, require_gpus: bool | None) -> list[Finding]:
    """Every rank sees a GPU where GPUs are needed, the GPUs are assigned sanely, NCCL loads."""
    out: list[Finding] = []
    with_gpus = [f for f in facts if f.gpus]
    need = require_gpus if require_gpus is not None else bool(with_gpus)
    if need and len(with_gpus) < len(facts):
        for f in facts:
            if not f.gpus:
                out.append(Finding(ERROR, f"rank {f.rank} on {f.host} sees no GPU ({f.gpu_note or 'none visible'})",
                                   "no-gpu"))
    if not with_gpus and not need:
        out.append(Finding(INFO, "no GPU visible on any rank: GPU checks skipped (fine for --backend mpi)", "no-gpu"))
    if with_gpus:
        out.extend(_check_gpu_assignment(facts, gpus_per_rank))
        if need:
            missing = [f for f in facts if f.gpus and not f.nccl_version and f.local_rank == 0]
            for f in missing:
                out.append(Finding(ERROR, f"NCCL cannot be loaded on {f.host}: pip install 'ncclbench[cu12]' "
                                          f"or 'ncclbench[cu13]' (or --nccl-lib PATH)", "nccl-missing"))
    return out


def _check_env(facts: Sequence[RankFacts]) -> list[Finding]:
    """NCCL_* settings that differ between ranks (per host where a setting is meant per host)."""
    out: list[Finding] = []
    names = sorted({k for f in facts for k in f.env if k.startswith("NCCL_")})
    for name in names:
        groups = _by_value(facts, _env_value(name))
        if name in PER_HOST_ENV:
            groups = _per_host_conflict(name, groups, facts)
        if len(groups) > 1:
            out.append(Finding(WARN, (
                f"{name} differs between ranks: {_describe_groups(groups, facts)}; export it to every rank "
                f"(mpirun -x {name}, mpiexec -genv {name} ..., srun --export=ALL, the pod spec's env)"),
                "nccl-env"))
    return out


def _check_shm(facts: Sequence[RankFacts]) -> list[Finding]:
    """Hosts whose /dev/shm is missing or too small for NCCL (an error where GPUs are in use)."""
    out: list[Finding] = []
    small: dict[tuple[str, int | None], list[int]] = defaultdict(list)  # (host, size) -> ranks
    for f in facts:
        if f.shm_total is None or f.shm_total < SHM_MIN_BYTES:
            small[(f.host, f.shm_total)].append(f.rank)
    for (host, total), ranks in small.items():
        where = f"{host} (ranks {format_ranks(ranks)})"
        if total is None:
            out.append(Finding(WARN, f"{where} has no /dev/shm: NCCL needs shared memory within a host", "shm"))
            continue
        gpu_host = any(g.gpus for g in facts if g.rank in ranks)
        out.append(Finding(ERROR if gpu_host else WARN, (
            f"/dev/shm on {where} is only {_mib(total)} (NCCL needs at least {_mib(SHM_MIN_BYTES)}): "
            f"docker run --shm-size=1g (or --ipc=host); Kubernetes: mount an emptyDir with medium: Memory "
            f"at /dev/shm"), "shm"))
    return out


def _check_versions(facts: Sequence[RankFacts]) -> list[Finding]:
    """NCCL, ncclbench, driver, CUDA and Python versions that differ between ranks."""
    out: list[Finding] = []
    versions: tuple[tuple[str, Callable[[RankFacts], object], str], ...] = (
        ("NCCL version", lambda f: f.nccl_version, ERROR),
        ("ncclbench version", lambda f: f.ncclbench_version, ERROR),
        ("NVIDIA driver version", lambda f: f.driver_version, WARN),
        ("CUDA driver version", lambda f: f.cuda_driver_version, WARN),
        ("Python version", lambda f: f.python.rsplit(".", 1)[0] if f.python else None, INFO))
    for label, key, level in versions:
        groups = _by_value([f for f in facts if key(f) is not None], key)
        if len(groups) > 1:
            out.append(Finding(level, f"{label} differs between ranks: {_describe_groups(groups, facts)}",
                               "version"))
    return out


def check_facts(facts: Sequence[RankFacts], expected_size: int, gpus_per_rank: int = 1,
                require_gpus: bool | None = None) -> list[Finding]:
    """Every check over the gathered facts (pure).  `require_gpus`: True for the
    NCCL backend, False for the CPU backend, None: only if some rank has a GPU."""
    n = len(facts)
    hosts = sorted({f.host for f in facts})
    out = (_check_one_job(facts, expected_size) + _check_gpus(facts, gpus_per_rank, require_gpus)
           + _check_env(facts) + _check_shm(facts) + _check_versions(facts))
    if len(hosts) == 1 and n > 1 and expected_size == n:
        out.append(Finding(INFO, f"all {n} ranks run on one host ({hosts[0]})", "hosts"))
    return out


def _check_gpu_assignment(facts: Sequence[RankFacts], gpus_per_rank: int) -> list[Finding]:
    out: list[Finding] = []
    assigned = assigned_gpus(facts, gpus_per_rank)
    short: dict[str, list[RankFacts]] = defaultdict(list)
    users: dict[str, list[tuple[int, int, str, str]]] = defaultdict(list)
    hostids: dict[int, str | None] = {f.rank: f.env.get("NCCL_HOSTID") for f in facts}
    for f, ords in zip(facts, assigned):
        if not f.gpus:
            continue
        if max(ords) >= len(f.gpus) or min(ords) < 0:
            short[f.host].append(f)
            continue
        for o in ords:
            g = f.gpus[o]
            users[g.uuid].append((f.rank, o, f.host_label, g.pci))
    for host, fs in short.items():
        ranks_on_host = [f.rank for f in facts if f.host == host]
        visible = max(len(f.gpus) for f in fs)
        out.append(Finding(ERROR, (
            f"fewer GPUs than ranks on {host}: {len(ranks_on_host)} processes x {gpus_per_rank} GPU(s) each "
            f"but rank(s) {format_ranks(f.rank for f in fs)} see only {visible} GPU(s) (nccl-tests would stop "
            f"with 'Invalid number of GPUs'). Start one process per GPU with -g 1, or, if the launcher gives "
            f"each process its own GPU (CUDA_VISIBLE_DEVICES per rank), set NCCL_TESTS_DEVICE=0"),
            "too-few-gpus"))
    for uuid, us in users.items():
        if len(us) > 1 and len({h for _, _, h, _ in us}) == len(us) and all(hostids[r] for r, _, _, _ in us):
            # one GPU, each user on another host by an NCCL_HOSTID set on purpose (fake hosts): NCCL's
            # duplicate-GPU check compares GPUs within a host only, and joins these ranks over its network.
            # Without NCCL_HOSTID (two containers given one GPU) it stays an error: a misconfiguration
            desc = ", ".join(f"rank {r} (host {h})" for r, _, h, _ in us)
            out.append(Finding(WARN, (
                f"the same GPU {uuid} [{us[0][3]}] is shared by {desc}, different hosts to NCCL (NCCL_HOSTID): "
                f"NCCL allows it and connects them over its network; the GPU's time is shared"), "shared-gpu"))
        elif len(us) > 1:
            desc = ", ".join(f"rank {r} (device {o} on {h})" for r, o, h, _ in us)
            out.append(Finding(ERROR, (
                f"the same GPU {uuid} [{us[0][3]}] is used by {desc}: each rank needs its own GPU. Give each "
                f"process a distinct CUDA_VISIBLE_DEVICES, or leave all GPUs visible and let ranks pick by "
                f"local rank; NCCL_TESTS_DEVICE moves the first device"), "duplicate-gpu"))
    return out


def format_rank_table(facts: Sequence[RankFacts], gpus_per_rank: int = 1) -> str:
    """nccl-tests-style `#  Rank` lines (one per GPU a rank will use) plus one line per host."""
    lines = []
    assigned = assigned_gpus(facts, gpus_per_rank)
    for f, ords in zip(facts, assigned):
        if not f.gpus:
            lines.append(f"#  Rank {f.rank:2d} Pid {f.pid:6d} on {f.host:>10} device  - [cpu]")
            continue
        for i, o in enumerate(ords):
            rank = f.rank * gpus_per_rank + i
            if 0 <= o < len(f.gpus):
                g = f.gpus[o]
                lines.append(f"#  Rank {rank:2d} Pid {f.pid:6d} on {f.host:>10} device {o:2d} [{g.pci}] "
                             f"{g.name} {g.uuid}")
            else:
                lines.append(f"#  Rank {rank:2d} Pid {f.pid:6d} on {f.host:>10} device {o:2d} (not visible: "
                             f"{len(f.gpus)} GPU(s))")
    lines.append("#")
    lines.extend(format_host_lines(facts))
    return "\n".join(lines)


def format_host_lines(facts: Sequence[RankFacts]) -> list[str]:
    """One `# Host` line per host: ranks, GPUs, driver/CUDA/NCCL/ncclbench/Python versions and
    /dev/shm; a version that differs from the first host's is marked `(!)`.  The benchmark can
    print these under its device list."""
    lines: list[str] = []
    order: dict[str, list[RankFacts]] = {}
    for f in facts:
        order.setdefault(f.host, []).append(f)
    ref: RankFacts | None = None
    for host, fs in order.items():
        f0 = next((f for f in fs if f.nccl_version), fs[0])
        ref = ref or f0  # the first host's values; others are flagged (!) where they differ

        def val(name: str, f0: RankFacts = f0, ref: RankFacts = ref) -> str:
            v = getattr(f0, name)
            return f"{v or 'n/a'}{' (!)' if v and getattr(ref, name) and v != getattr(ref, name) else ''}"

        uuids = {g.uuid for f in fs for g in f.gpus}
        shm = _mib(f0.shm_total) if f0.shm_total is not None else "none"
        lines.append(f"# Host {host:>10}: ranks {format_ranks(f.rank for f in fs)}, {len(uuids)} GPU(s), "
                     f"driver {val('driver_version')}, CUDA {val('cuda_driver_version')}, "
                     f"NCCL {val('nccl_version')}, ncclbench {val('ncclbench_version')}, "
                     f"python {f0.python}, /dev/shm {shm}")
    return lines


# -- the check, for real ---------------------------------------------------------------------

@dataclass(frozen=True)
class ExtraFacts:
    """More facts per rank from a layer above this one (explain's topology): `collect(info)` on
    every rank, gathered beside its RankFacts; `report(facts, collected)` at rank 0 gives the
    lines printed under the rank table and the members added to the JSON."""

    collect: Callable[[LaunchInfo], Any]
    report: Callable[[list[RankFacts], list[Any]], tuple[list[str], dict[str, Any]]]


def run_checks(info: LaunchInfo, *, timeout_s: float | None = None, backend: Backend | None = None,
               gpus_per_rank: int = 1, nccl_lib: str | None = None, json_path: str | None = None,
               extra: ExtraFacts | None = None) -> int:
    """Form the job described by `info` as a benchmark would, gather every rank's
    facts and print the verdict at rank 0.  Collective: every rank calls it.
    Returns the exit status (0 clean, 6 on a trap), the same on every rank.  `backend`: the
    one the run would use, None for --backend auto (GPUs required only if some rank has one)."""
    from .bootstrap import host_comm_name, make_host_comm
    from .facts import collect_rank_facts

    mpi = backend is Backend.MPI
    comm = make_host_comm(info, timeout_s, prefer_mpi=mpi, require_mpi=mpi)
    try:
        uid = comm.bcast(os.urandom(128) if comm.rank == 0 else None, 0)  # the NCCL unique id's trip
        if not isinstance(uid, bytes) or len(uid) != 128:
            raise BenchError("the 128-byte broadcast arrived damaged", ExitCode.INTERNAL)
        comm.barrier()
        facts = collect_rank_facts(info, hostcomm=host_comm_name(comm), nccl_lib=nccl_lib,
                                   probe_nccl=info.local_rank == 0 if mpi else None)
        gathered = comm.gather(facts, 0)
        more = None
        if extra is not None:  # collected by each host's first rank as NCCL groups hosts (NCCL_HOSTID)
            on_host = comm.bcast(local_ranks_by_host([f.host_label for f in gathered]) if gathered else None, 0)
            more = comm.gather(extra.collect(dataclasses.replace(info, local_rank=on_host[comm.rank])), 0)
        code = 0
        if comm.rank == 0:
            assert gathered is not None
            require = None if backend is None else backend is Backend.NCCL
            findings = check_facts(gathered, info.size, gpus_per_rank, require)
            added = extra.report(gathered, more or []) if extra is not None else ([], {})
            code = _report(gathered, findings, info, host_comm_name(comm), gpus_per_rank, json_path, added)
        code = comm.bcast(code, 0)
        comm.barrier()
        return int(code)
    finally:
        comm.close()


def _report(facts: list[RankFacts], findings: list[Finding], info: LaunchInfo, hostcomm: str, gpr: int,
            json_path: str | None, added: tuple[list[str], dict[str, Any]] = ([], {})) -> int:
    hosts = len({f.host_label for f in facts})
    print(f"# ncclbench preflight: {len(facts)} process(es) on {hosts} host(s); launcher: {info.launcher}; "
          f"host communication: {hostcomm}")
    print(format_rank_table(facts, gpr))
    for line in added[0]:
        print(line)
    for f in findings:
        print(f"# {f}")
    errors = [f for f in findings if f.level == ERROR]
    warns = [f for f in findings if f.level == WARN]
    verdict = "FAILED" if errors else "OK"
    print(f"# preflight {verdict}: {len(errors)} error(s), {len(warns)} warning(s)", flush=True)
    if json_path:
        doc = {"launcher": info.kind, "hostcomm": hostcomm, "expected_size": info.size,
               "facts": [f.to_dict() for f in facts],
               "findings": [{"level": f.level, "check": f.check, "message": f.message} for f in findings],
               "ok": not errors, **added[1]}
        try:
            with open(json_path, "w") as fh:
                json.dump(doc, fh, indent=1)
        except OSError as e:
            raise BenchError(f"cannot write {json_path}: {e.strerror}", ExitCode.INVALID_USAGE) from None
    if errors:
        print(f"ncclbench preflight: {len(errors)} problem(s) found: " + " | ".join(
            e.message.split(":")[0] for e in errors[:3]), file=sys.stderr, flush=True)
        return int(ExitCode.INVALID_USAGE)
    return 0

