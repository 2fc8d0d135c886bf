"""Capture of NCCL's log (explain.log_capture): who owns the settings, phase files, and -- on the real
libnccl of the test environment, no GPU needed -- that a phase switch writes a new file, keeps the old
one whole and changes which subsystems NCCL logs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from ncclbench.explain import log_capture as lc
from ncclbench.nccl.binding import NcclLibrary


def test_plan_takes_the_settings_only_when_the_user_set_no_nccl_debug(tmp_path):
    plan = lc.plan_capture({}, str(tmp_path), reset_available=True)
    assert plan.mode == "ncclbench" and plan.per_call_route == "reset" and plan.notes == ()
    assert plan.env == {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": lc.PHASE_SUBSYS["init"],
                        "NCCL_DEBUG_FILE": str(tmp_path / "nccl.%h.%p.00-init.log")}
    # TUNING (per-call lines) is on only at init and in the probe; never while timing
    assert "TUNING" not in lc.PHASE_SUBSYS["timed"] and "COLL" not in lc.PHASE_SUBSYS["timed"]
    old = lc.plan_capture({"NCCL_DEBUG_SUBSYS": "COLL"}, str(tmp_path), reset_available=False)
    assert old.per_call_route == "none" and old.env["NCCL_DEBUG_SUBSYS"] == lc.NO_RESET_SUBSYS
    assert "TUNING" not in old.env["NCCL_DEBUG_SUBSYS"]
    assert any("NCCL_DEBUG_SUBSYS=COLL has no effect" in n for n in old.notes)
    assert any("no ncclResetDebugInit" in n for n in old.notes)
    assert lc.plan_capture({}, str(tmp_path), False, profiler_available=True).per_call_route == "profiler"


@pytest.mark.parametrize("environ,mode", [
    ({"NCCL_DEBUG": "INFO", "NCCL_DEBUG_FILE": "/x/%h.%p"}, "user-file"),
    ({"NCCL_DEBUG": "info"}, "user-terminal"),
    ({"NCCL_DEBUG": "WARN", "NCCL_DEBUG_FILE": "/x/f"}, "user-no-info"),
])
def test_user_settings_are_left_alone_and_the_reason_is_kept(tmp_path, environ, mode):
    plan = lc.plan_capture(environ, str(tmp_path), reset_available=True)
    assert plan.mode == mode and plan.env == {} and not plan.ours and len(plan.notes) == 1
    phases = lc.LogPhases(FakeLib(), plan, environ={})
    assert not phases.active and phases.enter("probe") is False  # a reset would empty the user's file


def test_expand_debug_file_like_ncclDebugInit():
    assert lc.expand_debug_file("/l/%h.%p.log", "node7", 42) == "/l/node7.42.log"
    assert lc.expand_debug_file("a%%b%x%", "h", 1) == "a%b%x%"


class FakeLib:
    def __init__(self):
        self.resets = 0

    def ncclResetDebugInit(self):
        self.resets += 1


def test_phases_switch_file_and_mask_through_the_reset(tmp_path):
    plan = lc.plan_capture({}, str(tmp_path), reset_available=True)
    env = dict(plan.env)
    lib = FakeLib()
    phases = lc.LogPhases(lib, plan, environ=env)
    assert phases.enter("init") is False and lib.resets == 0  # already there
    assert phases.enter("timed") and env["NCCL_DEBUG_SUBSYS"] == lc.PHASE_SUBSYS["timed"]
    assert env["NCCL_DEBUG_FILE"].endswith("nccl.%h.%p.01-timed.log") and lib.resets == 1
    assert phases.enter("probe") and phases.enter("timed")
    assert env["NCCL_DEBUG_FILE"].endswith(".03-timed.log")  # a new name: reopening one would empty it
    with pytest.raises(ValueError):
        phases.enter("warmup")


def test_read_capture_merges_this_hosts_files_and_keeps_the_notes(tmp_path):
    line = "vm:{pid}:{pid} [0] NCCL INFO {msg}\n"
    (tmp_path / "nccl.vm.11.00-init.log").write_text(
        line.format(pid=11, msg="NCCL version 2.28.9+cuda13.0") + line.format(pid=11, msg="Using network IB"))
    (tmp_path / "nccl.vm.11.02-probe.log").write_text(
        line.format(pid=11, msg="AllReduce: 8 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..0}"))
    (tmp_path / "nccl.vm.12.00-init.log").write_text(line.format(pid=12, msg="Using network IB"))
    (tmp_path / "notes.txt").write_text("not a log")
    plan = lc.plan_capture({"NCCL_DEBUG_FILE": "/old"}, str(tmp_path), reset_available=True)
    facts = lc.read_capture(plan)
    assert facts.version == "2.28.9" and facts.net_plugin == "IB" and len(facts.per_call) == 1
    assert facts.sources == ["vm:11", "vm:12"] and facts.unknown[0].startswith("NCCL_DEBUG_FILE=/old has no effect")
    assert [p.name for p in lc.captured_files(plan, pids=[12])] == ["nccl.vm.12.00-init.log"]


def test_user_file_is_read_for_each_pid(tmp_path):
    (tmp_path / "log.n1.5").write_text("n1:5:5 [0] NCCL INFO Using network Socket\n")
    plan = lc.plan_capture({"NCCL_DEBUG": "INFO", "NCCL_DEBUG_FILE": str(tmp_path / "log.%h.%p")},
                           str(tmp_path / "unused"), reset_available=True)
    facts = lc.read_capture(plan, pids=[5, 6], host="n1")
    assert facts.net_plugin == "Socket" and facts.unknown[0].startswith("NCCL_DEBUG=INFO and NCCL_DEBUG_FILE")
    quiet = lc.read_capture(lc.plan_capture({"NCCL_DEBUG": "INFO"}, "/nowhere", True))
    assert quiet.unknown[0].startswith("NCCL_DEBUG=INFO set by you without NCCL_DEBUG_FILE")


def _libnccl_path():
    try:
        return NcclLibrary.load().path
    except Exception as e:  # noqa: BLE001 -- any reason means: no libnccl here
        pytest.skip(f"no libnccl: {e}")


REAL_SCRIPT = textwrap.dedent("""
    import ctypes, glob, json, os, sys, time
    from ncclbench.explain import log_capture as lc
    lib = ctypes.CDLL(sys.argv[1])
    d = sys.argv[2]
    plan = lc.plan_capture(os.environ, d, reset_available=hasattr(lib, "ncclResetDebugInit"))
    os.environ.update(plan.env)
    uid = ctypes.create_string_buffer(128)
    assert lib.ncclGetUniqueId(uid) == 0
    # Without a GPU, the calls that log on every use are the unique-id's host allocations (ALLOC; ALLOC_HOST
    # from 2.30):
    # the test's phases differ by that subsystem, standing in for TUNING.
    lc.PHASE_SUBSYS["probe"], lc.PHASE_SUBSYS["timed"] = "INIT,ENV,ALLOC,ALLOC_HOST", "INIT,ENV"
    phases = lc.LogPhases(lib, plan)
    out = {"route": plan.per_call_route}
    for phase in ("probe", "timed", "probe"):
        phases.enter(phase)
        lib.ncclGetUniqueId(uid)
        lib.ncclGetUniqueId(uid)
    time.sleep(0.2)
    out["files"] = {os.path.basename(p): open(p).read() for p in sorted(glob.glob(os.path.join(d, "*")))}
    print(json.dumps(out))
