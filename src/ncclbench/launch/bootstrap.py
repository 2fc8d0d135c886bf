"""From "how was I started" to a working HostComm.

Under mpirun/mpiexec the processes already form an MPI job, so mpi4py's
COMM_WORLD is used (imported only then: `import mpi4py.MPI` runs MPI_Init and
costs 80 ms or more).  Everywhere else the TCP rendezvous joins the ranks.
Either way the launcher's world size is compared with the world that formed:
a launcher that says N while MPI_Init sees 1 is the independent-copies trap
(mpi4py linked to another MPI than the mpirun; srun without PMI), which must
stop the run instead of producing N single-process benchmarks.
"""

from __future__ import annotations

import importlib.util
import os
import socket
from types import ModuleType

from ..core.errors import BenchError, ExitCode, UnsupportedError
from .detect import LaunchInfo, derive_token
from .hostcomm import HostComm, MpiHostComm, SingleHostComm
from .rendezvous import DEFAULT_TIMEOUT_S, TcpHostComm
from .shutdown import note_for_launcher

MPI_LAUNCHERS = ("ompi", "mpich-hydra")


def default_timeout() -> float:
    """The rendezvous bound when -T is not given: NCCLBENCH_RDZV_TIMEOUT or 60 s."""
    try:
        return float(os.environ.get("NCCLBENCH_RDZV_TIMEOUT", DEFAULT_TIMEOUT_S))
    except ValueError:
        raise BenchError("NCCLBENCH_RDZV_TIMEOUT must be a number of seconds", ExitCode.INVALID_USAGE) from None


def mpi4py_available() -> bool:
    return importlib.util.find_spec("mpi4py") is not None


MPI4PY_HINT = "--backend mpi needs mpi4py: pip install 'ncclbench[mpi]'"


def require_mpi4py() -> None:
    """UnsupportedError (exit 5) naming the extra when mpi4py is not installed: the MPI backend's
    ranks import it, and without this the user meets an ImportError or a wait for ranks that died."""
    if not mpi4py_available():
        raise UnsupportedError(MPI4PY_HINT)


def _launch_cmd(info: LaunchInfo) -> str:
    return {"ompi": "mpirun", "mpich-hydra": "mpiexec", "slurm": "srun"}.get(info.kind, info.launcher)


def _trap_message(info: LaunchInfo, world: int | None, library: str) -> str:
    """The independent-copies trap, with what to fix.  `world`: the size MPI saw
    (None: caught before MPI_Init, which would have aborted or run each process alone)."""
    if world is None:
        head = (f"{info.launcher} started {info.size} processes, but mpi4py uses {library}, which cannot join "
                f"this launcher (its MPI_Init would abort, or run every process as a job of its own)")
    else:
        head = (f"{info.launcher} started {info.size} processes, but MPI in this one sees a world of "
                f"{world}: the ranks do not form one job (each would run its own {world}-process benchmark)")
    if info.kind == "slurm":
        return (f"{head}. srun has no PMI for this MPI ({library}): use srun --mpi=pmix (Open MPI) or "
                f"--mpi=pmi2 (MPICH), or run without MPI: ncclbench joins srun's tasks over TCP by itself "
                f"unless --backend mpi is asked for")
    return (f"{head}. mpi4py must use the MPI of the {_launch_cmd(info)} that started it: run that MPI's "
            f"mpiexec/mpirun (e.g. the mpiexec installed with pip install mpich), or point mpi4py at the "
            f"launcher's library with MPI4PY_LIBMPI=/path/to/libmpi.so")


def _load_mpi(info: LaunchInfo) -> ModuleType:
    """mpi4py.MPI, initialised, after checking (before MPI_Init, which may abort the
    process outright) that its library can talk to the launcher."""
    import sys

    already = "mpi4py.MPI" in sys.modules
    try:
        import mpi4py

        if not already:
            mpi4py.rc.initialize = False  # MPI_Init below, once the library is known to fit
        from mpi4py import MPI
    except (ImportError, RuntimeError) as e:
        hint = f" ({MPI4PY_HINT})" if not mpi4py_available() else ""
        raise BenchError(f"{info.launcher} started this process but mpi4py cannot load MPI: {e}{hint}",
                         ExitCode.INVALID_USAGE) from None
    if MPI.Is_initialized():
        return MPI
    vendor = MPI.get_vendor()[0]
    library = " ".join(MPI.Get_library_version().split()[:3])
    if info.kind == "ompi" and vendor != "Open MPI":
        # MPICH-family libraries abort inside MPI_Init under Open MPI's PMIx launcher
        raise BenchError(_trap_message(info, None, library), ExitCode.INVALID_USAGE)
    MPI.Init_thread(MPI.THREAD_MULTIPLE)

    def _finalize() -> None:
        if MPI.Is_initialized() and not MPI.Is_finalized():
            MPI.Finalize()

    import atexit

    atexit.register(_finalize)
    return MPI


