"""`python -m tflm_mcubert tokenize --export OUT "some text"`: the export's on-device tokenizer (the C
code, built for this machine) on your text, next to the Hugging Face tokenizer the ids must equal.

Text that is not valid UTF-8 on the command line is taken as the bytes it is, as the device takes them:
each maximal invalid sequence is one dropped character (custom_ops' mcubert_tokenizer.h), which is what
Hugging Face's tokenizer does with Python's `decode(errors="replace")` of the bytes."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tflm_mcubert.errors import UserError
from tflm_mcubert.export.export_folder import REPORT, TOKENIZER_DIR, model_ids, read_report
from tflm_mcubert.firmware.vocab_files import VOCAB_NAME
from tflm_mcubert.model.config import MIN_SEQ_LEN
from tflm_mcubert.tokenizer import bpe_blob
from tflm_mcubert.tokenizer.bpe_host import HostBpeTokenizer
from tflm_mcubert.tokenizer.host import HostTokenizer

BLOB = f"{VOCAB_NAME}.bin"
# The longest --seq-len when the export's report.json does not give its model's position table: BERT's.
DEFAULT_MAX_POSITIONS = 512


def add_parser(subparsers) -> list[str]:
    tokenize = subparsers.add_parser(
        "tokenize", help="run an export's on-device tokenizer (the C code) on text, next to Hugging Face's"
    )
    tokenize.add_argument(
        "text", nargs="+", help="text to tokenize (each argument separately; not UTF-8: taken as bytes)"
    )
    tokenize.add_argument(
        "--export", type=Path, help="an export directory (holds model_vocab.bin: BERT's WordPiece or a decoder's BPE)"
    )
    tokenize.add_argument(
        "--gpt2",
        type=Path,
        help="a GPT-2 / GPT-Neo checkpoint folder (tokenizer.json, or vocab.json + merges.txt): its byte-level "
        "BPE on the device's C code, ids and the text decoded back one id at a time, next to Hugging Face's; with "
        "--export of a decoder: the export's own BPE blob next to this folder's tokenizer (default: the export's "
        "checkpoint)",
    )
    tokenize.add_argument("--pair", default=None, help="a second text: tokenize sentence pairs")
    tokenize.add_argument("--seq-len", type=int, default=None, help="positions (default: the export's seq_len)")
    return ["tokenize"]


def reference_tokenizer(export_dir: Path, report: dict):
    """The Hugging Face tokenizer that emits the export's ids (its permuted one, else the checkpoint's), as
    a `tokenizers.Tokenizer` read from its files: no transformers (nor torch) import, so this answers in
    about a second."""
    listed = report.get("files")  # tokenizer/ is the export's only when its report lists it (no report: any)
    candidates = [export_dir / TOKENIZER_DIR] if listed is None or f"{TOKENIZER_DIR}/" in listed else []
    checkpoint = report.get("model", {}).get("checkpoint")
    if isinstance(checkpoint, str) and checkpoint:
        candidates.append(Path(checkpoint))
    for candidate in candidates:
        tokenizer = tokenizer_from_files(candidate)
        if tokenizer is not None:
            return tokenizer, candidate
    return None, None


def tokenizer_from_files(directory: Path):
    """`tokenizers`' tokenizer of a Hugging Face tokenizer folder: its tokenizer.json, else a BERT
    WordPiece tokenizer from its vocab.txt and tokenizer_config.json's options; None when it has neither."""
    from tokenizers import Tokenizer
    from tokenizers.implementations import BertWordPieceTokenizer

    try:
        if (directory / "tokenizer.json").is_file():
            return Tokenizer.from_file(str(directory / "tokenizer.json"))
        if not (directory / "vocab.txt").is_file():
            return None
        config_path = directory / "tokenizer_config.json"
        config = json.loads(config_path.read_text(encoding="utf-8")) if config_path.is_file() else {}
    except Exception as exc:  # noqa: BLE001 - tokenizers raises a bare Exception for a bad file
        raise UserError(f"{directory}: its Hugging Face tokenizer could not be read ({exc})") from None
    return BertWordPieceTokenizer(
        str(directory / "vocab.txt"),
        lowercase=config.get("do_lower_case", True),
        strip_accents=config.get("strip_accents"),
        handle_chinese_chars=config.get("tokenize_chinese_chars", True),
    )


