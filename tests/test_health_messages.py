"""health.runtime.messages: the scan's protocol is declared once.  Every kind has its class, every
message survives encode -> decode (and the real channel), the wire form is the tuples the
coordinator and the ranks exchanged before the protocol was typed (so ranks and coordinators of
either side of that change still understand each other), and no runtime module spells a tag."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from ncclbench.health.runtime.control_channel import Coordinator, RankInfo, RankLink
from ncclbench.health.runtime.group_measure import GroupSpec
from ncclbench.health.runtime.messages import (
    MESSAGES,
    Dead,
    End,
    Facts,
    GroupJob,
    Kind,
    Leave,
    Message,
    Result,
    Setup,
    Stuck,
    Tick,
    Uid,
    decode,
)
from ncclbench.launch import wire

RUNTIME = Path(__file__).resolve().parents[1] / "src" / "ncclbench" / "health" / "runtime"
SPEC = GroupSpec(bw_bytes=1 << 20)
PROGRESS = {"section": "bw", "ops_done": 3, "ops_next": 9, "ops_total": 19, "algbw_bytes": 1048576.0, "nranks": 2,
            "elapsed_s": 4.5, "last_chunk_s": 4.1}

# one message of every kind, and the tuple it was on the wire before the protocol was typed
EXAMPLES: dict[Kind, tuple[Message, tuple]] = {
    Kind.SETUP: (Setup(1, False), ("setup", {"slot": 1, "topology": False})),
    Kind.FACTS: (Facts({"backend": "nccl", "device": 0, "pci": "0000:18:00.0"}),
                 ("facts", {"backend": "nccl", "device": 0, "pci": "0000:18:00.0"})),
    Kind.GROUP: (GroupJob(3, "pairs r2", 1, (4, 7), SPEC, 12.5, (0, 0)),
                 ("group", {"round": 3, "name": "pairs r2", "group": 1, "members": [4, 7], "spec": SPEC,
                            "timeout_s": 12.5, "slots": [0, 0]})),
    Kind.TICK: (Tick(3), ("tick", 3)),
    Kind.UID: (Uid(3, 1, b"\x01" * 128), ("uid", 3, 1, b"\x01" * 128)),
    Kind.STUCK: (Stuck(3, 1, "creating the group's communicator", PROGRESS),
                 ("stuck", 3, 1, "creating the group's communicator", PROGRESS)),
    Kind.RESULT: (Result(3, 1, {"bw_us": 100.0, "lat_us": 20.0, "wrong": 0, "nranks": 2}),
                  ("result", 3, 1, {"bw_us": 100.0, "lat_us": 20.0, "wrong": 0, "nranks": 2})),
    Kind.END: (End(8, Leave.ABORT), ("end", 8, "abort")),
    Kind.DEAD: (Dead(), ("dead",)),
}


def test_every_kind_has_one_message_class():
    assert sorted(cls.KIND.value for cls in MESSAGES) == sorted(k.value for k in Kind)
    assert set(EXAMPLES) == set(Kind)


@pytest.mark.parametrize("kind", list(Kind), ids=lambda k: k.value)
def test_every_kind_round_trips_in_the_wire_form_it_had(kind):
    msg, before = EXAMPLES[kind]
    assert msg.KIND is kind
    assert msg.encode() == before
    assert wire.dumps(msg.encode()) == wire.dumps(before)  # the same bytes on the wire
    assert decode(before) == msg
    assert decode(wire.loads_trusted(wire.dumps(msg.encode()))) == msg


@pytest.mark.parametrize("how", list(Leave))
def test_every_way_to_leave_round_trips(how):
    assert decode(End(4, how).encode()) == End(4, how)
    assert wire.dumps(End(4, how).encode()) == wire.dumps(("end", 4, how.value))
    assert decode(("end", 0, how.value)).how is how and how == how.value


def test_the_progress_a_rank_did_not_send_is_none():
    assert decode(("stuck", 2, 0, "measuring")) == Stuck(2, 0, "measuring", None)
    failed = decode(("result", 2, 0, {"error": "gave up at the deadline: x", "progress": PROGRESS}))
    assert isinstance(failed, Result) and failed.error == "gave up at the deadline: x" and failed.progress == PROGRESS
    ok = EXAMPLES[Kind.RESULT][0]
    assert isinstance(ok, Result) and ok.error is None and ok.progress is None


@pytest.mark.parametrize("raw", [("hello", 1), ("result", 1), ("end", 0, "vanish"), ("uid", "x", 0, b""), (), [],
                                 "end", None, (["setup"], {}), ("setup", {"topology": True})])
def test_what_this_version_cannot_read_decodes_to_none(raw):
    assert decode(raw) is None


def test_every_kind_crosses_the_channel_both_ways():
    coord = Coordinator(1, "t", bind="127.0.0.1")
    link = RankLink("127.0.0.1", coord.port, "t", RankInfo(0, "h0", 1), timeout_s=10)
    try:
        coord.wait_joined(10)
        for kind, (msg, _) in EXAMPLES.items():
            if kind is Kind.DEAD:
                continue  # the coordinator's own note of a closed connection
            assert coord.send(0, msg) and link.recv(5) == msg
            link.send(msg)
            assert coord.receive(5) == (0, msg)
        wire.send_frame(link.sock, wire.KIND_PICKLE, wire.dumps(("hello", 1)))  # another version's kind: dropped
        link.send(Tick(9))
        assert coord.receive(5) == (0, Tick(9))
    finally:
        link.close()
        coord.close()


def _tags() -> set[str]:
    return {k.value for k in Kind} | {h.value for h in Leave}


def test_no_runtime_module_spells_a_tag():
    """Only messages.py knows the wire's tags: a string constant equal to a kind's tag or a way to
    leave anywhere else in health/runtime is a message sent or read around the declaration."""
    found = []
    for path in sorted(RUNTIME.glob("*.py")):
        if path.name == "messages.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in _tags():
                found.append(f"{path.name}:{node.lineno}: {node.value!r}")
    assert not found, "tags outside health/runtime/messages.py:\n" + "\n".join(found)
