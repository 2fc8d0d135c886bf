"""The gate's latency rounds in fresh processes (opt-in: NCCLBENCH_GATE_ROUND_JOBS=1), where
ncclbench starts the job's processes itself.

Why it exists: on 2x H200 (NCCL 2.28.9, 25 identical runs, 4eaaea1) a round on a fresh communicator
moved 10.6 % against the other rounds of its process, while the run's figure kept 9.5 % per run that
no round of the process renewed (bench/results/gate-trials-gpu-2026-11-28-2xH200/latency-4eaaea1/);
if that part were drawn once per process, rounds that are each a process of their own would average
it away.  Why it is off: measured side by side on 1x H200 (2026-11-28, bench/gate_rounds_ab.py,
14 runs of each, alternating; bench/results/gate-rounds-1xH200-2026-11-28/), the rounds that were
processes of their own agreed within 3.2 % inside a run, yet the runs moved 38 % (median of rounds;
12 % fastest round) against 18 % (10 %) for rounds on fresh communicators, at 12.7 s a run against
4.4 s: what moves small-message time there is the machine's state over minutes, which no round of a
run renews.  It stays for machines where the part is per process (a trial says which).

How: when a gated run (`--gate`, `--baseline`) is started by this command line itself -- one
process, `--nprocs N`, one process per GPU, or the CPU ranks ncclbench starts -- the command line
is run again, before the checked run, once per round, as a *round job*: the same options, the
sweep cut to its sizes <= 64 KiB, no checking, no store, no explain, no outputs but the round's
record (`ROUND_OUT_ENV`: a file the round job's reporting rank writes).  Each round job starts
its processes from scratch (CUDA context, NCCL communicator, buffers, threads), so each round is
an independent draw of whatever a process draws.  The checked run then reads the rounds from
`ROUNDS_FILE_ENV` instead of measuring them in its own process.  Under a launcher ncclbench did
not start (mpirun, srun, torchrun) a rank cannot start the job again: the rounds stay in the
run's processes, each on a fresh communicator, as the run's line says.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..core.config import BenchOptions
from ..launch.shutdown import LAUNCHER_PID_ENV

ROUND_OUT_ENV = "NCCLBENCH_GATE_ROUND_OUT"  # on a round job's processes: where its reporting rank writes the round
ROUNDS_FILE_ENV = "NCCLBENCH_GATE_ROUNDS_FILE"  # on the checked run's processes: the rounds measured before it
# The gate's latency figure is made of the sizes up to this (store/summary_stats.LATENCY_MAX_SIZE).
GATE_MAX_SIZE = 64 << 10
# A round job that has not ended after this long is stopped (its line says so); CUDA and NCCL
# start in 1-3 s on the machines measured, so this only bounds a hang.
ROUND_JOB_TIMEOUT_S = 120.0
FRESH_PROCESS = "in a fresh process (the job started again)"
# Variables of the starting command that a round job must not inherit: it starts as the user's
# command line did (its own command line, backend probe and process count).
_ROUND_JOB_ENV_DROP = ("NCCLBENCH_COMMAND_LINE", "NCCLBENCH_SELF_LAUNCHED", "NCCLBENCH_BACKEND_NOTE")


def is_round_job() -> bool:
    """This process is one of a round job's (see the module docstring)."""
    return ROUND_OUT_ENV in os.environ


def round_job_options(opts: BenchOptions) -> BenchOptions:
    """A round job's options: the checked run's measured options, the sweep cut to the gate's
    sizes, one round on the job's own communicator, nothing checked, stored, judged or written."""
    return dataclasses.replace(
        opts, max_bytes=min(opts.max_bytes, GATE_MAX_SIZE), check=0, run_cycles=1, per_iter_timing=False,
        store=False, explain=False, baseline=None, output_file=None, csv_file=None, metrics_file=None,
        fail_on_trap=None, gate_rounds=1)


# NCCLBENCH_GATE_ROUND_JOBS=1: each round a job of its own (off by default: see the module; a round
# job costs a process start, about 1.7 s on 1x H200, 2026-11-28).
ROUND_JOBS_ENV = "NCCLBENCH_GATE_ROUND_JOBS"


def starts_its_processes(launch_kind: str) -> bool:
    """Whether round jobs are asked for (ROUND_JOBS_ENV=1) and this command line starts every
    process of its job (so it can start them again): no launcher around it, and not itself a rank
    or a round job that ncclbench started."""
    return (os.environ.get(ROUND_JOBS_ENV) == "1" and launch_kind == "single"
            and LAUNCHER_PID_ENV not in os.environ and not is_round_job())


def has_gate_sizes(opts: BenchOptions) -> bool:
    """The sweep reaches the gate's sizes (a sweep from above 64 KiB has no latency figure)."""
    return 0 < opts.min_bytes <= GATE_MAX_SIZE or (opts.min_bytes == 0 and opts.max_bytes > 0)