def hugging_face_ids(tokenizer, raw: bytes, pair: bytes | None, seq_len: int) -> list[int]:
    """Ids as transformers' `tokenizer(text, pair, truncation=True, max_length=seq_len)` gives them."""
    tokenizer.enable_truncation(seq_len)  # LongestFirst, as transformers' truncation=True
    tokenizer.no_padding()
    second = None if pair is None else pair.decode("utf-8", errors="replace")
    return tokenizer.encode(raw.decode("utf-8", errors="replace"), second).ids


def export_report(export_dir: Path) -> dict:
    """The export's report.json through export's validated reader ({} when there is none); a blob the
    report does not list is another export's, refused."""
    blob = export_dir / BLOB
    if not blob.is_file():
        raise UserError(
            f"{blob} not found: export with a checkpoint that has a tokenizer "
            "(python -m tflm_mcubert export --checkpoint DIR --out OUT)"
        )
    path = export_dir / REPORT
    report = read_report(path) if path.is_file() else {}
    if "files" in report and BLOB not in report["files"]:
        raise UserError(f"--export {export_dir}: {BLOB} is not this export's (its {REPORT} does not list it)")
    return report


def seq_len_of(args, report: dict) -> int:
    """--seq-len (default the export's), checked against the model's position table before any allocation."""
    seq_len = args.seq_len if args.seq_len is not None else report.get("seq_len", 128)
    config = report.get("model", {}).get("config")
    limit = config.get("max_position_embeddings") if isinstance(config, dict) else None
    limit = limit if isinstance(limit, int) and limit >= MIN_SEQ_LEN else DEFAULT_MAX_POSITIONS
    if not MIN_SEQ_LEN <= seq_len <= limit:
        raise UserError(
            f"--seq-len must be from {MIN_SEQ_LEN} ([CLS] and [SEP]) to {limit:,} (the model's position "
            f"embeddings), got {seq_len:,}"
        )
    return seq_len


def as_bytes(text: str | None) -> bytes | None:
    """An argument as the bytes it was given as (argv that is not UTF-8 arrives as surrogate escapes)."""
    return None if text is None else os.fsencode(text)


def shown(raw: bytes, invalid: str = "dropped") -> str:
    try:
        return repr(raw.decode("utf-8"))
    except UnicodeDecodeError:
        return f"{raw!r} (not valid UTF-8: each invalid sequence is {invalid}, as on the device)"


def run_gpt2(args) -> int:
    """The on-device BPE tokenizer and detokenizer (mcubert_bpe_tokenizer.h) on a GPT-2 checkpoint's
    tokenizer, next to Hugging Face's ids and decode(skip_special_tokens=True)."""
    _refuse_bert_options(args)
    hf = bpe_blob.read_checkpoint(args.gpt2)
    blob = bpe_blob.pack(bpe_blob.spec_from_tokenizer(hf))
    return compare_bpe(HostBpeTokenizer(blob), len(blob), args.text, hf, args.gpt2, None)


def run_decoder_export(args, blob: bytes, report: dict) -> int:
    """A decoder export's own byte-level BPE blob (in the model's id order) on the text, next to Hugging
    Face's tokenizer of --gpt2, else of the export's checkpoint, its ids mapped to the model's."""
    _refuse_bert_options(args)
    host = HostBpeTokenizer(blob)
    folder = args.gpt2
    checkpoint = report.get("model", {}).get("checkpoint")
    if folder is None and isinstance(checkpoint, str) and checkpoint and Path(checkpoint).is_dir():
        folder = Path(checkpoint)
    hf = bpe_blob.read_checkpoint(folder) if folder is not None else None
    to_model = None
    if hf is not None:
        vocab_size = len(bpe_blob.unpack(blob).tokens)
        to_model = model_ids(args.export, vocab_size)
        if hf.get_vocab_size(with_added_tokens=True) > len(to_model):
            raise UserError(f"{folder}: its tokenizer has more ids than the export's model ({len(to_model):,})")
    return compare_bpe(host, len(blob), args.text, hf, folder, to_model)


