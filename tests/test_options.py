"""nccl-tests-compatible command-line parsing (docs/behaviour.md §1)."""

from __future__ import annotations

import pytest

from ncclbench.collectives import COLLECTIVES
from ncclbench.core.config import BenchOptions
from ncclbench.core.datatypes import DATATYPES, REDOPS
from ncclbench.core.errors import ArgumentError, BenchError, ExitCode
from ncclbench.run.bench_args import HelpRequested, parse_bench_args, parse_size, strtol, usage_text


def parse(*args: str) -> BenchOptions:
    return parse_bench_args("all_reduce_perf", list(args))


def arg_error(*args: str) -> str:
    with pytest.raises(ArgumentError) as info:
        parse(*args)
    assert info.value.code == ExitCode.ARGUMENT == 255
    return info.value.message


# --------------------------------------------------------------------------------------- strtol

@pytest.mark.parametrize("text,value", [
    ("0", 0), ("42", 42), ("+7", 7), ("-3", -3), ("  \t12", 12), ("\n-5", -5),
    ("010", 8), ("0777", 511), ("08", 0), ("09", 0), ("012389", 83),
    ("0x1f", 31), ("0X1F", 31), ("-0x10", -16), ("0x", 0), ("0xg", 0),
    ("12abc", 12), ("1.5", 1), ("1e3", 1), ("abc", 0), ("all", 0), ("", 0), ("- 3", 0),
    ("+-3", 0), ("1_000", 1), ("0b101", 0),
    ("0x7fffffffffffffff", 2**63 - 1), ("99999999999999999999", 2**63 - 1),
    ("-99999999999999999999", -(2**63)),
])
def test_strtol_matches_c(text, value):
    assert strtol(text) == value


# ---------------------------------------------------------------------------------------- sizes

@pytest.mark.parametrize("text,value", [
    ("8", 8), ("1K", 1024), ("1k", 1024), ("1.5K", 1536), ("4M", 4 << 20), ("4m", 4 << 20),
    ("4MB", 4 << 20), ("4Mxyz", 4 << 20), ("4 M", 4 << 20), ("2\tg", 2 << 30), ("8G", 8 << 30),
    ("0.5", 0), ("1.9", 1), ("1e3", 1000), ("1e3K", 1000 * 1024), (".5K", 512), ("5.", 5),
    ("  8", 8), ("8 ", 8), ("+5K", 5120), ("-0", 0), ("0x10", 16), ("0x1p4", 16),
    ("0x1.8p1K", 3072), ("1e", 1), ("1eK", 1024), ("1e+K", 1024), ("0x1pK", 1024),
])
def test_parse_size_valid(text, value):
    assert parse_size(text, "minbytes") == value


@pytest.mark.parametrize("text", [
    "1B", "1X", "1b", "-1", "-0.5", "-1K", "abc", "", " ", "K", "1e5X", "1 e5",
    "0x", "inf", "nan", "1e30", "18446744073709551616",
])
@pytest.mark.parametrize("name", ["minbytes", "maxbytes", "stepBytes"])
def test_parse_size_invalid(text, name):
    with pytest.raises(ArgumentError) as info:
        parse_size(text, name)
    assert info.value.message == f"invalid size specified for '{name}'"
    assert info.value.code == ExitCode.ARGUMENT


@pytest.mark.parametrize("flag,name", [("-b", "minbytes"), ("-e", "maxbytes"), ("-i", "stepBytes")])
def test_bad_size_option_message(flag, name):
    assert arg_error(flag, "1X") == f"invalid size specified for '{name}'"


# ------------------------------------------------------------------------------------- defaults

def test_defaults_are_nccl_tests():
    o = parse()
    expected = dict(
        nthreads=1, ngpus=1, min_bytes=33554432, max_bytes=33554432, step_bytes=1048576,
        step_factor=1, iters=20, agg_iters=1, warmup_iters=1, run_cycles=1, parallel_init=False,
        check=1, ops=("sum",), op_arg="sum", datatypes=("float",), datatype_arg="float", root=0,
        blocking=0, stream_null=False, timeout=0, cudagraph=0, report_cputime=False,
        report_timestamps=False, output_file=None, average=1, local_register=0, cta_policy=None,
        device_implementation=0, device_cta_count=16, memory_report=False, unalign=0,
        per_iter_timing=False, per_iter_skip=0, backend="auto", nprocs=None, nccl_lib=None,
        store=True, baseline=None,
    )
    assert {k: getattr(o, k) for k in expected} == expected


