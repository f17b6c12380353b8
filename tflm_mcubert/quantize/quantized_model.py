"""The int8 MCUBERT model: every op's integer parameters, the quantization of the tensors between
them, and a reference run (separate arrays; `runtime.reference` runs the same inside one arena)."""

from __future__ import annotations

import dataclasses
from typing import Callable, Mapping

import numpy as np

from tflm_mcubert.ops import contract
from tflm_mcubert.ops.attention import AttentionParams
from tflm_mcubert.ops.classifier_head import ClassifierHeadParams
from tflm_mcubert.ops.embedding import EmbeddingParams
from tflm_mcubert.ops.mlp import MLPParams
from tflm_mcubert.ops.op_def import Node
from tflm_mcubert.ops.quantization import TensorQuant
from tflm_mcubert.ops.topology import ENCODER

# The encoder topology's ops (ops/topology.py), by their role in it.
EMBEDDING, (ATTENTION, MLP), HEAD = ENCODER.first, ENCODER.layer, ENCODER.last

# trace(name, int8 array): "embedding", "layer0.attention", "layer0.mlp", ..., "head"
Trace = Callable[[str, np.ndarray], None]


@dataclasses.dataclass(frozen=True, eq=False)
class QuantizedBert:
    topology = ENCODER
    embedding: EmbeddingParams
    layers: tuple[tuple[AttentionParams, MLPParams], ...]
    head: ClassifierHeadParams | None
    hidden_quant: tuple[TensorQuant, ...]  # the hidden state after each op: embedding, attention0, mlp0, ...
    logits_quant: TensorQuant | None

    @property
    def seq_len(self) -> int:
        return self.embedding.seq_len

    @property
    def hidden(self) -> int:
        return self.embedding.hidden

    @property
    def mask_mode(self) -> int:
        return self.layers[0][0].mask_mode if self.layers else contract.MASK_MODE_KEY_MASK

    @property
    def output_quant(self) -> TensorQuant:
        return self.hidden_quant[-1]

    def with_tiles(self, tiles: Mapping[str, int]) -> "QuantizedBert":
        """The same model with other tiles (by op kind: {"attention": t, "mlp": t}): the output bytes
        do not depend on them (SPEC.md 4.2), only memory and speed do; the reference is fastest with
        one tile of s tokens."""
        return QuantizedBert.from_nodes(
            [
                dataclasses.replace(n, params=dataclasses.replace(n.params, tile=tiles[n.op.kind]).validate())
                if n.op.tiled
                else n
                for n in self.nodes()
            ]
        )

    def nodes(self) -> list[Node]:
        """The model as nodes, in execution order (the BERT topology: embedding, (attention, MLP) x L,
        optional classifier head); everything downstream (writer, planner's names, reference) walks these."""
        nodes = [
            Node(
                EMBEDDING.node_name(0), EMBEDDING, self.embedding, ("input_ids", "token_type_ids"), self.hidden_quant[0]
            )
        ]
        for index, (att, ffn) in enumerate(self.layers):
            quants = self.hidden_quant[1 + 2 * index : 3 + 2 * index]
            nodes.append(Node(ATTENTION.node_name(index), ATTENTION, att, ("hidden", "attention_mask"), quants[0]))
            nodes.append(Node(MLP.node_name(index), MLP, ffn, ("hidden",), quants[1]))
        if self.head is not None:
            nodes.append(Node(HEAD.node_name(0), HEAD, self.head, ("hidden",), self.logits_quant))
        return nodes

    @classmethod
    def from_nodes(cls, nodes: list[Node]) -> "QuantizedBert":
        """The inverse of nodes(); a ValueError names how `nodes` is not the BERT topology."""
        layers, with_head = ENCODER.shape_of([n.op for n in nodes])
        head = nodes[-1] if with_head else None
        encoder = nodes[: len(nodes) - (head is not None)]
        return cls(
            embedding=nodes[0].params,
            layers=tuple((encoder[1 + 2 * i].params, encoder[2 + 2 * i].params) for i in range(layers)),
            head=head.params if head else None,
            hidden_quant=tuple(n.output_quant for n in encoder),
            logits_quant=head.output_quant if head else None,
        )

    def graph_inputs(self) -> dict[str, tuple[np.dtype, tuple[int, ...]]]:
        """The model's inputs, in the .tflite's order: one value per position each."""
        return {i.name: (i.dtype, i.shape(self.seq_len)) for i in ENCODER.inputs}

    def variables(self) -> dict[str, tuple[np.dtype, tuple[int, ...]]]:
        """State kept between invokes: none (one invoke encodes a whole sequence)."""
        return {}

    def op_names(self) -> list[str]:
        return [node.name for node in self.nodes()]

    def run(
        self, input_ids: np.ndarray, token_type_ids: np.ndarray, mask: np.ndarray, trace: Trace | None = None
    ) -> dict[str, np.ndarray]:
        """int8 last_hidden_state [s, d] (and int8 logits [labels] for a classifier) of one sequence.

        `mask`: int8[s] key mask (mask mode 0) or int32[1] valid length (mode 1), as the model's
        attention ops take it.
        """
        values = {"input_ids": input_ids, "token_type_ids": token_type_ids, "attention_mask": mask}
        for node in self.nodes():
            out = node.run(values)
            if trace:
                trace(node.name, out.copy())
        out = {"last_hidden_state": values["hidden"]}
        if self.head is not None:
            out["logits"] = values["logits"]
        return out

    def dequantized(self, outputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        real = {"last_hidden_state": self.output_quant.dequantize(outputs["last_hidden_state"])}
        if "logits" in outputs and self.logits_quant is not None:
            real["logits"] = self.logits_quant.dequantize(outputs["logits"])
        return real
