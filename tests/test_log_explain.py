"""Logs as users bring them (issue 26): failed and hung runs imported, the collective read from the table,
topology from the log itself, causes named from NCCL's lines, and bad input refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ncclbench.commands import main as ncclbench
from ncclbench.explain.failures import failure_traps
from ncclbench.explain.launch_line import parse_launch_line
from ncclbench.explain.log_topology import assumed_hosts, log_topology
from ncclbench.explain.nccl_log import parse_nccl_log
from ncclbench.explain.run_explain import explain_run
from ncclbench.explain.stored import run_facts
from ncclbench.explain.traps import find_traps
from ncclbench.output.collective_infer import infer_collective
from ncclbench.output.parse import parse_text
from ncclbench.store import ResultStore
from ncclbench.store.importers import NotImportableError, load_file, parse_text_log

FIX = Path(__file__).parent / "fixtures"
CLEAN = FIX / "nccl_tests_output"
INPUTS = FIX / "log_inputs"
CORPUS = FIX / "log_corpus"


def explained(path: Path, collective: str | None = None):
    run, = load_file(path, collective)
    return run, explain_run(run_facts(run))


# -- the collective from the table ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(p.name for p in CLEAN.glob("*.txt")))
def test_the_table_decides_the_collective_of_every_clean_output(name):
    info, rows = parse_text((CLEAN / name).read_text())
    want = info.program.removesuffix("_perf")
    assert infer_collective(rows, len(info.devices)).collective == want
    assert infer_collective(rows).collective == want  # the rank count solved from the table itself


def test_a_table_cut_from_a_terminal_gets_its_collective_and_says_how(tmp_path):
    text = (CLEAN / "reduce_scatter_1proc_4gpu.txt").read_text().splitlines()
    cut = "\n".join(x for x in text if not x.startswith(("# Collective test", "# nccl-tests version"))) + "\n"
    path = tmp_path / "terminal.txt"
    path.write_text(cut)
    run, ex = explained(path)
    assert run.options.collective == "reduce_scatter"
    assert run.info.extra["collective_source"].startswith("the table: op column sum, root -1")
    assert any(x.startswith("# Collective reduce_scatter: from the table:") for x in ex.lines)
    # --collective overrides what the table says
    other, = load_file(path, "all_gather")
    assert other.options.collective == "all_gather" and other.info.extra["collective_source"] == "--collective"


def test_gather_and_scatter_tables_are_not_told_apart_by_guessing():
    info, rows = parse_text((CLEAN / "broadcast_1proc_4gpu.txt").read_text())
    fake = [r.__class__(r.size, r.count // 4, r.type, r.redop, r.root, r.out_of_place, r.in_place) for r in rows]
    got = infer_collective(fake, 4)
    assert got.collective is None and got.candidates == ("gather", "scatter")


# -- failed and hung runs ---------------------------------------------------------------------------------

def test_a_failed_run_is_stored_failed_with_its_lines_and_its_causes(tmp_path):
    path = CORPUS / "h100-socket-ifname-nosuch.log"
    run, ex = explained(path)
    assert run.status == "failed" and run.rows == [] and run.options.collective == "all_reduce"
    assert "'invalid usage" in run.info.extra["end_reason"]
    assert ex.judgement.verdict.label == "failed"
    assert ex.judgement.traps.causes()[:2] == ["bootstrap_no_interface", "iface_list_empty"]
    assert "NCCL_SOCKET_IFNAME=nosuch0" in " ".join(ex.lines)
    with ResultStore(tmp_path / "r.sqlite") as store:
        from ncclbench.store import store_imported
        (_, rid, new), = store_imported(store, [run])
        back = store.get_run(rid)
    assert new and back.status == "failed" and back.info.extra["failure"]["nccl_warn_lines"] == 1


def test_a_hung_run_is_not_judged_and_names_the_hang():
    run, ex = explained(CORPUS / "h100-hang-killed.log")
    assert run.status == "interrupted" and not run.rows
    assert ex.judgement.verdict.label == "unknown"
    assert "hang_no_table" in ex.judgement.traps.causes()
    assert any(x.startswith("# Run did not finish: a header and no result row") for x in ex.lines)


@pytest.mark.parametrize("gap", ["[...]", "...", "<snip>", "[... ? lines cut by ncclbench corpus ...]"])
def test_a_log_that_ends_in_a_gap_says_a_hang_is_possible_not_a_fact(tmp_path, gap):
    """A paste whose tail was cut ('...' as its last line) shows no row, but not that the run hung:
    the rows may be what the paste lost.  The hang stays a named cause, as a possibility (WARN)."""
    lines = (CORPUS / "h100-hang-killed.log").read_text().splitlines()[:224]  # without the kill and exit lines
    path = tmp_path / "cut.log"
    path.write_text("\n".join([*lines, gap, ""]))
    run, ex = explained(path)
    assert run.status == "interrupted" and not run.rows
    assert "ends in a gap" in run.info.extra["end_reason"], run.info.extra["end_reason"]
    hang, = [t for t in ex.judgement.traps.raised if t.name == "hang-no-table"]
    assert hang.severity == "warn" and hang.evidence.startswith("possible:"), hang
    assert "hang_no_table" in ex.judgement.traps.causes()
    # a gap with the log going on after it: the log itself stops with no row, a fact again
    path.write_text("\n".join([*lines[:124], gap, *lines[124:], ""]))
    _, ex = explained(path)
    hang, = [t for t in ex.judgement.traps.raised if t.name == "hang-no-table"]
    assert hang.severity == "error", hang


def test_a_hang_with_p2p_off_blames_no_peer_to_peer_write(tmp_path):
    """NCCL's own lines say P2P is off: SHM copies through host memory, where PCIe ACS reroutes no
    peer-to-peer write, so ACS is not suspected, nor is NCCL_P2P_DISABLE=1 offered as the test."""
    lines = (CORPUS / "h100-p2p-disabled.log").read_text().splitlines()[:167]  # up to the SHM set-up, no row
    path = tmp_path / "hung-p2p-off.log"
    path.write_text("\n".join(lines) + "\n")
    _, ex = explained(path)
    hang, = [t for t in ex.judgement.traps.raised if t.name == "hang-no-table"]
    assert hang.severity == "error" and "NCCL_P2P_DISABLE=1" not in hang.fix, hang
    assert "acs_iommu" not in ex.judgement.traps.causes(), ex.judgement.traps.causes()


def test_with_p2p_and_shm_off_acs_is_suspected_through_gpudirect_rdma_not_p2p():
    """P2P and SHM off (NCCL_P2P_LEVEL=LOC, NCCL_SHM_DISABLE=1): two GPUs of one host talk through the
    NIC; ACS can still stop it, through GPUDirect RDMA - not through peer-to-peer NCCL does not use."""
    _, ex = explained(CORPUS / "gh-nv-peer-memory-78-p2p-shm-off.log")
    acs, = [t for t in ex.judgement.traps.raised if t.name == "acs-iommu"]
    assert "peer-to-peer writes" not in acs.evidence and "network transport" in acs.evidence, acs
    assert "NCCL_NET_GDR_LEVEL=LOC" in acs.fix and "NCCL_P2P_DISABLE=1" not in acs.fix, acs


def test_wrong_results_fail_the_run_and_are_named():
    run, ex = explained(CORPUS / "gh-nccl-tests-37-wrong-results.log")
    assert run.status == "failed" and ex.judgement.verdict.label == "failed"
    assert ex.judgement.traps.causes() == ["wrong_results"] and "2 out of bounds value(s)" in " ".join(ex.lines)


# -- topology from the log ----------------------------------------------------------------------------------

def test_two_hosts_without_nccl_lines_are_two_hosts_and_socket_territory():
    run, ex = explained(INPUTS / "two_hosts_no_info_socket_speed.log")
    t = run_facts(run).log_topology
    assert t is not None and t.nnodes == 2 and t.host_names == ["node0", "node1"]
    assert t.nnodes_source == "nccl-tests' device lines"
    j = ex.judgement
    assert j.verdict.label == "below expected" and "TCP-socket territory" in j.ceiling.reasoning
    assert "NCCL_DEBUG=INFO" in j.ceiling.reasoning  # what to run next
    trap, = [x for x in j.traps.raised if x.name == "net-socket-fallback"]
    assert trap.severity == "warn" and trap.evidence.startswith("likely, from the figures alone")


def test_an_nccl_2_4_two_host_log_is_never_called_single_node():
    """The 16-rank, two-host NCCL 2.4.8 log of the issue: hosts from the device lines, its 2.4-format
    connection lines read, the EFA plugin and its version named."""
    lines = ["# nThread 1 nGpus 1 minBytes 8 maxBytes 1073741824 step: 2(factor) warmup iters: 5 iters: 20 "
             "validation: 1", "#", "# Using devices"]
    lines += [f"#   Rank {r:2d} Pid {1000 + r:6d} on ip-10-0-0-{1 + r // 8} device {r % 8:2d} [0x{16 + r % 8:02x}] "
              "Tesla V100-SXM2-32GB" for r in range(16)]
    lines += ["ip-10-0-0-1:1000:1000 [0] NCCL INFO NET/OFI Initializing aws-ofi-nccl 1.5.0aws",
              "ip-10-0-0-1:1000:1000 [0] NCCL INFO NET/OFI Selected Provider is efa",
              "NCCL version 2.4.8+cuda10.0",
              "ip-10-0-0-1:1000:1020 [7] NCCL INFO Ring 00 : 7 -> 8 [send] via NET/AWS Libfabric/0",
              "ip-10-0-0-1:1000:1021 [0] NCCL INFO Ring 00 : 0[0] -> 1[1] via P2P/IPC",
              "ip-10-0-0-1:1000:1000 [0] NCCL INFO comm 0x1 rank 0 nranks 16 cudaDev 0 nvmlDev 0 - Init COMPLETE"]
    lines += [f"  {s:10d}  {s // 4:10d}   float     sum      -1  {s / 9e3:7.1f}  9.00  16.88  0e+00  {s / 9e3:7.1f}  "
              "9.00  16.88  0e+00" for s in (268435456, 536870912, 1073741824)]
    lines += ["# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 16.88"]
    run, = parse_text_log("\n".join(lines) + "\n", "efa.log")
    ex = explain_run(run_facts(run))
    text = "\n".join(ex.lines)
    assert "single-node" not in text
    assert "2 host(s) (ip-10-0-0-1, ip-10-0-0-2), 8 rank(s) per host, 16 rank(s)" in text
    assert "network AWS Libfabric (external plugin aws-ofi-nccl 1.5.0aws, provider efa)" in text
    facts = run_facts(run).log
    assert facts is not None and [c.kind for c in facts.connections] == ["NET", "P2P"]
    assert facts.connections[0].net == "AWS Libfabric" and facts.version == "2.4.8"
    assert "older than 2.18: its connection, channel and plugin lines were read" in " ".join(facts.unknown)


def test_the_launch_line_gives_hosts_ranks_and_settings():
    f = parse_launch_line("$ mpirun -np 16 -H node0:8,node1:8 -x NCCL_IB_HCA=mlx5 -x NCCL_DEBUG "
                          "./build/all_reduce_perf -b 8 -e 1G -g 1")
    assert f is not None and (f.launcher, f.binary, f.nprocs, f.ngpus) == ("mpirun", "all_reduce_perf", 16, 1)
    assert f.hosts == {"node0": 8, "node1": 8} and f.env == {"NCCL_IB_HCA": "mlx5"}
    assert f.env_by_name == ["NCCL_DEBUG"]  # passed from the shell: its value is unknown, not guessed
    s = parse_launch_line("srun -N 2 --ntasks-per-node=8 --mpi=pmix --export=ALL,NCCL_SOCKET_IFNAME=eth0 "
                          "all_gather_perf -b 1M")
    assert s is not None and (s.nnodes, s.per_node, s.mpi_plugin) == (2, 8, "pmix")
    assert s.env == {"NCCL_SOCKET_IFNAME": "eth0"}
    assert parse_launch_line("python train.py --lr 3e-4") is None
    t = log_topology([], None, parse_launch_line("mpirun -np 16 -H a:8,b:8 ./all_reduce_perf -g 1"))
    assert (t.nnodes, t.nranks, t.nnodes_source) == (2, 16, "the launch line")


def test_board_facts_are_assumed_only_from_a_known_model_and_said_so():
    t = log_topology([], None, parse_launch_line("./all_reduce_perf -g 8"))
    assert t.nnodes == 1 and t.nranks == 8 and t.board is None
    hosts, why = assumed_hosts(t, None)
    assert hosts == [] and why == "the GPU model is unknown: no ceiling can be assumed"
    t.gpu_model = "NVIDIA A100-SXM4-80GB"
    from ncclbench.explain.log_topology import board_of
    t.board = board_of(t.gpu_model)
    hosts, why = assumed_hosts(t, None)
    assert why == "" and len(hosts[0].gpus) == 8
    assert {(g.nvlink_active, g.nvlink_remote, g.compute_capability) for g in hosts[0].gpus} == {(12, "switch", "8.0")}
    assert board_of("NVIDIA A100 80GB PCIe").nvswitch_links == 0  # a PCIe card, not an HGX board


# -- causes from the log --------------------------------------------------------------------------------------

def test_p2p_and_shm_off_is_the_socket_path_not_shm():
    log = parse_nccl_log("\n".join([
        "vm:1:1 [0] NCCL INFO NCCL_P2P_DISABLE set by environment to 1",
        "vm:1:1 [0] NCCL INFO NCCL_SHM_DISABLE set by environment to 1",
        "vm:1:1 [0] NCCL INFO comm 0x1 rank 0 nRanks 2 nNodes 1 localRanks 2 localRank 0 MNNVL 0",
        "vm:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [send] via NET/Socket/0",
    ]))
    t, = find_traps([], log, {}, nnodes=1).raised
    assert t.name == "p2p-shm-disabled" and "via NET/Socket/0" in t.evidence and "SHM)" not in t.evidence


def test_channels_capped_by_env_with_what_nccl_did():
    log = parse_nccl_log("vm:1:1 [0] NCCL INFO NCCL_MAX_NCHANNELS set by environment to 2\n"
                         "vm:1:1 [0] NCCL INFO 2 coll channels, 2 collnet channels, 0 nvls channels, 2 p2p channels, "
                         "2 p2p channels per peer\n")
    r = find_traps([], log, {}, nnodes=1)
    t, = [x for x in r.raised if x.name == "channels-capped"]
    assert "NCCL_MAX_NCHANNELS=2" in t.evidence and "2 coll channel(s)" in t.evidence and t.severity == "warn"
    assert "channels-capped" not in find_traps([], parse_nccl_log(""), {}, nnodes=1).names()


@pytest.mark.parametrize("warn,causes", [
    ("NET/IB : Got completion from peer 10.0.0.2<1234> with error 4, opcode 0, len 0, vendor err 81 (Send)",
     ["ib_completion_error", "acs_iommu"]),
    ("NET/IB: Got completion from peer 10.0.0.2<1234> with status=IBV_WC_RETRY_EXC_ERR(12) opcode=Send(0) "
     "reqSize=0 vendor_err=129 req_type=Send", ["ib_completion_error"]),
    ("Cuda failure 2 'out of memory'", ["oom_or_alloc_failure"]),
    ("Cuda failure 999 'unknown error'", ["cuda_error"]),
])
def test_warn_signatures(warn, causes):
    log = parse_nccl_log(f"h:1:1 [0] net_ib.cc:1 NCCL WARN {warn}\n")
    assert [t.name.replace("-", "_") for t in failure_traps(log, [], [], status="failed")] == causes


def test_a_lost_peer_under_gdr_names_acs():
    log = parse_nccl_log("h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA\n")
    traps = failure_traps(log, ["h: Test NCCL failure common.cu:1 'remote process exited or there was a network "
                                "error / '"], [], status="failed", nnodes=2)
    assert [t.name for t in traps] == ["network-error-remote-exit", "acs-iommu"]
    assert "while NCCL used GPUDirect RDMA" in traps[1].evidence


# -- bad input: one line, never a traceback, never a wrong fact ---------------------------------------------

@pytest.mark.parametrize("content,words", [
    (bytes(range(256)) * 64, "binary file"),
    (bytes(range(1, 32)) * 400, "binary file"),
    (b'{"name": "not nccl-tests", "values": [1, 2, 3]}', "cannot import"),
    (b"Epoch 1/10\nloss: 0.53 - accuracy: 0.81\nEpoch 2/10\nloss: 0.41 - accuracy: 0.86\n", "not an nccl-tests"),
    (b"---------------------------------------------------------------------------------------\n"
     b"                    RDMA_Write BW Test\n #bytes     #iterations    BW peak[Gb/sec]\n"
     b" 65536      5000             97.52              97.48\n", "not an nccl-tests"),
])
def test_bad_input_is_one_clear_line(content, words, tmp_path, capsys):
    path = tmp_path / "input.log"
    path.write_bytes(content)
    with pytest.raises(NotImportableError) as e:
        load_file(path)
    assert words in str(e.value) and "\n" not in str(e.value)
    assert ncclbench(["explain", str(path)]) == 255
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_a_log_in_another_encoding_is_still_read(tmp_path):
    text = (CLEAN / "all_reduce_1proc_4gpu.txt").read_text()
    path = tmp_path / "gbk.log"
    path.write_bytes(("# \u8282\u70b9 \u6d4b\u8bd5 " * 300 + "\n").encode("gbk") + text.encode())
    run, = load_file(path)
    assert run.options.collective == "all_reduce" and len(run.rows) > 10


def test_an_unknown_nccl_version_marks_its_lines_unknown_not_guessed(tmp_path):
    text = (CLEAN / "all_reduce_1proc_4gpu.txt").read_text().splitlines()
    text.insert(5, "vm:1:1 [0] NCCL INFO NCCL version 9.1.0+cuda15.0")
    text.insert(6, "vm:1:1 [0] NCCL INFO Channel 00 ~ 0 => 1 over NVL/quantum")
    text.insert(7, "vm:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via FOO/bar")
    path = tmp_path / "future.txt"
    path.write_text("\n".join(text) + "\n")
    run, ex = explained(path)
    facts = run_facts(run).log
    assert facts is not None and facts.version == "9.1.0" and facts.connections == []
    assert any("newer than the formats read from its source" in u for u in facts.unknown)
    assert any("connection line in an unknown format" in u for u in facts.unparsed)
    doc = json.dumps(ex.data, default=str)
    assert "FOO" not in json.dumps(ex.data["nccl_log"]["facts"]["connections"]) and "9.1.0" in doc


# -- the same causes in live runs (item 5): NCCL's log capture and the profiler plugin both feed RunFacts --------

def _live_facts(env, log_text="", probe=None):
    from explain_helpers import H100, facts

    from ncclbench.core.results import HalfResult, ResultRow
    from ncclbench.explain.nccl_log import CallChoice
    from ncclbench.explain.run_explain import RunFacts
    from ncclbench.simulation import hosts as S

    host = facts(S.hgx_host("n1", *H100, ngpus=4, nic_kind=None))
    half = HalfResult(1000.0, float("nan"), 25.0, 37.5, 0, None)
    rows = [ResultRow(s, s // 4, "float", "sum", -1, half, half) for s in (1 << 28, 1 << 29, 1 << 30)]
    calls = None if probe is None else [[CallChoice("AllReduce", r.size, "Ring", "Simple", probe, "profiler")
                                         for r in rows]]
    return RunFacts("all_reduce", 4, rows, hosts=[host], log=parse_nccl_log(log_text) if log_text else None,
                    env=env, tests=[("float", "sum", -1)], probe=calls)


def test_live_p2p_and_shm_off_says_sockets_not_shm():
    ex = explain_run(_live_facts({"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"}))
    t, = [x for x in ex.judgement.traps.raised if x.name.startswith("p2p")]
    assert t.name == "p2p-shm-disabled" and "network transport" in t.evidence
    assert "host memory (SHM)" not in t.evidence and ex.judgement.verdict.label == "below expected"


def test_live_channels_capped_with_the_profiler_routes_channels():
    ex = explain_run(_live_facts({"NCCL_MAX_NCHANNELS": "2"}, probe=2))
    t, = [x for x in ex.judgement.traps.raised if x.name == "channels-capped"]
    assert "per call 2 channel(s)" in t.evidence  # what the profiler plugin saw per call
    assert ex.data["causes"] == ["channels_capped"]


def test_live_forced_tree_is_judged_against_the_free_choice():
    log = "n1:1:1 [0] NCCL INFO AllReduce: 1073741824 Bytes -> Algo TREE proto SIMPLE channel{Lo..Hi}={0..23}\n"
    ex = explain_run(_live_facts({"NCCL_ALGO": "Tree"}, log_text=log))
    j = ex.judgement
    assert j.ceiling.ceiling == 370.8 and "judged against NCCL's free choice" in j.ceiling.reasoning
    assert j.verdict.label == "below expected" and "algo_forced" in j.traps.causes()


def test_a_plugin_that_did_not_load_is_named_only_where_it_matters():
    lines = ["ip-10-1-1-1:1:1 [0] NCCL INFO NET/Plugin : Plugin load returned 2 : libnccl-net.so: cannot open shared "
             "object file: No such file or directory.",
             "ip-10-1-1-1:1:1 [0] NCCL INFO Using network Socket",
             "ip-10-1-1-1:1:1 [0] NCCL INFO Channel 00/0 : 7[7] -> 8[0] [send] via NET/Socket/0"]
    log = parse_nccl_log("\n".join(lines) + "\n")
    two = find_traps([], log, {}, nnodes=2, host_names=["ip-10-1-1-1", "ip-10-1-1-2"])
    assert two.causes() == ["sockets_between_hosts", "plugin_missing"]
    t, = [x for x in two.raised if x.name == "plugin-missing"]
    assert "aws-ofi-nccl" in t.fix and t.severity == "warn" and t.evidence.startswith("possible: ")
    assert find_traps([], log, {}, nnodes=1).causes() == []  # one host: sockets carry nothing between hosts


def test_mpirun_over_an_nccl_tests_built_without_mpi_is_said_and_not_judged():
    """Each process printed its own banner and rank 0 (NVIDIA/nccl-tests#107's paste): every process ran alone."""
    run, ex = explained(INPUTS / "mpirun_without_mpi_build.log")
    t = run_facts(run).log_topology
    assert t is not None and t.nranks == 1 and "each ran alone (nccl-tests built without MPI=1" in t.nranks_source
    assert run.options.collective == "all_reduce" and ex.judgement.verdict.label == "unknown"
    assert any(x.startswith("# One rank moves no data") for x in ex.lines)


def test_a_paste_that_lost_every_hash_still_reads(tmp_path):
    """Some forums eat the leading '#': banner, device lines, header and footer still read."""
    text = (CLEAN / "all_reduce_1proc_4gpu.txt").read_text().splitlines()
    path = tmp_path / "nohash.txt"
    path.write_text("\n".join(x[1:] if x.startswith("#") else x for x in text) + "\n")
    run, = load_file(path)
    clean, = load_file(CLEAN / "all_reduce_1proc_4gpu.txt")
    assert run.options.collective == "all_reduce" and run.status == "complete"
    assert len(run.info.devices) == len(clean.info.devices) == 4 and len(run.rows) == len(clean.rows)
    assert run.summary is not None and run.summary.avg_busbw == clean.summary.avg_busbw


def test_nccls_topology_lines_are_link_facts_a_log_can_give():
    """With the GRAPH subsystem NCCL prints each GPU's NVLink and PCIe bandwidth: a GPU short of its peers is
    a link down (or trained low), and the NVLink count stands in for the board's."""
    lines = ["h:1:1 [0] NCCL INFO NCCL version 2.28.9+cuda13.0",
             "h:1:1 [0] NCCL INFO === System : maxBw 370.8 totalBw 370.8 ===",
             "h:1:1 [0] NCCL INFO CPU/0-0 (1/1/2)"]
    for i, (pci, nvl) in enumerate([(48.0, 370.8), (24.0, 350.2), (48.0, 370.8), (48.0, 370.8)]):
        lines += [f"h:1:1 [0] NCCL INFO + PCI[{pci}] - GPU/0-{i + 1}8000 ({i})",
                  f"h:1:1 [0] NCCL INFO               + NVL[{nvl}] - NVS/0-0"]
    log = parse_nccl_log("\n".join(lines) + "\n")
    assert [(g["pci_bw"], g["nvl_switch_bw"]) for g in log.topo_gpus][:2] == [(48.0, 370.8), (24.0, 350.2)]
    r = find_traps([], log, {}, nnodes=1)
    assert r.causes() == ["pcie_downtrained", "nvlink_down"]
    nv, = [t for t in r.raised if t.name == "nvlink-down"]
    assert "GPU 28000 (rank 1) has NVL[350.2]" in nv.evidence and "peers 370.8" in nv.evidence
    from ncclbench.explain.log_topology import board_of
    t = log_topology([], log, parse_launch_line("./all_reduce_perf -g 4"))
    t.gpu_model, t.board = "NVIDIA H100 80GB HBM3", board_of("NVIDIA H100 80GB HBM3")
    hosts, _ = assumed_hosts(t, log)
    assert {g.nvlink_active for g in hosts[0].gpus} == {17}  # 350.2 / 20.6: the short GPU bounds the ring


def _table_log(tmp_path, gpu: str, n: int, busbw: float) -> Path:
    """An all_reduce log of n GPUs of one host with no NCCL lines, busbw flat from 1 GiB to 8 GiB."""
    lines = ["# Collective test starting: all_reduce_perf",
             "# nThread 1 nGpus 1 minBytes 1073741824 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20",
             "#", "# Using devices"]
    lines += [f"#  Rank {r:2d} Group  0 Pid {1000 + r:6d} on      node0 device {r:2d} [0000:{16 + r:02x}:00] {gpu}"
              for r in range(n)]
    lines += ["#", "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   "
              "algbw   busbw #wrong"]
    alg = busbw * n / (2 * (n - 1))
    for s in (1 << 30, 1 << 31, 1 << 32, 1 << 33):
        t = s / alg / 1e3
        lines.append(f"{s:12d}  {s // 4:12d}     float     sum      -1  {t:7.1f}  {alg:6.2f}  {busbw:6.2f}      0  "
                     f"{t:7.1f}  {alg:6.2f}  {busbw:6.2f}      0")
    lines += ["# Out of bounds values : 0 OK", f"# Avg bus bandwidth    : {busbw}", "#"]
    path = tmp_path / "t.log"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("busbw,label,algo", [(480.0, "as expected", "NVLS"), (365.0, "as expected", "Ring"),
                                              (250.0, "below expected", "NVLS")])
def test_eight_h100s_with_nvls_unconfirmed_are_judged_both_ways(tmp_path, busbw, label, algo):
    """NVLS is only predicted from a table-only log: at NVLS's figure and at Ring's (NVLS off) the run is
    healthy, below both it is not."""
    _, ex = explained(_table_log(tmp_path, "NVIDIA H100 80GB HBM3", 8, busbw))
    j = ex.judgement
    assert (j.verdict.label, j.ceiling.algorithm) == (label, algo)
    if algo == "Ring":
        assert "NVLS was predicted, not seen" in j.verdict.text and j.ceiling.ceiling == 370.8


def test_pcie_cards_between_their_two_layouts_are_not_judged(tmp_path):
    _, ex = explained(_table_log(tmp_path, "NVIDIA GeForce RTX 4090", 8, 12.0))
    assert ex.judgement.verdict.label == "unknown" and "nvidia-smi topo -m" in ex.judgement.verdict.text
    _, low = explained(_table_log(tmp_path, "NVIDIA GeForce RTX 4090", 8, 2.0))
    assert low.judgement.verdict.label == "below expected"


def test_an_unreachable_peer_is_a_network_error_with_the_interface_to_check():
    log = parse_nccl_log("h:1:1 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 172.17.0.1<35117> "
                         "failed : Software caused connection abort\n"
                         "h:1:1 [0] misc/socket.cc:567 NCCL WARN Connect to 172.17.0.1<35117> failed : No route to host\n")
    t, = failure_traps(log, [], [], status="failed")
    assert t.name == "network-error-remote-exit" and "NCCL_SOCKET_IFNAME" in t.fix and "docker0" in t.fix


def test_two_hosts_over_sockets_name_the_second_host_and_the_transport():
    """Issue 26: device lines on node0 and node1, every inter-host channel via NET/Socket."""
    lines = ["# nThread 1 nGpus 1 minBytes 8 maxBytes 1073741824 step: 2(factor) warmup iters: 5 iters: 20 "
             "validation: 1", "#", "# Using devices"]
    lines += [f"#  Rank {r:2d} Group  0 Pid {100 + r:6d} on      node{r // 2} device {r % 2:2d} [0000:{6 + r % 2:02x}:00] "
              "NVIDIA H100 80GB HBM3" for r in range(4)]
    for r in range(4):
        h = f"node{r // 2}:{100 + r}:{100 + r} [{r % 2}] NCCL INFO"
        lines += [f"{h} NCCL version 2.28.9+cuda13.0" if r == 0 else f"{h} cudaDriverVersion 13000",
                  f"{h} Using network Socket",
                  f"{h} comm 0x{r} rank {r} nRanks 4 nNodes 2 localRanks 2 localRank {r % 2} MNNVL 0"]
    lines += ["node0:101:101 [1] NCCL INFO Channel 00/0 : 1[1] -> 2[0] [send] via NET/Socket/0",
              "node1:103:103 [1] NCCL INFO Channel 00/0 : 3[1] -> 0[0] [send] via NET/Socket/0",
              "node0:100:100 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read"]
    for s in (268435456, 536870912, 1073741824):
        t = s / 2.33e3
        lines.append(f"{s:12d}  {s // 4:12d}     float     sum      -1  {t:8.1f}    2.33    3.50      0  {t:8.1f}    "
                     "2.33    3.50      0")
    lines += ["# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 3.5"]
    run, = parse_text_log("\n".join(lines) + "\n", "two-hosts.log")
    ex = explain_run(run_facts(run))
    text = "\n".join(ex.lines)
    assert "2 host(s) (node0, node1), 2 rank(s) per host, 4 rank(s)" in text
    assert ex.judgement.verdict.label == "below expected" and "TCP-socket territory" in ex.judgement.ceiling.reasoning
    t, = [x for x in ex.judgement.traps.raised if x.name == "net-socket-fallback"]
    assert t.severity == "error" and "between node0, node1 (2 hosts)" in t.evidence and "via NET/Socket" in t.evidence
    assert ex.data["causes"] == ["sockets_between_hosts"]


@pytest.mark.parametrize("headers,library,named", [(21805, 21903, False), (22809, 21602, True)])
def test_only_an_older_library_than_the_headers_is_a_version_mismatch(tmp_path, headers, library, named):
    text = (CLEAN / "all_reduce_1proc_4gpu.txt").read_text().splitlines()
    text = [f"# nccl-tests version 2.19.6 nccl-headers={headers} nccl-library={library}"] + \
        [x for x in text if not x.startswith("# nccl-tests version")]
    path = tmp_path / "v.txt"
    path.write_text("\n".join(text) + "\n")
    _, ex = explained(path)
    assert ("version_mismatch" in ex.judgement.traps.causes()) is named


def test_gdr_off_names_the_setting_that_turned_it_off():
    log = parse_nccl_log("h:1:1 [0] NCCL INFO NCCL_NET_GDR_LEVEL set by environment to LOC\n"
                         "h:1:1 [0] NCCL INFO Channel 00/0 : 7[7] -> 8[0] [send] via NET/IB/0\n")
    t, = [x for x in find_traps([], log, {}, nnodes=2).raised if x.name == "gdr-off"]
    assert "NCCL_NET_GDR_LEVEL=LOC turns GPU Direct RDMA off" in t.evidence and t.severity == "error"


def test_a_training_jobs_log_with_nccl_lines_is_not_an_nccl_tests_run(tmp_path):
    lines = []
    for step in range(40):
        lines.append(f"[rank0] step {step} loss {2.5 - step / 100:.3f} lr 3e-4 tokens/s 41234")
        if step % 10 == 0:
            lines.append(f"node1:7:7 [0] NCCL INFO comm 0x{step} rank 0 nRanks 8 nNodes 1 localRanks 8 localRank 0 "
                         "MNNVL 0")
    path = tmp_path / "train.log"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(NotImportableError, match="not an nccl-tests text log"):
        load_file(path)


def test_a_fragment_of_nccls_lines_alone_claims_no_hang():
    run, ex = explained(CORPUS / "gh-nccl-tests-228-p2p-level-loc.log")
    assert run.info.extra.get("nccl_log_only") is True and "how the run ended is not in the text" in \
        run.info.extra["end_reason"]
    assert ex.judgement.traps.causes() == ["p2p_disabled"]  # no hang_no_table: nothing says it hung


def test_nic_speeds_nccl_printed_give_a_multi_host_ceiling():
    """NCCL 2.26+ prints each IB port's speed (NET subsystem): with them two HGX hosts are judged, the
    NVLink bound (370.8) below the NICs' (8 x 48 = 384)."""
    _, ex = explained(INPUTS / "two_hosts_ib_speeds_2.28.log")
    j = ex.judgement
    assert (j.verdict.label, j.ceiling.ceiling, j.ceiling.bound) == ("as expected", 370.8, "NVLink")
    assert "8x 400 Gb/s InfiniBand per node over IB" in j.ceiling.reasoning and j.traps.causes() == []
    path = next(x for x in ex.lines if " path: " in x)
    assert "mlx5_0:1/IB 400 Gb/s" in path and "GPU Direct RDMA on 1/1 (15 not stated)" in path


def test_live_forced_protocol_cites_what_the_profiler_saw_per_call():
    f = _live_facts({"NCCL_PROTO": "LL"}, probe=24)
    for calls in f.probe:
        for c in calls:
            c.proto = "LL"
    ex = explain_run(f)
    t, = [x for x in ex.judgement.traps.raised if x.name == "proto-forced"]
    assert "NCCL's per-call choice (profiler): Ring/LL at 1 GiB" in t.evidence


def test_connection_lines_of_nccl_2_5_to_2_17_are_read():
    log = parse_nccl_log("\n".join([
        "h:1:1 [0] NCCL INFO NCCL version 2.7.8+cuda11.0",
        "h:1:1 [0] NCCL INFO Channel 00 : 0[1a000] -> 1[1b000] via P2P/IPC",
        "h:1:1 [1] NCCL INFO Channel 00 : 1[1b000] -> 2[3d000] via direct shared memory",
        "h:1:1 [3] NCCL INFO Channel 00 : 3[3e000] -> 4[1a000] [send] via NET/IB/0/GDRDMA",
        "h:1:1 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
        "h:1:1 [0] NCCL INFO 4 coll channels, 4 p2p channels, 2 p2p channels per peer",
    ]) + "\n")
    got = [(c.kind, c.detail, c.net, c.gdr) for c in log.connections]
    assert got == [("P2P", "P2P/IPC", None, None), ("SHM", "direct shared memory", None, None),
                   ("NET", "NET/IB/0/GDRDMA", "IB", True), ("P2P", "P2P/CUMEM/read", None, None)]
    assert log.nchannels == 4 and log.version == "2.7.8" and not log.unparsed


def test_hosts_at_their_own_nvlink_bound_are_as_expected_whatever_the_nics(tmp_path):
    """Two HGX hosts, NIC speeds not in the log: the ceiling is at most each node's NVLink bound, so a plateau
    at 97 % of it is as expected; at 54 % the unknown NICs could explain it, so it is not judged."""
    text = (INPUTS / "two_hosts_ib_speeds_2.28.log").read_text().splitlines()
    no_speed = [x for x in text if "NET/IB: [" not in x]
    (tmp_path / "fast.log").write_text("\n".join(no_speed) + "\n")
    _, ex = explained(tmp_path / "fast.log")
    j = ex.judgement
    assert j.verdict.label == "as expected" and j.ceiling.ceiling == 370.8
    assert "an upper bound whatever the NICs are" in j.ceiling.reasoning
    (tmp_path / "slow.log").write_text("\n".join(x.replace(" 360.00", " 200.00") for x in no_speed) + "\n")
    _, slow = explained(tmp_path / "slow.log")
    assert slow.judgement.verdict.label == "unknown" and "speed of mlx5_0:1 unknown" in slow.judgement.ceiling.unknown


def test_mangled_corpus_logs_never_raise(tmp_path):
    """Every corpus log cut at random places, with random lines dropped or garbled, imports and is explained
    or is refused in one line -- never a traceback (fixed seed: the same mangling every run)."""
    import random

    rng = random.Random(26)
    for src in sorted(CORPUS.glob("*.log")):
        lines = src.read_text(encoding="utf-8", errors="replace").splitlines()
        for k in range(3):
            cut = lines[:rng.randrange(1, len(lines) + 1)]
            kept = [x if rng.random() > 0.05 else x[: rng.randrange(0, len(x) + 1)] + "\x7f?"
                    for x in cut if rng.random() > 0.1]
            path = tmp_path / f"{src.stem}-{k}.log"
            path.write_text("\n".join(kept) + "\n")
            try:
                runs = load_file(path)
            except NotImportableError as e:
                assert "\n" not in str(e)
                continue
            for run in runs:
                explain_run(run_facts(run))


@pytest.mark.mpi
def test_the_live_causes_script_runs_end_to_end_on_the_cpu(ncclbench_env, tmp_path):
    """bench/live_causes_gpu.py's plumbing (runs, JSON read back, report written) on the CPU backend; the
    causes themselves need NCCL (the GPU command is in its docstring)."""
    import subprocess
    import sys

    script = Path(__file__).resolve().parent.parent / "bench" / "live_causes_gpu.py"
    p = subprocess.run([sys.executable, str(script), "--cpu", "--nprocs", "2", "--out", str(tmp_path),
                        "--cases", "healthy,channels_capped"], capture_output=True, text=True, env=ncclbench_env,
                       timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    doc = json.loads((tmp_path / "live_causes.json").read_text())
    assert [r["case"] for r in doc["results"]] == ["healthy", "channels_capped"]
    assert all(r["rc"] == 0 and r["causes"] == [] and r["lines"] for r in doc["results"])
    assert "| channels_capped | NCCL_MAX_NCHANNELS=2 | 0 |" in (tmp_path / "live_causes.md").read_text()
