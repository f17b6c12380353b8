"""Build hook: the wheel carries the kernels' C sources.

custom_ops/ at the repository root stays the one source of truth; building a wheel copies it into
the package as tflm_mcubert/custom_ops/ (tflm_mcubert/kernel_sources.py finds either), so a
non-editable install can build the TFLM binding and firmware. Everything else is in pyproject.toml.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
# What a build of the kernels needs; build outputs and caches stay behind, and so does the generated
# contract header (a checkout's copy may be stale; the installed package writes its own on first use,
# tflm_mcubert/kernel_sources.py).
IGNORED = shutil.ignore_patterns("build", "__pycache__", "*.o", "*.a", "*.so", "*.elf", "mcubert_contract.h")


class BuildPyWithKernels(build_py):
    def run(self):
        super().run()
        target = Path(self.build_lib) / "tflm_mcubert" / "custom_ops"
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(ROOT / "custom_ops", target, ignore=IGNORED)


setup(cmdclass={"build_py": BuildPyWithKernels})
