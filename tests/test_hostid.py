"""One notion of a host (launch/hostid.py) and the address a rank advertises (launch/address.py)."""

from ncclbench.explain.topology import GpuTopology, HostTopology, hosts_in_use
from ncclbench.launch.address import advertised_address
from ncclbench.launch.facts import GpuFact, RankFacts, facts_from_dict
from ncclbench.launch.hostid import distinct_hosts, host_label, local_ranks_by_host, nccl_host_key
from ncclbench.launch.preflight_checks import local_ranks


def test_nccl_key_is_hostid_when_set_else_full_name_and_boot_id():
    assert nccl_host_key({"NCCL_HOSTID": "node1"}, "box.example.org", "b00t") == "node1"
    assert nccl_host_key({}, "box.example.org", "b00t") == "box.example.orgb00t"
    assert nccl_host_key({"NCCL_HOSTID": ""}, "box", "b00t") == ""  # set but empty: NCCL hashes ""


def test_label_is_hostid_else_short_name():
    assert host_label({"NCCL_HOSTID": "node1"}, "box.example.org") == "node1"
    assert host_label({}, "box.example.org") == "box"
    assert host_label({"NCCL_HOSTID": "  "}, "box.x") == "box"


def test_local_ranks_by_host_follow_the_labels_not_the_launcher():
    labels = ["node0", "node0", "node1", "node1", "node0"]
    assert local_ranks_by_host(labels) == [0, 1, 0, 1, 2]
    assert distinct_hosts(labels) == ["node0", "node1"]


def _facts(rank, host, hostid, gpus):
    env = {"NCCL_TESTS_DEVICE": "0"}
    return RankFacts(rank=rank, size=4, host=host, boot_id="b", pid=100 + rank, env=env,
                     gpus=[GpuFact(0, f"GPU-{p}", p, "H100", 1) for p in gpus],
                     nccl_host=host_label({"NCCL_HOSTID": hostid} if hostid else {}, host))


def test_fake_hosts_by_hostid_split_one_machine_for_explain():
    """Four ranks on one machine (one host name), NCCL_HOSTID node0/node1, one GPU each:
    explain's topology is cut per NCCL host, each host with its own two GPUs."""
    facts = [_facts(r, "box", f"node{r // 2}", [f"0000:0{r}:00"]) for r in range(4)]
    box = HostTopology(host="node0")
    box.gpus = [GpuTopology(index=i, pci_bus_id=f"0000:0{i}:00.0") for i in range(4)]
    other = HostTopology.from_dict({**box.to_dict(), "host": "node1"})
    used = hosts_in_use([box, other], facts)
    assert [h.host for h in used] == ["node0", "node1"]
    assert [[g.index for g in h.gpus] for h in used] == [[0, 1], [2, 3]]
    # nccl-tests' local rank (its device choice) still ignores NCCL_HOSTID: one machine, ranks 0..3
    assert local_ranks(facts) == [0, 1, 2, 3]


def test_facts_stored_before_the_field_fall_back_to_the_host_name():
    d = _facts(0, "box", "", []).to_dict()
    d.pop("nccl_host")
    assert facts_from_dict(d).host_label == "box"


def _never(*_a):
    raise AssertionError("not consulted")