# --------------------------------------------------------------------- every option, every form

# (short, long, argument text, field, expected value, extra args the value needs)
OPTION_TABLE = [
    ("t", "nthreads", "3", "nthreads", 3, ()),
    ("g", "ngpus", "4", "ngpus", 4, ()),
    ("b", "minbytes", "1K", "min_bytes", 1024, ()),
    ("e", "maxbytes", "64M", "max_bytes", 64 << 20, ()),
    ("i", "stepbytes", "3K", "step_bytes", 3072, ()),
    ("f", "stepfactor", "2", "step_factor", 2, ()),
    ("n", "iters", "7", "iters", 7, ()),
    ("m", "agg_iters", "3", "agg_iters", 3, ()),
    ("w", "warmup_iters", "5", "warmup_iters", 5, ()),
    ("N", "run_cycles", "0", "run_cycles", 0, ()),
    ("p", "parallel_init", "1", "parallel_init", True, ()),
    ("c", "check", "0", "check", 0, ()),
    ("o", "op", "max", "ops", ("max",), ()),
    ("d", "datatype", "half", "datatypes", ("half",), ()),
    ("r", "root", "3", "root", 3, ()),
    ("z", "blocking", "2", "blocking", 2, ()),
    ("y", "stream_null", "1", "stream_null", True, ()),
    ("T", "timeout", "30", "timeout", 30, ()),
    ("G", "cudagraph", "10", "cudagraph", 10, ()),
    ("C", "report_cputime", "1", "report_cputime", True, ()),
    ("S", "report_timestamps", "1", "report_timestamps", True, ()),
    ("J", "output_file", "out.json", "output_file", "out.json", ()),
    ("a", "average", "3", "average", 3, ()),
    ("R", "local_register", "1", "local_register", 1, ()),
    ("x", "cta_policy", "2", "cta_policy", 2, ()),
    ("D", "device_implementation", "1", "device_implementation", 1, ("-R", "2")),
    ("V", "device_cta_count", "64", "device_cta_count", 64, ()),
    ("M", "memory", "1", "memory_report", True, ()),
    ("u", "unalign", "5", "unalign", 5, ()),
    ("I", "per_iter_timing", "1", "per_iter_timing", True, ()),
    ("K", "per_iter_skip", "2", "per_iter_skip", 2, ("-I", "1")),
]


def forms(short: str, long: str, text: str) -> list[list[str]]:
    return [[f"-{short}", text], [f"-{short}{text}"], [f"--{long}", text], [f"--{long}={text}"]]


@pytest.mark.parametrize("short,long,text,field,value,extra", OPTION_TABLE,
                         ids=[row[1] for row in OPTION_TABLE])
def test_every_option_in_every_form(short, long, text, field, value, extra):
    assert getattr(BenchOptions(), field) != value  # the test value differs from the default
    for form in forms(short, long, text):
        assert getattr(parse(*extra, *form), field) == value, form


def test_option_table_covers_every_option_in_usage():
    usage = usage_text("all_reduce_perf")
    listed = {(s, l) for s, l, *_ in OPTION_TABLE} | {("h", "help")}
    for short, long in listed:
        assert f"[-{short},--{long}" in usage
    nccl_block = usage[: usage.index("[-h,--help]\n")]
    assert nccl_block.count("\t[-") + 1 == len(listed)


@pytest.mark.parametrize("flag", ["-p", "-y", "-C", "-S", "-M"])
@pytest.mark.parametrize("text,on", [("1", True), ("2", True), ("-1", True), ("0x10", True),
                                     ("0", False), ("0x0", False), ("junk", False)])
