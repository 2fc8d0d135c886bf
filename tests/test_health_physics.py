"""Health against physics (issue 22 item 1): with no fleet, a group is judged against the ceiling of
its shape (explain's model) with a threshold at the scan's size whose source is recorded; the
traps name the cause; a figure above the model is not called healthy on the model's word."""

from __future__ import annotations

import dataclasses

import pytest
from explain_helpers import H100, facts
from health_helpers import FakeFabric

from ncclbench.health.core.causes import HostCauses, attach_causes, host_causes, nccl_settings
from ncclbench.health.core.expected_ceilings import representative_groups, shape_ceilings
from ncclbench.health.core.fleet import Fleet
from ncclbench.health.core.physics import MARGIN, physics_reference
from ncclbench.health.core.scan import ScanConfig, run_scan
from ncclbench.health.outputs.scan_output import exit_code, verdict_table
from ncclbench.health.runtime.coordinate import apply_facts
from ncclbench.simulation import hosts as S

MiB = 1 << 20
H100_MEMORY = (5120, 2619)


def nvlink4(bw_bytes=256 * MiB, ceiling=370.8):
    return physics_reference("intra:1x4", ceiling, "NVLink", 4, bw_bytes, "Ring", "predicted")


def test_threshold_at_the_scan_size_comes_from_a_recorded_healthy_fraction():
    """4 GPUs over NVLink at 256 MiB: healthy 4x H200 reached 340.58 of 370.8 GB/s (recorded), so below
    75 % of that is slow; the source file is named and it is not provisional."""
    ref = nvlink4()
    assert ref.fraction == pytest.approx(340.58 / 370.8) and ref.at_bytes == 256 * MiB
    assert ref.threshold == pytest.approx(MARGIN * 340.58)
    assert not ref.provisional and "compare-2026-11-21-repeats-4gpu-busbw.json" in ref.source
    assert "below 255.4 GB/s is slow" in ref.describe() and "at 256 MiB" in ref.describe()
    # a size between records takes the record below it (a lower threshold, never a higher one)
    assert nvlink4(300 * MiB).at_bytes == 256 * MiB and "judged by the 256 MiB record" in nvlink4(300 * MiB).source
    # below every record: not judged against the ceiling, and said why
    small = nvlink4(4 * MiB)
    assert small.threshold is None and "recorded from 64 MiB up" in small.why_not
    assert "not judged against the 370.8 GB/s ceiling" in small.describe()


def test_a_shape_without_a_record_of_its_own_is_provisional_and_says_from_which():
    eight = physics_reference("intra:1x8", 370.8, "NVLink", 8, 256 * MiB)
    assert eight.provisional and "recorded for 4 GPU(s), this group has 8" in eight.source
    pcie = physics_reference("intra:1x2", 48.0, "PCIe", 2, 256 * MiB)
    assert pcie.provisional and "no PCIe record" in pcie.source and pcie.threshold is not None
    nic = physics_reference("pairs:2x1", 50.0, "NIC", 2, 256 * MiB)
    assert nic.provisional and "not measured by health" in nic.source and "provisional: " in nic.describe()
    memory = physics_reference("local:1x1", 1676.16, "memory", 1, 256 * MiB)
    assert not memory.provisional and memory.threshold == pytest.approx(MARGIN * 1486.2 / 1676.0 * 1676.16)


def one_host(fabric, physics=None, causes=None, phases=("local", "intra")):
    cfg = ScanConfig(phases=phases, physics=physics, causes=causes)
    return run_scan(Fleet.uniform(1, 4), cfg, fabric)


def test_one_healthy_host_is_judged_healthy_against_its_ceiling():
    rep = one_host(FakeFabric(), {"intra:1x4": nvlink4()})  # 360 GB/s of 370.8: over the 255 threshold
    assert rep.host_status == {"node0": "healthy"} and exit_code(rep) == 0 and not rep.findings
    intra = [g for r in rep.measurements if r["round"] == "intra r1" for g in r["groups"]][0]
    assert intra["status"] == "ok" and intra["reference"] is None
    assert intra["ceiling"].startswith("within the ceiling: ") and "= 97 % of the 370.8 GB/s NVLink ceiling" in \
        intra["ceiling"] and "over the 255.4 GB/s threshold" in intra["ceiling"]


