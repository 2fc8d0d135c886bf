"""nccl-tests' memory clamp, decided once by the plan (plan.sizes.reduced_max_bytes) and
carried as the typed RunInfo.reduced_max_bytes to every reader: the text banner, the -J
file and the store, which write it down where it always was (`extra.max_bytes_reduced_to`)."""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path
from types import SimpleNamespace

from ncclbench.benchmark.orchestrate import run_info
from ncclbench.collectives import COLLECTIVES
from ncclbench.core.config import Backend, BenchOptions
from ncclbench.core.results import RECORDED_REDUCED_MAX_BYTES, RunInfo
from ncclbench.output.jsonout import JsonReporter
from ncclbench.output.text import render_run
from ncclbench.run.bench_args import parse_bench_args
from ncclbench.run.plan import make_plan
from ncclbench.store.db import ResultStore

sys.path.insert(0, str(Path(__file__).resolve().parent))
from output_helpers import make_info  # noqa: E402
from plan_helpers import SmallBuffersWorker  # noqa: E402

GiB = 1 << 30
LIMIT = 26549594794  # nccl-tests' "Reducing maxBytes to" on an 80 GB H100 with -c 1
REDUCING = f"# Reducing maxBytes to {LIMIT} due to memory limitation"


def info_of(args: list[str], capacity: int) -> RunInfo:
    worker = SmallBuffersWorker(capacity)
    plan = make_plan(parse_bench_args("all_reduce_perf", args), COLLECTIVES["all_reduce"], Backend.NCCL, worker)
    return run_info(plan, [worker], SimpleNamespace(size=1), [])  # type: ignore[arg-type]


def test_run_info_takes_the_clamp_from_the_plan():
    info = info_of(["-b", "16G", "-e", "64G", "-f", "2"], LIMIT)
    assert info.reduced_max_bytes == LIMIT
    assert RECORDED_REDUCED_MAX_BYTES not in info.extra  # one place in memory: the typed field
    assert info_of(["-b", "8", "-e", "64"], LIMIT).reduced_max_bytes is None


def test_banner_prints_the_typed_clamp():
    text = render_run(make_info(reduced_max_bytes=LIMIT), BenchOptions(), [], None)
    assert REDUCING in text.splitlines()
    assert "Reducing maxBytes" not in render_run(make_info(), BenchOptions(), [], None)


def test_json_file_writes_the_clamp_where_it_always_was(tmp_path):
    def doc(info: RunInfo) -> dict:
        path = tmp_path / f"r{len(list(tmp_path.iterdir()))}.json"
        rep = JsonReporter(str(path), BenchOptions(), env=[])
        rep.begin(info, BenchOptions())
        rep.close()
        return json.loads(path.read_text())["ncclbench"]

    clamped = doc(make_info(reduced_max_bytes=LIMIT, extra={"python": "3.12"}))
    assert clamped["extra"] == {RECORDED_REDUCED_MAX_BYTES: LIMIT, "python": "3.12"}
    assert list(clamped["extra"]) == [RECORDED_REDUCED_MAX_BYTES, "python"]
    assert "reduced_max_bytes" not in clamped
    assert "extra" not in doc(make_info())


def test_store_record_keeps_its_format_and_reads_back_typed(tmp_path):
    db = tmp_path / "r.sqlite"
    with ResultStore(db) as store:
        rid = store.begin_run(make_info(reduced_max_bytes=LIMIT), BenchOptions())
        run = store.get_run(rid)
    assert run.info.reduced_max_bytes == LIMIT and RECORDED_REDUCED_MAX_BYTES not in run.info.extra
    assert REDUCING in render_run(run.info, run.options, run.rows, None).splitlines()  # `show RUN`
    with sqlite3.connect(db) as c:
        record = json.loads(c.execute("SELECT info FROM runs WHERE id=?", (rid,)).fetchone()[0])
    assert record["extra"] == {RECORDED_REDUCED_MAX_BYTES: LIMIT} and "reduced_max_bytes" not in record


def test_a_record_round_trips_and_unknown_keys_are_dropped():
    info = make_info(reduced_max_bytes=LIMIT, extra={"tune": {"candidate": "ring"}})
    record = info.record()
    assert RunInfo.from_record(json.loads(json.dumps(record))) == info
    assert RunInfo.from_record({**record, "gone_field": 1}) == info
    assert RunInfo.from_record(make_info().record()).reduced_max_bytes is None
