"""`ncclbench tune` on the CPU backend, for real: MPICH's MPI_T control
variables, the refusal MPICH prints for an algorithm that does not fit, and
the whole command over several MPI processes (interleaved rounds, outputs,
bad input, one rank)."""

import json
import statistics
import subprocess
import sys

import pytest

from ncclbench.tune.candidate_runner import captured_fd2, mpich_refusal
from ncclbench.tune.mpich import description_choices

pytestmark = pytest.mark.mpi

PROBE = r"""
import json, sys
from mpi4py import MPI
from ncclbench.tune.mpich import MpiT, cvar_choices
t = MpiT()
out = {}
for name in sys.argv[1:]:
    info = t.info(name)
    out[name] = {"value": t.read(name), "choices": cvar_choices(info), "scope": info.scope}
t.close()
print(json.dumps(out))
"""


def mpi_t_read(env, names, extra_env=None):
    p = subprocess.run([sys.executable, "-c", PROBE, *names], capture_output=True, text=True,
                       env={**env, **(extra_env or {})}, timeout=60)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_choice_values_are_mpichs_own(ncclbench_env):
    """Setting each algorithm by name in the environment, MPICH stores the
    value our description-order mapping gives (a wrong order fails here)."""
    cvar = "MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM"
    base = mpi_t_read(ncclbench_env, [cvar])[cvar]
    assert base["scope"] == "all_eq" and base["value"] == base["choices"]["auto"] == 0
    for name in ("ring", "recursive_doubling", "tree"):
        got = mpi_t_read(ncclbench_env, [cvar], {cvar: name})[cvar]
        assert got["value"] == base["choices"][name], name


def test_description_parsing():
    text = "Variable to select x\nauto - Internal\nring     - Force ring\n  not a choice line\nk_x - y"
    assert description_choices(text) == {"auto": 0, "ring": 1, "k_x": 2}


def test_fd2_capture_sees_c_writes_and_refusal_text():
    import ctypes

    libc = ctypes.CDLL(None)
    with captured_fd2() as lines:
        for text in (b"User set collective algorithm is not usable for the provided arguments\n",
                     b"Allreduce smp cannot be applied.\n"):
            libc.write(2, text, len(text))
    assert mpich_refusal(lines) == ("MPICH: User set collective algorithm is not usable for the provided "
                                    "arguments Allreduce smp cannot be applied.")
    assert mpich_refusal(["something else"]) is None


def tune(env, args, timeout=240):
    return subprocess.run([sys.executable, "-m", "ncclbench", "tune", *args], capture_output=True, text=True,
                          env=env, timeout=timeout)


def test_tune_all_reduce_on_3_processes(ncclbench_env, tmp_path):
    out = tmp_path / "t"
    p = tune(ncclbench_env, ["all_reduce", "-b", "4", "-e", "16K", "-f", "64", "-n", "6", "--backend", "mpi",
                             "--nprocs", "3", "--algos", "recursive_doubling,ring,smp,reduce_scatter_allgather",
                             "--rounds", "3", "--out", str(out)])
    assert p.returncode == 0, p.stdout + p.stderr
    doc = json.loads((tmp_path / "t.json").read_text())
    assert doc["nranks"] == 3 and doc["rounds"] == 3 and doc["iters_per_round"] == 2
    assert [c["label"] for c in doc["candidates"]] == ["default", "recursive_doubling", "ring", "smp",
                                                        "reduce_scatter_allgather"]
    sizes = sorted(int(s) for s in doc["times_us"])
    assert sizes == [4, 256, 16384]
    # MPICH refuses smp on one node at every size, and reduce-scatter-allgather for one element on 3 ranks
    na = {(n["label"], n["size"]) for n in doc["not_applicable"]}
    assert {("smp", s) for s in sizes} <= na
    assert ("reduce_scatter_allgather", 4) in na
    assert all("cannot be applied" in n["reason"] for n in doc["not_applicable"])
    for row in doc["times_us"].values():
        assert "smp" not in row
        assert all(len(t) == 3 and all(x > 0 for x in t) for t in row.values()), row
        assert {"default", "recursive_doubling", "ring"} <= set(row)
    assert [v["size"] for v in doc["verdicts"]] == sizes
    assert doc["tuner_config"] is None  # NCCL's plugin format only
    env_text = (tmp_path / "t.env").read_text()
    assert env_text.startswith("# ncclbench tune all_reduce")
    for band in doc["bands"]:
        if band["winner"] != "default":
            assert band["env"] == [f"MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM={band['winner']}"]
            assert f"export {band['env'][0]}" in env_text
    assert "# per size band:" in p.stdout and "smp not measured" in p.stdout


