"""The C API's contract: the header's constants and versions against SPEC.md and the Python contract, the
params structs' layouts on host and Arm against the Python mirror, and the buffer-size functions against the
reference layouts and the planner's reservations (both build variants, through the host driver).
"""

from __future__ import annotations

import ctypes
import itertools
import re
import subprocess
from pathlib import Path

import pytest

from kernel_build import CUSTOM_OPS, need_arm_toolchain
from kernel_cases import (
    CONTRACT_HEADER,
    HEADER,
    HEADER_SPEC_HASH,
    HEADER_SPEC_HASH_V2,
)
from tflm_mcubert.model.config import PRESETS
from tflm_mcubert.ops import attention, contract, embedding, mlp
from tflm_mcubert.ops.registry import SPEC_VERSION
from tflm_mcubert.ops import kernel_abi
from tflm_mcubert.schedule import planner
from tflm_mcubert.schedule.memory import Dims

ATTN, MLP, EMB = contract.ATTENTION, contract.MLP, contract.EMBEDDING
SPEC_MD = Path(attention.__file__).with_name("SPEC.md").read_text()


# ---- the contract the header implements -------------------------------------------------------


def test_header_implements_the_contract_spec_md_documents():
    """MCUBERT_SPEC_HASH / VERSION equal the values SPEC.md quotes (which tests/ops keeps equal
    to ops/registry.py): change the contract, and this names the header as the next stop."""
    quoted = re.search(r"Spec hash of this version: \*\*`(0x[0-9a-f]{8})`\*\* \(`SPEC_VERSION = (\d+)`\)", SPEC_MD)
    assert quoted, "SPEC.md no longer quotes the hash in the expected form"
    text = CONTRACT_HEADER.read_text()
    assert f"#define MCUBERT_SPEC_VERSION {quoted.group(2)}" in text
    assert int(quoted.group(1), 16) == HEADER_SPEC_HASH, (
        f"the generated mcubert_contract.h implements 0x{HEADER_SPEC_HASH:08x}, SPEC.md "
        f"documents {quoted.group(1)}: update MCUBERT_SPEC_HASH (and the kernels, if the numerics changed)"
    )
    assert int(quoted.group(2)) == SPEC_VERSION


def test_header_implements_version_2_as_spec_md_documents():
    from tflm_mcubert.ops import registry

    quoted = re.search(r"Version 2 \(hash \*\*`(0x[0-9a-f]{8})`\*\*, `SPEC_VERSION_INT4 = (\d+)`\)", SPEC_MD)
    assert quoted and int(quoted.group(1), 16) == HEADER_SPEC_HASH_V2 == registry.SPEC_HASH_V2
    assert f"#define MCUBERT_SPEC_VERSION_INT4 {quoted.group(2)}" in CONTRACT_HEADER.read_text()
    assert f"#define MCUBERT_INT4_ROW_SCALE_BYTES {contract.INT4_ROW_SCALE_BYTES}" in HEADER.read_text()


def test_header_limits_equal_the_contract():
    text = HEADER.read_text()
    for name, value in (
        ("MAX_SEQ_LEN", contract.MAX_SEQ_LEN),
        ("MAX_HIDDEN", contract.MAX_HIDDEN),
        ("MAX_FFN", contract.MAX_FFN),
        ("MAX_HEADS", contract.MAX_HEADS),
        ("MAX_CLUSTERS", contract.MAX_CLUSTERS),
        ("MAX_TYPE_VOCAB", contract.MAX_TYPE_VOCAB),
    ):
        assert f"#define MCUBERT_{name} {value}" in text, name


