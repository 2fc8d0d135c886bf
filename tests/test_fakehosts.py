"""bench/fakehosts.py on the CPU: fake hosts in network namespaces, ncclbench's env launch
across them, shaping with tc, and the bad inputs (too few GPUs, no ip, a refused qdisc)."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
from launch_helpers import child_env, free_port
from netns_hosts import skip_or_fail, unavailable_reason

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("fakehosts", ROOT / "bench" / "fakehosts.py")
fakehosts = importlib.util.module_from_spec(spec)
sys.modules["fakehosts"] = fakehosts
spec.loader.exec_module(fakehosts)

pytestmark = pytest.mark.netns


@pytest.fixture
def tools():
    reason = unavailable_reason()
    if reason:
        skip_or_fail(reason)
    return fakehosts.find_tools()


def _qdiscs(fh, host):
    return fh.tools.run("ip", "netns", "exec", host.ns, fh.tools.tc, "qdisc", "show", "dev", host.veth).stdout


def test_env_launch_across_fake_hosts_makes_three_hosts_with_a_virtual_nic_each(tools, tmp_path):
    lines = []
    with fakehosts.FakeHosts(3, 1, tools, log=lines.append) as fh:
        assert [h.name for h in fh.hosts] == ["node0", "node1", "node2"] and not lines
        job = fh.start([sys.executable, "-m", "ncclbench", "preflight"], tmp_path, "pre", port=free_port(),
                       extra_env={k: v for k, v in child_env(NCCLBENCH_NO_STORE="1").items() if k == "PYTHONPATH"})
        codes = job.wait(60)
        out = job.stdout(0)
        assert codes == [0, 0, 0], (out, job.stderr(0), job.stderr(1))
        assert "3 process(es) on 3 host(s); launcher: RANK/WORLD_SIZE environment" in out
        for i in range(3):
            assert f"# Topology node{i}:" in out and f"NICs: virtual fhv{i} (speed unknown) up" in out
        # per-host settings differ between hosts, as on real ones: no warning for them
        assert "NCCL_HOSTID differs" not in out and "NCCL_SOCKET_IFNAME differs" not in out
        assert job.hosts[2].name == "node2"
    gone = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert fh.tag not in gone  # every namespace removed


def test_shaping_one_host_one_link_and_a_qdisc_tc_refuses(tools):
    lines = []
    with fakehosts.FakeHosts(3, 1, tools, log=lines.append) as fh:
        assert fh.shape("400mbit", slow_host=(1, "200mbit"))
        assert "rate 200Mbit" in _qdiscs(fh, fh.hosts[1]) and "rate 400Mbit" in _qdiscs(fh, fh.hosts[0])
        assert fh.shape("400mbit", slow_link=(0, 2, "100mbit"))
        q0 = _qdiscs(fh, fh.hosts[0])
        assert "htb" in q0 and "htb" not in _qdiscs(fh, fh.hosts[1])
        cls = fh.tools.run("ip", "netns", "exec", fh.hosts[2].ns, fh.tools.tc, "class", "show", "dev",
                           fh.hosts[2].veth).stdout
        assert "rate 100Mbit" in cls and "rate 400Mbit" in cls
        assert not lines
        assert fh.shape("banana") is False  # tc refuses: one line, nothing left half-shaped
        assert len(lines) == 1 and lines[0].startswith("tc could not shape the links (") and "\n" not in lines[0]
        assert "tbf" not in _qdiscs(fh, fh.hosts[0]) and "htb" not in _qdiscs(fh, fh.hosts[0])


def test_too_few_gpus_makes_fewer_fake_hosts_and_says_so(tools):
    lines = []
    with fakehosts.FakeHosts(4, 2, tools, ngpus=5, log=lines.append) as fh:
        assert [h.gpus for h in fh.hosts] == [[0, 1], [2, 3]]
    assert lines == ["4 fake hosts x 2 GPU(s) need 8 GPUs, 5 found: making 2"]


def test_no_ip_is_one_line_and_exit_6(tmp_path):
    with pytest.raises(fakehosts.SetupError, match="no such folder"):
        fakehosts.find_tools(str(tmp_path / "nothing"))
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "fakehosts.py"), "--cpu", "--iproute2",
                           str(tmp_path / "nothing"), "--", "true"], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 6 and proc.stderr.count("\n") == 1 and proc.stderr.startswith("fakehosts: ")


def test_mpirun_wrapper_puts_each_rank_in_its_fake_host(tmp_path):
    """The mpirun route (no network namespace): the wrapper gives rank r the host name, NCCL_HOSTID
    and GPUs of fake host r // G; run here by hand for ranks 0..3 of a 2x2 layout."""
    fh = fakehosts.FakeHosts(2, 2, None, netns=False, log=lambda s: None)
    fh.up()
    argv = fh.mpirun_argv(["sh", "-c", 'echo "$(hostname) $NCCL_HOSTID $CUDA_VISIBLE_DEVICES $NCCL_NVLS_ENABLE"'],
                          tmp_path, mpirun="/nonexistent/mpirun")
    assert argv[:3] == ["/nonexistent/mpirun", "-np", "4"]
    wrapper = argv[3]
    if unavailable_reason():
        skip_or_fail(unavailable_reason())
    seen = [subprocess.run([wrapper, *argv[4:]], env={**child_env(), "OMPI_COMM_WORLD_RANK": str(r)},
                           capture_output=True, text=True, timeout=20).stdout.strip() for r in range(4)]
    assert seen == ["node0 node0 0,1 0", "node0 node0 0,1 0", "node1 node1 2,3 0", "node1 node1 2,3 0"]


