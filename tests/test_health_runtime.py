"""`ncclbench health` with real MPI processes on this machine (CPU backend).

Hosts are told apart by NCCLBENCH_HEALTH_HOST_MAP (one name per rank), so the
scan's logic runs across "hosts" without root; the same runs across network
namespaces with real shaping are in test_health_netns.py.  Faults are real: a
rank's process is stopped (SIGSTOP) or killed (SIGKILL) mid-scan, and the scan
must name exactly that host, blame no other, and end in bounded time.
"""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from health_runtime_helpers import HealthRun, rank_pids

pytestmark = pytest.mark.mpi

SIX = "h0,h1,h2,h3,h4,h5"
SMALL = ["--bw-size", "64K", "-n", "10", "-w", "1", "--cycles", "3"]  # 3 cycles: a group whose cycles disagree is not judged


def env(ncclbench_env, hosts=SIX):
    return dict(ncclbench_env, NCCLBENCH_HEALTH_HOST_MAP=hosts)


def test_healthy_hosts_json_and_empty_drain_list(ncclbench_env, tmp_path):
    js, drain = tmp_path / "h.json", tmp_path / "drain.txt"
    run = HealthRun(["--backend", "mpi", "--nprocs", "6", "--phases", "local,pairs", *SMALL,
                     "--round-timeout", "20", "--json", str(js), "--drain", str(drain)], env(ncclbench_env))
    code, out, err, elapsed = run.finish(120)
    assert "# ncclbench health: 6 host(s), 6 rank(s)" in out and "# no fault confirmed" in out
    doc = json.loads(js.read_text())
    assert doc["faults_found"] is False and doc["drain"] == []
    assert [line for line in drain.read_text().splitlines() if not line.startswith("#")] == []
    # Six ranks share this machine's cores, so one may measure slow once: then it is listed as an
    # unconfirmed suspect (with the finding that says so), never as faulty and never drained; a
    # group whose cycles disagree is not judged. Either way the scan exits 9, not 0.
    status = doc["host_status"]
    suspects = {h for h, s in status.items() if s == "suspect"}
    assert set(status.values()) <= {"healthy", "suspect", "not judged"} and len(suspects) <= 2, status
    unresolved = [h for h, s in status.items() if s != "healthy"]
    open_suspects = [f for f in doc["findings"] if not f["confirmed"] and f["verdict"].startswith("suspect")]
    assert code == (9 if unresolved or open_suspects else 0), (out, err)
    assert doc["outcome"] == ("not judged" if unresolved or open_suspects else "healthy") and doc["exit_code"] == code
    assert sum(doc["summary"].values()) == 6 and doc["summary"]["healthy"] == 6 - len(unresolved)
    unconfirmed = {h for f in doc["findings"] if not f["confirmed"] and f["verdict"].startswith("suspect")
                   for h in f["hosts"]}
    assert suspects <= unconfirmed, doc["findings"]
    names = [r["name"] for r in doc["rounds"]]
    assert names[0] == "local r1" and "pairs r1" in names
    pairs = doc["references"]["pairs:2x1"]["busbw"]
    if pairs is not None:  # judged: the steady ones of the 15 host pairs (every pair of 6 hosts, round-robin)
        assert pairs["source"] == "fleet" and 3 <= pairs["n"] <= 15 and pairs["center"] > 0
    else:  # on a loaded machine the pairs' cycles may disagree, or the pairs scatter over 50 % of
        # their median: then it must say which, not guess
        notes = [e for f in doc["findings"] if f["verdict"] == "not judged" for e in f["evidence"]]
        assert any("pairs:" in e and ("timed cycles disagreed" in e or "scatter too much" in e) for e in notes), \
            doc["findings"]


def _stop_or_kill(ncclbench_env, tmp_path, sig):
    js = tmp_path / "h.json"
    run = HealthRun(["--backend", "mpi", "--nprocs", "6", "--phases", "local,pairs", *SMALL,
                     "--round-timeout", "5", "--json", str(js), "--drain", str(tmp_path / "drain.txt")],
                    env(ncclbench_env))
    assert run.wait_for_line("local r1", 90), "".join(run.err_lines)
    pids = rank_pids(run.tag)
    assert len(pids) == 6, pids
    os.kill(pids[3], sig)
    try:
        code, out, err, elapsed = run.finish(90)
    finally:
        try:
            os.kill(pids[3], signal.SIGKILL)
        except OSError:
            pass
    return code, out, err, elapsed, json.loads(js.read_text()), pids[3]


