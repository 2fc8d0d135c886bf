"""The health scan's protocol: every message between the coordinator and the ranks, declared once.

On the wire (`control_channel`: `launch.wire` frames, pickled once both ends proved they hold
the job's token) a message is a tuple whose first item is its kind's tag; each class below
says its tuple and turns into it (`encode`) and back (`decode`).  The channel sends and
receives only these classes, so no other module spells a tag.

Coordinator -> rank:

    SETUP   ("setup", {"slot", "topology"})       before the scan: the rank's GPU slot on its host,
                                                    and whether it reads the host's topology
    GROUP   ("group", {"round", "name", "group", "members", "spec", "timeout_s", "slots"})
                                                    measure this group of this round
    TICK    ("tick", round)                        idle this round: the coordinator lives
    UID     ("uid", round, group, uid)             the group's NCCL unique id, relayed
    END     ("end", code, how)                     the scan is over: leave with `code`, `how` (Leave)

Rank -> coordinator:

    FACTS   ("facts", {...})                       the answer to SETUP: backend, GPU, PCI address,
                                                    NCCL settings, topology, or {"error", "code"}
    UID     ("uid", round, group, uid)             a group's first member's NCCL unique id, to relay
    STUCK   ("stuck", round, group, stage, progress)  the rank's watchdog: inside a call that cannot
                                                    be abandoned (`stage`), how far it got
    RESULT  ("result", round, group, figures)      the group's figures (group_measure.measure_sizes),
                                                    or {"error", "progress"}

Inside the coordinator, never on the wire:

    DEAD    ("dead",)                              the rank's connection closed (control_channel)

A tuple of a kind this version does not know, or not of its kind's shape (a peer of another
version), decodes to None and is dropped where it arrives.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, ClassVar, TypeAlias

from .group_measure import GroupSpec

PROTO = "ncclbench-health/1"  # what the coordinator says it speaks, first thing on a connection


class Kind(str, Enum):
    """A message's kind: its value is the tag that starts its tuple on the wire."""

    SETUP = "setup"
    FACTS = "facts"
    GROUP = "group"
    TICK = "tick"
    UID = "uid"
    STUCK = "stuck"
    RESULT = "result"
    END = "end"
    DEAD = "dead"


class Leave(str, Enum):
    """How a rank leaves when the scan ends (END's `how`): MPI_Finalize and return, exit at once
    (after an error, or where a rank stopped and finalizing would wait for it), or end the whole
    job (one live rank where a rank stopped: the launcher then ends the stopped one too)."""

    FINALIZE = "finalize"
    EXIT = "exit"
    ABORT = "abort"


@dataclass(frozen=True)
class Setup:
    """Coordinator -> rank, before the scan: its GPU slot, and whether to read the host's topology."""

    KIND: ClassVar[Kind] = Kind.SETUP
    slot: int
    topology: bool

    def encode(self) -> tuple[Any, ...]:
        return (self.KIND.value, {"slot": self.slot, "topology": self.topology})

    @classmethod
    def from_wire(cls, raw: tuple[Any, ...]) -> Setup:
        return cls(int(raw[1]["slot"]), bool(raw[1].get("topology")))


@dataclass(frozen=True)
class Facts:
    """Rank -> coordinator: the answer to Setup (`coordinate.apply_facts` reads it)."""

    KIND: ClassVar[Kind] = Kind.FACTS
    answer: dict[str, Any]

    def encode(self) -> tuple[Any, ...]:
        return (self.KIND.value, self.answer)

    @classmethod
    def from_wire(cls, raw: tuple[Any, ...]) -> Facts:
        return cls(dict(raw[1]))


@dataclass(frozen=True)
class GroupJob:
    """Coordinator -> rank: measure group `group` (its index in the round) of round `round_no`
    (`name`) with `members` (world ranks), each on its GPU slot `slots[i]`, by `timeout_s`."""

    KIND: ClassVar[Kind] = Kind.GROUP
    round_no: int
    name: str
    group: int
    members: tuple[int, ...]
    spec: GroupSpec
    timeout_s: float
    slots: tuple[int, ...]

    def encode(self) -> tuple[Any, ...]:
        return (self.KIND.value, {"round": self.round_no, "name": self.name, "group": self.group,
                                  "members": list(self.members), "spec": self.spec, "timeout_s": self.timeout_s,
                                  "slots": list(self.slots)})

    @classmethod
    def from_wire(cls, raw: tuple[Any, ...]) -> GroupJob:
        job = raw[1]
        return cls(int(job["round"]), str(job["name"]), int(job["group"]), tuple(job["members"]), job["spec"],
                   float(job["timeout_s"]), tuple(job["slots"]))


