"""Explain on a real GPU: the topology facts against nvidia-smi, the lines of a real run, the plugin.

    .venv/bin/python -m pytest tests/gpu/test_explain_gpu.py -v

On one GPU NCCL makes no algorithm choice (a 1-rank collective is a local
copy): the run must say so.  With two or more GPUs the run's rows must carry
NCCL's algorithm/protocol/channels from the probe ops, and the two routes
(log, profiler plugin) must agree.  nvidia-smi is the independent witness of
the facts NVML and sysfs gave: name, PCI bus id, PCIe link, `topo -m`.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import pytest

from ncclbench.backends.select import gpu_count

pytestmark = pytest.mark.gpu


def smi(*args: str) -> str:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        pytest.skip("no nvidia-smi to compare with")
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=60, check=True).stdout


def read_facts():
    from ncclbench.explain.gather_topology import gather_host_topology

    return gather_host_topology()


def test_topology_facts_equal_nvidia_smi():
    from ncclbench.explain.topology import normalize_bus_id

    before = read_facts()
    rows = [[c.strip() for c in line.split(",")] for line in smi(
        "--query-gpu=name,pci.bus_id,pcie.link.gen.current,pcie.link.width.current",
        "--format=csv,noheader,nounits").splitlines() if line.strip()]
    after = read_facts()  # an idle GPU may change its PCIe generation between two reads
    assert not before.unknown.get("nvml"), before.unknown
    assert len(before.gpus) == len(rows)
    for g, g2, (name, bus, gen, width) in zip(before.gpus, after.gpus, rows):
        assert g.name == name and g.pci_bus_id == normalize_bus_id(bus)
        assert int(gen) in (g.pcie.gen, g2.pcie.gen), (g.pcie, g2.pcie, gen)
        assert int(width) in (g.pcie.width, g2.pcie.width)


def parse_topo_m(text: str) -> tuple[list[str], dict[tuple[str, str], str]]:
    """nvidia-smi topo -m: the column names and each (row, column) entry of the device matrix."""
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", x) for x in text.splitlines()]
    head = next(i for i, x in enumerate(lines) if x.lstrip().startswith("GPU0") and "\t" in x)
    cols = [c for c in lines[head].split("\t") if c.strip()]
    devs = [c.strip() for c in cols if re.fullmatch(r"(GPU|NIC)\d+", c.strip())]
    cells = {}
    for line in lines[head + 1:]:
        parts = [p.strip() for p in line.split("\t")]
        if not parts or not re.fullmatch(r"(GPU|NIC)\d+", parts[0]):
            break
        for col, value in zip(devs, parts[1:1 + len(devs)]):
            cells[(parts[0], col)] = value
    return devs, cells


def test_topology_facts_equal_nvidia_smi_topo_m():
    text = smi("topo", "-m")
    devs, cells = parse_topo_m(text)
    facts = read_facts()
    nics = dict(re.findall(r"^\s*(NIC\d+):\s*(\S+)", text, re.M))  # NIC Legend
    ngpus = sum(d.startswith("GPU") for d in devs)
    assert ngpus == len(facts.gpus)
    ours = {(f"GPU{x.a}", f"GPU{x.b}"): x.path for x in facts.gpu_gpu}
    for a in range(ngpus):
        for b in range(a + 1, ngpus):
            theirs = cells[(f"GPU{a}", f"GPU{b}")]
            ga, gb = facts.gpus[a], facts.gpus[b]
            if theirs.startswith("NV"):
                links = int(theirs[2:])
                assert ga.nvlink_active and gb.nvlink_active
                if ga.nvlink_remote == "gpu":
                    assert ga.nvlink_peers.get(gb.pci_bus_id) == links
            else:
                assert ours[(f"GPU{a}", f"GPU{b}")] == theirs
    ours_nic = {(f"GPU{x.a}", x.b.split(":")[0]): x.path for x in facts.gpu_nic}
    for (row, col), value in cells.items():
        if row.startswith("GPU") and col.startswith("NIC") and (row, nics.get(col, "")) in ours_nic:
            assert ours_nic[(row, nics[col])] == value


def run_bench(tmp_path, *args, env_extra=None, timeout=300):
    env = dict(os.environ, NCCLBENCH_NO_STORE="1", NCCL_NVLS_ENABLE="0")
    env.pop("NCCL_DEBUG", None)  # the capture's own settings apply unless the test sets the user's
    env.update(env_extra or {})
    out = tmp_path / f"r{len(list(tmp_path.glob('r*.json')))}.json"
    p = subprocess.run([sys.executable, "-m", "ncclbench", "all_reduce_perf", "-b", "8", "-e", "16M", "-f", "4",
                        "-n", "5", "-J", str(out), *args], capture_output=True, text=True, env=env, timeout=timeout)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout, json.loads(out.read_text())


def test_a_run_prints_the_explain_lines_and_leaves_no_files(tmp_path):
    tmpdir = tempfile.gettempdir()
    left_before = set(glob.glob(os.path.join(tmpdir, "ncclbench-nccl-log-*")))
    out, doc = run_bench(tmp_path)
    names = [x.strip() for x in smi("--query-gpu=name", "--format=csv,noheader").splitlines() if x.strip()]
    lines = out.splitlines()
    assert any(x.startswith("# Topology ") and names[0] in x for x in lines)
    avg = next(i for i, x in enumerate(lines) if x.startswith("# Avg bus bandwidth"))
    assert re.match(r"# NCCL 2\.\d+\.\d+ path: ", lines[avg + 1]), lines[avg + 1]
    ex = doc["ncclbench_explain"]
    assert ex["lines"][0] == lines[avg + 1] and len(ex["rows"]) == len(doc["results"])
    nranks = doc["ncclbench"]["nranks"]
    if nranks == 1:
        assert lines[avg + 2] == ("# all_reduce per size: NCCL's choice unknown (none with one rank (NCCL copies "
                                  "locally, no algorithm is chosen))")
    else:
        assert re.match(r"# all_reduce \d+ B( - |: )", lines[avg + 2]), lines[avg + 2]
        assert all(r["algo"] or r.get("choices") for r in ex["rows"]), ex["rows"]
    assert not any(e.startswith("NCCL_DEBUG") for e in doc["env"])  # the capture's settings are not the user's
    assert set(glob.glob(os.path.join(tmpdir, "ncclbench-nccl-log-*"))) == left_before
    plain, plain_doc = run_bench(tmp_path, "--no-explain")
    # Nothing of explain's: no topology, no NCCL path line ("# NCCL calls in the timed loop" is the
    # banner's own, older than explain), no JSON key.
    added = [x for x in plain.splitlines() if x.startswith(("# Topology", "# NCCL 2.", "# Plateau", "# Not checked"))]
    assert added == [] and "ncclbench_explain" not in plain_doc


def profiler_plugin(tmp_path) -> str | None:
    from ncclbench.explain.profiler import _HERE, built_plugin

    path = built_plugin()
    if path:
        return path
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    so = tmp_path / "libnccl-profiler-ncclbench.so"
    subprocess.run([cc, "-O2", "-shared", "-fPIC", "-fvisibility=hidden", "-o", str(so),
                    os.path.join(_HERE, "csrc", "ncclbench_profiler.c"), "-lpthread"], check=True)
    return str(so)


def test_profiler_plugin_loads_where_the_log_cannot_serve(tmp_path):
    """With the user's NCCL_DEBUG=WARN the log route is closed; the plugin gives the per-call choice."""
    plugin = profiler_plugin(tmp_path)
    if plugin is None:
        pytest.skip("no built profiler plugin and no C compiler")
    out, doc = run_bench(tmp_path, env_extra={"NCCL_DEBUG": "WARN", "NCCLBENCH_PROFILER_PLUGIN": plugin})
    notes = doc["ncclbench_explain"]["capture_notes"]
    from ncclbench.nccl.binding import NcclLibrary

    if NcclLibrary.load().version_code < 22700:
        assert any("predates profiler API v4" in n for n in notes), notes
        return
    assert f"profiler plugin {plugin}" in notes, notes
    loaded = [n for n in notes if n.startswith("profiler plugin loaded by NCCL: profiler API v")]
    assert loaded, notes  # NCCL called the plugin's init(): it is loaded, not only named
    if gpu_count() >= 2 and doc["ncclbench"]["nranks"] >= 2:
        assert all(r["algo"] or r.get("choices") for r in doc["ncclbench_explain"]["rows"])