def test_bad_input_is_one_line(ncclbench_env, tmp_path):
    cases = [
        (["all_reduce", "--backend", "mpi", "--nprocs", "2", "--algos", "rign"], {}, 255, "unknown MPICH algorithm 'rign'"),
        (["all_reduce", "--backend", "mpi", "--nprocs", "2"], {"MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM": "ring"}, 255,
         "MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM=ring is set in the environment"),
        (["sendrecv", "--backend", "mpi", "--nprocs", "2"], {}, 5, "point-to-point"),
        (["all_reduce", "-d", "all", "--backend", "mpi"], {}, 255, "one datatype"),
        (["all_reduce", "--backend", "mpi", "--rounds", "0"], {}, 255, "--rounds"),
    ]
    for args, extra, code, text in cases:
        p = tune({**ncclbench_env, **extra}, [*args, "-b", "8", "-e", "64", "--out", str(tmp_path / "x")], 120)
        err = p.stderr.strip().splitlines()
        assert p.returncode == code, (args, p.stdout, p.stderr)
        assert any(text in line for line in err), (args, p.stderr)
        assert "Traceback" not in p.stderr


def test_one_process_says_there_is_no_choice(ncclbench_env, tmp_path):
    p = tune(ncclbench_env, ["all_reduce", "-b", "8", "-e", "64", "--backend", "mpi", "--nprocs", "1",
                             "--out", str(tmp_path / "x")], 120)
    assert p.returncode == 0, p.stderr
    assert "one rank has no algorithm choice" in p.stdout
    assert not (tmp_path / "x.json").exists()
    # with --verify (and an older result at the same path, which must not be verified again):
    # one line that there is nothing to verify, exit 0 (seen on the H100: a second, internal error)
    (tmp_path / "x.json").write_text("{}")
    p = tune(ncclbench_env, ["all_reduce", "-b", "8", "-e", "64", "--backend", "mpi", "--nprocs", "1", "--verify",
                             "--out", str(tmp_path / "x")], 120)
    assert p.returncode == 0, (p.stdout, p.stderr)
    assert "# tune --verify: nothing to verify" in p.stdout and "cannot read" not in p.stderr, p.stderr


def test_verify_runs_ordinary_jobs(ncclbench_env, tmp_path):
    """--verify on a real tune: every band won by a setting is re-run as plain
    jobs with its env; the JSON says what they measured and the exit status
    follows the verdict."""
    out = tmp_path / "v"
    p = tune(ncclbench_env, ["all_reduce", "-b", "8", "-e", "8", "-n", "20", "--backend", "mpi", "--nprocs", "2",
                             "--algos", "ring,recursive_doubling", "--rounds", "4", "--verify", "--verify-rounds",
                             "1", "--out", str(out)], 300)
    doc = json.loads((tmp_path / "v.json").read_text())
    ver = doc["verify"]
    assert ver["rounds"] == 1
    won = [b for b in doc["bands"] if b["winner"] != "default"]
    assert len(ver["bands"]) == len(won)
    for b in ver["bands"]:
        assert b["args"][-4:] == ["-b", "8", "-e", "8"]
        assert set(b["per_size"]) == {"8"}
        assert len(b["per_size"]["8"]["default_us"]) == 1 and len(b["per_size"]["8"]["setting_us"]) == 1
    expect = 7 if (ver["bands"] and not ver["all_confirmed"]) else 0
    assert p.returncode == expect, p.stdout + p.stderr
    assert ("verify" in p.stdout), p.stdout


def test_store_and_report_one_line_per_candidate(ncclbench_env, tmp_path):
    from ncclbench.store.db import ResultStore

    db = tmp_path / "runs.sqlite"
    env = {k: v for k, v in ncclbench_env.items() if k != "NCCLBENCH_NO_STORE"}
    env["NCCLBENCH_DB"] = str(db)
    html = tmp_path / "tune.html"
    p = tune(env, ["all_reduce", "-b", "1K", "-e", "64K", "-f", "8", "-n", "4", "--backend", "mpi", "--nprocs", "2",
                   "--algos", "ring,recursive_doubling", "--rounds", "2", "--out", str(tmp_path / "s"),
                   "--report", str(html)])
    assert p.returncode == 0, p.stdout + p.stderr
    doc = json.loads((tmp_path / "s.json").read_text())
    ids = doc["stored_runs"]
    assert len(ids) == 3 and f"stored as runs {', '.join(map(str, ids))}" in p.stdout
    with ResultStore(db, create=False) as store:
        runs = [store.get_run(i) for i in ids]
    assert [r.info.extra["tune"]["candidate"] for r in runs] == ["default", "ring", "recursive_doubling"]
    assert len({r.info.extra["tune"]["group"] for r in runs}) == 1
    for r in runs:
        label = r.info.extra["tune"]["candidate"]
        assert [row.size for row in r.rows] == [1024, 8192, 65536]
        for row in r.rows:  # the stored time is the candidate's median over the rounds
            assert row.out_of_place.time_us == pytest.approx(statistics.median(doc["times_us"][str(row.size)][label]))
    text = html.read_text()
    assert 'id="plot-busbw"' in text
    for label in ("default", "ring", "recursive_doubling"):
        assert label in text
