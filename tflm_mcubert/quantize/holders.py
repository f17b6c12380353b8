"""Each topology's parameter holder (ops/topology.py): what a reader builds from a model's nodes, so that
the reader names no model class. A new topology adds its holder here."""

from __future__ import annotations

from tflm_mcubert.ops.op_def import Node
from tflm_mcubert.ops.topology import DECODER, ENCODER, Topology
from tflm_mcubert.quantize.quantized_decoder import QuantizedDecoder
from tflm_mcubert.quantize.quantized_model import QuantizedBert

HOLDERS = {ENCODER.name: QuantizedBert, DECODER.name: QuantizedDecoder}


def model_from_nodes(topology: Topology, nodes: list[Node]):
    """The topology's int8 model of `nodes` (a ValueError names how they are not that topology)."""
    return HOLDERS[topology.name].from_nodes(nodes)
