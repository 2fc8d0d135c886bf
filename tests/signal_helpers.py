"""Start a job one of four ways, signal one of its processes, and time how long
until every process of the job is gone (not a test module: tests/test_signals*.py
and bench/signals_bound.py use it).

Paths (how the job is started):
  nprocs-mpi   ncclbench all_reduce_perf ... --backend mpi --nprocs 4  (ncclbench
               starts MPICH's mpiexec, which starts the ranks: the CPU backend)
  nprocs-tcp   ncclbench's LocalSpawnLauncher starting 4 ranks that meet over the
               TCP rendezvous (the GPU backend's --nprocs path; the ranks run
               tests/signal_rank.py, which stores rows like the benchmark does)
  mpiexec      mpiexec -n 4 ncclbench all_reduce_perf ... (a user's own mpiexec)
  tcp-env      4 processes started with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT
               (torchrun-style), tests/signal_rank.py over the TCP rendezvous
Targets: 'launcher' (the process the user started: ncclbench, or mpiexec; for
tcp-env rank 0), 'group' (its process group), or 'rank N'.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from launch_helpers import PY, child_env, free_port

PATHS = ("nprocs-mpi", "nprocs-tcp", "mpiexec", "tcp-env")
BENCH = ["all_reduce_perf", "-b", "8", "-e", "256K", "-f", "2", "-n", "5", "-w", "1", "-c", "0", "-N", "0",
         "--backend", "mpi"]
NPROCS = 4
ROW = re.compile(r"^\s+\d+\s+\d+\s+float")
PID_LINE = re.compile(r"#\s+Rank\s+(\d+)\s+Group\s+\d+\s+Pid\s+(\d+)")


def mpiexec_path() -> str:
    exe = Path(PY).parent / "mpiexec"
    return str(exe) if exe.exists() else "mpiexec"


@dataclass
class Job:
    path: str
    procs: list[subprocess.Popen]  # what the test started (one, or four for tcp-env)
    db: Path
    started: float
    ranks: dict[int, int] = field(default_factory=dict)  # rank -> pid
    tree: list[int] = field(default_factory=list)  # every process of the job seen before the signal
    out: str = ""
    err: str = ""

    @property
    def main(self) -> subprocess.Popen:
        return self.procs[0]


def start(path: str, db: Path, *, extra_env: dict[str, str] | None = None, mode: str = "loop",
          extra_args: tuple[str, ...] = ()) -> Job:
    """Start the job (`extra_args`: more ncclbench options, for the benchmark paths)."""
    env = child_env(NCCLBENCH_DB=str(db), PYTHONUNBUFFERED="1", **(extra_env or {}))
    kw = dict(env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    if path == "nprocs-mpi":
        procs = [subprocess.Popen([PY, "-m", "ncclbench", *BENCH, *extra_args, "--nprocs", str(NPROCS)], **kw)]
    elif path == "mpiexec":
        procs = [subprocess.Popen([mpiexec_path(), "-n", str(NPROCS), PY, "-m", "ncclbench", *BENCH, *extra_args],
                                  **kw)]
    elif path == "nprocs-tcp":
        code = ("import sys\nfrom ncclbench.launch.spawn import LocalSpawnLauncher\n"
                f"sys.exit(LocalSpawnLauncher({NPROCS}, [{str(db)!r}, {mode!r}], module='signal_rank').run())")
        procs = [subprocess.Popen([PY, "-c", code], **kw)]
    elif path == "tcp-env":
        port = free_port()
        procs = []
        for r in range(NPROCS):
            e = dict(env, RANK=str(r), WORLD_SIZE=str(NPROCS), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                     NCCLBENCH_TOKEN="signal-test")
            procs.append(subprocess.Popen([PY, "-m", "signal_rank", str(db), mode], **{**kw, "env": e,
                                          "start_new_session": r == 0}))
    else:
        raise ValueError(path)
    return Job(path, procs, db, time.monotonic())


def _children(pid: int) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                st = f.read()
        except OSError:
            continue
        if int(st[st.rfind(")") + 2:].split()[1]) == pid:
            out.append(int(d))
    return out


def process_tree(pids: list[int]) -> list[int]:
    seen, todo = [], list(pids)
    while todo:
        p = todo.pop()
        if p not in seen:
            seen.append(p)
            todo += _children(p)
    return seen


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            st = f.read()
    except OSError:
        return False
    return st[st.rfind(")") + 2] != "Z"


def _stderr_of_all(job: Job) -> str:
    """Every started process's stderr (ended or killed first): which rank failed first, and why."""
    out = []
    for i, p in enumerate(job.procs):
        if p.poll() is None:
            p.kill()
        try:
            _, err = p.communicate(timeout=10)
        except (subprocess.TimeoutExpired, ValueError):
            err = "(unreadable)"
        out.append(f"[process {i}, rc {p.returncode}] {(err or '')[-1500:]}")
    return "\n".join(out)


