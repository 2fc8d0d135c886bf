"""How a job ends when it is told to: SIGTERM, SIGINT and SIGHUP.

Schedulers end jobs with signals: Slurm and Kubernetes send SIGTERM (then
SIGKILL after a grace period), a terminal sends SIGINT (Ctrl-C) or SIGHUP
(hang-up), job wrappers call `Popen.terminate()` on the one process they
started.  Whichever process of the job gets the signal -- ncclbench's own
launcher, any rank, or the whole process group -- every process of the job
must end within a bounded time, the rows measured so far must stay in the
result store, and the run must be stored as "interrupted", never "complete".

This module holds the parts every process shares:

* `RankSignals`: installed by each rank for the length of a run.  The first
  of the three signals raises `JobInterrupted` in the main thread, so the run
  unwinds through its normal error path (reporters closed, peers told).  The
  main thread may be stuck in a C call that never returns (an MPI collective
  whose peer is gone, a device wait): a watcher thread woken through
  `signal.set_wakeup_fd` (it needs no GIL hand-over from the main thread)
  then ends the process itself after `grace_s`, running the registered "last
  words" first (the store marks its run interrupted through a connection of
  its own).
* `register_last_words`: what must be written before a process ends
  abnormally (by a signal, or by the -T watchdog's abort).
* `exit_status_meaning`: what a launcher can tell from a rank's exit status
  (128+N: signal N; 4: a timeout).
* `die_with_parent`: a rank started by ncclbench's launcher, or by MPICH's
  proxy, ends when that parent dies (Linux PR_SET_PDEATHSIG), instead of
  running on orphaned.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import sys
import threading
import time
from types import FrameType
from typing import Any, TextIO

from ..core.errors import ExitCode

# re-exported (`name as name`): the launch package's public names
from ..core.rank_link import JOB_DIR_ENV as JOB_DIR_ENV
from ..core.rank_link import JOB_ENV as JOB_ENV
from ..core.rank_link import note_for_launcher as note_for_launcher
from ..core.rank_link import register_last_words as register_last_words
from ..core.rank_link import run_last_words as run_last_words

HANDLED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
GRACE_S = 2.0  # how long the main thread may take to unwind before the watcher ends the process
MPI_ABORT_DELAY_S = 0.5  # ranks other than 0 wait this long before MPI_Abort after a signal
LAUNCHER_PID_ENV = "NCCLBENCH_LAUNCHER_PID"  # set by ncclbench's launchers on the processes they start

_PR_SET_PDEATHSIG = 1


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def exit_status_meaning(code: int | None) -> tuple[str, str] | None:
    """(status, words) for a rank's or launcher's exit status that means the run
    did not finish: 128+N or -N (Popen) -> ('interrupted', 'SIGTERM'), 4 ->
    ('timeout', 'a timeout'); None for 0 and ordinary error codes."""
    if code is None:
        return None
    if code < 0:
        return "interrupted", signal_name(-code)
    if 128 < code < 128 + 65:
        return "interrupted", signal_name(code - 128)
    if code == int(ExitCode.TIMEOUT):
        return "timeout", "a timeout"
    return None


class JobInterrupted(KeyboardInterrupt):
    """A signal told this process to stop.  A KeyboardInterrupt (what SIGINT
    raises by default), so that no `except Exception` on the way swallows it and
    a caller that only knows KeyboardInterrupt still ends quietly."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum

    @property
    def name(self) -> str:
        return signal_name(self.signum)

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def rank_identity(rank: int) -> str:
    """'rank 3 (host n1, pid 123)': how every message names a process of the job."""
    return f"rank {rank} (host {socket.gethostname().split('.')[0]}, pid {os.getpid()})"


