"""health/outputs/drain.py: the commands built for Slurm and Kubernetes, the dry run, and the
executor's handling of a failing or missing program.  Kubernetes is exercised with a
recording stand-in for kubectl (a script first on PATH that writes its argv down):
no cluster here.  The real Slurm path is tests/test_slurm.py."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import pytest
from health_helpers import FakeFabric

from ncclbench.health.core.findings import Finding
from ncclbench.health.core.fleet import Fleet
from ncclbench.health.core.scan import ScanConfig, run_scan
from ncclbench.health.outputs.drain import (
    MAX_REASON,
    TAINT_KEY,
    drain,
    execute,
    host_reasons,
    kubernetes_commands,
    resume_commands,
    slurm_commands,
)


def report(**faults):
    return run_scan(Fleet.uniform(8, 2), ScanConfig(), FakeFabric(**faults))


def test_reasons_name_each_hosts_confirmed_faults_only():
    rep = report(gpu={(3, 1): 0.5}, nic={(5, 0): 0.8}, link={frozenset({0, 1}): 0.7})
    assert rep.drain == ["node3", "node5"]  # a slow link drains neither of its hosts
    reasons = host_reasons(rep.findings, rep.drain, "health:7")
    assert reasons == {"node3": "ncclbench health: gpu 1 slow (health:7)",
                       "node5": "ncclbench health: node nic rail 0 slow (health:7)"}


def test_a_named_cause_travels_with_the_reason_and_a_setting_drains_nothing():
    findings = [Finding("node nic", ("node2",), "slow", detail="all rails", cause=["gdr_off"]),
                Finding("gpu", ("node2",), "slow", detail="gpu 0", cause=["p2p_disabled"], setting=True)]
    assert host_reasons(findings, ["node2"]) == {"node2": "ncclbench health: node nic all rails slow (gdr_off)"}


def test_long_reasons_are_cut_to_one_short_line():
    findings = [Finding("gpu", ("node3",), "slow", detail=f"gpu {i}") for i in range(16)]
    reason = host_reasons(findings, ["node3"], "health:123")["node3"]
    assert len(reason) == MAX_REASON and reason.endswith("... (health:123)") and "gpu 0 slow; gpu 1 slow" in reason


def test_slurm_and_kubernetes_commands():
    reasons = {"gpu-a1": "ncclbench health: gpu 3 slow"}
    assert slurm_commands(reasons) == [["scontrol", "update", "NodeName=gpu-a1", "State=DRAIN",
                                        "Reason=ncclbench health: gpu 3 slow"]]
    k = kubernetes_commands(reasons)
    assert k[0] == ["kubectl", "taint", "nodes", "gpu-a1", f"{TAINT_KEY}=true:NoSchedule", "--overwrite"]
    assert k[1] == ["kubectl", "label", "nodes", "gpu-a1", f"{TAINT_KEY}=true", "--overwrite"]
    assert k[2][:4] == ["kubectl", "annotate", "nodes", "gpu-a1"] and k[2][4].endswith("=ncclbench health: gpu 3 slow")
    assert resume_commands("slurm", ["gpu-a1"]) == [["scontrol", "update", "NodeName=gpu-a1", "State=RESUME"]]
    undo = resume_commands("kubernetes", ["gpu-a1"])
    assert undo[0] == ["kubectl", "taint", "nodes", "gpu-a1", f"{TAINT_KEY}:NoSchedule-"]


def test_dry_run_prints_shell_lines_and_runs_nothing(tmp_path):
    out, err = io.StringIO(), io.StringIO()
    marker = tmp_path / "ran"
    res = execute([["touch", str(marker)]], True, out, err)
    assert out.getvalue() == f"touch {marker}\n" and not marker.exists() and res[0].returncode is None


def test_no_host_to_drain_runs_nothing():
    out, err = io.StringIO(), io.StringIO()
    assert drain("slurm", [], [], False, out, err) == [] and "no host to drain" in err.getvalue()


def test_a_failing_or_missing_program_is_one_line_and_the_rest_still_run(tmp_path):
    out, err = io.StringIO(), io.StringIO()
    marker = tmp_path / "ran"
    res = execute([["sh", "-c", "echo 'slurm_update error: Invalid node name' >&2; exit 1"],
                   ["no-such-program-ncclbench"], ["touch", str(marker)]], False, out, err)
    assert [r.returncode for r in res] == [1, None, 0] and marker.exists()
    lines = err.getvalue().splitlines()
    assert "failed (exit 1): slurm_update error: Invalid node name" in lines[0]
    assert "no-such-program-ncclbench not found on PATH" in lines[1]


STAND_IN = """#!/bin/sh
printf '%s\\n' "$(python3 -c 'import json,sys; print(json.dumps(sys.argv[1:]))' "$@")" >> "$RECORD"
exit ${STAND_IN_RC:-0}
"""


@pytest.mark.mpi
def test_health_taints_and_labels_through_a_recording_kubectl(tmp_path, ncclbench_env):
    """`health --drain-action kubernetes` on a real CPU scan whose host fails an impossible
    baseline: the kubectl stand-in records exactly the commands kubernetes_commands builds."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    kubectl = bin_dir / "kubectl"
    kubectl.write_text(STAND_IN)
    kubectl.chmod(0o755)
    record = tmp_path / "argv.jsonl"
    base = tmp_path / "base.json"
    base.write_text('{"name": "impossible", "busbw": {"local:1x1": [1000, 10]}, "lat_us": {}}')
    env = dict(ncclbench_env, PATH=f"{bin_dir}{os.pathsep}{ncclbench_env['PATH']}", RECORD=str(record),
               NCCLBENCH_HEALTH_HOST_MAP="gpu-node-7,gpu-node-7")
    cmd = [sys.executable, "-m", "ncclbench", "health", "--nprocs", "2", "--backend", "mpi", "--phases", "local",
           "--bw-size", "64K", "-n", "5", "--cycles", "1", "--baseline", str(base), "--no-store",
           "--drain-action", "kubernetes"]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 8, p.stdout + p.stderr
    got = [json.loads(line) for line in record.read_text().splitlines()]
    reason = "ncclbench health: rank 0 slow; rank 1 slow"  # CPU ranks are named as ranks (issue 32)
    assert got == [argv[1:] for argv in kubernetes_commands({"gpu-node-7": reason})]
    assert p.stderr.count("# health: drained: kubectl") == 3
