"""`python -m tflm_mcubert classify --export OUT "some text"`: one sentence through an export as the firmware
computes it, on this machine: the export's tokenizer blob (tokenizer/reference.py, bit-exact with the C
tokenizer) and its model.tflite run by the reference interpreter (runtime/reference.py, bit-exact with the
C kernels). It prints the label by name and id, and the int8 logits, in the firmware's numbering: the same
line the bare-metal text check prints on the device. No TensorFlow: it answers in about a second."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tflm_mcubert.cli.tokenize import BLOB, as_bytes, export_report, shown
from tflm_mcubert.errors import UserError
from tflm_mcubert.model.labels import names_or_default
from tflm_mcubert.runtime.reference import ReferenceInputError, run_reference
from tflm_mcubert.tflite.mcubert_reader import ModelFormatError, read_model
from tflm_mcubert.tokenizer import bpe_blob, reference, vocab_blob

MODEL = "model.tflite"


def add_parser(subparsers) -> list[str]:
    classify = subparsers.add_parser(
        "classify", help="one sentence through an export, as the firmware computes it: label and int8 logits"
    )
    classify.add_argument("text", nargs="+", help="sentences to classify (each argument separately)")
    classify.add_argument("--export", type=Path, required=True, help="an export directory (export --out)")
    classify.add_argument("--pair", default=None, help="a second text: classify sentence pairs")
    return ["classify"]


def run(args) -> int:
    report = export_report(args.export)
    if report.get("model_kind") == "decoder":
        raise UserError(f"{args.export} is a decoder export: it generates text (tokenize --export shows its ids)")
    blob = (args.export / BLOB).read_bytes()
    if blob[:4] == bpe_blob.MAGIC:
        raise UserError(f"{args.export}/{BLOB} is a byte-level BPE blob: classify reads a BERT export")
    spec = vocab_blob.unpack(blob)
    model = _read(args.export / MODEL)
    if "logits" not in model.outputs:
        raise UserError(f"{args.export}/{MODEL} has no classifier head (an encoder's hidden states, no labels)")
    seq_len = model.quantized.seq_len
    logits_count = int(np.prod(model.tensor(model.outputs["logits"]).shape))
    names = names_or_default(report.get("model", {}).get("labels"), logits_count)
    pair = as_bytes(args.pair)
    for raw in map(as_bytes, args.text):
        encoded = reference.encode(spec, raw, seq_len, pair)
        inputs = {"input_ids": encoded.ids, "attention_mask": encoded.mask, "token_type_ids": encoded.token_types}
        try:
            logits = run_reference(model, inputs).outputs["logits"].reshape(-1)
        except ReferenceInputError as error:
            raise UserError(f"{args.export}: the model refused the tokenizer's ids ({error})") from None
        label = int(np.argmax(logits))  # the first on ties, as the firmware's
        print(f"text: {shown(raw)}" + (f" + {shown(pair)}" if pair is not None else ""))
        print(f"  label {names[label]} ({label}), logits [{', '.join(str(int(v)) for v in logits)}]")
        print(f"  tokens: {encoded.valid} of {seq_len}")
    return 0


def _read(path: Path):
    if not path.is_file():
        raise UserError(f"{path} not found: classify reads an export directory (export --out)")
    try:
        return read_model(path.read_bytes())
    except ModelFormatError as error:
        raise UserError(f"{path}: {error}") from None
