"""The mutation campaign of issue #15's table: corrupted MCUBERT models through the reader and reference.

    python tests/fuzz/mutate_models.py --count 100000 [--reseal] [--seq-len 128]
    python tests/fuzz/mutate_models.py --decoder --c --count 100000   # a GPT-2 decoder, and the C verifiers

Mutates an export (BERT-tiny-shaped layers at --seq-len; default a small model for speed: --bert-tiny
for the real one) in eight ways — random byte flips anywhere, flips in custom options, in the offline
plan, in the flatbuffer structure (bytes outside every buffer's data), truncations, zeroed 4-byte
words, and (issue 28) a flip in a byte the verifiers read to find or require the integrity record
(root offset, root table, metadata and its names, the record's header, the operator codes), alone
and together with a flip in a constant — and prints, per kind: cases, named errors (ModelFormatError),
accepted with the same output, accepted with a DIFFERENT output, and crashes (any other exception).
A ninth kind, a truncation resealed (the record's size and CRC rewritten to agree with the bytes left,
as a crafted file would be), leaves only the structure to refuse it.
The targets: no crash and no different output. --reseal recomputes the integrity record after each
mutation (a crafted file whose CRCs agree), so the parser behind the record is what is measured;
different outputs are then expected (the file says so) and only crashes count.

--decoder mutates a small GPT-2 decoder export (KV caches as variable tensors, the tied word table
shared) and compares six greedy steps. --c also gives every mutant to both C entry points,
mcubert_verify_model and mcubert_verify_model_expected (with the original's size and CRC), in a
driver built with ASan + UBSan (verify_pipe.py): a C OK for a mutant the Python reader refuses or
reads to another output is counted as "C OK, DIFFERENT" (the target: 0), a sanitizer report as a crash
(the driver follows each OK with TFLM's unchecked reads of the model). With --reseal only crashes and
an _expected OK for another model count: the C verifier checks integrity and bounds, the ops' Prepare
(and the reader) what the values mean.
"""

from __future__ import annotations

import argparse
import collections
import random
import re
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # verify_pipe, run_fuzzers

from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as schema  # noqa: E402

from tflm_mcubert.runtime.reference import ReferenceInputError, run_reference  # noqa: E402
from tflm_mcubert.tflite.integrity import add_integrity_record  # noqa: E402
from tflm_mcubert.tflite.mcubert_reader import ModelFormatError, read_decoder, read_model  # noqa: E402
from tflm_mcubert.tflite.mcubert_writer import OFFLINE_PLAN_METADATA  # noqa: E402
from tests.tflite.record_path import record_path_bytes, record_span, resealed  # noqa: E402

KINDS = (
    "random flips",
    "custom options",
    "offline plan",
    "structure",
    "truncation",
    "zeroed word",
    "record path",
    "record path + constant",
    "truncation (resealed)",
)
OUTCOMES = ("named error", "same output", "DIFFERENT output", "crash")
C_OUTCOMES = ("C OK", "C OK, DIFFERENT", "C expected OK", "C expected OK, DIFFERENT", "C crash")


def regions(model_bytes: bytes) -> dict[str, list[tuple[int, int]]]:
    """Byte ranges (start, end) of the options, the offline plan and every buffer's data."""
    model = schema.Model.GetRootAs(model_bytes, 0)
    data, plan, options = [], [], []
    plan_buffer = next(
        model.Metadata(i).Buffer()
        for i in range(model.MetadataLength())
        if model.Metadata(i).Name().decode() == OFFLINE_PLAN_METADATA
    )
    for i in range(model.BuffersLength()):
        buffer = model.Buffers(i)
        if buffer.DataLength():
            start = buffer._tab.Vector(buffer._tab.Offset(4))
            (plan if i == plan_buffer else data).append((start, start + buffer.DataLength()))
    subgraph = model.Subgraphs(0)
    for k in range(subgraph.OperatorsLength()):
        operator = subgraph.Operators(k)
        start = operator._tab.Vector(operator._tab.Offset(14))
        options.append((start, start + operator.CustomOptionsLength()))
    return {
        "options": options,
        "plan": plan,
        "constants": data,
        "data": data + plan + options,
        "record path": record_path_bytes(model_bytes),
        "record": record_span(model_bytes),
    }