def outcome_of(exc: BaseException) -> tuple[str, str]:
    """(stored status, reason) for a run that an error ended: 'timeout' for a
    timeout (-T, a rank that never answered), else 'interrupted'.  An error may
    carry its own `status` (the rendezvous marks a dead peer 'interrupted'
    although it exits with the timeout code, as nccl-tests does)."""
    status = getattr(exc, "status", None)
    if status not in ("interrupted", "timeout"):
        code = getattr(exc, "code", None)
        status = "timeout" if code == ExitCode.TIMEOUT else "interrupted"
    message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    return status, message


# -- parent death -----------------------------------------------------------------------------

def die_with_parent(expected_parent: int | None = None, sig: int = signal.SIGTERM) -> bool:
    """Ask Linux to send `sig` to this process when its parent ends.  Returns
    False where that is impossible (not Linux) or when the parent is already
    gone (then the caller should stop: nobody waits for it)."""
    parent = os.getppid() if expected_parent is None else expected_parent
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
            return True  # cannot arm it; the parent is still there as far as we know
    except (OSError, AttributeError):
        return True
    return os.getppid() == parent  # it may have died between fork and prctl


def preexec_die_with_parent() -> None:
    """For subprocess' preexec_fn (children that are not Python: mpiexec)."""
    try:
        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    except (OSError, AttributeError):
        pass


# -- the rank's handlers ------------------------------------------------------------------------

class RankSignals:
    """SIGTERM/SIGINT/SIGHUP handling for one rank during a run (see module docstring).

    `describe`: who this process is, for the one line printed when the watcher
    has to end the process itself ("rank 3 (host n1, pid 123)").  `quiet`: print
    nothing (ncclbench's launcher prints the line for the whole job).
    """

    def __init__(self, describe: str = "", *, grace_s: float = GRACE_S, quiet: bool = False,
                 stderr: TextIO | None = None):
        self.describe = describe
        self.grace_s = grace_s
        self.quiet = quiet
        self.stderr = stderr
        self.signum: int | None = None  # the first signal received
        self.received_at: float | None = None
        self.reported = False  # the one line was printed
        self._raised = False
        self._told = False
        self._told_lock = threading.Lock()
        self.armed = True  # raise JobInterrupted (off during clean-up: then only recorded)
        self._old: dict[int, object] = {}
        self._old_wakeup: int | None = None
        self._pipe: tuple[int, int] | None = None
        self._installed = False

    # -- install / restore ------------------------------------------------------------
    def install(self) -> RankSignals:
        """Only from the main thread (Python's rule for signal handlers); a no-op
        elsewhere.  A rank started by ncclbench's launcher also ends when the
        launcher dies (SIGKILL to it cannot be passed on)."""
        if threading.current_thread() is not threading.main_thread() or self._installed:
            return self
        if os.environ.get(LAUNCHER_PID_ENV) == str(os.getppid()):
            die_with_parent()
        r, w = os.pipe()
        os.set_blocking(w, False)
        self._pipe = (r, w)
        try:
            self._old_wakeup = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        except (ValueError, OSError):
            os.close(r)
            os.close(w)
            self._pipe = None
            return self
        for s in HANDLED:
            self._old[s] = signal.signal(s, self._handler)
        self._installed = True
        threading.Thread(target=self._watch, args=(r,), name="ncclbench-signal-watch", daemon=True).start()
        return self

    def restore(self) -> None:
        if not self._installed:
            return
        self._installed = False
        for s, old in self._old.items():
            try:
                signal.signal(s, old)  # type: ignore[arg-type]
            except (ValueError, TypeError, OSError):
                pass
        try:
            signal.set_wakeup_fd(self._old_wakeup if self._old_wakeup is not None else -1)
        except (ValueError, OSError):
            pass
        # the write end is closed; the watcher sees EOF and ends (unless it is
        # already counting down after a signal: then it still ends the process)
        if self._pipe is not None:
            os.close(self._pipe[1])

    def __enter__(self) -> RankSignals:
        return self.install()

    def __exit__(self, *exc: object) -> None:
        self.restore()

    # -- what happens on a signal ---------------------------------------------------------
    def _note(self, signum: int) -> bool:
        """Record the first signal; True if this one is the first."""
        if self.signum is None:
            self.signum = signum
            self.received_at = time.monotonic()
            return True
        return False

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        # raised once: a second signal (a group SIGTERM plus the launcher's
        # forwarded copy) must not interrupt the cleanup of the first
        self._note(signum)
        self._tell_launcher()
        if self.armed and not self._raised:
            self._raised = True
            raise JobInterrupted(self.signum or signum)

    def _tell_launcher(self) -> None:
        """Once: tell ncclbench's launcher which signal this rank received (the
        watcher thread may see the signal before the handler runs, or instead)."""
        with self._told_lock:
            if self._told:
                return
            self._told = True
        note_for_launcher(ending=f"{signal_name(self.signum or 0)} received")

    def disarm(self) -> None:
        """From here on a signal is only recorded (clean-up must not be cut
        short); the watcher still ends the process after grace_s."""
        self.armed = False

    def line(self, extra: str = "") -> str:
        who = f"{self.describe}: " if self.describe else ""
        return f"ncclbench: {who}{signal_name(self.signum or 0)} received{extra}"

    def report(self, extra: str = "") -> None:
        """Print the one line naming the signal (once, unless quiet)."""
        if self.reported or self.quiet or self.signum is None:
            return
        self.reported = True
        try:
            print(self.line(extra), file=self.stderr or sys.stderr, flush=True)
        except (OSError, ValueError):
            pass

    def _watch(self, fd: int) -> None:
        while True:
            try:
                data = os.read(fd, 64)
            except OSError:
                return
            if not data:
                os.close(fd)
                return
            sigs = [b for b in data if b in HANDLED]
            if sigs:
                self._note(sigs[0])
                self._tell_launcher()
                break
        # A signal arrived: the main thread has grace_s to unwind on its own.
        time.sleep(self.grace_s)
        status = "interrupted"
        reason = f"{signal_name(self.signum or 0)} received" + (f" by {self.describe}" if self.describe else "")
        run_last_words(status, reason)
        note_for_launcher(ending=f"{reason}; ended after {self.grace_s:g} s without unwinding")
        self.report(f"; the run did not unwind within {self.grace_s:g} s, ending this process")
        try:
            sys.stdout.flush()
        except (OSError, ValueError):
            pass
        os._exit(128 + (self.signum or signal.SIGTERM))


