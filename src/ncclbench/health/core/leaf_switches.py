"""Which leaf switch each host hangs off: `ncclbench health --topology FILE`.

At scale no cable joins two hosts: traffic between hosts under different leaf switches
crosses leaf -> spine -> leaf, so a pair that is slow while both its hosts are fast
elsewhere is either a slow NIC cable (the NIC's fault, found as such) or a slow path
between the two leaves (a leaf uplink, a spine port), which every host pair crossing
between those leaves shares.  Told the leaves, the pairs phase crosses every leaf pair
(`scan_schedule.leaf_rounds`) and the whole-phase model judges each path
(`pair_model`, "path leaf3<->leaf7").

The file is read in one of three formats, told apart by its content:

* text: one `HOST LEAF` per line (any whitespace between), `#` starts a comment, blank
  lines are skipped;
* JSON: one object, `{"HOST": "LEAF", ...}`;
* Slurm's topology.conf (topology/tree): `SwitchName=leaf1 Nodes=node[01-32]` - a switch
  with `Nodes=` is a leaf; `Switches=` (the switches above the leaves) and `LinkSpeed=` are
  read and not needed; parameter names in any case, `#` comments, a line ending in `\\`
  continues on the next, as Slurm reads it.

HOST may be a Slurm hostlist expression in every format (`node[01-32] leaf1`), expanded by
Slurm's rules (`expand_hostlist`).  A host of the scan matches an entry of its own name,
else one whose first label is its name (node01.cluster for node01): the ranks report short
host names (`live_rounds.host_name`).  Bad input is one line naming the file and what is
wrong (exit 255, `ArgumentError`), never a traceback; so is a host of the scan that the file
does not place (`check_hosts`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ...core.errors import ArgumentError
from ...core.hostlist import HostlistError, expand_hostlist
from .scan_schedule import Leaves

# Slurm's own limits (src/common/hostlist.c): more hosts in one range is taken for an error


class TopologyError(ValueError):
    """What is wrong with a topology text: one line, without the file's name."""


@dataclass(frozen=True)
class Topology:
    """host name -> leaf switch name, as read from `source` (the file and its format)."""

    leaf: Mapping[str, str]
    source: str = ""

    def leaf_of(self, host: str) -> str | None:
        """The leaf of a host of the scan: its own entry, else the one entry whose first label is
        its name (None where there is none, or two such entries disagree)."""
        if host in self.leaf:
            return self.leaf[host]
        found = {leaf for name, leaf in self.leaf.items() if name.split(".", 1)[0] == host}
        return found.pop() if len(found) == 1 else None

    def missing(self, hosts: Iterable[str]) -> list[str]:
        """The hosts the file places under no leaf."""
        return [h for h in hosts if self.leaf_of(h) is None]

    def leaves_for(self, hosts: Sequence[str]) -> Leaves:
        """Each host's leaf, as the scan numbers them (leaves in the order their first host comes)."""
        names: dict[str, int] = {}
        of = []
        for h in hosts:
            leaf = self.leaf_of(h)
            if leaf is None:
                raise ValueError(f"host {h} is under no leaf of {self.source or 'the topology'}")
            of.append(names.setdefault(leaf, len(names)))
        return Leaves(tuple(names), tuple(of), self.source)


def check_hosts(topology: Topology, hosts: Sequence[str]) -> None:
    """Every host of the scan must be under a leaf of the file: one line naming the missing ones (exit 255)."""
    missing = topology.missing(hosts)
    if missing:
        shown = ", ".join(missing[:6]) + (", ..." if len(missing) > 6 else "")
        raise ArgumentError(f"health: --topology {topology.source}: {len(missing)} host(s) of the scan are under no "
                            f"leaf in it ({shown}); every host of the scan needs its leaf switch")