def write_round(record: dict[str, Any]) -> None:
    """A round job's reporting rank: its round, where the command that started it reads it."""
    Path(os.environ[ROUND_OUT_ENV]).write_text(json.dumps(record))


def read_rounds() -> dict[str, Any] | None:
    """The checked run's reporting rank: the rounds measured before it, or None where none were."""
    path = os.environ.get(ROUNDS_FILE_ENV)
    if not path:
        return None
    with contextlib.suppress(OSError, ValueError):
        record = json.loads(Path(path).read_text())
        return record if isinstance(record, dict) else None
    return None


def _round_job_env(out: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _ROUND_JOB_ENV_DROP and k != ROUNDS_FILE_ENV}
    env[ROUND_OUT_ENV] = str(out)
    env["NCCLBENCH_NO_STORE"] = "1"
    env["NCCLBENCH_PROGRESS"] = "0"
    return env


def _run_round_job(cmd: Sequence[str], out: Path, timeout_s: float) -> tuple[dict[str, Any] | None, str]:
    """One round job: (its record, "") or (None, why not)."""
    with subprocess.Popen(list(cmd), env=_round_job_env(out), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, start_new_session=True) as p:
        try:
            _, err = p.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _stop(p)
            return None, f"a round job had not ended after {timeout_s:g} s"
        except BaseException:  # Ctrl-C or a signal to this command: the round job (its own session) ends too
            _stop(p)
            raise
    if p.returncode != 0:
        last = next((line for line in reversed((err or "").splitlines()) if line.strip()), "")
        return None, f"a round job ended with exit {p.returncode}" + (f" ({last.strip()[:200]})" if last else "")
    try:
        record = json.loads(out.read_text())
    except (OSError, ValueError):
        return None, "a round job ended without writing its round"
    return (record, "") if isinstance(record, dict) and record.get("series") else (None, "a round job measured nothing")


def _stop(p: subprocess.Popen[str]) -> None:
    """End a round job and everything it started (its own session: one process group)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(p.pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        p.communicate(timeout=10)


def merge_rounds(records: Sequence[dict[str, Any]], seconds: float) -> dict[str, Any] | None:
    """One run's gate record from its round jobs' records (one round each): per series, the
    rounds in order; a round whose sizes differ from the first's is left out."""
    if not records:
        return None
    series: dict[tuple[str, str, int], dict[str, Any]] = {}
    for rec in records:
        for s in rec.get("series", []):
            key = (s["type"], s["redop"], int(s["root"]))
            into = series.setdefault(key, {"type": s["type"], "redop": s["redop"], "root": s["root"],
                                           "sizes": list(s["sizes"]), "out_of_place": [], "in_place": []})
            if list(s["sizes"]) != into["sizes"]:
                continue
            into["out_of_place"] += s.get("out_of_place", [])
            into["in_place"] += s.get("in_place", [])
    nrounds = max((len(s["out_of_place"]) for s in series.values()), default=0)
    iterations = sorted({n for rec in records for n in rec.get("iterations", [])})
    return {"rounds": nrounds, "fresh": FRESH_PROCESS, "renews": "process", "loop_us": records[0].get("loop_us"),
            "seconds": round(seconds, 3), "iterations": iterations, "series": list(series.values())}


def measure_in_round_jobs(program: str, args: Sequence[str], nrounds: int,
                          say: Callable[[str], None] | None = None,
                          timeout_s: float = ROUND_JOB_TIMEOUT_S) -> tuple[dict[str, Any] | None, str]:
    """Run the command line `program args` again as `nrounds` round jobs, one after another:
    (the merged record, "") or (None, why the rounds could not be measured this way)."""
    cmd = [sys.executable, "-m", "ncclbench", program, *args]
    records: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ncclbench-gate-") as tmp:
        for r in range(nrounds):
            if say is not None:
                say(f"gate latency: round {r + 1} of {nrounds} in a fresh process")
            out = Path(tmp, f"round-{r}.json")
            record, why = _run_round_job(cmd, out, timeout_s)
            if record is None:
                return None, why
            records.append(record)
    return merge_rounds(records, time.perf_counter() - t0), ""


@contextlib.contextmanager
def rounds_for_checked_run(record: dict[str, Any] | None) -> Any:
    """For the `with` body (the checked run, and the ranks it starts): ROUNDS_FILE_ENV names a
    file holding `record`; removed after.  Nothing is set where there is no record."""
    if record is None:
        yield
        return
    fd, path = tempfile.mkstemp(prefix="ncclbench-gate-rounds-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(record, f)
        os.environ[ROUNDS_FILE_ENV] = path
        yield
    finally:
        os.environ.pop(ROUNDS_FILE_ENV, None)
        with contextlib.suppress(OSError):
            os.unlink(path)
