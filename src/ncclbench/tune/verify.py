"""`ncclbench tune --verify`: confirm each winning setting with ordinary runs.

Tune's own numbers come from one job with every candidate in it.  A person
will apply the result as an environment in a new job, so that is what is
checked: for every band won by a setting, plain `ncclbench <collective>`
runs over the band's sizes, the default and the setting alternating
(D S S D D S ...: each pair in the other order, so neither always runs
first), each a separate job with the setting's environment (`process_env`:
also NCCL_MIN/MAX_CTAS for a CTA candidate).  Per size the median
out-of-place times give the gain and `candidate_judge.relative_spread` of each
setting's runs the noise; over the band, the median gain must be positive,
above the median noise, and the setting must have won most of the
(pair, size) comparisons.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..core.config import Backend
from ..core.errors import BenchError, ExitCode
from ..output.numfmt import human_size
from .candidate_judge import relative_spread
from .emit import pct, won_bands
from .options import TuneOptions
from .result import TuneResult

RunFn = Callable[[list[str], dict[str, str]], dict[int, float]]


def run_order(rounds: int) -> list[bool]:
    """True = the setting, False = the default; pairs alternate who goes first."""
    order: list[bool] = []
    for r in range(rounds):
        order += [False, True] if r % 2 == 0 else [True, False]
    return order


def band_args(bench_args: Sequence[str], lo: int, hi: int) -> list[str]:
    """The user's nccl-tests arguments restricted to one band (getopt: the
    last -b/-e wins), without --nprocs/--backend (the runner adds them)."""
    from ..launch.spawn import strip_nprocs

    return [*strip_nprocs(list(bench_args)), "-b", str(lo), "-e", str(hi)]


def judge_band(default: dict[int, list[float]], setting: dict[int, list[float]]) -> dict[str, Any]:
    """Per-size and overall gain of `setting` over `default`.  Times are in us,
    one per run, in pair order (the i-th default and setting runs were a pair)."""
    per_size: dict[str, dict[str, Any]] = {}
    gains: list[float] = []
    noises: list[float] = []
    wins = comparisons = 0
    for size in sorted(set(default) & set(setting)):
        d, s = default[size], setting[size]
        md, ms = statistics.median(d), statistics.median(s)
        w = sum(1 for a, b in zip(d, s) if b < a)
        wins, comparisons = wins + w, comparisons + min(len(d), len(s))
        gains.append(md / ms - 1 if ms > 0 else 0.0)
        noises.append(max(relative_spread(d), relative_spread(s)))
        per_size[str(size)] = {"default_us": d, "setting_us": s, "gain": gains[-1], "noise": noises[-1], "wins": w}
    if not per_size:
        return {"per_size": {}, "gain": None, "noise": None, "wins": 0, "comparisons": 0, "confirmed": False}
    gain, noise = statistics.median(gains), statistics.median(noises)
    return {"per_size": per_size, "gain": gain, "noise": noise,
            "wins": wins, "comparisons": comparisons,
            "confirmed": gain > 0 and gain > noise and wins * 2 > comparisons}


def subprocess_runner(program: str, backend: Backend, nprocs: int | None, log: Callable[[str], None]) -> RunFn:
    """Run `python -m ncclbench <program> ARGS [--nprocs N] -J tmp --no-store` with
    an environment; return {size: out-of-place time} from its JSON."""
    from ..store.importers import load_file

    def run(args: list[str], env: dict[str, str]) -> dict[int, float]:
        with tempfile.TemporaryDirectory(prefix="ncclbench-verify-") as tmp:
            jpath = str(Path(tmp) / "run.json")
            cmd = [sys.executable, "-m", "ncclbench", program, *args, "--backend", backend.value, "--no-store",
                   "-J", jpath]
            if nprocs:
                cmd += ["--nprocs", str(nprocs)]
            full_env = {**os.environ, **env}
            log(" ".join(f"{k}={v}" for k, v in env.items()) + (" " if env else "") + "ncclbench " +
                " ".join(cmd[3:]))
            proc = subprocess.run(cmd, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            if proc.returncode != 0:
                tail = " | ".join(proc.stdout.strip().splitlines()[-3:])
                raise BenchError(f"tune --verify: an ordinary run failed (exit {proc.returncode}): {tail}",
                                 ExitCode(proc.returncode) if proc.returncode in ExitCode._value2member_map_
                                 else ExitCode.INTERNAL)
            runs = load_file(jpath)
            return {row.size: row.out_of_place.time_us for run in runs for row in run.rows}

    return run


def verify(result: TuneResult, bench_args: Sequence[str], rounds: int, run: RunFn,
           say: Callable[[str], None] = print) -> dict[str, Any]:
    """Check every band won by a setting; returns the `verify` section of the result."""
    bands_out = []
    for band in won_bands(result):
        cand = result.candidate(band["winner"])
        env = dict(cand.process_env())
        args = band_args(bench_args, band["lo"], band["hi"])
        times: dict[bool, dict[int, list[float]]] = {False: {}, True: {}}
        for is_setting in run_order(rounds):
            got = run(args, env if is_setting else {})
            for size, t in got.items():
                times[is_setting].setdefault(size, []).append(t)
        judged = judge_band(times[False], times[True])
        entry = {"lo": band["lo"], "hi": band["hi"], "winner": cand.label, "env": [f"{k}={v}" for k, v in env.items()],
                 "tune_gain": band["median_gain"], "args": args, **judged}
        bands_out.append(entry)
        span = f"{human_size(band['lo'])} .. {human_size(band['hi'])}"
        if judged["gain"] is None:
            say(f"# verify {span} {cand.label}: no common sizes measured")
            continue
        say(f"# verify {span} {cand.label}: tune {pct(band['median_gain'])}, ordinary runs "
            f"{pct(judged['gain'])} (noise {judged['noise'] * 100:.1f}%, won {judged['wins']}/"
            f"{judged['comparisons']} run pairs x sizes, {rounds} runs each): "
            + ("CONFIRMED" if judged["confirmed"] else "NOT confirmed"))
    if not bands_out:
        say("# verify: nothing to verify (no setting beat the default)")
    return {"rounds": rounds, "bands": bands_out,
            "all_confirmed": bool(bands_out) and all(b["confirmed"] for b in bands_out)}


def verify_result_file(topts: TuneOptions, backend: Backend, nprocs: int | None) -> int:
    """--verify on the tune result the job wrote (PREFIX.json): the ordinary runs, their
    section added to that file; exit 7 when a won band's gain did not hold, else 0."""
    path = Path(topts.out_prefix() + ".json")
    try:
        doc = json.loads(path.read_text())
        result = TuneResult.from_json(doc)
    except (OSError, ValueError) as e:
        raise BenchError(f"tune --verify: cannot read the tune result {path}: {e}", ExitCode.INTERNAL) from None

    def log(line: str) -> None:
        print(f"# verify run: {line}", file=sys.stderr, flush=True)

    runner = subprocess_runner(topts.program, backend, nprocs, log)
    section = verify(result, topts.bench_args, topts.verify_rounds, runner)
    doc["verify"] = section
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"# verify results added to {path}", flush=True)
    if section["bands"] and not section["all_confirmed"]:
        return int(ExitCode.DATA_ERRORS)
    return 0
