"""A causal decoder LM in Keras (GPT-2 / GPT-Neo, `DecoderConfig`), the float model the decoder export quantizes.

    logits = model(input_ids)                              # [batch, s, vocab]: every position at once
    logits, cache = model.step(token_ids, cache)           # one new token per sequence, over a KV cache

Pre-LayerNorm blocks: h += attention(LN1(h)); h += MLP(LN2(h)); then LN_f and the LM head, tied to the
token embedding (logits = h · Eᵀ): the vocabulary matrix is used twice, which is why compressing it pays
twice on a decoder. `step` keeps each layer's keys and values of the positions seen so far (`KVCache`) and
attends over them: the same numbers as recomputing the whole prefix, one token's work per step. Layers
are this package's own (bert.py's LayerNorm and GELU), so the decoder converts as the encoder does.
"""

from __future__ import annotations

import dataclasses

import keras
import numpy as np
import tensorflow as tf

from tflm_mcubert.errors import UserError
from tflm_mcubert.model.bert import LayerNorm, activation_fn
from tflm_mcubert.model.decoder_config import DecoderConfig

_MASKED = -1e9  # added to a score a query may not see (softmax then gives it 0)


@dataclasses.dataclass(frozen=True)
class KVCache:
    """Per layer, the keys and values of every position seen so far: [batch, heads, positions, head size]."""

    keys: tuple[tf.Tensor, ...]
    values: tuple[tf.Tensor, ...]

    @property
    def length(self) -> int:
        return int(self.keys[0].shape[2]) if self.keys else 0

    @classmethod
    def empty(cls, config: DecoderConfig, batch: int = 1) -> "KVCache":
        shape = (batch, config.num_heads, 0, config.head_size)
        nothing = tuple(tf.zeros(shape) for _ in range(config.num_layers))
        return cls(nothing, nothing)


def attention_bias(queries: int, keys: int, window: int | None) -> tf.Tensor:
    """[queries, keys] additive mask for queries at the last `queries` of `keys` positions: a query sees
    the keys at or before it, and with a window only the last `window` of them (itself included)."""
    q = tf.range(keys - queries, keys)[:, None]
    k = tf.range(keys)[None, :]
    visible = k <= q
    if window is not None:
        visible &= q - k < window
    return tf.where(visible, 0.0, _MASKED)


class DecoderBlock(keras.layers.Layer):
    def __init__(self, config: DecoderConfig, index: int, **kwargs):
        super().__init__(**kwargs)
        d, c = config.hidden_size, config
        self.config, self.index = config, index
        self.ln_1 = LayerNorm(c.layer_norm_eps, name="ln_1")
        self.query = keras.layers.Dense(d, use_bias=c.qkv_bias, name="query")
        self.key = keras.layers.Dense(d, use_bias=c.qkv_bias, name="key")
        self.value = keras.layers.Dense(d, use_bias=c.qkv_bias, name="value")
        self.output_dense = keras.layers.Dense(d, name="output_dense")
        self.ln_2 = LayerNorm(c.layer_norm_eps, name="ln_2")
        self.fc = keras.layers.Dense(c.intermediate_size, name="fc")
        self.proj = keras.layers.Dense(d, name="proj")
        self.act = activation_fn(c.activation, "exact")

    def build(self, input_shape):
        d, f = self.config.hidden_size, self.config.intermediate_size
        for layer, width in ((self.ln_1, d), (self.query, d), (self.key, d), (self.value, d), (self.output_dense, d),
                             (self.ln_2, d), (self.fc, d), (self.proj, f)):  # fmt: skip
            layer.build((None, None, width))

    def _heads(self, x):
        c = self.config
        return tf.transpose(tf.reshape(x, (tf.shape(x)[0], -1, c.num_heads, c.head_size)), (0, 2, 1, 3))

    def call(self, h, past_keys, past_values):
        """(h after the block, this block's keys and values including the new positions)."""
        c = self.config
        x = self.ln_1(h)
        q = self._heads(self.query(x))
        keys = tf.concat([past_keys, self._heads(self.key(x))], axis=2)
        values = tf.concat([past_values, self._heads(self.value(x))], axis=2)
        scores = tf.matmul(q, keys, transpose_b=True) * c.attention_scales[self.index]
        scores += attention_bias(tf.shape(q)[2], tf.shape(keys)[2], c.windows[self.index])
        context = tf.matmul(tf.nn.softmax(scores, axis=-1), values)
        context = tf.reshape(tf.transpose(context, (0, 2, 1, 3)), (tf.shape(h)[0], -1, c.hidden_size))
        h = h + self.output_dense(context)
        h = h + self.proj(self.act(self.fc(self.ln_2(h))))
        return h, keys, values


