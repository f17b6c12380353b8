"""Data of the firmware layer check: one full encoder layer of an exported model, as C.

The bare-metal `mcubert_layer_check` (examples/baremetal/) runs layer 0 of an MCUBERT export —
MCUBERT_ATTENTION then MCUBERT_MLP, through the C kernels, without TFLM — and compares the result byte for
byte with the numpy reference. This module writes what it needs, `layer_data.h` / `layer_data.c`:

    params and weights structs   decoded from the .tflite by tflite/mcubert_reader.py (the same options and
                                 constant tensors the TFLM binding hands the kernels)
    tensor views                 for mcubert_<op>_validate, constants with their data
    input hidden state           the embedding's output for the export's test sequence (reference run)
    mask                         that sequence's attention mask
    expected hidden state        the reference's output of layer0.mlp
    soak digests (--soak N)      CRC-32 of the reference's output for N more inputs, which the firmware
                                 regenerates from a counter hash (soak_input) instead of storing them

    python -m tflm_mcubert.firmware.layer_check EXPORT_DIR OUT_DIR [--soak N]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import zlib
from pathlib import Path
from typing import Mapping

import numpy as np

from tflm_mcubert.errors import UserError
from tflm_mcubert.firmware import c_data
from tflm_mcubert.firmware.firmware_files import read_test_input
from tflm_mcubert.firmware.template import fill
from tflm_mcubert.ops import attention, kernel_abi, mlp
from tflm_mcubert.runtime.reference import run_reference
from tflm_mcubert.tflite.mcubert_reader import read_model

HEADER = "layer_data.h"
SOURCE = "layer_data.c"


class LayerCheckError(UserError):
    """The export cannot provide a layer check (not an MCUBERT model, no test input)."""


@dataclasses.dataclass(frozen=True)
class LayerCheck:
    attention: kernel_abi.KernelCall
    mlp: kernel_abi.KernelCall
    input_hidden: np.ndarray  # int8[s * d]: the embedding's output
    expected_hidden: np.ndarray  # int8[s * d]: layer0.mlp's output
    scratch_bytes: int  # the larger of the two ops' scratch
    source: str
    soak_crcs: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.uint32))

    @property
    def seq_len(self) -> int:
        return int(self.attention.params.seq_len)

    @property
    def hidden(self) -> int:
        return int(self.attention.params.hidden)


def soak_hash(run: int, index: np.ndarray) -> np.ndarray:
    """A 32-bit counter hash (lowbias32 of run * golden ratio ^ index); the firmware computes the same."""
    x = np.uint32((run * 0x9E3779B1) & 0xFFFFFFFF) ^ np.asarray(index, np.uint32)
    with np.errstate(over="ignore"):
        x ^= x >> np.uint32(16)
        x *= np.uint32(0x7FEB352D)
        x ^= x >> np.uint32(15)
        x *= np.uint32(0x846CA68B)
        x ^= x >> np.uint32(16)
    return x


def soak_input(run: int, s: int, d: int) -> tuple[np.ndarray, np.ndarray]:
    """Soak run `run`'s layer input: hidden int8[s * d] from the hash, and a mask of 1 + hash % s ones."""
    hidden = (soak_hash(run, np.arange(s * d)) & np.uint32(0xFF)).astype(np.uint8).view(np.int8)
    valid = 1 + int(soak_hash(run, np.array([s * d]))[0]) % s
    return hidden, (np.arange(s) < valid).astype(np.int8)


def soak_crcs(attention_params, mlp_params, runs: int) -> np.ndarray:
    """CRC-32 (zlib's) of the reference's layer output for each soak input."""
    s, d = attention_params.seq_len, attention_params.hidden
    crcs = np.zeros(runs, np.uint32)
    for run in range(runs):
        hidden, mask = soak_input(run, s, d)
        out = mlp.run(mlp_params, attention.run(attention_params, hidden.reshape(s, d), mask).reshape(s, d))
        crcs[run] = zlib.crc32(np.asarray(out, np.int8).tobytes())
    return crcs