def test_booleans_any_nonzero_is_on(flag, text, on):
    field = {"-p": "parallel_init", "-y": "stream_null", "-C": "report_cputime",
             "-S": "report_timestamps", "-M": "memory_report"}[flag]
    assert getattr(parse(flag, text), field) is on


@pytest.mark.parametrize("args,field,value", [
    (("-t", "010"), "nthreads", 8),
    (("-g", "0x2"), "ngpus", 2),
    (("-n", "12abc"), "iters", 12),
    (("-f", "1.5"), "step_factor", 1),
    (("-f", "0x4"), "step_factor", 4),
    (("-f", "0"), "step_factor", 0),
    (("-r", "all"), "root", 0),
    (("-r", "-1"), "root", -1),
    (("--root", "-1"), "root", -1),
    (("-r-1",), "root", -1),
    (("-x", "-1"), "cta_policy", None),
    (("-x", "0"), "cta_policy", 0),
    (("-J", "res.JSON"), "output_file", "res.JSON"),
    (("--output_file=",), "output_file", ""),
])
def test_integer_quirks(args, field, value):
    assert getattr(parse(*args), field) == value


@pytest.mark.parametrize("text", ["-5", "-1", "-0x10"])
def test_negative_cycle_count_is_refused_in_one_line(text):
    """nccl-tests loops forever on -N -5 (a negative count never ends its loop): refused."""
    message = arg_error("-N", text)
    assert message.startswith(f"invalid cycle count (-N {int(text, 0)}): must not be negative")
    assert "\n" not in message


def test_zero_cycles_still_means_forever():
    assert parse("-N", "0").run_cycles == 0


def test_options_are_frozen_after_parsing():
    import dataclasses

    o = parse("-b", "8")
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.max_bytes = 1  # type: ignore[misc]
    assert isinstance(o.ops, tuple) and isinstance(o.argv, tuple)


def test_blocking_inside_graph_capture_is_refused_at_parse_time():
    assert arg_error("-G", "2", "-z", "1").startswith("-z 1 cannot be combined with CUDA graphs (-G)")
    assert parse("-G", "2", "-z", "3").blocking == 0  # nccl-tests' downgrade, with its warning


def test_f_1_5_falls_back_to_additive_steps():
    o = parse("-b", "1K", "-e", "8K", "-f", "1.5", "-i", "1K")
    assert (o.step_factor, o.step_bytes) == (1, 1024)


def test_all_datatypes_and_ops():
    o = parse("-d", "all", "-o", "all")
    assert o.datatypes == tuple(d.name for d in DATATYPES)
    assert "f8e4m3" in o.datatypes and "bfloat16" in o.datatypes
    assert o.ops == tuple(op.name for op in REDOPS) == ("sum", "prod", "max", "min", "avg", "mulsum")
    assert (o.datatype_arg, o.op_arg) == ("all", "all")


@pytest.mark.parametrize("name", [d.name for d in DATATYPES])
def test_each_datatype_name(name):
    o = parse("-d", name)
    assert (o.datatypes, o.datatype_arg) == ((name,), name)


@pytest.mark.parametrize("name", [op.name for op in REDOPS])
def test_each_op_name(name):
    assert parse("--op", name).ops == (name,)


@pytest.mark.parametrize("flag,bad,kind,valid", [
    ("-d", "fp32", "datatype", DATATYPES), ("-d", "Float", "datatype", DATATYPES),
    ("-o", "add", "op", REDOPS), ("-o", "SUM", "op", REDOPS),
])
def test_unknown_datatype_or_op_refused_listing_names(flag, bad, kind, valid):
    message = arg_error(flag, bad)
    assert message.startswith(f"invalid {kind} '{bad}'")
    for entry in valid:
        assert entry.name in message


# ----------------------------------------------------------------------------- getopt mechanics

def test_repeats_overwrite_in_order():
    o = parse("-n", "5", "--iters", "6", "-n7", "-d", "half", "--datatype=int8")
    assert (o.iters, o.datatypes) == (7, ("int8",))


def test_non_options_ignored_and_options_after_them_read():
    o = parse("stray", "-n", "5", "another", "-", "-w", "3")
    assert (o.iters, o.warmup_iters) == (5, 3)


