"""What a host's slot is, decided once (`Fleet.unit`) and read by its number (`Finding.slot`).

On the CPU backend a rank drives no GPU, so health labels it a rank ("node3 rank 2"); the
GPU backend keeps "gpu 2".  Every reader downstream - the per-GPU metric, JUnit's failure
line, the drain reason, a stored scan read back - keys on the finding's slot number, never
on its label's text: a CPU fault read through "gpu N" text came out "not judged" (issue 32).
"""

from __future__ import annotations

import dataclasses

import pytest
from health_helpers import FakeFabric

from ncclbench.health.core.findings import GPU, NODE_INTRA, finding_slot
from ncclbench.health.core.fleet import Fleet
from ncclbench.health.core.scan import ScanConfig, report_from_json, run_scan
from ncclbench.health.outputs.drain import host_reasons
from ncclbench.health.outputs.scan_output import scan_document
from ncclbench.output.junit import health_cases
from ncclbench.output.metrics import component_verdicts

CPU_FLEET = dataclasses.replace(Fleet.uniform(8, 4), unit="rank")


def _confirmed(rep):
    return [(f.component, f.hosts, f.detail, f.slot) for f in rep.findings if f.confirmed]


def test_a_cpu_rank_is_labelled_a_rank_and_keeps_its_slot_number():
    rep = run_scan(CPU_FLEET, ScanConfig(), FakeFabric(gpu={(3, 2): 0.5}))
    assert _confirmed(rep) == [(GPU, ("node3",), "rank 2", 2)]
    local = [g["group"] for m in rep.measurements if m["round"] == "local r1" for g in m["groups"]]
    assert "node3 rank 2" in local and not any(" gpu " in g for g in local), local


def test_gpu_labels_stay_gpu():
    rep = run_scan(Fleet.uniform(8, 4), ScanConfig(), FakeFabric(gpu={(3, 2): 0.5}))
    assert _confirmed(rep) == [(GPU, ("node3",), "gpu 2", 2)]


def test_a_slow_intra_group_of_cpu_ranks_counts_ranks():
    rep = run_scan(CPU_FLEET, ScanConfig(), FakeFabric(intra={2: 0.5}))
    assert [(f.component, f.detail) for f in rep.findings if f.confirmed] == [(NODE_INTRA, "4 ranks")]


def test_readers_key_on_the_slot_not_the_label():
    doc = scan_document(run_scan(CPU_FLEET, ScanConfig(), FakeFabric(gpu={(3, 2): 0.5})), {"backend": "mpi"})
    gpus, _ = component_verdicts(doc)
    assert gpus[("node3", 2)][0] == "faulty"  # was "not judged": "rank 2" is no "gpu N" text
    assert gpus[("node3", 1)][0] == "healthy"
    [host] = [c for c in health_cases(doc) if c.classname == "ncclbench.health.host" and c.name == "node3"]
    assert host.failure.startswith("faulty: rank 2 slow"), host.failure  # not "gpu rank 2 slow"
    rep = report_from_json(doc)
    assert rep.fleet.unit == "rank" and host_reasons(rep.findings, rep.drain) == {
        "node3": "ncclbench health: rank 2 slow"}


def test_a_scan_stored_before_the_slot_field_keeps_its_gpu_verdicts():
    doc = scan_document(run_scan(Fleet.uniform(8, 4), ScanConfig(), FakeFabric(gpu={(3, 2): 0.5})), {})
    for f in doc["findings"]:
        del f["slot"]
    doc.pop("slot_unit")
    assert component_verdicts(doc)[0][("node3", 2)][0] == "faulty"
    assert report_from_json(doc).fleet.unit == "gpu"


@pytest.mark.parametrize("finding, slot", [
    ({"component": "gpu", "detail": "rank 4", "slot": 4}, 4),
    ({"component": "gpu", "detail": "gpu 4"}, 4),  # written before the field: "gpu N" was the only label
    ({"component": "gpu", "detail": "rank 4"}, None),  # no slot and no old label: nothing to key on
    ({"component": "node nic", "detail": "rail 4", "slot": None}, None),
    ({"component": "gpu", "detail": "gpu x"}, None),
])
def test_finding_slot(finding, slot):
    assert finding_slot(finding) == slot
