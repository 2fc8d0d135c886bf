#!/usr/bin/env python3
"""Several fake hosts on one GPU machine, each a host to NCCL and to ncclbench.

H fake hosts x G GPUs: fake host i is a network namespace with its own veth into a bridge
(address 10.99.0.<i+1>/24; the bridge lives in a namespace of its own, so the machine's
network is not touched) and a UTS namespace with its own host name (node<i>).  Its ranks
run there with NCCL_HOSTID=node<i> (NCCL's host hash), NCCL_SOCKET_IFNAME on its veth and
CUDA_VISIBLE_DEVICES = its G GPUs, so NCCL uses P2P/SHM inside a fake host and its socket
transport between them, over the veths.  NVLink SHARP is off in every process
(NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1): this is a
bench tool for the lent machines; ncclbench itself never sets them.

Launch: `env` (default) starts every rank here with RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR
(ncclbench's own TCP rendezvous, MASTER_ADDR = node0's veth address); `mpirun` runs the
ranks under Open MPI/MPICH with only the UTS namespace and NCCL_HOSTID per fake host: the
launcher's daemon talks to its ranks over loopback, which a network namespace would cut, so
under mpirun the fake hosts share the machine's network and cannot be shaped.

Shaping (`tc`): a fake host's NIC slowed = a tbf on its veth (egress) and on the bridge port
toward it (its ingress); one link slowed = an htb class on both ends' veths for traffic to
the other end's address, everything else at the base rate.  Sockets on one box are bound by
the CPUs and TCP, not by a line rate: judge shaped links against the rate set here.

`ip` and `tc`: the GPU image has no iproute2.  --iproute2 DIR (or NCCLBENCH_IPROUTE2) names a
folder from bench/fetch_iproute2.sh (.debs, unpacked here on first use with dpkg -x, or with
Python where dpkg is missing) or one already unpacked; ip/tc run with LD_LIBRARY_PATH set for
them alone (the ranks' environment never sees those libraries).

Bad input gives one line and what can still run runs: fewer GPUs than H x G, or a namespace
the machine refuses -> fewer fake hosts (said); a qdisc tc refuses -> that shaping is skipped
(said).

    python bench/fakehosts.py --hosts 2 --gpus-per-host 2 [--iproute2 DIR] [--out DIR] \\
        [--slow-host 1=2gbit] [--slow-link 0-1=2gbit] [--base-rate 4gbit] [--launch env|mpirun] \\
        -- ncclbench all_reduce -b 8 -e 128M -f 2
"""

from __future__ import annotations

import argparse
import glob
import io
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

NVLS_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
SUBNET = "10.99.0"
IPROUTE_ENV = "NCCLBENCH_IPROUTE2"


class SetupError(Exception):
    """Something the fake hosts need is missing: one line says what and what to do."""


def say(line: str) -> None:
    print(f"fakehosts: {line}", file=sys.stderr, flush=True)


# -- ip and tc ---------------------------------------------------------------------------------

def _unpack_deb(deb: str, dest: str) -> None:
    """`dpkg -x`, or the same with Python (a .deb is an ar archive holding data.tar.*)."""
    if shutil.which("dpkg"):
        subprocess.run(["dpkg", "-x", deb, dest], check=True, capture_output=True)
        return
    data = Path(deb).read_bytes()
    if not data.startswith(b"!<arch>\n"):
        raise SetupError(f"{deb} is not a .deb (no ar header)")
    pos = 8
    while pos + 60 <= len(data):
        name = data[pos:pos + 16].decode().strip().rstrip("/")
        size = int(data[pos + 48:pos + 58].decode().strip())
        body = data[pos + 60:pos + 60 + size]
        if name.startswith("data.tar"):
            if name.endswith(".zst"):
                raise SetupError(f"{deb}: data.tar.zst needs dpkg or zstd (not found)")
            with tarfile.open(fileobj=io.BytesIO(body)) as tar:
                tar.extractall(dest, filter="tar") if hasattr(tarfile, "data_filter") else tar.extractall(dest)
            return
        pos += 60 + size + (size & 1)
    raise SetupError(f"{deb}: no data.tar member")