def test_double_dash_ends_options():
    o = parse("-n", "5", "--", "-n", "9", "-q")
    assert o.iters == 5


def test_required_argument_taken_even_if_it_looks_like_an_option():
    o = parse("-J", "-n", "-w", "4")
    assert (o.output_file, o.iters, o.warmup_iters) == ("-n", 20, 4)


def test_attached_value_takes_rest_of_cluster():
    o = parse("-Jgb2", "-n-w")  # "-n-w": -n gets "-w" (strtol 0); -w is not read
    assert (o.output_file, o.iters, o.warmup_iters) == ("gb2", 0, 1)


def test_long_option_unique_prefix():
    o = parse("--nth", "2", "--warm=4", "--per_iter_t", "1", "--no-s")
    assert (o.nthreads, o.warmup_iters, o.per_iter_timing, o.store) == (2, 4, True, False)


def test_argv_and_program_recorded():
    o = parse_bench_args("/opt/bin/all_gather_perf_mpi", ["-b", "8", "x"])
    assert (o.collective, o.program) == ("all_gather", "all_gather_perf")
    assert o.argv == ("all_gather_perf", "-b", "8", "x")


@pytest.mark.parametrize("program", ["all_reduce", "all_reduce_perf", "./build/all_reduce_perf",
                                     "/x/all_reduce_perf_mpi"])
def test_program_forms(program):
    assert parse_bench_args(program, []).collective == "all_reduce"


def test_every_collective_resolves():
    for name in COLLECTIVES:
        o = parse_bench_args(f"{name}_perf", [])
        assert (o.collective, o.program) == (name, f"{name}_perf")


def test_unknown_collective():
    with pytest.raises(ArgumentError) as info:
        parse_bench_args("allreduce_perf", [])
    assert "allreduce_perf" in info.value.message
    for name in COLLECTIVES:
        assert name in info.value.message
    assert info.value.code == ExitCode.ARGUMENT


# ----------------------------------------------------------------------- help and getopt errors

def help_for(*args: str, program: str = "all_reduce_perf") -> HelpRequested:
    with pytest.raises(HelpRequested) as info:
        parse_bench_args(program, list(args))
    assert info.value.exit_code == 0
    assert not isinstance(info.value, BenchError)
    return info.value


@pytest.mark.parametrize("args", [("-h",), ("--help",), ("--he",), ("-n", "5", "-h"), ("-hn5",)])
def test_help(args, capsys):
    h = help_for(*args)
    assert h.text == usage_text("all_reduce_perf")
    assert h.text.startswith("USAGE: all_reduce_perf \n\t[-t,--nthreads <num threads>] \n")
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("args,stderr", [
    (("-q",), "all_reduce_perf: invalid option -- 'q'"),
    (("-qn5",), "all_reduce_perf: invalid option -- 'q'"),
    (("--foo",), "all_reduce_perf: unrecognized option '--foo'"),
    (("--foo=3",), "all_reduce_perf: unrecognized option '--foo=3'"),
    (("-b",), "all_reduce_perf: option requires an argument -- 'b'"),
    (("-n", "4", "--minbytes"), "all_reduce_perf: option '--minbytes' requires an argument"),
    (("--help=1",), "all_reduce_perf: option '--help' doesn't allow an argument"),
    (("--b", "8"),
     "all_reduce_perf: option '--b' is ambiguous; possibilities: "
     "'--blocking' '--backend' '--baseline'"),
    (("--report=1",), "all_reduce_perf: option '--report=1' is ambiguous; possibilities: "
                      "'--report_cputime' '--report_timestamps'"),
])
def test_getopt_errors_print_usage_and_exit_0(args, stderr, capsys):
    h = help_for(*args)
    assert h.text == "invalid option '?'\n" + usage_text("all_reduce_perf")
    assert capsys.readouterr().err == stderr + "\n"


