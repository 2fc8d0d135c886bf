"""Explain as users meet it: a CPU-backend run prints and stores its judgement, --no-explain gives
the output of before, `ncclbench explain RUN` judges stored runs and real nccl-tests logs again,
`ncclbench topo` and `preflight` show topology, and the report draws the ceiling."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from explain_helpers import H100, H200, facts

from ncclbench.commands import main as ncclbench
from ncclbench.explain import nvml_reader
from ncclbench.explain.topology import HostTopology
from ncclbench.simulation import hosts as S

FIX = Path(__file__).parent / "fixtures"
REAL = FIX / "nccl_logs" / "h100-1rank-2.28.9"
CORPUS = FIX / "import_corpus"
NUMBER = re.compile(r"\d+(\.\d+)?(e[-+]\d+)?")


def bench(env, tmp_path, *args, timeout=180):
    cmd = [sys.executable, "-m", "ncclbench", "all_reduce_perf", "-b", "8", "-e", "64K", "-f", "8", "-n", "2",
           "--backend", "mpi", "--nprocs", "2", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, cwd=tmp_path)


def explained_lines(text):
    """explain's lines without the imported log's PCI-id line (its content is the device lines')."""
    return [x for x in text.splitlines() if not x.startswith("#   GPUs by PCI id: ")]


def masked(text):
    """The text with every number (times, pids, dates) replaced and runs of blanks as one: the lines' words."""
    return [NUMBER.sub("N", " ".join(line.split())) for line in text.splitlines()]


@pytest.mark.mpi
def test_cpu_run_is_judged_and_no_explain_gives_the_old_output(ncclbench_env, tmp_path):
    env = dict(ncclbench_env, NCCLBENCH_DB=str(tmp_path / "r.sqlite"))
    env.pop("NCCLBENCH_NO_STORE")
    (tmp_path / "on").mkdir()
    (tmp_path / "off").mkdir()
    on = bench(env, tmp_path / "on", "-J", "r.json")
    off = bench(env, tmp_path / "off", "-J", "r.json", "--no-explain")
    assert on.returncode == 0 == off.returncode, on.stderr + off.stderr
    lines = on.stdout.splitlines()
    avg = next(i for i, x in enumerate(lines) if x.startswith("# Avg bus bandwidth"))
    end = lines.index("# Collective test concluded: all_reduce_perf")
    assert lines[avg + 1] == "# NCCL path: none (the CPU backend runs MPI collectives on host memory)"
    assert lines[avg + 2].startswith("# Plateau bus bandwidth: ") and "CPU backend" in lines[avg + 2]
    assert lines[avg + 3] == "# Not checked: NCCL traps (the CPU backend uses no NCCL)" and lines[avg + 4] == "#"
    assert end == avg + 5
    top = next(i for i, x in enumerate(lines) if x.startswith("# Topology "))
    last_device = max(i for i, x in enumerate(lines) if x.startswith("#  Rank "))
    header = next(i for i, x in enumerate(lines) if x.startswith("#       size"))
    assert last_device < top < header and lines[top + 1].startswith("#   NICs: ")

    doc = json.loads((tmp_path / "on" / "r.json").read_text())
    ex = doc["ncclbench_explain"]
    assert ex["lines"] == lines[avg + 1:end - 1]
    assert len(ex["rows"]) == len(doc["results"]) and ex["judgement"]["verdict"]["label"] == "unknown"
    assert ex["topology"][0]["host"] and "nvml" in ex["topology"][0]["unknown"]  # no NVML here: said so
    assert "ncclbench_explain" not in doc["ncclbench"].get("extra", {})
    assert not any(e.startswith(("NCCL_DEBUG=", "NCCL_DEBUG_FILE=")) for e in doc["env"])

    # --no-explain: exactly the output of before, the lines explain adds taken away
    added = set(ex["lines"]) | {x for x in doc["ncclbench"]["notes"] if x.startswith(("# Topology", "#   NICs"))}
    assert masked(off.stdout) == masked("\n".join(x for x in lines if x not in added) + "\n")
    off_doc = json.loads((tmp_path / "off" / "r.json").read_text())
    assert "ncclbench_explain" not in off_doc and sorted(off_doc) == sorted(k for k in doc if k != "ncclbench_explain")

    # stored with the run: `explain` and `show` read it back
    db = ["--db", str(tmp_path / "r.sqlite")]
    shown = subprocess.run([sys.executable, "-m", "ncclbench", "show", "latest~1", *db], capture_output=True,
                           text=True, env=env, timeout=60)
    assert lines[avg + 2] in shown.stdout.splitlines()
    again = subprocess.run([sys.executable, "-m", "ncclbench", "explain", "latest~1", *db, "--json",
                            str(tmp_path / "e.json")], capture_output=True, text=True, env=env, timeout=60)
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[1:3] == lines[top:top + 2] and lines[avg + 2] in again.stdout
    assert json.loads((tmp_path / "e.json").read_text())["rows"] == ex["rows"]


def test_explain_an_imported_real_log(capsys, tmp_path, monkeypatch):
    """A real nccl-tests 2.19.6 + NCCL 2.28.9 log (one H100, INIT,TUNING,COLL lines inside the rows)."""
    monkeypatch.setenv("NCCLBENCH_DB", str(tmp_path / "r.sqlite"))
    path = REAL / "nccl-tests-interleaved-init-tuning-coll.txt"
    assert ncclbench(["import", str(path)]) == 0
    capsys.readouterr()
    assert ncclbench(["explain", "latest"]) == 0
    out = explained_lines(capsys.readouterr().out)
    assert out[0] == "# ncclbench explain: run 1 (all_reduce_perf, 1 rank(s), 9 row(s), complete)"
    assert out[1] == ("# Topology from the log: 1 host(s) (vm), 1 rank(s) per host, 1 rank(s) [hosts: NCCL's comm "
                      "lines (nNodes); ranks: nccl-tests' device lines]; GPU NVIDIA H100 80GB HBM3")
    assert out[2].startswith("#   assumed: NVIDIA H100 80GB HBM3 -> an HGX H100/H200 board: NVSwitch")
    assert out[3] == "# NCCL 2.28.9 path: network Socket; sockets over eth0; 64 coll channel(s)"
    assert out[4] == ("# all_reduce per size: NCCL's choice unknown (none with one rank (NCCL copies locally, no "
                      "algorithm is chosen))")
    assert out[5].startswith("# One rank moves no data: busbw is 0")  # issue 22 item 5
    assert out[6].startswith("# Plateau bus bandwidth: ") and "not judged" in out[6]
    assert "a single rank moves no data" in out[6]
    assert out[7].startswith("# Not checked: net-socket-fallback (one host: no traffic between hosts to judge)")
    assert ncclbench(["explain", str(REAL / "nccl-tests-forced-ring-simple-p2pdisable.txt")]) == 0
    forced = capsys.readouterr().out
    assert "# TRAP WARN p2p-disabled: NCCL's log: P2P disabled (NCCL_P2P_DISABLE=1)" in forced
    path_line = next(x for x in forced.splitlines() if x.startswith("# NCCL 2.28.9 path"))
    assert "P2P disabled (NCCL_P2P_DISABLE=1)" in path_line
    assert "#   NCCL settings: NCCL_P2P_DISABLE=1" in forced  # what NCCL said it read, with its source
    assert ncclbench(["explain", str(REAL / "nccl-tests-forced-ring-simple-p2pdisable.txt"),
                      "--fail-on-trap", "warn"]) == 7
    assert "trap(s) found with --fail-on-trap warn: p2p-disabled" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["ompi4_tag_output_all_reduce_2proc.log", "srun_label_all_reduce_2proc.log",
                                  "prrte_tag_detailed_all_reduce_2proc.log", "crlf_all_reduce_2proc.log",
                                  "nccl_warn_splits_a_row_all_reduce_2proc.log"])
