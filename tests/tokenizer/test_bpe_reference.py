"""The byte-level BPE reference (bpe_reference.py) against Hugging Face: a GPT-2-style tokenizer trained here
(vocab.json + merges.txt, loaded as transformers loads a GPT-2 checkpoint), the same ids on the corpus,
the WordPiece tokenizer's adversarial set plus BPE's own, invalid UTF-8 (on its decode(errors="replace")
text) and seeded fuzz; decoding equal to decode(skip_special_tokens=True); the checkpoint reader and
the blob's round trip."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.tokenizer.conftest import BPE_ADVERSARIAL, BPE_INVALID_UTF8
from tflm_mcubert.errors import UserError
from tflm_mcubert.tokenizer import bpe_blob, bpe_reference

# Characters the fuzz draws from: every class the regex tells apart, the contraction letters, byte-map
# edge bytes, multi-byte characters of 2, 3 and 4 bytes, combining marks and the added token's pieces.
FUZZ_ALPHABET = list("aAsStTrRevVmMlLdD'' \t\n\r\x0b\x0c012٣½!?.,-_()<>|endoftx") + [
    "\u00a0",
    "\u0301",
    "\u3000",
    "é",
    "ß",
    "東",
    "京",
    "😀",
    "\u200d",
    "\ufe0f",
    "\u2028",
    "\u0085",
    "\x00",
    "\x7f",
    "Ā",
    "<|endoftext|>",
]


def seeded_texts(count: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(FUZZ_ALPHABET) for _ in range(rng.randint(0, 40))) for _ in range(count)]


def seeded_bytes(count: int, seed: int = 1) -> list[bytes]:
    rng = random.Random(seed)
    return [bytes(rng.randrange(256) for _ in range(rng.randint(0, 60))) for _ in range(count)]


def hf_decode(tokenizer, ids) -> bytes:
    return tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False).encode()


def test_the_trained_tokenizer_is_gpt2_shaped(gpt2_tokenizer, bpe_spec):
    assert 2_500 < len(bpe_spec.merges) < 3_300
    assert bpe_spec.vocab_size == len(gpt2_tokenizer)
    assert gpt2_tokenizer.eos_token == "<|endoftext|>" and gpt2_tokenizer.eos_token_id in bpe_spec.special


def test_every_corpus_sentence_matches_hugging_face(gpt2_tokenizer, bpe_spec, corpus_sentences):
    expected = gpt2_tokenizer(corpus_sentences)["input_ids"]
    mismatches = [t for t, want in zip(corpus_sentences, expected) if bpe_reference.encode(bpe_spec, t) != want]
    assert not mismatches, mismatches[:5]
    for text, ids in list(zip(corpus_sentences, expected))[::20]:
        assert bpe_reference.decode(bpe_spec, ids) == hf_decode(gpt2_tokenizer, ids), text


@pytest.mark.parametrize("text", BPE_ADVERSARIAL + seeded_texts(2_000))
def test_adversarial_and_fuzzed_text_matches_hugging_face(gpt2_tokenizer, bpe_spec, text):
    ids = gpt2_tokenizer(text)["input_ids"]
    assert bpe_reference.encode(bpe_spec, text) == ids
    assert bpe_reference.decode(bpe_spec, ids) == hf_decode(gpt2_tokenizer, ids)


@pytest.mark.parametrize("data", BPE_INVALID_UTF8 + seeded_bytes(1_000))
def test_invalid_utf8_matches_hugging_face_on_the_replaced_text(gpt2_tokenizer, bpe_spec, data):
    """Each maximal invalid subpart is one U+FFFD: the ids of data.decode("utf-8", "replace")."""
    assert bpe_reference.encode(bpe_spec, data) == gpt2_tokenizer(data.decode("utf-8", "replace"))["input_ids"]


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=40), data=st.binary(max_size=40))
def test_any_text_and_any_bytes_match_hugging_face(gpt2_tokenizer, bpe_spec, text, data):
    assert bpe_reference.encode(bpe_spec, text) == gpt2_tokenizer(text)["input_ids"]
    assert bpe_reference.encode(bpe_spec, data) == gpt2_tokenizer(data.decode("utf-8", "replace"))["input_ids"]


def test_random_ids_decode_as_hugging_face_and_one_at_a_time(gpt2_tokenizer, bpe_spec):
    """Any id sequence (characters split across tokens, bytes that are no UTF-8): the same text as
    decode(skip_special_tokens=True), whole or streamed."""
    rng = random.Random(2)
    for _ in range(2_000):
        ids = [rng.randrange(bpe_spec.vocab_size) for _ in range(rng.randint(0, 12))]
        want = hf_decode(gpt2_tokenizer, ids)
        assert bpe_reference.decode(bpe_spec, ids) == want, ids
        stream = bpe_reference.StreamDecoder(bpe_spec)
        assert b"".join(stream.feed(i) for i in ids) + stream.finish() == want, ids
        assert want == gpt2_tokenizer.backend_tokenizer.decode(ids, skip_special_tokens=True).encode()


def test_a_character_split_across_tokens_waits_for_its_last_byte(bpe_spec):
    emoji = "😀".encode()
    ids = [bpe_spec.byte_ids[b] for b in emoji]
    stream = bpe_reference.StreamDecoder(bpe_spec)
    assert [stream.feed(i) for i in ids] == [b"", b"", b"", emoji]
    assert stream.finish() == b""
    assert stream.feed(ids[0]) == b"" and stream.finish() == "\ufffd".encode()


def test_a_pretoken_over_the_limit_is_merged_in_chunks(gpt2_tokenizer, bpe_spec):
    text = "a" * 1000
    chunked = bpe_reference.encode(bpe_spec, text)
    parts = [bpe_reference.merge(bpe_spec, c) for c in bpe_reference.chunks(bpe_spec, [ord("a")] * 1000)]
    assert chunked == [i for part in parts for i in part]
    assert bpe_reference.decode(bpe_spec, chunked) == text.encode()
    roomy = bpe_blob.spec_from_tokenizer(gpt2_tokenizer, max_pretoken_bytes=1024)
    assert bpe_reference.encode(roomy, text) == gpt2_tokenizer(text)["input_ids"]


def test_the_folder_reader_equals_transformers_and_tokenizer_json(bpe_folder, gpt2_tokenizer, bpe_spec, tmp_path):
    gpt2_tokenizer.backend_tokenizer.save(str(tmp_path / "tokenizer.json"))
    from_json = bpe_blob.spec_from_tokenizer(bpe_blob.read_checkpoint(tmp_path))
    from_transformers = bpe_blob.spec_from_tokenizer(gpt2_tokenizer)
    assert from_json == bpe_spec == from_transformers


@pytest.mark.parametrize(
    "damage, problem",
    [
        (lambda f: (f / "vocab.json").write_text("{not json"), "vocab.json is not readable JSON"),
        (lambda f: (f / "vocab.json").write_text('["a"]'), "vocab.json is not a JSON object"),
        (lambda f: (f / "vocab.json").write_text('{"a": -1}'), "vocab.json: token 'a' has id -1"),
        (lambda f: (f / "vocab.json").write_text('{"a": 0, "b": 0}'), "two tokens share an id"),
        (lambda f: (f / "merges.txt").write_text("#version: 0.2\na b c\n"), "merges.txt line 2"),
        (lambda f: (f / "merges.txt").write_bytes(b"\xff\xfe"), "merges.txt is not readable UTF-8"),
        (lambda f: (f / "merges.txt").write_text("zzz qqq\n"), "'zzz' is not in vocab.json"),
        (lambda f: (f / "merges.txt").unlink(), "neither tokenizer.json nor vocab.json"),
        (lambda f: (f / "tokenizer.json").write_text("{}"), "tokenizer.json in .* is not a tokenizer"),
        (lambda f: (f / "added_tokens.json").write_text('["x"]'), "added_tokens.json is not a JSON object"),
    ],
)
def test_malformed_checkpoint_files_are_refused_by_name(bpe_folder, tmp_path, damage, problem):
    for name in ("vocab.json", "merges.txt"):
        (tmp_path / name).write_bytes((bpe_folder / name).read_bytes())
    damage(tmp_path)
    with pytest.raises(UserError, match=problem):
        bpe_blob.read_checkpoint(tmp_path)


def test_a_wordpiece_tokenizer_is_refused_with_the_reason(minilm_tokenizer, tmp_path):
    minilm_tokenizer.backend_tokenizer.save(str(tmp_path / "tokenizer.json"))
    with pytest.raises(UserError, match="the model is WordPiece, not BPE"):
        bpe_blob.read_checkpoint(tmp_path)


def test_the_blob_round_trips_and_rejects_damage(bpe_spec, bpe_blob_bytes):
    assert bpe_blob.unpack(bpe_blob_bytes) == bpe_spec
    damaged = bytearray(bpe_blob_bytes)
    damaged[len(damaged) // 2] ^= 0x10
    with pytest.raises(UserError, match="CRC-32"):
        bpe_blob.unpack(bytes(damaged))
    with pytest.raises(UserError, match="not a BPE tokenizer blob"):
        bpe_blob.unpack(b"MCTK" + bpe_blob_bytes[4:])
    with pytest.raises(UserError, match="version 2"):
        bpe_blob.unpack(bpe_blob_bytes[:4] + b"\x02" + bpe_blob_bytes[5:])


def test_the_classes_are_the_regex_s(bpe_spec):
    cls = bpe_spec.class_of
    assert [cls(ord(c)) for c in "a1! "] == [
        bpe_blob.CLASS_LETTER,
        bpe_blob.CLASS_NUMBER,
        bpe_blob.CLASS_OTHER,
        bpe_blob.CLASS_SPACE,
    ]
    assert cls(0x6771) == bpe_blob.CLASS_LETTER and cls(0x0663) == bpe_blob.CLASS_NUMBER  # 東, ٣
    assert cls(0x3000) == cls(0x85) == bpe_blob.CLASS_SPACE and cls(0x1F600) == bpe_blob.CLASS_OTHER
    assert len(bpe_spec.ranges) < 2_000
    assert json.dumps([r.kind for r in bpe_spec.ranges[:1]]) == "[0]"
