"""The WordPiece detokenizer: its reference (wordpiece_decode.py) equal to Hugging Face's
decode(skip_special_tokens=True, clean_up_tokenization_spaces=False) and to `tokenizers`' own decode on
all-MiniLM-L6-v2 (with and without added tokens, and in a permuted id space); the C (host build and
emulated Cortex-M7) equal to the reference, whole and one id at a time; damaged blobs refused."""

from __future__ import annotations

import random
import struct
import zlib

import numpy as np
import pytest

from tests.tokenizer.conftest import ADDED_TEXTS, ADVERSARIAL
from tflm_mcubert.errors import UserError
from tflm_mcubert.tokenizer import wordpiece_decode
from tflm_mcubert.tokenizer.bpe_host import HostWordPieceDecoder
from tflm_mcubert.tokenizer.host import build_library

TEXTS = ADVERSARIAL + ADDED_TEXTS + ["it's, don't! I'm sure they're (we've) done . ? yes", "##ing starts", "a ##b"]


@pytest.fixture(scope="module")
def spec(minilm_tokenizer):
    return wordpiece_decode.spec_from_hf(minilm_tokenizer)


@pytest.fixture(scope="module")
def blob(spec):
    return wordpiece_decode.pack(spec)


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    return build_library(tmp_path_factory.mktemp("wpd"), extra_flags=("-Wall", "-Wextra", "-Werror"))


@pytest.fixture(scope="module")
def host(library, blob):
    return HostWordPieceDecoder(blob, library)


def id_lists(tokenizer, size: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    encoded = [tokenizer(t)["input_ids"] for t in TEXTS]
    return encoded + [[rng.randrange(size) for _ in range(rng.randint(0, 16))] for _ in range(2_000)]


def hf_texts(tokenizer, ids) -> tuple[bytes, bytes]:
    return (
        tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False).encode(),
        tokenizer.backend_tokenizer.decode(ids, skip_special_tokens=True).encode(),
    )


def test_the_reference_decodes_as_hugging_face(minilm_tokenizer, spec):
    for ids in id_lists(minilm_tokenizer, len(spec.tokens)):
        want, backend = hf_texts(minilm_tokenizer, ids)
        assert wordpiece_decode.decode(spec, ids) == want == backend, ids


def test_added_tokens_decode_as_hugging_face(added_tokenizer):
    spec = wordpiece_decode.spec_from_hf(added_tokenizer)
    for ids in id_lists(added_tokenizer, len(spec.tokens), seed=1)[:500]:
        assert wordpiece_decode.decode(spec, ids) == hf_texts(added_tokenizer, ids)[0], ids


def test_a_permuted_id_space_decodes_the_same_text(minilm_tokenizer, spec):
    permutation = np.random.default_rng(0).permutation(len(spec.tokens))
    permuted = wordpiece_decode.spec_from_hf(minilm_tokenizer, permutation)
    for ids in id_lists(minilm_tokenizer, len(spec.tokens))[:300]:
        assert wordpiece_decode.decode(permuted, [int(permutation[i]) for i in ids]) == wordpiece_decode.decode(
            spec, ids
        )


def test_the_blob_round_trips(spec, blob):
    assert wordpiece_decode.unpack(blob) == spec
    with pytest.raises(UserError, match="CRC-32"):
        wordpiece_decode.unpack(blob[:100] + bytes([blob[100] ^ 1]) + blob[101:])


def test_the_c_decodes_as_the_reference_whole_and_streamed(host, minilm_tokenizer, spec):
    for ids in id_lists(minilm_tokenizer, len(spec.tokens), seed=2):
        want = wordpiece_decode.decode(spec, ids)
        assert host.decode(ids) == want == host.decode(ids, one_at_a_time=True), ids


def resealed(blob: bytearray) -> bytes:
    struct.pack_into("<I", blob, 12, zlib.crc32(bytes(blob[16:])))
    return bytes(blob)


def test_damaged_blobs_are_refused_by_name(library, blob):
    entries_at, blocks_at, bytes_at = struct.unpack_from("<III", blob, 20)
    cases = {
        "no 'MCWD' header": (0, "<4s", b"MCBP", False),
        "blob version 2": (4, "<H", 2, False),
        "CRC-32 mismatch": (200, "<B", blob[200] ^ 1, False),
        "section offset": (16, "<I", 0, True),
        "section offset ": (28, "<I", len(blob) + 4, True),
        "unknown flags": (entries_at + 1, "<B", 0x80, True),
        "block does not start": (blocks_at + 4, "<I", 1, True),
        "shorter than '##'": (entries_at + 2 * 5, "<H", 1 | 2 << 8, True),
    }
    for problem, (offset, form, value, reseal) in cases.items():
        damaged = bytearray(blob)
        struct.pack_into(form, damaged, offset, value)
        with pytest.raises(UserError, match=problem.strip()):
            HostWordPieceDecoder(resealed(damaged) if reseal else bytes(damaged), library)
    with pytest.raises(UserError, match="size"):
        HostWordPieceDecoder(blob[:-4], library)


def test_arguments_are_checked(host, spec):
    with pytest.raises(UserError, match="an id outside"):
        host.decode([len(spec.tokens)])
    with pytest.raises(UserError, match="smaller than"):
        host.decode([1000], out_bytes=3)


def test_the_emulated_m7_streams_as_the_host(host, minilm_tokenizer, spec, blob, tmp_path_factory):
    pytest.importorskip("unicorn")
    from tflm_mcubert.measure import kernel_build
    from tflm_mcubert.measure.arm_emulator import ArmEmulator
    from tflm_mcubert.measure.bpe_abi import EmulatedWordPieceDecoder

    variant = kernel_build.Variant("cortex-m7")
    missing = kernel_build.missing_tools(variant)
    if missing:
        pytest.skip(missing)
    image = kernel_build.cached(variant, "mcubert_emu").image("mcubert_emu")
    emulated = EmulatedWordPieceDecoder(ArmEmulator(image, "cortex-m7"), blob)
    for ids in id_lists(minilm_tokenizer, len(spec.tokens), seed=3)[: len(TEXTS) + 20]:
        text, stack = emulated.decode(ids)
        assert text == host.decode(ids, one_at_a_time=True) == wordpiece_decode.decode(spec, ids), ids
        assert stack <= 1024