def test_getopt_error_uses_typed_program_and_binary_basename(capsys):
    h = help_for("-q", program="/opt/nccl-tests/build/sendrecv_perf")
    assert capsys.readouterr().err == "/opt/nccl-tests/build/sendrecv_perf: invalid option -- 'q'\n"
    assert h.text.startswith("invalid option '?'\nUSAGE: sendrecv_perf \n")
    assert help_for("-h", program="all_reduce").text.startswith("USAGE: all_reduce_perf \n")


def test_options_are_processed_in_order_until_the_first_stop():
    with pytest.raises(ArgumentError):
        parse("-b", "1X", "-h")
    help_for("-h", "-b", "1X")
    help_for("-q", "-d", "nosuchtype")
    with pytest.raises(ArgumentError):
        parse("-d", "nosuchtype", "-q")


def test_usage_text_shape():
    text = usage_text("/some/dir/reduce_perf")
    lines = text.split("\n")
    assert lines[0] == "USAGE: reduce_perf "
    assert lines[1] == "\t[-t,--nthreads <num threads>] "
    end = lines.index("\t[-h,--help]")
    assert all(line.startswith("\t") for line in lines[1 : end + 1])
    # the -I entry spans four lines
    i = lines.index("\t[-I,--per_iter_timing <0/1> per-iteration CUDA event timing")
    assert lines[i + 3] == "\t    with <100 samples) (default: 0)] "
    own = "\n".join(lines[end + 1 :])
    for name in ("--backend", "--nprocs", "--nccl-lib", "--no-store", "--baseline"):
        assert f"[{name}" in own


# ---------------------------------------------------------------------------- ncclbench options

def test_own_options():
    o = parse("--backend", "mpi", "--nprocs", "4", "--nccl-lib=/x/libnccl.so.2", "--no-store",
              "--baseline", "h200-ref")
    assert (o.backend, o.nprocs, o.nccl_lib, o.store, o.baseline) == (
        "mpi", 4, "/x/libnccl.so.2", False, "h200-ref")
    assert parse("--backend=nccl").backend == "nccl"


@pytest.mark.parametrize("args,fragment", [
    (("--backend", "cuda"), "invalid backend 'cuda'"),
    (("--backend", "MPI"), "valid: auto, nccl, mpi"),
    (("--nprocs", "0"), "'--nprocs'"),
    (("--nprocs", "-2"), "'--nprocs'"),
    (("--nprocs", "two"), "'--nprocs'"),
    (("--nprocs", "1.5"), "'--nprocs'"),
    (("--nccl-lib", ""), "'--nccl-lib'"),
    (("--baseline=",), "'--baseline'"),
])
def test_own_options_invalid(args, fragment):
    assert fragment in arg_error(*args)


# --------------------------------------------------------------------- validation (§1.5 + ours)

def test_min_greater_than_max():
    assert arg_error("-b", "64M", "-e", "1M") == (
        "invalid sizes for 'minbytes' and 'maxbytes': 67108864 > 1048576")
    assert arg_error("-b", "33554433") == (
        "invalid sizes for 'minbytes' and 'maxbytes': 33554433 > 33554432")


def test_device_implementation_needs_symmetric_registration():
    msg = "device implementation (-D > 0) requires enabling symmetric memory registration (-R 2)"
    assert arg_error("-D", "1") == msg
    assert arg_error("-D", "2", "-R", "1") == msg
    assert parse("-D", "1", "-R", "2").device_implementation == 1


def test_nccl_tests_errors_come_first():
    assert "invalid sizes" in arg_error("-b", "2M", "-e", "1M", "-D", "1", "-t", "0")
    assert "-R 2" in arg_error("-D", "1", "-t", "0")


