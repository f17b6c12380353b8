"""Vocabulary pruning: keep the special and added tokens, every single-character piece and the pieces a corpus uses
(or its N most frequent); the rest leave the vocabulary, the word table and the tokenizer blob.

    pruned = prune_vocabulary(model, tokenizer, sentences, out_dir)   # .model, .tokenizer, .report
    pruned = prune_to_corpus(model, tokenizer, "rotten_tomatoes", out_dir)  # + the blob's bytes saved

`export --prune-vocab` prunes the checkpoint it exports; `distill`/`search --prune-vocab` prune before
training (the student trains on the pruned tokenization, the search's embedding budget counts only kept
rows) and write a checkpoint whose tokenizer is the pruned one, so its export needs no further pruning.

The pruned tokenizer is the checkpoint's with the smaller vocab.txt (ids renumbered in the old order), so
a word whose piece was dropped re-tokenizes into shorter kept pieces, down to single characters (all
kept), and only characters outside the kept ones become [UNK]: what Hugging Face's tokenizer does with
the same vocabulary, which the on-device tokenizer matches. Prune before compressing: the clustered
embedding is then built over the kept tokens only (a pruned token needs no row in any cluster).
"""

from __future__ import annotations

import collections
import dataclasses
import sys
import tempfile
from pathlib import Path

from tflm_mcubert.data.calibration import read_sentences
from tflm_mcubert.data.tasks import GLUE_TASKS, OFFLINE_TASKS, load_task
from tflm_mcubert.errors import UserError
from tflm_mcubert.model.bert import with_vocabulary
from tflm_mcubert.model.clustered_embedding import bert_tokenizer_with_vocab
from tflm_mcubert.tokenizer import reference, vocab_blob
from tflm_mcubert.tokenizer.blob_order import blob_order

CONTINUATION = "##"


@dataclasses.dataclass
class PrunedVocabulary:
    model: object
    tokenizer: object
    kept_ids: list[int]  # old ids in their new order (new id k is old id kept_ids[k])
    report: dict


def pieces_to_keep(tokenizer, sentences: list[str], top_n: int | None = None) -> list[int]:
    """Old ids to keep, ascending: special and added tokens, single-character pieces, and the corpus's pieces."""
    vocab = tokenizer.get_vocab()
    counts: collections.Counter[int] = collections.Counter()
    # verbose=False: counting pieces of long texts is not feeding them to the model, so transformers'
    # "sequence length is longer than the specified maximum" warning would only alarm.
    for ids in tokenizer(sentences, add_special_tokens=False, verbose=False)["input_ids"]:
        counts.update(ids)
    used = [i for i, _ in counts.most_common(top_n)] if top_n is not None else list(counts)
    always = {vocab[t] for t in tokenizer.all_special_tokens if t in vocab}
    always |= set(tokenizer.added_tokens_decoder) & set(vocab.values())  # [URL], <s>, ...
    always |= {i for piece, i in vocab.items() if len(piece.removeprefix(CONTINUATION) or piece) == 1}
    return sorted(always | set(used))


def prune_vocabulary(
    model, tokenizer, sentences: list[str], out_dir: Path, top_n: int | None = None
) -> PrunedVocabulary:
    if tokenizer is None:
        raise UserError("--prune-vocab needs the checkpoint's tokenizer (vocab.txt or tokenizer.json)")
    if not sentences:
        raise UserError("--prune-vocab: the corpus holds no text")
    if model.embeddings.word_lookup is not None:
        raise UserError("--prune-vocab: this checkpoint's embedding is already compressed; prune before compressing")
    kept = pieces_to_keep(tokenizer, sentences, top_n)
    by_id = {i: piece for piece, i in tokenizer.get_vocab().items()}
    pruned_tokenizer = bert_tokenizer_with_vocab([by_id[i] for i in kept], tokenizer, out_dir)
    pruned_model = with_vocabulary(model, kept)
    original = len(by_id)
    hidden = model.config.hidden_size
    report = {
        "corpus_sentences": len(sentences),
        "top_n": top_n,
        "tokens_kept": len(kept),
        "tokens_before": original,
        "embedding_params_saved": (original - len(kept)) * hidden,
        "note": (
            "kept: special tokens, every single-character piece, and the corpus's pieces; a word whose piece "
            "was dropped re-tokenizes into shorter kept pieces"
        ),
    }
    return PrunedVocabulary(pruned_model, pruned_tokenizer, kept, report)