def position(rng: random.Random, kind: str, size: int, where: dict) -> int:
    if kind == "custom options":
        start, end = rng.choice(where["options"])
        return rng.randrange(start, end)
    if kind == "offline plan":
        start, end = rng.choice(where["plan"])
        return rng.randrange(start, end)
    if kind.startswith("record path"):
        return rng.choice(where["record path"])
    if kind == "structure":
        while True:
            at = rng.randrange(size)
            if not any(start <= at < end for start, end in where["data"]):
                return at
    return rng.randrange(size)


def mutate(rng: random.Random, kind: str, model_bytes: bytes, where: dict) -> bytes:
    out = bytearray(model_bytes)
    if kind.startswith("truncation"):
        cut = bytes(out[: rng.randrange(len(out))])
        return (resealed(cut, where["record"]) or cut) if kind.endswith("(resealed)") else cut
    at = position(rng, kind, len(out), where)
    if kind == "zeroed word":
        at &= ~3
        out[at : at + 4] = bytes(4)
    else:
        out[at] ^= rng.randrange(1, 256)
    if kind == "record path + constant":
        start, end = rng.choice(where["constants"])
        out[rng.randrange(start, end)] ^= rng.randrange(1, 256)
    return bytes(out)


def outcome(model_bytes: bytes, inputs, expected) -> str:
    """named error, same output, DIFFERENT output or crash: ... of the reader and the reference (inputs
    None: a decoder, six greedy steps)."""
    try:
        if inputs is None:
            from tests.export.mcubert_models import decoder_steps

            outputs = {"top_k": decoder_steps(read_decoder(model_bytes).quantized)}
        else:
            outputs = run_reference(read_model(model_bytes), inputs).outputs
    except (ModelFormatError, ReferenceInputError):
        return "named error"
    except Exception as exc:  # noqa: BLE001 — a crash is what this campaign looks for
        return f"crash: {type(exc).__name__}: {exc}"
    same = all(np.array_equal(outputs[name], expected[name]) for name in expected)
    return "same output" if same else "DIFFERENT output"


def export(bert_tiny: bool, seq_len: int, decoder: bool = False) -> bytes:
    from tests.export.mcubert_models import small_decoder_export, small_export

    if decoder:
        return small_decoder_export()
    if not bert_tiny:
        return small_export(seq_len).tflite
    from tflm_mcubert.data.calibration import random_samples
    from tflm_mcubert.export.mcubert_export import export_mcubert
    from tflm_mcubert.model.bert import build_model
    from tflm_mcubert.model.config import preset

    model = build_model(preset("bert-tiny", num_labels=2), seed=0)
    return export_mcubert(
        model,
        None,
        seq_len=seq_len,
        arena_budget=1 << 30,
        samples=random_samples(model.config.vocab_size, seq_len, 4),
        sentences=None,
    ).tflite


class CVerifiers:
    """Both C entry points (ASan + UBSan driver) on each mutant, against the Python outcome."""

    def __init__(self, original: bytes, resealing: bool, work: Path):
        import verify_pipe

        self._pipe_module, self._work = verify_pipe, work
        self._binary = verify_pipe.build(work)
        self._expected = verify_pipe.expected_of(original)
        self._resealing = resealing  # every mutant's record agrees with it: a different output is its due
        self._pipe = verify_pipe.VerifyPipe(self._binary, work / "driver.log")

    def outcomes(self, mutated: bytes, result: str) -> list[str]:
        """C_OUTCOMES that apply, or ["crash: ..."] for a sanitizer report (the driver is restarted)."""
        try:
            status, _, expected_status = self._pipe.verify(mutated, self._expected)
        except self._pipe_module.SanitizerFinding as finding:
            self._pipe = self._pipe_module.VerifyPipe(self._binary, self._work / "driver.log")
            report = next((line for line in str(finding).splitlines() if "ERROR" in line), str(finding)[-200:])
            report = re.sub(r"==\d+==| on address .*| \(pc .*", "", report)  # one line per kind of finding
            return [f"crash: C: {report}"]
        # Resealed, a file is consistent: C's OK says its structure is all there, while the reader also
        # checks what each op's Prepare checks on the device (options, plan, shapes): only crashes count.
        wrong = result != "same output" and not self._resealing
        found = []
        if status == 0:
            found += ["C OK"] + (["C OK, DIFFERENT"] if wrong else [])
        if expected_status == 0:  # the firmware's own model: only the record's naming words may differ
            found += ["C expected OK"] + (["C expected OK, DIFFERENT"] if result != "same output" else [])
        return found

    def close(self) -> None:
        self._pipe.close()


