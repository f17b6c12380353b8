"""Data of the firmware text check: every op of an exported model and its tokenizer, as C.

The bare-metal `mcubert_text_check` (examples/baremetal/) reads sentences, tokenizes each on the device
(mcubert_tokenizer) and runs the whole model — MCUBERT_EMBEDDING, each layer's MCUBERT_ATTENTION and
MCUBERT_MLP, MCUBERT_CLASSIFIER_HEAD — through the C kernels, without TFLM. This module writes what it
needs, `text_data.h` / `text_data.c`:

    params, weights, tensor views   of every op, decoded from the .tflite by tflite/mcubert_reader.py
                                    (firmware/c_data.py: the layer check's rendering)
    tokenizer blob                  the export's model_vocab.bin, and the scratch its tokenizer needs
    sizes                           seq_len, hidden, layers, labels; one scratch of the largest op's size

    python -m tflm_mcubert.firmware.whole_model_data EXPORT_DIR OUT_DIR
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import numpy as np

from tflm_mcubert.errors import UserError
from tflm_mcubert.firmware import c_data
from tflm_mcubert.firmware.c_string import c_string_literal
from tflm_mcubert.firmware.template import fill
from tflm_mcubert.firmware.vocab_files import VOCAB_NAME
from tflm_mcubert.model.labels import check_label_names, default_label_names
from tflm_mcubert.ops import contract, kernel_abi
from tflm_mcubert.tflite.mcubert_reader import read_model
from tflm_mcubert.tokenizer import vocab_blob

HEADER = "text_data.h"
SOURCE = "text_data.c"


class WholeModelDataError(UserError):
    """The export cannot provide the text check (not an MCUBERT classifier, no tokenizer blob)."""


@dataclasses.dataclass(frozen=True)
class WholeModel:
    embedding: kernel_abi.KernelCall
    layers: tuple[tuple[kernel_abi.KernelCall, kernel_abi.KernelCall], ...]  # (attention, mlp) each
    head: kernel_abi.ClassifierHeadCall
    vocab: bytes  # the tokenizer blob
    tokenizer_buffer_bytes: int
    scratch_bytes: int  # the largest op's
    source: str = ""
    label_names: tuple[str, ...] = ()  # by id; empty: HF's default "LABEL_0", ...

    @property
    def seq_len(self) -> int:
        return int(self.embedding.params.seq_len)

    @property
    def hidden(self) -> int:
        return int(self.embedding.params.hidden)

    @property
    def labels(self) -> int:
        return int(self.head.params.labels)


def tokenizer_buffer_bytes(max_chars_per_word: int) -> int:
    """mcubert_tokenizer_get_buffer_size(): one word's UTF-8 (4 B a character) and u16 character ends."""
    slots = max_chars_per_word + 1
    return 4 * slots + ((2 * slots + 3) & ~3)


def text_line_bytes(seq_len: int) -> int:
    """The text check's line buffer: enough bytes that the tokenizer's `seq_len`, not the buffer, ends a
    sentence (16 B a token is well above any script's bytes per word piece: English ~4.5, CJK 3 a token)."""
    return max(1024, 16 * seq_len)


def whole_model(tflite: bytes, vocab: bytes, source: str = "") -> WholeModel:
    """The kernel calls of every op of an MCUBERT classifier .tflite (run-time inputs zero), and `vocab`."""
    q = read_model(tflite).quantized
    if q.head is None:
        raise WholeModelDataError("the model has no MCUBERT_CLASSIFIER_HEAD (export a sequence classifier)")
    try:
        spec = vocab_blob.unpack(vocab)
    except (UserError, ValueError) as exc:
        raise WholeModelDataError(f"the tokenizer blob is not readable: {exc}") from None
    s, d = q.seq_len, q.hidden
    hidden = np.zeros((s, d), np.int8)
    emb = kernel_abi.embedding_call(q.embedding, np.zeros(s, np.int32), np.zeros(s, np.int32))
    layers = []
    scratch = max(node.op.scratch_bytes(node.params) for node in q.nodes())
    for att, ff in q.layers:
        key_mask = att.mask_mode == contract.MASK_MODE_KEY_MASK
        mask = np.zeros(s, np.int8) if key_mask else np.zeros(1, np.int32)
        layers.append((kernel_abi.attention_call(att, hidden, mask), kernel_abi.mlp_call(ff, hidden)))
    head = kernel_abi.classifier_head_call(q.head, hidden)
    return WholeModel(
        emb, tuple(layers), head, bytes(vocab), tokenizer_buffer_bytes(spec.max_chars_per_word), scratch, source
    )