@dataclass
class Tools:
    """`ip` and `tc`, and the LD_LIBRARY_PATH they alone need (None: the system's)."""

    ip: str
    tc: str
    libpath: str | None = None

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.libpath:
            env["LD_LIBRARY_PATH"] = self.libpath
        return env

    def run(self, tool: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        exe = self.ip if tool == "ip" else self.tc
        proc = subprocess.run([exe, *args], env=self.env(), capture_output=True, text=True, timeout=30)
        if check and proc.returncode != 0:
            raise subprocess.CalledProcessError(proc.returncode, [tool, *args], proc.stdout, proc.stderr)
        return proc

    def child_prefix(self) -> list[str]:
        """What goes between `ip netns exec NS` and a rank: the ranks get the environment
        they were given, not ip's libraries."""
        if not self.libpath:
            return []
        orig = os.environ.get("LD_LIBRARY_PATH")
        return ["env", f"LD_LIBRARY_PATH={orig}"] if orig else ["env", "-u", "LD_LIBRARY_PATH"]


def find_tools(folder: str | None = None) -> Tools:
    """ip/tc from `folder` (or $NCCLBENCH_IPROUTE2), else from PATH; SetupError when none runs."""
    folder = folder or os.environ.get(IPROUTE_ENV) or None
    if folder:
        root = Path(folder)
        if not root.is_dir():
            raise SetupError(f"--iproute2 {folder}: no such folder (make it with bench/fetch_iproute2.sh)")
        debs = sorted(glob.glob(str(root / "*.deb")))
        unpacked = root / "root"
        if debs and not (unpacked / "sbin" / "ip").exists() and not (unpacked / "usr" / "sbin" / "ip").exists():
            unpacked.mkdir(exist_ok=True)
            for deb in debs:
                _unpack_deb(deb, str(unpacked))
        bases = [unpacked, root] if debs else [root, unpacked]
        ip = tc = None
        for base in bases:
            for sub in ("sbin", "usr/sbin", "bin", "usr/bin"):
                ip = ip or (str(base / sub / "ip") if (base / sub / "ip").exists() else None)
                tc = tc or (str(base / sub / "tc") if (base / sub / "tc").exists() else None)
        if ip is None or tc is None:
            raise SetupError(f"no ip/tc under {folder} (make it with bench/fetch_iproute2.sh)")
        libdirs = sorted({os.path.dirname(p) for p in glob.glob(str(root / "**" / "*.so*"), recursive=True)})
        tools = Tools(ip, tc, ":".join(libdirs) or None)
    else:
        ip, tc = shutil.which("ip"), shutil.which("tc")
        if ip is None or tc is None:
            raise SetupError("no `ip`/`tc` here (this image has no iproute2): run bench/fetch_iproute2.sh DIR "
                             "where apt-get works, carry DIR, and pass --iproute2 DIR")
        tools = Tools(ip, tc)
    probe = tools.run("ip", "-V", check=False)
    if probe.returncode != 0:
        raise SetupError(f"{tools.ip} does not run: {(probe.stderr or probe.stdout).strip().splitlines()[-1:]}")
    return tools


# -- the fake hosts ----------------------------------------------------------------------------

@dataclass
class FakeHost:
    index: int
    name: str  # host name and NCCL_HOSTID: node<i>
    ns: str  # network namespace
    veth: str  # its NIC, inside `ns`
    port: str  # the bridge's end of the veth
    addr: str
    gpus: list[int]


@dataclass
class Job:
    """The ranks of one command across the fake hosts."""

    procs: list[subprocess.Popen]
    hosts: list[FakeHost]  # per rank
    out_dir: Path
    name: str
    started: float = field(default_factory=time.monotonic)

    def wait(self, timeout_s: float) -> list[int | None]:
        """Exit codes (None: still running at the deadline, then killed)."""
        deadline = self.started + timeout_s
        codes: list[int | None] = []
        for p in self.procs:
            try:
                codes.append(p.wait(max(0.1, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                codes.append(None)
        if any(c is None for c in codes):
            self.kill()
        return codes

    def kill(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                try:
                    p.kill()
                except OSError:
                    pass
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                pass

    def stdout(self, rank: int = 0) -> str:
        return (self.out_dir / f"{self.name}.rank{rank}.out").read_text(errors="replace")

    def stderr(self, rank: int = 0) -> str:
        return (self.out_dir / f"{self.name}.rank{rank}.err").read_text(errors="replace")


class FakeHosts:
    """H fake hosts x G GPUs (see the module docstring).  Use as a context manager: the
    namespaces go when it ends.  `hosts` holds the ones that could be made."""

    def __init__(self, nhosts: int, gpus_per_host: int, tools: Tools | None, *, ngpus: int | None = None,
                 subnet: str = SUBNET, netns: bool = True, share_gpus: bool = False,
                 log: Callable[[str], None] = say):
        self.asked, self.gpus_per_host, self.tools, self.netns = nhosts, gpus_per_host, tools, netns
        self.subnet, self.log = subnet, log
        self.tag = f"fh{os.getpid() % 10000}"
        self.bridge = f"{self.tag}br"
        self.hosts: list[FakeHost] = []
        self._made: list[str] = []
        fit = nhosts if ngpus is None else min(nhosts, ngpus // max(1, gpus_per_host))
        self.ngpus = ngpus if share_gpus else None
        if share_gpus and ngpus and fit < nhosts:
            # NCCL refuses two ranks on one GPU only within one host (same host hash), so fake
            # hosts may share GPUs: health's fleet statistics need >= 3 host pairs per round
            per = -(-nhosts * gpus_per_host // ngpus)
            self.log(f"{nhosts} fake hosts x {gpus_per_host} GPU(s) on {ngpus} GPUs: up to {per} fake hosts per GPU")
            fit = nhosts
        elif fit < nhosts:
            self.log(f"{nhosts} fake hosts x {gpus_per_host} GPU(s) need {nhosts * gpus_per_host} GPUs, "
                     f"{ngpus} found: making {fit}")
        self.fit = fit
        self.unshaped: list[str] = []  # why a shaping was skipped
        self._jobs = 0

    def __enter__(self) -> FakeHosts:
        self.up()
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    def _host(self, i: int) -> FakeHost:
        g = self.gpus_per_host
        gpus = [k % self.ngpus if self.ngpus else k for k in range(i * g, i * g + g)]
        return FakeHost(i, f"node{i}", f"{self.tag}n{i}", f"fhv{i}", f"{self.tag}p{i}", f"{self.subnet}.{i + 1}", gpus)

    def up(self) -> None:
        if not self.netns:
            self.hosts = [self._host(i) for i in range(self.fit)]
            return
        if self.tools is None:
            raise SetupError("network namespaces need ip (see --iproute2)")
        ip = self.tools.run
        try:
            ip("ip", "netns", "add", self.bridge)
            self._made.append(self.bridge)
            ip("ip", "-n", self.bridge, "link", "add", "br0", "type", "bridge")
            ip("ip", "-n", self.bridge, "link", "set", "br0", "up")
        except (subprocess.CalledProcessError, OSError) as e:
            self.log(f"the machine refuses network namespaces ({_why(e)}): no fake host made")
            return
        for i in range(self.fit):
            h = self._host(i)
            try:
                ip("ip", "netns", "add", h.ns)
                self._made.append(h.ns)
                ip("ip", "link", "add", h.veth, "type", "veth", "peer", "name", h.port)
                ip("ip", "link", "set", h.veth, "netns", h.ns)
                ip("ip", "link", "set", h.port, "netns", self.bridge)
                ip("ip", "-n", self.bridge, "link", "set", h.port, "master", "br0")
                ip("ip", "-n", self.bridge, "link", "set", h.port, "up")
                ip("ip", "-n", h.ns, "addr", "add", f"{h.addr}/24", "dev", h.veth)
                ip("ip", "-n", h.ns, "link", "set", h.veth, "up")
                ip("ip", "-n", h.ns, "link", "set", "lo", "up")
            except (subprocess.CalledProcessError, OSError) as e:
                self.log(f"fake host {h.name} could not be made ({_why(e)}): {len(self.hosts)} of {self.asked} "
                         "fake hosts made")
                break
            self.hosts.append(h)

    def down(self) -> None:
        if self.tools is None:
            return
        for name in reversed(self._made):
            self.tools.run("ip", "netns", "del", name, check=False)
        self._made.clear()

    # -- shaping -------------------------------------------------------------------------------
    def _tc(self, ns: str, *args: str) -> None:
        assert self.tools is not None
        self.tools.run("ip", "netns", "exec", ns, self.tools.tc, *args)

    def unshape(self) -> None:
        if self.tools is None or not self.netns:
            return
        for h in self.hosts:
            for ns, dev in ((h.ns, h.veth), (self.bridge, h.port)):
                self.tools.run("ip", "netns", "exec", ns, self.tools.tc, "qdisc", "del", "dev", dev, "root",
                               check=False)

    def shape(self, base_rate: str | None = None, slow_host: tuple[int, str] | None = None,
              slow_link: tuple[int, int, str] | None = None, burst: str = "4mbit") -> bool:
        """Every fake host's link at `base_rate` both ways (None: unshaped), one host's at its
        slow rate, or the traffic between one pair at its slow rate.  False (and one line) when
        tc refuses: the shaped checks are then skipped, the others still run."""
        if not self.netns or self.tools is None:
            self.unshaped.append("no network namespaces (mpirun launch): links cannot be shaped")
            self.log(self.unshaped[-1])
            return False
        self.unshape()
        try:
            for h in self.hosts:
                rate = slow_host[1] if slow_host and h.index == slow_host[0] else base_rate
                if slow_link and h.index in slow_link[:2]:
                    other = self.hosts[slow_link[1] if h.index == slow_link[0] else slow_link[0]]
                    self._tc(h.ns, "qdisc", "add", "dev", h.veth, "root", "handle", "1:", "htb", "default", "10")
                    self._tc(h.ns, "class", "add", "dev", h.veth, "parent", "1:", "classid", "1:10", "htb",
                             "rate", rate or "100gbit", "burst", burst)
                    self._tc(h.ns, "class", "add", "dev", h.veth, "parent", "1:", "classid", "1:20", "htb",
                             "rate", slow_link[2], "burst", burst)
                    self._tc(h.ns, "filter", "add", "dev", h.veth, "protocol", "ip", "parent", "1:", "prio", "1",
                             "u32", "match", "ip", "dst", f"{other.addr}/32", "flowid", "1:20")
                elif rate:
                    self._tc(h.ns, "qdisc", "add", "dev", h.veth, "root", "tbf", "rate", rate, "burst", burst,
                             "latency", "50ms")
                if rate:
                    self._tc(self.bridge, "qdisc", "add", "dev", h.port, "root", "tbf", "rate", rate, "burst",
                             burst, "latency", "50ms")
        except (subprocess.CalledProcessError, OSError) as e:
            self.unshaped.append(f"tc could not shape the links ({_why(e)}): shaped checks skipped")
            self.log(self.unshaped[-1])
            self.unshape()
            return False
        return True

    # -- ranks ---------------------------------------------------------------------------------
    def placement(self) -> list[tuple[FakeHost, int]]:
        """(fake host, local rank) per world rank: host-major, as a launcher fills nodes."""
        return [(h, lr) for h in self.hosts for lr in range(self.gpus_per_host)]

    def rank_env(self, host: FakeHost, local: int, rank: int, world: int, port: int,
                 extra: dict[str, str] | None = None) -> dict[str, str]:
        env = dict(os.environ)
        env.update(NVLS_OFF)
        env.update({"NCCL_HOSTID": host.name, "CUDA_VISIBLE_DEVICES": ",".join(map(str, host.gpus))})
        if self.netns:
            env.update({"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(local),
                        "LOCAL_WORLD_SIZE": str(self.gpus_per_host), "MASTER_ADDR": self.hosts[0].addr,
                        "MASTER_PORT": str(port), "NCCL_SOCKET_IFNAME": f"={host.veth}"})
        env.update(extra or {})
        return env

    def rank_cmd(self, host: FakeHost, argv: Sequence[str]) -> list[str]:
        """argv on `host`: its network namespace (env launch) and its own host name."""
        uts = ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', host.name, *argv]
        if not self.netns:
            return uts
        assert self.tools is not None
        return [self.tools.ip, "netns", "exec", host.ns, *self.tools.child_prefix(), *uts]

    def start(self, argv: Sequence[str], out_dir: str | Path, name: str, *, port: int | None = None,
              extra_env: dict[str, str] | None = None, per_rank_env: Callable[[int], dict[str, str]] | None = None,
              ) -> Job:
        """Every rank of `argv` (env launch), stdout/stderr to OUT/NAME.rank<r>.{out,err}."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        if port is None:  # a port of its own per job: a stopped or killed job's socket may linger
            self._jobs += 1
            port = 29611 + 2 * (self._jobs % 500)  # +1 is torchrun's, kept free
        place = self.placement()
        procs, hosts = [], []
        for r, (h, lr) in enumerate(place):
            env = self.rank_env(h, lr, r, len(place), port, {**(extra_env or {}), **(per_rank_env(r) if per_rank_env
                                                                                        else {})})
            if self.tools and self.tools.libpath:
                env["LD_LIBRARY_PATH"] = self.tools.libpath  # for `ip` itself; child_prefix resets it
            with open(out / f"{name}.rank{r}.out", "w") as fo, open(out / f"{name}.rank{r}.err", "w") as fe:
                procs.append(subprocess.Popen(self.rank_cmd(h, argv), env=env, stdout=fo, stderr=fe,
                                              stdin=subprocess.DEVNULL))
            hosts.append(h)
        (out / f"{name}.cmd").write_text(" ".join(shlex.quote(a) for a in argv) + "\n")
        return Job(procs, hosts, out, name)

    def mpirun_argv(self, argv: Sequence[str], out_dir: str | Path, mpirun: str = "mpirun",
                    extra_env: dict[str, str] | None = None) -> list[str]:
        """argv under mpirun, one rank per GPU, each wrapped into its fake host (UTS namespace,
        NCCL_HOSTID, its host's GPUs): the route that reaches nccl-tests binaries too."""
        wrapper = Path(out_dir) / "fakehost-rank.sh"
        g = self.gpus_per_host
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in {**NVLS_OFF, **(extra_env or {})}.items())
        wrapper.write_text(
            "#!/bin/sh\n# one rank of an mpirun job inside its fake host (bench/fakehosts.py)\n"
            "r=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-0}}\n"
            f"h=$((r / {g}))\n"
            f"first=$((h * {g}))\n"
            f"gpus=$(seq -s, $first $((first + {g} - 1)))\n"
            f"export NCCL_HOSTID=node$h CUDA_VISIBLE_DEVICES=$gpus {exports}\n"
            'exec unshare --uts sh -c \'hostname "$0" && exec "$@"\' node$h "$@"\n')
        wrapper.chmod(0o755)
        extra = ["--allow-run-as-root", "--oversubscribe"] if _is_open_mpi(mpirun) else []
        return [mpirun, *extra, "-np", str(len(self.hosts) * g), str(wrapper), *argv]


def _is_open_mpi(mpirun: str) -> bool:
    try:
        out = subprocess.run([mpirun, "--version"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "Open MPI" in out or "OpenRTE" in out


def _why(e: BaseException) -> str:
    text = getattr(e, "stderr", None) or str(e)
    return " ".join(str(text).split())[:200]


def gpu_count() -> int:
    """GPUs here (nvidia-smi -L; 0 without)."""
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


def _rate_arg(text: str, pair: bool) -> tuple:
    where, _, rate = text.partition("=")
    if not rate:
        raise argparse.ArgumentTypeError(f"{text!r}: expected {'I-J' if pair else 'I'}=RATE")
    if pair:
        a, _, b = where.partition("-")
        return int(a), int(b), rate
    return int(where), rate


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hosts", type=int, default=2)
    p.add_argument("--gpus-per-host", type=int, default=2)
    p.add_argument("--iproute2", default=None, help=f"folder from bench/fetch_iproute2.sh (or ${IPROUTE_ENV})")
    p.add_argument("--launch", choices=("env", "mpirun"), default="env")
    p.add_argument("--mpirun", default="mpirun")
    p.add_argument("--out", default="fakehosts-out", help="folder for every rank's stdout/stderr")
    p.add_argument("--base-rate", default=None, help="every fake host's link at RATE (tc syntax, e.g. 4gbit)")
    p.add_argument("--slow-host", type=lambda s: _rate_arg(s, False), default=None, metavar="I=RATE")
    p.add_argument("--slow-link", type=lambda s: _rate_arg(s, True), default=None, metavar="I-J=RATE")
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("--share-gpus", action="store_true",
                   help="more fake hosts than GPUs: hosts share GPUs round-robin (NCCL allows it across hosts)")
    p.add_argument("--cpu", action="store_true", help="no GPUs needed (CPU backend runs, tests)")
    p.add_argument("command", nargs=argparse.REMAINDER)
    a = p.parse_args(argv)
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not cmd:
        p.error("the command to run on every rank goes after --")
    ngpus = None if a.cpu else gpu_count()
    netns = a.launch == "env"
    try:
        tools = find_tools(a.iproute2) if netns else None
    except SetupError as e:
        say(str(e))
        return 6
    with FakeHosts(a.hosts, a.gpus_per_host, tools, ngpus=ngpus, netns=netns, share_gpus=a.share_gpus) as fh:
        if not fh.hosts:
            say("no fake host could be made: nothing to run")
            return 6
        if a.base_rate or a.slow_host or a.slow_link:
            fh.shape(a.base_rate, a.slow_host, a.slow_link)
        if netns:
            job = fh.start(cmd, a.out, "run")
            codes = job.wait(a.timeout)
            sys.stdout.write(job.stdout(0))
            for r, c in enumerate(codes):
                if c:
                    say(f"rank {r} ({job.hosts[r].name}) ended with {c}; its stderr: {a.out}/run.rank{r}.err")
            return max((c if c is not None else 4) for c in codes)
        Path(a.out).mkdir(parents=True, exist_ok=True)
        return subprocess.run(fh.mpirun_argv(cmd, a.out, a.mpirun), timeout=a.timeout).returncode


if __name__ == "__main__":
    sys.exit(main())
