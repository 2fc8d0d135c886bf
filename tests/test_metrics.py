"""--metrics (Prometheus text for runs and health scans) and --csv: every file is read
back with prometheus_client's own parser (the one Prometheus' Python tooling uses), or
Python's csv module, and its numbers checked against the run they came from."""

from __future__ import annotations

import csv
import json
import math
import os
import stat
import subprocess
import sys

import pytest
from health_helpers import FakeFabric
from output_helpers import half, make_info, make_row

from ncclbench.core.config import BenchOptions
from ncclbench.core.errors import ArgumentError
from ncclbench.core.results import RunSummary
from ncclbench.explain.ceiling import Ceiling
from ncclbench.explain.plateau_verdict import judge, plateau_busbw
from ncclbench.health.core.fleet import Fleet
from ncclbench.health.core.scan import ScanConfig, run_scan
from ncclbench.health.outputs.scan_output import scan_document
from ncclbench.output.csvout import HEADER, rows_csv
from ncclbench.output.metrics import (
    MetricsReporter,
    check_writable,
    health_metrics,
    run_metrics,
    size_classes,
    write_textfile,
)

parser = pytest.importorskip("prometheus_client.parser", reason="the test extra installs prometheus-client")

MiB = 1 << 20


def parse(text: str) -> dict[str, list]:
    """name -> samples, through prometheus_client's parser (raises on malformed text)."""
    out: dict[str, list] = {}
    for fam in parser.text_string_to_metric_families(text):
        assert fam.type == "gauge", fam.name
        out.setdefault(fam.name, []).extend(fam.samples)
    return out


