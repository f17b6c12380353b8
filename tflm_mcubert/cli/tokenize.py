"""`python -m tflm_mcubert tokenize --export OUT "some text"`: the export's on-device tokenizer (the C
code, built for this machine) on your text, next to the Hugging Face tokenizer the ids must equal."""

from __future__ import annotations

import json
from pathlib import Path

from tflm_mcubert.errors import UserError
from tflm_mcubert.tokenizer.host import HostTokenizer


def add_parser(subparsers) -> list[str]:
    tokenize = subparsers.add_parser(
        "tokenize", help="run an export's on-device tokenizer (the C code) on text, next to Hugging Face's"
    )
    tokenize.add_argument("text", nargs="+", help="text to tokenize (each argument separately)")
    tokenize.add_argument("--export", required=True, type=Path, help="an export directory (holds model_vocab.bin)")
    tokenize.add_argument("--pair", default=None, help="a second text: tokenize sentence pairs")
    tokenize.add_argument("--seq-len", type=int, default=None, help="positions (default: the export's seq_len)")
    return ["tokenize"]


def reference_tokenizer(export_dir: Path, report: dict):
    """The Hugging Face tokenizer that emits the export's ids (its permuted one, else the checkpoint's)."""
    candidates = [export_dir / "tokenizer"]
    checkpoint = report.get("model", {}).get("checkpoint")
    if checkpoint:
        candidates.append(Path(checkpoint))
    for candidate in candidates:
        if candidate.is_dir():
            from transformers import AutoTokenizer

            return AutoTokenizer.from_pretrained(str(candidate)), candidate
    return None, None


def run(args) -> int:
    blob_path = args.export / "model_vocab.bin"
    if not blob_path.is_file():
        raise UserError(
            f"{blob_path} not found: export with a checkpoint that has a BERT tokenizer "
            "(python -m tflm_mcubert export --checkpoint DIR --out OUT)"
        )
    report_path = args.export / "report.json"
    report = json.loads(report_path.read_text()) if report_path.is_file() else {}
    seq_len = args.seq_len or report.get("seq_len") or 128
    host = HostTokenizer(blob_path.read_bytes())
    hf, hf_source = reference_tokenizer(args.export, report)
    identical = True
    for text in args.text:
        encoded = host.encode(text, seq_len, args.pair)
        ids = [int(i) for i in encoded.ids[: encoded.valid]]
        print(f"text: {text!r}" + (f" + {args.pair!r}" if args.pair else ""))
        print(f"  device ({encoded.valid} of {seq_len} positions): {ids}")
        if args.pair:
            print(f"  token types: {[int(t) for t in encoded.token_types[: encoded.valid]]}")
        if hf is not None:
            expected = hf(text, args.pair, truncation=True, max_length=seq_len)["input_ids"]
            same = expected == ids
            identical &= same
            print(f"  hugging face ({hf_source}): {expected}  {'identical' if same else 'DIFFERENT'}")
    if hf is None:
        print("(no Hugging Face tokenizer found next to the export or at its checkpoint: nothing to compare)")
    return 0 if identical else 1
