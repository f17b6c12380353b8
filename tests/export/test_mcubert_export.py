"""`export --schedule mcubert` below the CLI: arena targets, round trip, bytes, layout, bad models."""

import flatbuffers
import numpy as np
from flatbuffers import flexbuffers
import pytest
from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as schema

from mcubert_models import KB, random_inputs, small_export
from tflm_mcubert.data.calibration import random_samples
from tflm_mcubert.export.mcubert_export import export_mcubert, largest_fitting_seq_len
from tflm_mcubert.tflite.integrity import INTEGRITY_METADATA, add_integrity_record
from tflm_mcubert.tflite.mcubert_reader import ModelFormatError, read_model
from tflm_mcubert.tflite.mcubert_writer import (
    BUFFER_ALIGNMENT,
    OFFLINE_PLAN_METADATA,
    ONLINE_PLANNED,
    model_to_tflite,
)
from tflm_mcubert.model.bert import build_model
from tflm_mcubert.model.config import preset
from tflm_mcubert.ops.options import encode_options
from tflm_mcubert.ops.registry import SPEC_HASH
from tflm_mcubert.runtime.reference import run_reference


@pytest.mark.parametrize(
    "name,seq_len,target",
    [
        ("bert-tiny", 128, 48 * KB),
        ("bert-tiny", 512, 176 * KB),
        ("bert-mini", 512, 304 * KB),
    ],
)
def test_arena_bytes_meet_the_targets(name, seq_len, target):
    config = preset(name, num_labels=2)
    model = build_model(config, seed=0)
    result = export_mcubert(
        model,
        None,
        seq_len=seq_len,
        arena_budget=target,
        samples=random_samples(config.vocab_size, seq_len, 2),
        sentences=None,
    )
    assert result.choice.fits
    assert result.arena.arena_bytes <= target
    assert result.arena.arena_bytes == result.plan.planned_bytes + result.arena.overhead_bytes
    assert 1000 < result.arena.overhead_bytes < 4 * KB  # TFLM's tail for ~50-90 tensors, 6-10 ops
    assert result.compression["default"] and result.compression["cutoffs"] == [1000, 4000, 10000]


