"""The C byte-level BPE tokenizer on emulated Cortex-M7 (Thumb-2) and Cortex-M0+ (ARMv6-M): ids and the text
decoded one id a call (as generation streams it) byte for byte with the host build and the reference,
within the stack bound; and the instructions to encode 128 tokens of English on the M7."""

from __future__ import annotations

import random

import pytest

from tests.tokenizer.conftest import BPE_ADVERSARIAL, BPE_INVALID_UTF8
from tflm_mcubert.tokenizer import bpe_reference

STACK_BOUND_BYTES = 1024  # the WordPiece tokenizer's bound; init (the blob check) included
# Instructions to encode 128 tokens of English on the M7: 301,224 measured (the 3,300-id tokenizer trained
# here; a 50k-merge GPT-2 table adds about 4 steps to each binary search); the bound leaves room for drift.
ENGLISH_128_BOUND = 400_000


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


@pytest.fixture(scope="module")
def emulated(emulator_image, bpe_blob_bytes):
    from tflm_mcubert.measure.arm_emulator import ArmEmulator
    from tflm_mcubert.measure.bpe_abi import EmulatedBpeTokenizer

    image, core = emulator_image
    return EmulatedBpeTokenizer(ArmEmulator(image, core), bpe_blob_bytes)


@pytest.fixture(scope="module")
def host(bpe_blob_bytes):
    from tflm_mcubert.tokenizer.bpe_host import HostBpeTokenizer

    return HostBpeTokenizer(bpe_blob_bytes)


def test_text_encodes_and_streams_back_as_on_the_host(emulated, host, bpe_spec, corpus_sentences):
    rng = random.Random(5)
    noise = [bytes(rng.randrange(256) for _ in range(rng.randint(0, 60))) for _ in range(40)]
    for text in corpus_sentences[::400] + BPE_ADVERSARIAL + BPE_INVALID_UTF8 + noise:
        run = emulated.encode(text)
        assert run.ids == host.encode(text) == bpe_reference.encode(bpe_spec, text), text
        assert run.stack_bytes <= STACK_BOUND_BYTES
        decoded, stack = emulated.decode(run.ids)
        assert decoded == host.decode(run.ids, one_at_a_time=True) == bpe_reference.decode(bpe_spec, run.ids)
        assert stack <= STACK_BOUND_BYTES
    assert emulated.init_stack_bytes <= STACK_BOUND_BYTES


def test_random_ids_stream_back_as_on_the_host(emulated, host, bpe_spec):
    rng = random.Random(6)
    for _ in range(30):
        ids = [rng.randrange(bpe_spec.vocab_size) for _ in range(rng.randint(1, 12))]
        assert emulated.decode(ids)[0] == host.decode(ids, one_at_a_time=True), ids


def english_128(spec) -> str:
    """Rotten-tomatoes sentences in file order joined until they make 128 tokens or more, as
    bench/tokenizer_cost.py feeds the WordPiece tokenizer."""
    import bz2
    import csv

    from tflm_mcubert.data.tasks import rotten_tomatoes_file

    with bz2.open(rotten_tomatoes_file(), "rt", encoding="utf-8", newline="") as f:
        sentences = [row["text"] for row in csv.DictReader(f)]
    text = ""
    for sentence in sentences:
        text = f"{text} {sentence}".strip()
        if len(bpe_reference.encode(spec, text)) >= 128:
            break
    words = text.split(" ")  # then only the words that make the first 128
    n = 1
    while len(bpe_reference.encode(spec, " ".join(words[:n]))) < 128:
        n += 1
    return " ".join(words[:n])


def test_128_tokens_of_english_cost_on_the_m7(emulated, bpe_spec, corpus_sentences):
    if emulated.emu.cpu != "cortex-m7":
        pytest.skip("measured on the M7")
    run = emulated.encode(english_128(bpe_spec), count_instructions=True)
    assert 128 <= len(run.ids) <= 134
    per_128 = run.instructions * 128 // len(run.ids)
    print(f"\nBPE encode, {len(run.ids)} tokens of English on Cortex-M7: {run.instructions:,} instructions")
    print(f"(scaled to 128 tokens: {per_128:,}; stack {run.stack_bytes} B)")
    assert per_128 <= ENGLISH_128_BOUND
