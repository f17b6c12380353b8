"""Vocabularies of multilingual BERT's size (119,547 pieces, cased: no lower-casing, no accent stripping)
and past 2^18 ids (262,200), built here from many scripts: the Python reference equals Hugging Face's
tokenizer and the C tokenizer equals the reference; a non-default max_input_chars_per_word is honoured
(issue 27, finding 7)."""

from __future__ import annotations

import random

import pytest

from tests.tokenizer.conftest import ADVERSARIAL
from tflm_mcubert.tokenizer import reference, vocab_blob

SCRIPTS = (
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZàáâãäåæçèéêëìíîïñòóôõöøùúûüýÿßşğıİčšžłńőű",
    "абвгдеёжзийклмнопрстуфхцчшщъыьэюяАБВГДЕЖЗИЙКЛМНОПРСТУФХЦЧШЩЭЮЯіїєґ",
    "αβγδεζηθικλμνξοπρστυφχψωάέήίόύώΑΒΓΔΕΖΗΘΙΚΛΜΝΞΟΠΡΣΤΥΦΧΨΩ",
    "ابتثجحخدذرزسشصضطظعغفقكلمنهوي",
    "אבגדהוזחטיכלמנסעפצקרשת",
    "अआइईउऊएऐओऔकखगघङचछजझञटठडढणतथदधनपफबभमयरलवशषसह\u093e\u093f\u0940\u0941\u0947\u094b\u094d\u0902",
    "กขคงจฉชซญดตถทธนบปผพฟภมยรลวศษสหอฮะาำเแโใไ\u0e31\u0e34\u0e35\u0e38\u0e48\u0e49",
    "".join(chr(0xAC00 + 37 * k) for k in range(300)),  # Hangul syllables
    "".join(chr(c) for c in range(0x3041, 0x3097)),  # hiragana
)
CJK = [chr(c) for c in range(0x4E00, 0x4E00 + 12_000)]
PUNCTUATION = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"


def multilingual_tokens(size: int, seed: int = 0) -> list[str]:
    """multilingual BERT's layout ([PAD], [unused1..99], [UNK], [CLS], [SEP], [MASK]), every character
    of SCRIPTS as a word and a '##' piece, CJK ideographs, then random words of 2-9 letters of one script."""
    rng = random.Random(seed)
    tokens = ["[PAD]", *(f"[unused{k}]" for k in range(1, 100)), "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    seen = set(tokens)

    def add(token):
        if token not in seen:
            seen.add(token)
            tokens.append(token)

    for ch in "".join(SCRIPTS) + "0123456789":
        add(ch)
        add("##" + ch)
    for ch in CJK + list(PUNCTUATION):
        add(ch)
    while len(tokens) < size:
        word = "".join(rng.choice(SCRIPTS[len(tokens) % len(SCRIPTS)]) for _ in range(rng.randint(2, 9)))
        add(word if rng.random() < 0.6 else "##" + word)
    return tokens[:size]


def texts_from(tokens: list[str], count: int, seed: int = 1) -> list[str]:
    """Words glued from pieces (so greedy matching has work), CJK, punctuation and case."""
    rng = random.Random(seed)
    pieces = [t.removeprefix("##") for t in tokens[104:]]
    words = lambda: "".join(rng.choice(pieces) for _ in range(rng.randint(1, 3)))  # noqa: E731
    return [" ".join(words() + rng.choice(["", "", ",", "!"]) for _ in range(rng.randint(1, 14))) for _ in range(count)]


def cased_bert(tokens: list[str], directory, max_chars: int | None = None):
    """A BertTokenizerFast with multilingual BERT's normalizer settings over `tokens`, saved and loaded
    through the package's checkpoint loader (which keeps max_input_chars_per_word)."""
    from transformers import BertTokenizerFast

    from tflm_mcubert.model.hf_import import restore_word_limit

    directory.mkdir(parents=True, exist_ok=True)
    (directory / "vocab.txt").write_text("".join(t + "\n" for t in tokens), encoding="utf-8")
    tokenizer = BertTokenizerFast(
        vocab=str(directory / "vocab.txt"), do_lower_case=False, strip_accents=None, tokenize_chinese_chars=True
    )
    if max_chars is not None:
        tokenizer.backend_tokenizer.model.max_input_chars_per_word = max_chars
        tokenizer.save_pretrained(str(directory))
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(directory))
        restore_word_limit(tokenizer, directory / "tokenizer.json")
    return tokenizer


def ids(encoded) -> list[int]:
    return [int(i) for i in encoded.ids[: encoded.valid]]


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    from tflm_mcubert.tokenizer.host import build_library

    return build_library(tmp_path_factory.mktemp("multilingual"), extra_flags=("-Wall", "-Wextra", "-Werror"))


@pytest.mark.parametrize("size, texts", [(119_547, 400), (262_200, 100)])
def test_a_multilingual_vocabulary_matches_hugging_face_and_the_c_tokenizer(library, tmp_path, size, texts):
    from tflm_mcubert.tokenizer.host import HostTokenizer

    tokens = multilingual_tokens(size)
    tokenizer = cased_bert(tokens, tmp_path)
    spec = reference.spec_from_hf(tokenizer)
    assert spec.vocab_size == size and len(spec.word_pieces) + len(spec.continuation_pieces) > 0.9 * size
    blob = vocab_blob.pack(spec)
    assert vocab_blob.unpack(blob).continuation_pieces == spec.continuation_pieces
    host = HostTokenizer(blob, library)
    sample = texts_from(tokens, texts) + ADVERSARIAL
    expected = tokenizer(sample, truncation=True, max_length=64)["input_ids"]
    assert max(max(e) for e in expected) >= 100_000  # ids past 16 bits occur
    assert [ids(reference.encode(spec, t, 64)) for t in sample] == expected
    assert [ids(host.encode(t, 64)) for t in sample] == expected


def test_max_input_chars_per_word_is_honoured(minilm_tokenizer, library, tmp_path):
    from tflm_mcubert.tokenizer.host import HostTokenizer

    vocab = minilm_tokenizer.get_vocab()
    tokenizer = cased_bert(sorted(vocab, key=vocab.get), tmp_path, max_chars=7)
    assert tokenizer.backend_tokenizer.model.max_input_chars_per_word == 7  # transformers 5 alone resets it to 100
    spec = reference.spec_from_hf(tokenizer)
    assert spec.max_chars_per_word == 7
    host = HostTokenizer(vocab_blob.pack(spec), library)
    texts = ["abcdefg abcdefgh", "playing understanding", "a" * 8, "Ünïcödé wörds here"]
    expected = tokenizer(texts)["input_ids"]
    assert any(tokenizer.unk_token_id in e for e in expected)
    assert [ids(reference.encode(spec, t, 32)) for t in texts] == expected
    assert [ids(host.encode(t, 32)) for t in texts] == expected
    assert host.buffer_bytes < 100  # the word buffer follows the limit
