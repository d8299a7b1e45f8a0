"""Two optional C++ extensions (everything else is in pyproject.toml).

`recorders._fused`: the recorder's fused statistics kernel; `postmortem._kernels`: one pass per
batch for the analyzer's streaming read. Where they cannot be compiled (no C++ compiler), the
install still succeeds and both fall back (torch's kernels, numpy), with the same results and
more CPU time.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension(name, [source], extra_compile_args=["-O3"], optional=True)
                   for name, source in (("recorders._fused", "recorders/_fused.cpp"),
                                        ("postmortem._kernels", "postmortem/_kernels.cpp"))])