def test_address_order():
    names = lambda: ["lo", "docker0", "veth7", "eth0"]  # noqa: E731
    addrs = {"lo": "127.0.0.1", "docker0": "172.17.0.1", "veth7": "10.99.0.2", "eth0": "192.168.1.5"}.get
    # the user's word first
    assert advertised_address({"NCCLBENCH_HEALTH_ADDR": "10.0.0.9", "MASTER_ADDR": "x"}, _never, _never, _never) \
        == "10.0.0.9"
    # an env launch: the source address toward the master (loopback when the master is here)
    assert advertised_address({"MASTER_ADDR": "10.99.0.1"}, _never, _never, lambda d: "10.99.0.2") == "10.99.0.2"
    one_host = {"MASTER_ADDR": "127.0.0.1", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "4"}
    assert advertised_address(one_host, _never, _never, lambda d: "127.0.0.1") == "127.0.0.1"
    # MASTER_ADDR=$(hostname) on rank 0's own host, resolving to 127.0.1.1 there: not what others reach
    env = {"MASTER_ADDR": "head", "WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "8", "NCCL_SOCKET_IFNAME": "eth"}
    assert advertised_address(env, addrs, names, lambda d: "127.0.1.1", lambda: "127.0.1.1") == "192.168.1.5"
    # NCCL_SOCKET_IFNAME's interface, before a host name that resolves to loopback (Debian's 127.0.1.1)
    env = {"NCCL_SOCKET_IFNAME": "veth"}
    assert advertised_address(env, addrs, names, _never, lambda: "127.0.1.1") == "10.99.0.2"
    assert advertised_address({"NCCL_SOCKET_IFNAME": "^veth,docker,lo"}, addrs, names, _never,
                              lambda: None) == "192.168.1.5"
    # the host name when it resolves to a real address
    assert advertised_address({}, _never, _never, _never, lambda: "10.1.2.3") == "10.1.2.3"
    # else the first interface up that is neither loopback nor docker's
    assert advertised_address({}, addrs, names, _never, lambda: "127.0.1.1") == "10.99.0.2"
    # one host, nothing else known
    assert advertised_address({}, lambda n: None, lambda: ["lo"], _never, lambda: None) == "127.0.0.1"


def _net_root(tmp_path, ifaces):
    for name, state in ifaces.items():
        d = tmp_path / "sys" / "class" / "net" / name
        d.mkdir(parents=True)
        (d / "operstate").write_text(state + "\n")
        (d / "speed").write_text("10000\n")  # what a veth claims: not a line rate
    return str(tmp_path)


def test_the_veth_nccl_uses_is_the_nic_named_virtual_with_its_speed_unknown(tmp_path):
    from ncclbench.explain.ceiling import inter_bound
    from ncclbench.explain.gather_topology import gather_host_topology
    from ncclbench.explain.topology import format_topology_lines

    root = _net_root(tmp_path, {"lo": "unknown", "fhv1": "up", "docker0": "up"})
    h = gather_host_topology(nvml=None, root=root, host="node1", environ={"NCCL_SOCKET_IFNAME": "fhv"})
    assert [(n.name, n.kind, n.rate_gbps) for n in h.nics] == [("fhv1", "virtual", None)]
    assert "virtual interface" in h.nics[0].unknown["rate_gbps"]
    text = "\n".join(format_topology_lines([h]))
    assert "virtual fhv1 (speed unknown) up" in text and "no NIC found" not in text
    bound, why = inter_bound(h, 2, {"NCCL_SOCKET_IFNAME": "fhv"}, "Socket", None)
    assert bound is None and why.startswith("node1: speed of fhv1 unknown (a virtual interface: no line rate")
    # no NCCL_SOCKET_IFNAME and no physical NIC: NCCL's default (not lo, not docker*) is taken
    h = gather_host_topology(nvml=None, root=root, host="node1", environ={})
    assert [n.name for n in h.nics] == ["fhv1"]


def test_a_host_with_a_physical_nic_lists_no_virtual_one_unless_asked(tmp_path):
    from ncclbench.explain.gather_topology import socket_virtual_nics
    from ncclbench.explain.topology import NicPort

    eth = NicPort(name="eth0", kind="ethernet", state="up", rate_gbps=100.0, netdev="eth0")
    ifs = {"lo": "unknown", "eth0": "up", "veth9": "up", "docker0": "up"}
    assert socket_virtual_nics([eth], ifs, {}) == []
    assert socket_virtual_nics([eth], ifs, {"NCCL_SOCKET_IFNAME": "=veth9"}) == ["veth9"]
    assert socket_virtual_nics([eth], ifs, {"NCCL_SOCKET_IFNAME": "eth"}) == []


def test_preflight_lets_per_host_settings_differ_between_hosts_only():
    from ncclbench.launch.preflight_checks import check_facts

    def fact(rank, hostid, ifname):
        env = {"NCCL_SOCKET_IFNAME": ifname}
        if hostid:
            env["NCCL_HOSTID"] = hostid
        return RankFacts(rank=rank, size=4, host="box", boot_id="b", pid=rank, env=env,
                         nccl_host=host_label(env, "box"))

    def warned(facts):
        return sorted(f.message.split(" ")[0] for f in check_facts(facts, 4, 1, False) if f.check == "nccl-env")

    fake = [fact(r, f"node{r // 2}", f"=fhv{r // 2}") for r in range(4)]
    assert warned(fake) == []  # one veth per fake host: as on real hosts
    inside = [fact(r, f"node{r // 2}", f"=fhv{r}") for r in range(4)]
    assert warned(inside) == ["NCCL_SOCKET_IFNAME"]  # two interfaces inside one host
    partly = [fact(r, "node1" if r else "", "=fhv0") for r in range(4)]
    assert warned(partly) == ["NCCL_HOSTID"]  # unset on rank 0: it groups by host name instead


def test_two_fake_hosts_on_one_box_are_judged_as_two_hosts_over_sockets():
    """Issue 25: 4 ranks, NCCL_HOSTID node0/node1, one GPU each.  Both hosts' facts reach the
    ceiling (2 GPUs each, NET between them), not node0's alone ('facts for 2 GPU(s), 4 in use')."""
    from explain_helpers import H100, facts

    from ncclbench.explain.ceiling import expected_ceiling
    from ncclbench.explain.topology import hosts_from_gathered
    from ncclbench.simulation import hosts as S

    spec = S.hgx_host("box", *H100, ngpus=4, nic_kind="ethernet", nic_gbps=100, nics=1)
    tops = []
    for name in ("node0", "node1"):  # what each fake host's first rank reads: the same box, its own label
        t = facts(spec)
        t.host = name
        tops.append((t.to_dict(), ""))
    hosts, whys = hosts_from_gathered([tops[0], None, tops[1], None])
    ranks = [_facts(r, "box", f"node{r // 2}", [g.pci_bus_id.rsplit(".", 1)[0]]) for r, g in enumerate(hosts[0].gpus)]
    used = hosts_in_use(hosts, ranks)
    assert [(h.host, len(h.gpus)) for h in used] == [("node0", 2), ("node1", 2)] and not whys
    c = expected_ceiling(used, "all_reduce", 4, net="Socket")
    assert c.nnodes == 2 and "Socket transport is bound by host CPU copies" in c.unknown, c
    assert c.bound == "NIC" and "over Socket" in c.reasoning  # the NET bound was reached, not stopped at one host


def test_one_gpu_shared_by_two_nccl_hosts_is_a_warning_within_one_host_an_error():
    from ncclbench.launch.preflight_checks import check_facts

    def fact(rank, hostid):
        env = {"NCCL_TESTS_DEVICE": "0", **({"NCCL_HOSTID": hostid} if hostid else {})}
        return RankFacts(rank=rank, size=2, host="box", boot_id="b", pid=rank, env=env,
                         gpus=[GpuFact(0, "GPU-same", "0000:01:00", "H100", 1)], nccl_host=host_label(env, "box"))

    found = check_facts([fact(0, "node0"), fact(1, "node1")], 2, 1, True)
    assert [(f.level, f.check) for f in found if "GPU-same" in f.message] == [("warn", "shared-gpu")]
    found = check_facts([fact(0, ""), fact(1, "")], 2, 1, True)
    assert [(f.level, f.check) for f in found if "GPU-same" in f.message] == [("error", "duplicate-gpu")]
