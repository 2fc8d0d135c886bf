"""nccl-tests' run model as pure functions: ranks, devices, split colors, memory."""

from __future__ import annotations

import pytest

from ncclbench.core.errors import ArgumentError, BenchError, ExitCode
from ncclbench.nccl import runmodel as rm

GiB = 1 << 30


def test_global_rank_layout():
    # 2 processes x 2 threads x 2 GPUs: ranks run process-major, then thread, then GPU.
    seen = [rm.global_rank(p, t, g, 2, 2) for p in range(2) for t in range(2) for g in range(2)]
    assert seen == list(range(8))
    assert rm.global_rank(1, 0, 1, nthreads=3, ngpus=4) == 13


def test_local_rank_counts_lower_processes_on_the_same_host():
    hosts = ["a", "b", "a", "a", "b"]
    assert [rm.local_rank(hosts, p) for p in range(5)] == [0, 0, 1, 2, 1]


def test_host_identity_uses_short_name_and_boot_id(tmp_path):
    boot = tmp_path / "boot_id"
    boot.write_text("1234-abcd\n")
    assert rm.host_identity("node7.cluster.example", str(boot)) == "node71234-abcd"
    assert rm.host_identity("node7", str(tmp_path / "missing")) == "node7"


def test_base_device_and_override():
    assert rm.base_device(0, 1, 1, {}) == 0
    assert rm.base_device(3, 2, 2, {}) == 12
    assert rm.base_device(3, 2, 2, {"NCCL_TESTS_DEVICE": "1"}) == 1
    assert rm.base_device(3, 1, 1, {"NCCL_TESTS_DEVICE": "x"}) == 0  # atoi("x") == 0
    assert rm.base_device(2, 1, 1, {"NCCL_TESTS_DEVICE": "-1"}) == 2  # -1 means unset


def test_too_few_gpus_is_status_5_with_nccl_tests_wording():
    rm.check_device_count(4, 1, 4, 8)
    with pytest.raises(BenchError) as info:
        rm.check_device_count(4, 2, 4, 8)
    assert info.value.code == ExitCode.NOT_IMPLEMENTED
    assert info.value.message.startswith("Invalid number of GPUs: 12 requested but only 8 were found.")


@pytest.mark.parametrize("text,value", [
    ("3", 3), (" 12", 12), ("0x10", 16), ("010", 8), ("0b101", 5), ("0B11", 3), ("7abc", 7),
    ("-1", -1), ("0x", 0), ("0b", 0), ("", None), ("   ", None), ("zz", None),
])
def test_parse_c_int(text, value):
    assert rm.parse_c_int(text) == value


@pytest.mark.parametrize("env,colors", [
    ({}, [0, 0, 0, 0, 0, 0]),
    ({"NCCL_TESTS_SPLIT_MASK": "1"}, [0, 1, 0, 1, 0, 1]),
    ({"NCCL_TESTS_SPLIT_MASK": "10"}, [0, 0, 0, 0, 0, 0]),  # hex: 0x10
    ({"NCCL_TESTS_SPLIT_MASK": "0x2"}, [0, 0, 2, 2, 0, 0]),
    ({"NCCL_TESTS_SPLIT_MASK": "1", "NCCL_TESTS_SPLIT": "DIV 2"}, [0, 1, 0, 1, 0, 1]),  # mask wins
    ({"NCCL_TESTS_SPLIT": "AND 1"}, [0, 1, 0, 1, 0, 1]),
    ({"NCCL_TESTS_SPLIT": "&0b10"}, [0, 0, 2, 2, 0, 0]),
    ({"NCCL_TESTS_SPLIT": "or 4"}, [4, 5, 6, 7, 4, 5]),
    ({"NCCL_TESTS_SPLIT": "|1"}, [1, 1, 3, 3, 5, 5]),
    ({"NCCL_TESTS_SPLIT": "MOD 3"}, [0, 1, 2, 0, 1, 2]),
    ({"NCCL_TESTS_SPLIT": "%2"}, [0, 1, 0, 1, 0, 1]),
    ({"NCCL_TESTS_SPLIT": "Div 2"}, [0, 0, 1, 1, 2, 2]),
    ({"NCCL_TESTS_SPLIT": "/ 0x4"}, [0, 0, 0, 0, 1, 1]),
    ({"NCCL_TESTS_SPLIT": "XOR 1"}, [0, 0, 0, 0, 0, 0]),  # unknown op
    ({"NCCL_TESTS_SPLIT": "MOD"}, [0, 0, 0, 0, 0, 0]),  # no value
])
def test_split_color(env, colors):
    assert [rm.split_color(r, env) for r in range(6)] == colors