def test_p2p_off_on_one_host_is_convicted_against_the_ceiling_not_called_healthy():
    """Issue 22's reproduction: the intra phase at 7 % of its ceiling, no fleet: slow twice = confirmed,
    exit 8, the evidence says which ceiling and threshold."""
    rep = one_host(FakeFabric(intra={0: 25.6 / 360}), {"intra:1x4": nvlink4()})
    [f] = rep.confirmed
    assert (f.component, f.hosts, f.verdict) == ("node intra", ("node0",), "slow")
    assert exit_code(rep) == 8 and rep.drain == ["node0"]
    assert any("below the ceiling's threshold: " in e and "= 7 % of the 370.8 GB/s NVLink ceiling, under 255.4 GB/s"
               in e for e in f.evidence), f.evidence
    assert f.pct_expected is None or f.pct_expected < 10


def test_without_a_ceiling_the_same_host_is_not_judged():
    rep = one_host(FakeFabric(intra={0: 25.6 / 360}))
    assert rep.host_status == {"node0": "not judged"} and exit_code(rep) == 9
    assert any("no ceiling known for its shape" in w for w in rep.not_judged["node0"])


def test_a_gpu_busy_with_another_process_is_named_and_explains_its_slow_host():
    rep = one_host(FakeFabric(gpu={(0, 2): 151 / 340}), {"intra:1x4": nvlink4()})
    names = sorted((f.component, f.detail) for f in rep.confirmed)
    assert names == [("gpu", "gpu 2")], rep.findings  # the intra group's slowness is attached to the GPU
    assert any("also node intra" in e for e in rep.confirmed[0].evidence)


def test_above_the_model_is_not_judged_healthy_on_the_models_word():
    """360 GB/s on a shape whose ceiling says 300: above the model by 20 % - with no fleet, that group
    is not judged (the model missed something) and the reason is named."""
    ref = physics_reference("intra:1x4", 300.0, "NVLink", 4, 256 * MiB, "Ring", "predicted")
    rep = one_host(FakeFabric(), {"intra:1x4": ref})
    assert rep.host_status == {"node0": "not judged"} and exit_code(rep) == 9
    why = " ".join(rep.not_judged["node0"])
    assert "above the model: " in why and "= 120 % of the 300 GB/s NVLink ceiling, over 315 GB/s" in why
    assert "NVLink SHARP (NVLS)" in why


def test_trap_names_the_cause_and_a_setting_is_not_drained():
    from ncclbench.explain.traps import Trap

    trap = Trap("p2p-disabled", "NCCL_P2P_DISABLE=1 on node0: GPU0-GPU1 are joined by NVL", "unset it", "error")
    causes = {"node0": HostCauses("node0", (trap,), frozenset({"p2p-disabled"}))}
    rep = one_host(FakeFabric(intra={0: 0.07}), {"intra:1x4": nvlink4()}, causes)
    [f] = rep.confirmed
    assert f.cause == ["p2p-disabled"] and f.setting
    assert f.evidence[0].startswith("cause (setting of this job p2p-disabled, node0): NCCL_P2P_DISABLE=1")
    assert exit_code(rep) == 8 and rep.drain == []  # convicted, named, but the node is not drained
    text = verdict_table(rep)
    assert "cause (setting of this job p2p-disabled" in text
    # the same trap from the topology alone (not the settings) is the node's: drained
    causes = {"node0": HostCauses("node0", (trap,), frozenset())}
    rep = one_host(FakeFabric(intra={0: 0.07}), {"intra:1x4": nvlink4()}, causes)
    assert rep.drain == ["node0"] and not rep.confirmed[0].setting


def test_a_slow_lone_gpu_with_no_trap_says_none_explains_it():
    from ncclbench.health.core.findings import Finding

    f = Finding("gpu", ("node0",), "slow", "gpu 0")
    attach_causes([f], {"node0": HostCauses("node0", (), frozenset())})
    assert f.cause == [] and "no trap explains it" in f.evidence[-1] and "another process's work" in f.evidence[-1]


@pytest.fixture(scope="module")
def h100x4():
    spec = S.hgx_host("vm", *H100, ngpus=4)
    spec.gpus = [dataclasses.replace(g, memory=H100_MEMORY) for g in spec.gpus]
    return facts(spec)


