"""A decoder's perplexity against the Flash its export gets: float, int8 with the word table dense, and int8 as
`export` writes it for each Flash size (the table compressed to what the model and its tokenizer leave).
Prints a table; not a test.

    python bench/decoder_perplexity.py CHECKPOINT [--task rotten_tomatoes --split test] [--flash 700KB,740KB,780KB]

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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint")
    parser.add_argument("--task", default="rotten_tomatoes")
    parser.add_argument("--split", default="test")
    parser.add_argument("--flash", default="700KB,740KB,780KB,820KB")
    parser.add_argument("--board", default="nucleo-f746zg", help="whose SRAM and reserves (default nucleo-f746zg)")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args(argv)

    from tflm_mcubert.boards import get_board, parse_size
    from tflm_mcubert.data.tasks import load_task
    from tflm_mcubert.export.decoder_evaluation import exported_perplexity, int8_perplexity
    from tflm_mcubert.export.decoder_export import calibration_sequences, load_decoder_model
    from tflm_mcubert.export.request import ExportRequest
    from tflm_mcubert.quantize.quantized_decoder import calibrate_decoder
    from tflm_mcubert.train.language_model import blocks_of, perplexity

    started = time.time()
    board = get_board(args.board)
    request = ExportRequest(out_dir=Path("."), board=board, checkpoint=args.checkpoint)
    model, tokenizer, _ = load_decoder_model(request)
    blocks = blocks_of(tokenizer, list(load_task(args.task)[args.split]["text"]), model.config.max_positions)
    sequences, _ = calibration_sequences(request, tokenizer, model.config.vocab_size, model.config.max_positions)
    float_ppl = perplexity(model, blocks)
    dense_ppl = int8_perplexity(calibrate_decoder(model, sequences), blocks)
    rows = [{"flash": "-", "variant": "float", "perplexity": float_ppl}]
    rows.append({"flash": "-", "variant": "int8, table dense", "perplexity": dense_ppl})
    for size in args.flash.split(","):
        sized = dataclasses.replace(board, name=f"{board.name} with {size} Flash", flash_bytes=parse_size(size))
        result = exported_perplexity(dataclasses.replace(request, board=sized), model, tokenizer, sequences, blocks)
        compression = result["compression"]
        share = compression["params"] / model.config.vocab_size / model.config.hidden_size
        rows.append(
            {
                "flash": size,
                "variant": f"int8, {compression['method']} table ({compression['params']:,} params, {share:.0%})",
                "perplexity": result["perplexity"],
                "flash_bytes": result["flash_bytes"],
                "compression": compression,
            }
        )
    print(
        f"{args.checkpoint}: {len(blocks)} blocks of the {args.task} {args.split} split; {time.time() - started:.0f} s"
    )
    print("Flash    model+tokenizer B  variant                                         perplexity  vs float")
    for row in rows:
        used = f"{row['flash_bytes']:,}" if "flash_bytes" in row else "-"
        change = row["perplexity"] / float_ppl - 1
        print(f"{row['flash']:<8} {used:>17}  {row['variant']:<46}  {row['perplexity']:>10.2f}  {change:+.1%}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
