"""The mutation campaign of issue #15's table: corrupted MCUBERT models through the reader and reference.

    python tests/fuzz/mutate_models.py --count 100000 [--reseal] [--seq-len 128]

Mutates an export (BERT-tiny-shaped layers at --seq-len; default a small model for speed: --bert-tiny
for the real one) in eight ways — random byte flips anywhere, flips in custom options, in the offline
plan, in the flatbuffer structure (bytes outside every buffer's data), truncations, zeroed 4-byte
words, and (issue 28) a flip in a byte the verifiers read to find or require the integrity record
(root offset, root table, metadata and its names, the record's header, the operator codes), alone
and together with a flip in a constant — and prints, per kind: cases, named errors (ModelFormatError),
accepted with the same output, accepted with a DIFFERENT output, and crashes (any other exception).
The targets: no crash and no different output. --reseal recomputes the integrity record after each
mutation (a crafted file whose CRCs agree), so the parser behind the record is what is measured;
different outputs are then expected (the file says so) and only crashes count.
"""

from __future__ import annotations

import argparse
import collections
import random
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as schema  # noqa: E402

from tflm_mcubert.runtime.reference import ReferenceInputError, run_reference  # noqa: E402
from tflm_mcubert.tflite.integrity import add_integrity_record  # noqa: E402
from tflm_mcubert.tflite.mcubert_reader import ModelFormatError, read_model  # noqa: E402
from tflm_mcubert.tflite.mcubert_writer import OFFLINE_PLAN_METADATA  # noqa: E402
from tests.tflite.record_path import record_path_bytes  # noqa: E402

KINDS = (
    "random flips",
    "custom options",
    "offline plan",
    "structure",
    "truncation",
    "zeroed word",
    "record path",
    "record path + constant",
)
OUTCOMES = ("named error", "same output", "DIFFERENT output", "crash")


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
    if kind == "truncation":
        return bytes(out[: rng.randrange(len(out))])
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
    try:
        outputs = run_reference(read_model(model_bytes), inputs).outputs
    except (ModelFormatError, ReferenceInputError):
        return "named error"
    except Exception as exc:  # noqa: BLE001 — a crash is what this campaign looks for
        return f"crash: {type(exc).__name__}: {exc}"
    same = all(np.array_equal(outputs[name], expected[name]) for name in expected)
    return "same output" if same else "DIFFERENT output"


def export(bert_tiny: bool, seq_len: int) -> bytes:
    from tests.export.mcubert_models import small_export

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


def main() -> int:
    import warnings

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=6000, help="mutated models in total (split over the kinds)")
    parser.add_argument("--seq-len", type=int, default=16)
    parser.add_argument("--bert-tiny", action="store_true", help="mutate a BERT-tiny export (slower)")
    parser.add_argument("--reseal", action="store_true", help="recompute the integrity record after mutating")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    model_bytes = export(args.bert_tiny, args.seq_len)
    from tests.export.mcubert_models import random_inputs

    inputs = random_inputs(np.random.default_rng(args.seed), args.seq_len, 300, valid=args.seq_len - 2)
    expected = run_reference(read_model(model_bytes), inputs).outputs
    where, rng = regions(model_bytes), random.Random(args.seed)
    table, crashes = collections.defaultdict(collections.Counter), collections.Counter()
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
        if result.startswith("crash"):
            crashes[result] += 1
            result = "crash"
        table[kind][result] += 1
        if (n + 1) % 5000 == 0:
            print(f"  {n + 1:,} models, {time.time() - started:.0f} s", file=sys.stderr, flush=True)
    print(
        f"{len(model_bytes):,}-byte export, {args.count:,} mutated models{' (resealed)' if args.reseal else ''}, "
        f"{time.time() - started:.0f} s"
    )
    print(f"| mutation | cases | {' | '.join(OUTCOMES)} |\n|---|---|{'---|' * len(OUTCOMES)}")
    for kind in KINDS:
        counts = table[kind]
        print(f"| {kind} | {sum(counts.values()):,} | " + " | ".join(f"{counts[o]:,}" for o in OUTCOMES) + " |")
    for message, count in crashes.most_common(10):
        print(f"{count:>6}  {message[:200]}")
    different = sum(t["DIFFERENT output"] for t in table.values())
    return 1 if crashes or (different and not args.reseal) else 0


if __name__ == "__main__":
    sys.exit(main())