@pytest.mark.parametrize("args,fragment", [
    (("-b", "0"), "'minbytes': 0"),
    (("-b", "0.5", "-e", "1K"), "'minbytes': 0"),
    (("-b", "0", "-e", "0"), "'minbytes': 0"),
    (("-b", "0", "-f", "2"), "'minbytes': 0"),
    (("-b", "1K", "-e", "2K", "-i", "0"), "'stepBytes': 0"),
    (("-i", "0", "-f", "1"), "'stepBytes': 0"),
    (("-f", "-2"), "step factor (-f -2)"),
    (("-t", "0"), "invalid number of threads (-t 0)"),
    (("-t", "junk"), "invalid number of threads"),
    (("-g", "-1"), "invalid number of GPUs per thread (-g -1)"),
    (("-n", "-1"), "(-n -1)"),
    (("-w", "-1"), "(-w -1)"),
    (("-m", "0"), "(-m 0)"),
    (("-c", "-1"), "(-c -1)"),
    (("-r", "-2"), "(-r -2)"),
    (("-z", "4"), "invalid blocking mode (-z 4)"),
    (("-z", "-1"), "(-z -1)"),
    (("-T", "-5"), "(-T -5)"),
    (("-G", "-1"), "(-G -1)"),
    (("-a", "4"), "invalid average mode (-a 4)"),
    (("-a", "-1"), "(-a -1)"),
    (("-R", "3"), "invalid registration mode (-R 3)"),
    (("-R", "-1"), "(-R -1)"),
    (("-D", "-1"), "(-D -1)"),
    (("-u", "-1"), "invalid unalign (-u -1)"),
    (("-n", "4294967297"), "out of range for 'iters'"),
    (("-t", "0x100000000"), "out of range for 'nthreads'"),
])
def test_refused_where_nccl_tests_hangs_or_misbehaves(args, fragment):
    assert fragment in arg_error(*args)


@pytest.mark.parametrize("args", [
    ("-b", "1", "-e", "1"), ("-i", "0", "-f", "2", "-b", "8", "-e", "64"), ("-n", "0"),
    ("-w", "0"), ("-c", "0"), ("-z", "3"), ("-a", "0"), ("-R", "2"), ("-r", "-1"), ("-N", "0"),
    ("-t", "2", "-g", "8"),
])
def test_boundary_values_accepted(args, capsys):
    parse(*args)
    # only -n 0 warns (about -K, as nccl-tests does)
    assert (capsys.readouterr().err != "") == (args == ("-n", "0"))


# ---------------------------------------------------------------------- warnings and downgrades

def warned(capsys, *args: str) -> tuple[BenchOptions, list[str]]:
    o = parse(*args)
    return o, capsys.readouterr().err.splitlines()


def test_per_iter_timing_not_0_or_1(capsys):
    o, err = warned(capsys, "-I", "2")
    assert err == ["per-iteration timing (-I) only supports 0=off or 1=on. Disabling."]
    assert o.per_iter_timing is False


def test_per_iter_timing_with_graph(capsys):
    o, err = warned(capsys, "-I", "1", "-G", "1")
    assert err == [
        "per-iteration timing (-I) is incompatible with CUDA graph mode (-G). Disabling."]
    assert (o.per_iter_timing, o.cudagraph) == (False, 1)


def test_blocking_3_with_graph(capsys):
    o, err = warned(capsys, "-z", "3", "-G", "2")
    assert err == ["blocking mode (-z 3) is incompatible with CUDA graph mode (-G). Disabling."]
    assert (o.blocking, o.cudagraph) == (0, 2)
    assert parse("-z", "3").blocking == 3


@pytest.mark.parametrize("args,limit", [(("-I", "1", "-K", "5", "-n", "5"), 4),
                                        (("-I", "1", "-K", "-1"), 19),
                                        (("-n", "0"), -1)])
def test_per_iter_skip_out_of_range(capsys, args, limit):
    o, err = warned(capsys, *args)
    assert err == [f"per-iteration skip (-K) must be between 0 and {limit}. Disabling."]
    assert o.per_iter_skip == 0


def test_per_iter_skip_without_timing(capsys):
    o, err = warned(capsys, "-K", "3")
    assert err == ["per-iteration skip (-K) requires per-iteration timing (-I 1). Disabling."]
    assert o.per_iter_skip == 0


def test_warnings_cascade_in_nccl_tests_order(capsys):
    # -I 1 is switched off by -G, which then makes -K lack -I; -z 3 also falls back.
    o, err = warned(capsys, "-I", "1", "-G", "1", "-z", "3", "-K", "2")
    assert err == [
        "per-iteration timing (-I) is incompatible with CUDA graph mode (-G). Disabling.",
        "blocking mode (-z 3) is incompatible with CUDA graph mode (-G). Disabling.",
        "per-iteration skip (-K) requires per-iteration timing (-I 1). Disabling.",
    ]
    assert (o.per_iter_timing, o.blocking, o.per_iter_skip) == (False, 0, 0)