def reference_outputs(args, model_bytes: bytes):
    """(inputs, expected outputs): the encoder's reference on random inputs, or the decoder's steps."""
    if args.decoder:
        from tests.export.mcubert_models import decoder_steps

        return None, {"top_k": decoder_steps(read_decoder(model_bytes).quantized)}
    from tests.export.mcubert_models import random_inputs

    inputs = random_inputs(np.random.default_rng(args.seed), args.seq_len, 300, valid=args.seq_len - 2)
    return inputs, run_reference(read_model(model_bytes), inputs).outputs


def print_table(table, columns, title: str, crashes) -> None:
    print(title)
    print(f"| mutation | cases | {' | '.join(columns)} |\n|---|---|{'---|' * len(columns)}")
    for kind in KINDS:
        counts = table[kind]
        cases = sum(counts[o] for o in OUTCOMES)
        print(f"| {kind} | {cases:,} | " + " | ".join(f"{counts[o]:,}" for o in columns) + " |")
    for message, count in crashes.most_common(10):
        print(f"{count:>6}  {message[:200]}")


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=6000, help="mutated models in total (split over the kinds)")
    parser.add_argument("--seq-len", type=int, default=16)
    parser.add_argument("--bert-tiny", action="store_true", help="mutate a BERT-tiny export (slower)")
    parser.add_argument("--decoder", action="store_true", help="mutate a small GPT-2 decoder export")
    parser.add_argument("--c", action="store_true", help="also both C verifiers (clang, ASan + UBSan)")
    parser.add_argument("--reseal", action="store_true", help="recompute the integrity record after mutating")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def main() -> int:
    import tempfile
    import warnings

    args = parse_args()
    warnings.simplefilter("ignore")
    model_bytes = export(args.bert_tiny, args.seq_len, args.decoder)
    inputs, expected = reference_outputs(args, model_bytes)
    where, rng = regions(model_bytes), random.Random(args.seed)
    table, crashes = collections.defaultdict(collections.Counter), collections.Counter()
    work = tempfile.TemporaryDirectory()
    c = CVerifiers(model_bytes, args.reseal, Path(work.name)) if args.c else None
    started = time.time()
    for n in range(args.count):
        kind = KINDS[n % len(KINDS)]
        mutated = mutate(rng, kind, model_bytes, where)
        if args.reseal:
            try:
                mutated = add_integrity_record(mutated)
            except Exception:  # noqa: BLE001 — the mutation broke the path to the record: stays as is
                pass
        result = outcome(mutated, inputs, expected)
        for found in [result] + (c.outcomes(mutated, result) if c else []):
            if found.startswith("crash"):
                crashes[found] += 1
                found = "C crash" if found.startswith("crash: C:") else "crash"
            table[kind][found] += 1
        if (n + 1) % 5000 == 0:
            print(f"  {n + 1:,} models, {time.time() - started:.0f} s", file=sys.stderr, flush=True)
    if c:
        c.close()
    what = f"{'decoder' if args.decoder else 'encoder'} export"
    title = f"{len(model_bytes):,}-byte {what}, {args.count:,} mutated models{' (resealed)' if args.reseal else ''}"
    print_table(table, OUTCOMES + (C_OUTCOMES if c else ()), f"{title}, {time.time() - started:.0f} s", crashes)
    different = sum(t["DIFFERENT output"] for t in table.values())
    c_different = sum(t["C OK, DIFFERENT"] + t["C expected OK, DIFFERENT"] for t in table.values())
    return 1 if crashes or c_different or (different and not args.reseal) else 0


if __name__ == "__main__":
    sys.exit(main())