def wait_for_rows(job: Job, rows: int, timeout: float = 90.0) -> None:
    """Read rank 0's stdout until `rows` result rows were printed (and the pid lines)."""
    end = time.monotonic() + timeout
    seen = 0
    lines = []
    src = job.procs[0].stdout
    while seen < rows:
        if time.monotonic() > end:
            raise AssertionError(f"{job.path}: no {rows} rows within {timeout} s: {''.join(lines)[-2000:]}")
        line = src.readline()
        if not line:
            raise AssertionError(f"{job.path}: the job ended early (rc {job.procs[0].wait()}): "
                                 f"{''.join(lines)[-2000:]}\n{_stderr_of_all(job)}")
        lines.append(line)
        m = PID_LINE.search(line)
        if m:
            job.ranks[int(m.group(1))] = int(m.group(2))
        if ROW.match(line) or line.startswith("row "):
            seen += 1
    job.out = "".join(lines)
    job.tree = process_tree([p.pid for p in job.procs])
    if job.path in ("nprocs-tcp", "tcp-env") and not job.ranks:
        pythons = [p for p in job.tree if _is_rank(p)]
        if job.path == "tcp-env":
            job.ranks = {r: p.pid for r, p in enumerate(job.procs)}
        else:
            job.ranks = {int(_env(p).get("NCCLBENCH_SPAWN_RANK", -1)): p for p in pythons}
    if job.path == "mpiexec" and not job.ranks:
        job.ranks = {int(_env(p).get("PMI_RANK", -1)): p for p in job.tree if _is_rank(p)}


def _is_rank(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().split(b"\0")
    except OSError:
        return False
    return any(c in (b"ncclbench", b"signal_rank") for c in cmd) and b"-c" not in cmd


def _env(pid: int) -> dict[str, str]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            items = f.read().split(b"\0")
    except OSError:
        return {}
    return dict(i.decode(errors="replace").split("=", 1) for i in items if b"=" in i)


def send(job: Job, target: str, sig: int) -> float:
    """Signal the target; returns the time it was sent (monotonic)."""
    t = time.monotonic()
    if target == "launcher":
        os.kill(job.procs[0].pid, sig)
    elif target == "group":
        os.killpg(job.procs[0].pid, sig)
    elif target.startswith("rank "):
        os.kill(job.ranks[int(target.split()[1])], sig)
    else:
        raise ValueError(target)
    return t


def wait_gone(job: Job, since: float, limit: float = 30.0) -> float | None:
    """Seconds from `since` until every process of the job is gone (None: not within limit)."""
    while time.monotonic() - since < limit:
        if not any(alive(p) for p in job.tree):
            return time.monotonic() - since
        time.sleep(0.01)
    return None


def finish(job: Job, timeout: float = 30.0) -> list[int | None]:
    codes = []
    for p in job.procs:
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
        if p is job.procs[0]:
            job.out += out
        job.err += err
        codes.append(p.returncode)
    return codes


def kill_leftovers(job: Job) -> list[int]:
    """SIGKILL whatever of the job is still alive (by the pids seen), after a failed check."""
    left = [p for p in job.tree if alive(p)]
    for p in left:
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass
    return left


def stored_run(db: Path) -> tuple[str, str | None, int] | None:
    """(status as `history` shows it, end_reason, rows) of the newest run in the store."""
    if not db.exists():
        return None
    from ncclbench.store import ResultStore

    with ResultStore(db, create=False) as s:
        rid = s.latest_run_id()
        if rid is None:
            return None
        h = s.get_run_header(rid)
        return h.status, h.end_reason, h.nrows


def ncclbench_lines(err: str) -> list[str]:
    """ncclbench's own lines on stderr (rank prefixes of the TCP launcher removed)."""
    out = []
    for line in err.splitlines():
        line = re.sub(r"^\[rank \d+\] ", "", line)
        if line.startswith("ncclbench:"):
            out.append(line)
    return out
