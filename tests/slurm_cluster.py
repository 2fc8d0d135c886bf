"""A real single-node Slurm for the tests (not a test module): munged, slurmctld and
slurmd from Debian's slurm-wlm and munge, started on this machine with a minimal
slurm.conf in a temporary directory, on free ports, with a munge socket and key of
their own (nothing of the host's /etc/slurm or /etc/munge is read or touched), and
stopped at the end.

Where the programs are missing they are installed with apt-get when that can work
(root, apt-get present); otherwise the tests skip with the reason - except under
CI=true, where a missing Slurm fails the suite (CI installs it: scripts/run-tests.sh).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

PROGRAMS = ("munged", "slurmctld", "slurmd", "srun", "scontrol", "sinfo")
PACKAGES = ("slurm-wlm", "munge")
START_TIMEOUT_S = 30.0


def _missing() -> list[str]:
    return [p for p in PROGRAMS if shutil.which(p) is None and not Path("/usr/sbin", p).exists()]


def _unavailable(why: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"real Slurm needed in CI: {why} (scripts/run-tests.sh installs {' '.join(PACKAGES)} as root)")
    pytest.skip(why)


def ensure_installed() -> None:
    """slurm-wlm and munge present, installing them with apt-get where this can."""
    if not _missing():
        return
    if os.geteuid() != 0:
        _unavailable(f"needs root to install and run Slurm ({', '.join(_missing())} missing)")
    if shutil.which("apt-get") is None:
        _unavailable(f"{', '.join(_missing())} missing and no apt-get to install {' '.join(PACKAGES)}")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *PACKAGES]):
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            _unavailable(f"`{' '.join(cmd)}` failed: {(p.stderr or p.stdout).strip().splitlines()[-1:]}")
    if _missing():
        _unavailable(f"{', '.join(_missing())} still missing after installing {' '.join(PACKAGES)}")


def _sbin(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class SlurmCluster:
    root: Path
    node: str
    env: dict[str, str]
    procs: list[subprocess.Popen] = field(default_factory=list)

    def run(self, *cmd: str, timeout: float = 60.0, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(list(cmd), env=dict(self.env, **(env or {})), capture_output=True, text=True,
                              timeout=timeout)

    def node_state(self) -> tuple[str, str]:
        """(state, reason) of the node as `sinfo` prints them ("idle", "drained", ...)."""
        p = self.run("sinfo", "-h", "-N", "-n", self.node, "-o", "%T|%E")
        state, _, reason = p.stdout.strip().partition("|")
        return state, reason

    def wait_state(self, wanted: tuple[str, ...], timeout_s: float = 15.0) -> str:
        deadline = time.monotonic() + timeout_s
        state = ""
        while time.monotonic() < deadline:
            state = self.node_state()[0]
            if state in wanted:
                return state
            time.sleep(0.2)
        return state

    def logs(self) -> str:
        out = []
        for name in ("slurmctld.log", "slurmd.log", "munged.log"):
            path = self.root / "log" / name
            if path.exists():
                out.append(f"== {name}\n" + "\n".join(path.read_text().splitlines()[-15:]))
        return "\n".join(out)

    def stop(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
        for p in reversed(self.procs):
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=5)


def start(root: Path) -> SlurmCluster:
    """Write the configuration under `root` and start munged, slurmctld and slurmd."""
    ensure_installed()
    if (os.cpu_count() or 1) < 2:
        pytest.skip("the Slurm tests run 2 tasks on one node: need 2 CPUs")
    node = socket.gethostname().split(".")[0]  # what ncclbench health names this host
    for d in ("state", "spool", "log", "munge"):
        (root / d).mkdir(parents=True, exist_ok=True)
    root.chmod(0o755)
    (root / "munge").chmod(0o755)  # munged wants its socket's directory reachable by everyone
    key = root / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    sock = root / "munge" / "munge.socket"
    ctld_port, slurmd_port = _free_port(), _free_port()
    conf = root / "slurm.conf"
    conf.write_text(f"""\
ClusterName=ncclbench{os.getpid()}
SlurmctldHost={node}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={sock}
CredType=cred/munge
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
InactiveLimit=0
KillWait=2
MailProg=/bin/true
NodeName={node} NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN
PartitionName=debug Nodes={node} Default=YES MaxTime=INFINITE State=UP
""")
    env = dict(os.environ, SLURM_CONF=str(conf))
    for k in list(env):
        if k.startswith(("SLURM_", "SBATCH_", "SRUN_")) and k != "SLURM_CONF":
            del env[k]  # a test run inside a Slurm job must not talk to that cluster
    cluster = SlurmCluster(root, node, env)
    log = open(root / "log" / "daemons.out", "ab")
    try:
        cluster.procs.append(subprocess.Popen(
            [_sbin("munged"), "-F", "-f", f"--socket={sock}", f"--key-file={key}",
             f"--log-file={root}/log/munged.log", f"--pid-file={root}/munge/munged.pid",
             f"--seed-file={root}/munge/munged.seed"], stdout=log, stderr=log))
        _wait(lambda: sock.exists(), "munged's socket", cluster)
        cluster.procs.append(subprocess.Popen([_sbin("slurmctld"), "-D", "-i"], env=env, stdout=log, stderr=log))
        cluster.procs.append(subprocess.Popen([_sbin("slurmd"), "-D", "-N", node], env=env, stdout=log, stderr=log))
        _wait(lambda: cluster.node_state()[0] == "idle", "the node to come up idle", cluster)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _wait(ready, what: str, cluster: SlurmCluster) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if any(p.poll() is not None for p in cluster.procs):
            break
        if ready():
            return
        time.sleep(0.2)
    raise RuntimeError(f"Slurm did not start: waiting for {what}\n{cluster.logs()}")
