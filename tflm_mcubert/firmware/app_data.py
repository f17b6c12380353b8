"""Data of the bare-metal apps (examples/baremetal/): every op of an exported model, and its tokenizer, as C.

The apps run a whole model through the C kernels, without TFLM; which app an export feeds follows from
the topology its .tflite holds:

    encoder   mcubert_text_check: sentences in, tokenized on the device (WordPiece), a label out
              text_data.h / text_data.c (needs a classifier head and the export's tokenizer blob)
    decoder   mcubert_generate: prompts in, one token per step over the int8 KV caches, the greedy
              continuation out; text through the byte-level BPE blob when the export has one, else ids
              generate_data.h / generate_data.c

Each op's params and tensor views are decoded from the .tflite (tflite/mcubert_reader.py) and rendered by
firmware/c_data.py (a decoder's tied word table once) with the node table the app walks: each node's op id
and the graph value of each of its tensors, from the topology (ops/topology.py). The header holds the sizes
(one scratch of the largest op's size) and the values the app binds to its buffers.

    python -m tflm_mcubert.firmware.app_data EXPORT_DIR OUT_DIR
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
from tflm_mcubert.ops.topology import DECODER, ENCODER
from tflm_mcubert.tflite.mcubert_reader import read_model
from tflm_mcubert.tokenizer import bpe_blob, vocab_blob

GENERATOR = "app_data.py"


class AppDataError(UserError):
    """The export cannot feed a bare-metal app (no classifier head, no tokenizer blob, a blob of another
    export, ...)."""


@dataclasses.dataclass(frozen=True)
class AppData:
    """Every kernel call of an exported model (run-time inputs zero), in run order, and its tokenizer."""

    app: str  # the C data's prefix: "text" (mcubert_text_check) or "generate" (mcubert_generate)
    first: kernel_abi.KernelCall
    layers: tuple[tuple[kernel_abi.KernelCall, kernel_abi.KernelCall], ...]  # one layer's two ops each
    last: kernel_abi.KernelCall
    scratch_bytes: int  # the largest op's
    vocab: bytes = b""  # the tokenizer blob (a decoder without one: prompts are ids)
    source: str = ""
    label_names: tuple[str, ...] = ()  # a classifier's, by id; empty: HF's default "LABEL_0", ...
    after: tuple[kernel_abi.KernelCall, ...] = ()  # the ops after the head (a decoder's sampler), in run order

    @property
    def nodes(self) -> list[c_data.AppNode]:
        """Every call in run order as a node of the app's topology."""
        calls = [self.first, *(call for layer in self.layers for call in layer), self.last, *self.after]
        return c_data.app_nodes(_TOPOLOGIES[self.app], calls)

    @property
    def header(self) -> str:
        return f"{self.app}_data.h"

    @property
    def c_source(self) -> str:
        return f"{self.app}_data.c"


def tokenizer_buffer_bytes(max_chars_per_word: int) -> int:
    """mcubert_tokenizer_get_buffer_size(): one word's UTF-8 (4 B a character) and u16 character ends."""
    slots = max_chars_per_word + 1
    return 4 * slots + ((2 * slots + 3) & ~3)


def text_line_bytes(seq_len: int) -> int:
    """The text check's line buffer: enough bytes that the tokenizer's `seq_len`, not the buffer, ends a
    sentence (16 B a token is well above any script's bytes per word piece: English ~4.5, CJK 3 a token)."""
    return max(1024, 16 * seq_len)


def _largest_scratch(q) -> int:
    return max(node.op.scratch_bytes(node.params) for node in q.nodes())


