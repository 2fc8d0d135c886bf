"""The HTML report (checked in headless Chromium), PNG export, the progress bar."""

from __future__ import annotations

import builtins
import io
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from browser_helpers import screenshot

from ncclbench.commands import main as run_store_command
from ncclbench.core.config import BenchOptions
from ncclbench.core.errors import UnsupportedError
from ncclbench.report import plots
from ncclbench.report.html import build_report, write_report
from ncclbench.report.progress import ProgressReporter
from ncclbench.store.importers import load_file

FIX = Path(__file__).parent / "fixtures" / "nccl_tests_output"
RUNS = [FIX / "all_reduce_4proc_per_iter.json", FIX / "all_reduce_1proc_4gpu.txt",
        FIX / "all_reduce_2proc_f4.txt"]
BLUE, ORANGE = (0x1F, 0x77, 0xB4), (0xFF, 0x7F, 0x0E)  # first two plot colours


def _runs():
    return [load_file(p)[0] for p in RUNS]


def test_report_is_self_contained_and_complete(tmp_path):
    out = tmp_path / "r.html"
    assert write_report(_runs(), out) == [out]
    text = out.read_text()
    assert text.startswith("<!DOCTYPE html>") and text.rstrip().endswith("</html>")
    assert plots.external_references(text) == []
    assert "<script" not in text and "<link" not in text and "<img" not in text
    # busbw, time, per-iteration CV and per-process spread (the JSON run has -I with 4 processes)
    for name in ("busbw", "time", "cv", "procspread"):
        assert f'id="plot-{name}"' in text
    assert text.count("<svg") == 4
    # metadata of every run
    for label in ("all_reduce_4proc_per_iter.json", "all_reduce_1proc_4gpu.txt",
                  "all_reduce_2proc_f4.txt"):
        assert f'id="{label}"' in text
    assert "./build/all_reduce_perf -b 8 -e 64M" in text  # the JSON's command line
    assert "NCCL_NVLS_ENABLE" in text and "OMPI_ALLOW_RUN_AS_ROOT" not in text
    assert "NVIDIA H200" in text and "0000:00:06" in text
    assert "plateau busbw = median busbw of the sizes within a factor of 4 of the largest" in text
    assert out.stat().st_mode & 0o044  # readable by others, like any file the user writes


def test_plot_specs_have_bands_only_where_recorded():
    specs = {s.name: s for s in plots.build_specs(_runs())}
    busbw = specs["busbw"]
    assert [ln.label for ln in busbw.lines] == ["all_reduce_4proc_per_iter.json",
                                                "all_reduce_1proc_4gpu.txt", "all_reduce_2proc_f4.txt"]
    assert busbw.lines[0].lo is not None and busbw.lines[1].lo is None
    t, b = specs["time"].lines[0], busbw.lines[0]
    # The time band is the recorded per-iteration min..max of each size ...
    recorded = [r.out_of_place.per_iter for r in _runs()[0].rows if r.size > 0]
    assert t.lo == [s.min_us for s in recorded] and t.hi == [s.max_us for s in recorded]
    # ... and holds the per-op time; the busbw band (busbw scaled by the time ratios) holds busbw.
    assert all(lo < hi and lo <= y <= hi for lo, y, hi in zip(t.lo, t.y, t.hi)), (t.lo, t.y, t.hi)
    assert all(lo <= y <= hi for lo, y, hi in zip(b.lo, b.y, b.hi)), (b.lo, b.y, b.hi)
    assert [ln.label for ln in specs["procspread"].lines] == ["all_reduce_4proc_per_iter.json"]
    assert all(v >= 0 for v in specs["procspread"].lines[0].y)


def test_fallback_svg_is_valid_and_has_every_line():
    for spec in plots.build_specs(_runs()):
        svg = plots.svg_plot(spec)
        root = ET.fromstring(svg)
        ns = "{http://www.w3.org/2000/svg}"
        polylines = root.findall(f"{ns}polyline")
        assert len(polylines) == len(spec.lines)
        assert {p.get("stroke") for p in polylines} == {ln.color for ln in spec.lines}
        assert root.findall(f"{ns}polygon") or not any(ln.lo for ln in spec.lines)
        assert plots.external_references(svg) == []


def test_size_ticks_and_labels():
    assert plots.size_label(8) == "8 B" and plots.size_label(1 << 20) == "1 MiB"
    assert plots.size_label(1 << 33) == "8 GiB" and plots.size_label(32768) == "32 KiB"
    ticks = plots.size_ticks(8, 1 << 33)
    assert 3 <= len(ticks) <= 11 and all(8 <= t <= 1 << 33 for t in ticks)
    assert plots.size_ticks(1024, 4096) == [1024, 2048, 4096]


def test_axis_labels_and_compare_sizes_share_one_formatter():
    from ncclbench.output.numfmt import human_size
    assert plots.size_label(1000) == human_size(1024) == "1 KiB"  # nearest power of two
    assert plots.size_label(1 << 42) == human_size(1 << 42) == "4 TiB"
    assert human_size(1536) == "1.5 KiB" and human_size(100) == "100 B"


