"""Added tokens of any spelling ([URL], <s>, a<mask>b, <emoji>), normalized or raw, special or not: the
Python reference equals Hugging Face's tokenizer, the C tokenizer equals the reference, and pruning and
the exported tokenizer/ keep them (issue 27, finding 7)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.tokenizer.conftest import ADDED_TEXTS, ADDED_TOKENS, ADVERSARIAL
from tflm_mcubert.errors import UserError
from tflm_mcubert.tokenizer import reference, vocab_blob

# Fragments that build near-misses of the added tokens: brackets, case, accents, removed characters.
FRAGMENTS = [
    "[",
    "]",
    "<",
    ">",
    "/",
    "url",
    "URL",
    "Ú",
    "e1",
    "E1",
    "s",
    "mask",
    "emoji",
    "@",
    "naïve",
    "NAIVE",
    " ",
    "\t",
    "\x01",
    "\u200b",
    "中",
    "a",
    "[CLS]",
    "[SEP",
]


def ids(encoded) -> list[int]:
    return [int(i) for i in encoded.ids[: encoded.valid]]


@pytest.fixture(scope="module")
def added_spec(added_tokenizer):
    return reference.spec_from_hf(added_tokenizer)


@pytest.fixture(scope="module")
def added_host(added_spec, tmp_path_factory):
    from tflm_mcubert.tokenizer.host import HostTokenizer, build_library

    library = build_library(tmp_path_factory.mktemp("added"), extra_flags=("-Wall", "-Wextra", "-Werror"))
    return HostTokenizer(vocab_blob.pack(added_spec), library)


def test_every_added_token_is_in_the_blob_with_its_flag(added_tokenizer, added_spec, added_host):
    vocab = added_tokenizer.get_vocab()
    stored = {token.id: token for token in vocab_blob.unpack(vocab_blob.pack(added_spec)).added_tokens}
    for content, flags in ADDED_TOKENS:
        assert stored[vocab[content]].normalized == flags["normalized"]
    assert stored[vocab["[URL]"]].text == "[url]"  # as the normalizer writes it
    assert stored[vocab["<s>"]].text == "<s>"


def test_texts_with_added_tokens_match_hugging_face_and_the_c_tokenizer(added_tokenizer, added_spec, added_host):
    texts = ADDED_TEXTS + ADVERSARIAL
    for pair in (None, "[URL] and <s>"):
        expected = [added_tokenizer(t, pair, truncation=True, max_length=48)["input_ids"] for t in texts]
        assert [ids(reference.encode(added_spec, t, 48, pair)) for t in texts] == expected
        assert [ids(added_host.encode(t, 48, pair)) for t in texts] == expected
    unk = added_tokenizer.unk_token_id
    assert added_tokenizer("a<mask>b")["input_ids"][2] == added_tokenizer.get_vocab()["<mask>"] != unk


@settings(max_examples=300, deadline=None)
@given(parts=st.lists(st.sampled_from(FRAGMENTS), max_size=14))
def test_near_misses_match_hugging_face_and_the_c_tokenizer(added_tokenizer, added_spec, added_host, parts):
    text = "".join(parts)
    expected = added_tokenizer(text, truncation=True, max_length=32)["input_ids"]
    assert ids(reference.encode(added_spec, text, 32)) == expected
    assert ids(added_host.encode(text, 32)) == expected


def test_corpus_with_added_tokens_matches_hugging_face(added_tokenizer, added_spec, added_host, corpus_sentences):
    texts = [f"{t} [URL] <emoji>" if i % 2 else f"<s>{t}[E1]" for i, t in enumerate(corpus_sentences[:600])]
    expected = added_tokenizer(texts, truncation=True, max_length=64)["input_ids"]
    assert [ids(reference.encode(added_spec, t, 64)) for t in texts] == expected
    assert [ids(added_host.encode(t, 64)) for t in texts] == expected


def _with_added(minilm_tokenizer, tmp_path, *tokens):
    from transformers import AutoTokenizer

    minilm_tokenizer.save_pretrained(str(tmp_path))
    tokenizer = AutoTokenizer.from_pretrained(str(tmp_path))
    tokenizer.add_tokens(list(tokens))
    return tokenizer


def test_added_tokens_the_device_cannot_match_are_refused(minilm_tokenizer, tmp_path):
    from tokenizers import AddedToken

    single_word = _with_added(minilm_tokenizer, tmp_path / "a", AddedToken("<w>", single_word=True))
    with pytest.raises(UserError, match="'<w>' is single_word"):
        reference.spec_from_hf(single_word)
    spaced = _with_added(minilm_tokenizer, tmp_path / "b", AddedToken("中文", normalized=True))
    with pytest.raises(UserError, match="normalizes to ' 中  文 '.*without whitespace"):
        reference.spec_from_hf(spaced)


def test_pruning_and_the_exported_tokenizer_keep_added_tokens(added_tokenizer, added_spec, corpus_sentences, tmp_path):
    from tflm_mcubert.compress.vocab_pruning import pieces_to_keep
    from tflm_mcubert.model.clustered_embedding import bert_tokenizer_with_vocab, write_permuted_tokenizer

    kept = pieces_to_keep(added_tokenizer, corpus_sentences[:50])
    by_id = {i: piece for piece, i in added_tokenizer.get_vocab().items()}
    pruned = bert_tokenizer_with_vocab([by_id[i] for i in kept], added_tokenizer, tmp_path / "pruned")
    pruned_spec = reference.spec_from_hf(pruned)
    texts = ADDED_TEXTS + corpus_sentences[:200:4]
    assert [ids(reference.encode(pruned_spec, t, 48)) for t in texts] == [
        pruned(t, truncation=True, max_length=48)["input_ids"] for t in texts
    ]
    for content, _ in ADDED_TOKENS:
        assert pruned(f"x {content} y")["input_ids"][2] == pruned.get_vocab()[content]
    permutation = np.random.default_rng(1).permutation(len(added_tokenizer.get_vocab()))
    permuted = write_permuted_tokenizer(added_tokenizer, permutation, tmp_path / "permuted")
    for text in ADDED_TEXTS:
        original = added_tokenizer(text)["input_ids"]
        assert permuted(text)["input_ids"] == [int(permutation[i]) for i in original], text