def test_explain_two_rank_logs(name, capsys, tmp_path):
    assert ncclbench(["explain", str(CORPUS / name), "--json", str(tmp_path / "e.json")]) == 0
    out = explained_lines(capsys.readouterr().out)
    doc = json.loads((tmp_path / "e.json").read_text())
    assert out[0].startswith(f"# ncclbench explain: {name} (all_reduce_perf, 2 rank(s)")
    assert out[1].startswith("# Topology from the log: 1 host(s) (vm), 2 rank(s) per host, 2 rank(s)")
    assert out[1].endswith("; GPU NVIDIA H200")
    assert out[2].startswith("#   assumed: NVIDIA H200 -> an HGX H100/H200 board")
    if doc["nccl_log"] is not None and doc["nccl_log"]["facts"]["version"]:
        # one host, every connection P2P: the network NCCL initialised moved nothing, and the line says so
        assert out[3].startswith("# NCCL 2.28.9 path: network not used (no NET connection; NCCL initialised network "
                                 "Socket; sockets over ") and "connections: P2P" in out[3]
        assert out[4] == ("# all_reduce per size: NCCL's choice unknown (no per-call TUNING line (printed by rank 0 "
                          "while TUNING is on))")
    elif doc["nccl_log"] is not None:  # a WARN alone: said, and named as the lost peer it shows
        assert out[3] == ("# NCCL path: 1 NCCL WARN line(s), first: socketProgressOpt: Call to recv from "
                          "192.0.2.3<41234> failed : Connection reset by peer")
        assert doc["causes"] == ["network_error_remote_exit"]
    else:
        assert out[3] == "# NCCL path unknown: the log has no NCCL INFO lines (NCCL_DEBUG=INFO prints them)"
    plateau = next(x for x in out if x.startswith("# Plateau"))
    # 347.8 GB/s on 2 GPUs of an (assumed) HGX H200 board: NCCL's NVLink model 18 x 20.6
    assert "ceiling 370.8 GB/s (NVLink, Ring predicted): as expected (for 8 GiB: 347.8 GB/s, about what a healthy " \
        "2x H200 all_reduce reaches there" in plateau and "94% of the 370.8 GB/s ceiling" in plateau
    assert doc["topology"] == [] and doc["judgement"]["verdict"]["label"] == "as expected"
    assert doc["judgement"]["ceiling"]["reasoning"].startswith("assumed from the GPU model: ")
    assert len(doc["rows"]) == int(out[0].split(" row(s)")[0].rsplit(" ", 1)[1])