def end_run(exc: BaseException, signals: RankSignals, host: Any, store: Any = None) -> int:
    """How a rank's run ends on a signal (JobInterrupted) or an anticipated error
    (BenchError): record the outcome in the store (rank 0's StoreReporter, or
    None), print one line, end the job for the other ranks (`host.abort`), and
    return the exit status (128+N for signal N, the error's code otherwise).
    Call it from the except clause around a run; `host` is its HostComm."""
    from ..core.errors import BenchError, print_error

    signals.disarm()
    if isinstance(exc, JobInterrupted):
        reason = f"{exc.name} received by {signals.describe or 'pid ' + str(os.getpid())}"
        if store is not None:
            store.set_outcome("interrupted", reason)
            signals.report(f": {store.rows_written} rows kept, run {store.run_id} stored as interrupted")
        else:
            signals.report()
        if host.size > 1:
            if host.rank != 0 and type(host).__name__ == "MpiHostComm":
                # MPI_Abort kills every rank at once: when the whole job got the signal (mpiexec
                # passes it on), give rank 0 a moment to store its run as interrupted first
                time.sleep(MPI_ABORT_DELAY_S)
            host.abort(exc.exit_code, reason)
        return exc.exit_code
    assert isinstance(exc, BenchError)
    if store is not None:
        store.set_outcome(*outcome_of(exc))
    if signals.quiet and getattr(exc, "relayed", False):
        code = int(exc.code)  # another rank said it first; ncclbench's launcher sums the job up
    else:
        code = print_error(exc)
    if host.size > 1 and not exc.all_ranks:
        host.abort(code, exc.message)
    return code