def layer_check(tflite: bytes, inputs: Mapping[str, np.ndarray], source: str = "", soak_runs: int = 0) -> LayerCheck:
    """Layer 0 of an MCUBERT .tflite on one input sequence (input_ids, attention_mask, token_type_ids),
    and the digests of `soak_runs` more inputs."""
    model = read_model(tflite)
    names = [node.name for node in model.nodes]
    if names[1:3] != ["layer0.attention", "layer0.mlp"]:  # the reader guarantees this; say so if not
        raise LayerCheckError(f"expected layer0.attention and layer0.mlp after the embedding, found {names[1:3]}")
    seen: dict[str, np.ndarray] = {}
    run_reference(model, inputs, trace=lambda name, value: seen.__setitem__(name, value))
    attention_params, mlp_params = model.quantized.layers[0]
    s = attention_params.seq_len
    mask = np.asarray(inputs.get("attention_mask", np.ones(s)), np.int8).reshape(-1)
    input_hidden = seen[names[0]].reshape(-1).astype(np.int8)
    attention_call = kernel_abi.attention_call(attention_params, input_hidden, mask)
    mlp_call = kernel_abi.mlp_call(mlp_params, seen["layer0.attention"].reshape(-1).astype(np.int8))
    scratch = max(node.op.scratch_bytes(node.params) for node in model.quantized.nodes()[1:3])
    return LayerCheck(
        attention_call,
        mlp_call,
        input_hidden,
        seen["layer0.mlp"].reshape(-1).astype(np.int8),
        scratch,
        source,
        soak_crcs(attention_params, mlp_params, soak_runs),
    )


def layer_check_from_export(export_dir: str | Path, soak_runs: int = 0) -> LayerCheck:
    """Layer 0 of the export in `export_dir` (model.tflite) on its test sequence (model_test_input.json)."""
    export_dir = Path(export_dir)
    model_path = export_dir / "model.tflite"
    if not model_path.is_file():
        raise LayerCheckError(f"{model_path}: missing (export a model into {export_dir} first)")
    inputs, _ = read_test_input(export_dir)
    tflite = model_path.read_bytes()
    try:
        return layer_check(
            tflite, inputs, source=f"{model_path}, layer 0, the export's test sequence", soak_runs=soak_runs
        )
    except UserError as exc:
        raise LayerCheckError(f"{model_path}: the layer check needs an MCUBERT-schedule export: {exc}") from None


# ---------------------------------------------------------------------------------------------
# C rendering
# ---------------------------------------------------------------------------------------------


def render_header(check: LayerCheck) -> str:
    return fill(
        "layer_data.h.tmpl",
        source=check.source or "an MCUBERT export",
        seq_len=check.seq_len,
        hidden=check.hidden,
        hidden_bytes=check.seq_len * check.hidden,
        scratch_bytes=check.scratch_bytes,
        soak_runs=check.soak_crcs.size,
    )


def render_source(check: LayerCheck) -> str:
    parts = [
        f"/* Generated by tflm_mcubert/firmware/layer_check.py; see {HEADER}. Do not edit. */\n"
        f'#include <stddef.h>\n\n#include "{HEADER}"\n'
    ]
    parts += c_data.op_data(check.attention, "layer_attention")
    parts += c_data.op_data(check.mlp, "layer_mlp")
    parts.append(c_data.array("layer_mask", check.attention.tensors["mask"]))
    parts.append(c_data.array("layer_input_hidden", check.input_hidden))
    parts.append(c_data.array("layer_expected_hidden", check.expected_hidden))
    crcs = ",\n".join(f"    0x{int(c):08x}u" for c in check.soak_crcs) or "    0u"
    parts.append(f"const uint32_t layer_soak_crc[{max(check.soak_crcs.size, 1)}] = {{\n{crcs}\n}};\n")
    return "\n".join(parts)


def write_layer_data(check: LayerCheck, out_dir: str | Path) -> tuple[Path, Path]:
    """Write layer_data.h and layer_data.c into `out_dir` (created if needed)."""
    return c_data.write_sources(out_dir, {HEADER: render_header(check), SOURCE: render_source(check)})


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tflm_mcubert.firmware.layer_check",
        description="layer_data.c/.h of examples/baremetal's mcubert_layer_check",
    )
    parser.add_argument("export_dir", help="output directory of `python -m tflm_mcubert export` (mcubert schedule)")
    parser.add_argument("out_dir", help="where to write layer_data.c and layer_data.h")
    parser.add_argument(
        "--soak",
        type=int,
        default=0,
        metavar="N",
        help="also check N more inputs (regenerated on the device) and that stack and arena "
        "use stay constant (default 0)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not 0 <= args.soak <= 100_000:
        parser.error(f"--soak must be from 0 to 100000, got {args.soak}")
    return c_data.report_written(
        lambda: write_layer_data(layer_check_from_export(args.export_dir, args.soak), args.out_dir)
    )


if __name__ == "__main__":
    sys.exit(main())