def corpus_sentences(spec: str) -> list[str]:
    """The texts of a corpus: a task's training split (an offline task such as debate_speakers, a GLUE task,
    or a task directory of train.* / validation.* / test.* files) or a text/CSV file."""
    if spec.lower() in (*GLUE_TASKS, *OFFLINE_TASKS) or Path(spec).is_dir():
        train = load_task(spec)["train"]
        columns = [c for c in ("text", "text_pair") if c in train.column_names]
        return [t for c in columns for t in train[c] if t]
    return read_sentences(spec, flag="--prune-vocab")


def blob_bytes(tokenizer) -> int | None:
    """Bytes of the on-device tokenizer blob of `tokenizer` as a dense export writes it (ids in the blob's
    order, so none is stored: tokenizer/blob_order.py), or None when the device cannot reproduce it. A
    compressed export's blob has one such range per cluster: a few bytes more (its report gives them)."""
    try:
        spec = reference.spec_from_hf(tokenizer)
        order = blob_order(spec, [0, len(tokenizer.get_vocab())])
        return len(vocab_blob.pack(reference.spec_from_hf(tokenizer, order)))
    except UserError:
        return None


def prune_to_corpus(model, tokenizer, corpus: str, out_dir: Path, top_n: int | None = None) -> PrunedVocabulary:
    """prune_vocabulary to the texts of `corpus` (corpus_sentences); the report adds the corpus, the
    tokenizer blob's bytes before and after, and the bytes saved (blob, and the int8 dense word table's)."""
    sentences = corpus_sentences(corpus)
    pruned = prune_vocabulary(model, tokenizer, sentences, out_dir, top_n)
    before, after = blob_bytes(tokenizer), blob_bytes(pruned.tokenizer)
    pruned.report.update(
        corpus=corpus,
        vocab_bytes_before=before,
        vocab_bytes_after=after,
        vocab_bytes_saved=None if before is None or after is None else before - after,
        int8_embedding_bytes_saved=pruned.report["embedding_params_saved"],
    )
    return pruned


@dataclasses.dataclass(frozen=True)
class Pruning:
    """--prune-vocab CORPUS [--prune-top-n N]: a task name or a text/CSV file (corpus_sentences), as
    `distill` and `search` prune before training."""

    corpus: str
    top_n: int | None = None

    def validate(self) -> None:
        if self.top_n is not None and self.top_n < 1:
            raise UserError("--prune-top-n needs a count of 1 or more")

    def apply(self, model, tokenizer, what: str):
        """(model, tokenizer, report): the model and tokenizer pruned to the corpus, and the pruning's
        report (tokens kept, embedding and blob bytes saved)."""
        self.validate()
        if tokenizer is None:
            raise UserError(f"--prune-vocab: {what} has no tokenizer (vocab.txt or tokenizer.json)")
        _log(f"pruning the vocabulary to the pieces of {self.corpus} ...")
        with tempfile.TemporaryDirectory() as scratch:  # the pruned vocab.txt; the tokenizer keeps it in memory
            pruned = prune_to_corpus(model, tokenizer, self.corpus, Path(scratch), self.top_n)
        _log(f"kept {pruned.report['tokens_kept']:,} of {pruned.report['tokens_before']:,} tokens")
        return pruned.model, pruned.tokenizer, pruned.report


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