@dataclass(frozen=True)
class Tick:
    """Coordinator -> a rank idle in round `round_no`: the coordinator lives."""

    KIND: ClassVar[Kind] = Kind.TICK
    round_no: int

    def encode(self) -> tuple[Any, ...]:
        return (self.KIND.value, self.round_no)

    @classmethod
    def from_wire(cls, raw: tuple[Any, ...]) -> Tick:
        return cls(int(raw[1]))


@dataclass(frozen=True)
class Uid:
    """An NCCL group's unique id: from its first member to the coordinator, which relays it to
    the group's other members."""

    KIND: ClassVar[Kind] = Kind.UID
    round_no: int
    group: int
    uid: bytes

    def encode(self) -> tuple[Any, ...]:
        return (self.KIND.value, self.round_no, self.group, self.uid)

    @classmethod
    def from_wire(cls, raw: tuple[Any, ...]) -> Uid:
        return cls(int(raw[1]), int(raw[2]), bytes(raw[3]))


@dataclass(frozen=True)
class Stuck:
    """Rank -> coordinator, from the rank's watchdog: still inside `stage` (a call that cannot be
    abandoned) past its group's deadline; `progress`: how far it got (group_measure.Progress),
    None from a rank that did not say."""

    KIND: ClassVar[Kind] = Kind.STUCK
    round_no: int
    group: int
    stage: str
    progress: dict[str, Any] | None = None

    def encode(self) -> tuple[Any, ...]:
        return (self.KIND.value, self.round_no, self.group, self.stage, self.progress)

    @classmethod
    def from_wire(cls, raw: tuple[Any, ...]) -> Stuck:
        progress = raw[4] if len(raw) > 4 and isinstance(raw[4], dict) else None
        return cls(int(raw[1]), int(raw[2]), str(raw[3]), progress)


@dataclass(frozen=True)
class Result:
    """Rank -> coordinator: this rank's figures for its group (group_measure.measure_sizes), or
    {"error": why, "progress": how far it got} where it gave up."""

    KIND: ClassVar[Kind] = Kind.RESULT
    round_no: int
    group: int
    figures: dict[str, Any]

    @property
    def error(self) -> str | None:
        """Why the rank gave up on its group; None where it sent figures."""
        return str(self.figures["error"]) if "error" in self.figures else None

    @property
    def progress(self) -> dict[str, Any] | None:
        """How far a rank that gave up got (group_measure.Progress.to_json), where it said."""
        p = self.figures.get("progress")
        return p if isinstance(p, dict) else None

    def encode(self) -> tuple[Any, ...]:
        return (self.KIND.value, self.round_no, self.group, self.figures)

    @classmethod
    def from_wire(cls, raw: tuple[Any, ...]) -> Result:
        return cls(int(raw[1]), int(raw[2]), dict(raw[3]))


@dataclass(frozen=True)
class End:
    """Coordinator -> rank: the scan is over; leave with exit code `code`, as `how` says."""

    KIND: ClassVar[Kind] = Kind.END
    code: int
    how: Leave = Leave.FINALIZE

    def encode(self) -> tuple[Any, ...]:
        return (self.KIND.value, int(self.code), self.how.value)

    @classmethod
    def from_wire(cls, raw: tuple[Any, ...]) -> End:
        return cls(int(raw[1]), Leave(str(raw[2])))


@dataclass(frozen=True)
class Dead:
    """The coordinator's reader of a rank saw its connection close: the rank died."""

    KIND: ClassVar[Kind] = Kind.DEAD

    def encode(self) -> tuple[Any, ...]:
        return (self.KIND.value,)

    @classmethod
    def from_wire(cls, raw: tuple[Any, ...]) -> Dead:
        return cls()


Message: TypeAlias = Setup | Facts | GroupJob | Tick | Uid | Stuck | Result | End | Dead

MESSAGES: tuple[type[Message], ...] = (Setup, Facts, GroupJob, Tick, Uid, Stuck, Result, End, Dead)
_BY_TAG: dict[str, type[Message]] = {cls.KIND.value: cls for cls in MESSAGES}


def decode(raw: object) -> Message | None:
    """The message a wire tuple carries; None for a kind this version does not know or a tuple
    not of its kind's shape."""
    if not isinstance(raw, tuple) or not raw or not isinstance(raw[0], str):
        return None
    cls = _BY_TAG.get(raw[0])
    if cls is None:
        return None
    try:
        return cls.from_wire(raw)
    except (IndexError, KeyError, TypeError, ValueError, AttributeError):
        return None
