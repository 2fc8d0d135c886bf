"""Which launcher started this process, and what it told us.

Users start jobs with whatever their site has (mpirun, srun, torchrun, a
Kubernetes operator); ncclbench reads the variables each of them sets rather
than asking for one.  The order matters because launchers nest: mpirun inside
an sbatch allocation still leaves SLURM_* behind, and torchrun under srun sets
both families, so the innermost launcher wins: ncclbench's own spawn (it sets its variables on
the very processes it starts) -> OMPI -> PMI/Hydra -> Slurm -> torchrun-style
(torchrun before Slurm when torchrun runs under srun) -> single.

Pure functions of an environment mapping, so every branch is tested from
plain dicts without starting any launcher.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import overload

from ..core.errors import BenchError, ExitCode
from ..core.hostlist import expand_hostlist

KINDS = ("ompi", "mpich-hydra", "slurm", "torchrun", "env", "ncclbench-spawn", "comm-id", "single")

# Slurm step ids at or above this are pseudo-steps (batch script, extern,
# interactive): code there is not one of srun's tasks.
_SLURM_PSEUDO_STEP = 0xFFFFFFF0

DEFAULT_PORT = 29500  # torch's default MASTER_PORT, used when only MASTER_ADDR is given

_RAW_PREFIXES = (
    "OMPI_COMM_WORLD_", "PMIX_RANK", "PMIX_NAMESPACE", "PMI_", "MPI_LOCAL", "HYDRA_", "SLURM_",
    "TORCHELASTIC_", "NCCLBENCH_", "MV2_COMM_WORLD_",
)
_RAW_NAMES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
              "MASTER_PORT", "NCCL_COMM_ID")


@dataclass
class LaunchInfo:
    """What the launcher says about this process.

    `size` is the launcher's view of the world; the host communicator checks
    that the processes really form a world of that size (the independent-copies
    trap).  `master_addr`/`master_port` is where rank 0's TCP rendezvous listens
    (None where only MPI can connect the ranks).  `mpi_capable`: MPI_Init can
    find its peers (an MPI launcher, or srun with PMI/PMIx).
    """

    kind: str
    rank: int = 0
    size: int = 1
    local_rank: int = 0
    local_size: int = 1
    master_addr: str | None = None
    master_port: int | None = None
    node_name: str = ""
    job_id: str | None = None
    mpi_capable: bool = False
    launcher: str = ""  # human name for messages ("mpirun (Open MPI)", "srun", ...)
    comm_id: str | None = None  # NCCL_COMM_ID when set: NCCL's id can be made locally
    token: str | None = None  # explicit NCCLBENCH_TOKEN / spawn token
    listen_fd: int | None = None  # ncclbench-spawn: rank 0 inherits the bound socket
    raw: dict[str, str] = field(default_factory=dict)

    @property
    def is_multi(self) -> bool:
        return self.size > 1


# How each launcher is asked for N ranks, for the line that refuses --nprocs under it.
_ASK_FOR_RANKS = {"slurm": "srun -n {n}", "ompi": "mpirun -n {n}", "mpich-hydra": "mpiexec -n {n}",
                  "torchrun": "torchrun --nproc-per-node {n}"}


def check_nprocs(nprocs: int | None, launch: LaunchInfo) -> None:
    """`--nprocs N` starts N ranks on this host where no launcher did.  Under a launcher
    (`srun -n 1`, `mpirun`, torchrun, ...) the launcher made the ranks: N more per launched
    process is not what anyone means, and silently running the launcher's count instead is
    not what was asked either, so this is bad input - one line, exit 255 - naming what to
    ask the launcher for, or to run without it."""
    if nprocs is None or launch.kind in ("single", "ncclbench-spawn"):
        return  # (ncclbench's own ranks are started without --nprocs: launch.spawn.strip_nprocs)
    ask = _ASK_FOR_RANKS.get(launch.kind, "the launcher's option for {n} ranks").format(n=nprocs)
    raise BenchError(f"--nprocs {nprocs} starts ranks where no launcher did, but {launch.launcher} started this "
                     f"process (rank {launch.rank} of {launch.size}): ask it for the ranks ({ask}) and drop "
                     f"--nprocs, or run ncclbench --nprocs {nprocs} outside {launch.launcher}",
                     ExitCode.ARGUMENT, all_ranks=True)


@overload
def _int(env: Mapping[str, str], *names: str, default: int) -> int: ...
@overload
def _int(env: Mapping[str, str], *names: str, default: None = None) -> int | None: ...


def _int(env: Mapping[str, str], *names: str, default: int | None = None) -> int | None:
    for n in names:
        v = env.get(n)
        if v is not None and v.strip() != "":
            try:
                return int(v.strip())
            except ValueError:
                raise BenchError(f"launcher variable {n}={v!r} is not an integer", ExitCode.INVALID_USAGE) from None
    return default


def _raw(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k in _RAW_NAMES or k.startswith(_RAW_PREFIXES)}


# -- ports and tokens ------------------------------------------------------------------

def slurm_port(job_id: str | None, step_id: str | None) -> int:
    """A port every task of one Slurm step computes alike: 20000..29999, below
    Linux's ephemeral range so outgoing connections rarely hold it."""
    try:
        j, s = int(job_id or 0), int(step_id or 0)
    except ValueError:
        j = int(hashlib.sha256(f"{job_id}/{step_id}".encode()).hexdigest()[:8], 16)
        s = 0
    return 20000 + (j * 97 + s) % 10000


