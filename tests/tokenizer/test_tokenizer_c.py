"""The C tokenizer (host build, through ctypes) against the Python reference, byte for byte: ids, token
types, mask and valid length on the corpus, the adversarial set, sentence pairs and random bytes; and
mcubert_tokenizer_init's and mcubert_tokenize's errors."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.tokenizer.conftest import ADVERSARIAL
from tflm_mcubert.errors import UserError
from tflm_mcubert.tokenizer import reference, vocab_blob
from tflm_mcubert.tokenizer.host import HostTokenizer, build_library


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no host C compiler")
    return build_library(tmp_path_factory.mktemp("tokenizer"), extra_flags=("-Wall", "-Wextra", "-Werror"))


@pytest.fixture(scope="module")
def host(library, minilm_blob):
    return HostTokenizer(minilm_blob, library)


def same(a: reference.Encoded, b: reference.Encoded) -> bool:
    return (
        a.valid == b.valid
        and np.array_equal(a.ids, b.ids)
        and np.array_equal(a.token_types, b.token_types)
        and np.array_equal(a.mask, b.mask)
    )


def test_corpus_matches_the_reference(host, minilm_spec, corpus_sentences):
    differ = [t for t in corpus_sentences if not same(host.encode(t, 128), reference.encode(minilm_spec, t, 128))]
    assert not differ, differ[:5]


@pytest.mark.parametrize("seq_len", [2, 3, 16, 128, 512])
def test_adversarial_text_and_pairs_match_the_reference(host, minilm_spec, seq_len):
    for text in ADVERSARIAL:
        assert same(host.encode(text, seq_len), reference.encode(minilm_spec, text, seq_len)), text
        if seq_len >= 3:
            for pair in ("a second sentence", "", ADVERSARIAL[0]):
                assert same(host.encode(text, seq_len, pair), reference.encode(minilm_spec, text, seq_len, pair)), (
                    text,
                    pair,
                )


@settings(max_examples=500, deadline=None)
@given(data=st.binary(max_size=200), pair=st.none() | st.binary(max_size=60), seq_len=st.integers(3, 40))
def test_random_bytes_match_the_reference(host, minilm_spec, data, pair, seq_len):
    assert same(host.encode(data, seq_len, pair), reference.encode(minilm_spec, data, seq_len, pair))


def test_a_pruned_vocabulary_matches_the_reference(library, pruned_tokenizer, corpus_sentences):
    spec = reference.spec_from_hf(pruned_tokenizer)
    host = HostTokenizer(vocab_blob.pack(spec), library)
    for text in corpus_sentences[:3000] + ADVERSARIAL:
        assert same(host.encode(text, 64), reference.encode(spec, text, 64)), text


@pytest.mark.parametrize(
    "damage, problem",
    [
        (lambda b: b[:-1], "size is not the size given"),
        (lambda b: b[:40], "shorter than the 80-byte header"),
        (lambda b: b"MCTX" + b[4:], "not a tokenizer blob"),
        (lambda b: b[:4] + b"\x01" + b[5:], "blob version 1; this library reads version 5"),
        (lambda b: b[:4] + b"\x03" + b[5:], "blob version 3; this library reads version 5"),
        (lambda b: b[:4] + b"\x04" + b[5:], r"blob version 4; this library reads version 5 \(export the model again\)"),
        (lambda b: b[:4] + b"\x06" + b[5:], "blob version 6; this library reads version 5"),
        (lambda b: b[:100] + bytes([b[100] ^ 1]) + b[101:], "CRC-32 mismatch"),
    ],
)
def test_a_damaged_blob_is_rejected_with_the_reason(library, minilm_blob, damage, problem):
    with pytest.raises(UserError, match=problem):
        HostTokenizer(damage(minilm_blob), library)


def resealed(blob: bytearray) -> bytes:
    """The blob with its CRC recomputed: damage the CRC does not catch, for the structural checks."""
    import struct
    import zlib

    struct.pack_into("<I", blob, 12, zlib.crc32(bytes(blob[16:])))
    return bytes(blob)


def test_structural_damage_behind_a_valid_crc_is_rejected(library, minilm_blob):
    import struct

    cases = {
        "ranges": (40, 0xFFFFFF),  # the ranges' offset past the end
        "limits or special ids": (24, 0xFFFFFF),  # [CLS]'s id
        "word pieces": (56, 8),  # the word pieces' offset into the header
        "plane index|section": (20, 3),  # the range count: no longer what the plane index says
    }
    for problem, (offset, value) in cases.items():
        blob = bytearray(minilm_blob)
        size = 2 if offset == 20 else 4
        blob[offset : offset + size] = value.to_bytes(size, "little")
        with pytest.raises(UserError, match="TOKENIZER"):
            HostTokenizer(resealed(blob), library)
    # a piece list's own fields, behind a valid CRC: a bucket offset, the id width, a bit of the data
    word_at = struct.unpack_from("<I", minilm_blob, struct.unpack_from("<I", minilm_blob, 56)[0] + 4)[0]
    count, data_bytes, _, _, shift, id_bits, offset_bytes = struct.unpack_from("<IIIIBBB", minilm_blob, word_at)
    tables = word_at + 20  # the bucket offsets (the code tables are in the shared code set)
    data_at = tables + offset_bytes * -(-count >> shift) + (count * id_bits + 7) // 8
    damages = {
        "bucket offset": (tables + offset_bytes, minilm_blob[tables + offset_bytes] + 1),
        "sizes do not fit|id": (word_at + 17, id_bits + 1),
        "piece|order|code|bucket|bytes left": (data_at + 3, minilm_blob[data_at + 3] ^ 0x10),
    }
    for problem, (offset, value) in damages.items():
        blob = bytearray(minilm_blob)
        blob[offset] = value & 0xFF
        with pytest.raises(UserError, match=problem):
            HostTokenizer(resealed(blob), library)
    # the first list's code-set offset at 0xFFFFFFFF, the value that once meant "no code set checked yet"
    # and so skipped the check (found by the fuzzer: a read far outside the blob)
    blob = bytearray(minilm_blob)
    struct.pack_into("<I", blob, word_at + 12, 0xFFFFFFFF)
    with pytest.raises(UserError, match="Huffman code table"):
        HostTokenizer(resealed(blob), library)
    assert vocab_blob.unpack(minilm_blob).word_pieces


@pytest.fixture(scope="module")
def clustered(library, minilm_tokenizer, minilm_spec):
    """The MiniLM tokenizer numbered as an export numbers a 4-cluster embedding: implicit ids."""
    from tflm_mcubert.tokenizer.blob_order import blob_order

    vocab_size = len(minilm_tokenizer.get_vocab())
    spec = reference.spec_from_hf(minilm_tokenizer, blob_order(minilm_spec, [0, 1000, 4000, 10000, vocab_size]))
    blob = vocab_blob.pack(spec)
    return spec, blob, HostTokenizer(blob, library)


def test_implicit_ids_match_the_reference_and_store_no_ids(clustered, corpus_sentences):
    import struct

    spec, blob, host = clustered
    assert vocab_blob.unpack(blob).word_pieces == spec.word_pieces
    assert len(blob) < 75_000  # 71,324 B with buckets of 16 (v5), 67,032 B with 32 (v4)
    for group_at in struct.unpack_from("<II", blob, 56):
        count = struct.unpack_from("<I", blob, group_at)[0]
        assert 2 <= count <= 4  # one list per cluster holding pieces of this kind
        code_sets = set()
        for list_at in struct.unpack_from(f"<{count}I", blob, group_at + 4):
            assert blob[list_at + 17] == 0  # implicit ids
            code_sets.add(struct.unpack_from("<I", blob, list_at + 12)[0])
        assert len(code_sets) == 1  # a group's lists share their code tables
    for text in corpus_sentences[:3000] + ADVERSARIAL:
        assert same(host.encode(text, 64), reference.encode(spec, text, 64)), text
        assert same(host.encode(text, 64, "a pair"), reference.encode(spec, text, 64, "a pair")), text


def _list_at(blob: bytes, index: int) -> int:
    import struct

    group_at = struct.unpack_from("<I", blob, 56)[0]
    return struct.unpack_from("<I", blob, group_at + 4 + 4 * index)[0]


def test_damaged_implicit_lists_are_rejected(library, clustered):
    import struct

    _, blob, _ = clustered
    first, second = _list_at(blob, 0), _list_at(blob, 1)
    vocab_size = struct.unpack_from("<I", blob, 64)[0]
    group_at = struct.unpack_from("<I", blob, 56)[0]
    codes_at = struct.unpack_from("<I", blob, first + 12)[0]
    damages = {  # offset, format, value
        "not below vocab_size": (second + 8, "<I", vocab_size - 1),  # implicit ids past the vocabulary
        "overlap or are out of order": (second + 8, "<I", struct.unpack_from("<I", blob, first + 8)[0]),
        "more lists than the lookup searches": (group_at, "<I", 17),
        "list outside the blob": (group_at + 4, "<I", len(blob) - 8),
        "code table": (first + 12, "<I", codes_at + 2),  # the code set's offset, misaligned
        "code table ": (codes_at, "<H", 2),  # the code set's first code offset
        "sizes do not fit": (first + 4, "<I", 1 << 28),  # the data's bytes
        "field widths": (first + 19, "<B", 1),  # the reserved byte after the offset width
    }
    for problem, (offset, form, value) in damages.items():
        damaged = bytearray(blob)
        struct.pack_into(form, damaged, offset, value)
        with pytest.raises(UserError, match=problem.strip()):
            HostTokenizer(resealed(damaged), library)


def test_arguments_are_checked(host):
    with pytest.raises(UserError, match="seq_len: no room"):
        host.encode("text", 1)
    with pytest.raises(UserError, match="seq_len: no room"):
        host.encode("text", 2, pair="pair")


def test_a_word_over_the_limit_is_one_unk_and_the_buffer_is_one_word(host, minilm_spec):
    assert host.buffer_bytes == 4 * (minilm_spec.max_chars_per_word + 1) + 2 * (minilm_spec.max_chars_per_word + 2)
    encoded = host.encode("a" * 5000 + " b", 8)
    assert list(encoded.ids[: encoded.valid]) == [
        minilm_spec.specials["cls"],
        minilm_spec.specials["unk"],
        minilm_spec.word_pieces["b"],
        minilm_spec.specials["sep"],
    ]
