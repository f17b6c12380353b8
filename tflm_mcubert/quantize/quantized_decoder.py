"""The int8 decoder: its ops' parameters calibrated from a float `DecoderModel`, as nodes, and a
reference that decodes one token per step over each layer's int8 KV cache, as the firmware will.

    decoder = calibrate_decoder(model, sequences)         # PTQ on calibration token sequences
    top = decoder.step(token, position, caches)           # int32[2, k]: the k best ids and scores
    logits = decoder.logits(token, position, caches)      # float64[vocab] (offline: perplexity)
    ids = decoder.greedy(prompt, new_tokens)              # each next id top[0, 0]: the best, or a drawn one
    drawing = decoder.sampling(SampleParams.of(...))      # the same model with MCUBERT_SAMPLE after the head

Nodes: decoder_embedding, then per layer causal_attention (reading its cache) and decoder_mlp, then lm_head,
then, when it samples, sample (reading its generator state).
The op sequence, graph inputs and caches are the DECODER topology's (ops/topology.py).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tflm_mcubert.ops.causal_attention import (
    CausalAttentionFloat,
    CausalAttentionParams,
    stream_channels,
    stream_quant,
    stream_residual,
)
from tflm_mcubert.ops.decoder_embedding import DecoderEmbeddingParams
from tflm_mcubert.ops.decoder_mlp import DecoderMlpFloat, DecoderMlpParams
from tflm_mcubert.ops.layernorm import MAX_RESIDUAL_SHIFT, Z_HEADROOM_TARGET, LayerNormParams, float_layer_norm
from tflm_mcubert.ops.lm_head import LmHeadParams, cluster_scores, normalize
from tflm_mcubert.ops.op_def import Node
from tflm_mcubert.ops.quantization import TensorQuant
from tflm_mcubert.ops.sample import SampleParams
from tflm_mcubert.ops.topology import DECODER
from tflm_mcubert.ops.widths import Widths

INT8_STEPS = 255  # steps of an int8 range
# The decoder topology's ops (ops/topology.py), by their role in it.
EMBEDDING, (ATTENTION, MLP), (HEAD, SAMPLE) = DECODER.first, DECODER.layer, DECODER.ending


@dataclasses.dataclass(frozen=True, eq=False)
class QuantizedDecoder:
    topology = DECODER
    embedding: DecoderEmbeddingParams
    layers: tuple[tuple[CausalAttentionParams, DecoderMlpParams], ...]
    head: LmHeadParams
    logit_scale: float  # the real logit of one score unit
    z_scale: float  # s_z: the residual stream's step (every channel's scale is s_z * 2^R)
    sample: SampleParams | None = None  # the next token drawn from the head's candidates (None: the best one)

    @property
    def context(self) -> int:
        return self.embedding.context

    @property
    def seq_len(self) -> int:  # the positions the arena plan is for
        return self.context

    @property
    def hidden(self) -> int:
        return self.embedding.hidden

    def nodes(self) -> list[Node]:
        """The ops in run order; each writer of the residual stream carries its (zp, s_z * 2^R) per channel
        and the head its output's: row 1 (scores) times the scale is the logit."""
        stream = lambda params: stream_quant(params.output_residual, self.z_scale)  # noqa: E731
        nodes = [Node("embedding", EMBEDDING, self.embedding, ("input_id", "position"), stream(self.embedding))]
        for i, (attention, mlp) in enumerate(self.layers):
            inputs = tuple(DECODER.value_of_input(name, i) for name in ATTENTION.runtime_inputs)
            nodes.append(Node(ATTENTION.node_name(i), ATTENTION, attention, inputs, stream(attention)))
            nodes.append(Node(MLP.node_name(i), MLP, mlp, ("hidden",), stream(mlp)))
        scores = TensorQuant(self.logit_scale, 0)
        nodes.append(Node(HEAD.node_name(0), HEAD, self.head, ("hidden",), scores))
        if self.sample is not None:
            inputs = tuple(DECODER.value_of_input(name, 0) for name in SAMPLE.runtime_inputs)
            nodes.append(Node(SAMPLE.node_name(0), SAMPLE, self.sample, inputs, scores))
        return nodes

    def sampling(self, sample: SampleParams | None) -> "QuantizedDecoder":
        """This model drawing its next token with `sample` (None: the best one, greedy)."""
        if sample is not None and sample.top_k != self.head.top_k:
            raise ValueError(f"sampling reads the head's {self.head.top_k} candidates, not {sample.top_k}")
        return dataclasses.replace(self, sample=sample)

    @classmethod
    def from_nodes(cls, nodes: list[Node]) -> "QuantizedDecoder":
        """The inverse of nodes(); a ValueError names how `nodes` is not the decoder topology."""
        layers, ends = DECODER.shape_of([n.op for n in nodes])
        embedding, head = nodes[0], nodes[1 + 2 * layers]
        channels = embedding.params.output_residual
        z_scales = np.asarray(embedding.output_quant.scale, np.float64) / np.exp2(channels[:, 1])
        if head.output_quant is None or embedding.output_quant is None or not np.allclose(z_scales, z_scales[0]):
            raise ValueError("the residual stream's scales are not s_z * 2^R of one s_z")
        return cls(
            embedding=embedding.params,
            layers=tuple((nodes[1 + 2 * i].params, nodes[2 + 2 * i].params) for i in range(layers)),
            head=head.params,
            logit_scale=float(np.asarray(head.output_quant.scale).reshape(-1)[0]),
            z_scale=float(z_scales[0]),
            sample=nodes[-1].params if ends > 1 else None,
        )

    def graph_inputs(self) -> dict[str, tuple[np.dtype, tuple[int, ...]]]:
        """The model's inputs per invoke, in the .tflite's order: the token and its position."""
        return {i.name: (i.dtype, i.shape(self.context)) for i in DECODER.inputs}

    def variables(self) -> dict[str, tuple[np.dtype, tuple[int, ...]]]:
        """State kept between invokes (TFLM variable tensors): each layer's int8 KV cache [2, n, d], and the
        sampling generator's int32[1] state."""
        return {
            value: (state.dtype, state.shape(node.params))
            for node in self.nodes()
            for value in node.inputs
            if (state := DECODER.state_of(value)) is not None
        }

    def new_caches(self) -> dict[str, np.ndarray]:
        """Each layer's KV cache (and the generator's state), zeroed (ResetVariableTensors)."""
        return {name: np.zeros(shape, dtype) for name, (dtype, shape) in self.variables().items()}

    def _blocks(self, token: int, position: int, caches: dict) -> np.ndarray:
        values = {"input_id": np.array([token], np.int32), "position": np.array([position], np.int32), **caches}
        for node in self.nodes()[: 1 + 2 * len(self.layers)]:
            node.run(values)
        return values["hidden"]

    def step(self, token: int, position: int, caches: dict) -> np.ndarray:
        """int32[2, k] for the token at `position` (top[0, 0] the next id), appending its keys and values to
        `caches` (and advancing the generator's state there, when it samples)."""
        values = {"hidden": self._blocks(token, position, caches), **caches}
        for node in self.nodes()[1 + 2 * len(self.layers) :]:
            node.run(values)
        return values[HEAD.output]

    def logits(self, token: int, position: int, caches: dict) -> np.ndarray:
        """float64[vocab]: every id's logit as the head scores it (the kernel keeps only the top k)."""
        h = normalize(self.head, self._blocks(token, position, caches))
        return cluster_scores(self.head, h).astype(np.float64) * self.logit_scale

    def greedy(self, prompt: list[int], new_tokens: int) -> list[int]:
        """The prompt's continuation as the firmware computes it: the prompt one token per step, then each next
        id (top[0, 0]: the best one, or the drawn one when the model samples) fed back (the last new id needs
        no step of its own: a prompt and its continuation span up to context + 1 ids)."""
        if not prompt or new_tokens < 0 or len(prompt) + new_tokens > self.context + 1 or len(prompt) > self.context:
            longest = min(self.context, self.context + 1 - new_tokens)
            raise ValueError(f"a prompt of 1..{longest} tokens is needed for {new_tokens} new ones")
        caches, out = self.new_caches(), []
        for position, token in enumerate(prompt):
            top = self.step(token, position, caches)
        for position in range(len(prompt), len(prompt) + new_tokens):
            out.append(int(top[0, 0]))
            if len(out) < new_tokens:
                top = self.step(out[-1], position, caches)
        return out


