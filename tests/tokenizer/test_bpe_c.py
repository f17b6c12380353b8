"""The C byte-level BPE tokenizer (host build) against the Python reference, byte for byte: ids, the text
decoded at once and one id at a time, on the corpus, the adversarial sets, invalid UTF-8, seeded random
bytes and random id streams; the same under ASan/UBSan (a driver process); mcubert_bpe_init's refusals of
damaged blobs and the argument checks."""

from __future__ import annotations

import random
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.tokenizer.conftest import BPE_ADVERSARIAL, BPE_INVALID_UTF8
from tflm_mcubert.errors import UserError
from tflm_mcubert.kernel_sources import custom_ops_dir
from tflm_mcubert.tokenizer import bpe_reference
from tflm_mcubert.tokenizer.bpe_host import HostBpeTokenizer, _Stream
from tflm_mcubert.tokenizer.host import SOURCES, build_library

DRIVER = Path(__file__).with_name("c") / "bpe_driver.c"


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no host C compiler")
    return build_library(tmp_path_factory.mktemp("bpe"), extra_flags=("-Wall", "-Wextra", "-Werror"))


@pytest.fixture(scope="module")
def host(library, bpe_blob_bytes):
    return HostBpeTokenizer(bpe_blob_bytes, library)


def random_bytes(count: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    return [bytes(rng.randrange(256) for _ in range(rng.randint(0, 80))) for _ in range(count)]


def check(host, spec, text) -> None:
    ids = bpe_reference.encode(spec, text)
    assert host.encode(text) == ids, text
    want = bpe_reference.decode(spec, ids)
    assert host.decode(ids) == want == host.decode(ids, one_at_a_time=True), text


def test_corpus_matches_the_reference(host, bpe_spec, corpus_sentences):
    for text in corpus_sentences:
        check(host, bpe_spec, text)


def test_adversarial_and_random_bytes_match_the_reference(host, bpe_spec):
    for text in BPE_ADVERSARIAL + BPE_INVALID_UTF8 + random_bytes(3_000, 0) + ["a" * 1000, "é" * 700, " " * 600]:
        check(host, bpe_spec, text)


@settings(max_examples=500, deadline=None)
@given(data=st.binary(max_size=200), text=st.text(max_size=60))
def test_any_bytes_match_the_reference(host, bpe_spec, data, text):
    check(host, bpe_spec, data)
    check(host, bpe_spec, text)


def test_random_id_streams_decode_as_the_reference(host, bpe_spec):
    rng = random.Random(3)
    for _ in range(3_000):
        ids = [rng.randrange(bpe_spec.vocab_size) for _ in range(rng.randint(0, 16))]
        want = bpe_reference.decode(bpe_spec, ids)
        assert host.decode(ids) == want == host.decode(ids, one_at_a_time=True), ids


def test_a_smaller_pretoken_limit_matches_the_reference(library, gpt2_tokenizer, corpus_sentences):
    from tflm_mcubert.tokenizer import bpe_blob

    spec = bpe_blob.spec_from_tokenizer(gpt2_tokenizer, max_pretoken_bytes=5)
    small = HostBpeTokenizer(bpe_blob.pack(spec), library)
    assert small.buffer_bytes == 40
    for text in corpus_sentences[:500] + BPE_ADVERSARIAL + BPE_INVALID_UTF8:
        check(small, spec, text)


# ---- under ASan/UBSan ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sanitized_driver(tmp_path_factory):
    compiler = shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        pytest.skip("no host C compiler")
    root = custom_ops_dir()
    out = tmp_path_factory.mktemp("bpe_asan") / "bpe_driver"
    command = [compiler, "-std=c99", "-O1", "-g", "-fno-omit-frame-pointer", "-Wall", "-Wextra", "-Werror"]
    command += ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-I", str(root / "include")]
    command += ["-I", str(root / "src"), str(DRIVER), *(str(root / "src" / name) for name in SOURCES), "-o", str(out)]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0 and "sanitize" in result.stderr and "cannot find" in result.stderr:
        pytest.skip(f"no sanitizer runtime: {result.stderr[-300:]}")
    assert result.returncode == 0, result.stderr[-3000:]
    return out


def run_driver(driver: Path, blob: bytes, inputs: list[bytes], tmp_path: Path) -> subprocess.CompletedProcess:
    (tmp_path / "blob").write_bytes(blob)
    (tmp_path / "inputs").write_bytes(b"".join(struct.pack("<I", len(i)) + i for i in inputs))
    return subprocess.run([str(driver), str(tmp_path / "blob"), str(tmp_path / "inputs")], capture_output=True)


def parse_driver(stdout: bytes):
    at, out = 0, []
    while at < len(stdout):
        status, n = struct.unpack_from("<iI", stdout, at)
        ids = list(struct.unpack_from(f"<{n // 4}i", stdout, at + 8))
        at += 8 + n
        texts = []
        for _ in range(2):
            (length,) = struct.unpack_from("<I", stdout, at)
            texts.append(stdout[at + 4 : at + 4 + length])
            at += 4 + length
        out.append((status, ids, *texts))
    return out


def test_under_asan_and_ubsan_the_c_matches_the_reference(sanitized_driver, bpe_spec, bpe_blob_bytes, tmp_path):
    inputs = [t.encode() if isinstance(t, str) else t for t in BPE_ADVERSARIAL + BPE_INVALID_UTF8]
    inputs += random_bytes(1_500, 7) + [b"a" * 1000, b"\xff" * 300, "😀".encode()[:3] * 50]
    result = run_driver(sanitized_driver, bpe_blob_bytes, inputs, tmp_path)
    assert result.returncode == 0, result.stderr.decode(errors="replace")[-3000:]
    runs = parse_driver(result.stdout)
    assert len(runs) == len(inputs)
    for data, (status, ids, whole, streamed) in zip(inputs, runs):
        assert status == 0 and ids == bpe_reference.encode(bpe_spec, data), data
        assert whole == streamed == bpe_reference.decode(bpe_spec, ids), data


def test_under_asan_damaged_blobs_are_refused_without_a_fault(sanitized_driver, bpe_blob_bytes, tmp_path):
    """Every header field set to values that break it, behind a valid CRC: init refuses, nothing faults."""
    for offset in range(16, 72, 2):
        for value in (0, 1, 0xFFFF, 0x7FFF):
            blob = bytearray(bpe_blob_bytes)
            struct.pack_into("<H", blob, offset, value)
            result = run_driver(sanitized_driver, resealed(blob), [b"text"], tmp_path)
            assert result.returncode in (0, 2), (offset, value, result.stderr.decode(errors="replace")[-2000:])


# ---- refusals -------------------------------------------------------------------------------------


def resealed(blob: bytearray) -> bytes:
    """The blob with its CRC recomputed: damage the CRC does not catch, for the structural checks."""
    struct.pack_into("<I", blob, 12, zlib.crc32(bytes(blob[16:])))
    return bytes(blob)


@pytest.mark.parametrize(
    "damage, problem",
    [
        (lambda b: b[:-1], "size is not the size given"),
        (lambda b: b[:40], "shorter than the 72-byte header"),
        (lambda b: b[:5], "shorter than the header"),
        (lambda b: b"MCTK" + b[4:], "not a BPE tokenizer blob"),
        (lambda b: b[:4] + b"\x02" + b[5:], r"blob version 2; this library reads version 1 \(export the model again\)"),
        (lambda b: b[:100] + bytes([b[100] ^ 1]) + b[101:], "CRC-32 mismatch"),
    ],
)
def test_a_damaged_blob_is_refused_with_the_reason(library, bpe_blob_bytes, damage, problem):
    with pytest.raises(UserError, match=problem):
        HostBpeTokenizer(damage(bpe_blob_bytes), library)


def test_structural_damage_behind_a_valid_crc_is_refused_by_name(library, bpe_blob_bytes):
    blob = bpe_blob_bytes
    byte_ids_at, merges_at, merged_at, lengths_at, blocks_at, _, added_at = struct.unpack_from("<7I", blob, 40)
    assert struct.unpack_from("<H", blob, 26)[0] == 2  # 16-bit ids: this vocabulary fits
    ranges_at, rules = struct.unpack_from("<I", blob, 36)[0], struct.unpack_from("<H", blob, 34)[0]
    cases = {  # offset, format, value, the message
        "vocab": (16, "<I", 0, "limits out of range"),
        "pretoken": (28, "<I", 2, "limits out of range"),
        "id width": (26, "<H", 3, "limits out of range"),
        "merges offset": (44, "<I", len(blob), "section lies outside the blob"),
        "misaligned": (40, "<I", byte_ids_at + 2, "section lies outside the blob"),
        "rule count": (34, "<H", 9, "classes"),
        "byte id": (byte_ids_at + 2 * 65, "<H", 0xFFFF, "byte ids"),
        "merge order": (merges_at + 6, "<H", 0, "not sorted"),
        "merge rank": (merges_at + 4, "<H", 0xFFFF, "rank not below the merge count"),
        "merged id": (merged_at, "<H", 0xFFFF, "merges"),
        "token length": (lengths_at, "<H", 0x7FFF, "over max_token_bytes"),
        "block": (blocks_at + 4, "<I", 1, "a block does not start"),
        "added id": (added_at + 1 + blob[added_at], "<I", 0xFFFFFF, "added tokens"),
        "added length": (added_at, "<B", 250, "added tokens"),
        "class plane": (ranges_at + 4 * rules, "<H", 1, "plane"),
        # found by the fuzzer: with ' ' not whitespace, the pre-tokenizer made no progress (a hang)
        "space class": (ranges_at + 4 * struct.unpack_from(f"<{rules}I", blob, ranges_at).index(1), "<I", 2, "space"),
    }
    for name, (offset, form, value, problem) in cases.items():
        damaged = bytearray(blob)
        struct.pack_into(form, damaged, offset, value)
        with pytest.raises(UserError, match=problem):
            HostBpeTokenizer(resealed(damaged), library)
            pytest.fail(name)


def test_ids_past_16_bits_take_the_32_bit_layout(library, bpe_spec):
    """A vocabulary past 2^16 ids (an unused id at 70,000) stores 4-byte ids: the same ids and text."""
    import dataclasses

    from tflm_mcubert.tokenizer import bpe_blob

    wide = dataclasses.replace(bpe_spec, tokens=bpe_spec.tokens + (b"",) * (70_001 - bpe_spec.vocab_size))
    blob = bpe_blob.pack(wide)
    assert struct.unpack_from("<H", blob, 26)[0] == 4 and bpe_blob.unpack(blob) == wide
    host = HostBpeTokenizer(blob, library)
    for text in BPE_ADVERSARIAL + BPE_INVALID_UTF8 + random_bytes(200, 9):
        check(host, wide, text)
    assert host.decode([70_000, 72]) == bpe_reference.decode(wide, [70_000, 72])


def test_arguments_are_checked(host, bpe_spec):
    with pytest.raises(UserError, match="more than max_ids"):
        host.encode("a b c d e f", max_ids=2)
    assert host.encode("", max_ids=0) == []
    with pytest.raises(UserError, match="an id outside"):
        host.decode([bpe_spec.vocab_size])
    with pytest.raises(UserError, match="an id outside"):
        host.decode([-1])
    token = max(range(bpe_spec.vocab_size), key=lambda i: len(bpe_spec.tokens[i]))
    stream = _Stream()
    with pytest.raises(UserError, match="smaller than the ids need"):
        host.decode_step([token], stream, out_bytes=3 * len(bpe_spec.tokens[token]) - 1)
    want = bpe_reference.StreamDecoder(bpe_spec).feed(token)
    assert host.decode_step([token], stream, out_bytes=3 * len(bpe_spec.tokens[token])) == want
    assert host.buffer_bytes == 8 * bpe_spec.max_pretoken_bytes


def test_a_permuted_id_space_gives_the_permuted_ids_and_the_same_text(library, gpt2_tokenizer, bpe_spec):
    """An export that reorders the embedding's rows (export/id_order.py) numbers the ids its way."""
    import numpy as np

    from tflm_mcubert.tokenizer import bpe_blob

    permutation = np.random.default_rng(4).permutation(bpe_spec.vocab_size)
    spec = bpe_blob.spec_from_tokenizer(gpt2_tokenizer, permutation=permutation)
    host = HostBpeTokenizer(bpe_blob.pack(spec), library)
    for text in BPE_ADVERSARIAL + BPE_INVALID_UTF8:
        plain = bpe_reference.encode(bpe_spec, text)
        assert host.encode(text) == [int(permutation[i]) for i in plain] == bpe_reference.encode(spec, text)
        assert host.decode(host.encode(text), one_at_a_time=True) == bpe_reference.decode(bpe_spec, plain)
    with pytest.raises(UserError, match="not a permutation"):
        bpe_blob.spec_from_tokenizer(gpt2_tokenizer, permutation=[0] * bpe_spec.vocab_size)
