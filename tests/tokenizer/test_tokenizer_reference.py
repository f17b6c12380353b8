"""The tokenizer's Python reference against Hugging Face `tokenizers`: the same ids on every sentence of
the corpus, the calibration and evaluation sentences and the adversarial set, single and paired, at
several lengths, on the all-MiniLM-L6-v2 vocabulary and on a pruned one; and the blob's round trip."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.tokenizer.conftest import ADVERSARIAL
from tflm_mcubert.errors import UserError
from tflm_mcubert.tokenizer import reference, vocab_blob
from tflm_mcubert.tokenizer.unicode_table import KIND_ISOLATE, KIND_LETTER, KIND_REMOVE, KIND_SPACE


def hf_ids(tokenizer, text, seq_len, pair=None):
    encoded = tokenizer(text, pair, truncation=True, max_length=seq_len)
    return encoded["input_ids"], encoded["token_type_ids"]


def ours(spec, text, seq_len, pair=None):
    encoded = reference.encode(spec, text, seq_len, pair=pair)
    return list(encoded.ids[: encoded.valid]), list(encoded.token_types[: encoded.valid])


def test_every_corpus_sentence_matches_hugging_face(minilm_tokenizer, minilm_spec, corpus_sentences):
    assert len(corpus_sentences) > 13_000
    expected = minilm_tokenizer(corpus_sentences, truncation=True, max_length=128)["input_ids"]
    mismatches = [t for t, want in zip(corpus_sentences, expected) if ours(minilm_spec, t, 128)[0] != want]
    assert not mismatches, mismatches[:5]


@pytest.mark.parametrize("seq_len", [2, 5, 16, 128, 512])
@pytest.mark.parametrize("text", ADVERSARIAL)
def test_adversarial_text_matches_hugging_face(minilm_tokenizer, minilm_spec, text, seq_len):
    assert ours(minilm_spec, text, seq_len)[0] == hf_ids(minilm_tokenizer, text, seq_len)[0]


@pytest.mark.parametrize("seq_len", [3, 4, 5, 8, 17, 33, 128])
def test_sentence_pairs_match_hugging_face_with_longest_first_truncation(minilm_tokenizer, minilm_spec, seq_len):
    texts = ["a short one", "a much longer second sentence with many words " * 3, "x " * 40, "", "y " * 7, "z"]
    for first in texts:
        for second in texts:
            assert ours(minilm_spec, first, seq_len, second) == hf_ids(minilm_tokenizer, first, seq_len, second)


def test_a_pruned_vocabulary_matches_hugging_face_with_the_same_vocabulary(pruned_tokenizer, corpus_sentences):
    spec = reference.spec_from_hf(pruned_tokenizer)
    assert 5_000 < len(spec.word_pieces) + len(spec.continuation_pieces) < 15_000
    sentences = corpus_sentences[::3] + ADVERSARIAL  # a third: pieces the pruned vocabulary lacks become [UNK]
    expected = pruned_tokenizer(sentences, truncation=True, max_length=128)["input_ids"]
    unk = pruned_tokenizer.unk_token_id
    assert any(unk in ids for ids in expected)
    assert [ours(spec, t, 128)[0] for t in sentences] == expected


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=40), data=st.binary(max_size=40))
def test_any_text_and_any_bytes_match_hugging_face(minilm_tokenizer, minilm_spec, text, data):
    assert ours(minilm_spec, text, 32)[0] == hf_ids(minilm_tokenizer, text, 32)[0]
    # invalid UTF-8: each maximal invalid subpart is one dropped character, as decode(errors="replace")
    assert ours(minilm_spec, data, 32)[0] == hf_ids(minilm_tokenizer, data.decode("utf-8", "replace"), 32)[0]


def test_ids_follow_a_permutation(minilm_tokenizer, minilm_spec):
    permutation = np.random.default_rng(0).permutation(minilm_tokenizer.vocab_size)
    permuted = reference.spec_from_hf(minilm_tokenizer, permutation)
    plain, mapped = (
        ours(minilm_spec, "Permuted ids, [MASK] too.", 16)[0],
        ours(permuted, "Permuted ids, [MASK] too.", 16)[0],
    )
    assert mapped == [int(permutation[i]) for i in plain]


def test_padding_mask_and_types(minilm_spec):
    encoded = reference.encode(minilm_spec, "hello world", 8)
    assert encoded.valid == 4
    assert list(encoded.mask) == [1, 1, 1, 1, 0, 0, 0, 0]
    assert list(encoded.ids[4:]) == [minilm_spec.specials["pad"]] * 4
    assert not encoded.token_types.any()


def test_the_character_table_has_each_kind_where_bert_puts_it(minilm_spec):
    table = minilm_spec.table
    assert table.lookup(ord("A")) == (KIND_LETTER, "a")
    assert table.lookup(ord("é")) == (KIND_LETTER, "e")
    assert table.lookup(ord("!")) == (KIND_ISOLATE, "!")
    assert table.lookup(ord("中"))[0] == KIND_ISOLATE
    assert table.lookup(0x3000)[0] == KIND_SPACE  # ideographic space
    assert table.lookup(0x200B)[0] == KIND_REMOVE  # zero-width space (a format character)
    assert table.lookup(0xD55C) == (KIND_LETTER, "\u1112\u1161\u11ab")  # 한: its jamo
    assert len(table.ranges) < 2_000


def test_the_blob_round_trips_and_rejects_damage(minilm_spec, minilm_blob):
    assert vocab_blob.unpack(minilm_blob) == minilm_spec
    damaged = bytearray(minilm_blob)
    damaged[len(damaged) // 2] ^= 0x10
    with pytest.raises(UserError, match="CRC-32"):
        vocab_blob.unpack(bytes(damaged))
    with pytest.raises(UserError, match="truncated"):
        vocab_blob.unpack(minilm_blob[:-4])
    with pytest.raises(UserError, match="not a tokenizer blob"):
        vocab_blob.unpack(b"MCTX" + minilm_blob[4:])


def test_unreachable_pieces_are_left_out(minilm_tokenizer, minilm_spec):
    vocab = minilm_tokenizer.get_vocab()
    assert "[unused0]" in vocab and "[unused0]" not in minilm_spec.word_pieces  # '[' splits it
    assert "A" not in minilm_spec.word_pieces or "A" not in vocab  # uncased: nothing maps to 'A'
    assert minilm_spec.word_pieces["the"] == vocab["the"]
    assert minilm_spec.continuation_pieces["ing"] == vocab["##ing"]


def test_the_table_cache_returns_the_generated_table_and_survives_damage(minilm_tokenizer, tmp_path, monkeypatch):
    from tflm_mcubert.tokenizer.unicode_table import table_for

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    backend, alphabet = minilm_tokenizer.backend_tokenizer.to_str(), frozenset("abcdefghij")
    table_for.cache_clear()
    generated = table_for(backend, alphabet)
    (entry,) = (tmp_path / "tflm_mcubert" / "unicode_tables").glob("*.json")
    table_for.cache_clear()
    assert table_for(backend, alphabet) == generated
    entry.write_text("{damaged")
    table_for.cache_clear()
    assert table_for(backend, alphabet) == generated
    table_for.cache_clear()
