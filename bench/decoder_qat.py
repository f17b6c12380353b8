"""The decoder's quantization-aware fine-tune against post-training quantization: test perplexity of the int8
model with the word table dense and as the export compresses it for a smaller Flash, after PTQ and after QAT,
and of the float model. Prints the figures; not a test.

    python -m tflm_mcubert train-lm --vocab-size 2048 --context 256 --epochs 12 --out runs/lm/rt-d128x2
    python bench/decoder_qat.py --checkpoint runs/lm/rt-d128x2 [--flash 740KB] [--qat-steps 300]
                                [--calibration-samples 256] [--summary bench/results/decoder_qat.json]

The same measurement as `python -m tflm_mcubert evaluate --checkpoint CKPT --task rotten_tomatoes --flash 740KB
--qat-steps 300 --calibration FILE --calibration-samples 256` (export/decoder_evaluation.py), with FILE the
task's training split shuffled (seed 0), written here. --summary writes the committed summary; bench/report.py
makes the decoder page's QAT table of it.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import recorded_results  # noqa: E402


def calibration_file(task: str, path: Path, seed: int = 0) -> Path:
    """The task's training sentences, shuffled, one a line."""
    from tflm_mcubert.data.tasks import load_task

    texts = [" ".join(t.split()) for t in load_task(task)["train"]["text"]]
    order = np.random.default_rng(seed).permutation(len(texts))
    path.write_text("\n".join(texts[i] for i in order if texts[i]) + "\n")
    return path


def measure(args) -> dict:
    import dataclasses

    from tflm_mcubert.boards import get_board, parse_size
    from tflm_mcubert.data.tasks import load_task
    from tflm_mcubert.export.decoder_evaluation import evaluate_decoder
    from tflm_mcubert.export.request import ExportRequest

    board = get_board(args.board)
    board = dataclasses.replace(board, name=f"{board.name} with {args.flash} Flash", flash_bytes=parse_size(args.flash))
    texts = list(load_task(args.task)["test"]["text"])
    with tempfile.TemporaryDirectory() as tmp:
        request = ExportRequest(
            out_dir=Path(tmp),
            board=board,
            checkpoint=str(args.checkpoint),
            calibration=str(calibration_file(args.task, Path(tmp) / "train_shuffled.txt")),
            calibration_count=args.calibration_samples,
            qat_steps=args.qat_steps,
        )
        return evaluate_decoder(request, texts)


def summary(result: dict, args, seconds: float) -> dict:
    from provenance import provenance
    from tflm_mcubert.quantize.decoder_qat import DECODER_LEARNING_RATE

    compression = result["exported"]["compression"]
    flags = "".join(
        f" --{flag} {value}"
        for flag, value, default in (
            ("flash", args.flash, "740KB"),
            ("qat-steps", args.qat_steps, 300),
            ("calibration-samples", args.calibration_samples, 256),
        )
        if value != default
    )
    compressed = f"table compressed for {args.flash.replace('KB', ' KB')} ({compression['method']}"
    if "params" in compression and "dense_params" in compression:
        share = compression["params"] / compression["dense_params"]
        compressed += f", {compression['params']:,} params: {share:.0%}"
    return {
        "bench": "decoder_qat",
        "command": f"python bench/decoder_qat.py --checkpoint CKPT{flags} --summary {args.summary}",
        "setting": {
            "model": args.model,
            "texts": f"{args.task} test split, {result['blocks']} blocks of {result['context']} tokens",
            "calibration": f"{args.calibration_samples} shuffled sentences of the training split",
            "qat_steps": args.qat_steps,
            "lr": f"{DECODER_LEARNING_RATE:g}",
            "seconds": round(seconds),
            "runs": "one run each",
        },
        "rows": [
            {
                "model": "word table dense",
                "ptq": round(result["int8_dense_perplexity"], 2),
                "qat": round(result["int8_dense_qat_perplexity"], 2),
                "float": round(result["float_perplexity_int8_blocks"], 2),
            },
            {
                "model": compressed + ")",
                "ptq": round(result["int8_exported_ptq_perplexity"], 2),
                "qat": round(result["int8_exported_perplexity"], 2),
                "float": None,
            },
        ],
        "compression": compression,
        "flash_bytes": result["exported"]["flash_bytes"],
        "provenance": provenance({"decoder": args.checkpoint}),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoint", type=Path, required=True, help="a decoder (train-lm's output)")
    parser.add_argument("--task", default="rotten_tomatoes")
    parser.add_argument("--board", default="nucleo-f746zg")
    parser.add_argument("--flash", default="740KB", help="the Flash the compressed table is sized to")
    parser.add_argument("--qat-steps", type=int, default=300)
    parser.add_argument("--calibration-samples", type=int, default=256)
    parser.add_argument(
        "--model",
        default=recorded_results.DEMONSTRATION_DECODER,
        help="the summary's words for the checkpoint",
    )
    parser.add_argument("--summary", type=Path, help="write the committed summary (bench/results/decoder_qat.json)")
    args = parser.parse_args(argv)
    started = time.time()
    result = measure(args)
    seconds = time.time() - started
    print(json.dumps({k: v for k, v in result.items() if k != "calibration"}, indent=1, default=str))
    print(f"measured in {seconds:.0f} s")
    if args.summary:
        args.summary.write_text(json.dumps(summary(result, args, seconds), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
