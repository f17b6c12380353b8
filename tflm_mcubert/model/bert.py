"""BERT in Keras 3 (TensorFlow backend), written so that one model serves training, HF parity and export.

Every layer is ours rather than Keras' stock one because the stock layers convert badly to TFLite Micro:
`keras.layers.Embedding` adds a SELECT for negative ids (we gather), `LayerNormalization` leaves float
islands in an int8 graph (we decompose it), and Keras' GELU becomes a GELU builtin that TFLM lacks
(the export variant uses x*sigmoid(1.5957691*(x + 0.044715x^3)), i.e. tanh-GELU, which converts to LOGISTIC).
"""

from __future__ import annotations

import dataclasses
import math
import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from tflm_mcubert.model.config import BertConfig  # noqa: E402

INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")

# How the activation is computed. "exact" follows the config (erf GELU for HF "gelu", tanh-GELU for
# "gelu_new"/"gelu_pytorch_tanh"); "sigmoid" forces the tanh-GELU written with a LOGISTIC, for export.
GELU_MODES = ("exact", "sigmoid")

_SQRT_2_OVER_PI_X2 = 2.0 * math.sqrt(2.0 / math.pi)  # 1.5957691...
_CUBIC_COEFF_X2 = 0.044715 * _SQRT_2_OVER_PI_X2  # 0.0713548...


def gelu_erf(x):
    return 0.5 * x * (1.0 + tf.math.erf(x * (1.0 / math.sqrt(2.0))))


def gelu_sigmoid(x):
    """tanh-GELU in its sigmoid form: 0.5x(1+tanh(u)) == x*sigmoid(2u).

    2u = 2*sqrt(2/pi)*(x + 0.044715x^3) is written x*(a + b*x^2): in an int8 graph every intermediate is
    requantized, and x^2 keeps far more resolution than x^3 (whose range is cubed), with one MUL fewer.
    """
    return x * tf.sigmoid(x * (_SQRT_2_OVER_PI_X2 + _CUBIC_COEFF_X2 * (x * x)))


def activation_fn(hidden_act: str, gelu_mode: str):
    if gelu_mode not in GELU_MODES:
        raise ValueError(f"gelu_mode must be one of {GELU_MODES}, got {gelu_mode!r}")
    if hidden_act == "relu":
        return tf.nn.relu
    if gelu_mode == "sigmoid" or hidden_act in ("gelu_new", "gelu_pytorch_tanh"):
        return gelu_sigmoid
    return gelu_erf


class LayerNorm(keras.layers.Layer):
    """LayerNorm over the last axis, decomposed into mean / sub / mul / rsqrt so int8 export stays integer."""

    def __init__(self, epsilon: float, **kwargs):
        super().__init__(**kwargs)
        self.epsilon = float(epsilon)

    def build(self, input_shape):
        dim = int(input_shape[-1])
        self.gamma = self.add_weight(name="gamma", shape=(dim,), initializer="ones")
        self.beta = self.add_weight(name="beta", shape=(dim,), initializer="zeros")

    def call(self, x):
        mean = tf.reduce_mean(x, axis=-1, keepdims=True)
        centered = x - mean
        variance = tf.reduce_mean(centered * centered, axis=-1, keepdims=True)
        return centered * tf.math.rsqrt(variance + self.epsilon) * self.gamma + self.beta


class BertEmbeddings(keras.layers.Layer):
    """Word + position + token-type embeddings, then LayerNorm.

    `word_lookup`, when given, replaces the dense word table: any layer mapping int32 ids [batch, seq] to
    [batch, seq, hidden] (the compressed embeddings of `tflm_mcubert.compress` plug in here).
    """

    def __init__(self, config: BertConfig, word_lookup: keras.layers.Layer | None = None, **kwargs):
        super().__init__(**kwargs)
        self.config = config
        self.word_lookup = word_lookup
        self.layer_norm = LayerNorm(config.layer_norm_eps, name="layer_norm")

    def build(self, input_shape):
        c = self.config
        init = keras.initializers.TruncatedNormal(stddev=0.02)
        if self.word_lookup is None:
            self.word_embeddings = self.add_weight(
                name="word_embeddings", shape=(c.vocab_size, c.hidden_size), initializer=init
            )
        elif not self.word_lookup.built:
            self.word_lookup.build((None, None))
        self.position_embeddings = self.add_weight(
            name="position_embeddings", shape=(c.max_position_embeddings, c.hidden_size), initializer=init
        )
        self.token_type_embeddings = self.add_weight(
            name="token_type_embeddings", shape=(c.type_vocab_size, c.hidden_size), initializer=init
        )
        self.layer_norm.build((None, None, c.hidden_size))

    def call(self, input_ids, token_type_ids):
        seq_len = tf.shape(input_ids)[1]
        if self.word_lookup is None:
            words = tf.gather(self.word_embeddings, input_ids)
        else:
            words = self.word_lookup(input_ids)
        positions = self.position_embeddings[:seq_len][tf.newaxis]
        types = tf.gather(self.token_type_embeddings, token_type_ids)
        return self.layer_norm(words + positions + types)


