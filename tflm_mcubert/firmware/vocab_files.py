"""The export's tokenizer for the device: model_vocab.cc/.h holding the tokenizer blob (tokenizer/vocab_blob.py)
in the export's id space (model_vocab.bin: the same bytes, for `python -m tflm_mcubert tokenize`), and the
report's figures for it.

    vocab = write_vocab_files(out_dir, tokenizer, permutation)   # None when there is no tokenizer
    vocab.blob_bytes, vocab.report                               # counted in flash_bytes; report.json
    append_text_guide(out_dir, vocab, custom=True, seq_len=128)  # FIRMWARE.md's text-in section

A checkpoint whose tokenizer the device cannot reproduce (not BERT's WordPiece) gets no blob and a
report entry saying why; the export itself goes on.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from tflm_mcubert.data.calibration import builtin_sentences
from tflm_mcubert.errors import UserError
from tflm_mcubert.firmware.c_array import write_c_array
from tflm_mcubert.firmware.template import fill
from tflm_mcubert.measure.tokenizer_abi import tokenize_cost
from tflm_mcubert.tokenizer import reference, vocab_blob

VOCAB_NAME = "model_vocab"
VOCAB_FILES = (f"{VOCAB_NAME}.cc", f"{VOCAB_NAME}.h", f"{VOCAB_NAME}.bin")  # .bin: the raw blob, for tools


@dataclasses.dataclass(frozen=True)
class VocabFiles:
    files: tuple[str, ...]  # written into the export directory ((): none)
    blob_bytes: int
    report: dict


def tokenizer_report(spec, tokenizer, blob_bytes: int) -> dict:
    vocabulary = len(tokenizer.get_vocab())
    stored = len(spec.word_pieces) + len(spec.continuation_pieces)
    return {
        "vocab_bytes": blob_bytes,
        "vocabulary_tokens": vocabulary,
        "stored_pieces": stored,
        "added_tokens": len(spec.added_tokens),
        "unreachable_pieces_left_out": vocabulary - stored - len(spec.added_tokens),
        "char_ranges": len(spec.table.ranges),
        "max_chars_per_word": spec.max_chars_per_word,
        "files": list(VOCAB_FILES),
        "note": (
            "the on-device tokenizer's blob (mcubert/mcubert_tokenizer.h): ids in this export's id space, "
            "identical to the checkpoint's Hugging Face tokenizer; pieces no text can produce are left out"
        ),
    }


def one_piece_letter(spec) -> str | None:
    """A letter every word of which splits into one piece per character: a word piece and a '##' piece,
    and no piece holds it twice. A word of it has the most pieces a word can have (a lowercase ASCII
    letter when one qualifies)."""
    doubled = {piece[:2] for piece in [*spec.word_pieces, *spec.continuation_pieces] if len(piece) >= 2}
    letters = [ch for ch in spec.continuation_pieces if len(ch) == 1 and ch in spec.word_pieces]
    letters = [ch for ch in letters if ch + ch not in doubled]
    return min(letters, key=lambda ch: (not ("a" <= ch <= "z"), ch), default=None)


def longest_words_text(spec, seq_len: int) -> str | None:
    """The stress input: words of max_chars_per_word characters of one_piece_letter (the longest word with
    the most pieces: one search per list and piece), one word more than seq_len needs (the word that
    crosses the end is tokenized whole: an [UNK] anywhere in it would replace its first id)."""
    letter = one_piece_letter(spec)
    if letter is None:
        return None
    words = -(-seq_len // spec.max_chars_per_word) + 1
    return " ".join([letter * spec.max_chars_per_word] * words)


def measured_cost(blob: bytes, seq_len: int, core: str, spec=None) -> dict:
    """The tokenizer's instructions on the board's core for a full input of built-in English sentences,
    and with `spec` for the longest words of the most pieces (longest_words_text) and the worse of the two
    (`worst_case_instructions`), measured on this machine (the kernels' emulator image,
    built by measure/kernel_build.py). Where it cannot be (no unicorn, cmake or arm-none-eabi-gcc), the
    figure is absent: `"measured": false` and the reason in `note`. A measured figure has `instructions`
    and says how in `measure`."""
    text = " ".join(builtin_sentences())
    try:
        cost = tokenize_cost(blob, text, seq_len, core)
        longest = longest_words_text(spec, seq_len) if spec is not None else None
        if longest is not None:
            measured = tokenize_cost(blob, longest, seq_len, core)
            cost["longest_words"] = {
                "input": f"words of {spec.max_chars_per_word} x {longest[0]!r}, one piece a letter, past seq_len",
                "instructions": measured["instructions"],
                "stack_bytes": measured["stack_bytes"],
            }
            cost["worst_case_instructions"] = max(cost["instructions"], measured["instructions"])
        return cost
    except (ImportError, RuntimeError) as exc:  # no unicorn, cmake or arm-none-eabi-gcc, or the emulator failed
        return {"core": core, "instructions": None, "measured": False, "note": f"not measured: {exc}"}


def write_vocab_files(
    out_dir: Path, tokenizer, permutation=None, seq_len: int = 128, core: str = "cortex-m7"
) -> VocabFiles:
    """model_vocab.cc/.h for `tokenizer` (ids through `permutation`), or the reason there are none; the
    report includes the tokenizer's measured cost for `seq_len` positions on `core`."""
    if tokenizer is None:
        return VocabFiles(
            (), 0, {"vocab_bytes": 0, "note": "no tokenizer: the checkpoint has none (or none was given)"}
        )
    try:
        spec = reference.spec_from_hf(tokenizer, permutation)
    except UserError as exc:
        return VocabFiles((), 0, {"vocab_bytes": 0, "note": f"no on-device tokenizer: {exc}"})
    blob = vocab_blob.pack(spec)
    (Path(out_dir) / f"{VOCAB_NAME}.bin").write_bytes(blob)
    write_c_array(blob, out_dir, name=VOCAB_NAME, what="the checkpoint's tokenizer (tokenizer/vocab_blob.py)")
    report = {**tokenizer_report(spec, tokenizer, len(blob)), "cost": measured_cost(blob, seq_len, core, spec)}
    return VocabFiles(VOCAB_FILES, len(blob), report)


