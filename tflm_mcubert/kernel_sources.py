"""Where the kernels' C sources are: a checkout's custom_ops/ (also behind an editable install), or
the copy a wheel carries as tflm_mcubert/custom_ops/ (setup.py makes it from the same folder).

Either way the folder is returned with its generated contract header in place
(include/mcubert/mcubert_contract.h, from tflm_mcubert/ops/c_contract.py; git-ignored, never edited),
so every build and every copy of the kernels made through here sees the contract this package implements.
"""

from __future__ import annotations

from pathlib import Path

from tflm_mcubert.errors import UserError
from tflm_mcubert.ops import c_contract

_PACKAGED = Path(__file__).with_name("custom_ops")
_CHECKOUT = Path(__file__).resolve().parents[1] / "custom_ops"


def custom_ops_dir() -> Path:
    """The folder holding CMakeLists.txt, src/, include/ and tflm/ of the kernels."""
    for candidate in (_PACKAGED, _CHECKOUT):
        if (candidate / "CMakeLists.txt").is_file():
            write_contract_header(candidate / "include" / "mcubert")
            return candidate
    raise UserError(
        f"the kernels' C sources are missing (neither {_PACKAGED} nor {_CHECKOUT}): reinstall tflm-mcubert "
        "from its wheel, or install a checkout with `pip install -e .`"
    )


def write_contract_header(directory: Path) -> Path:
    """`directory`/mcubert_contract.h with this package's contract (c_contract.write_header)."""
    try:
        return c_contract.write_header(directory)
    except OSError as error:
        raise UserError(f"cannot write the kernels' contract header in {directory}: {error}") from None
