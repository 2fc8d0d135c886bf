"""A health scan after the scan: kept in the result store (`history --health`), read back
(`show`, `report_from_json`), drawn as an HTML page (`report health:N`, checked in
headless Chromium like tests/test_report.py), exit code 8 documented where users look."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from browser_helpers import screenshot
from health_helpers import FakeFabric

from ncclbench.commands import main as command
from ncclbench.core.errors import ArgumentError, ExitCode
from ncclbench.health.core.fleet import Fleet
from ncclbench.health.core.scan import ScanConfig, report_from_json, run_scan
from ncclbench.health.outputs.scan_output import scan_document, verdict_table
from ncclbench.report.health_html import BAD, GOOD, build_health_page, ratio_color, write_health_page
from ncclbench.store.db import ResultStore
from ncclbench.store.health_scans import add_scan, is_scan_ref, list_scans, load_scan, resolve_scan, save_scan

ROOT = Path(__file__).resolve().parents[1]
META = {"backend": "simulated", "argv": ["health", "--json", "h.json"], "start_time": "2026-11-24T06:00:00+00:00"}


def faulty():
    """8 hosts x 4 GPUs: node1's GPU 3 at 60 %, node5's NIC of rail 2 at 70 %, the node2-node3 link at 80 %."""
    return run_scan(Fleet.uniform(8, 4), ScanConfig(),
                    FakeFabric(gpu={(1, 3): 0.6}, nic={(5, 2): 0.7}, link={frozenset({2, 3}): 0.8}))


def healthy():
    return run_scan(Fleet.uniform(8, 4), ScanConfig(), FakeFabric())


# -- the document and its round trip ------------------------------------------------------------

def test_document_is_plain_json_and_reads_back_to_the_same_table():
    rep = faulty()
    doc = scan_document(rep, META)
    assert json.loads(json.dumps(doc)) == doc  # plain data, nothing left for a default= hook
    assert doc["exit_code"] == 8 and doc["drain"] == ["node1", "node5"]
    back = report_from_json(doc)
    assert back.fleet.hosts == rep.fleet.hosts and back.fleet.ranks == rep.fleet.ranks
    assert verdict_table(back, doc) == verdict_table(rep, META)
    assert back.faults_found and back.drain == rep.drain == ["node1", "node5"]


# -- the store ----------------------------------------------------------------------------------------

def test_scans_are_kept_apart_from_runs_and_resolved_by_reference(tmp_path):
    db = tmp_path / "r.sqlite"
    first = save_scan(scan_document(healthy(), META), db)
    second = save_scan(scan_document(faulty(), META), db)
    assert (first, second) == (1, 2)
    with ResultStore(db, create=False) as store:
        heads = list_scans(store)
        assert [h.id for h in heads] == [2, 1]  # newest first
        h = heads[0]
        assert (h.nhosts, h.nranks, h.faults_found, h.exit_code, h.drain, h.findings) == \
            (8, 32, True, 8, ["node1", "node5"], 3)
        assert h.backend == "simulated" and h.argv == META["argv"] and h.wall_s is not None
        assert resolve_scan(store, "health:latest") == 2 and resolve_scan(store, "health:latest~1") == 1
        assert resolve_scan(store, "HEALTH:1") == 1
        for bad, says in (("health:3", "no health scan 3"), ("health:latest~2", "goes back too far"),
                          ("health:foo", "bad health scan reference"), ("health:latest~x", "use health:latest~N")):
            with pytest.raises(ArgumentError, match=says):
                resolve_scan(store, bad)
        assert store.list_runs() == []  # a scan is not a run: `compare latest~1 latest` never sees one
    assert load_scan("health:2", db).doc["drain"] == ["node1", "node5"]


def test_an_empty_store_and_a_store_without_scans_say_so(tmp_path):
    db = tmp_path / "r.sqlite"
    with pytest.raises(ArgumentError, match="no result store"):
        load_scan("health:latest", db)
    with ResultStore(db) as store:  # a store written by runs only: no health table
        assert list_scans(store) == []
        with pytest.raises(ArgumentError, match="no health scans"):
            resolve_scan(store, "health:latest")
        add_scan(store, scan_document(healthy(), META))
        assert [h.id for h in list_scans(store)] == [1]


def test_a_health_json_file_is_a_reference_and_other_json_is_not(tmp_path):
    js = tmp_path / "h.json"
    js.write_text(json.dumps(scan_document(faulty(), META)))
    other = tmp_path / "run.json"
    other.write_text(json.dumps({"rows": []}))
    assert is_scan_ref(str(js)) and is_scan_ref("health:1") and not is_scan_ref(str(other))
    assert not is_scan_ref("latest") and not is_scan_ref("3")
    assert load_scan(str(js)).label == "h.json"
    with pytest.raises(ArgumentError, match="not a health scan"):
        load_scan(str(other))


# -- the commands -------------------------------------------------------------------------------------

def test_history_show_and_report_of_a_stored_scan(tmp_path, capsys):
    db = str(tmp_path / "r.sqlite")
    rep = faulty()
    save_scan(scan_document(healthy(), META), db)
    save_scan(scan_document(rep, META), db)
    capsys.readouterr()
    assert command(["history", "--health", "--db", db]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:5] == ["ID", "DATE", "HOSTS", "RANKS", "FAULTS"]
    assert lines[1].split()[:8] == ["health:2", "2026-11-24", "06:00:00", "8", "32", "yes", "0", "3"]
    assert lines[1].endswith("simulated; drain node1, node5") and lines[2].split()[5] == "no"
    assert command(["history", "--health", "--format", "json", "--db", db]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [s["id"] for s in listed] == ["health:2", "health:1"] and listed[0]["exit_code"] == 8
    assert command(["history", "--db", db]) == 0  # the runs' list points at the scans
    assert "ncclbench history --health (newest health:2)" in capsys.readouterr().err

    assert command(["show", "health:latest", "--db", db]) == 0
    assert capsys.readouterr().out == verdict_table(rep, META)

    page = tmp_path / "h.html"
    assert command(["report", "health:2", "--db", db, "-o", str(page)]) == 0
    assert capsys.readouterr().out.strip() == f"wrote {page}"
    assert "node2 &lt;-&gt; node3" in page.read_text()

    assert command(["report", "health:2", "latest", "--db", db, "-o", str(page)]) == 255
    assert "a health scan gets a page of its own" in capsys.readouterr().err
    assert command(["show", "health:7", "--db", db]) == 255
    assert "no health scan 7" in capsys.readouterr().err


def test_health_json_file_shows_and_reports_without_a_store(tmp_path, capsys):
    js = tmp_path / "scan.json"
    rep = faulty()
    js.write_text(json.dumps(scan_document(rep, META)))
    assert command(["show", str(js)]) == 0
    assert capsys.readouterr().out == verdict_table(rep, META)
    assert command(["report", str(js), "-o", str(tmp_path / "p.html")]) == 0
    assert command(["report", str(js), "-o", str(tmp_path)]) == 255  # a directory: one clear line
    assert "is a directory" in capsys.readouterr().err


# -- the page's content ---------------------------------------------------------------------------------

def _cells(page: str) -> dict[str, str]:
    """tooltip -> fill of every drawn cell/bar with a tooltip."""
    return {m.group(2): m.group(1) for m in re.finditer(r'fill="(#[0-9a-f]{6})"[^>]*><title>([^<]*)</title>', page)}


def test_page_draws_the_faults_where_they_are():
    doc = scan_document(faulty(), META)
    page = build_health_page(doc, "health:2")
    for svg in re.findall(r"<svg .*?</svg>", page, flags=re.S):
        ET.fromstring(svg)  # every drawing is well-formed XML
    assert page.count('<tr class="faulty">') == 3
    cells = _cells(page)
    link = next(v for k, v in cells.items() if k.startswith("node2 &lt;-&gt; node3"))
    good_pair = next(v for k, v in cells.items() if k.startswith("node0 &lt;-&gt; node1"))
    assert good_pair == GOOD and link not in (GOOD, "#ffffff")
    assert int(link[1:3], 16) > int(link[3:5], 16)  # -20 %: more red than green
    nic = cells[next(k for k in cells if k.startswith("node5 rail 2:"))]
    assert nic == ratio_color(33.56 / 47.91) or nic.startswith("#d")  # -30 %: red
    assert cells[next(k for k in cells if k.startswith("node5 rail 0:"))] == GOOD
    # the pair node4-node5 is the median of its rails (green) but judged slow: outlined
    outlined = re.findall(r'stroke="%s" stroke-width="2"><title>([^<]*)</title>' % BAD, page)
    assert any(t.startswith("node4 &lt;-&gt; node5") for t in outlined), outlined
    assert not any(t.startswith("node0 &lt;-&gt; node1") for t in outlined)
    gpu_bar = next(v for k, v in cells.items() if k.startswith("node1:") and "GB/s" in k)
    assert gpu_bar == BAD  # node1's lone-GPU bar: a GPU of it was found slow
    assert "drain</td><td>node1, node5" in page


def test_healthy_page_has_no_alarm_colour():
    page = build_health_page(scan_document(healthy(), META), "health:1")
    assert "No finding" in page and 'class="faulty"' not in page
    drawn = re.sub(r'<svg [^>]*aria-label="legend".*?</svg>', "", page, flags=re.S)
    assert BAD not in drawn  # red only in the legend
    assert set(_cells(page).values()) <= {GOOD, "#1f77b4", "#9467bd"}  # green cells, the bars' own colours


def test_ratio_colour_scale():
    assert ratio_color(1.0) == ratio_color(1.3) == ratio_color(0.99) == GOOD
    assert ratio_color(0.75) == ratio_color(0.2) == "#d62728"
    assert ratio_color(None) == "#ffffff"
    reds = [int(ratio_color(r)[1:3], 16) - int(ratio_color(r)[3:5], 16) for r in (0.76, 0.85, 0.9, 0.95, 0.99)]
    assert reds == sorted(reds, reverse=True)  # redder the lower the share


# -- the page in a real browser ---------------------------------------------------------------------------

def _count(png: Path, colour: str, tol: int = 30) -> int:
    import numpy as np
    from PIL import Image

    ref = np.array([int(colour[i:i + 2], 16) for i in (1, 3, 5)])
    with Image.open(png) as im:
        px = np.asarray(im.convert("RGB")).reshape(-1, 3).astype(int)
    return int(np.all(np.abs(px - ref) <= tol, axis=1).sum())


def test_page_renders_in_headless_chromium(tmp_path):
    """The faulty scan's page shows green cells and the red of its slow GPU's bar and of the
    outlines of its slow groups; the healthy scan's page the green and only the legend's red,
    so the pixel check can fail."""
    bad_page = Path(write_health_page(scan_document(faulty(), META), "health:2", str(tmp_path / "bad.html")))
    good_page = Path(write_health_page(scan_document(healthy(), META), "health:1", str(tmp_path / "good.html")))
    bad, good = screenshot(bad_page, tmp_path, height=2400), screenshot(good_page, tmp_path, height=2400)
    assert _count(bad, GOOD) > 5000 and _count(good, GOOD) > 5000, (_count(bad, GOOD), _count(good, GOOD))
    assert _count(bad, BAD) > _count(good, BAD) + 1000, (_count(bad, BAD), _count(good, BAD))


# -- exit code 8 where users look ----------------------------------------------------------------------

def test_exit_code_8_is_documented():
    assert int(ExitCode.FAULTS_FOUND) == 8
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert "8 `ncclbench health` confirmed a fault" in readme
    assert "8 `health` found faults" in subprocess.run(
        [sys.executable, "-m", "ncclbench", "--help"], capture_output=True, text=True,
        timeout=60).stdout
    assert "**8** faults found" in (ROOT / "docs" / "health.md").read_text()


def test_a_scan_not_all_judged_is_stored_listed_and_drawn_as_such(tmp_path, capsys):
    """One host alone (nothing to judge its intra group against): the store keeps its outcome and
    counts, history lists the host as not judged, the page says so and why - never "healthy"."""
    db = str(tmp_path / "r.sqlite")
    rep = run_scan(Fleet.uniform(1, 4), ScanConfig(), FakeFabric())
    doc = scan_document(rep, META)
    assert doc["outcome"] == "not judged" and doc["exit_code"] == ExitCode.NOT_JUDGED == 9
    save_scan(doc, db)
    with ResultStore(Path(db), create=False) as store:
        [h] = list_scans(store)
    assert h.outcome == "not judged" and h.summary == {**h.summary, "healthy": 0, "not judged": 1} and h.exit_code == 9
    capsys.readouterr()
    assert command(["history", "--health", "--db", db]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "NOT JUDGED" in lines[0] and lines[1].split()[5:7] == ["no", "1"]
    page = build_health_page(doc, "health:1")
    assert "<h2>Not judged</h2>" in page and "no reference" in page and "<td>outcome</td><td>not judged</td>" in page
    assert "0 healthy, 0 faulty, 1 not judged" in page and "every host was judged healthy" not in page


def test_a_store_made_before_outcomes_gets_the_new_columns(tmp_path):
    """A health_scans table without outcome/summary (an older ncclbench): listing adds them; its
    scans read as outcome unknown (None), a new scan stores its own."""
    import sqlite3

    db = tmp_path / "r.sqlite"
    save_scan(scan_document(healthy(), META), db)
    with sqlite3.connect(db) as c:  # what the older table looked like
        c.execute("ALTER TABLE health_scans DROP COLUMN outcome")
        c.execute("ALTER TABLE health_scans DROP COLUMN summary")
    with ResultStore(db, create=False) as store:
        [old] = list_scans(store)
        assert old.outcome is None and old.summary is None
    save_scan(scan_document(healthy(), META), db)
    with ResultStore(db, create=False) as store:
        new, old = list_scans(store)
    assert new.outcome == "healthy" and new.summary and new.summary["healthy"] == 8 and old.outcome is None


def test_the_page_shows_thresholds_traps_and_each_groups_verdict_against_its_ceiling():
    from ncclbench.explain.traps import Trap
    from ncclbench.health.core.causes import HostCauses
    from ncclbench.health.core.physics import physics_reference

    ref = physics_reference("intra:1x4", 370.8, "NVLink", 4, 256 << 20, "Ring", "predicted")
    trap = Trap("p2p-disabled", "NCCL_P2P_DISABLE=1 on node0", "unset it", "error")
    causes = {"node0": HostCauses("node0", (trap,), frozenset({"p2p-disabled"}))}
    rep = run_scan(Fleet.uniform(1, 4), ScanConfig(physics={"intra:1x4": ref}, causes=causes),
                   FakeFabric(intra={0: 0.07}))
    meta = {**META, "expected": {"intra:1x4": {"ceiling": 370.8, "text": "370.8 GB/s (NVLink)", "group": "node0",
                                                "physics": ref.to_json()}},
            "causes": {h: c.to_json() for h, c in causes.items()}}
    page = build_health_page(scan_document(rep, meta), "health:1")
    assert "below 255.4 GB/s is slow" in page and "compare-2026-11-21-repeats-4gpu-busbw.json" in page
    assert "p2p-disabled (a setting of this job)" in page and "below the ceiling&#x27;s threshold" in page


def test_a_later_rounds_controls_do_not_overwrite_their_pairs_cell():
    """A control is the round's yardstick (run again beside a suspect, not judged): the matrix keeps
    the figure its pair was judged on."""
    from ncclbench.report.health_html import pair_cells

    doc = {"measurements": [
        {"round": "pairs r1", "purpose": "fleet", "groups": [
            {"hosts": ["a", "b"], "busbw": 40.0, "status": "ok", "rail": 0},
            {"hosts": ["c", "d"], "busbw": 20.0, "status": "slow", "rail": 0}]},
        {"round": "pairs r2", "purpose": "confirm", "groups": [
            {"hosts": ["c", "d"], "busbw": 21.0, "status": "slow", "rail": 0},
            {"hosts": ["a", "b"], "busbw": 10.0, "status": "control", "rail": 0}]}]}
    cells = pair_cells(doc)
    assert cells[("a", "b")] == {"busbw": 40.0, "status": "ok", "round": "pairs r1"}
    assert cells[("c", "d")]["round"] == "pairs r2" and cells[("c", "d")]["status"] == "slow"