def _encoder_calls(q, vocab: bytes, source: str) -> AppData:
    """The text check's data: an MCUBERT classifier and its WordPiece blob."""
    if q.head is None:
        raise AppDataError("the model has no MCUBERT_CLASSIFIER_HEAD (export a sequence classifier)")
    if not vocab:
        raise AppDataError(
            f"{VOCAB_NAME}.bin: missing (the export writes it for a checkpoint whose tokenizer the device can run)"
        )
    try:
        vocab_blob.unpack(vocab)
    except (UserError, ValueError) as exc:
        raise AppDataError(f"the tokenizer blob is not readable: {exc}") from None
    s, d = q.seq_len, q.hidden
    hidden = np.zeros((s, d), np.int8)
    layers = []
    for attention, mlp in q.layers:
        key_mask = attention.mask_mode == contract.MASK_MODE_KEY_MASK
        mask = np.zeros(s, np.int8) if key_mask else np.zeros(1, np.int32)
        layers.append((kernel_abi.attention_call(attention, hidden, mask), kernel_abi.mlp_call(mlp, hidden)))
    first = kernel_abi.embedding_call(q.embedding, np.zeros(s, np.int32), np.zeros(s, np.int32))
    last = kernel_abi.classifier_head_call(q.head, hidden)
    return AppData("text", first, tuple(layers), last, _largest_scratch(q), bytes(vocab), source)


def _decoder_calls(q, vocab: bytes, source: str) -> AppData:
    """The generator's data: an MCUBERT decoder and, when the export wrote one, its byte-level BPE blob."""
    d, n = q.hidden, q.context
    hidden, position = np.zeros(d, np.int8), np.zeros(1, np.int32)
    layers = tuple(
        (
            kernel_abi.causal_attention_call(attention, hidden, position, np.zeros((2, n, d), np.int8)),
            kernel_abi.decoder_mlp_call(mlp, hidden),
        )
        for attention, mlp in q.layers
    )
    if vocab:
        spec = bpe_blob.unpack(vocab)  # names what is wrong with a damaged blob
        if spec.vocab_size != q.head.vocab_size:
            raise AppDataError(
                f"{VOCAB_NAME}.bin: {spec.vocab_size} ids, the model {q.head.vocab_size} (another export's?)"
            )
    first = kernel_abi.decoder_embedding_call(q.embedding, 0, 0)
    last = kernel_abi.lm_head_call(q.head, hidden)
    top, state = np.zeros((2, q.head.top_k), np.int32), np.zeros(1, np.int32)
    after = (kernel_abi.op_call(q.sample, top=top, rng_state=state),) if q.sample is not None else ()
    return AppData("generate", first, layers, last, _largest_scratch(q), bytes(vocab), source, after=after)


# The app each topology feeds: how its calls are made, its header's template and its sizes.
_APPS = {ENCODER.name: _encoder_calls, DECODER.name: _decoder_calls}
_TOPOLOGIES = {"text": ENCODER, "generate": DECODER}


def app_data(tflite: bytes, vocab: bytes = b"", source: str = "") -> AppData:
    """The bare-metal data of an MCUBERT .tflite (any topology) and its tokenizer blob."""
    q = read_model(tflite, None).quantized
    return _APPS[q.topology.name](q, vocab, source)


def app_data_from_export(export_dir: str | Path) -> AppData:
    """The model, tokenizer blob and (a classifier's) label names of the export in `export_dir`
    (model.tflite, model_vocab.bin, report.json's model.labels)."""
    export_dir = Path(export_dir)
    model_path, vocab_path = export_dir / "model.tflite", export_dir / f"{VOCAB_NAME}.bin"
    if not model_path.is_file():
        raise AppDataError(f"{model_path}: missing (export a model into {export_dir} first)")
    vocab = vocab_path.read_bytes() if vocab_path.is_file() else b""
    try:
        data = app_data(model_path.read_bytes(), vocab, source=str(model_path))
    except AppDataError as exc:
        raise AppDataError(f"{model_path}: {exc}") from None
    except UserError as exc:
        raise AppDataError(f"{model_path}: the bare-metal apps need an MCUBERT-schedule export: {exc}") from None
    if data.app != "text":
        return data
    return dataclasses.replace(data, label_names=tuple(_export_label_names(export_dir, _labels(data))))


def _labels(data: AppData) -> int:
    return int(data.last.params.labels)


def _export_label_names(export_dir: Path, count: int) -> list[str]:
    """report.json's label names (HF's default when the report has none, as for an older export)."""
    report = export_dir / "report.json"
    try:
        names = json.loads(report.read_text()).get("model", {}).get("labels") if report.is_file() else None
    except (OSError, json.JSONDecodeError, UnicodeDecodeError, AttributeError) as exc:
        raise AppDataError(f"{report}: unreadable ({exc})") from None
    if names is None:
        return default_label_names(count)
    if not isinstance(names, list) or len(names) != count:
        raise AppDataError(f"{report}: model.labels should name the model's {count} labels, got {names!r}")
    check_label_names(names, f"{report} model.labels")
    return names


