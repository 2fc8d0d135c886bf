"""The plateau of a sweep, the verdict against the ceiling, and the summary line after
`# Avg bus bandwidth`."""

import pytest
from explain_helpers import H100, H200, facts

from ncclbench.explain.ceiling import Ceiling, expected_ceiling
from ncclbench.explain.plateau_verdict import Plateau, Verdict, judge, plateau_busbw, summary_line
from ncclbench.simulation import hosts as S

MiB, GiB = 2**20, 2**30


def sweep(top_busbw, top=8 * GiB):
    """A ramp that flattens at the top: 8 B .. top, x2."""
    rows, s = [], 8
    while s <= top:
        rows.append((s, top_busbw * min(1.0, s / (256 * MiB))))
        s *= 2
    return rows


def test_plateau_is_the_median_of_the_top_factor_of_four():
    p = plateau_busbw(sweep(360.0))
    assert (p.busbw, p.min_size, p.max_size, p.points) == (360.0, 4 * GiB, 8 * GiB, 2)
    p = plateau_busbw([(1 * GiB, 300.0), (2 * GiB, 350.0), (4 * GiB, 361.0), (8 * GiB, 365.0), (8, 0.0)])
    assert (p.busbw, p.min_size, p.points) == (363.0, 4 * GiB, 2)
    p = plateau_busbw([(512 * MiB, 100.0), (1 * GiB, 200.0), (2 * GiB, 300.0)])
    assert p.busbw == 250.0 and p.points == 2  # 1 GiB x 4 > 2 GiB: in; 512 MiB x 4 = 2 GiB: out


def test_small_sweeps_are_not_judged():
    p = plateau_busbw(sweep(80.0, top=16 * MiB))
    assert p.busbw is not None and "latency-bound" in p.reason
    c = Ceiling("all_reduce", 8, 1, algorithm="Ring", algorithm_source="predicted", bound="NVLink", line_rate=450.0,
                ceiling=370.8)
    v = judge(p, c)
    assert v.label == "unknown" and "16 MiB" in v.text
    assert judge(plateau_busbw([]), c).label == "unknown"


@pytest.fixture(scope="module")
def h200x4():
    t = facts(S.hgx_host("h", *H200))
    return t.only([g.pci_bus_id for g in t.gpus[:4]])


def test_our_baseline_is_as_expected(h200x4):
    """baseline-h200.md: 4x H200, all_reduce 365.2 GB/s at 8 GiB, NVLS off."""
    c = expected_ceiling([h200x4], "all_reduce", 4, env={"NCCL_NVLS_ENABLE": "0"})
    p = plateau_busbw([(2 * GiB, 359.7), (8 * GiB, 365.2), (4 * GiB, 362.0)])
    v = judge(p, c)
    assert v.label == "as expected" and v.fraction == pytest.approx(363.6 / 370.8)
    line = summary_line(p, c, v)
    assert line == ("# Plateau bus bandwidth: 363.6 GB/s at 4 GiB-8 GiB; ceiling 370.8 GB/s (NVLink, Ring "
                    "predicted): as expected (98% of the 370.8 GB/s ceiling)")


def test_below_expected(h200x4):
    c = expected_ceiling([h200x4], "all_reduce", 4, env={"NCCL_NVLS_ENABLE": "0"})
    v = judge(Plateau(250.0, 4 * GiB, 8 * GiB, 2), c)
    assert v.label == "below expected" and v.text.startswith("67% of the 370.8 GB/s ceiling")
    assert v.fraction == pytest.approx(250 / 370.8)
    # the boundary: 90 % is as expected, just under is not
    assert judge(Plateau(0.9 * 370.8, 4 * GiB, 8 * GiB, 2), c).label == "as expected"
    assert judge(Plateau(0.899 * 370.8, 4 * GiB, 8 * GiB, 2), c).label == "below expected"


def test_above_the_line_rate_said_plainly():
    h100 = facts(S.hgx_host("n", *H100))
    c = expected_ceiling([h100], "all_reduce", 8, algorithm="NVLS")  # NCCL said so
    v = judge(Plateau(478.0, 4 * GiB, 8 * GiB, 2), c)
    assert v.label == "above the line rate"
    assert "above the 450 GB/s NVLink line rate because NCCL used NVLink SHARP (NVLS)" in v.text
    assert "no wire speed" in v.text
    predicted = expected_ceiling([h100], "all_reduce", 8)
    v = judge(Plateau(478.0, 4 * GiB, 8 * GiB, 2), predicted)
    assert v.label == "above the line rate" and "predicted, not confirmed" in v.text
    ring = expected_ceiling([h100], "all_reduce", 8, algorithm="Ring")
    v = judge(Plateau(478.0, 4 * GiB, 8 * GiB, 2), ring)
    assert v.label == "unknown" and "topology facts or the algorithm are wrong" in v.text