class EncoderDense(keras.layers.Dense):
    """An encoder matrix (Q, K, V, O, FC1, FC2): a Dense whose forward may use a transformed kernel.

    `kernel_quantizer` (None: the plain Dense) maps the float kernel to the one the forward uses: the
    fake-quantized weights of quantization-aware training (quantize/weight_fake_quant.py), set and cleared
    there. Not a weight: twins and checkpoints never carry it."""

    kernel_quantizer = None

    def call(self, inputs, training=None):
        if self.kernel_quantizer is None:
            return super().call(inputs, training)
        return keras.ops.add(keras.ops.matmul(inputs, self.kernel_quantizer(self.kernel)), self.bias)


class BertSelfAttention(keras.layers.Layer):
    """Multi-head self-attention + output projection + residual + LayerNorm (HF's BertAttention)."""

    def __init__(self, config: BertConfig, mask_value: float, **kwargs):
        super().__init__(**kwargs)
        self.config = config
        self.mask_value = float(mask_value)
        d = config.hidden_size
        self.query = EncoderDense(d, name="query")
        self.key = EncoderDense(d, name="key")
        self.value = EncoderDense(d, name="value")
        self.output_dense = EncoderDense(d, name="output_dense")
        self.layer_norm = LayerNorm(config.layer_norm_eps, name="layer_norm")

    def build(self, input_shape):
        d = self.config.hidden_size
        for dense in (self.query, self.key, self.value, self.output_dense):
            dense.build((None, None, d))
        self.layer_norm.build((None, None, d))

    def _split_heads(self, x, perm=(0, 2, 1, 3)):
        c = self.config
        x = tf.reshape(x, (-1, tf.shape(x)[1], c.num_attention_heads, c.head_size))
        return tf.transpose(x, perm)  # default: [batch, heads, seq, head_size]

    def call(self, hidden, mask_bias):
        c = self.config
        # The 1/sqrt(head_size) scale sits on q, where the converter folds it into the query weights,
        # rather than on the [heads, seq, seq] scores, where it would be one more op and tensor.
        q = self._split_heads(self.query(hidden) * (1.0 / math.sqrt(c.head_size)))
        k = self._split_heads(self.key(hidden))
        v_t = self._split_heads(self.value(hidden), perm=(0, 2, 3, 1))  # [batch, heads, head_size, seq]
        # Both products use transpose_b: they convert to BATCH_MATMUL(adj_y=True), which TFLM runs in
        # place; with adj_y=False it keeps a transposed copy of the right operand in persistent arena.
        scores = tf.matmul(q, k, transpose_b=True)
        probs = tf.nn.softmax(scores + mask_bias, axis=-1)
        context = tf.matmul(probs, v_t, transpose_b=True)  # [batch, heads, seq, head_size]
        context = tf.reshape(tf.transpose(context, (0, 2, 1, 3)), (-1, tf.shape(hidden)[1], c.hidden_size))
        return self.layer_norm(self.output_dense(context) + hidden)


class BertFeedForward(keras.layers.Layer):
    """FC1 + activation + FC2 + residual + LayerNorm (HF's BertIntermediate + BertOutput)."""

    def __init__(self, config: BertConfig, gelu_mode: str, **kwargs):
        super().__init__(**kwargs)
        self.config = config
        self.act = activation_fn(config.hidden_act, gelu_mode)
        self.intermediate = EncoderDense(config.intermediate_size, name="intermediate")
        self.output_dense = EncoderDense(config.hidden_size, name="output_dense")
        self.layer_norm = LayerNorm(config.layer_norm_eps, name="layer_norm")

    def build(self, input_shape):
        c = self.config
        self.intermediate.build((None, None, c.hidden_size))
        self.output_dense.build((None, None, c.intermediate_size))
        self.layer_norm.build((None, None, c.hidden_size))

    def call(self, hidden):
        return self.layer_norm(self.output_dense(self.act(self.intermediate(hidden))) + hidden)