def derive_token(info: LaunchInfo) -> str:
    """The shared secret of the rendezvous: NCCLBENCH_TOKEN when set, else a
    digest of what every rank of this job sees alike (job id, master address).
    A derived token keeps strangers out (another job on the same port, a stale
    run); it is not a secret against someone who can read the job's
    environment — set NCCLBENCH_TOKEN for that."""
    if info.token:
        return info.token
    basis = f"ncclbench|{info.kind}|{info.job_id}|{info.master_addr}|{info.master_port}|{info.size}"
    return hashlib.sha256(basis.encode()).hexdigest()[:32]


def _parse_comm_id(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit():
        raise BenchError(f"NCCL_COMM_ID={value!r} is not <host>:<port>", ExitCode.INVALID_USAGE)
    return host.strip("[]"), int(port)


def _port_override(env: Mapping[str, str]) -> int | None:
    return _int(env, "NCCLBENCH_MASTER_PORT")


# -- detection -------------------------------------------------------------------------

def _check_rank(info: LaunchInfo) -> LaunchInfo:
    if info.size < 1 or not 0 <= info.rank < info.size:
        raise BenchError(f"{info.launcher or info.kind}: rank {info.rank} is outside a world of "
                         f"{info.size} processes", ExitCode.INVALID_USAGE)
    return info


@dataclass(frozen=True)
class _JobWide:
    """What applies whichever launcher started the process: read first, before any launcher's
    variables, so that a malformed one is reported in the same order whatever is found."""

    raw: dict[str, str]
    comm_id: str | None
    token: str | None
    node: str
    addr_override: str | None
    port_override: int | None


def _job_wide(env: Mapping[str, str]) -> _JobWide:
    raw = _raw(env)
    comm_id = env.get("NCCL_COMM_ID") or None
    token = env.get("NCCLBENCH_TOKEN") or None
    node = env.get("NCCLBENCH_NODE_NAME") or socket.gethostname()
    addr_override = env.get("NCCLBENCH_MASTER_ADDR") or None
    return _JobWide(raw, comm_id, token, node, addr_override, _port_override(env))


def _finish(info: LaunchInfo, env: Mapping[str, str], wide: _JobWide) -> LaunchInfo:
    """The launcher's facts completed with the job-wide ones and the overrides, rank checked."""
    info.raw, info.comm_id, info.node_name = wide.raw, wide.comm_id, wide.node
    info.token = info.token or wide.token
    if wide.addr_override:
        info.master_addr = wide.addr_override
    if wide.port_override:
        info.master_port = wide.port_override
    elif info.master_addr and not info.master_port:
        info.master_port = _int(env, "MASTER_PORT", default=DEFAULT_PORT)
    if info.master_addr is None and env.get("MASTER_ADDR") and info.kind in ("ompi", "mpich-hydra"):
        # the user exported MASTER_ADDR/PORT through mpirun (-x / -genv): TCP works too
        info.master_addr = env["MASTER_ADDR"]
        info.master_port = wide.port_override or _int(env, "MASTER_PORT", default=DEFAULT_PORT)
    return _check_rank(info)


def _spawn_info(env: Mapping[str, str], token: str | None) -> LaunchInfo | None:
    """0. ncclbench's own one-host launcher: always the innermost one, since it sets these
    variables on the very processes it starts (they may inherit srun's or torchrun's)."""
    if "NCCLBENCH_SPAWN_SIZE" not in env:
        return None
    return LaunchInfo(
        kind="ncclbench-spawn", launcher="ncclbench --nprocs",
        rank=_int(env, "NCCLBENCH_SPAWN_RANK", default=0),
        size=_int(env, "NCCLBENCH_SPAWN_SIZE", default=1),
        local_rank=_int(env, "NCCLBENCH_SPAWN_RANK", default=0),
        local_size=_int(env, "NCCLBENCH_SPAWN_SIZE", default=1),
        master_addr=env.get("NCCLBENCH_SPAWN_ADDR", "127.0.0.1"),
        master_port=_int(env, "NCCLBENCH_SPAWN_PORT"),
        token=env.get("NCCLBENCH_SPAWN_TOKEN") or token,
        listen_fd=_int(env, "NCCLBENCH_SPAWN_FD"),
        job_id=env.get("NCCLBENCH_SPAWN_TOKEN"))


def _ompi_info(env: Mapping[str, str]) -> LaunchInfo | None:
    """1. Open MPI (mpirun / mpiexec / prterun)."""
    if "OMPI_COMM_WORLD_SIZE" not in env:
        return None
    return LaunchInfo(
        kind="ompi", launcher="mpirun (Open MPI)", mpi_capable=True,
        rank=_int(env, "OMPI_COMM_WORLD_RANK", default=0),
        size=_int(env, "OMPI_COMM_WORLD_SIZE", default=1),
        local_rank=_int(env, "OMPI_COMM_WORLD_LOCAL_RANK", default=0),
        local_size=_int(env, "OMPI_COMM_WORLD_LOCAL_SIZE", default=1),
        job_id=env.get("PMIX_NAMESPACE") or env.get("OMPI_MCA_ess_base_jobid"))


def _slurm_step(env: Mapping[str, str]) -> tuple[int | None, int | None, bool]:
    """(SLURM_PROCID, the step's task count, whether this is a task of a real srun step: not
    the batch script's or an allocation's pseudo step)."""
    slurm_rank = _int(env, "SLURM_PROCID")
    slurm_size = _int(env, "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS")
    step_id = _int(env, "SLURM_STEP_ID", "SLURM_STEPID")
    in_slurm_step = slurm_rank is not None and slurm_size is not None and (
        step_id is None or step_id < _SLURM_PSEUDO_STEP) and ("SLURM_STEP_ID" in env or "SLURM_STEPID" in env)
    return slurm_rank, slurm_size, in_slurm_step


def _pmi_info(env: Mapping[str, str], pmi_rank: int, pmi_size: int) -> LaunchInfo:
    """2. PMI (MPICH Hydra, Intel MPI)."""
    return LaunchInfo(
        kind="mpich-hydra", launcher="mpiexec (MPICH Hydra / PMI)", mpi_capable=True,
        rank=pmi_rank, size=pmi_size,
        local_rank=_int(env, "MPI_LOCALRANKID", "PMI_LOCAL_RANK", default=0),
        local_size=_int(env, "MPI_LOCALNRANKS", "PMI_LOCAL_SIZE", default=1),
        job_id=env.get("PMI_JOBID") or env.get("PMI_KVSNAME"))


def _slurm_info(env: Mapping[str, str], slurm_rank: int, slurm_size: int, pmi_rank: int | None) -> LaunchInfo:
    """3. Slurm srun: the first host of the step's node list is the master, the port derived from
    the job and step ids."""
    hostlist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    master = None
    if hostlist:
        try:
            hosts = expand_hostlist(hostlist)
        except ValueError as e:
            raise BenchError(f"cannot read Slurm's node list: {e}", ExitCode.INVALID_USAGE) from None
        master = hosts[0] if hosts else None
    job = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")
    step = env.get("SLURM_STEP_ID") or env.get("SLURM_STEPID")
    pmi = bool(pmi_rank is not None or "PMIX_RANK" in env or env.get("SLURM_MPI_TYPE", "none") not in ("none", ""))
    return LaunchInfo(
        kind="slurm", launcher="srun", mpi_capable=pmi,
        rank=slurm_rank, size=slurm_size,
        local_rank=_int(env, "SLURM_LOCALID", default=0),
        local_size=_slurm_local_size(env),
        master_addr=master, master_port=slurm_port(job, step),
        job_id=f"{job}.{step}")


def _rank_env_info(env: Mapping[str, str], torch_rank: int, torch_size: int, torchrun: bool,
                   comm_id: str | None) -> LaunchInfo:
    """4. torchrun and anything else that sets RANK/WORLD_SIZE (k8s PyTorchJob, by hand)."""
    addr = env.get("MASTER_ADDR")
    port = _int(env, "MASTER_PORT")
    local_rank = _int(env, "LOCAL_RANK", default=0)
    local_size = _int(env, "LOCAL_WORLD_SIZE", default=1)
    if torchrun:
        # torchrun's agent may host its own TCPStore on MASTER_PORT: use the next one.
        return LaunchInfo(
            kind="torchrun", launcher="torchrun", rank=torch_rank, size=torch_size,
            local_rank=local_rank, local_size=local_size, master_addr=addr,
            master_port=port + 1 if port is not None else None,
            job_id=env.get("TORCHELASTIC_RUN_ID"))
    if addr is None and comm_id:
        host, cport = _parse_comm_id(comm_id)
        return LaunchInfo(
            kind="comm-id", launcher="NCCL_COMM_ID", rank=torch_rank, size=torch_size,
            local_rank=local_rank, local_size=local_size, master_addr=host, master_port=cport + 1,
            job_id=comm_id)
    return LaunchInfo(
        kind="env", launcher="RANK/WORLD_SIZE environment", rank=torch_rank, size=torch_size,
        local_rank=local_rank, local_size=local_size, master_addr=addr, master_port=port,
        job_id=env.get("NCCLBENCH_JOB_ID"))


def _rank_variables_info(env: Mapping[str, str], comm_id: str | None) -> LaunchInfo | None:
    """Steps 2-4: PMI, Slurm, RANK/WORLD_SIZE, which overlap: srun --mpi=pmi2 sets PMI's variables
    too (handled as Slurm), and under torchrun under srun torchrun's variables describe the
    workers, srun's the agents."""
    slurm_rank, slurm_size, in_slurm_step = _slurm_step(env)
    pmi_rank, pmi_size = _int(env, "PMI_RANK"), _int(env, "PMI_SIZE")
    if pmi_rank is not None and pmi_size is not None:
        same_as_slurm = in_slurm_step and pmi_rank == slurm_rank and pmi_size == slurm_size
        if not same_as_slurm:
            return _pmi_info(env, pmi_rank, pmi_size)
    torch_size = _int(env, "WORLD_SIZE")
    torch_rank = _int(env, "RANK")
    torchrun = "TORCHELASTIC_RUN_ID" in env or "GROUP_RANK" in env or "TORCHELASTIC_RESTART_COUNT" in env
    if in_slurm_step and not (torchrun and torch_size is not None):
        assert slurm_rank is not None and slurm_size is not None  # in_slurm_step says so
        return _slurm_info(env, slurm_rank, slurm_size, pmi_rank)
    if torch_size is not None and torch_rank is not None:
        return _rank_env_info(env, torch_rank, torch_size, torchrun, comm_id)
    return None


def detect_launch(environ: Mapping[str, str] | None = None) -> LaunchInfo:
    """Identify the launcher from `environ` (default os.environ); see module doc for the order."""
    env = os.environ if environ is None else environ
    wide = _job_wide(env)
    info = _spawn_info(env, wide.token)
    if info is None:
        info = _ompi_info(env)
    if info is None:
        info = _rank_variables_info(env, wide.comm_id)
    if info is None:  # 5. nothing: one process
        info = LaunchInfo(kind="single", launcher="none (single process)")
    return _finish(info, env, wide)


def _slurm_local_size(env: Mapping[str, str]) -> int:
    """Tasks on this node from SLURM_STEP_TASKS_PER_NODE ("2(x3),1") and SLURM_NODEID."""
    spec = env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE")
    node = _int(env, "SLURM_NODEID", default=0)
    if not spec:
        return 1
    counts: list[int] = []
    for item in spec.split(","):
        m = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", item)
        if not m:
            return 1
        counts.extend([int(m.group(1))] * int(m.group(2) or 1))
    return counts[node] if 0 <= node < len(counts) else 1