def _mpi_comm(info: LaunchInfo) -> MpiHostComm:
    MPI = _load_mpi(info)
    world = MPI.COMM_WORLD
    size, rank = world.Get_size(), world.Get_rank()
    if size != info.size or rank != info.rank:
        library = " ".join(MPI.Get_library_version().split()[:3])
        if size == info.size:
            raise BenchError(f"{info.launcher} says this is rank {info.rank} but MPI says {rank}: the launcher "
                             f"and mpi4py's MPI disagree ({library})", ExitCode.INVALID_USAGE)
        raise BenchError(_trap_message(info, size, library), ExitCode.INVALID_USAGE)
    return MpiHostComm(world)


def mpi_impossible_reason(info: LaunchInfo) -> str | None:
    """Why an MPI job cannot be formed for this launch (None if it can)."""
    if info.kind == "single":
        return None  # a singleton MPI_Init works
    if not info.mpi_capable:
        how = ("srun without PMI (--mpi=none)" if info.kind == "slurm" else info.launcher)
        return (f"--backend mpi needs an MPI launch, but this process was started by {how}: use "
                f"mpiexec -n N, srun --mpi=pmix / --mpi=pmi2, or ncclbench --nprocs N outside {info.launcher}")
    if not mpi4py_available():
        return MPI4PY_HINT
    return None


def make_host_comm(info: LaunchInfo, timeout_s: float | None = None, prefer_mpi: bool = False, *,
                   require_mpi: bool = False, op_timeout_s: float | None | str = "same") -> HostComm:
    """The process-level communicator for this launch (see `_make_host_comm`).
    Once it is formed, a rank started by ncclbench's launcher tells it who it
    is (rank, host, pid), so the launcher can name it if it dies or stops."""
    comm = _make_host_comm(info, timeout_s, prefer_mpi, require_mpi=require_mpi, op_timeout_s=op_timeout_s)
    note_for_launcher(rank=comm.rank if comm.size > 1 else info.rank)
    return comm


def _make_host_comm(info: LaunchInfo, timeout_s: float | None = None, prefer_mpi: bool = False, *,
                    require_mpi: bool = False, op_timeout_s: float | None | str = "same") -> HostComm:
    """The process-level communicator for this launch.

    MPI (MpiHostComm) under mpirun/mpiexec when mpi4py is importable, and under
    srun with PMI when `prefer_mpi`; the TCP rendezvous (TcpHostComm) otherwise;
    SingleHostComm for a single process.  `require_mpi` (the CPU backend)
    turns "MPI impossible here" into a BenchError that says how to launch.
    NCCLBENCH_HOSTCOMM=tcp|mpi overrides the choice.
    """
    timeout = float(timeout_s) if timeout_s else default_timeout()
    forced = os.environ.get("NCCLBENCH_HOSTCOMM", "").lower()
    if forced not in ("", "tcp", "mpi"):
        raise BenchError(f"NCCLBENCH_HOSTCOMM must be tcp or mpi, not {forced!r}", ExitCode.INVALID_USAGE)
    if require_mpi:
        reason = mpi_impossible_reason(info)
        if reason:
            raise BenchError(reason, ExitCode.INVALID_USAGE)
        return _mpi_comm(info)
    if info.size == 1 and info.kind in ("single", "ncclbench-spawn", "env", "torchrun", "comm-id"):
        return SingleHostComm()
    use_mpi = forced == "mpi" or (forced != "tcp" and info.mpi_capable and mpi4py_available() and (
        info.kind in MPI_LAUNCHERS or prefer_mpi))
    if use_mpi:
        return _mpi_comm(info)
    if info.size == 1:
        return SingleHostComm()
    if not info.master_addr or not info.master_port:
        if info.kind in MPI_LAUNCHERS:
            raise BenchError(
                f"{info.launcher} started {info.size} processes but mpi4py is not installed, so they cannot "
                f"form one job: pip install 'ncclbench[mpi]' (mpi4py must use the same MPI as "
                f"{_launch_cmd(info)}), or export MASTER_ADDR and MASTER_PORT to every rank "
                f"(mpirun -x / mpiexec -genv) to join them over TCP", ExitCode.INVALID_USAGE)
        raise BenchError(f"{info.launcher} gave no rendezvous address: set MASTER_ADDR and MASTER_PORT "
                         f"(the same on every rank; rank 0 listens there)", ExitCode.INVALID_USAGE)
    listen = None
    if info.rank == 0 and info.listen_fd is not None:
        try:
            listen = socket.socket(fileno=info.listen_fd)
        except OSError as e:
            raise BenchError(f"the rendezvous socket passed by ncclbench --nprocs is unusable: {e}") from None
    return TcpHostComm(info.rank, info.size, info.master_addr, info.master_port, derive_token(info), timeout,
                       op_timeout_s=op_timeout_s, listen_sock=listen)


def host_comm_name(comm: HostComm) -> str:
    return {"TcpHostComm": "tcp", "MpiHostComm": "mpi", "SingleHostComm": "single"}.get(
        type(comm).__name__, type(comm).__name__)