def test_png_export(tmp_path, capsys):
    db = str(tmp_path / "r.sqlite")
    assert run_store_command(["import", "--db", db] + [str(p) for p in RUNS]) == 0
    capsys.readouterr()
    out = tmp_path / "rep.html"
    assert run_store_command(["report", "1", "2", "3", "-o", str(out), "--png", "--db", db]) == 0
    printed = capsys.readouterr().out.split()
    pngs = sorted(tmp_path.glob("rep-*.png"))
    assert [p.name for p in pngs] == ["rep-busbw.png", "rep-cv.png", "rep-procspread.png",
                                      "rep-time.png"]
    for p in pngs:
        assert str(p) in printed
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        from PIL import Image
        with Image.open(p) as im:
            assert im.size[0] > 600 and im.size[1] > 300
            colors = im.convert("RGB").getcolors(1 << 20)
            assert len(colors) > 50  # a drawn plot, not a blank canvas


def _hide_matplotlib(monkeypatch):
    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError("No module named 'matplotlib'")
        return real_import(name, *args, **kwargs)
    monkeypatch.setattr(builtins, "__import__", fake_import)


def test_report_without_matplotlib(tmp_path, monkeypatch, capsys):
    _hide_matplotlib(monkeypatch)
    assert not plots.have_matplotlib()
    text = build_report(_runs())
    assert "built-in SVG (matplotlib not installed)" in text and text.count("<svg") == 4
    with pytest.raises(UnsupportedError, match="matplotlib"):
        write_report(_runs(), tmp_path / "r.html", png=True)
    assert not (tmp_path / "r.html").exists()  # nothing half-written
    assert run_store_command(["report", str(RUNS[1]), "-o", str(tmp_path / "x.html"), "--png"]) == 5


def test_report_bad_output_paths(tmp_path, capsys):
    assert run_store_command(["report", str(RUNS[1]), "-o", str(tmp_path)]) == 255
    assert "is a directory" in capsys.readouterr().err
    assert run_store_command(["report", str(RUNS[1]), "-o", str(tmp_path / "no" / "r.html")]) == 255
    assert "does not exist" in capsys.readouterr().err


# ---------------------------------------------------------------- headless Chromium

def _pixel_stats(png: Path) -> tuple[float, int, int]:
    import numpy as np
    from PIL import Image

    with Image.open(png) as im:
        px = np.asarray(im.convert("RGB")).reshape(-1, 3).astype(int)

    def near(ref, tol=40):
        return int(np.all(np.abs(px - np.array(ref)) <= tol, axis=1).sum())
    nonwhite = float((px.min(axis=1) < 235).mean())
    return nonwhite, near(BLUE), near(ORANGE)


@pytest.mark.parametrize("use_mpl", [True, False], ids=["matplotlib", "builtin-svg"])
def test_report_renders_in_headless_chromium(tmp_path, use_mpl):
    html_path = tmp_path / "report.html"
    write_report(_runs(), html_path, use_matplotlib=use_mpl)
    nonwhite, blue, orange = _pixel_stats(screenshot(html_path, tmp_path))
    assert nonwhite > 0.02, f"page looks blank ({nonwhite:.2%} non-white)"
    assert blue > 300 and orange > 300, f"plot lines missing (blue {blue}, orange {orange} px)"


def test_blank_page_fails_the_pixel_check(tmp_path):
    """The check above can fail: a page without plots has no plot-coloured pixels."""
    page = tmp_path / "blank.html"
    page.write_text("<!DOCTYPE html><html><body><h1>ncclbench report</h1>"
                    "<p>no plots here</p></body></html>")
    nonwhite, blue, orange = _pixel_stats(screenshot(page, tmp_path))
    assert nonwhite < 0.02 and blue < 300 and orange < 300


# ---------------------------------------------------------------- progress bar

def _row(size):
    from ncclbench.core.results import HalfResult, ResultRow
    h = HalfResult(1.0, 1.0, 1.0, 1.0, 0)
    return ResultRow(size, size // 4, "float", "sum", -1, h, h)


def test_progress_bar_only_on_a_terminal():
    from ncclbench.core.results import RunInfo, RunSummary
    info = RunInfo("all_reduce_perf", [], "nccl", "0", None, None, "", nranks=2)
    opts = BenchOptions(min_bytes=8, max_bytes=64, step_factor=2)

    quiet = io.StringIO()  # not a TTY: nothing at all
    p = ProgressReporter(4, quiet)
    p.begin(info, opts)
    for s in (8, 16, 32, 64):
        p.row(_row(s))
    p.end(RunSummary(0, 1.0, None, None))
    p.close()
    assert quiet.getvalue() == "" and not p.enabled

    tty = io.StringIO()
    p = ProgressReporter(4, tty, force=True)
    p.begin(info, opts)
    for s in (8, 16, 32, 64):
        p.row(_row(s))
    p._progress.refresh()
    shown = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", tty.getvalue())
    assert "all_reduce_perf" in shown and "4/4" in shown and "64 B" in shown
    p.close()
    p.close()  # idempotent