@pytest.mark.parametrize("seq_len", [77, 300])
def test_round_trip_equals_the_in_memory_model_byte_for_byte(seq_len):
    result = small_export(seq_len)
    parsed = read_model(result.tflite)
    rng = np.random.default_rng(seq_len)
    q = result.quantized
    for valid in (seq_len, seq_len // 3, 1):
        inputs = random_inputs(rng, seq_len, 300, valid)
        seen = {}
        run = run_reference(parsed, inputs, trace=lambda name, v: seen.__setitem__(name, v))
        want = {}
        direct = q.run(
            inputs["input_ids"][0],
            inputs["token_type_ids"][0],
            inputs["attention_mask"][0],
            trace=lambda name, v: want.__setitem__(name, v),
        )
        assert list(seen) == list(want)
        for name in want:
            assert np.array_equal(seen[name].reshape(-1), want[name].reshape(-1)), name
        assert np.array_equal(run.outputs["logits"][0], direct["logits"])


def test_all_keys_masked_and_full_length_extreme_inputs_run_identically():
    result = small_export(77)
    parsed, q = read_model(result.tflite), result.quantized
    s = 77
    cases = [
        {
            "input_ids": np.arange(s, dtype=np.int32)[None] % 300,
            "attention_mask": np.zeros((1, s), np.int8),
            "token_type_ids": np.zeros((1, s), np.int32),
        },
        {
            "input_ids": np.where(np.arange(s) % 2, 299, 0).astype(np.int32)[None],  # first and last ids
            "attention_mask": np.ones((1, s), np.int8),
            "token_type_ids": np.ones((1, s), np.int32),
        },
    ]
    for inputs in cases:
        run = run_reference(parsed, inputs)
        direct = q.run(inputs["input_ids"][0], inputs["token_type_ids"][0], inputs["attention_mask"][0])
        assert np.array_equal(run.outputs["logits"][0], direct["logits"])


def test_export_is_deterministic_and_tiles_do_not_change_the_numbers():
    first, again = small_export(77), small_export(77, budget=1 << 29)
    assert first.tflite == again.tflite
    assert model_to_tflite(first.quantized, first.plan) == first.tflite
    tight = small_export(77, budget=first.plan.planned_bytes // 2 + 4 * KB)
    assert tight.plan.tiles != first.plan.tiles
    inputs = random_inputs(np.random.default_rng(3), 77, 300, 60)
    a = run_reference(read_model(first.tflite), inputs).outputs
    b = run_reference(read_model(tight.tflite), inputs).outputs
    assert np.array_equal(a["logits"], b["logits"])


def _buffer_data_offsets(model_bytes: bytes) -> list[tuple[int, int]]:
    model = schema.Model.GetRootAs(model_bytes, 0)
    out = []
    for i in range(model.BuffersLength()):
        buffer = model.Buffers(i)
        if buffer.DataLength():
            out.append((buffer._tab.Vector(buffer._tab.Offset(4)), buffer.DataLength()))
    return out


def test_buffers_are_aligned_and_the_offline_plan_covers_every_tensor():
    result = small_export(77)
    offsets = _buffer_data_offsets(result.tflite)
    assert offsets and all(start % BUFFER_ALIGNMENT == 0 for start, _ in offsets)
    model = schema.ModelT.InitFromPackedBuf(bytearray(result.tflite), 0)
    (meta,) = [m for m in model.metadata if m.name.decode() == OFFLINE_PLAN_METADATA]
    words = np.asarray(model.buffers[meta.buffer].data, np.uint8).view("<i4")
    tensors = model.subgraphs[0].tensors
    assert list(words[:3]) == [1, 1, len(tensors)]
    for tensor, offset in zip(tensors, words[3:]):
        constant = tensor.buffer > 0 and model.buffers[tensor.buffer].data is not None
        assert (offset == ONLINE_PLANNED) == constant, tensor.name
        assert constant or offset % 16 == 0
    hidden = {int(o) for t, o in zip(tensors, words[3:]) if t.name.decode().endswith("/hidden")}
    assert len(hidden) == 1  # in place: one offset for every hidden state
    parsed = read_model(result.tflite)
    assert parsed.planned_bytes == result.plan.planned_bytes
    assert [n.name for n in parsed.nodes] == [
        "embedding",
        "layer0.attention",
        "layer0.mlp",
        "layer1.attention",
        "layer1.mlp",
        "head",
    ]


def test_position_embeddings_are_stored_only_up_to_seq_len():
    result = small_export(77)
    assert result.quantized.embedding.position_table.shape == (77, 48)
    parsed = read_model(result.tflite)
    names = {t.name: t for t in parsed.tensors}
    assert names["embedding/position_table"].shape == (77, 48)


def test_largest_fitting_seq_len_is_the_boundary():
    config = preset("bert-tiny", num_labels=2)
    budget = 40 * KB
    longest = largest_fitting_seq_len(config, 512, budget, 2)
    assert longest is not None and 64 < longest < 128
    assert largest_fitting_seq_len(config, longest + 1, budget, 2) == longest
    from tflm_mcubert.export.mcubert_export import choose_plan

    assert choose_plan(config, longest, budget, 2).fits
    assert not choose_plan(config, longest + 1, budget, 2).fits


# -- corrupt and mismatched models -------------------------------------------------------------


def _edit(model_bytes: bytes, edit) -> bytes:
    model = schema.ModelT.InitFromPackedBuf(bytearray(model_bytes), 0)
    edit(model)
    builder = flatbuffers.Builder(1 << 20)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    # Sealed again: these stand for intact files from a mismatched or buggy writer, not corrupted ones.
    sealed = any(m.name.decode() == INTEGRITY_METADATA for m in model.metadata or [])
    return add_integrity_record(bytes(builder.Output())) if sealed else bytes(builder.Output())


def _set_options(op_index: int, raw: bytes):
    def edit(model):
        model.subgraphs[0].operators[op_index].customOptions = np.frombuffer(raw, np.uint8)

    return edit


def _options_of(result, op_index: int) -> bytes:
    model = schema.ModelT.InitFromPackedBuf(bytearray(result.tflite), 0)
    return np.asarray(model.subgraphs[0].operators[op_index].customOptions, np.uint8).tobytes()


@pytest.mark.parametrize(
    "case,pattern",
    [
        ("truncated", r"layer0\.attention: MCUBERT_ATTENTION: options: "),
        ("version", r"layer0\.attention: MCUBERT_ATTENTION: spec_version: unsupported version 7"),
        ("hash", r"layer0\.attention: MCUBERT_ATTENTION: spec_hash: 0x00000bad does not match"),
        ("unknown", r"layer0\.attention: MCUBERT_ATTENTION: colour: unknown option"),
        ("range", r"layer0\.attention: MCUBERT_ATTENTION: tile: tile 99 exceeds seq_len 77"),
    ],
)
def test_corrupt_or_mismatched_options_are_rejected_naming_op_and_field(case, pattern):
    result = small_export(77)
    options = result.quantized.layers[0][0].options()
    header = {"spec_version": 1, "spec_hash": SPEC_HASH}
    raw = {
        "truncated": lambda: _options_of(result, 1)[:-5],
        "version": lambda: flexbuffers.Dumps({**header, "spec_version": 7, **options}),
        "hash": lambda: flexbuffers.Dumps({**header, "spec_hash": 0xBAD, **options}),
        "unknown": lambda: flexbuffers.Dumps({**header, "colour": 3, **options}),
        "range": lambda: flexbuffers.Dumps({**header, **options, "tile": 99}),
    }[case]()
    with pytest.raises(ModelFormatError, match=pattern):
        read_model(_edit(result.tflite, _set_options(1, bytes(raw))))


def test_a_wrong_constant_tensor_is_rejected_naming_op_and_field():
    result = small_export(77)

    def shrink_exp_lut(model):
        sub = model.subgraphs[0]
        (index,) = [i for i, t in enumerate(sub.tensors) if t.name.decode() == "layer1.attention/exp_lut"]
        tensor = sub.tensors[index]
        tensor.shape = [255]
        model.buffers[tensor.buffer].data = np.asarray(model.buffers[tensor.buffer].data)[:510]

    with pytest.raises(ModelFormatError, match=r"layer1\.attention: MCUBERT_ATTENTION: exp_lut: expected shape"):
        read_model(_edit(result.tflite, shrink_exp_lut))


def test_an_overlapping_or_missing_plan_is_rejected():
    result = small_export(77)

    def overlap(model):
        (meta,) = [m for m in model.metadata if m.name.decode() == OFFLINE_PLAN_METADATA]
        words = np.asarray(model.buffers[meta.buffer].data, np.uint8).view("<i4").copy()
        names = [t.name.decode() for t in model.subgraphs[0].tensors]
        words[3 + names.index("layer0.attention/scratch")] = words[3 + names.index("attention_mask")]
        model.buffers[meta.buffer].data = words.view(np.uint8)

    with pytest.raises(ModelFormatError, match="OfflineMemoryAllocation: .* overlap"):
        read_model(_edit(result.tflite, overlap))

    def drop(model):  # the plan only: a model with MCUBERT ops must keep its integrity record
        model.metadata = [m for m in model.metadata if m.name.decode() != OFFLINE_PLAN_METADATA]

    with pytest.raises(ModelFormatError, match="OfflineMemoryAllocation: missing"):
        read_model(_edit(result.tflite, drop))
    with pytest.raises(ModelFormatError, match="not a .tflite"):
        read_model(result.tflite[:4] + b"XXXX" + result.tflite[8:])


def test_options_encoding_is_the_spec_codec():
    result = small_export(77)
    att = result.quantized.layers[0][0]
    assert _options_of(result, 1) == encode_options("MCUBERT_ATTENTION", att.options())


def test_a_compressed_checkpoint_is_exported_as_is_with_its_own_vocabulary():
    from mcubert_models import small_model
    from tflm_mcubert.compress.baselines import adaptive_embedding

    model = small_model(labels=2)
    frequency = np.random.default_rng(0).random(300)
    lookup = adaptive_embedding(
        model.embeddings.word_embeddings.numpy(), frequency, cutoffs=(50, 100, 200), ranks=(8, 4, 2)
    )
    compressed = model.with_word_lookup(lookup)
    samples = random_samples(300, 40, 2)
    result = export_mcubert(compressed, None, seq_len=40, arena_budget=1 << 30, samples=samples, sentences=None)
    # Its tokenizer already emits the permuted ids: nothing to remap, no tokenizer to write.
    assert result.compression is None and result.permutation is None
    clusters = result.quantized.embedding.clusters
    assert clusters[:, 0].tolist() == [50, 100, 200, 300] and clusters[:, 1].tolist() == [48, 8, 4, 2]
    assert result.fidelity["mean_pooled_cosine_min"] > 0.99
