"""The TCP rendezvous with real sockets and real processes: forming a job, the
token, and the fault cases (never arrives, killed mid-run, stuck), each within
its time bound and naming the missing rank."""

import json
import socket
import threading
import time

import pytest
from launch_helpers import TESTS, finish, free_port, start

from ncclbench.core.errors import BenchError
from ncclbench.launch.rendezvous import TcpHostComm, format_ranks

WORKER = str(TESTS / "rdzv_worker.py")


def _workers(n, port, timeout, scenario, tokens=None, ranks=None):
    ranks = range(n) if ranks is None else ranks
    tokens = tokens or {}
    return {r: start([WORKER, str(r), str(n), "127.0.0.1", str(port), tokens.get(r, "tok"), str(timeout), scenario])
            for r in ranks}


def _results(procs, bound):
    out = {}
    end = time.monotonic() + bound
    for r, p in procs.items():
        out[r] = finish(p, max(0.5, end - time.monotonic()))
    return out


def test_four_processes_form_one_job():
    port = free_port()
    res = _results(_workers(4, port, 20, "normal"), 30)
    docs = {}
    for r, (code, out, err) in res.items():
        assert code == 0, (r, out, err)
        docs[r] = json.loads(out.splitlines()[-1])
    uids = {d["uid"] for d in docs.values()}
    assert len(uids) == 1 and len(bytes.fromhex(uids.pop())) == 128
    assert [g["rank"] for g in docs[0]["gathered"]] == [0, 1, 2, 3]
    assert all(docs[r]["gathered"] is None for r in (1, 2, 3))
    assert {(d["sum"], d["min"], d["max"]) for d in docs.values()} == {(10, 1, 4)}
    assert all(d["all"] == [0, 10, 20, 30] for d in docs.values())
    # split(rank % 2, key=-rank): two groups, ordered by key
    assert docs[0]["sub_ranks"] == [2, 0] and docs[1]["sub_ranks"] == [3, 1]
    assert [docs[r]["sub_rank"] for r in range(4)] == [1, 1, 0, 0]
    assert docs[0]["sub_sum"] == 2 and docs[3]["sub_sum"] == 4
    assert docs[3]["root_last"] == [0, 1, 2, 3] and docs[0]["root_last"] is None


def _threads(n, port, fn, token="tok", timeout=10.0):
    results, errors = {}, {}

    def body(r):
        try:
            c = TcpHostComm(r, n, "127.0.0.1", port, token, timeout, heartbeat_s=0.5)
            results[r] = fn(c)
            c.close()
        except BenchError as e:
            errors[r] = e

    ts = [threading.Thread(target=body, args=(r,)) for r in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout + 10)
    return results, errors


def test_operations_semantics_in_threads():
    port = free_port()

    def fn(c):
        big = c.bcast(bytes(range(256)) * 4096 if c.rank == 2 else None, 2)  # 1 MiB from a non-zero root
        g = c.gather(("r", c.rank), root=1)
        sub = c.split(0 if c.rank < 2 else 1, c.rank)
        sub2 = sub.split(0, -c.rank)
        return (len(big), big[:3], g, c.allreduce(float(c.rank), "max"), sub.size, sub.rank,
                sub.allgather(c.rank), sub2.allgather(c.rank), sub.bcast("x%d" % c.rank, 0))

    res, err = _threads(3, port, fn)
    assert not err, err
    assert res[0][:2] == (1 << 20, bytes([0, 1, 2]))
    assert res[1][2] == [("r", 0), ("r", 1), ("r", 2)] and res[0][2] is None
    assert {v[3] for v in res.values()} == {2.0}
    assert res[0][4:] == (2, 0, [0, 1], [1, 0], "x0") and res[2][4:] == (1, 0, [2], [2], "x2")


def test_bad_arguments_are_refused():
    port = free_port()

    def fn(c):
        with pytest.raises(ValueError):
            c.allreduce(1.0, "prod")
        with pytest.raises(ValueError):
            c.bcast(1, root=5)
        return True

    res, err = _threads(2, port, fn)
    assert res == {0: True, 1: True} and not err
    with pytest.raises(BenchError):
        TcpHostComm(2, 2, "127.0.0.1", port, "tok", 1)


