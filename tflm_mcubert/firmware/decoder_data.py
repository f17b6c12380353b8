"""Data of the firmware `mcubert_generate`: every op of an exported decoder, as C.

The bare-metal `mcubert_generate` (examples/baremetal/) reads prompts, runs the decoder one token per step
through the C kernels — MCUBERT_DECODER_EMBEDDING, each layer's MCUBERT_CAUSAL_ATTENTION (over its int8 KV
cache) and MCUBERT_DECODER_MLP, MCUBERT_LM_HEAD — without TFLM, and prints the greedy continuation. This
module writes what it needs, `generate_data.h` / `generate_data.c`: each op's params, weights and tensor
views decoded from the export's .tflite (tflite/mcubert_reader.read_decoder; firmware/c_data.py renders
them, the tied word table once), and the sizes (context, layers, one scratch of the largest op's size).

    python -m tflm_mcubert.firmware.decoder_data EXPORT_DIR OUT_DIR
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import numpy as np

from tflm_mcubert.errors import UserError
from tflm_mcubert.firmware import c_data
from tflm_mcubert.firmware.template import fill
from tflm_mcubert.ops import kernel_abi
from tflm_mcubert.firmware.vocab_files import VOCAB_NAME
from tflm_mcubert.tflite.mcubert_reader import read_decoder
from tflm_mcubert.tokenizer import bpe_blob

HEADER = "generate_data.h"
SOURCE = "generate_data.c"


@dataclasses.dataclass(frozen=True)
class DecoderCalls:
    embedding: kernel_abi.KernelCall
    layers: tuple[tuple[kernel_abi.KernelCall, kernel_abi.KernelCall], ...]  # (causal attention, MLP) each
    head: kernel_abi.KernelCall
    context: int
    hidden: int
    vocab_size: int
    top_k: int
    scratch_bytes: int
    source: str = ""
    vocab: bytes = b""  # the byte-level BPE blob (model_vocab.bin), or empty: prompts are ids


def decoder_calls(tflite: bytes, source: str = "") -> DecoderCalls:
    """The kernel calls of every op of an MCUBERT decoder .tflite (run-time inputs zero)."""
    q = read_decoder(tflite).quantized
    d, n = q.hidden, q.context
    hidden, position = np.zeros(d, np.int8), np.zeros(1, np.int32)
    layers = tuple(
        (
            kernel_abi.causal_attention_call(attention, hidden, position, np.zeros((2, n, d), np.int8)),
            kernel_abi.decoder_mlp_call(mlp, hidden),
        )
        for attention, mlp in q.layers
    )
    return DecoderCalls(
        embedding=kernel_abi.decoder_embedding_call(q.embedding, 0, 0),
        layers=layers,
        head=kernel_abi.lm_head_call(q.head, hidden),
        context=n,
        hidden=d,
        vocab_size=q.head.vocab_size,
        top_k=q.head.top_k,
        scratch_bytes=max(node.op.scratch_bytes(node.params) for node in q.nodes()),
        source=source,
    )


def decoder_calls_from_export(export_dir: str | Path) -> DecoderCalls:
    """The export's decoder, and its tokenizer blob when the export wrote one."""
    path, vocab = Path(export_dir) / "model.tflite", Path(export_dir) / f"{VOCAB_NAME}.bin"
    if not path.is_file():
        raise UserError(f"{path}: missing (export a decoder into {export_dir} first)")
    calls = decoder_calls(path.read_bytes(), source=str(path))
    if not vocab.is_file():
        return calls
    blob = vocab.read_bytes()
    spec = bpe_blob.unpack(blob)  # names what is wrong with a damaged blob
    if spec.vocab_size != calls.vocab_size:
        raise UserError(f"{vocab}: {spec.vocab_size} ids, the model {calls.vocab_size} (another export's?)")
    return dataclasses.replace(calls, vocab=blob)


def render_header(calls: DecoderCalls) -> str:
    return fill(
        "generate_data.h.tmpl",
        source=calls.source or "an MCUBERT decoder export",
        context=calls.context,
        hidden=calls.hidden,
        layers=len(calls.layers),
        vocab=calls.vocab_size,
        top_k=calls.top_k,
        cache_bytes=2 * calls.context * calls.hidden,
        scratch_bytes=calls.scratch_bytes,
        **_tokenizer_sizes(calls.vocab),
    )


def _tokenizer_sizes(blob: bytes) -> dict:
    if not blob:
        return {"has_tokenizer": 0, "vocab_bytes": 1, "tokenizer_buffer_bytes": 4, "decode_bytes": 4}
    spec = bpe_blob.unpack(blob)
    longest = max((len(t) for t in spec.tokens), default=1)
    return {
        "has_tokenizer": 1,
        "vocab_bytes": len(blob),
        "tokenizer_buffer_bytes": 8 * spec.max_pretoken_bytes,
        "decode_bytes": 3 * (3 + longest),
    }


def render_source(calls: DecoderCalls) -> str:
    shared: dict = {}  # the LM head's tables are the embedding's
    args = (calls.embedding, calls.layers, calls.head, calls.vocab)
    return c_data.model_data("decoder_data.py", HEADER, "generate", *args, shared=shared)


def write_generate_data(calls: DecoderCalls, out_dir: str | Path) -> tuple[Path, Path]:
    """Write generate_data.h and generate_data.c into `out_dir` (created if needed)."""
    return c_data.write_sources(out_dir, {HEADER: render_header(calls), SOURCE: render_source(calls)})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tflm_mcubert.firmware.decoder_data",
        description="generate_data.c/.h of examples/baremetal's mcubert_generate (prompt in, tokens out, no TFLM)",
    )
    parser.add_argument("export_dir", help="output directory of `python -m tflm_mcubert export` of a decoder")
    parser.add_argument("out_dir", help="where to write generate_data.c and generate_data.h")
    args = parser.parse_args(argv)
    try:
        header, source = write_generate_data(decoder_calls_from_export(args.export_dir), args.out_dir)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {source} and {header}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