def test_a_stopped_rank_is_named_and_no_other_host_blamed(ncclbench_env, tmp_path):
    code, out, err, elapsed, doc, pid = _stop_or_kill(ncclbench_env, tmp_path, signal.SIGSTOP)
    assert code == 8, (out, err)
    confirmed = [f for f in doc["findings"] if f["confirmed"]]
    assert [(f["component"], f["hosts"]) for f in confirmed] == [("no answer", ["h3"])], out
    assert f"rank 3 (host h3, pid {pid})" in " ".join(confirmed[0]["evidence"])
    drained = (tmp_path / "drain.txt").read_text().splitlines()
    assert doc["drain"] == ["h3"] and [h for h in drained if not h.startswith("#")] == ["h3"]
    # six ranks on this machine's cores: a host measured slow beside the stalled pair may stay an
    # unconfirmed suspect (pairs at other loads are not comparable, health/core/sharing.py), never faulty
    assert all(s in ("healthy", "partly tested", "suspect", "not judged") for h, s in doc["host_status"].items()
               if h != "h3")
    assert elapsed < 60  # one 5 s round timeout (+ grace) where the stopped rank was due, not a hang


def test_a_killed_rank_is_named_and_the_scan_ends(ncclbench_env, tmp_path):
    code, out, err, elapsed, doc, pid = _stop_or_kill(ncclbench_env, tmp_path, signal.SIGKILL)
    assert code == 8, (out, err)
    confirmed = [f for f in doc["findings"] if f["confirmed"]]
    assert [(f["component"], f["hosts"]) for f in confirmed] == [("no answer", ["h3"])], out
    assert f"rank 3 (host h3, pid {pid}) died" in " ".join(confirmed[0]["evidence"])
    # MPICH's launcher ends the whole job when a rank dies: the others are not blamed (one may stay
    # an unconfirmed suspect if the kill cut its re-run)
    assert all(s in ("healthy", "partly tested", "suspect", "not judged") for h, s in doc["host_status"].items()
               if h != "h3")
    assert elapsed < 60


def test_one_host_runs_what_it_can_and_says_why(ncclbench_env, tmp_path):
    js = tmp_path / "h.json"
    run = HealthRun(["--backend", "mpi", "--nprocs", "2", *SMALL, "--round-timeout", "20", "--json", str(js)],
                    env(ncclbench_env, "solo,solo"))
    code, out, err, _ = run.finish(90)
    # issue 22: one host on the CPU backend has nothing to judge its intra group against (one
    # group, no baseline, no model of host-memory MPI): "not judged", exit 9, never "healthy"
    assert code == 9, (out, err)
    assert "# note: 1 host (solo): the inter-node phases (rail, pairs) need at least 2 hosts" in out
    assert "# healthy:" not in out and "# not judged (no fault seen, nothing to judge against): 1 host(s): solo" in out
    assert "# expected ceiling: none on the CPU backend" in out
    doc = json.loads(js.read_text())
    assert doc["host_status"] == {"solo": "not judged"} and doc["outcome"] == "not judged" and doc["exit_code"] == 9
    assert any("intra r1: solo" in why for why in doc["not_judged"]["solo"]), doc["not_judged"]
    ran = {r["name"].split()[0] for r in doc["rounds"]}
    assert ran == {"local", "intra"}  # the phases one host allows, and only those
    # issue 32: a CPU-backend rank drives no GPU, and its label says so ("solo rank 1", not "solo gpu 1")
    local = [g["group"] for r in doc["measurements"] if r["round"].startswith("local") for g in r["groups"]]
    assert sorted(local) == ["solo rank 0", "solo rank 1"], local


