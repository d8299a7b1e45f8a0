"""The recorder's fused statistics kernel (everything else is in pyproject.toml).

Optional: where it cannot be compiled (no C++ compiler), the install still succeeds and the
recorder uses torch's kernels instead, with the same results and more overhead on CPU runs.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("recorders._fused", ["recorders/_fused.cpp"],
                             extra_compile_args=["-O3"], optional=True)])
