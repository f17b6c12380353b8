"""Canonical reordering of combining marks (NFD, which BERT's normalizer applies when it strips accents):
the few spacing marks with a combining class survive accent stripping, and a run of them is sorted by
class ('x\\u302e\\u1b44' is 'x\\u1b44\\u302e'). The classes come from unicodedata at export, checked against
the tokenizer's own normalizer; the reference and the C tokenizer reorder as Hugging Face does (issue 27,
finding 7)."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tflm_mcubert.errors import UserError
from tflm_mcubert.tokenizer import reference, vocab_blob
from tflm_mcubert.tokenizer.unicode_table import canonical_order, classed_marks, combining_classes

MARKS = ["\u302e", "\u302f", "\u1b44", "\U0001d16d", "\U0001d165"]  # classes 224, 224, 9, 226, 216
FRAGMENTS = ["x", "e", *MARKS, "\u0301", "\u200b", " ", "\u00e9", "x\u302e"]


def bert(tokens: list[str], directory, lowercase: bool):
    from transformers import BertTokenizerFast

    directory.mkdir(parents=True, exist_ok=True)
    (directory / "vocab.txt").write_text("".join(t + "\n" for t in tokens), encoding="utf-8")
    return BertTokenizerFast(vocab=str(directory / "vocab.txt"), do_lower_case=lowercase)


@pytest.fixture(scope="module")
def marked(minilm_tokenizer, tmp_path_factory):
    """MiniLM's uncased vocabulary plus the marks alone, as '##' pieces and in a few longer pieces."""
    vocab = minilm_tokenizer.get_vocab()
    extra = [*MARKS, *("##" + m for m in MARKS), "x\u1b44\u302e", "##\u1b44\u302e", "##\u302e\u302f"]
    tokens = sorted(vocab, key=vocab.get) + extra
    tokenizer = bert(tokens, tmp_path_factory.mktemp("marked"), lowercase=True)
    spec = reference.spec_from_hf(tokenizer)
    return tokenizer, spec


@pytest.fixture(scope="module")
def marked_host(marked, tmp_path_factory):
    from tflm_mcubert.tokenizer.host import HostTokenizer, build_library

    library = build_library(tmp_path_factory.mktemp("combining"), extra_flags=("-Wall", "-Wextra", "-Werror"))
    return HostTokenizer(vocab_blob.pack(marked[1]), library)


def ids(encoded) -> list[int]:
    return [int(i) for i in encoded.ids[: encoded.valid]]


def test_the_classes_are_the_vocabularys_marks_and_travel_in_the_blob(marked):
    tokenizer, spec = marked
    assert spec.combining_classes == {m: unicodedata.combining(m) for m in MARKS}
    assert vocab_blob.unpack(vocab_blob.pack(spec)).combining_classes == spec.combining_classes
    assert tokenizer.tokenize("x\u302e\u1b44") == ["x\u1b44\u302e"]  # Hugging Face reorders


def test_the_classes_agree_with_the_normalizer_on_every_mark_accent_stripping_keeps(minilm_tokenizer):
    """What keeps the generated classes in sync: on every classed mark of Python's Unicode, the classes
    kept are unicodedata's and order every pair as the `tokenizers` build does (a mark its older Unicode
    gives no class, U+16FF0 here, is left out: a starter to both; one it takes for nonspacing is stripped)."""
    normalize = minilm_tokenizer.backend_tokenizer.normalizer.normalize_str
    marks = classed_marks()
    assert 20 <= len(marks) < 100
    classes = combining_classes(normalize, marks)
    assert len(classes) >= len(marks) // 2 and all(classes[m] == unicodedata.combining(m) for m in classes)
    kept = [m for m in marks if normalize("x" + m) == "x" + m]  # its Unicode may strip some as nonspacing
    for a in kept:
        for b in kept:
            expected = canonical_order("x" + a + b, classes)
            assert normalize("x" + a + b) == expected, (a, b)


def test_a_normalizer_that_disagrees_is_refused_and_one_without_nfd_reorders_nothing():
    keeps = lambda text: text  # noqa: E731 - keeps every order: no NFD
    assert combining_classes(keeps, MARKS) == {}
    swapped = {"\u302e\u1b44", "\U0001d165\u1b44"}  # both above U+1B44, but U+302E not above U+1D165

    def inconsistent(text):
        return text[0] + text[2] + text[1] if text[1:] in swapped else text

    with pytest.raises(UserError, match="keeps U\\+302E before U\\+1D165.*cannot reorder"):
        combining_classes(inconsistent, ["\u302e", "\u1b44", "\U0001d165"])


def test_a_cased_tokenizer_keeps_the_input_order(minilm_tokenizer, tmp_path):
    vocab = minilm_tokenizer.get_vocab()
    tokens = sorted(vocab, key=vocab.get) + [*MARKS, *("##" + m for m in MARKS)]
    cased = bert(tokens, tmp_path, lowercase=False)
    assert reference.spec_from_hf(cased).combining_classes == {}


@settings(max_examples=300, deadline=None)
@given(parts=st.lists(st.sampled_from(FRAGMENTS), max_size=10))
def test_stacked_marks_match_hugging_face_and_the_c_tokenizer(marked, marked_host, parts):
    tokenizer, spec = marked
    text = "".join(parts)
    expected = tokenizer(text, truncation=True, max_length=32)["input_ids"]
    assert ids(reference.encode(spec, text, 32)) == expected
    assert ids(marked_host.encode(text, 32)) == expected


def test_a_normalized_added_token_with_a_reordered_mark_is_refused(minilm_tokenizer, tmp_path):
    from tokenizers import AddedToken

    vocab = minilm_tokenizer.get_vocab()
    tokenizer = bert(sorted(vocab, key=vocab.get) + MARKS, tmp_path, lowercase=True)
    tokenizer.add_tokens([AddedToken("x\u1b44\u302e", normalized=True)])
    with pytest.raises(UserError, match="holds a combining mark the normalizer reorders"):
        reference.spec_from_hf(tokenizer)