""")


def test_phase_switch_on_the_real_libnccl(tmp_path):
    path = _libnccl_path()
    env = {k: v for k, v in os.environ.items() if not k.startswith("NCCL_")}
    proc = subprocess.run([sys.executable, "-c", REAL_SCRIPT, path, str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.splitlines()[-1])
    if out["route"] != "reset":
        pytest.skip("this libnccl has no ncclResetDebugInit")
    files = out["files"]
    pid = next(iter(files)).split(".")[2]
    names = [f"nccl.{n.split('.')[1]}.{pid}.{s}.log" for n, s in zip(files, ["00-init", "01-probe", "02-timed",
                                                                              "03-probe"])]
    assert sorted(files) == names
    init, probe1, timed, probe2 = (files[n] for n in names)
    assert " NCCL INFO " in init and "Calloc" not in init  # the first phase's file survives the switches
    assert probe1.count("Calloc") >= 2 and probe2.count("Calloc") >= 2  # ALLOC lines while it is in the mask
    assert "Calloc" not in timed  # ... and none while it is not


def test_begin_applies_the_plan_only_when_ncclbench_owns_the_settings(tmp_path):
    plan = lc.plan_capture({}, str(tmp_path), reset_available=True)
    env, lib = {}, FakeLib()
    lc.LogPhases(lib, plan, environ=env).begin()
    assert env == plan.env and lib.resets == 1  # a libnccl that logged before reads the settings again
    user = lc.plan_capture({"NCCL_DEBUG": "INFO"}, str(tmp_path), reset_available=True)
    env2 = {"NCCL_DEBUG": "INFO"}
    lc.LogPhases(lib, user, environ=env2).begin()
    assert env2 == {"NCCL_DEBUG": "INFO"} and lib.resets == 1
