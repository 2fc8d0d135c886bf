"""`ncclbench history | show | import | baseline` through the command dispatcher."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from ncclbench.commands import main as run_store_command

FIX = Path(__file__).parent / "fixtures" / "nccl_tests_output"
AR = FIX / "all_reduce_1proc_4gpu.txt"
JS = FIX / "all_reduce_4proc_per_iter.json"


@pytest.fixture
def db(tmp_path, monkeypatch):
    path = tmp_path / "data" / "results.sqlite"
    monkeypatch.setenv("NCCLBENCH_DB", str(path))
    return path


def test_import_history_show(db, capsys):
    assert run_store_command(["import", str(AR), str(JS), str(FIX / "sendrecv_1proc_4gpu.txt")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "all_reduce_1proc_4gpu.txt: run 1 (all_reduce_perf, 31 rows, complete)",
        "all_reduce_4proc_per_iter.json: run 2 (all_reduce_perf, 8 rows, complete)",
        "sendrecv_1proc_4gpu.txt: run 3 (sendrecv_perf, 16 rows, complete)"]
    assert db.exists()

    assert run_store_command(["history"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["ID", "DATE", "STATUS"]
    assert [ln.split()[0] for ln in lines[1:4]] == ["3", "2", "1"]  # newest first
    assert "plateau busbw = median busbw of the sizes within a factor of 4 of the largest" in lines[-1]

    assert run_store_command(["history", "--format", "json", "--limit", "0"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [d["id"] for d in doc] == [3, 2, 1]
    ar = doc[2]
    assert ar["program"] == "all_reduce_perf" and ar["rows"] == 31 and ar["nranks"] == 4
    assert ar["gpus"] == ["NVIDIA H200"] * 4 and ar["hosts"] == ["vm"]
    assert ar["plateau_busbw"] == pytest.approx((362.91 + 365.15) / 2)  # the median of 4 and 8 GiB: explain's plateau
    assert doc[1]["argv"][0] == "./build/all_reduce_perf"

    assert run_store_command(["history", "--program", "sendrecv_perf", "--format", "json"]) == 0
    assert [d["id"] for d in json.loads(capsys.readouterr().out)] == [3]

    assert run_store_command(["show", "1"]) == 0
    assert capsys.readouterr().out.rstrip("\n") == AR.read_text().rstrip("\n")


def test_show_interrupted_run_says_so(db, capsys):
    assert run_store_command(["import", str(FIX / "all_reduce_4proc_per_iter.txt")]) == 0
    capsys.readouterr()
    assert run_store_command(["show", "latest"]) == 0
    cap = capsys.readouterr()
    assert cap.out.rstrip("\n") == (FIX / "all_reduce_4proc_per_iter.txt").read_text().rstrip("\n")
    assert "interrupted" in cap.err and len(cap.err.splitlines()) == 1


def test_reimport_is_not_duplicated(db, capsys):
    assert run_store_command(["import", str(AR)]) == 0
    assert run_store_command(["import", str(AR)]) == 0
    assert "already stored as run 1" in capsys.readouterr().out
    assert sqlite3.connect(str(db)).execute("SELECT count(*) FROM runs").fetchone()[0] == 1


def test_import_with_one_bad_file_writes_nothing(db, tmp_path, capsys):
    bad = tmp_path / "notes.txt"
    bad.write_text("nothing to see\n")
    assert run_store_command(["import", str(AR), str(bad)]) == 255
    err = capsys.readouterr().err
    assert err.startswith("ncclbench: cannot import") and str(bad) in err
    assert len(err.strip().splitlines()) == 1
    assert not db.exists()  # the store was not even created


def test_empty_and_missing_store(db, capsys):
    assert run_store_command(["history"]) == 0
    assert "no runs recorded" in capsys.readouterr().err
    assert not db.exists()
    assert run_store_command(["history", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == []
    for argv in (["show", "1"], ["show", "latest"], ["compare", "1", "2"],
                 ["check", "latest", "--against", "x"], ["report", "1"],
                 ["baseline", "set", "x", "1"]):
        assert run_store_command(argv) == 255, argv
        err = capsys.readouterr().err
        assert "no result store" in err and len(err.strip().splitlines()) == 1
    # an existing but empty store
    db.parent.mkdir(parents=True)
    from ncclbench.store import ResultStore
    ResultStore(db).close()
    assert run_store_command(["show", "latest"]) == 255
    assert "is empty" in capsys.readouterr().err


def test_unknown_run_and_corrupt_store(db, capsys):
    assert run_store_command(["import", str(AR)]) == 0
    capsys.readouterr()
    assert run_store_command(["show", "42"]) == 255
    err = capsys.readouterr().err
    assert "unknown run 42" in err and "1..1" in err
    assert run_store_command(["show", "nosuch"]) == 255
    assert run_store_command(["show", "missing/file.txt"]) == 255
    assert "no such file" in capsys.readouterr().err
    db.write_bytes(b"garbage" * 1000)
    assert run_store_command(["history"]) == 255
    err = capsys.readouterr().err
    assert "not an ncclbench result store" in err and len(err.strip().splitlines()) == 1


def test_baseline_commands(db, capsys, tmp_path):
    other = tmp_path / "other.sqlite"
    assert run_store_command(["import", str(AR), str(JS)]) == 0
    assert run_store_command(["baseline", "set", "ref", "1", "--note", "golden"]) == 0
    assert run_store_command(["baseline", "set", "new", "latest"]) == 0
    capsys.readouterr()
    assert run_store_command(["baseline", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [ln.split()[:3] for ln in lines] == [["new", "run", "2"], ["ref", "run", "1"]]
    assert lines[1].endswith("golden")
    assert run_store_command(["history", "--format", "json"]) == 0
    assert {d["id"]: d["baselines"] for d in json.loads(capsys.readouterr().out)} == \
        {1: ["ref"], 2: ["new"]}
    assert run_store_command(["show", "ref"]) == 0  # baseline names are run references
    assert capsys.readouterr().out.startswith("# nccl-tests version")
    assert run_store_command(["baseline", "rm", "new"]) == 0
    assert run_store_command(["baseline", "rm", "new"]) == 255
    assert run_store_command(["baseline", "set", "x", "99"]) == 255
    assert run_store_command(["baseline", "list", "--db", str(other)]) == 0  # --db after action
    assert "no result store" in capsys.readouterr().err


def test_db_option_beats_env(db, tmp_path, capsys):
    explicit = tmp_path / "explicit.sqlite"
    assert run_store_command(["import", "--db", str(explicit), str(AR)]) == 0
    assert explicit.exists() and not db.exists()