# ---------------------------------------------------------------------------------------------
# C rendering
# ---------------------------------------------------------------------------------------------


def _text_sizes(data: AppData) -> dict:
    seq_len, hidden = int(data.first.params.seq_len), int(data.first.params.hidden)
    names = data.label_names or default_label_names(_labels(data))
    return {
        "seq_len": seq_len,
        "labels": _labels(data),
        "label_names": ", ".join(c_string_literal(n) for n in names),
        "hidden_bytes": seq_len * hidden,
        "tokenizer_buffer_bytes": tokenizer_buffer_bytes(vocab_blob.unpack(data.vocab).max_chars_per_word),
        "line_bytes": text_line_bytes(seq_len),
        "mask_is_length": int(_mask_mode(data) == contract.MASK_MODE_VALID_LENGTH),
    }


def _mask_mode(data: AppData) -> int:
    """The layers' one mask mode: the app binds the attention mask's value to a key mask or a length."""
    modes = {int(attention.params.mask_mode) for attention, _ in data.layers}
    if len(modes) != 1:
        raise AppDataError(f"the layers mix attention mask modes {sorted(modes)}: the app binds one mask value")
    return modes.pop()


def _generate_sizes(data: AppData) -> dict:
    head, hidden = data.last.params, int(data.first.params.hidden)
    context = int(data.layers[0][0].params.context)
    sizes = {"context": context, "vocab": int(head.vocab_size), "top_k": int(head.top_k), "samples": len(data.after)}
    sizes["cache_bytes"] = 2 * context * hidden
    if not data.vocab:
        return {**sizes, "has_tokenizer": 0, "tokenizer_buffer_bytes": 4, "decode_bytes": 4}
    spec = bpe_blob.unpack(data.vocab)
    longest = max((len(t) for t in spec.tokens), default=1)
    return {
        **sizes,
        "has_tokenizer": 1,
        "tokenizer_buffer_bytes": 8 * spec.max_pretoken_bytes,
        "decode_bytes": 3 * (3 + longest),
    }


# Each app's header template and the sizes it names.
_HEADERS = {"text": ("text_data.h.tmpl", _text_sizes), "generate": ("generate_data.h.tmpl", _generate_sizes)}


def render_header(data: AppData) -> str:
    template, sizes = _HEADERS[data.app]
    return fill(
        template,
        source=data.source or "an MCUBERT export",
        hidden=int(data.first.params.hidden),
        layers=len(data.layers),
        scratch_bytes=data.scratch_bytes,
        vocab_bytes=max(1, len(data.vocab)),
        nodes=len(data.nodes),
        values=c_data.value_enum(data.app, data.nodes),
        **sizes(data),
    )


def render_source(data: AppData) -> str:
    shared = {} if _TOPOLOGIES[data.app].share_constants else None  # the LM head's tables are the embedding's
    return c_data.model_data(GENERATOR, data.header, data.app, data.nodes, data.vocab, shared=shared)


def write_app_data(data: AppData, out_dir: str | Path) -> tuple[Path, Path]:
    """Write the app's <app>_data.h and <app>_data.c into `out_dir` (created if needed)."""
    return c_data.write_sources(out_dir, {data.header: render_header(data), data.c_source: render_source(data)})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tflm_mcubert.firmware.app_data",
        description="the C data of examples/baremetal's apps, no TFLM: text_data.c/.h of mcubert_text_check "
        "(a classifier export with a tokenizer: text in, label out) or generate_data.c/.h of mcubert_generate "
        "(a decoder export: prompt in, tokens out)",
    )
    parser.add_argument("export_dir", help="output directory of `python -m tflm_mcubert export` (mcubert schedule)")
    parser.add_argument("out_dir", help="where to write the data's .c and .h")
    args = parser.parse_args(argv)
    return c_data.report_written(lambda: write_app_data(app_data_from_export(args.export_dir), args.out_dir))


if __name__ == "__main__":
    sys.exit(main())
