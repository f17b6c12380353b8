"""Which int4 scale granularity fits a compressed embedding's word tables best: the word vectors' mean
relative error (||w - w_hat|| / ||w|| over the rows of each cluster) of int8 and several int4 choices,
on a checkpoint's embedding compressed as `export` does by default (numpy only, no kernels).

    python bench/embedding_int4_granularity.py --checkpoint CKPT

Not a test: prints one line per cluster. "ours" is what ops/SPEC.md 4.1.1 stores.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def fake_int4(x: np.ndarray, scale: np.ndarray) -> np.ndarray:
    scale = np.where(scale > 0, scale, 1.0)
    return np.clip(np.round(x / scale), -7, 7) * scale


def fake_int8(x: np.ndarray, scale: np.ndarray) -> np.ndarray:
    scale = np.where(scale > 0, scale, 1.0)
    return np.clip(np.round(x / scale), -127, 127) * scale


def relative_error(want: np.ndarray, got: np.ndarray) -> float:
    norms = np.maximum(np.linalg.norm(want, axis=1), 1e-12)
    return float(np.mean(np.linalg.norm(want - got, axis=1) / norms))


def dense_variants(u: np.ndarray) -> dict[str, np.ndarray]:
    channel = np.abs(u).max(axis=0)
    normalized = u / np.where(channel > 0, channel, 1.0)
    return {
        "int8 per channel": fake_int8(u, channel / 127),
        "int4 per channel": fake_int4(u, channel / 7),
        "int4 per row": fake_int4(u, np.abs(u).max(axis=1, keepdims=True) / 7),
        "int4 per row x channel (ours)": fake_int4(normalized, np.abs(normalized).max(axis=1, keepdims=True) / 7)
        * channel,
    }


def low_rank_variants(u: np.ndarray) -> dict[str, np.ndarray]:
    column = np.abs(u).max(axis=0)
    normalized = u / np.where(column > 0, column, 1.0)
    return {
        "int8 per tensor": fake_int8(u, np.abs(u).max() / 127),
        "int4 per tensor": fake_int4(u, np.full_like(column, np.abs(u).max() / 7)),
        "int4 per column (ours)": fake_int4(u, column / 7),
        "int4 per row": fake_int4(u, np.abs(u).max(axis=1, keepdims=True) / 7),
        "int4 per row x column": fake_int4(normalized, np.abs(normalized).max(axis=1, keepdims=True) / 7) * column,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True)
    args = parser.parse_args()
    from tflm_mcubert.data.calibration import Calibration
    from tflm_mcubert.export.mcubert_export import default_compression
    from tflm_mcubert.export.pipeline import load_model
    from tflm_mcubert.quantize.float_model import FloatBert

    model, tokenizer, _ = load_model(args.checkpoint)
    calibration = Calibration.load(None, tokenizer=tokenizer, vocab_size=model.config.vocab_size, count=32)
    model, _ = default_compression(model, tokenizer, calibration.sentences)
    for i, (u, vt) in enumerate(FloatBert.from_keras(model).embedding_for(2).clusters):
        if vt is None:
            errors = {name: relative_error(u, q) for name, q in dense_variants(u).items()}
            what = f"cluster 0 ({u.shape[0]} rows, d {u.shape[1]})"
        else:
            errors = {name: relative_error(u @ vt, q @ vt) for name, q in low_rank_variants(u).items()}
            what = f"cluster {i} ({u.shape[0]} rows, rank {u.shape[1]})"
        print(what + ": " + ", ".join(f"{name} {value:.4f}" for name, value in errors.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