def load_topology(path: str) -> Topology:
    """Read and parse a topology file; any problem is one ArgumentError line naming the file."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ArgumentError(f"health: cannot read --topology {path}: {exc}") from None
    try:
        leaf, kind = parse_topology(text)
    except TopologyError as exc:
        raise ArgumentError(f"health: --topology {path}: {exc}") from None
    return Topology(leaf, f"{path} ({kind})")


def parse_topology(text: str) -> tuple[dict[str, str], str]:
    """(host -> leaf, the format's name) of a topology text; TopologyError says what is wrong."""
    stripped = text.lstrip()
    if stripped.startswith("{") or stripped.startswith("["):
        leaf, kind = _parse_json(text), "JSON"
    elif any(_is_slurm(line) for line in _lines(text)):
        leaf, kind = _parse_slurm(text), "Slurm topology.conf"
    else:
        leaf, kind = _parse_text(text), "HOST LEAF lines"
    if not leaf:
        raise TopologyError("no host in it (expected HOST LEAF lines, a JSON object {\"HOST\": \"LEAF\"}, or "
                            "Slurm topology.conf SwitchName=... Nodes=... lines)")
    return leaf, kind


def _lines(text: str) -> list[tuple[int, str]]:
    """(line number, text without its comment) of the non-blank lines; a trailing backslash joins
    the next line (Slurm's continuation)."""
    out: list[tuple[int, str]] = []
    pending, start = "", 0
    for i, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].rstrip()
        if not pending:
            start = i
        if line.endswith("\\"):
            pending += line[:-1]  # joined as Slurm joins it: the next line follows at once
            continue
        line, pending = pending + line, ""
        if line.strip():
            out.append((start, line.strip()))
    if pending.strip():
        out.append((start, pending.strip()))
    return out


def _is_slurm(item: tuple[int, str]) -> bool:
    first = item[1].split(None, 1)[0].lower()
    return first.startswith(("switchname=", "blockname="))


def _place(leaf: dict[str, str], where: dict[str, int], hosts: Iterable[str], name: str, line: int) -> None:
    """Put hosts under leaf `name`; a host already under another leaf is an error."""
    for h in hosts:
        old = leaf.get(h)
        if old is not None and old != name:
            raise TopologyError(f"line {line}: host {h} is under leaf {old} (line {where[h]}) and under {name}")
        leaf[h] = name
        where.setdefault(h, line)


def _parse_text(text: str) -> dict[str, str]:
    leaf: dict[str, str] = {}
    where: dict[str, int] = {}
    for i, line in _lines(text):
        fields = line.split()
        if len(fields) != 2:
            raise TopologyError(f"line {i}: expected 'HOST LEAF' (two fields), not {line[:80]!r}")
        _place(leaf, where, _expand(fields[0], i), fields[1], i)
    return leaf


def _parse_json(text: str) -> dict[str, str]:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TopologyError(f"not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise TopologyError(f"JSON must be one object {{\"HOST\": \"LEAF\", ...}}, not a {type(doc).__name__}")
    leaf: dict[str, str] = {}
    where: dict[str, int] = {}
    for k, (host, name) in enumerate(doc.items(), 1):
        if not isinstance(name, str) or not name.strip():
            raise TopologyError(f"host {host!r}: its leaf must be a non-empty string, not {name!r}")
        _place(leaf, where, _expand(host, k, what="entry"), name.strip(), k)
    return leaf


def _parse_slurm(text: str) -> dict[str, str]:
    leaf: dict[str, str] = {}
    where: dict[str, int] = {}
    for i, line in _lines(text):
        params: dict[str, str] = {}
        for field in line.split():
            key, eq, value = field.partition("=")
            if not eq or not key:
                raise TopologyError(f"line {i}: expected Key=Value parameters, not {field[:60]!r}")
            params[key.lower()] = value
        if "blockname" in params:
            raise TopologyError(f"line {i}: BlockName= (topology/block) names no leaf switch; give SwitchName= "
                                "lines (topology/tree) or HOST LEAF lines")
        name = params.get("switchname")
        if not name:
            raise TopologyError(f"line {i}: a topology.conf line starts with SwitchName=NAME, not {line[:60]!r}")
        if "nodes" in params:
            _place(leaf, where, _expand(params["nodes"], i), name, i)
    return leaf


def _expand(expr: str, line: int, what: str = "line") -> list[str]:
    try:
        hosts = expand_hostlist(expr)
    except HostlistError as exc:
        raise TopologyError(f"{what} {line}: {exc}") from None
    if not hosts:
        raise TopologyError(f"{what} {line}: no host in {expr!r}")
    return hosts