def test_per_iter_skip_kept_when_valid(capsys):
    o, err = warned(capsys, "-I", "1", "-K", "19")
    assert (err, o.per_iter_timing, o.per_iter_skip) == ([], True, 19)


@pytest.mark.parametrize("text,got", [("0", 0), ("129", 129), ("-4", -4), ("junk", 0)])
def test_device_cta_count_out_of_range_resets_to_16(capsys, text, got):
    o, err = warned(capsys, "-V", text)
    assert err == [f"device_cta_count (-V) must be positive and less than 128, got {got}. "
                   "Using default value 16."]
    assert o.device_cta_count == 16


@pytest.mark.parametrize("value", [1, 128])
def test_device_cta_count_bounds_accepted(capsys, value):
    o, err = warned(capsys, "-V", str(value))
    assert (err, o.device_cta_count) == ([], value)


def test_json_suffix_is_kept_for_config():
    assert parse("-J", "out.JSON").json_enabled
    assert not parse("-J", "out.txt").json_enabled


# ------------------------------------------------------- ncclbench's own options: one line, exit 255

@pytest.mark.parametrize("args,message", [
    (("--backed", "mpi"), "unrecognized option '--backed'; did you mean '--backend'?"),
    (("--nproc=2x",), "invalid value for '--nprocs'"),  # a unique prefix is still getopt's
    (("--nccl_lib", "/x.so"), "did you mean '--nccl-lib'?"),
    (("--cpubind", "numa"), "did you mean '--cpu-bind'?"),
    (("--no-store=1",), "option '--no-store' takes no value"),
    (("-b", "8", "--nprocs"), "option '--nprocs' needs a value"),
])
def test_own_option_mistakes_are_one_line_and_255(args, message, capsys):
    assert message in arg_error(*args)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("args", [("--itres", "3"), ("--zzz",), ("--maxbyts", "8")])
def test_nccl_tests_option_mistakes_keep_usage_and_exit_0(args, capsys):
    """A typo near one of nccl-tests' own options (or near nothing) keeps nccl-tests' answer."""
    h = help_for(*args)
    assert h.text.startswith("invalid option '?'\nUSAGE: all_reduce_perf")
    assert "unrecognized option" in capsys.readouterr().err


def test_unique_prefixes_stay_getopts():
    assert parse("--datatyp=float").datatypes == ("float",)
    assert "minbytes" in arg_error("--minbyte=8x")


def test_unknown_collective_suggests_the_close_one():
    from ncclbench.run.bench_args import did_you_mean

    with pytest.raises(ArgumentError) as info:
        parse_bench_args("allreduce", [])
    assert "did you mean 'all_reduce'?" in info.value.message
    assert did_you_mean("reducescatter", COLLECTIVES) == "reduce_scatter"
    assert did_you_mean("xyz", COLLECTIVES) is None


@pytest.mark.parametrize("argv,found", [
    (["--nprocs", "8", "all_reduce_perf", "-b", "8"], ("all_reduce_perf", ["--nprocs", "8", "-b", "8"])),
    (["--nprocs=8", "all_gather", "-e", "1M"], ("all_gather", ["--nprocs=8", "-e", "1M"])),
    (["-b", "8", "--no-store", "sendrecv_perf"], ("sendrecv_perf", ["-b", "8", "--no-store"])),
    (["-b8", "--backend", "mpi", "broadcast"], ("broadcast", ["-b8", "--backend", "mpi"])),
    (["--baseline", "all_reduce", "all_reduce"], ("all_reduce", ["--baseline", "all_reduce"])),
    (["--nprocs", "8"], None),
    (["--nprocs", "8", "allreduce"], None),
    (["--", "all_reduce"], None),
])
def test_options_may_come_before_the_collective(argv, found):
    from ncclbench.run.bench_args import split_leading_options

    assert split_leading_options(argv) == found