def one(samples, **labels):
    hits = [s for s in samples if all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(hits) == 1, (labels, hits)
    return hits[0]


def sweep(sizes, busbw):
    return [make_row(size=s, count=s // 4, oop=half(time_us=10.0 + s / 1e4, algbw=b, busbw=b),
                     ip=half(time_us=11.0 + s / 1e4, algbw=b * 0.9, busbw=b * 0.9)) for s, b in zip(sizes, busbw)]


def judged_summary(rows, ceiling_gbs):
    """A summary carrying a real explain judgement (explain.plateau_verdict.judge on these rows)."""
    plateau = plateau_busbw([(r.size, r.out_of_place.busbw) for r in rows])
    ceiling = Ceiling("all_reduce", 8, 1, bound="NVLink", line_rate=450.0, ceiling=ceiling_gbs)
    verdict = judge(plateau, ceiling)
    j = {"ceiling": ceiling.to_dict(), "plateau": plateau.to_dict(), "verdict": verdict.to_dict()}
    return RunSummary(0, 100.0, None, None, explain={"judgement": j}), plateau, verdict


SIZES = [8, 1024, 64 * 1024, 1 * MiB, 16 * MiB, 64 * MiB, 128 * MiB, 256 * MiB]
BUSBW = [0.01, 1.0, 30.0, 150.0, 300.0, 340.0, 352.0, 356.0]


def test_size_classes_follow_the_gate_and_explain():
    from ncclbench.output.metrics import SMALL_MAX_BYTES
    from ncclbench.store.summary_stats import LATENCY_MAX_SIZE

    assert SMALL_MAX_BYTES == LATENCY_MAX_SIZE  # one threshold, held equal across the layers
    c = size_classes(SIZES)
    assert c["small"] == [8, 1024, 64 * 1024]  # <= 64 KiB: the gate's latency sizes
    assert c["plateau"] == [128 * MiB, 256 * MiB]  # within a factor of 4 of the largest: explain's plateau
    assert c["medium"] == [1 * MiB, 16 * MiB, 64 * MiB]


def test_run_metrics_parse_and_carry_the_plateau_verdict_and_ratio():
    rows = sweep(SIZES, BUSBW)
    summary, plateau, verdict = judged_summary(rows, 400.0)
    text = run_metrics(make_info(nranks=8), BenchOptions(), rows, summary, now=1700000000.0)
    m = parse(text)
    base = {"collective": "all_reduce", "backend": "nccl", "nranks": "8", "type": "float", "redop": "sum",
            "root": "-1", "placement": "out_of_place"}
    bw = one(m["ncclbench_busbw_bytes_per_second"], **base, size_class="plateau")
    assert bw.value == pytest.approx(plateau.busbw * 1e9) and plateau.busbw == pytest.approx(354.0)
    ratio = one(m["ncclbench_ceiling_ratio"], **base, size_class="plateau")
    assert ratio.value == pytest.approx(354.0 / 400.0)
    v = one(m["ncclbench_run_verdict"], **base, size_class="plateau")
    assert v.value == 1 and v.labels["verdict"] == verdict.label == "below expected"  # 88.5 % < 90 %
    small = one(m["ncclbench_time_seconds"], **base, size_class="small")
    assert small.value == pytest.approx((10.0 + 1024 / 1e4) * 1e-6)  # median time of 8 B, 1 KiB, 64 KiB
    assert one(m["ncclbench_run_verdict"], **base, size_class="small").labels["verdict"] == "not judged"
    ip = one(m["ncclbench_busbw_bytes_per_second"], **dict(base, placement="in_place"), size_class="plateau")
    assert ip.value == pytest.approx(354.0 * 0.9e9)  # in-place: its own median, no explain figure
    assert one(m["ncclbench_run_complete"]).value == 1
    assert one(m["ncclbench_run_timestamp_seconds"]).value == 1700000000.0
    assert one(m["ncclbench_run_wrong_elements"]).value == 0


def test_unknown_ceiling_writes_no_ratio_and_says_not_judged():
    rows = sweep(SIZES, BUSBW)
    plateau = plateau_busbw([(r.size, r.out_of_place.busbw) for r in rows])
    ceiling = Ceiling("all_reduce", 2, 1, unknown="the CPU backend has no bandwidth model")
    j = {"ceiling": ceiling.to_dict(), "plateau": plateau.to_dict(), "verdict": judge(plateau, ceiling).to_dict()}
    m = parse(run_metrics(make_info(), BenchOptions(), rows, RunSummary(0, 1.0, None, None, explain={"judgement": j})))
    assert "ncclbench_ceiling_ratio" not in m  # unknown is left out, never 0
    v = one(m["ncclbench_run_verdict"], size_class="plateau", placement="out_of_place")
    assert v.labels["verdict"] == "not judged" and v.labels["why"] == "explain"


def test_label_values_are_escaped_and_reasons_are_no_labels():
    reason = 'the "ceiling" \\ unknown\nhere'
    rows = sweep([8], [0.1])
    j = {"ceiling": {"ceiling": None}, "plateau": {"busbw": 0.1}, "verdict": {"label": "unknown", "text": reason}}
    m = parse(run_metrics(make_info(), BenchOptions(), rows, RunSummary(0, 0.1, None, None, explain={"judgement": j})))
    assert one(m["ncclbench_run_verdict"], placement="out_of_place").labels["why"] == "latency-bound"  # 8 B: small
    rows = sweep([128 * MiB], [0.1])
    m = parse(run_metrics(make_info(), BenchOptions(), rows, RunSummary(0, 0.1, None, None, explain={"judgement": j})))
    v = one(m["ncclbench_run_verdict"], placement="out_of_place")
    assert v.labels["why"] == "explain" and reason not in v.labels.values()  # the words are in -J's JSON
    m = parse(run_metrics(make_info(library='lib "x" \\ y'), BenchOptions(), rows, None))
    assert one(m["ncclbench_run_info"]).labels["library"] == 'lib "x" \\ y'
    m = parse(run_metrics(make_info(library="MPICH Version:      5.0.2"), BenchOptions(), sweep([8], [0.1]), None))
    assert one(m["ncclbench_run_info"]).labels["library"] == "MPICH Version: 5.0.2"
    assert one(m["ncclbench_run_complete"]).value == 0  # no summary: the run ended early
    v = one(m["ncclbench_run_verdict"], size_class="small", placement="out_of_place")
    assert v.labels["verdict"] == "not judged"


def test_unchecked_rows_write_no_wrong_count():
    rows = [make_row(size=8, oop=half(wrong=None), ip=half(wrong=None))]
    assert "ncclbench_run_wrong_elements" not in parse(run_metrics(make_info(), BenchOptions(), rows, None))


def test_textfile_is_replaced_atomically_and_readable_by_others(tmp_path):
    path = tmp_path / "ncclbench.prom"
    path.write_text("old\n")
    inode = path.stat().st_ino
    write_textfile(str(path), "ncclbench_x 1\n")
    assert path.read_text() == "ncclbench_x 1\n" and path.stat().st_ino != inode  # a rename, not a rewrite
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert os.listdir(tmp_path) == ["ncclbench.prom"]  # no temporary file left behind


def test_reporter_writes_at_end_and_on_an_early_close(tmp_path):
    path = tmp_path / "run.prom"
    rep = MetricsReporter(str(path))
    rep.begin(make_info(), BenchOptions())
    rep.row(make_row(size=1024, oop=half(busbw=2.0), ip=half(busbw=1.0)))
    assert not path.exists()  # nothing until the run ends
    rep.close()
    m = parse(path.read_text())
    assert one(m["ncclbench_run_complete"]).value == 0
    assert one(m["ncclbench_busbw_bytes_per_second"], placement="out_of_place").value == 2e9


def test_unwritable_path_is_one_clear_error(tmp_path):
    with pytest.raises(ArgumentError, match="cannot write in"):
        check_writable(str(tmp_path / "missing" / "x.prom"))
    with pytest.raises(ArgumentError, match="is a directory"):
        check_writable(str(tmp_path))


def test_csv_holds_the_table_at_full_precision():
    rows = sweep([8, 1024], [0.123456789, 2.5]) + [make_row(size=2048, oop=half(wrong=None), ip=half(wrong=3))]
    got = list(csv.DictReader(rows_csv("all_reduce", rows).splitlines()))
    assert list(got[0]) == list(HEADER) and len(got) == 3
    assert float(got[0]["oop_busbw_gbps"]) == 0.123456789 and got[1]["size_bytes"] == "1024"
    assert got[2]["oop_wrong"] == "" and got[2]["ip_wrong"] == "3"  # not checked: empty, not 0


# -- health -------------------------------------------------------------------------------------------


def scan_doc(fleet, **faults):
    return scan_document(run_scan(fleet, ScanConfig(), FakeFabric(**faults)), {"backend": "simulated"})


def test_health_metrics_name_the_faulty_gpu_host_and_drain():
    doc = scan_doc(Fleet.uniform(8, 4), gpu={(3, 2): 0.5})
    m = parse(health_metrics(doc))
    gpu = one(m["ncclbench_health_gpu_verdict"], host="node3", gpu="2")
    assert gpu.labels["verdict"] == "faulty" and "reason" not in gpu.labels
    assert one(m["ncclbench_health_gpu_verdict"], host="node3", gpu="1").labels["verdict"] == "healthy"
    assert one(m["ncclbench_health_host_verdict"], host="node3").labels["verdict"] == "faulty"
    assert one(m["ncclbench_health_host_verdict"], host="node4").labels["verdict"] == "healthy"
    assert one(m["ncclbench_health_host_drain"], host="node3").value == 1
    assert one(m["ncclbench_health_host_drain"], host="node4").value == 0
    assert one(m["ncclbench_health_hosts"], verdict="faulty").value == 1
    assert one(m["ncclbench_health_hosts"], verdict="healthy").value == 7
    assert {s.labels["verdict"] for s in m["ncclbench_health_rail_verdict"]} == {"healthy"}
    assert len(m["ncclbench_health_rail_verdict"]) == 4
    f = one(m["ncclbench_health_finding"], component="gpu", host="node3")
    assert f.labels["confirmed"] == "true" and f.labels["detail"] == "gpu 2"
    measured = one(m["ncclbench_health_finding_measured_bytes_per_second"], host="node3").value
    expected = one(m["ncclbench_health_finding_expected_bytes_per_second"], host="node3").value
    assert measured / expected == pytest.approx(0.5, rel=0.02)
    assert one(m["ncclbench_health_exit_code"]).value == 8
    lone = one(m["ncclbench_health_group_busbw_bytes_per_second"], round="local r1", group="node3 gpu 2")
    assert lone.value == pytest.approx(1000e9, rel=0.01) and "status" not in lone.labels  # FakeFabric: 2000 x 0.5
    assert one(m["ncclbench_health_group_ok"], round="local r1", group="node3 gpu 2").value == 0
    assert one(m["ncclbench_health_group_ok"], round="local r1", group="node3 gpu 1").value == 1
    assert len([s for s in m["ncclbench_health_group_busbw_bytes_per_second"] if s.labels["round"] == "local r1"]) == 32


def test_health_metrics_slow_rail_and_link():
    doc = scan_doc(Fleet.uniform(8, 2), nic={(5, 1): 0.8}, link={frozenset({0, 1}): 0.7})
    m = parse(health_metrics(doc))
    nic = one(m["ncclbench_health_finding"], component="node nic", host="node5")
    assert nic.labels["detail"] == "rail 1" and nic.labels["confirmed"] == "true"
    link = one(m["ncclbench_health_finding"], component="link")
    assert {link.labels["host"], link.labels["peer"]} == {"node0", "node1"}
    assert one(m["ncclbench_health_host_drain"], host="node5").value == 1
    assert one(m["ncclbench_health_host_drain"], host="node0").value == 0  # a link drains nobody


def test_a_lone_host_without_fleet_or_baseline_has_no_healthy_gpu():
    doc = scan_doc(Fleet.uniform(1, 2))
    m = parse(health_metrics(doc))
    for s in m["ncclbench_health_gpu_verdict"]:
        assert s.labels["verdict"] == "not judged" and set(s.labels) == {"host", "gpu", "verdict"}
    assert "ncclbench_health_rail_verdict" not in m  # one host: no rail was measured, nothing said
    assert one(m["ncclbench_health_host_verdict"], host="node0").labels["verdict"] == "not judged"


# -- the command line ---------------------------------------------------------------------------------


@pytest.mark.mpi
def test_cpu_run_writes_metrics_and_csv(tmp_path, ncclbench_env):
    prom, table, js = tmp_path / "run.prom", tmp_path / "run.csv", tmp_path / "run.json"
    cmd = [sys.executable, "-m", "ncclbench", "all_reduce_perf", "-b", "8", "-e", "256K", "-f", "8",
           "--backend", "mpi", "--nprocs", "2", "--metrics", str(prom), "--csv", str(table), "-J", str(js)]
    p = subprocess.run(cmd, env=ncclbench_env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    m = parse(prom.read_text())
    assert one(m["ncclbench_run_info"]).labels["backend"] == "mpi"
    assert one(m["ncclbench_run_complete"]).value == 1
    doc = json.loads(js.read_text())
    got = list(csv.DictReader(table.read_text().splitlines()))
    assert [int(r["size_bytes"]) for r in got] == [r["size"] for r in doc["results"]]
    json_time = [r["out_of_place"]["time"] for r in doc["results"]]  # nccl-tests' JSON rounds to 1e-6 us
    assert [float(r["oop_time_us"]) for r in got] == pytest.approx(json_time, abs=1e-6)
    small = one(m["ncclbench_busbw_bytes_per_second"], placement="out_of_place", size_class="small")
    assert math.isfinite(small.value) and small.value > 0


def test_bad_metrics_path_fails_before_the_run(tmp_path, ncclbench_env):
    cmd = [sys.executable, "-m", "ncclbench", "all_reduce_perf", "-b", "8", "-e", "8", "--backend", "mpi",
           "--nprocs", "1", "--metrics", str(tmp_path / "no" / "such" / "dir.prom")]
    p = subprocess.run(cmd, env=ncclbench_env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 255 and "cannot write in" in p.stderr
    assert "size" not in p.stdout  # no table: nothing ran


def test_show_csv_of_an_imported_log(tmp_path, ncclbench_env):
    from output_helpers import FIXTURES

    from ncclbench.output.parse import parse_text

    log = FIXTURES / "all_reduce_2proc_f4.txt"
    env = dict(ncclbench_env, NCCLBENCH_DB=str(tmp_path / "r.sqlite"))
    env.pop("NCCLBENCH_NO_STORE", None)
    run = [sys.executable, "-m", "ncclbench"]
    assert subprocess.run(run + ["import", str(log)], env=env, capture_output=True, timeout=60).returncode == 0
    p = subprocess.run(run + ["show", "latest", "--csv"], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    got = list(csv.DictReader(p.stdout.splitlines()))
    _, rows = parse_text(log.read_text())
    assert [int(r["size_bytes"]) for r in got] == [r.size for r in rows]
    assert [float(r["ip_busbw_gbps"]) for r in got] == [r.in_place.busbw for r in rows]
    out = tmp_path / "t.csv"
    assert subprocess.run(run + ["show", "latest", "--csv", str(out)], env=env, timeout=60).returncode == 0
    assert out.read_text() == p.stdout


def test_show_writes_a_stored_runs_and_scans_metrics(tmp_path, ncclbench_env):
    """`show RUN --metrics` gives the file the run would have written (an imported log: no
    timestamp, its time is unknown); `show health:N --metrics --junit` a stored scan's."""
    from output_helpers import FIXTURES

    env = dict(ncclbench_env, NCCLBENCH_DB=str(tmp_path / "r.sqlite"))
    env.pop("NCCLBENCH_NO_STORE", None)
    ncb = [sys.executable, "-m", "ncclbench"]
    log = FIXTURES / "all_reduce_2proc_f4.txt"
    assert subprocess.run(ncb + ["import", str(log)], env=env, capture_output=True, timeout=60).returncode == 0
    prom = tmp_path / "run.prom"
    p = subprocess.run(ncb + ["show", "latest", "--metrics", str(prom)], env=env, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0 and "# Out of bounds values" in p.stdout, p.stderr
    m = parse(prom.read_text())
    assert "ncclbench_run_timestamp_seconds" not in m and one(m["ncclbench_run_complete"]).value == 1
    assert {s.labels["size_class"] for s in m["ncclbench_busbw_bytes_per_second"]} == {"small", "medium", "plateau"}
    p = subprocess.run(ncb + ["show", "latest", "--junit", str(tmp_path / "x.xml")], env=env, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 255 and "--junit is for health scans" in p.stderr
    doc = scan_doc(Fleet.uniform(4, 2), gpu={(1, 0): 0.5})
    doc["start_time"] = "2026-11-26T09:53:43+00:00"
    scan = tmp_path / "scan.json"
    scan.write_text(json.dumps(doc))
    hprom, hxml = tmp_path / "h.prom", tmp_path / "h.xml"
    p = subprocess.run(ncb + ["show", str(scan), "--metrics", str(hprom), "--junit", str(hxml)], env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    m = parse(hprom.read_text())
    assert one(m["ncclbench_health_timestamp_seconds"]).value == 1795686823.0
    assert one(m["ncclbench_health_host_verdict"], host="node1").labels["verdict"] == "faulty"
    assert 'classname="ncclbench.health.host" name="node1"' in hxml.read_text()


def test_host_verdicts_agree_with_the_scans_own_classification():
    """output/ sits below health/ and cannot import its statuses: this holds the two equal."""
    from ncclbench.health.core.scan import HOST_STATUSES, UNRESOLVED
    from ncclbench.output.metrics import HOST_STATUS_LABELS, host_verdict

    assert HOST_STATUS_LABELS == HOST_STATUSES
    for status in HOST_STATUSES:
        assert host_verdict(status) == ("not judged" if status in UNRESOLVED else status)
    assert {host_verdict(s) for s in HOST_STATUSES} == {"healthy", "faulty", "not judged"}