def test_nvls_below_with_short_sweep_says_so():
    h100 = facts(S.hgx_host("n", *H100))
    c = expected_ceiling([h100], "all_reduce", 8)
    v = judge(Plateau(380.0, 128 * MiB, 256 * MiB, 2), c)
    assert v.label == "below expected" and "may be short of NVLS's plateau" in v.text


def test_unknown_ceiling_is_an_unknown_verdict():
    c = Ceiling("gather", 8, 1, unknown="no bandwidth model for gather")
    v = judge(Plateau(100.0, 4 * GiB, 8 * GiB, 2), c)
    assert (v.label, v.fraction) == ("unknown", None) and "no bandwidth model for gather" in v.text
    assert summary_line(Plateau(100.0, 8 * GiB, 8 * GiB, 1), c, v) == (
        "# Plateau bus bandwidth: 100 GB/s at 8 GiB; ceiling unknown (no bandwidth model for gather): not judged")
    latency = Plateau(0.5, 1 * MiB, 1 * MiB, 1, reason="the largest size, 1 MiB, is latency-bound")
    assert summary_line(latency, c, judge(latency, c)).endswith(
        "ceiling unknown (no bandwidth model for gather): not judged (the largest size, 1 MiB, is latency-bound)")


def test_verdict_round_trip():
    v = Verdict("as expected", 0.98, "98% of the 370.8 GB/s ceiling")
    assert Verdict.from_dict(v.to_dict()) == v


def test_above_the_nic_line_rate_with_a_predicted_ring_names_a_tree():
    from explain_helpers import A100
    a100 = facts(S.hgx_host("a", *A100, nvlinks=12, gpu_pcie=(4, 4, 16, 16), nic_gbps=200))
    c = expected_ceiling([a100, a100], "all_reduce", 16)
    assert (c.algorithm, c.bound, c.line_rate) == ("Ring", "NIC", 200.0)
    v = judge(Plateau(215.0, 4 * GiB, 8 * GiB, 2), c)
    assert v.label == "above the line rate" and "did not use the predicted Ring" in v.text


def _flat(busbw):
    return plateau_busbw([(1 * GiB, busbw), (2 * GiB, busbw), (4 * GiB, busbw)])


def test_above_the_model_is_its_own_band_never_as_expected():
    """117 % of the ceiling and under the line rate (issue 22): "above the model" with the likely
    reason, not "as expected"; within the 5 % tolerance it stays "as expected"."""
    from ncclbench.explain.plateau_verdict import ABOVE_MODEL_TOLERANCE

    c = Ceiling("all_reduce", 4, 1, algorithm="Ring", algorithm_source="predicted", bound="NVLink",
                line_rate=450.0, ceiling=370.8)
    v = judge(_flat(0.17 * 370.8 + 370.8), c)
    assert v.label == "above the model" and v.fraction == pytest.approx(1.17)
    assert "117% of the 370.8 GB/s ceiling" in v.text and "NVLink SHARP (NVLS)" in v.text
    assert "topology facts are wrong" in v.text
    edge = 370.8 * (1 + ABOVE_MODEL_TOLERANCE)
    assert judge(_flat(edge * 0.999), c).label == "as expected"
    assert judge(_flat(edge * 1.001), c).label == "above the model"
    line = summary_line(_flat(434.0), c, judge(_flat(434.0), c))
    assert ": above the model (" in line


def test_above_the_model_names_the_switch_reduction_the_algorithm_implies():
    """A confirmed NVLS (from NCCL's log) under the line rate but over the model: NCCL's NVLS;
    several nodes bound by the NICs with a predicted ring: a tree or SHARP in the network."""
    c = Ceiling("all_reduce", 8, 1, algorithm="NVLS", algorithm_source="NCCL log", bound="NVLink", line_rate=450.0,
                ceiling=400.0)
    v = judge(_flat(440.0), c)
    assert v.label == "above the model" and "NCCL used NVLink SHARP (NVLS)" in v.text
    c = Ceiling("all_reduce", 16, 2, algorithm="Ring", algorithm_source="predicted", bound="NIC", line_rate=400.0,
                ceiling=340.0)
    v = judge(_flat(380.0), c)
    assert v.label == "above the model" and "SHARP in the network switches (CollNet)" in v.text