def test_the_ranks_facts_give_ceilings_thresholds_and_traps(h100x4):
    """What the coordinator makes of the ranks' set-up answers on one 4-GPU host run with
    NCCL_P2P_DISABLE=1: the intra ceiling of NVLink (370.8), the lone GPU's from its memory (half of
    3352 GB/s), each with its threshold at 256 MiB; the P2P trap raised as a setting of this job."""
    fleet = Fleet(("vm",), ((0, 1, 2, 3),))
    answers = {r: {"backend": "nccl", "pci": g.pci_bus_id, "gpu": g.name, "device": r, "nccl": "2.28.9",
                   "env": {"NCCL_P2P_DISABLE": "1"}} for r, g in enumerate(h100x4.gpus)}
    answers[0]["topology"] = h100x4.to_dict()
    cfg, facts_ = apply_facts(fleet, ScanConfig(phases=("local", "intra")), answers, 256 * MiB)
    assert cfg.physics is not None and set(cfg.physics) == {"local:1x1", "intra:1x4"}
    intra, local = cfg.physics["intra:1x4"], cfg.physics["local:1x1"]
    assert (intra.bound, intra.ceiling) == ("NVLink", pytest.approx(370.8)) and intra.threshold is not None
    assert (local.bound, local.ceiling) == ("memory", pytest.approx(3352.32 / 2)) and local.threshold is not None
    assert facts_["expected"]["local:1x1"]["physics"]["threshold"] == pytest.approx(local.threshold)
    assert facts_["nccl_env"] == {"vm": {"NCCL_P2P_DISABLE": "1"}}
    traps = {t["name"]: t for t in facts_["causes"]["vm"]["traps"]}
    assert traps["p2p-disabled"]["setting"] is True and "NCCL_P2P_DISABLE=1" in traps["p2p-disabled"]["evidence"]
    assert cfg.causes is not None and "p2p-disabled" in cfg.causes["vm"].settings
    # the healthy ceiling ignores the degrading setting (the fault is judged against the hardware)
    groups = representative_groups(fleet, ("intra",), "rails")
    [c] = shape_ceilings(fleet, groups, {"vm": h100x4}, {r: a["pci"] for r, a in answers.items()}, "2.28.9",
                         {"NCCL_P2P_DISABLE": "1"})
    assert c.ceiling == pytest.approx(370.8)


def test_channels_capped_by_a_setting_is_named(h100x4):
    fleet = Fleet(("vm",), ((0, 1, 2, 3),))
    pcis = {r: g.pci_bus_id for r, g in enumerate(h100x4.gpus)}
    causes = host_causes(fleet, {"vm": h100x4}, pcis, {"vm": {"NCCL_MAX_NCHANNELS": "2"}})
    assert "channels-capped" in causes["vm"].settings
    assert not host_causes(fleet, {"vm": h100x4}, pcis, {"vm": {}})["vm"].settings


def test_nccl_settings_are_what_the_user_set_not_healths_own():
    assert nccl_settings({"NCCL_P2P_DISABLE": "1", "NCCL_RUNTIME_CONNECT": "0", "PATH": "/bin"}) == \
        {"NCCL_P2P_DISABLE": "1"}


def test_a_fleet_above_its_model_is_said_even_where_the_fleet_judges_it_fine():
    """Four hosts whose intra groups all measure 20 % over the ceiling: the fleet calls them fine (each
    host healthy), and a fleet finding says the shape is above the model, with the likely reason."""
    ref = physics_reference("intra:1x4", 300.0, "NVLink", 4, 256 * MiB, "Ring", "predicted")
    rep = run_scan(Fleet.uniform(4, 4), ScanConfig(phases=("local", "intra"), physics={"intra:1x4": ref}),
                   FakeFabric())
    assert set(rep.host_status.values()) == {"healthy"} and exit_code(rep) == 0
    [f] = [f for f in rep.findings if f.verdict == "above the model"]
    assert f.component == "fleet" and f.detail == "intra:1x4" and not f.confirmed
    assert "4 group(s) above the model's ceiling" in f.evidence[0] and "NVLink SHARP (NVLS)" in f.evidence[0]