class DecoderModel(keras.Model):
    def __init__(self, config: DecoderConfig, **kwargs):
        super().__init__(**kwargs)
        self.config = config
        self.blocks = [DecoderBlock(config, i, name=f"block_{i}") for i in range(config.num_layers)]
        self.ln_f = LayerNorm(config.layer_norm_eps, name="ln_f")

    def build(self, input_shape=None):
        c = self.config
        init = keras.initializers.TruncatedNormal(stddev=0.02)
        self.token_embeddings = self.add_weight(name="token_embeddings", shape=(c.vocab_size, c.hidden_size),
                                                initializer=init)  # fmt: skip
        self.position_embeddings = self.add_weight(name="position_embeddings", shape=(c.max_positions, c.hidden_size),
                                                   initializer=init)  # fmt: skip
        for block in self.blocks:
            block.build((None, None, c.hidden_size))
        self.ln_f.build((None, None, c.hidden_size))
        self.built = True

    def call(self, input_ids):
        logits, _ = self._forward(tf.convert_to_tensor(input_ids, tf.int32), KVCache.empty(self.config, 1))
        return logits

    def step(self, input_ids, cache: KVCache) -> tuple[tf.Tensor, KVCache]:
        """Logits of the new positions `input_ids` [batch, n] continuing `cache`, and the longer cache."""
        return self._forward(tf.convert_to_tensor(input_ids, tf.int32), cache)

    def tied_logits(self, input_ids, table) -> tf.Tensor:
        """Logits [batch, s, vocab] with the word table [vocab, d] `table` in place of the model's, read by
        the embedding and the head alike (a compressed table's, during its search and fine-tune)."""
        ids = tf.convert_to_tensor(input_ids, tf.int32)
        return self._forward(ids, KVCache.empty(self.config, 1), table)[0]

    def _forward(self, ids, cache: KVCache, table=None) -> tuple[tf.Tensor, KVCache]:
        c = self.config
        start, count = cache.length, int(ids.shape[1])
        if start + count > c.max_positions:
            raise UserError(f"the decoder holds {c.max_positions} positions; this needs {start + count}")
        batch = tf.shape(ids)[0]
        if cache.length == 0 and int(cache.keys[0].shape[0]) != int(ids.shape[0]):
            cache = KVCache.empty(c, int(ids.shape[0]))
        table = self.token_embeddings if table is None else table
        h = tf.gather(table, ids) + self.position_embeddings[start : start + count][tf.newaxis]
        keys, values = [], []
        for block, past_k, past_v in zip(self.blocks, cache.keys, cache.values):
            h, k, v = block(h, past_k, past_v)
            keys.append(k)
            values.append(v)
        logits = tf.matmul(tf.reshape(self.ln_f(h), (-1, c.hidden_size)), table, transpose_b=True)
        return tf.reshape(logits, (batch, count, c.vocab_size)), KVCache(tuple(keys), tuple(values))


def build_decoder(config: DecoderConfig, seed: int = 0) -> DecoderModel:
    keras.utils.set_random_seed(seed)
    model = DecoderModel(config)
    model.build()
    return model


def copy_decoder(model: DecoderModel, *, max_positions: int | None = None, table=None) -> DecoderModel:
    """A new DecoderModel with `model`'s weights: its position table cut to `max_positions` when given, its
    word table replaced by `table` [vocab, d] when given (of another vocabulary size: a pruned vocabulary)."""
    config = model.config if max_positions is None else dataclasses.replace(model.config, max_positions=max_positions)
    if table is not None:
        config = dataclasses.replace(config, vocab_size=int(np.shape(table)[0]))
    copy = build_decoder(config)
    for target, source in zip(copy.weights, model.weights):
        value = source.numpy()
        if source is model.position_embeddings:
            value = value[: config.max_positions]
        elif source is model.token_embeddings and table is not None:
            value = np.asarray(table, value.dtype)
        target.assign(value)
    return copy


def greedy_continuation(model: DecoderModel, prompt: list[int], new_tokens: int) -> list[int]:
    """The prompt's greedy continuation, one cached step a token (the firmware's loop, in float)."""
    logits, cache = model.step(np.asarray([prompt], np.int32), KVCache.empty(model.config))
    out = []
    for _ in range(new_tokens):
        token = int(np.argmax(logits[0, -1]))
        out.append(token)
        logits, cache = model.step(np.asarray([[token]], np.int32), cache)
    return out
