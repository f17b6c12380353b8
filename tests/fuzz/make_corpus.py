"""Writes the libFuzzer seed corpus (tests/fuzz/corpus/) from a real, tiny MCUBERT export.

    python tests/fuzz/make_corpus.py [--out tests/fuzz/corpus]

fuzz_verify_model/: the whole exported .tflite, as tiny_export.bin (git ignores *.tflite): a 1-layer,
d = 16 BERT at seq 8, a few KB; and tiny_decoder.bin: a 1-layer, d = 16 GPT-2 decoder with an 8-token
KV cache (variable tensors, the tied word table shared by two tensors).
fuzz_options_validate/: one seed per op of that export, in the harness's input layout (see
harnesses/fuzz_options_validate.c): op, options, then each tensor of the op's validate step (its
inputs, then its output) with the constants' bytes.
fuzz_tokenize/: the tokenizer blob of a small BERT vocabulary (built here, no download) with one
sentence each, in harnesses/fuzz_tokenize.c's layout.
fuzz_bpe/: the byte-level BPE blob of a small GPT-2-style tokenizer (trained here) with one text each, in
harnesses/fuzz_bpe.c's layout.
fuzz_op_run/: one seed per op and weight width (op, flags, then 1 KB of SHA-256 stream bytes the
harness derives valid options, constants and in-range run-time inputs from; no model needed).
tests/fuzz/test_fuzz_c.py keeps the committed corpus equal to what this script writes.
"""

from __future__ import annotations

import argparse
import hashlib
import struct
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

CORPUS = Path(__file__).with_name("corpus")
OP_SELECTORS = {"MCUBERT_EMBEDDING": 0, "MCUBERT_ATTENTION": 1, "MCUBERT_MLP": 2, "MCUBERT_CLASSIFIER_HEAD": 3}
DTYPE_SELECTORS = {9: 0, 7: 1, 2: 2}  # TensorType INT8, INT16, INT32 -> the harness's dtype code


def tiny_export() -> bytes:
    from tflm_mcubert.data.calibration import random_samples
    from tflm_mcubert.export.mcubert_export import export_mcubert
    from tflm_mcubert.model.bert import build_model
    from tflm_mcubert.model.config import BertConfig

    config = BertConfig(
        vocab_size=40,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=8,
        type_vocab_size=2,
        num_labels=2,
    )
    model = build_model(config, seed=0)
    return export_mcubert(
        model,
        None,
        seq_len=8,
        arena_budget=1 << 30,
        samples=random_samples(config.vocab_size, 8, 3, seed=0),
        sentences=None,
    ).tflite


def tiny_decoder_export() -> bytes:
    from tflm_mcubert.model.decoder import build_decoder
    from tflm_mcubert.model.decoder_config import DecoderConfig
    from tflm_mcubert.quantize.quantized_decoder import calibrate_decoder
    from tflm_mcubert.schedule.planner import plan_of
    from tflm_mcubert.tflite.mcubert_writer import model_to_tflite

    raw = {"model_type": "gpt2", "vocab_size": 40, "n_positions": 8, "n_embd": 16, "n_layer": 1, "n_head": 2}
    decoder = build_decoder(DecoderConfig.from_hf_dict(raw), seed=0)
    rng = np.random.default_rng(0)
    decoder = calibrate_decoder(decoder, [rng.integers(0, 40, 8) for _ in range(3)], top_k=2)
    return model_to_tflite(decoder, plan_of(decoder, 1 << 20))


def op_seeds(model_bytes: bytes) -> dict[str, bytes]:
    from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as schema

    model = schema.ModelT.InitFromPackedBuf(bytearray(model_bytes), 0)
    subgraph, seeds = model.subgraphs[0], {}
    for operator in subgraph.operators:
        name = model.operatorCodes[operator.opcodeIndex].customCode.decode()
        if name in seeds:
            continue
        options = np.asarray(operator.customOptions, np.uint8).tobytes()
        seed = struct.pack("<BH", OP_SELECTORS[name], len(options)) + options
        for index in [*operator.inputs, operator.outputs[0]]:
            tensor = subgraph.tensors[index]
            data = model.buffers[tensor.buffer].data
            raw = b"" if data is None else np.asarray(data, np.uint8).tobytes()
            elements = int(np.prod(tensor.shape)) if tensor.shape is not None else 0
            seed += struct.pack("<BBI", DTYPE_SELECTORS[tensor.type], 1 if raw else 0, elements) + raw
        seeds[name.lower().removeprefix("mcubert_")] = seed + b"\0"
    return seeds


TOKENIZER_WORDS = (
    "the a an of and to in is it that this film movie good bad not no story one his her great funny love "
    "play ##s ##ing ##ed ##ly ##er un ##able re ##ment caf ##e na ##ive 中 文 東 京 ᄒ ᅡ ᆫ ! , . ? ' - ( ) "
    "\u302e ##\u302e \u1b44 ##\u1b44 < > [ ] url ##url"  # combining marks the device reorders; added tokens' parts
).split()
# Added tokens: matched on the normalized text (its lower case) and on the raw text.
TOKENIZER_ADDED = (("[URL]", True), ("<s>", False))
TOKENIZER_SEEDS = {
    "plain": (0, "A good film, and a great story!"),
    "accents_cjk_hangul": (0, "Naïve café 東京 한 중文 Crème"),
    "specials_controls": (0, "[CLS]x[SEP] \u200bzero\x01\t[MASK]\ufeff"),
    "long_word_pair": (1, "unplayable " + "y" * 120 + " and the funny one is not bad"),
    "invalid_utf8": (0, "bad \udcff\udce0 bytes"),
    "added_tokens_marks": (0, "see [Url]<s>a<s [url x\u302e\u1b44\u302e s\u1b44 [\x01URL]"),
}


