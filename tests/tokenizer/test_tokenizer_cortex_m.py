"""The C tokenizer on emulated Cortex-M7 (Thumb-2) and Cortex-M0+ (ARMv6-M, unicorn's M0 model), byte for
byte with the reference, within its stack bound."""

from __future__ import annotations

import numpy as np
import pytest

from tests.tokenizer.conftest import ADVERSARIAL
from tflm_mcubert.tokenizer import reference

STACK_BOUND_BYTES = 1024  # the target for the tokenizer; init (the blob check) included


@pytest.fixture(scope="module", params=["cortex-m7", "cortex-m0plus"])
def emulated(request, tmp_path_factory, minilm_blob):
    pytest.importorskip("unicorn")
    from tflm_mcubert.measure import kernel_build
    from tflm_mcubert.measure.arm_emulator import ArmEmulator
    from tflm_mcubert.measure.tokenizer_abi import EmulatedTokenizer

    variant = kernel_build.Variant(request.param)
    missing = kernel_build.missing_tools(variant)
    if missing:
        pytest.skip(missing)
    image = kernel_build.build(variant, tmp_path_factory.mktemp("emu"), "mcubert_emu").image("mcubert_emu")
    return EmulatedTokenizer(ArmEmulator(image, request.param), minilm_blob)


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
