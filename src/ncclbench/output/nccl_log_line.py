"""One line of NCCL's debug log: its prefix taken apart, the message kept whole.

NCCL builds every log line in a 1024-byte buffer (`src/debug.cc`,
`ncclDebugLog`, every tag v2.18.1-1 .. v2.30.7-1) as

    [timestamp] host:pid:tid [cudaDev] NCCL INFO <message>
    [timestamp] host:pid:tid [cudaDev] file.cc:line NCCL WARN <message>
    [timestamp] host:pid:tid [cudaDev] <ms> file.cc:line NCCL TRACE <message>
    host:pid:tid NCCL CALL <message>

The timestamp exists from 2.26 (`NCCL_DEBUG_TIMESTAMP_FORMAT`, default
`[%F %T] `, applied to WARN only unless NCCL_DEBUG_TIMESTAMP_LEVELS says
otherwise); 2.30 adds `(function)` after WARN's `file:line`.  WARN lines start
with an extra newline.  A message longer than the buffer is cut at 1023
characters.  `NCCL_DEBUG=VERSION` prints `NCCL version ...` with no prefix.

The prefix is searched for anywhere in the line, not only at its start: what
stands before it is a timestamp, a launcher's tag, or -- when NCCL and the
program share one stdout -- the start of a table row the log line was glued
to (`LogLine.before`).  The host field of such a glued line may have picked
up the row's last characters; `output.demux` resolves that with the host
names of the unglued lines.

It lives with the output readers (below `explain`) because both the import
demuxer (`output.demux`, which lifts NCCL's lines out of a table) and the
NCCL log reader (`explain.nccl_log`) recognise lines with it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

NCCL_LINE_MAX = 1023  # characters before the newline when NCCL truncated the line

_HOST = r"(?P<host>[^\s:\[\]]+):(?P<pid>\d+):(?P<tid>\d+) "
_INFO = re.compile(_HOST + r"\[(?P<dev>-?\d+)\] NCCL INFO ?(?P<msg>.*)$")
_WARN = re.compile(_HOST + r"\[(?P<dev>-?\d+)\] (?P<where>\S+:\d+)(?: \([^)]*\))? NCCL WARN ?(?P<msg>.*)$")
_TRACE = re.compile(_HOST + r"\[(?P<dev>-?\d+)\] [-\d.]+ (?P<where>\S+:\d+) NCCL TRACE ?(?P<msg>.*)$")
_CALL = re.compile(_HOST + r"NCCL CALL ?(?P<msg>.*)$")
_VERSION_ONLY = re.compile(r"^(?P<before>(?:\[[^\]]*\] ?)?)(?P<msg>NCCL version \S+.*)$")
_STAMP = re.compile(r"\[[^\]]*\] ?$")
_LEVELS = (("INFO", _INFO), ("WARN", _WARN), ("TRACE", _TRACE), ("CALL", _CALL))


@dataclass(frozen=True)
class LogLine:
    """A line NCCL wrote: where from, at which level, and the message."""

    level: str  # INFO / WARN / TRACE / CALL / VERSION
    msg: str
    host: str | None = None
    pid: int | None = None
    tid: int | None = None
    dev: int | None = None
    before: str = ""  # text in front of the prefix (timestamp, tag, glued row text)
    truncated: bool = False  # the line is as long as NCCL's buffer allows: probably cut

    @property
    def source(self) -> tuple[str | None, int | None]:
        """(host, pid): one process's log stream."""
        return self.host, self.pid


def read_log_line(line: str) -> LogLine | None:
    """The NCCL log line in `line` (prefix anywhere in it), or None if there is none."""
    line = line.rstrip("\r\n")
    if "NCCL " not in line:
        return None
    if " NCCL " in line:
        for level, regex in _LEVELS:
            if f"NCCL {level}" not in line:
                continue
            m = regex.search(line)
            if m:
                g = m.groupdict()
                before = line[:m.start()]
                stamp = _STAMP.search(before)  # NCCL's own timestamp counts towards its buffer
                written = len(line) - m.start() + (len(stamp.group(0)) if stamp else 0)
                return LogLine(
                    level=level, msg=g["msg"], host=g["host"], pid=int(g["pid"]), tid=int(g["tid"]),
                    dev=int(g["dev"]) if g.get("dev") is not None else None,
                    before=before, truncated=written >= NCCL_LINE_MAX)
    m = _VERSION_ONLY.match(line)
    if m:
        return LogLine(level="VERSION", msg=m.group("msg"), before=m.group("before"))
    return None


def is_log_line(line: str) -> bool:
    return read_log_line(line) is not None


# misc/param.cc "%s set by environment to %lld." (integers, with a dot) and many
# "NCCL_X set by environment to %s"; net_ib.cc / socket.cc "NCCL_IB_HCA set to %s",
# "NCCL_SOCKET_IFNAME set to %s" (ENV subsystem, every tag v2.18.6-1 .. v2.30.7-1).
ENV_SET = re.compile(r"^(?P<key>NCCL_\w+) set (?:by environment )?to (?P<value>.*?)\s*$")


def env_setting(msg: str) -> tuple[str, str] | None:
    """(name, value) of an INFO message saying NCCL read a variable, or None.  Integers lose
    the "." misc/param.cc prints after them."""
    m = ENV_SET.match(msg)
    if not m:
        return None
    value = m.group("value")
    if value.endswith(".") and value[:-1].lstrip("-").isdigit():
        value = value[:-1]
    return m.group("key"), value


def env_settings(lines: list[str]) -> dict[str, str]:
    """The NCCL_* variables NCCL said it read, from raw log lines (the first value of each)."""
    out: dict[str, str] = {}
    for raw in lines:
        ln = read_log_line(raw)
        if ln is not None and ln.level == "INFO" and (kv := env_setting(ln.msg)) is not None:
            out.setdefault(*kv)
    return out