def _layout_asserts() -> str:
    """C11 static assertions that the C structs have exactly kernel_abi's ctypes layout."""
    lines = ["#include <stddef.h>", '#include "mcubert/mcubert_ops.h"']
    for op, struct in kernel_abi.PARAMS_STRUCTS.items():
        c_name = f"mcubert_{op.split('_', 1)[1].lower()}_params"
        lines.append(f'_Static_assert(sizeof({c_name}) == {ctypes.sizeof(struct)}, "{c_name} size");')
        for field, _ in struct._fields_:
            offset = getattr(struct, field).offset
            lines.append(f'_Static_assert(offsetof({c_name}, {field}) == {offset}, "{c_name}.{field}");')
        fields = kernel_abi.weight_fields(op)
        w_name = c_name.replace("_params", "_weights")
        lines.append(f'_Static_assert(sizeof({w_name}) == {len(fields)} * sizeof(void *), "{w_name}");')
        for i, field in enumerate(fields):
            lines.append(f'_Static_assert(offsetof({w_name}, {field}) == {i} * sizeof(void *), "{w_name}.{field}");')
    for op, names in kernel_abi.TENSOR_NAMES.items():
        prefix = f"MCUBERT_{op.split('_', 1)[1]}"
        lines.append(f'_Static_assert({prefix}_NUM_TENSORS == {len(names)}, "{prefix} tensors");')
        for i, name in enumerate(names):
            enum = f"{prefix}_{name.upper()}" if name != "output" else f"{prefix}_OUTPUT"
            lines.append(f'_Static_assert({enum} == {i}, "{enum}");')
    lines.append('_Static_assert(sizeof(mcubert_tensor_view) == sizeof(void *) + 8, "view");')
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("compiler", ["gcc", "arm-none-eabi-gcc"])
def test_structs_match_the_python_mirror_on_host_and_arm(tmp_path, compiler):
    if compiler == "arm-none-eabi-gcc":
        need_arm_toolchain()
    source = tmp_path / "layout.c"
    source.write_text(_layout_asserts())
    flags = ["-mcpu=cortex-m7", "-mthumb"] if compiler.startswith("arm") else []
    proc = subprocess.run(
        [
            compiler,
            "-std=c11",
            "-c",
            *flags,
            f"-I{CUSTOM_OPS / 'include'}",
            str(source),
            "-o",
            str(tmp_path / "layout.o"),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr


# ---- buffer sizes -------------------------------------------------------------------------------


def _grid():
    for s, d, t in itertools.product(
        [1, 2, 3, 4, 5, 7, 16, 77, 128, 300, 512, 1024],
        [1, 3, 16, 64, 128, 256, 768, 1024],
        [1, 2, 3, 4, 5, 8, 28, 64, 1024],
    ):
        if t <= s:
            yield s, d, t


def test_buffer_sizes_equal_the_reference_layouts_over_a_grid(host_library):
    """get_buffer_size == the ops' scratch_bytes (which the planner reserves) for every shape."""
    lib = ctypes.CDLL(str(host_library))
    for fn in ("mcubert_attention_get_buffer_size", "mcubert_mlp_get_buffer_size"):
        getattr(lib, fn).argtypes = [ctypes.c_int32] * 4
    lib.mcubert_embedding_get_buffer_size.argtypes = [ctypes.c_int32] * 2
    checked = 0
    for s, d, t in _grid():
        assert lib.mcubert_embedding_get_buffer_size(s, d) == embedding.scratch_bytes(s, d)
        for h in sorted({1, 2, 3, 4, 12, 64} & {h for h in range(1, 65) if d % h == 0}):
            assert lib.mcubert_attention_get_buffer_size(s, d, h, t) == attention.scratch_bytes(s, d, h, t), (
                s,
                d,
                h,
                t,
            )
            checked += 1
        for f in (1, 37, 4 * d if 4 * d <= contract.MAX_FFN else contract.MAX_FFN, contract.MAX_FFN):
            assert lib.mcubert_mlp_get_buffer_size(s, d, f, t) == mlp.scratch_bytes(s, d, f, t), (s, d, f, t)
    assert checked > 1000


@pytest.mark.parametrize(
    "preset,s,budget_kib",
    [("bert-tiny", 128, 44), ("bert-tiny", 512, 170), ("bert-mini", 512, 298), ("bert-tiny", 77, 40)],
)
def test_buffer_sizes_equal_what_the_planner_reserves(host_library, preset, s, budget_kib):
    lib = ctypes.CDLL(str(host_library))
    plan = planner.plan_model(PRESETS[preset], s, budget_kib * planner.KIB)
    dims = Dims.of(PRESETS[preset])
    for op in plan.ops:
        if op.kind == "embedding":
            got = lib.mcubert_embedding_get_buffer_size(s, dims.hidden)
        elif op.kind == "attention":
            got = lib.mcubert_attention_get_buffer_size(s, dims.hidden, dims.heads, op.tile)
        elif op.kind == "mlp":
            got = lib.mcubert_mlp_get_buffer_size(s, dims.hidden, dims.ffn, op.tile)
        else:
            continue  # ops without a kernel here yet
        assert got == op.scratch_bytes, op.name
        assert plan.buffer(op.scratch).nbytes >= got


@pytest.mark.parametrize(
    "op,dims",
    [
        (EMB, (0, 8)),
        (EMB, (1025, 8)),
        (EMB, (8, 0)),
        (EMB, (8, 1025)),
        (ATTN, (8, 16, 3, 4)),
        (ATTN, (8, 16, 2, 9)),
        (ATTN, (8, 16, 2, 0)),
        (ATTN, (8, 16, 0, 1)),
        (ATTN, (8, 128, 128, 1)),
        (ATTN, (0, 16, 2, 1)),
        (MLP, (8, 16, 0, 1)),
        (MLP, (8, 16, 4097, 1)),
        (MLP, (8, 16, 32, 9)),
        (MLP, (8, 1025, 32, 1)),
    ],
)
def test_buffer_size_of_invalid_dims_is_minus_one(runner, op, dims):
    assert runner.buffer_size(op, dims) == -1