def whole_model_from_export(export_dir: str | Path) -> WholeModel:
    """The model, tokenizer and label names of the export in `export_dir` (model.tflite, model_vocab.bin,
    report.json's model.labels)."""
    export_dir = Path(export_dir)
    model_path, vocab_path = export_dir / "model.tflite", export_dir / f"{VOCAB_NAME}.bin"
    if not model_path.is_file():
        raise WholeModelDataError(f"{model_path}: missing (export a model into {export_dir} first)")
    if not vocab_path.is_file():
        raise WholeModelDataError(
            f"{vocab_path}: missing (the export writes it for a checkpoint whose tokenizer the device can run)"
        )
    try:
        model = whole_model(model_path.read_bytes(), vocab_path.read_bytes(), source=str(model_path))
        return dataclasses.replace(model, label_names=tuple(_export_label_names(export_dir, model.labels)))
    except WholeModelDataError as exc:
        raise WholeModelDataError(f"{model_path}: {exc}") from None
    except UserError as exc:
        raise WholeModelDataError(f"{model_path}: the text check needs an MCUBERT-schedule export: {exc}") from None


def _export_label_names(export_dir: Path, count: int) -> list[str]:
    """report.json's label names (HF's default when the report has none, as for an older export)."""
    report = export_dir / "report.json"
    try:
        names = json.loads(report.read_text()).get("model", {}).get("labels") if report.is_file() else None
    except (OSError, json.JSONDecodeError, UnicodeDecodeError, AttributeError) as exc:
        raise WholeModelDataError(f"{report}: unreadable ({exc})") from None
    if names is None:
        return default_label_names(count)
    if not isinstance(names, list) or len(names) != count:
        raise WholeModelDataError(f"{report}: model.labels should name the model's {count} labels, got {names!r}")
    check_label_names(names, f"{report} model.labels")
    return names


# ---------------------------------------------------------------------------------------------
# C rendering
# ---------------------------------------------------------------------------------------------


def render_header(model: WholeModel) -> str:
    return fill(
        "text_data.h.tmpl",
        source=model.source or "an MCUBERT export",
        seq_len=model.seq_len,
        hidden=model.hidden,
        layers=len(model.layers),
        labels=model.labels,
        label_names=", ".join(c_string_literal(n) for n in (model.label_names or default_label_names(model.labels))),
        hidden_bytes=model.seq_len * model.hidden,
        scratch_bytes=model.scratch_bytes,
        vocab_bytes=len(model.vocab),
        tokenizer_buffer_bytes=model.tokenizer_buffer_bytes,
        line_bytes=text_line_bytes(model.seq_len),
    )


def render_source(model: WholeModel) -> str:
    args = (model.embedding, model.layers, model.head, model.vocab)
    return c_data.model_data("whole_model_data.py", HEADER, "text", *args)


def write_text_data(model: WholeModel, out_dir: str | Path) -> tuple[Path, Path]:
    """Write text_data.h and text_data.c into `out_dir` (created if needed)."""
    return c_data.write_sources(out_dir, {HEADER: render_header(model), SOURCE: render_source(model)})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tflm_mcubert.firmware.whole_model_data",
        description="text_data.c/.h of examples/baremetal's mcubert_text_check (text in, label out, no TFLM)",
    )
    parser.add_argument(
        "export_dir",
        help="output directory of `python -m tflm_mcubert export` (mcubert schedule, "
        "a sequence classifier with a tokenizer)",
    )
    parser.add_argument("out_dir", help="where to write text_data.c and text_data.h")
    args = parser.parse_args(argv)
    try:
        header, source = write_text_data(whole_model_from_export(args.export_dir), args.out_dir)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {source} and {header}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