def _refuse_bert_options(args) -> None:
    if args.pair is not None or args.seq_len is not None:
        raise UserError("--pair and --seq-len are BERT's: a GPT-2 tokenizer encodes one text, whole")


def compare_bpe(host: HostBpeTokenizer, blob_bytes: int, texts, hf, hf_source, to_model) -> int:
    """Prints, per text, the device's ids and its text decoded one id at a time, next to Hugging Face's
    (`to_model`: its ids mapped into the device's numbering; None: the same numbering); 1 when any differ."""
    print(f"BPE blob: {blob_bytes:,} bytes (format version {bpe_blob.VERSION}), scratch {host.buffer_bytes:,} bytes")
    identical = True
    for raw in map(as_bytes, texts):
        ids = host.encode(raw)
        text = host.decode(ids, one_at_a_time=True)
        print(f"text: {shown(raw, 'one U+FFFD')}")
        print(f"  device ({len(ids)} ids): {ids}")
        if hf is None:
            print(f"  decoded one id at a time: {text.decode(errors='replace')!r}")
            continue
        checkpoint_ids = hf.encode(raw.decode("utf-8", errors="replace"), add_special_tokens=False).ids
        expected = checkpoint_ids if to_model is None else [int(to_model[i]) for i in checkpoint_ids]
        hf_text = hf.decode(checkpoint_ids, skip_special_tokens=True).encode()
        identical &= expected == ids and text == hf_text
        print(f"  hugging face ({hf_source}): {expected}  {'identical' if expected == ids else 'DIFFERENT'}")
        print(f"  decoded one id at a time: {text.decode()!r}  {'identical' if text == hf_text else 'DIFFERENT'}")
    if hf is None:
        print("(no Hugging Face tokenizer: give --gpt2 DIR to compare)")
    return 0 if identical else 1


def run(args) -> int:
    if args.export is None and args.gpt2 is None:
        raise UserError(
            "give --export OUT (an export with a tokenizer blob) or --gpt2 DIR (a GPT-2 / GPT-Neo checkpoint "
            "folder), or both for a decoder export"
        )
    if args.export is None:
        return run_gpt2(args)
    report = export_report(args.export)
    blob = (args.export / BLOB).read_bytes()
    if blob[:4] == bpe_blob.MAGIC:
        return run_decoder_export(args, blob, report)
    if args.gpt2 is not None:
        raise UserError(f"--gpt2 compares a byte-level BPE; {args.export}'s tokenizer blob is BERT's WordPiece")
    seq_len = seq_len_of(args, report)
    host = HostTokenizer(blob)
    hf, hf_source = reference_tokenizer(args.export, report)
    pair = as_bytes(args.pair)
    identical = True
    for raw in map(as_bytes, args.text):
        encoded = host.encode(raw, seq_len, pair)
        ids = [int(i) for i in encoded.ids[: encoded.valid]]
        print(f"text: {shown(raw)}" + (f" + {shown(pair)}" if pair is not None else ""))
        print(f"  device ({encoded.valid} of {seq_len} positions): {ids}")
        if pair is not None:
            print(f"  token types: {[int(t) for t in encoded.token_types[: encoded.valid]]}")
        if hf is not None:
            expected = hugging_face_ids(hf, raw, pair, seq_len)
            same = expected == ids
            identical &= same
            print(f"  hugging face ({hf_source}): {expected}  {'identical' if same else 'DIFFERENT'}")
    if hf is None:
        print("(no Hugging Face tokenizer found next to the export or at its checkpoint: nothing to compare)")
    return 0 if identical else 1