def _cli(args, ncclbench_env):
    return subprocess.run([sys.executable, "-m", "ncclbench", "health", *args], env=ncclbench_env,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("args, message", [
    (["--phases", "local,warp"], "health: unknown phase(s) warp"),
    (["--serve", "7000"], "health: --serve needs --ranks N"),
    (["--cycles", "0"], "health: --cycles must be at least 1"),
    (["--bw-size", "2"], "--bw-size and --lat-size must be at least 4 bytes"),
])
def test_bad_input_is_one_line_and_exit_255(args, message, ncclbench_env):
    res = _cli(args, ncclbench_env)
    assert res.returncode == 255, res
    assert res.stderr.count("\n") == 1 and message in res.stderr and "Traceback" not in res.stderr


def test_gpu_backend_without_a_gpu_is_one_line_naming_the_rank(ncclbench_env):
    """--backend nccl where no GPU is usable: the GPU runtime's ranks start, their set-up
    fails, and the coordinator says which rank and why in one line (CUDA's exit code 2)."""
    from ncclbench.backends.select import gpu_count

    if gpu_count() > 0:
        pytest.skip("a GPU is usable here: tests/gpu/test_health_gpu.py covers the GPU runtime")
    t0 = time.monotonic()
    res = _cli(["--backend", "nccl", "--nprocs", "2", "--no-store"], ncclbench_env)
    assert time.monotonic() - t0 < 60
    assert res.returncode == 2, res
    assert res.stderr.startswith("ncclbench: health: rank 0 (host ") and "(and 1 more rank(s))" in res.stderr
    assert "no NVIDIA GPU/driver found" in res.stderr or "NVIDIA driver too old" in res.stderr
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr


def test_uneven_odd_and_a_disagreeing_host_list_each_get_one_line(ncclbench_env, tmp_path):
    js = tmp_path / "h.json"
    run = HealthRun(["--backend", "mpi", "--nprocs", "5", *SMALL, "--round-timeout", "20", "--hosts", "h0,h1,h2,h9",
                     "--json", str(js)], env(ncclbench_env, "h0,h0,h1,h2,h2"))
    code, out, err, _ = run.finish(120)
    assert code == 9, (out, err)  # h9 was not tested: not "healthy"
    notes = [line for line in out.splitlines() if line.startswith("# note: ")]
    assert any("odd host count (3)" in n for n in notes), notes
    assert any("uneven GPUs per host (h0: 2, h1: 1, h2: 2)" in n for n in notes), notes
    assert any("listed but not in the job: h9" in n for n in notes), notes
    assert "# thresholds: slow at busbw z < -3.5" in out and "CPU backend: the 1 % tail" in out  # and their source
    doc = json.loads(js.read_text())
    assert doc["host_status"]["h9"] == "not tested"
    assert doc["gpus_per_host"] == [2, 1, 2]
    ran = {r["name"].split()[0] for r in doc["rounds"]}
    assert ran == {"local", "intra", "rail", "pairs"}  # every phase that can run still ran


def test_a_baseline_saved_on_other_hosts_is_one_line_exit_255_and_judges_nothing(ncclbench_env, tmp_path):
    base = tmp_path / "b.json"
    base.write_text(json.dumps({"name": "b.json", "hosts": ["elsewhere"], "busbw": {"local:1x1": [2.0, 0.1]}}))
    js = tmp_path / "h.json"
    res = _cli(["--backend", "mpi", "--nprocs", "2", "--baseline", str(base), "--json", str(js)],
               env(ncclbench_env, "solo,solo"))
    assert res.returncode == 255, res.stdout + res.stderr
    assert res.stderr.strip() == ("ncclbench: health: baseline b.json was saved on other hosts (elsewhere), none of "
                                  "them in this scan (solo): not judged against it")
    assert not js.exists() and "Traceback" not in res.stderr


def test_a_baseline_of_another_version_is_one_line_exit_255(ncclbench_env, tmp_path):
    """Issue 29's bad input through the command: one line, exit 255, no scan written."""
    base = tmp_path / "b.json"
    base.write_text(json.dumps({"name": "b.json", "hosts": ["solo"], "busbw": {"local:1x1": [2.0, 0.1]},
                                "version": "0.0.1"}))
    js = tmp_path / "h.json"
    res = _cli(["--backend", "mpi", "--nprocs", "2", "--baseline", str(base), "--json", str(js)],
               env(ncclbench_env, "solo,solo"))
    assert res.returncode == 255, res.stdout + res.stderr
    line = res.stderr.strip()
    assert line.startswith("ncclbench: health: baseline b.json was saved by ncclbench 0.0.1, this is ") and \
        line.endswith("(save a new one with --save-baseline)") and "\n" not in line, line
    assert not js.exists() and "Traceback" not in res.stderr
