"""The C tokenizer on emulated Cortex-M7 (Thumb-2) and Cortex-M0+ (ARMv6-M, unicorn's M0 model), byte for
byte with the reference, within its stack bound."""

from __future__ import annotations

import numpy as np
import pytest

from tests.tokenizer.conftest import ADDED_TEXTS, ADVERSARIAL
from tflm_mcubert.tokenizer import reference, vocab_blob

STACK_BOUND_BYTES = 1024  # the target for the tokenizer; init (the blob check) included


@pytest.fixture(scope="module", params=["cortex-m7", "cortex-m0plus"])
def emulator_image(request, tmp_path_factory):
    pytest.importorskip("unicorn")
    from tflm_mcubert.measure import kernel_build

    variant = kernel_build.Variant(request.param)
    missing = kernel_build.missing_tools(variant)
    if missing:
        pytest.skip(missing)
    image = kernel_build.build(variant, tmp_path_factory.mktemp("emu"), "mcubert_emu").image("mcubert_emu")
    return image, request.param


def emulated_with(emulator_image, blob):
    from tflm_mcubert.measure.arm_emulator import ArmEmulator
    from tflm_mcubert.measure.tokenizer_abi import EmulatedTokenizer

    image, core = emulator_image
    return EmulatedTokenizer(ArmEmulator(image, core), blob)


@pytest.fixture(scope="module")
def emulated(emulator_image, minilm_blob):
    return emulated_with(emulator_image, minilm_blob)


def same(a, b) -> bool:
    return a.valid == b.valid and all(
        np.array_equal(x, y) for x, y in ((a.ids, b.ids), (a.token_types, b.token_types), (a.mask, b.mask))
    )


def test_sentences_and_pairs_match_the_reference(emulated, minilm_spec, corpus_sentences):
    texts = corpus_sentences[::250] + ADVERSARIAL
    for text in texts:
        run = emulated.encode(text, 128)
        assert same(run.encoded, reference.encode(minilm_spec, text, 128)), text
        assert run.stack_bytes <= STACK_BOUND_BYTES
    for first, second in zip(texts[:10], texts[10:20]):
        run = emulated.encode(first, 64, second)
        assert same(run.encoded, reference.encode(minilm_spec, first, 64, second)), (first, second)


def test_random_bytes_match_the_reference(emulated, minilm_spec):
    rng = np.random.default_rng(0)
    for _ in range(60):
        data = rng.integers(0, 256, rng.integers(0, 120)).astype(np.uint8).tobytes()
        assert same(emulated.encode(data, 32).encoded, reference.encode(minilm_spec, data, 32)), data


def test_init_checks_the_blob_within_the_stack_bound(emulated):
    assert emulated.init_stack_bytes <= STACK_BOUND_BYTES


def test_added_tokens_and_combining_marks_match_the_reference(emulator_image, minilm_tokenizer, tmp_path):
    """The blob v5 paths: raw and normalized added tokens, and marks reordered in the word buffer."""
    from tokenizers import AddedToken
    from transformers import BertTokenizerFast

    vocab = minilm_tokenizer.get_vocab()
    marks = ["\u302e", "##\u302e", "\u1b44", "##\u1b44"]  # reordered: this normalizer strips accents
    (tmp_path / "vocab.txt").write_text("".join(t + "\n" for t in [*sorted(vocab, key=vocab.get), *marks]))
    tokenizer = BertTokenizerFast(vocab=str(tmp_path / "vocab.txt"))
    tokenizer.add_tokens([AddedToken("[URL]", normalized=True), AddedToken("<s>", normalized=False)])
    spec = reference.spec_from_hf(tokenizer)
    assert spec.combining_classes and any(token.normalized for token in spec.added_tokens)
    emulated = emulated_with(emulator_image, vocab_blob.pack(spec))
    for text in ADDED_TEXTS + ["x\u302e\u1b44 x\u1b44\u302e \u302e\u1b44\u302e"]:
        run = emulated.encode(text, 48)
        assert same(run.encoded, reference.encode(spec, text, 48)), text
        assert (
            list(run.encoded.ids[: run.encoded.valid]) == tokenizer(text, truncation=True, max_length=48)["input_ids"]
        )
        assert run.stack_bytes <= STACK_BOUND_BYTES