class BertLayer(keras.layers.Layer):
    def __init__(self, config: BertConfig, gelu_mode: str, mask_value: float, **kwargs):
        super().__init__(**kwargs)
        self.attention = BertSelfAttention(config, mask_value, name="attention")
        self.feed_forward = BertFeedForward(config, gelu_mode, name="feed_forward")

    def build(self, input_shape):
        self.attention.build(input_shape)
        self.feed_forward.build(input_shape)

    def call(self, hidden, mask_bias):
        return self.feed_forward(self.attention(hidden, mask_bias))


class BertModel(keras.Model):
    """BERT encoder + pooler, with a sequence-classification head when `config.num_labels` is set.

    Call with a dict of int32 tensors `input_ids`, `attention_mask`, `token_type_ids` ([batch, seq];
    the last two optional). Returns a dict: `last_hidden_state`, `pooler_output` and, for a
    classifier, `logits`.

    `gelu_mode="sigmoid"` swaps in the LOGISTIC-based tanh-GELU for stock TFLite export. `mask_value` is
    the additive bias of masked keys: HF semantics for any very negative value; export passes a small one
    so that the int8 score scale is not spent on the mask.
    """

    def __init__(
        self,
        config: BertConfig,
        *,
        gelu_mode: str = "exact",
        mask_value: float = -1e9,
        word_lookup: keras.layers.Layer | None = None,
        **kwargs,
    ):
        kwargs.setdefault("name", "bert")
        super().__init__(**kwargs)
        self.config = config.validate()
        self.gelu_mode = gelu_mode
        self.mask_value = float(mask_value)
        self.embeddings = BertEmbeddings(config, word_lookup, name="embeddings")
        self.encoder_layers = [
            BertLayer(config, gelu_mode, mask_value, name=f"layer_{i}") for i in range(config.num_hidden_layers)
        ]
        self.pooler = keras.layers.Dense(config.hidden_size, activation="tanh", name="pooler")
        self.classifier = keras.layers.Dense(config.num_labels, name="classifier") if config.num_labels else None
        self._build_all()

    def _build_all(self):
        d = self.config.hidden_size
        self.embeddings.build((None, None))
        for layer in self.encoder_layers:
            layer.build((None, None, d))
        self.pooler.build((None, d))
        if self.classifier is not None:
            self.classifier.build((None, d))
        self.built = True

    def call(self, inputs, training=False):
        input_ids = tf.convert_to_tensor(inputs["input_ids"], tf.int32)
        attention_mask = inputs.get("attention_mask")
        token_type_ids = inputs.get("token_type_ids")
        if token_type_ids is None:
            token_type_ids = tf.zeros_like(input_ids)
        hidden = self.embeddings(input_ids, tf.convert_to_tensor(token_type_ids, tf.int32))
        if attention_mask is None:
            mask_bias = tf.zeros((1, 1, 1, 1), hidden.dtype)
        else:
            # A lookup of (mask_value, 0) by the 0/1 mask, rather than (1 - mask) * mask_value: it
            # converts to one GATHER, where the arithmetic needs a CAST and QUANTIZE in an int8 graph.
            keep = tf.cast(tf.convert_to_tensor(attention_mask), tf.int32)
            bias_of = tf.constant([self.mask_value, 0.0], hidden.dtype)
            mask_bias = tf.reshape(tf.gather(bias_of, keep), (-1, 1, 1, tf.shape(keep)[1]))
        for layer in self.encoder_layers:
            hidden = layer(hidden, mask_bias)
        pooled = self.pooler(hidden[:, 0])
        out = {"last_hidden_state": hidden, "pooler_output": pooled}
        if self.classifier is not None:
            out["logits"] = self.classifier(pooled)
        return out

    def with_classifier(self, num_labels: int, *, seed: int | None = None) -> "BertModel":
        """A twin with a freshly initialised (seeded) `num_labels`-way classifier and every other weight
        copied: a bare encoder checkpoint made ready for fine-tuning on a task."""
        if seed is not None:
            keras.utils.set_random_seed(seed)
        lookup = self.embeddings.word_lookup
        twin = BertModel(
            dataclasses.replace(self.config, num_labels=num_labels),
            gelu_mode=self.gelu_mode,
            mask_value=self.mask_value,
            word_lookup=None if lookup is None else type(lookup).from_config(lookup.get_config()),
        )
        ours, theirs = self.embeddings, twin.embeddings
        theirs.set_weights(ours.get_weights())
        for source, target in [*zip(self.encoder_layers, twin.encoder_layers), (self.pooler, twin.pooler)]:
            target.set_weights(source.get_weights())
        return twin

    def with_options(self, *, gelu_mode: str | None = None, mask_value: float | None = None) -> "BertModel":
        """A twin of this model sharing nothing but copied weights, with other graph options (for export)."""
        lookup = self.embeddings.word_lookup
        twin = BertModel(
            self.config,
            gelu_mode=self.gelu_mode if gelu_mode is None else gelu_mode,
            mask_value=self.mask_value if mask_value is None else mask_value,
            word_lookup=None if lookup is None else type(lookup).from_config(lookup.get_config()),
        )
        twin.set_weights(self.get_weights())
        return twin

    def with_word_lookup(
        self, word_lookup: keras.layers.Layer | None, *, config: BertConfig | None = None
    ) -> "BertModel":
        """A twin whose word embeddings come from `word_lookup` (used as is, not copied; None: a fresh dense
        table) and whose other weights are copied: how a compressed embedding replaces the dense one.
        `config` may replace the configuration where it does not change a shape (e.g. the pad id of a
        permuted vocabulary)."""
        config = self.config if config is None else config
        if dataclasses.replace(config, pad_token_id=self.config.pad_token_id) != self.config:
            raise ValueError("with_word_lookup: the new config may only change pad_token_id")
        twin = BertModel(config, gelu_mode=self.gelu_mode, mask_value=self.mask_value, word_lookup=word_lookup)
        copy_all_but_word_embeddings(self, twin)
        return twin