def tokenizer_seeds() -> dict[str, bytes]:
    """One seed per sentence: seq_len selector, flags, the small vocabulary's blob, the sentence."""
    import tempfile

    from tokenizers import AddedToken
    from transformers import BertTokenizerFast

    from tflm_mcubert.model.clustered_embedding import bert_tokenizer_with_vocab
    from tflm_mcubert.tokenizer import reference, vocab_blob

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)] + ["##" + chr(c) for c in range(ord("a"), ord("z") + 1)]
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "vocab.txt").write_text("\n".join(specials) + "\n", encoding="utf-8")
        base = BertTokenizerFast(vocab=str(Path(tmp) / "vocab.txt"))
        tokens = list(dict.fromkeys(specials + letters + list(TOKENIZER_WORDS)))
        tokenizer = bert_tokenizer_with_vocab(tokens, base, Path(tmp) / "small")
        tokenizer.add_tokens([AddedToken(text, normalized=normalized) for text, normalized in TOKENIZER_ADDED])
        blob = vocab_blob.pack(reference.spec_from_hf(tokenizer))
    seeds = {}
    for name, (flags, text) in TOKENIZER_SEEDS.items():
        raw = text.encode("utf-8", "surrogateescape")
        seeds[name] = bytes([30, flags]) + struct.pack("<I", len(blob)) + blob + raw
    return seeds


# (max_ids selector, flags, text): harnesses/fuzz_bpe.c's layout (255: room for every id; flags bit 0:
# also decode the text's bytes as ids).
BPE_SEEDS = {
    "contractions_spaces": (255, 0, "I'm sure they'll say it's what we've done   \t\n  ok "),
    "digits_punctuation": (255, 1, "3.14 and 1,000,000!!! ?? -- <|endoftext|>x<|endoftext|>"),
    "emoji_cjk_marks": (255, 0, "😀👍🏽 東京 e\u0301 \u00a0nbsp"),
    "invalid_utf8_few_ids": (3, 1, "bad \udcff\udce0 bytes and more words"),
}


def bpe_seeds() -> dict[str, bytes]:
    """One seed per text: the blob of a GPT-2-style byte-level BPE trained on the seeds' texts and
    TOKENIZER_WORDS (deterministic), then the text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from tflm_mcubert.tokenizer import bpe_blob

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    texts = [text.encode("utf-8", "surrogateescape").decode("utf-8", "replace") for *_, text in BPE_SEEDS.values()]
    tokenizer.train_from_iterator([*texts, " ".join(TOKENIZER_WORDS)] * 5, trainer)
    blob = bpe_blob.pack(bpe_blob.spec_from_tokenizer(tokenizer))
    return {
        name: bytes([max_ids, flags]) + struct.pack("<I", len(blob)) + blob + text.encode("utf-8", "surrogateescape")
        for name, (max_ids, flags, text) in BPE_SEEDS.items()
    }


# (name, op, flags): harnesses/fuzz_op_run.c's op selector and flags (bit 0: int4 weights).
OP_RUN_SEEDS = (
    ("embedding_int8", 0, 0),
    ("embedding_int4", 0, 1),
    ("attention_int8", 1, 0),
    ("attention_int4", 1, 1),
    ("mlp_int8", 2, 0),
    ("mlp_int4", 2, 1),
    ("classifier_head", 3, 0),
)


def op_run_seeds(size: int = 1024) -> dict[str, bytes]:
    """Valid run-time inputs (flags bit 1 clear) over deterministic bytes: the harness clamps the rest."""
    seeds = {}
    for name, op, flags in OP_RUN_SEEDS:
        stream = b"".join(hashlib.sha256(f"{name}:{i}".encode()).digest() for i in range(size // 32))
        seeds[name] = bytes([op, flags]) + stream
    return seeds


def write_corpus(out: Path) -> list[Path]:
    model_bytes = tiny_export()
    files = {
        Path("fuzz_verify_model") / "tiny_export.bin": model_bytes,
        Path("fuzz_verify_model") / "tiny_decoder.bin": tiny_decoder_export(),
    }
    for name, seed in op_seeds(model_bytes).items():
        files[Path("fuzz_options_validate") / f"{name}.bin"] = seed
    for name, seed in tokenizer_seeds().items():
        files[Path("fuzz_tokenize") / f"{name}.bin"] = seed
    for name, seed in op_run_seeds().items():
        files[Path("fuzz_op_run") / f"{name}.bin"] = seed
    for name, seed in bpe_seeds().items():
        files[Path("fuzz_bpe") / f"{name}.bin"] = seed
    written = []
    for relative, data in sorted(files.items()):
        path = out / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        written.append(path)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=CORPUS)
    for path in write_corpus(parser.parse_args().out):
        print(f"{path} ({path.stat().st_size:,} B)")


if __name__ == "__main__":
    main()
