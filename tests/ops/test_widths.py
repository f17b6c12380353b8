"""Widths (ops/widths.py): the one value that carries every matrix's storage width to the op options."""

from __future__ import annotations

import dataclasses

import pytest

from tflm_mcubert.errors import UserError
from tflm_mcubert.ops.registry import op
from tflm_mcubert.ops.widths import Widths

ATTENTION, MLP = op("attention"), op("mlp")


def test_uniform_widths_give_every_op_one_width():
    for bits in (4, 8):
        widths = Widths.uniform(bits)
        assert widths.of_op("layer3.attention", ATTENTION.linear_layers) == bits
        assert widths.uniform_bits == bits and widths.traffic_bits() == bits and widths.used() == {bits}


def test_per_matrix_widths_give_an_op_one_width_per_layer_where_they_differ():
    widths = Widths.per_matrix({"layer0.attention.key": 4, "layer0.attention.value": 4, "layer1.mlp.fc1": 8})
    assert widths.matrices == (("layer0.attention.key", 4), ("layer0.attention.value", 4))  # 8 is the default
    assert widths.of_op("layer0.attention", ATTENTION.linear_layers) == (8, 4, 4, 8)
    assert widths.of_op("layer0.mlp", MLP.linear_layers) == 8
    assert widths.of_op("layer0.embedding", ()) == 8
    assert widths.uniform_bits is None and widths.traffic_bits() == 8 and widths.used() == {4, 8}
    every = {f"layer0.attention.{m}": 4 for m in ATTENTION.linear_layers}
    assert Widths.per_matrix(every).of_op("layer0.attention", ATTENTION.linear_layers) == 4


def test_report_json_gives_one_width_or_each_ops():
    Node = dataclasses.make_dataclass("Node", ["name", "op"])
    nodes = [Node("embedding", op("embedding")), Node("layer0.attention", ATTENTION), Node("layer0.mlp", MLP)]
    assert Widths.uniform(4).to_json(nodes) == 4
    mixed = Widths.per_matrix({"layer0.mlp.fc2": 4})
    assert mixed.to_json(nodes) == {"layer0.attention": 8, "layer0.mlp": (8, 4)}


@pytest.mark.parametrize("bits", [5, 0, "8", True, 4.0])
def test_a_width_that_cannot_be_stored_is_one_clear_error(bits):
    with pytest.raises(UserError, match=r"--weight-bits .*: choose 4 \(int4 weights\) or 8"):
        Widths.uniform(bits, "--weight-bits")
    with pytest.raises(UserError, match="layer0.mlp.fc1: weight bits"):
        Widths.per_matrix({"layer0.mlp.fc1": bits})
    with pytest.raises(UserError, match="weight bits"):
        Widths(default=bits)
