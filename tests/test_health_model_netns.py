"""The whole-phase model through the CPU backend's real scan: 4 hosts in network namespaces,
one rank each (MPI), node2's link shaped to half of the others' - every pair holding it at half.

Issue 29's fake-host run (2x H200, 2026-11-28): every pair with node2 at 0.47 against 0.92 GB/s in
3 rounds, and the verdict was "4 healthy", exit 0: with 2 pairs a round there is no fleet statistic,
and pooled, node2's pairs are half of them."""

import pytest
from netns_hosts import netns_hosts
from test_health_netns import BASE_RATE, _drained, _tc, confirmed, finish, groups, start

pytestmark = [pytest.mark.netns, pytest.mark.mpi]

HALF_RATE = "50mbit"


def shape_half(hosts, slow_host):
    """Every host's egress and its bridge port at BASE_RATE; slow_host's at half of it."""
    for i, h in enumerate(hosts):
        tag, n = h.name.rsplit("h", 1)
        rate = HALF_RATE if i == slow_host else BASE_RATE
        _tc(h.name, "qdisc", "add", "dev", h.veth, "root", "tbf", "rate", rate, "burst", "256kb", "latency", "50ms")
        _tc(f"{tag}sw", "qdisc", "add", "dev", f"{tag}p{n}", "root", "tbf", "rate", rate, "burst", "256kb",
            "latency", "50ms")


def test_four_hosts_one_at_half_is_named_alone(tmp_path):
    with netns_hosts(4 + 1) as (ctl, *hosts):
        shape_half(hosts, slow_host=2)
        coord, ranks, _, js, drain = start(ctl, hosts, tmp_path)
        code, out, err, _ = finish(coord, ranks, 240)
        doc, found = confirmed(js)
        names = [h.name for h in hosts]
        assert code == 8, (out, err, groups(doc))
        assert found == [("node nic", (names[2],), "all rails")], out + groups(doc)
        assert _drained(drain) == [names[2]]
        assert all(s in ("healthy", "not judged") for h, s in doc["host_status"].items() if h != names[2]), out
