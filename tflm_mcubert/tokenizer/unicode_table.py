"""The character table of the on-device tokenizer: what BERT's normalizer and pre-tokenizer do to each
code point, as few ranges as this vocabulary needs.

BERT's tokenizer (Hugging Face `tokenizers`: BertNormalizer, then BertPreTokenizer) treats every code
point as one of four kinds, whatever its neighbours:

    remove   dropped (control and format characters, U+FFFD, lone accents once accents are stripped)
    space    ends a word (whitespace)
    isolate  a word of its own (punctuation; CJK ideographs)
    letter   part of a word

and replaces it with a string (lower-cased, accents stripped, CJK compatibility ideographs unified).
The table is generated from the checkpoint's own tokenizer, run on every code point, so the device
agrees with it by construction. A mapped string matters only when all its characters occur in the
vocabulary: otherwise the word it is in cannot be matched and becomes [UNK] whatever the string is,
so such code points take whichever mapping merges with their neighbours' range. That keeps the table
to the ranges this vocabulary can tell apart.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import unicodedata
from pathlib import Path
from typing import Callable, Iterator

from tokenizers import Tokenizer

from tflm_mcubert.errors import UserError

KIND_REMOVE, KIND_SPACE, KIND_ISOLATE, KIND_LETTER = 0, 1, 2, 3
KIND_NAMES = ("remove", "space", "isolate", "letter")
# How a range maps its code points: chr(cp + value) | chr(value) | strings[value] | the Hangul syllable's
# jamo (Unicode's algorithmic decomposition, which NFD applies to the 11,172 precomposed syllables).
MODE_DELTA, MODE_CONST, MODE_STRING, MODE_HANGUL = 0, 1, 2, 3
HANGUL_FIRST, HANGUL_COUNT = 0xAC00, 11172
_HANGUL_L, _HANGUL_V, _HANGUL_T, _HANGUL_V_COUNT, _HANGUL_T_COUNT = 0x1100, 0x1161, 0x11A7, 21, 28
MAX_CODE_POINT = 0x10FFFF
SURROGATES = range(0xD800, 0xE000)  # not characters: the UTF-8 decoder rejects them
_PROBE = "a"  # an ASCII letter around a code point tells its kind from the pre-tokenizer's split


@dataclasses.dataclass(frozen=True)
class CharRange:
    """Code points [start, next range's start) share a kind and a mapping rule."""

    start: int
    kind: int
    mode: int
    value: int  # MODE_DELTA: the delta; MODE_CONST: the code point; MODE_STRING: an index into strings


@dataclasses.dataclass(frozen=True)
class UnicodeTable:
    ranges: tuple[CharRange, ...]
    strings: tuple[str, ...]  # the mapped strings MODE_STRING ranges name

    def lookup(self, cp: int) -> tuple[int, str]:
        """(kind, mapped string) of one code point, as the device computes it."""
        lo, hi = 0, len(self.ranges) - 1
        while lo < hi:  # the last range whose start <= cp
            mid = (lo + hi + 1) // 2
            if self.ranges[mid].start <= cp:
                lo = mid
            else:
                hi = mid - 1
        r = self.ranges[lo]
        return r.kind, apply_rule(r.kind, r.mode, r.value, cp, self.strings)


def hangul_jamo(cp: int) -> str:
    """NFD of a precomposed Hangul syllable (The Unicode Standard, 3.12)."""
    index = cp - HANGUL_FIRST
    lead, rest = divmod(index, _HANGUL_V_COUNT * _HANGUL_T_COUNT)
    vowel, trail = divmod(rest, _HANGUL_T_COUNT)
    return chr(_HANGUL_L + lead) + chr(_HANGUL_V + vowel) + (chr(_HANGUL_T + trail) if trail else "")


def apply_rule(kind: int, mode: int, value: int, cp: int, strings) -> str | None:
    """The mapped string of `cp` under a rule; None where the rule cannot apply to it."""
    if kind in (KIND_REMOVE, KIND_SPACE):
        return ""
    if mode == MODE_DELTA:
        target = cp + value
        return chr(target) if 0 <= target <= MAX_CODE_POINT and target not in SURROGATES else None
    if mode == MODE_CONST:
        return chr(value)
    if mode == MODE_STRING:
        return strings[value]
    return hangul_jamo(cp) if 0 <= cp - HANGUL_FIRST < HANGUL_COUNT else None


def check_bert_tokenizer(backend) -> dict:
    """The parts of a `tokenizers.Tokenizer` the device reproduces; a clear error for anything else."""
    config = json.loads(backend.to_str())
    normalizer, pre_tokenizer, model = (
        config.get("normalizer") or {},
        config.get("pre_tokenizer") or {},
        config["model"],
    )
    if normalizer.get("type") != "BertNormalizer" or pre_tokenizer.get("type") != "BertPreTokenizer":
        raise UserError(
            f"the on-device tokenizer reproduces BERT's (BertNormalizer + BertPreTokenizer); this checkpoint's is "
            f"{normalizer.get('type')} + {pre_tokenizer.get('type')}"
        )
    if model.get("type") != "WordPiece" or model.get("continuing_subword_prefix") != "##":
        raise UserError(f"the on-device tokenizer reproduces WordPiece with '##' pieces, not {model.get('type')}")
    return config


def classify(normalize: Callable[[str], str], pre_tokenize: Callable[[str], list]) -> Iterator[tuple[int, int, str]]:
    """(code point, kind, mapped string) for every character, from the tokenizer's own functions."""
    for cp in range(MAX_CODE_POINT + 1):
        if cp in SURROGATES:
            continue
        mapped = normalize(chr(cp))
        if mapped == "":
            yield cp, KIND_REMOVE, ""
            continue
        pieces = [piece for piece, _ in pre_tokenize(_PROBE + mapped + _PROBE)]
        if pieces == [_PROBE + mapped + _PROBE]:
            yield cp, KIND_LETTER, mapped
        elif pieces == [_PROBE, _PROBE]:
            yield cp, KIND_SPACE, ""
        elif pieces == [_PROBE, mapped.strip(), _PROBE]:
            yield cp, KIND_ISOLATE, mapped.strip()  # CJK ideographs come back padded with spaces
        else:
            raise UserError(
                f"U+{cp:04X} normalizes to {mapped!r}, which the pre-tokenizer splits as {pieces}: the on-device "
                "tokenizer has no rule for that"
            )


def build_table(classified, alphabet: set[str]) -> UnicodeTable:
    """Merge per-code-point rules into ranges. `alphabet`: the characters of the vocabulary's pieces."""
    classified = list(classified)
    ranges: list[CharRange] = []
    pool: list[str] = []
    index: dict[str, int] = {}
    previous = None  # (kind, mode, value) of the open range
    for i, (cp, kind, mapped) in enumerate(classified):
        exact = kind in (KIND_ISOLATE, KIND_LETTER) and all(ch in alphabet for ch in mapped)
        if previous is not None and _serves(previous, cp, kind, mapped, exact, alphabet, pool):
            continue
        upcoming = classified[i + 1] if i + 1 < len(classified) else None
        rule = _new_rule(cp, kind, mapped, exact, alphabet, upcoming, pool, index)
        ranges.append(CharRange(cp, *rule))
        previous = rule
    return UnicodeTable(tuple(ranges), tuple(pool))


def _serves(rule, cp, kind, mapped, exact, alphabet, pool) -> bool:
    """Whether `rule` gives this code point its result (or, where any unmatchable result will do, one)."""
    if rule[0] != kind:
        return False
    result = apply_rule(*rule, cp, pool)
    if result is None:
        return False
    if exact or kind in (KIND_REMOVE, KIND_SPACE):
        return result == mapped
    return any(ch not in alphabet for ch in result)


def _new_rule(cp, kind, mapped, exact, alphabet, upcoming, pool, index) -> tuple[int, int, int]:
    if kind in (KIND_REMOVE, KIND_SPACE) or (not exact and chr(cp) not in alphabet):
        return (kind, MODE_DELTA, 0)  # (a result outside the alphabet: the code point itself is one)
    if 0 <= cp - HANGUL_FIRST < HANGUL_COUNT and mapped == hangul_jamo(cp):
        return (kind, MODE_HANGUL, 0)
    if len(mapped) == 1:
        # a run of code points mapping to one character (accented forms of a letter) or a shifted run
        if upcoming is not None and upcoming[1] == kind and upcoming[2] == mapped:
            return (kind, MODE_CONST, ord(mapped))
        return (kind, MODE_DELTA, ord(mapped) - cp)
    if mapped not in index:
        index[mapped] = len(pool)
        pool.append(mapped)
    return (kind, MODE_STRING, index[mapped])


@functools.cache
def classed_marks() -> tuple[str, ...]:
    """The marks with a combining class that accent stripping keeps (spacing, not nonspacing), from this
    Python's unicodedata: U+302E, U+1B44, ... (a few dozen)."""
    return tuple(
        chr(cp)
        for cp in range(MAX_CODE_POINT + 1)
        if cp not in SURROGATES and unicodedata.combining(chr(cp)) and unicodedata.category(chr(cp)) != "Mn"
    )


def combining_classes(normalize: Callable[[str], str], letters) -> dict[str, int]:
    """The canonical combining class of each of `letters` that the normalizer reorders: BERT's normalizer
    applies NFD when it strips accents, which sorts each run of combining marks by class (the marks left
    after it drops the nonspacing ones are the few spacing marks with a class, U+302E for one). The
    classes are Python's unicodedata's, kept only for marks the normalizer does reorder against another
    class (its Unicode may be older: a mark it gives no class is a starter to it) and checked on every
    pair: generated from the checkpoint's tokenizer at export like the character table, nothing committed."""

    def survives(ch: str) -> bool:
        return normalize(_PROBE + ch) == _PROBE + ch

    def reorders(first: str, second: str) -> bool:  # first's class above second's
        return normalize(_PROBE + first + second) == _PROBE + second + first

    partners = [m for m in classed_marks() if survives(m)]

    def has_class(mark: str) -> bool:
        own = unicodedata.combining(mark)
        return any(
            reorders(p, mark) if unicodedata.combining(p) > own else reorders(mark, p)
            for p in partners
            if unicodedata.combining(p) != own
        )

    marks = {
        ch: unicodedata.combining(ch) for ch in letters if unicodedata.combining(ch) and survives(ch) and has_class(ch)
    }
    for a in marks:
        for b in marks:
            if marks[a] > marks[b] and not reorders(a, b):
                raise UserError(
                    f"the normalizer keeps U+{ord(a):04X} before U+{ord(b):04X}, which Python's Unicode "
                    f"{unicodedata.unidata_version} puts in classes {marks[a]} > {marks[b]}: the on-device "
                    "tokenizer cannot reorder this vocabulary's combining marks as it does"
                )
    return marks


def canonical_order(word: str, classes: dict[str, int]) -> str:
    """`word` with each mark moved before the marks of a higher class it follows (NFD's canonical
    ordering: a stable sort of each run of marks), as the device does it on appending each character."""
    out = list(word)
    for i in range(1, len(out)):
        at, ccc = i, classes.get(out[i], 0)
        while ccc and at > 0 and classes.get(out[at - 1], 0) > ccc:
            out[at - 1], out[at] = out[at], out[at - 1]
            at -= 1
    return "".join(out)


TABLE_CACHE_VERSION = 1  # bump when classify() or build_table() change what they produce


@functools.lru_cache(maxsize=4)
def table_for(backend_json: str, alphabet: frozenset[str]) -> UnicodeTable:
    """The table of a tokenizer (its JSON) and alphabet. Generating it runs ~1.1 M code points (seconds),
    so it is kept on disk, keyed by what it depends on: the normalizer, the pre-tokenizer and the alphabet
    (the cache is under ~/.cache/tflm_mcubert, or $XDG_CACHE_HOME; TFLM_MCUBERT_NO_CACHE=1 skips it)."""
    backend = Tokenizer.from_str(backend_json)
    config = check_bert_tokenizer(backend)
    key = json.dumps([TABLE_CACHE_VERSION, config["normalizer"], config["pre_tokenizer"], sorted(alphabet)])
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tflm_mcubert" / "unicode_tables"
    path = cache / f"{hashlib.sha256(key.encode()).hexdigest()[:24]}.json"
    use_cache = not os.environ.get("TFLM_MCUBERT_NO_CACHE")
    if use_cache and path.is_file():
        try:
            stored = json.loads(path.read_text())
            return UnicodeTable(tuple(CharRange(*r) for r in stored["ranges"]), tuple(stored["strings"]))
        except (ValueError, KeyError, TypeError):
            pass  # a damaged cache entry: generate the table again
    table = build_table(classify(backend.normalizer.normalize_str, backend.pre_tokenizer.pre_tokenize_str), alphabet)
    if use_cache:
        try:
            cache.mkdir(parents=True, exist_ok=True)
            partial = path.with_suffix(f".{os.getpid()}.tmp")
            ranges = [[r.start, r.kind, r.mode, r.value] for r in table.ranges]
            partial.write_text(json.dumps({"ranges": ranges, "strings": list(table.strings)}))
            os.replace(partial, path)
        except OSError:
            pass  # a read-only home: the table is simply generated next time too
    return table