def test_explain_matches_rows_to_nccls_per_call_lines_in_a_log(capsys):
    assert ncclbench(["explain", str(CORPUS / "nccl_coll_inside_rows_all_reduce_1proc_4gpu.log")]) == 0
    out = explained_lines(capsys.readouterr().out)
    assert out[4:6] == ["# all_reduce 8 B - 64 KiB: Ring/LL, 2 channels",
                        "# all_reduce 128 KiB - 8 GiB: Ring/Simple, 24 channels"]


def test_explain_bad_input_is_one_line(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("NCCLBENCH_DB", str(tmp_path / "none.sqlite"))
    assert ncclbench(["explain", "latest"]) == 255
    assert capsys.readouterr().err.startswith("ncclbench: no result store at")
    assert ncclbench(["explain", str(CORPUS / "crlf_all_reduce_2proc.log"), "--json", str(tmp_path / "no/x.json")]) \
        == 255
    assert "explain: cannot write" in capsys.readouterr().err


# -- topology without collectives ----------------------------------------------------------------

@pytest.mark.parametrize("spec,first,second", [
    (S.hgx_host("n1", *H100, ngpus=8, nic_kind="ib", nics=8),
     "# Topology n1: 8x NVIDIA H100 80GB HBM3 (sm 9.0), NVSwitch, NVLink4 18 links x 25 GB/s = 450 GB/s/GPU, "
     "PCIe 8x Gen5 x16",
     "#   NICs: 8x InfiniBand 400 Gb/s ACTIVE; GPUDirect RDMA: nvidia_peermem loaded; nearest NIC per GPU: 8x PIX"),
    (S.pcie_host("p1", *H200, ngpus=4, gpu_pcie=(4, 4, 8, 16)),
     "# Topology p1: 4x NVIDIA H200 (sm 9.0), no active NVLink, PCIe 4x Gen4 x8 (max Gen4 x16)",
     "#   NICs: Ethernet 100 Gb/s up"),
])
def test_topo_on_fake_hosts(spec, first, second, tmp_path, capsys, monkeypatch):
    root, out = tmp_path / "root", tmp_path / "t.json"
    fake, _ = S.materialise(spec, str(root))
    monkeypatch.setattr(nvml_reader, "load_nvml", lambda: (fake, ""))
    monkeypatch.setattr("socket.gethostname", lambda: spec.host)
    assert ncclbench(["topo", "--root", str(root), "--json", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[:2] == [first, second]
    assert lines[2] == f"# Host {spec.host}" and sum(x.startswith("GPU") and " sm 9.0" in x for x in lines) == len(
        spec.gpus)
    back = HostTopology.from_dict(json.loads(out.read_text()))
    assert back == facts(spec) and len(back.gpus) == len(spec.gpus)


def test_topo_json_path_that_cannot_be_written(tmp_path, capsys):
    assert ncclbench(["topo", "--json", str(tmp_path / "no" / "t.json")]) == 6
    assert capsys.readouterr().err.strip().startswith("ncclbench: topo: cannot write")
    assert ncclbench(["topo", "--bogus"]) == 255


@pytest.mark.mpi
def test_preflight_shows_each_hosts_topology(ncclbench_env, tmp_path):
    p = subprocess.run([sys.executable, "-m", "ncclbench", "preflight", "--nprocs", "2", "--backend", "mpi",
                        "--json", str(tmp_path / "p.json")], capture_output=True, text=True, env=ncclbench_env,
                       timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.splitlines()
    top = next(i for i, x in enumerate(lines) if x.startswith("# Topology "))
    assert lines[top - 1].startswith("# Host ") and lines[top + 1].startswith("#   NICs: ")
    assert sum(x.startswith("# Topology ") for x in lines) == 1  # one host, read once
    doc = json.loads((tmp_path / "p.json").read_text())
    assert len(doc["topology"]) == 1 and doc["topology_unknown"] == [] and doc["ok"] is True


# -- the report -----------------------------------------------------------------------------------

def test_report_draws_the_ceiling_and_shows_the_judgement(tmp_path):
    """An imported 4-GPU log given the topology of 4 GPUs of an HGX H200 (as a live run stores it):
    the report command judges it (Ring from NCCL's lines, NVLink ceiling) and the report draws it."""
    from ncclbench.commands.report import judged_runs
    from ncclbench.core.results import EXPLAIN_KEY
    from ncclbench.report import plots
    from ncclbench.report.html import build_report
    from ncclbench.store.importers import load_file

    run, = load_file(CORPUS / "nccl_coll_inside_rows_all_reduce_1proc_4gpu.log")
    bare = judged_runs([run])[run.label]  # the log alone: 4x H200 on an assumed HGX board (said so)
    assert bare.verdict == "as expected" and bare.ceiling == 370.8
    assert any(x.startswith("#   assumed: NVIDIA H200 -> an HGX H100/H200 board") for x in bare.lines)
    assert "# all_reduce 128 KiB - 8 GiB: Ring/Simple, 24 channels" in bare.lines
    t = facts(S.hgx_host("n1", *H200, nic_kind=None))
    run.info.extra[EXPLAIN_KEY] = {"topology": [t.only([g.pci_bus_id for g in t.gpus[:4]]).to_dict()]}
    judged = judged_runs([run])
    j = judged[run.label]
    assert (j.verdict, j.ceiling, j.ceiling_text) == ("as expected", 370.8, "ceiling (NVLink, Ring from NCCL log)")
    assert j.lines[0].startswith("# Topology n1: 4x NVIDIA H200 (sm 9.0), NVSwitch")
    spec = plots.build_specs([run], ceilings={run.label: (j.ceiling, j.ceiling_text)})[0]
    assert spec.name == "busbw" and [(r.y, r.label) for r in spec.refs] == [
        (370.8, f"{run.label} ceiling (NVLink, Ring from NCCL log)")]
    html = build_report([run], use_matplotlib=False, judged=judged)
    assert 'stroke-dasharray="6,4"' in html and "ceiling (NVLink, Ring from NCCL log)" in html
    assert "<h3>Judgement (ncclbench explain)</h3>" in html and "verdict: as expected" in html
    assert "<td class=\"num\">370.8</td>" in html
    plain = build_report([run], use_matplotlib=False)
    assert "stroke-dasharray" not in plain and "Judgement" not in plain
