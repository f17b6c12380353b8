"""The reference runtime on one arena: it touches exactly the plan, and refuses bad inputs and arenas."""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "export"))
from mcubert_models import random_inputs, small_export  # noqa: E402
from tflm_mcubert.tflite.mcubert_reader import read_model  # noqa: E402
from tflm_mcubert.ops.scratch import align_up  # noqa: E402
from tflm_mcubert.ops.validation import OpSpecError  # noqa: E402
from tflm_mcubert.runtime.reference import ReferenceInputError, run_reference  # noqa: E402

POISON = 0xA5


@pytest.fixture(scope="module")
def exported():
    result = small_export(77, labels=None)  # bare encoder: the output is the hidden state
    return result, read_model(result.tflite)


def test_planned_bytes_are_exactly_what_the_reference_touches(exported):
    result, parsed = exported
    rng = np.random.default_rng(0)
    inputs = random_inputs(rng, 77, 300, 50)
    clean = run_reference(parsed, inputs)
    assert clean.touched_bytes == parsed.planned_bytes == result.plan.planned_bytes
    # Garbage everywhere inside the plan, poison after it: same output, and the poison untouched.
    arena = np.full(parsed.planned_bytes + 256, POISON, np.uint8)
    arena[: parsed.planned_bytes] = rng.integers(0, 256, parsed.planned_bytes, dtype=np.uint8)
    dirty = run_reference(parsed, inputs, arena=arena)
    assert np.array_equal(dirty.outputs["last_hidden_state"], clean.outputs["last_hidden_state"])
    assert np.all(arena[parsed.planned_bytes :] == POISON)
    # Every planned byte belongs to some tensor or scratch (16-byte aligned) at some point.
    covered = np.zeros(parsed.planned_bytes, bool)
    for t in parsed.tensors:
        if t.offset >= 0:
            covered[t.offset : t.offset + align_up(t.nbytes)] = True
    assert covered.all()


def test_the_output_matches_the_separate_array_reference(exported):
    result, parsed = exported
    inputs = random_inputs(np.random.default_rng(1), 77, 300, 77)
    run = run_reference(parsed, inputs)
    direct = result.quantized.run(inputs["input_ids"][0], inputs["token_type_ids"][0], inputs["attention_mask"][0])
    assert np.array_equal(run.outputs["last_hidden_state"].reshape(77, -1), direct["last_hidden_state"])


def test_bad_inputs_and_arenas_are_refused(exported):
    _, parsed = exported
    good = random_inputs(np.random.default_rng(2), 77, 300, 40)
    with pytest.raises(OpSpecError, match="MCUBERT_EMBEDDING: input_ids: id 300 at position 5"):
        ids = good["input_ids"].copy()
        ids[0, 5] = 300
        run_reference(parsed, {**good, "input_ids": ids})
    with pytest.raises(OpSpecError, match="token_type_ids: id 2 at position 0"):
        run_reference(parsed, {**good, "token_type_ids": np.full((1, 77), 2, np.int32)})
    with pytest.raises(ReferenceInputError, match="attention_mask: 78 positions is longer than the model's seq_len 77"):
        run_reference(parsed, {**good, "attention_mask": np.ones((1, 78), np.int8)})
    with pytest.raises(ReferenceInputError, match="input_ids: 76 positions is shorter"):
        run_reference(parsed, {**good, "input_ids": good["input_ids"][:, :76]})
    with pytest.raises(ReferenceInputError, match=r"attention_mask: values must lie in \[0, 1\]"):
        run_reference(parsed, {**good, "attention_mask": np.full((1, 77), 3, np.int8)})
    with pytest.raises(ReferenceInputError, match="input_ids: values must lie in"):
        run_reference(parsed, {**good, "input_ids": np.full((1, 77), 1 << 40, np.int64)})
    with pytest.raises(ReferenceInputError, match="smaller than the model's plan"):
        run_reference(parsed, good, arena=np.zeros(parsed.planned_bytes - 1, np.uint8))
    with pytest.raises(ReferenceInputError, match="inputs must be input_ids"):
        run_reference(parsed, {"ids": good["input_ids"]})