def test_wrong_token_is_refused_on_both_sides():
    port = free_port()
    procs = _workers(3, port, 3, "normal", tokens={2: "not-the-token"})
    t0 = time.monotonic()
    res = _results(procs, 15)
    code2, out2, _ = res[2]
    assert code2 == 6 and "refused this process: token mismatch" in out2
    assert float(out2.split("elapsed")[1]) < 2.0  # refused at once, not after the timeout
    code0, out0, _ = res[0]
    assert code0 == 4 and "rank 2 (never connected)" in out0 and "token mismatch" in out0, out0
    code1, out1, _ = res[1]
    assert code1 == 4 and "rank 2 (never connected)" in out1, out1
    assert time.monotonic() - t0 < 3 + 6


def test_never_arriving_rank_times_out_naming_it():
    port = free_port()
    procs = _workers(3, port, 2, "normal", ranks=[0, 1])
    t0 = time.monotonic()
    res = _results(procs, 12)
    for r in (0, 1):
        code, out, _ = res[r]
        assert code == 4, out
        assert "2 of 3 ranks arrived" in out and "rank 2 (never connected)" in out
    assert time.monotonic() - t0 < 2 + 5


def test_rank_zero_never_arriving_is_named_by_the_others():
    port = free_port()
    res = _results(_workers(2, port, 1.5, "normal", ranks=[1]), 10)
    code, out, _ = res[1]
    assert code == 4 and "could not reach rank 0 at 127.0.0.1" in out
    assert float(out.split("elapsed")[1]) < 1.5 + 2


def test_rank_killed_mid_run_is_noticed_at_once():
    port = free_port()
    procs = _workers(3, port, 30, "die")  # rank 2 exits without goodbye after the first operations
    t0 = time.monotonic()
    res = _results(procs, 20)
    assert res[2][0] == 9
    for r in (0, 1):
        code, out, _ = res[r]
        assert code == 4, out
        assert "rank 2 (host " in out and "died" in out
    # EOF, not the 30 s timeout, ends the job
    assert time.monotonic() - t0 < 10


def test_failure_callback_fires_while_ranks_wait_elsewhere():
    port = free_port()
    t0 = time.monotonic()
    res = _results(_workers(3, port, 30, "callback"), 20)
    for r in (0, 1):
        code, out, _ = res[r]
        assert code == 4 and "CALLBACK 4 " in out and "rank 2 (host" in out, out
    assert time.monotonic() - t0 < 10  # not the 60 s sleep, not the 30 s timeout


def test_rank_stuck_outside_an_operation_times_out_naming_it():
    port = free_port()
    procs = _workers(3, port, 2, "hang")  # rank 2 alive but never reaches the last barrier
    try:
        t0 = time.monotonic()
        res = _results({r: procs[r] for r in (0, 1)}, 15)
        for r in (0, 1):
            code, out, _ = res[r]
            assert code == 4, out
            assert "waited 2 s for rank 2 (host" in out and "2 of 3 ranks arrived" in out
        assert time.monotonic() - t0 < 2 + 8
    finally:
        procs[2].kill()
        procs[2].communicate()


def test_duplicate_rank_and_strangers_are_refused():
    port = free_port()
    procs = _workers(3, port, 8, "normal", ranks=[0, 1])
    twins = [procs[1], start([WORKER, "1", "3", "127.0.0.1", str(port), "tok", "8", "normal"])]
    time.sleep(0.3)
    try:  # a stranger speaking another protocol must not disturb the job
        with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
            s.sendall(b"GET / HTTP/1.0\r\n\r\n")
            s.recv(100)
    except OSError:
        pass
    end = time.monotonic() + 6
    while all(t.poll() is None for t in twins) and time.monotonic() < end:
        time.sleep(0.05)
    refused = next((t for t in twins if t.poll() is not None), None)
    assert refused is not None, "neither copy of rank 1 was refused"
    code, out, _ = finish(refused, 5)
    assert code == 6 and "rank 1 is already taken by host" in out, out
    kept = twins[1] if refused is twins[0] else twins[0]
    rest = _results({0: procs[0], 1: kept, **_workers(3, port, 8, "normal", ranks=[2])}, 15)
    assert [rest[r][0] for r in range(3)] == [0, 0, 0], rest


def test_format_ranks():
    assert format_ranks([5, 0, 1, 2, 7, 8]) == "0-2, 5, 7-8"
    assert format_ranks([]) == ""