_TEXT_INPUT_USAGE = """Add `model_vocab.cc` and `custom_ops/tflm/mcubert_tflm_text.cc` to the build;
`mcubert::TextInput` writes the tokenizer's output straight into the model's input tensors:

```cpp
#include "mcubert_tflm_text.h"
#include "model_vocab.h"
static mcubert::TextInput text(g_model_vocab, g_model_vocab_len);  // checks the blob once
uint32_t tokens = 0;
if (text.Fill(interpreter, {MCUBERT_MODEL_INPUT_IDS_INDEX, MCUBERT_MODEL_TOKEN_TYPE_IDS_INDEX,
                            MCUBERT_MODEL_ATTENTION_MASK_INDEX}, line, line_bytes, &tokens) == kTfLiteOk) {
  interpreter.Invoke();  // else text.message() says why
}
```

`examples/baremetal`'s `mcubert_app` (UART on the boards, semihosting under QEMU), the Arduino sketch and
the Mbed application read a line of text this way and print the label."""

_C_USAGE = """Add `model_vocab.cc` and `custom_ops/src/mcubert_tokenizer*.c` to the build and call the C tokenizer
(`custom_ops/include/mcubert/mcubert_tokenizer.h`: `mcubert_tokenizer_init` once on `g_model_vocab`, then
`mcubert_tokenize` per text into int32 ids and token types and an int8 mask, converted to this model's
input types)."""


def append_text_guide(out_dir: Path, vocab: VocabFiles, *, custom: bool, seq_len: int) -> None:
    """Appends FIRMWARE.md's text-in section (blob, cost, how to call it) when `vocab` wrote a blob."""
    guide = Path(out_dir) / "FIRMWARE.md"
    if not vocab.files or not guide.is_file():
        return
    report = vocab.report
    cost = report.get("cost", {})
    measured = (
        f"{cost['instructions']:,} instructions on the {cost['core']} (measured under unicorn), stack "
        f"{cost['stack_bytes']} B"
        if cost.get("instructions")
        else cost.get("note", "not measured")
    )
    if cost.get("longest_words"):
        longest = cost["longest_words"]
        measured += f"; {longest['instructions']:,} for the longest words ({longest['input']})"
    section = fill(
        "FIRMWARE_text.md.tmpl",
        version=vocab_blob.VERSION,
        vocab_bytes=f"{vocab.blob_bytes:,}",
        tokens=f"{report['vocabulary_tokens']:,}",
        seq_len=seq_len,
        cost=measured,
        usage=_TEXT_INPUT_USAGE if custom else _C_USAGE,
    )
    with open(guide, "a", encoding="utf-8") as f:
        f.write(section)
