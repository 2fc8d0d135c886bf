"""The exit statuses are documented where users look (README, `ncclbench -h`,
`<collective> -h`) and match what happens: 1 and 6 are listed, 128+N for
signals, and an unknown option exits 0 as nccl-tests' does (kept on purpose)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from launch_helpers import PY, child_env

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_lists_every_exit_code():
    text = " ".join(README.read_text().split())
    sentence = text[text.index("Exit codes are nccl-tests'"):]
    sentence = sentence[: sentence.index("pid.")]
    for code in ("0 ok", "1 internal", "2 CUDA", "3 NCCL", "4 timeout", "5 not supported", "6 invalid usage",
                 "7 wrong results", "8 `ncclbench health` confirmed a fault",
                 "9 not judged", "`ncclbench health` confirmed no fault but could not judge", "255 a bad option value", "128+N", "exit 0"):
        assert code in sentence, code


def _run(*args):
    return subprocess.run([PY, "-m", "ncclbench", *args], env=child_env(NCCLBENCH_NO_STORE="1"),
                          capture_output=True, text=True, timeout=60)


def test_unknown_option_exits_0_and_the_usage_says_so():
    r = _run("all_reduce_perf", "--bogus")
    assert r.returncode == 0
    usage = r.stdout
    assert "unrecognized option '--bogus'" in r.stdout + r.stderr
    block = usage[usage.index("exit status:"):]
    assert re.search(r"0 ok \(also after -h, an unknown option", block)
    assert "255 a bad option value" in block and "143 SIGTERM" in block and "6 invalid usage" in block


def test_bad_value_exits_255():
    assert _run("all_reduce_perf", "-d", "nosuchtype").returncode == 255


def test_top_level_help_lists_signals_and_the_unknown_option_rule():
    out = _run("--help").stdout
    assert "128+N ended by signal N" in out and "unknown option of a collective prints its usage and exits 0" in out