def _weights(dense) -> tuple[np.ndarray, np.ndarray]:
    """(W [out, in], bias) of a Keras Dense layer (no bias: zeros)."""
    kernel = np.asarray(dense.kernel.numpy(), np.float64)
    bias = dense.bias.numpy() if dense.use_bias else np.zeros(kernel.shape[1])
    return kernel.T, np.asarray(bias, np.float64)


def float_blocks(model) -> list[tuple[CausalAttentionFloat, DecoderMlpFloat]]:
    """The float64 blocks of a DecoderModel, as the integer ops' offline references read them."""
    config, blocks = model.config, []
    for i, block in enumerate(model.blocks):
        (wq, bq), (wk, bk), (wv, bv), (wo, bo) = (
            _weights(d) for d in (block.query, block.key, block.value, block.output_dense)
        )
        (w1, b1), (w2, b2) = _weights(block.fc), _weights(block.proj)
        norm = [
            np.asarray(w.numpy(), np.float64)
            for w in (block.ln_1.gamma, block.ln_1.beta, block.ln_2.gamma, block.ln_2.beta)
        ]
        attention = CausalAttentionFloat(
            wq, bq, wk, bk, wv, bv, wo, bo, norm[0], norm[1], config.num_heads, config.layer_norm_eps,
            scale=config.attention_scales[i], window=config.windows[i] or 0,
        )  # fmt: skip
        mlp = DecoderMlpFloat(w1, b1, w2, b2, norm[2], norm[3], config.activation, config.layer_norm_eps)
        blocks.append((attention, mlp))
    return blocks