def with_vocabulary(model: BertModel, kept_ids) -> BertModel:
    """A twin whose vocabulary is the tokens `kept_ids` (old ids, in their new order): the word table's rows
    are those tokens' rows, every other weight is copied. Vocabulary pruning; the embedding must be dense."""
    if model.embeddings.word_lookup is not None:
        raise ValueError("with_vocabulary: the word embedding is compressed; prune the vocabulary before compressing")
    kept = np.asarray(kept_ids, np.int64)
    old_pad = model.config.pad_token_id
    if old_pad not in set(kept.tolist()):
        raise ValueError(f"with_vocabulary: the pad token (id {old_pad}) must be kept")
    config = dataclasses.replace(
        model.config, vocab_size=int(kept.size), pad_token_id=int(np.flatnonzero(kept == old_pad)[0])
    )
    twin = BertModel(config.validate(), gelu_mode=model.gelu_mode, mask_value=model.mask_value)
    twin.embeddings.word_embeddings.assign(model.embeddings.word_embeddings.numpy()[kept])
    copy_all_but_word_embeddings(model, twin)
    return twin


def copy_all_but_word_embeddings(source: BertModel, target: BertModel) -> None:
    """Position and token-type tables, LayerNorms, encoder, pooler and classifier from source to target."""
    target.embeddings.position_embeddings.assign(source.embeddings.position_embeddings)
    target.embeddings.token_type_embeddings.assign(source.embeddings.token_type_embeddings)
    pairs = [
        (source.embeddings.layer_norm, target.embeddings.layer_norm),
        (source.pooler, target.pooler),
        *zip(source.encoder_layers, target.encoder_layers),
    ]
    if source.classifier is not None:
        pairs.append((source.classifier, target.classifier))
    for layer_from, layer_to in pairs:
        layer_to.set_weights(layer_from.get_weights())


def build_model(config: BertConfig, *, seed: int | None = None, **options) -> BertModel:
    """A freshly initialised model (seeded, so the default random bert-tiny is reproducible)."""
    if seed is not None:
        keras.utils.set_random_seed(seed)
    return BertModel(config, **options)
