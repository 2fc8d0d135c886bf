"""ncclbench: nccl-tests' job (same command lines, same numbers, same output)
with no build step, plus a result store, reports and fleet-health tools."""

__version__ = "0.1.0"

# nccl-tests release whose behaviour (options, output layout, JSON schema) we follow.
NCCL_TESTS_COMPAT_VERSION = "2.19.6"
