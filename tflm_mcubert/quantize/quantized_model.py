"""The int8 MCUBERT model: every op's integer parameters, the quantization of the tensors between
them, and a reference run (separate arrays; `runtime.reference` runs the same inside one arena)."""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from tflm_mcubert.ops import attention, classifier_head, contract, embedding, mlp
from tflm_mcubert.ops.attention import AttentionParams
from tflm_mcubert.ops.classifier_head import ClassifierHeadParams
from tflm_mcubert.ops.embedding import EmbeddingParams
from tflm_mcubert.ops.mlp import MLPParams
from tflm_mcubert.ops.quantization import TensorQuant

# trace(name, int8 array): "embedding", "layer0.attention", "layer0.mlp", ..., "head"
Trace = Callable[[str, np.ndarray], None]


@dataclasses.dataclass(frozen=True, eq=False)
class QuantizedBert:
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

    def with_tiles(self, attention_tile: int, mlp_tile: int) -> "QuantizedBert":
        """The same model with other tiles: the output bytes do not depend on them (SPEC.md 4.2),
        only memory and speed do; the reference is fastest with one tile of s tokens."""
        layers = tuple(
            (dataclasses.replace(a, tile=attention_tile).validate(), dataclasses.replace(m, tile=mlp_tile).validate())
            for a, m in self.layers
        )
        return dataclasses.replace(self, layers=layers)

    def op_names(self) -> list[str]:
        names = ["embedding"]
        for index in range(len(self.layers)):
            names += [f"layer{index}.attention", f"layer{index}.mlp"]
        return names + (["head"] if self.head is not None else [])

    def run(
        self, input_ids: np.ndarray, token_type_ids: np.ndarray, mask: np.ndarray, trace: Trace | None = None
    ) -> dict[str, np.ndarray]:
        """int8 last_hidden_state [s, d] (and int8 logits [labels] for a classifier) of one sequence.

        `mask`: int8[s] key mask (mask mode 0) or int32[1] valid length (mode 1), as the model's
        attention ops take it.
        """
        hidden = np.zeros((self.seq_len, self.hidden), np.int8)
        embedding.run(self.embedding, input_ids, token_type_ids, hidden)
        if trace:
            trace("embedding", hidden.copy())
        for index, (att, ffn) in enumerate(self.layers):
            attention.run(att, hidden, mask)
            if trace:
                trace(f"layer{index}.attention", hidden.copy())
            mlp.run(ffn, hidden)
            if trace:
                trace(f"layer{index}.mlp", hidden.copy())
        out = {"last_hidden_state": hidden}
        if self.head is not None:
            logits = np.zeros(self.head.labels, np.int8)
            classifier_head.run(self.head, hidden, logits)
            if trace:
                trace("head", logits.copy())
            out["logits"] = logits
        return out

    def dequantized(self, outputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        real = {"last_hidden_state": self.output_quant.dequantize(outputs["last_hidden_state"])}
        if "logits" in outputs and self.logits_quant is not None:
            real["logits"] = self.logits_quant.dequantize(outputs["logits"])
        return real
