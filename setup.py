"""Optional compiled parts of ncclbench (metadata lives in pyproject.toml).

Each extension is `optional=True`: where no C compiler is available the build
goes on without it and ncclbench uses its pure-Python path (prebuilt wheels
carry the compiled parts, so users need no compiler).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        # The timed loop's calls issued from C (ncclbench/nccl/native_loop.py).
        Extension("ncclbench._timedloop", ["src/ncclbench/_timedloop.c"], optional=True,
                  extra_compile_args=["-O2"]),
        # NCCL profiler plugin (a plain shared object NCCL dlopens via NCCL_PROFILER_PLUGIN; never
        # imported by Python): NCCL's algorithm/protocol/channels per collective (explain/profiler.py).
        Extension("ncclbench.explain._ncclbench_profiler", ["src/ncclbench/explain/csrc/ncclbench_profiler.c"],
                  optional=True, extra_compile_args=["-O2", "-fvisibility=hidden"], libraries=["pthread"]),
    ],
)
