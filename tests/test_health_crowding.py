"""health.core.crowding: ranks that outnumber their machine's CPUs get latency measured, not judged."""

from ncclbench.health.core.crowding import crowded_machines, latency_note, machine_facts
from ncclbench.health.core.fleet import Fleet
from ncclbench.health.core.round_judge import thresholds_for
from ncclbench.health.core.scan import ScanConfig
from ncclbench.health.runtime.coordinate import apply_facts


def _answers(n, machine="m1", cpus=(0, 1)):
    return {r: {"backend": "mpi", "env": {}, "machine": machine, "cpus": list(cpus)} for r in range(n)}


def test_this_machine_reports_its_boot_id_and_cpus():
    facts = machine_facts()
    assert len(facts["machine"]) >= 16 and facts["cpus"] and all(isinstance(c, int) for c in facts["cpus"])


def test_a_machine_is_crowded_when_its_ranks_outnumber_the_union_of_their_cpus():
    assert crowded_machines(_answers(6)) == [(6, 2)]
    assert crowded_machines(_answers(2)) == []
    pinned = {r: {"machine": "m1", "cpus": [r]} for r in range(4)}  # one CPU each: not crowded
    assert crowded_machines(pinned) == []
    two = {**_answers(3, "a"), **{r + 3: a for r, a in _answers(2, "b").items()}}
    assert crowded_machines(two) == [(3, 2)]
    assert crowded_machines({0: {"backend": "mpi"}}) == []  # an older rank that says nothing: nothing assumed


def test_the_scan_stops_judging_latency_on_a_crowded_cpu_machine_and_says_why():
    fleet = Fleet.from_rank_hosts([f"h{r}" for r in range(6)])
    cfg = ScanConfig(thresholds=thresholds_for(False))
    out, facts = apply_facts(fleet, cfg, _answers(6))
    assert not out.thresholds.judge_latency and out.thresholds.bw_floor == cfg.thresholds.bw_floor
    # every threshold the verdicts used, with the floors' source, goes into the report
    assert "latency not judged" in facts["thresholds"] and "floored at 10% of the median" in facts["thresholds"]
    assert "health-cpu-noise-2026-11-26.md" in facts["thresholds"]
    assert out.notes == (latency_note([(6, 2)]),) and "6 ranks on 2 CPU(s)" in out.notes[0]
    roomy, _ = apply_facts(fleet, cfg, _answers(6, cpus=range(8)))
    assert roomy.thresholds.judge_latency and roomy.notes == ()
    gpu = {r: dict(a, backend="nccl") for r, a in _answers(6).items()}
    on_gpus = apply_facts(fleet, cfg, gpu)[0].thresholds
    assert on_gpus.judge_latency  # NCCL's GPU times are the GPUs'
    assert on_gpus.bw_floor == thresholds_for(True).bw_floor  # and the floors those of the ranks' backend
