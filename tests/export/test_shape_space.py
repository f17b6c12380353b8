"""Student shapes priced before training: the contract's sizes against the writer's, and the pruning."""

from __future__ import annotations

import dataclasses

import pytest

from tflm_mcubert.boards import get_board
from tflm_mcubert.export.flash_budget import CONTAINER_SLACK, FlashTarget, estimate_shape, measure_shape
from tflm_mcubert.export.flash_budget import whole_model_budget
from tflm_mcubert.export.shape_space import Shape, candidates, price, shape_space
from tflm_mcubert.model.config import BertConfig, preset
from tflm_mcubert.ops import contract
from tflm_mcubert.ops.constant_sizes import tensor_bytes
from tflm_mcubert.ops.registry import op

# Shapes the container model's probes (hidden 32/64, 1-2 layers) do not include: wider, deeper, more labels.
CONFIGS = [
    BertConfig(
        vocab_size=500, hidden_size=160, num_hidden_layers=5, num_attention_heads=5, intermediate_size=320, num_labels=8
    ),
    BertConfig(
        vocab_size=500,
        hidden_size=320,
        num_hidden_layers=3,
        num_attention_heads=10,
        intermediate_size=1280,
        num_labels=2,
        type_vocab_size=1,
    ),
]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"L{c.num_hidden_layers}-H{c.hidden_size}")
def test_the_contract_prices_every_op_as_the_writer_writes_it(config):
    measured, estimated = measure_shape(config), estimate_shape(config)
    assert estimated.encoder_ops == measured.encoder_ops
    for bits in (8, 4):
        assert {n: measured.op_bytes[bits][n] for n in measured.encoder_ops} == estimated.op_bytes[bits]
    assert estimated.layer_savings == {n: measured.layer_savings[n] for n in measured.encoder_ops}
    assert estimated.head_bytes == measured.head_bytes
    assert estimated.embedding_fixed_bytes == measured.embedding_fixed_bytes
    assert abs(estimated.container_bytes - measured.container_bytes) <= CONTAINER_SLACK


def test_a_shape_symbol_the_caller_did_not_give_is_named():
    with pytest.raises(ValueError, match="MCUBERT_MLP.fc1_weights .*no size for ffn"):
        tensor_bytes(op(contract.MLP), "fc1_weights", {"d": 64})


def test_bert_tiny_is_priced_as_the_whole_model_budget_measures_it():
    board = get_board("nucleo-f746zg")
    tiny = preset("bert-tiny")
    shape = Shape(tiny.num_hidden_layers, tiny.hidden_size, tiny.num_attention_heads, tiny.intermediate_size, 8)
    priced = price(shape, board, 128, vocab_size=tiny.vocab_size, labels=2, vocab_bytes=1000)
    config = dataclasses.replace(tiny, num_labels=2)
    measured = whole_model_budget(config, FlashTarget.of_board(board), seq_len=128, vocab_bytes=1000)
    assert abs(priced.embedding_bytes - measured.embedding_bytes) <= CONTAINER_SLACK
    assert priced.fits and priced.arena_fits and priced.latency_ms > 0


def test_the_space_is_pruned_to_what_fits_and_ordered_by_latency():
    board = get_board("nucleo-f746zg")
    shapes = [s for s in candidates() if s.hidden in (128, 320) and s.layers in (2, 6)]
    priced = shape_space(board, 128, vocab_size=30522, labels=2, vocab_bytes=0, shapes=shapes)
    fits = [p for p in priced if p.fits]
    assert fits and len(fits) < len(priced)  # six int8 layers of width 320 do not fit a 1 MB board
    assert priced[: len(fits)] == fits
    assert [p.latency_ms for p in fits] == sorted(p.latency_ms for p in fits)


def test_a_latency_cap_admits_only_faster_shapes():
    board = get_board("nucleo-f746zg")
    tiny = Shape(2, 128, 2, 512, 8)
    cap = price(tiny, board, 128, vocab_size=30522, labels=2, vocab_bytes=0).latency_ms / 2
    shapes = [s for s in candidates() if s.layers <= 2 and s.hidden <= 128]
    priced = shape_space(board, 128, vocab_size=30522, labels=2, vocab_bytes=0, max_latency_ms=cap, shapes=shapes)
    admitted = [p for p in priced if p.fits and p.latency_ms <= cap]
    assert admitted, "half of BERT-tiny's estimate admits a smaller shape"
    assert priced[: len(admitted)] == admitted


def test_a_shape_priced_to_fit_leaves_the_board_search_the_same_word_tables(minilm_tokenizer, tmp_path):
    """`distill --preset auto` prices a shape with the tokenizer blob `search --board` will count: four
    clusters' piece lists, not the vocabulary's one list (9,680 B less, which chose for the F746ZG a shape
    whose search then had no room for the smallest embedding)."""
    import json

    from tflm_mcubert.cli.train import teacher_vocabulary
    from tflm_mcubert.export.flash_budget import SearchFlashBudget

    teacher = tmp_path / "teacher"
    minilm_tokenizer.save_pretrained(str(teacher))
    tiny = preset("bert-tiny")
    config = {"model_type": "bert", "architectures": ["BertForSequenceClassification"], "num_labels": 2}
    config |= {"vocab_size": len(minilm_tokenizer), "hidden_size": tiny.hidden_size}
    (teacher / "config.json").write_text(json.dumps(config))
    vocab_size, labels, vocab_bytes = teacher_vocabulary(str(teacher), 128)

    board = get_board("nucleo-f746zg")
    shapes = [s for s in candidates() if s.hidden == 128 and s.layers >= 4]
    priced = shape_space(board, 128, vocab_size=vocab_size, labels=labels, vocab_bytes=vocab_bytes, shapes=shapes)
    priced = min((p for p in priced if p.fits), key=lambda p: p.embedding_bytes)  # the tightest that fits
    search = SearchFlashBudget(FlashTarget.of_board(board), 128, weight_bits=priced.shape.weight_bits)
    searched = search.split(priced.shape.config(vocab_size, labels), minilm_tokenizer, 8, 4)
    assert abs(priced.embedding_bytes - searched.embedding_bytes) <= CONTAINER_SLACK