def test_split_by_zero_is_an_argument_error():
    with pytest.raises(ArgumentError):
        rm.split_color(3, {"NCCL_TESTS_SPLIT": "MOD 0"})
    with pytest.raises(ArgumentError):
        rm.split_color(3, {"NCCL_TESTS_SPLIT": "DIV 0"})


def test_group_layout():
    colors = [0, 1, 0, 1, 1]
    assert [rm.group_layout(colors, p) for p in range(5)] == [
        (0, 2, 0), (0, 3, 1), (1, 2, 0), (1, 3, 1), (2, 3, 1)]


def test_nccl_tests_memory_limit():
    # docs/behaviour.md §2.5: H100 80GB with -c 0 gives 39824392192.
    assert rm.nccl_tests_max_bytes(85017493504, check=False) == 39824392192
    assert rm.nccl_tests_max_bytes(85017493504, check=True) == (85017493504 - 4 * GiB - GiB) // 3
    # 16 GiB: reserve 1 GiB; 8 GiB: reserve 1 GiB too (ceil).
    assert rm.nccl_tests_max_bytes(16 * GiB, check=False) == 7 * GiB
    assert rm.nccl_tests_max_bytes(8 * GiB, check=True) == 2 * GiB
    assert rm.nccl_tests_max_bytes(GiB, check=True) == 0


def test_buffer_fit():
    assert rm.buffer_bytes(1000, 3) == 1024
    assert rm.fit_error(10 * GiB, 0, 30 * GiB, device=0) is None
    msg = rm.fit_error(20 * GiB, 0, 30 * GiB, device=3)
    assert msg is not None
    assert msg.startswith(f"maxBytes {20 * GiB} does not fit on GPU 3")
    limit = (30 * GiB - GiB // 2) // 2
    assert f"limit {limit} bytes per buffer" in msg
    # exactly at the limit still fits; one byte more does not
    assert rm.fit_error(limit, 0, 30 * GiB, 0) is None
    assert rm.fit_error(limit + 1, 0, 30 * GiB, 0) is not None


@pytest.mark.parametrize("amount,text", [
    (0, "0.00 B"), (1023, "1023 B"), (1024, "1.00 KB"), (15 * 1024, "15.0 KB"),
    (6 * 2 ** 20, "6.00 MB"), (586 * 2 ** 20 + 100, "586 MB"), (int(1.5 * GiB), "1.50 GB"),
    (-3 * 2 ** 20, "-3.00 MB"),
])
def test_format_mem(amount, text):
    assert rm.format_mem(amount) == text


def test_memory_line_matches_nccl_tests():
    line = rm.memory_line(586 * 2 ** 20, 6 * 2 ** 20, 0)
    assert line == ("# GPU memory usage     : Initialization 586 MB | User-Allocated 6.00 MB | "
                    "Collective 0.00 B | Total  592 MB")


def test_registration_mode_notes():
    assert rm.registration_mode(0, 22809) == (0, None)
    assert rm.registration_mode(1, 22809) == (1, None)
    assert rm.registration_mode(2, 22809) == (2, None)
    assert rm.registration_mode(3, 22809) == (1, None)  # any other non-zero acts like 1
    mode, note = rm.registration_mode(2, 22105)
    assert mode == 1 and note.startswith("Option -R 2 (symmetric) is not supported before NCCL 2.27")
    mode, note = rm.registration_mode(2, 22809, has_window=False)
    assert mode == 1 and note
    mode, note = rm.registration_mode(1, 21805)
    assert mode == 0 and "before NCCL 2.19" in note


def test_cta_policy_and_config_values():
    assert rm.cta_policy_setting(None, 22809) == (None, None)
    assert rm.cta_policy_setting(1, 22809) == (1, None)
    assert rm.cta_policy_setting(2, 22809) == (2, None)
    value, note = rm.cta_policy_setting(2, 22703)
    assert value is None and note == "Option -x (cta_policy) 2 is not supported before NCCL 2.28. Ignoring"
    assert rm.cta_policy_setting(1, 22703) == (1, None)
    assert rm.comm_config_values(22809, None, "all_reduce") == {"nvlinkCentricSched": 1}
    assert rm.comm_config_values(22703, 1, "all_reduce") == {"CTAPolicy": 1}
    assert rm.comm_config_values(23203, 0, "sendrecv") == {"CTAPolicy": 0, "nvlinkCentricSched": 1,
                                                           "maxP2pPeers": 2}
    assert rm.comm_config_values(22809, None, "sendrecv") == {"nvlinkCentricSched": 1}
    assert rm.comm_config_values(21805, None, "sendrecv") == {}
