"""Optional compiled parts of ncclbench (metadata lives in pyproject.toml).

Each extension is `optional=True`: where no C compiler is available the build
goes on without it and ncclbench uses its pure-Python path (prebuilt wheels
carry the compiled parts, so users need no compiler).

Both are built on CPython's stable ABI (the limited API of 3.10): one wheel,
tagged cp310-abi3, installs into every CPython >= 3.10 of the platform, so a
wheel copied to a machine with another Python minor version still has them.
"""

from setuptools import Extension, setup

LIMITED_API = [("Py_LIMITED_API", "0x030A0000")]  # 3.10: the oldest Python ncclbench supports

setup(
    ext_modules=[
        # The timed loop's calls issued from C (ncclbench/nccl/native_loop.py).
        Extension("ncclbench.nccl._timedloop", ["src/ncclbench/nccl/_timedloop.c"], optional=True,
                  extra_compile_args=["-O2"], define_macros=LIMITED_API, py_limited_api=True),
        # NCCL profiler plugin (a plain shared object NCCL dlopens via NCCL_PROFILER_PLUGIN; never
        # imported by Python, so it uses no Python API at all): NCCL's algorithm/protocol/channels
        # per collective (explain/profiler.py).
        Extension("ncclbench.explain._ncclbench_profiler", ["src/ncclbench/explain/csrc/ncclbench_profiler.c"],
                  optional=True, extra_compile_args=["-O2", "-fvisibility=hidden"], libraries=["pthread"],
                  define_macros=LIMITED_API, py_limited_api=True),
    ],
    options={"bdist_wheel": {"py_limited_api": "cp310"}},
)