def calibrate_decoder(
    model, sequences, *, clusters=None, top_k: int = 1, widths: Widths = Widths(), embedding_bits: int = 8
) -> QuantizedDecoder:
    """Post-training quantization of `model` (a DecoderModel) on calibration token sequences (a list of id
    sequences, each at most max_positions long and decoded from position 0: several short texts cover the
    first positions, where a token attends to few others, better than one long one). `clusters`: the word
    table as ((U_0, None), (U_i, V_i^T), ...) in the model's id order (default: the model's dense table,
    one cluster); the LM head is tied to it, stored at `embedding_bits` (8, or 4: SPEC.md 4.1.1). `widths`: the
    blocks' matrices, int8 or int4 (SPEC.md 3.1.1)."""
    config = model.config
    sequences = [np.asarray(s, np.int64) for s in sequences]
    if not sequences or any(not 1 <= s.size <= config.max_positions for s in sequences):
        raise ValueError(f"calibrate_decoder: sequences of 1..{config.max_positions} token ids are needed")
    table = np.asarray(model.token_embeddings.numpy(), np.float64)
    position = np.asarray(model.position_embeddings.numpy(), np.float64)
    clusters = clusters if clusters is not None else ((table, None),)
    blocks = float_blocks(model)
    # the residual stream of every sequence after each op, in float
    streams = [[table[s] + position[: s.size] for s in sequences]]
    for attention_float, mlp_float in blocks:
        streams.append([attention_float.forward(x) for x in streams[-1]])
        streams.append([mlp_float.forward(x) for x in streams[-1]])
    rows = [np.concatenate(stage) for stage in streams]
    z_scale = decoder_step(rows)
    embedding = DecoderEmbeddingParams.quantize(
        clusters, position, z_scale, stream_channels(rows[0].min(0), rows[0].max(0), z_scale), embedding_bits
    )
    stream = stream_quant(embedding.output_residual, z_scale)
    layers = []
    for i, (attention_float, mlp_float) in enumerate(blocks):
        attention = attention_float.quantize(
            streams[2 * i],
            stream,
            context=config.max_positions,
            z_scale=z_scale,
            weight_bits=widths.of_op(ATTENTION.node_name(i), ATTENTION.linear_layers),
        )
        stream = stream_quant(attention.output_residual, z_scale)
        mlp_bits = widths.of_op(MLP.node_name(i), MLP.linear_layers)
        mlp = mlp_float.quantize(rows[2 * i + 1], stream, z_scale=z_scale, weight_bits=mlp_bits)
        stream = stream_quant(mlp.output_residual, z_scale)
        layers.append((attention, mlp))
    x = rows[-1]
    residual, _ = stream_residual(stream, float(np.abs(x).max()), config.hidden_size, z_scale)
    gamma, beta = (np.asarray(w.numpy(), np.float64) for w in (model.ln_f.gamma, model.ln_f.beta))
    normed = TensorQuant.observe(float_layer_norm(x, gamma, beta, config.layer_norm_eps), symmetric=False)
    final = LayerNormParams.from_float(gamma, beta, config.layer_norm_eps, z_scale, normed)
    head, unit = LmHeadParams.tie(embedding, normed, top_k, layer_norm=final, residual=residual)
    return QuantizedDecoder(embedding, tuple(layers), head, unit * z_scale, z_scale)


def decoder_step(streams: list[np.ndarray]) -> float:
    """The decoder's one s_z: the int16 sums hold the largest stream value with the encoder's headroom
    (layernorm.Z_HEADROOM_TARGET), and 2^7 steps of int8 cover the widest channel of any stream."""
    peak = max(float(np.abs(x).max()) for x in streams)
    widest = max(float((np.maximum(x.max(axis=0), 0) - np.minimum(x.min(axis=0), 0)).max()) for x in streams)
    return max(peak / Z_HEADROOM_TARGET, widest / (INT8_STEPS << MAX_RESIDUAL_SHIFT), 1e-12)