def test_a_namespace_the_machine_refuses_gives_fewer_hosts_and_one_line(tmp_path):
    """An `ip` that refuses the third namespace (as a machine without room for more would):
    two fake hosts are made and one line says so; one that refuses namespaces at all: none."""
    ip = tmp_path / "ip"
    ip.write_text('#!/bin/sh\ncase "$*" in *"netns add"*n2*) echo "Cannot create namespace: no space" >&2; '
                  'exit 1;; esac\nexit 0\n')
    ip.chmod(0o755)
    lines = []
    with fakehosts.FakeHosts(3, 1, fakehosts.Tools(str(ip), str(ip)), log=lines.append) as fh:
        assert [h.name for h in fh.hosts] == ["node0", "node1"]
    assert lines == ["fake host node2 could not be made (Cannot create namespace: no space): 2 of 3 fake hosts made"]
    lines.clear()
    with fakehosts.FakeHosts(3, 1, fakehosts.Tools("false", "false"), log=lines.append) as fh:
        assert fh.hosts == []
    assert len(lines) == 1 and lines[0].startswith("the machine refuses network namespaces (")


def test_more_fake_hosts_than_gpus_share_them_round_robin_when_asked():
    lines = []
    fh = fakehosts.FakeHosts(8, 1, None, ngpus=4, netns=False, share_gpus=True, log=lines.append)
    fh.up()
    assert [h.gpus for h in fh.hosts] == [[0], [1], [2], [3], [0], [1], [2], [3]]
    assert lines == ["8 fake hosts x 1 GPU(s) on 4 GPUs: up to 2 fake hosts per GPU"]


def test_mpirun_route_two_fake_hosts_are_two_hosts_to_preflight(tmp_path, mpiexec):
    """Under MPICH's mpiexec with the fake-host wrapper (UTS namespace + NCCL_HOSTID, no network
    namespace): 4 ranks, 2 hosts, each host's topology read by its own first rank."""
    if unavailable_reason():
        skip_or_fail(unavailable_reason())
    fh = fakehosts.FakeHosts(2, 2, None, netns=False, log=lambda s: None)
    fh.up()
    argv = fh.mpirun_argv([sys.executable, "-m", "ncclbench", "preflight", "--backend", "mpi"], tmp_path,
                          mpirun=mpiexec)
    p = subprocess.run(argv, env=child_env(NCCLBENCH_NO_STORE="1"), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "4 process(es) on 2 host(s)" in p.stdout, p.stdout
    assert "# Topology node0 and 1 more host(s) alike" in p.stdout, p.stdout  # node1's facts read by rank 2
    assert "NCCL_HOSTID differs" not in p.stdout


def test_multihost_gpu_judges_a_scan_as_expected_only_when_exactly_that_is_named():
    spec2 = importlib.util.spec_from_file_location("multihost_gpu", ROOT / "bench" / "multihost_gpu.py")
    mh = importlib.util.module_from_spec(spec2)
    spec2.loader.exec_module(mh)
    nic2 = {"component": "node nic", "hosts": ["node2"], "confirmed": True}
    other = {"component": "gpu", "hosts": ["node1"], "confirmed": True}
    want = ("node nic", {"node2"}, ["node2"])
    assert mh.as_expected({"findings": [nic2]}, ["node2"], want)
    assert not mh.as_expected({"findings": [nic2, other]}, ["node1", "node2"], want)  # another host blamed
    assert not mh.as_expected({"findings": [nic2]}, [], want)  # not drained
    assert not mh.as_expected({"findings": []}, [], ("link", {"node1", "node3"}, []))  # nothing found
