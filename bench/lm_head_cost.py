"""The tied LM head (MCUBERT_LM_HEAD) through the clustered table against the dense int8 head, on an emulated core.

Prints a table; not a test. For each hidden size, a BERT-vocabulary table (30,522 ids) is compressed to
the paper's default embedding shape (adaptive embedding: cut-offs 1000/4000/10000, ranks d, d/4, d/16,
d/64) and quantized as the embedding op stores it; the LM head tied to it is run by the kernel library
under unicorn for a few hidden states, and so is the head tied to the same table stored dense (one
cluster of full int8 rows: the int8 dense LM head, the same kernel with no low-rank clusters), and the
clustered head over the same table stored int4 (`--embedding-bits 4`: nibbles, cluster 0's row scales). Every
result is checked byte for byte against the numpy reference, and the executed instructions of the head
call are counted (validate excluded); the ratios are to the dense head, measured in one run.

    python bench/lm_head_cost.py [--dims 64,128] [--cores cortex-m7,cortex-m4] [--top-k 1] [--tokens 3]
                                 [--summary FILE]

--summary writes the committed summary (bench/results/lm_head_cost.json, with provenance); bench/report.py
makes the decoder page's table of it.

Needs arm-none-eabi-gcc and the `unicorn` package (pip install -e .[bench]).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tflm_mcubert.compress.baselines import ADAPTIVE_CUTOFFS, BERT_VOCAB_SIZE  # noqa: E402
from tflm_mcubert.measure import kernel_build  # noqa: E402
from tflm_mcubert.measure.arm_emulator import ArmEmulator, run_kernel  # noqa: E402
from tflm_mcubert.model.clustered_lm_head import head_macs  # noqa: E402
from tflm_mcubert.ops import kernel_abi, lm_head  # noqa: E402
from tflm_mcubert.ops.embedding import EmbeddingFloat, EmbeddingParams  # noqa: E402
from tflm_mcubert.ops.layernorm import LayerNormParams  # noqa: E402
from tflm_mcubert.ops.lm_head import LmHeadParams  # noqa: E402
from tflm_mcubert.ops.quantization import TensorQuant  # noqa: E402


def tables(d: int, rng: np.random.Generator) -> tuple[EmbeddingFloat, EmbeddingFloat]:
    """The paper's default clustered shape and the same table stored dense, as float embeddings."""
    bounds = [0, *ADAPTIVE_CUTOFFS, BERT_VOCAB_SIZE]
    ranks = [None] + [max(1, d // 4**i) for i in (1, 2, 3)]
    clusters = []
    for (start, end), rank in zip(zip(bounds[:-1], bounds[1:]), ranks):
        n = end - start
        if rank is None:
            clusters.append((rng.normal(0, 0.05, (n, d)), None))
        else:
            clusters.append((rng.normal(0, 0.2, (n, rank)), rng.normal(0, 0.2, (rank, d))))
    dense = np.concatenate([u if vt is None else u @ vt for u, vt in clusters])
    extras = (rng.normal(0, 0.02, (8, d)), rng.normal(0, 0.02, (2, d)), np.ones(d), np.zeros(d))
    return EmbeddingFloat(tuple(clusters), *extras), EmbeddingFloat(((dense, None),), *extras)


def head_arrays(params: LmHeadParams) -> dict:
    """clustered_lm_head's array view of a head's clusters (for its multiply-add count)."""
    views = params.cluster_views
    arrays = {"boundaries": [0] + [v.end for v in views], "dim": params.hidden, "table_0": views[0].rows}
    for i, v in enumerate(views[1:], start=1):
        arrays[f"u_{i}"], arrays[f"vt_{i}"] = v.rows, v.projection.T
    return arrays


def measure(emu: ArmEmulator, params: LmHeadParams, hiddens: np.ndarray) -> float:
    counts = []
    for hidden in hiddens:
        call = kernel_abi.lm_head_call(params, hidden)
        run = run_kernel(emu, call, count_instructions=True)
        expected = lm_head.run(params, hidden, np.zeros((2, params.top_k), np.int32)).reshape(-1)
        if run.status != kernel_abi.OK or not np.array_equal(run.output, expected):
            raise SystemExit(f"the kernel differs from the reference ({run.message or 'wrong output'})")
        counts.append(run.instructions)
    return float(np.mean(counts))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dims", default="64,128", help="hidden sizes (default 64,128)")
    parser.add_argument("--cores", default="cortex-m7,cortex-m4", help="emulated cores")
    parser.add_argument("--top-k", type=int, default=1, help="ids kept (1: greedy decoding)")
    parser.add_argument("--tokens", type=int, default=3, help="hidden states per measurement (mean)")
    parser.add_argument("--summary", type=Path, help="write the summary here (bench/results/lm_head_cost.json)")
    args = parser.parse_args(argv)
    dims = [int(d) for d in args.dims.split(",")]
    rng = np.random.default_rng(0)
    heads = {}
    for d in dims:
        clustered, dense = tables(d, rng)
        quant = TensorQuant(0.05, 0)
        normed = TensorQuant(0.04, -3)
        final = {
            "layer_norm": LayerNormParams.from_float(np.ones(d), np.zeros(d), 1e-5, 0.01, normed),
            "residual": np.zeros((d, 2), np.int32),
        }
        heads[d] = [
            LmHeadParams.tie(EmbeddingParams.quantize(table, quant, word_bits=bits), normed, args.top_k, **final)[0]
            for table, bits in ((clustered, 8), (dense, 8), (clustered, 4))
        ]
    hiddens = {d: rng.integers(-128, 128, (args.tokens, d)).astype(np.int8) for d in dims}
    print(f"LM head over {BERT_VOCAB_SIZE:,} ids, top-{args.top_k}, mean of {args.tokens} tokens, all bit-exact")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for cpu in args.cores.split(","):
            image = kernel_build.build(kernel_build.Variant(cpu), Path(tmp), "mcubert_emu").image("mcubert_emu")
            emu = ArmEmulator(image, cpu)
            for d in dims:
                clustered, dense, int4 = heads[d]
                c, n = measure(emu, clustered, hiddens[d]), measure(emu, dense, hiddens[d])
                macs = head_macs(head_arrays(clustered)), head_macs(head_arrays(dense))
                row = {"core": cpu, "d": d, "macs": list(macs), "instructions": [c, n]}
                rows.append(row | {"instructions_int4_tables": measure(emu, int4, hiddens[d])})
                print(rows[-1], flush=True)
    summary = {"bench": "lm_head_cost", "command": "python bench/lm_head_cost.py " + " ".join(argv or sys.argv[1:])}
    summary |= {"vocab_size": BERT_VOCAB_SIZE, "top_k": args.top_k, "tokens": args.tokens, "rows": rows}
    print(markdown_table(summary))
    if args.summary:
        from provenance import provenance

        args.summary.write_text(json.dumps(summary | {"provenance": provenance({})}, indent=1) + "\n")
    return 0


def markdown_table(summary: dict) -> str:
    """Per core and hidden size: multiply-adds and executed instructions, clustered (int8 and int4 tables) and dense
    (decoder page)."""
    out = [
        "| core | d | clustered MACs | dense MACs | clustered instructions | dense instructions | clustered / dense "
        "| clustered, int4 tables | int4 / int8 tables |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in summary["rows"]:
        (cm, dm), (c, n), q = r["macs"], r["instructions"], r["instructions_int4_tables"]
        core = r["core"].replace("cortex-m", "Cortex-M")
        out.append(
            f"| {core} | {r['d']} | {cm:,} | {dm:,} | {c:,.0f} | {n:,.0f} | {c / n:.3f} | {q:,.0f} | {q / c:.2f} |"
        )
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
