"""Where a tune result goes on the reporting rank: the report on stdout, the
files (PREFIX.json, PREFIX.env, PREFIX.conf), the result store and an HTML
report with one busbw line per candidate.

The store keeps one run per candidate (its out-of-place median per size; no
in-place half was measured, so that half is empty), tied together by
`info.extra["tune"]`: `ncclbench report` draws any of them like plain runs.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sqlite3
import sys
from pathlib import Path
from typing import Any

from .. import __version__
from ..core.atomic_file import check_output_path
from ..core.config import BenchOptions
from ..core.errors import BenchError, ExitCode
from ..core.results import HalfResult, ResultRow, RunInfo
from ..store.db import TUNE_SOURCE, StoredRun
from .emit import band_range, bands_disagree, env_file, report_lines, result_json, tuner_config, won_bands
from .options import TuneOptions
from .result import TuneResult

_EMPTY = HalfResult(math.nan, math.nan, math.nan, math.nan, None)


@dataclasses.dataclass
class CandidateRun(StoredRun):
    """A stored run labelled by its candidate (the report's legend)."""

    candidate: str = ""

    @property
    def label(self) -> str:
        return self.candidate or f"run {self.id}"


def candidate_rows(result: TuneResult, label: str) -> list[ResultRow]:
    """One row per size the candidate was judged at: its median out-of-place time."""
    rows = []
    for size in result.sizes:
        s = result.series_at(size).get(label)
        if s is None:
            continue
        t = s.median_us
        busbw = result.busbw(size, t)
        algbw = busbw / result.bus_factor if result.bus_factor else math.nan
        rows.append(ResultRow(size, result.param_counts.get(size, 0), result.datatype, result.op, result.root,
                              HalfResult(t, math.nan, algbw, busbw, None), _EMPTY))
    return rows


def candidate_info(result: TuneResult, label: str, group: str) -> RunInfo:
    from ..collectives import lookup

    coll = lookup(result.collective)
    cand = result.candidate(label)
    setting = " ".join(f"{k}={v}" for k, v in cand.env) or "library default"
    if cand.config:
        setting += " ncclConfig_t " + ",".join(f"{k}={v}" for k, v in cand.config)
    return RunInfo(program=coll.program if coll else result.collective, argv=list(result.command),
                   backend=result.backend, version=__version__, nccl_version_code=result.version_code,
                   nccl_headers_code=result.version_code, library=result.library, world_size=result.nranks,
                   nranks=result.nranks, start_time=result.start_time, reduced_max_bytes=result.reduced_max_bytes,
                   notes=[f"tune candidate {label}: {setting}; median of {result.rounds} interleaved rounds, "
                          "out-of-place only"],
                   extra={"tune": {"group": group, "candidate": label, "env": dict(cand.env),
                                   "config": dict(cand.config)}})


def store_runs(result: TuneResult, opts: BenchOptions) -> list[int]:
    """One stored run per candidate that was judged; returns their ids."""
    from ..store.db import ResultStore

    group = f"{result.start_time} pid {os.getpid()}"
    ids = []
    with ResultStore() as store:
        for label in result.live_labels():
            rows = candidate_rows(result, label)
            if not rows:
                continue
            run_id = store.begin_run(candidate_info(result, label, group), opts, source=TUNE_SOURCE)
            for seq, row in enumerate(rows):
                store.add_row(run_id, seq, row)
            store.finish_run(run_id, None)
            ids.append(run_id)
    return ids


def report_runs(result: TuneResult, opts: BenchOptions, ids: list[int]) -> list[CandidateRun]:
    """The candidates as report runs: read back from the store when stored, else built here."""
    runs = []
    if ids:
        from ..store.db import ResultStore

        with ResultStore(create=False) as store:
            for rid in ids:
                run = store.get_run(rid)
                label = run.info.extra.get("tune", {}).get("candidate", "")
                runs.append(CandidateRun(**{f.name: getattr(run, f.name) for f in dataclasses.fields(StoredRun)},
                                         candidate=label))
        return runs
    for label in result.live_labels():
        rows = candidate_rows(result, label)
        if rows:
            runs.append(CandidateRun(0, result.start_time, "complete", TUNE_SOURCE, None,
                                     candidate_info(result, label, ""), opts, rows, None, {}, candidate=label))
    return runs


def _write(path: Path, text: str) -> None:
    try:
        path.write_text(text)
    except OSError as e:
        raise BenchError(f"tune: cannot write {path}: {e.strerror or e}", ExitCode.ARGUMENT) from None


def write_outputs(result: TuneResult, topts: TuneOptions, opts: BenchOptions) -> dict[str, str]:
    """Print the report, write the files, store and plot; returns {kind: path}."""
    written: dict[str, str] = {}
    for line in report_lines(result):
        print(line)
    topts.make_default_dir()  # under a launcher this rank is the first to write there
    prefix = Path(topts.out_prefix())
    check_output_path(str(prefix) + ".json", "tune --out")
    doc = result_json(result)
    json_path = prefix.with_name(prefix.name + ".json")
    env_path = prefix.with_name(prefix.name + ".env")
    _write(env_path, env_file(result))
    written["env"] = str(env_path)
    conf_text, conf_notes = tuner_config(result)
    for note in conf_notes:
        print(f"# tuner config: {note}")
    if conf_text:
        conf_path = prefix.with_name(prefix.name + ".conf")
        _write(conf_path, conf_text)
        written["tuner_config"] = str(conf_path)
    ids: list[int] = []
    if opts.store and os.environ.get("NCCLBENCH_NO_STORE") != "1":
        try:
            ids = store_runs(result, opts)
        except (BenchError, sqlite3.Error, OSError) as e:
            print(f"ncclbench: warning: tune result not stored: {getattr(e, 'message', e)}", file=sys.stderr,
                  flush=True)
        if ids:
            doc["stored_runs"] = ids
            print(f"# stored as runs {', '.join(map(str, ids))}: "
                  f"ncclbench report {' '.join(map(str, ids))} -o tune.html")
    if topts.report:
        from ..report.html import write_report

        write_report(report_runs(result, opts, ids), topts.report,
                     title=f"ncclbench tune {result.collective}: {result.library}, {result.nranks} ranks")
        written["report"] = topts.report
    doc["files"] = written | {"json": str(json_path)}
    _write(json_path, json.dumps(doc, indent=1) + "\n")
    written["json"] = str(json_path)
    for kind, path in written.items():
        print(f"# wrote {kind}: {path}")
    print_env_lines(won_bands(result))
    return written


def print_env_lines(wins: list[dict[str, Any]]) -> None:
    """The environment lines on stdout: bare where they agree (one setting for every size), else
    one per size band with its range, since an environment variable holds for every size."""
    if not wins:
        print("# environment lines: none: keep the library's default")
    elif not bands_disagree(wins):
        print("# environment lines (for every size tuned):")
        for line in dict.fromkeys(e for band in wins for e in band["env"]):
            print(line)
    else:
        print("# environment lines: the size bands want different values; one holds per band "
              "(the .env file has each block, commented out):")
        for band in wins:
            print(f"#   {band_range(band)}: {' '.join(band['env'])}")

