"""Where the kernels' C sources are: a checkout's custom_ops/ (also behind an editable install), or
the copy a wheel carries as tflm_mcubert/custom_ops/ (setup.py makes it from the same folder)."""

from __future__ import annotations

from pathlib import Path

from tflm_mcubert.errors import UserError

_PACKAGED = Path(__file__).with_name("custom_ops")
_CHECKOUT = Path(__file__).resolve().parents[1] / "custom_ops"


def custom_ops_dir() -> Path:
    """The folder holding CMakeLists.txt, src/, include/ and tflm/ of the kernels."""
    for candidate in (_PACKAGED, _CHECKOUT):
        if (candidate / "CMakeLists.txt").is_file():
            return candidate
    raise UserError(
        f"the kernels' C sources are missing (neither {_PACKAGED} nor {_CHECKOUT}): reinstall tflm-mcubert "
        "from its wheel, or install a checkout with `pip install -e .`"
    )
