"""`tflm-check`: run an exported MCUBERT model in the real TFLM interpreter with our ops registered,
and compare every output byte with the numpy reference; report TFLM's arena against the plan.

Needs a TFLM checkout (TFLM_DIR at commit 90b983c; FLATBUFFERS_INCLUDE / GEMMLOWP_DIR when they are
not in TFLM's downloads folder), cmake, and a Python 3.13 for the matching tflite-micro wheel; see
runtime/tflm_binding.py. The interpreter environment is kept in ~/.cache/tflm_mcubert (or
TFLM_PYTHON_ENV) and the binding is rebuilt only when its sources change.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tflm_mcubert.cli import seed_argument
from tflm_mcubert.errors import UserError
from tflm_mcubert.export.mcubert_export import arena_of
from tflm_mcubert.export.tflm_arena import HOST_64
from tflm_mcubert.runtime.reference import run_reference
from tflm_mcubert.runtime.tflm_binding import TflmBinding, TflmSources, default_environment_dir
from tflm_mcubert.tflite.mcubert_reader import read_model

DEFAULT_SAMPLES = 3
GENEROUS_ARENA = 1 << 22  # for the byte-exactness runs; the arena is measured separately


def add_parser(subparsers) -> list[str]:
    check = subparsers.add_parser(
        "tflm-check",
        help="run an exported model in the real TFLM with the MCUBERT ops "
        "and compare with the reference (needs TFLM_DIR)",
    )
    check.add_argument("model", help="model.tflite, or the export's output directory")
    check.add_argument(
        "--samples",
        type=int,
        default=DEFAULT_SAMPLES,
        help=f"random inputs compared byte for byte (default {DEFAULT_SAMPLES})",
    )
    check.add_argument(
        "--no-arena-search",
        action="store_true",
        help="skip finding the least arena TFLM runs in (a bisection of ~15 runs)",
    )
    check.add_argument("--build-dir", help="where the binding is built (default: inside the interpreter environment)")
    check.add_argument("--seed", type=seed_argument, default=0)
    return ["tflm-check"]


def random_inputs(model, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """One valid input of `model` (read by tflite/mcubert_reader.py): a random length, ids and types."""
    s = model.quantized.seq_len
    embedding = model.quantized.embedding
    length = int(rng.integers(1, s + 1))
    ids = np.zeros((1, s), np.int32)
    ids[0, :length] = rng.integers(0, embedding.vocab_size, length)
    types = np.zeros((1, s), np.int32)
    types[0, :length] = rng.integers(0, embedding.type_vocab_size, length)
    mask = (np.arange(s) < length).astype(np.int8)[None]
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def _model_path(text: str) -> Path:
    path = Path(text)
    if path.is_dir():
        path = path / "model.tflite"
    if not path.is_file():
        raise UserError(f"{text}: no such model (give model.tflite or the export's output directory)")
    return path


def run(args) -> int:
    if args.samples < 1:
        raise UserError(f"--samples must be at least 1, got {args.samples}")
    model_bytes = _model_path(args.model).read_bytes()
    model = read_model(model_bytes)  # a clear error for anything but an MCUBERT model
    sources = TflmSources.from_environment()
    if sources is None:
        raise UserError(
            "TFLM_DIR is not set: point it at a tflite-micro checkout at commit 90b983c (the one "
            "the tflite-micro==0.dev20260820164721 wheel was built from)"
        )
    env_dir = default_environment_dir()
    build_dir = Path(args.build_dir) if args.build_dir else env_dir / "mcubert-binding"
    binding = TflmBinding.build(sources, env_dir, build_dir)

    rng = np.random.default_rng(args.seed)
    mismatches = 0
    for sample in range(args.samples):
        inputs = random_inputs(model, rng)
        expected = run_reference(model, inputs).outputs
        got = binding.run(model_bytes, inputs, GENEROUS_ARENA).outputs
        for name, want in expected.items():
            same = np.array_equal(got[name].reshape(want.shape), want)
            mismatches += not same
            length = int(inputs["attention_mask"].sum())
            differing = int(np.count_nonzero(got[name].reshape(want.shape) != want))
            verdict = "equal to the reference byte for byte" if same else f"DIFFERS in {differing} of {want.size} bytes"
            print(f"sample {sample} ({length} tokens): {name} {verdict}")

    last = binding.run(model_bytes, inputs, GENEROUS_ARENA).arena
    estimate = arena_of(model, HOST_64)
    print(
        f"TFLM arena (64-bit host): head {last['head']:,} B (the offline plan: {model.planned_bytes:,} B), "
        f"tail {last['tail']:,} B (TFLM's bookkeeping; export's model for this host: {estimate.tail_bytes:,} B)"
    )
    if not args.no_arena_search:
        smallest = binding.min_arena_bytes(
            model_bytes, inputs, lower_failing=model.planned_bytes - 1, upper=estimate.arena_bytes + 4096
        )
        print(
            f"least arena TFLM runs in: {smallest:,} B (export's model for this host: {estimate.arena_bytes:,} B; "
            f"on Cortex-M pointers are 4 bytes, which report.json's arena_bytes accounts for)"
        )
    if mismatches:
        print(f"{mismatches} output(s) differ from the reference")
        return 1
    return 0
