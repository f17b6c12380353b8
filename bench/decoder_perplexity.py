"""A decoder's perplexity against the Flash its export gets, at each weight width (--weight-bits) and word-table
width (--embedding-bits): float, int8 with the word table dense, and int8 as `export` writes it for each Flash size
(the table compressed to what the model and its tokenizer leave).
Prints a table; not a test.

    python bench/decoder_perplexity.py CHECKPOINT [--task rotten_tomatoes --split test] [--flash 700KB,740KB,780KB]
        [--weight-bits 8,4] [--embedding-bits 8,4] [--json bench/results/decoder_perplexity.json]

Each int8 model runs one token a step over its KV caches in the numpy reference (which the C kernels equal
byte for byte), every position of the held-out blocks (train/language_model.blocks_of).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint")
    parser.add_argument("--task", default="rotten_tomatoes")
    parser.add_argument("--split", default="test")
    parser.add_argument("--flash", default="700KB,740KB,780KB,820KB")
    parser.add_argument("--weight-bits", default="8", help="the blocks' weight widths measured, e.g. 8,4 (default 8)")
    parser.add_argument(
        "--embedding-bits", default="8", help="the tied word table's storage widths measured, e.g. 8,4 (default 8)"
    )
    parser.add_argument("--blocks", type=int, help="only the first N held-out blocks (default: all)")
    parser.add_argument("--board", default="nucleo-f746zg", help="whose SRAM and reserves (default nucleo-f746zg)")
    parser.add_argument("--json", help="also write the summary here (bench/report.py renders its table)")
    args = parser.parse_args(argv)

    from provenance import provenance
    from tflm_mcubert.boards import get_board, parse_size
    from tflm_mcubert.data.tasks import load_task
    from tflm_mcubert.errors import DoesNotFitError
    from tflm_mcubert.export.decoder_evaluation import exported_perplexity, int8_perplexity
    from tflm_mcubert.export.decoder_export import calibration_sequences, load_decoder_model
    from tflm_mcubert.export.request import ExportRequest
    from tflm_mcubert.ops.widths import Widths
    from tflm_mcubert.quantize.quantized_decoder import calibrate_decoder
    from tflm_mcubert.train.language_model import blocks_of, perplexity

    started = time.time()
    board = get_board(args.board)
    request = ExportRequest(out_dir=Path("."), board=board, checkpoint=args.checkpoint)
    model, tokenizer, _ = load_decoder_model(request)
    blocks = blocks_of(tokenizer, list(load_task(args.task)[args.split]["text"]), model.config.max_positions)
    blocks = blocks[: args.blocks] if args.blocks else blocks
    sequences, _ = calibration_sequences(request, tokenizer, model.config.vocab_size, model.config.max_positions)
    rows = [{"flash": "-", "weight_bits": None, "variant": "float", "perplexity": perplexity(model, blocks)}]
    widths = [(w, e) for e in map(int, args.embedding_bits.split(",")) for w in map(int, args.weight_bits.split(","))]
    for bits, table_bits in widths:
        label = f"{bits}-bit weights, {table_bits}-bit table"
        dense = calibrate_decoder(model, sequences, widths=Widths.uniform(bits), embedding_bits=table_bits)
        widths_of = {"weight_bits": bits, **({"embedding_bits": table_bits} if table_bits != 8 else {})}
        rows.append({"flash": "-", **widths_of, "variant": "table dense", "perplexity": int8_perplexity(dense, blocks)})
        print(f"  {label}, table dense: {rows[-1]['perplexity']:.2f}", file=sys.stderr, flush=True)
        for size in args.flash.split(","):
            sized = dataclasses.replace(board, name=f"{board.name} with {size} Flash", flash_bytes=parse_size(size))
            width = dataclasses.replace(request, board=sized, weight_bits=bits, embedding_bits=table_bits)
            try:
                result = exported_perplexity(width, model, tokenizer, sequences, blocks)
            except DoesNotFitError as misfit:
                rows.append({"flash": size, **widths_of, "variant": "does not fit", "why": str(misfit)})
                print(f"  {label}, {size}: does not fit", file=sys.stderr, flush=True)
                continue
            compression = result["compression"]
            share = compression["params"] / model.config.vocab_size / model.config.hidden_size
            rows.append(
                {
                    "flash": size,
                    **widths_of,
                    "variant": f"{compression['method']} table ({compression['params']:,} params, {share:.0%})",
                    "perplexity": result["perplexity"],
                    "flash_bytes": result["flash_bytes"],
                    "compression": compression,
                }
            )
            print(f"  {label}, {size}: {result['perplexity']:.2f}", file=sys.stderr, flush=True)
    summary = {
        "bench": "decoder_perplexity",
        "task": args.task,
        "split": args.split,
        "blocks": len(blocks),
        "context": model.config.max_positions,
        "board": board.name,
        "seconds": round(time.time() - started),
        "rows": rows,
        "provenance": provenance({"decoder": args.checkpoint}),
    }
    print(f"{args.checkpoint}: {len(blocks)} blocks of the {args.task} {args.split} split; {summary['seconds']} s")
    print(markdown_table(summary))
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1) + "\n")
    return 0


def markdown_table(summary: dict) -> str:
    """The summary's rows: Flash given, what the model and tokenizer take, weights, table (its storage int4 where
    the row says so), perplexity."""
    float_ppl = summary["rows"][0]["perplexity"]
    lines = [
        "| Flash given | model + tokenizer (B) | weights | word table | perplexity | vs float |",
        "|---|---:|---|---|---:|---:|",
    ]
    for row in summary["rows"]:
        if "perplexity" not in row:
            lines.append(f"| {row['flash']} | - | int{row['weight_bits']} | does not fit | - | - |")
            continue
        used = f"{row['flash_bytes']:,}" if "flash_bytes" in row else "-"
        weights = "float" if row["weight_bits"] is None else f"int{row['weight_bits']}"
        change = "-" if row["weight_bits"] is None else f"{row['perplexity'] / float_ppl - 1:+.1%}"
        table = "dense" if row["weight_bits"] is None else row["variant"]
        table += ", int4" if row.get("embedding_bits") == 4 else ""
        lines.append(f"| {row['flash']} | {used} | {weights} | {table} | {row['perplexity']:.2f} | {change} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
