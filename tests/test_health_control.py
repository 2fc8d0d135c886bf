"""health.runtime.control_channel: the coordinator's TCP channel - token handshake both ways, a
missing rank named at join, a dead rank seen at once as a closed connection."""

import threading
import time

import numpy as np
import pytest

from ncclbench.core.errors import BenchError
from ncclbench.health.runtime.control_channel import Coordinator, RankInfo, RankLink
from ncclbench.health.runtime.group_measure import GroupSpec
from ncclbench.health.runtime.messages import Dead, GroupJob, Result, Tick


def test_ranks_join_and_exchange_messages():
    coord = Coordinator(2, "secret", bind="127.0.0.1")
    links = [RankLink("127.0.0.1", coord.port, "secret", RankInfo(r, f"h{r}", 100 + r), timeout_s=10) for r in (1, 0)]
    coord.wait_joined(10)
    assert coord.ranks[1] == RankInfo(1, "h1", 101) and str(coord.ranks[0]) == "rank 0 (host h0, pid 100)"
    job = GroupJob(1, "local r1", 0, (0,), GroupSpec(), 5.0, (0,))
    assert coord.send(0, job)
    assert links[1].recv(5) == job
    links[0].send(Result(1, 0, {"bw_us": 3.0}))
    assert coord.receive(5) == (1, Result(1, 0, {"bw_us": 3.0}))
    with pytest.raises(TimeoutError):
        links[1].recv(0.2)
    for link in links:
        link.close()
    coord.close()


def test_wrong_token_is_refused_and_the_missing_rank_named():
    coord = Coordinator(2, "secret", bind="127.0.0.1")
    RankLink("127.0.0.1", coord.port, "secret", RankInfo(0, "h0", 1), timeout_s=10)
    with pytest.raises(BenchError, match="handshake with the coordinator"):
        RankLink("127.0.0.1", coord.port, "guess", RankInfo(1, "h1", 2), timeout_s=10)
    t0 = time.monotonic()
    with pytest.raises(BenchError, match=r"1 of 2 ranks reached the coordinator within 1 s; missing rank\(s\) 1"):
        coord.wait_joined(1)
    assert time.monotonic() - t0 < 5
    assert 1 not in coord.ranks
    coord.close()


def test_a_rank_that_is_not_ours_cannot_pose_as_the_coordinator():
    fake = Coordinator(1, "other-token", bind="127.0.0.1")
    with pytest.raises(BenchError, match="handshake"):
        RankLink("127.0.0.1", fake.port, "secret", RankInfo(0, "h0", 1), timeout_s=5)
    fake.close()


def test_a_dead_rank_is_seen_at_once():
    coord = Coordinator(2, "t", bind="127.0.0.1")
    links = [RankLink("127.0.0.1", coord.port, "t", RankInfo(r, "h", r), timeout_s=10) for r in (0, 1)]
    coord.wait_joined(10)
    t0 = time.monotonic()
    links[1].sock.close()  # what a killed process's socket does
    item = coord.receive(5)
    assert item == (1, Dead()) and time.monotonic() - t0 < 2
    assert 1 in coord.dead and "connection closed" in coord.dead[1][1]
    assert not coord.send(1, Tick(1))
    links[0].close()
    coord.close()


def test_a_rank_learns_when_the_coordinator_is_gone():
    coord = Coordinator(1, "t", bind="127.0.0.1")
    link = RankLink("127.0.0.1", coord.port, "t", RankInfo(0, "h", 1), timeout_s=10)
    coord.wait_joined(5)
    threading.Timer(0.2, coord.close).start()
    with pytest.raises((EOFError, ConnectionError, OSError)):
        link.recv(5)
    link.close()


def test_deaths_are_dated_by_the_kernel_not_by_when_a_thread_noticed():
    """A launcher ending the job after one rank died kills the rest ms later; the reader
    threads may wake in any order, so the time of death comes from TCP_INFO."""
    coord = Coordinator(3, "t", bind="127.0.0.1")
    links = [RankLink("127.0.0.1", coord.port, "t", RankInfo(r, f"h{r}", r), timeout_s=10) for r in (0, 1, 2)]
    coord.wait_joined(10)
    links[2].sock.close()
    time.sleep(0.05)
    links[0].sock.close()
    links[1].sock.close()
    deadline = time.monotonic() + 5
    while len(coord.dead) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    first = min(coord.dead, key=lambda r: coord.dead[r][0])
    assert first == 2
    assert coord.dead[0][0] - coord.dead[2][0] > 0.03
    coord.close()


def test_a_median_backed_by_most_cycles_is_judged_and_one_without_is_not():
    from ncclbench.health.runtime.live_rounds import _uncorroborated

    assert not _uncorroborated(np.array([100.0, 104.0, 260.0]), 1.5)  # one starved cycle: the median stands
    assert _uncorroborated(np.array([100.0, 160.0, 260.0]), 1.5)  # no two cycles agree
    assert not _uncorroborated(np.array([100.0]), 1.5)  # one cycle: nothing to compare


def test_close_order_is_the_order_the_hang_ups_arrived_in_however_late_it_is_read():
    """A killed rank's connection closes a few ms before the launcher's teardown closes the rest;
    the reader threads may wake in any order (CI named rank 4 for a killed rank 3).  The kernel's
    epoll ready list keeps the arrival order even when its thread reads it late."""
    import select
    import socket
    import time

    from ncclbench.health.runtime.control_channel import CloseOrder

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    clients = [socket.create_connection(server.getsockname()) for _ in range(4)]
    ends = [server.accept()[0] for _ in clients]
    order = CloseOrder()
    with order._lock:  # the watcher cannot record anything until all four have closed
        for rank, end in enumerate(ends):
            order._fd_rank[end.fileno()] = rank
            order._ep.register(end.fileno(), select.EPOLLRDHUP | select.EPOLLET)
        for i in (2, 0, 3, 1):
            clients[i].close()
            time.sleep(0.002)
    assert [order.position(r, wait_s=2.0) for r in range(4)] == [1, 3, 0, 2]
    order.close()
    for s in (*ends, server):
        s.close()
