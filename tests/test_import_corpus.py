"""`ncclbench import` on logs as people have them (tests/fixtures/import_corpus, built by build_corpus.py).

Every corpus file is a real nccl-tests output (or an older nccl-tests
layout) mangled the way launchers, a shared terminal or old versions mangle
it; each must import with the same rows, banner and footer as its clean
original, and keep NCCL's log lines it carries.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

from ncclbench.explain.nccl_log import facts_from_stored, per_size_choices
from ncclbench.output.demux import untangle
from ncclbench.output.parse import parse_row
from ncclbench.store import ResultStore, store_imported
from ncclbench.store.importers import EXTRA_NCCL_LOG, load_file, parse_text_log

CORPUS = Path(__file__).parent / "fixtures" / "import_corpus"
CLEAN = Path(__file__).parent / "fixtures" / "nccl_tests_output"
sys.path.insert(0, str(CORPUS))
import build_corpus  # noqa: E402

NAMES = sorted(build_corpus.CORPUS)


def _row_tuple(r):
    def half(h):
        return (h.time_us, h.algbw, h.busbw, h.wrong)
    return (r.size, r.count, r.type, r.redop, r.root, half(r.out_of_place), half(r.in_place), r.timestamp)


@pytest.mark.parametrize("name", NAMES)
def test_committed_corpus_is_what_the_builder_writes(name):
    assert (CORPUS / name).read_bytes() == build_corpus.CORPUS[name]().encode()


@pytest.mark.parametrize("name", [n for n in NAMES if "clean" in build_corpus.SPECS[n]])
def test_mangled_log_imports_like_its_clean_original(name):
    spec = build_corpus.SPECS[name]
    run, = load_file(CORPUS / name)
    clean, = load_file(CLEAN / spec["clean"])
    assert [_row_tuple(r) for r in run.rows] == [_row_tuple(r) for r in clean.rows]
    assert run.info.program == clean.info.program and run.info.devices == clean.info.devices
    assert run.status == clean.status == "complete"
    assert run.summary.avg_busbw == clean.summary.avg_busbw
    assert run.options.step_factor == clean.options.step_factor and run.options.max_bytes == clean.options.max_bytes
    notes = run.info.extra.get("import_notes", [])
    if spec.get("prefix"):
        assert notes[0] == f"launcher tags ({spec['prefix']}) taken off every line"
    if spec.get("rejoined"):
        assert any("put back together" in n for n in notes)


@pytest.mark.parametrize("name", [n for n in NAMES if build_corpus.SPECS[n].get("nccl_version")])
def test_tagged_logs_keep_every_ranks_nccl_lines(name):
    spec = build_corpus.SPECS[name]
    run, = load_file(CORPUS / name)
    stored = run.info.extra[EXTRA_NCCL_LOG]
    facts = facts_from_stored(stored)
    assert facts.version == spec["nccl_version"] and facts.net_plugin == spec["net"]
    assert len(facts.sources) == spec["sources"] and sorted(facts.ranks) == [0, 1]
    assert all(ln.startswith("vm:") for ln in stored["lines"])  # tags taken off
    assert run.env == {}  # no "set by environment" line in these logs


def test_nccl_lines_inside_rows_give_per_size_choices():
    run, = load_file(CORPUS / "nccl_coll_inside_rows_all_reduce_1proc_4gpu.log")
    facts = facts_from_stored(run.info.extra[EXTRA_NCCL_LOG])
    sizes = [r.size for r in run.rows]
    assert per_size_choices(facts, "AllReduce") == [
        (sizes[0], 65536, "Ring", "LL", 2), (131072, sizes[-1], "Ring", "Simple", 24)]
    assert run.info.extra["import_notes"] == [f"{len(sizes)} row(s) put back together after NCCL's log cut them apart"]


def test_warn_inside_a_row_is_kept_as_a_warning():
    run, = load_file(CORPUS / "nccl_warn_splits_a_row_all_reduce_2proc.log")
    facts = facts_from_stored(run.info.extra[EXTRA_NCCL_LOG])
    assert facts.warnings == ["socketProgressOpt: Call to recv from 192.0.2.3<41234> failed : Connection reset "
                              "by peer"]


@pytest.mark.parametrize("name", [n for n in NAMES if "old" in build_corpus.SPECS[n]])
def test_older_nccl_tests_layouts(name):
    spec = build_corpus.SPECS[name]
    coll, rows = spec["old"]
    run, = load_file(CORPUS / name)
    assert run.info.program == spec["program"] and len(run.info.devices) == 8
    assert run.info.devices[0].pid == 31337 and run.info.devices[0].device_hex == "0x07"
    assert run.status == "complete" and run.summary.avg_busbw == spec["avg"]
    assert run.info.extra["wrong_column"] == "error"
    assert len(run.rows) == len(rows)
    for got, want in zip(run.rows, rows):
        assert (got.size, got.count, got.type) == (want["size"], want["count"], want["type"])
        assert got.redop == want.get("redop", "none") and got.root == want.get("root", -1)
        for h, key in ((got.out_of_place, "oop"), (got.in_place, "ip")):
            t, algbw, busbw, err = want[key]
            assert math.isclose(h.time_us, t, rel_tol=0.001, abs_tol=0.006)
            assert abs(h.algbw - algbw) <= 0.0051 and abs(h.busbw - busbw) <= 0.0051
            assert h.wrong == (0 if err == 0 else None)  # a deviation is not a count: unknown


def test_corpus_stores_and_reads_back(tmp_path):
    """Every file stores; the three launcher-tagged copies of one run are one run (same content untangled)."""
    ids = {}
    with ResultStore(tmp_path / "r.sqlite") as store:
        for name in NAMES:
            runs = load_file(CORPUS / name)
            (run, rid, new), = store_imported(store, runs)
            ids[name] = (rid, new)
            back = store.get_run(rid)
            assert len(back.rows) == len(runs[0].rows)
            if EXTRA_NCCL_LOG in runs[0].info.extra:
                assert back.info.extra[EXTRA_NCCL_LOG] == runs[0].info.extra[EXTRA_NCCL_LOG]
    tagged = [n for n in NAMES if build_corpus.SPECS[n].get("prefix")]
    assert len({ids[n][0] for n in tagged}) == 1 and sum(ids[n][1] for n in tagged) == 1
    assert all(new for n, (_, new) in ids.items() if n not in tagged)


def test_clean_logs_untangle_to_themselves():
    for path in sorted(CLEAN.glob("*.txt")):
        text = path.read_text()
        u = untangle(text, row_complete=lambda s: parse_row(s) is not None)
        assert [line for _, line in u.items] == text.splitlines() and u.prefix_style is None
        assert u.rejoined_rows == 0 and u.nccl_lines == []


def test_glued_host_without_clean_lines_and_unknown_hosts():
    """No clean NCCL line names the host: the glued cell is split off by its shape."""
    row = ("           8             2     float     sum      -1     6.25    0.00    0.00       0"
           "n42-gpu:7:7 [0] NCCL INFO AllReduce: opCount 1 sendbuff 0x1 recvbuff 0x2 count 2 datatype 7 op 0 "
           "root 0 comm 0x3 [nranks=2] stream 0x4\n"
           "     6.20    0.00    0.00       0\n")
    u = untangle(row, row_complete=lambda s: parse_row(s) is not None)
    assert u.text_lines == [row.splitlines()[0][:85] + "     6.20    0.00    0.00       0"]
    assert u.nccl_lines[0].startswith("n42-gpu:7:7 [0] NCCL INFO AllReduce")


def test_srun_label_is_not_guessed_from_a_few_lines():
    text = (CLEAN / "all_reduce_2proc_f4.txt").read_text() + "0: stray line\n1: another\n"
    runs = parse_text_log(text, "x.log")
    assert "import_notes" not in runs[0].info.extra


REAL = Path(__file__).parent / "fixtures" / "nccl_logs" / "h100-1rank-2.28.9"


def test_real_log_with_nccl_lines_inside_rows():
    """nccl-tests 2.19.6 + NCCL 2.28.9 INIT,TUNING,COLL, stdout and stderr in one file (captured on the H100)."""
    path = REAL / "nccl-tests-interleaved-init-tuning-coll.txt"
    text = path.read_text()
    run, = load_file(path)
    assert [r.size for r in run.rows] == [8 * 4 ** i for i in range(9)] and run.status == "complete"
    assert (run.rows[0].out_of_place.time_us, run.rows[0].in_place.time_us) == (9.16, 2.42)
    assert all(r.out_of_place.wrong == 0 == r.in_place.wrong for r in run.rows)
    stored = run.info.extra[EXTRA_NCCL_LOG]
    assert len(stored["lines"]) == text.count(" NCCL INFO ") and stored["omitted_lines"] == 0
    assert all(" NCCL INFO " in ln and not ln[0].isspace() for ln in stored["lines"])
    facts = facts_from_stored(stored)
    assert (facts.version, facts.net_plugin, facts.nranks) == ("2.28.9", "Socket", 1)
