import keras
import numpy as np
import pytest
import tensorflow as tf

from tflm_mcubert.compress.search_space import JointSearch, RankSearch, TokenClusteringSearch, split_trainable_variables
from tflm_mcubert.model.bert import BertModel

V, D = 60, 16


def one_hot_logits(assignment, num_clusters):
    return np.where(np.eye(num_clusters)[assignment] > 0, 50.0, -50.0).astype(np.float32)


def embed(layer, ids):
    return layer(np.asarray(ids)[None]).numpy()[0]


def test_stage1_starts_uniform_at_fixed_ranks(random_table):
    table = random_table(V, D)
    stage1 = TokenClusteringSearch.from_dense(table, num_clusters=4, div=2)
    assert stage1.ranks == [8, 4, 2]
    np.testing.assert_allclose(stage1.alpha().numpy(), 0.25)
    expected = np.mean([table] + [np.asarray(u) @ np.asarray(vt) for u, vt in zip(stage1.us, stage1.vts)], axis=0)
    np.testing.assert_allclose(embed(stage1, np.arange(V)), expected, atol=1e-5)
    # Σ_i Size: d·v/4 for the dense cluster + r_i (d + v/4) for the others
    assert stage1.embedding_size().numpy() == pytest.approx(D * V / 4 + sum(r * (D + V / 4) for r in (8, 4, 2)))


def test_stage1_size_formula_counts_the_converted_parameters_when_alpha_is_one_hot(random_table):
    stage1 = TokenClusteringSearch.from_dense(random_table(V, D), num_clusters=4, div=4)
    assert stage1.ranks == [4, 1, 0]  # rank 0: a cluster whose tokens embed to zero
    assignment = np.random.default_rng(0).integers(0, 4, size=V)
    stage1.alpha_logits.assign(one_hot_logits(assignment, 4))
    final = stage1.to_clustered_embedding()
    assert stage1.embedding_size().numpy() == pytest.approx(final.stored_params())
    np.testing.assert_array_equal(stage1.clustering(), assignment)
    ids = np.arange(V)
    np.testing.assert_allclose(embed(final, final.remap(ids)), embed(stage1, ids), atol=1e-5)
    np.testing.assert_array_equal(embed(final, final.remap(ids))[assignment == 3], 0.0)


def test_stage2_starts_at_the_threshold_and_counts_parameters_for_binary_beta(random_table):
    table = random_table(V, D)
    assignment = np.random.default_rng(1).integers(0, 3, size=V)
    stage2 = RankSearch.from_assignment(table, assignment, num_clusters=3, beta_threshold=0.5)
    out = embed(stage2, np.arange(V))
    np.testing.assert_array_equal(out[assignment == 0], table[assignment == 0])
    np.testing.assert_allclose(out[assignment > 0], 0.5 * table[assignment > 0], atol=1e-5)  # β = β* = 0.5

    rng = np.random.default_rng(2)
    for beta in stage2.betas:
        beta.assign(rng.integers(0, 2, size=beta.shape).astype(np.float32))
    final = stage2.to_clustered_embedding()
    assert list(final.ranks) == stage2.ranks() == [int(b.numpy().sum()) for b in stage2.betas]
    assert stage2.embedding_size().numpy() == pytest.approx(final.stored_params())
    ids = np.arange(V)
    np.testing.assert_allclose(embed(final, final.remap(ids)), embed(stage2, ids), atol=1e-5)


def test_stage2_keeps_beta_in_the_unit_interval_under_a_keras_optimizer(random_table):
    stage2 = RankSearch.from_assignment(random_table(V, D), np.arange(V) % 2, num_clusters=2, beta_threshold=0.3)
    optimizer = keras.optimizers.SGD(learning_rate=10.0)
    (beta,) = stage2.architecture_variables()
    gradient = np.where(np.arange(beta.shape[0]) % 2, 1.0, -1.0).astype(np.float32)
    optimizer.apply_gradients([(tf.constant(gradient), beta)])
    np.testing.assert_array_equal(beta.numpy(), np.where(gradient > 0, 0.0, 1.0))
    assert stage2.ranks() == [int(np.sum(gradient < 0))]


def test_joint_search_size_and_conversion_agree_for_one_hot_alpha_and_binary_beta(random_table):
    joint = JointSearch.from_dense(random_table(V, D), num_clusters=3, beta_threshold=0.5)
    rng = np.random.default_rng(3)
    assignment = rng.integers(0, 3, size=V)
    joint.alpha_logits.assign(one_hot_logits(assignment, 3))
    for beta in joint.betas:
        beta.assign(rng.integers(0, 2, size=beta.shape).astype(np.float32))
    final = joint.to_clustered_embedding()
    assert joint.embedding_size().numpy() == pytest.approx(final.stored_params())
    assert list(final.ranks) == joint.ranks()
    ids = np.arange(V)
    np.testing.assert_allclose(embed(final, final.remap(ids)), embed(joint, ids), atol=1e-5)


@pytest.mark.parametrize(
    "make",
    [
        lambda table: TokenClusteringSearch.from_dense(table, num_clusters=4, div=2),
        lambda table: RankSearch.from_assignment(table, np.arange(V) % 4, num_clusters=4),
        lambda table: JointSearch.from_dense(table, num_clusters=3),
    ],
    ids=["stage1", "stage2", "joint"],
)
def test_gradients_reach_architecture_and_weights_through_bert(make, small_config):
    config = small_config(vocab_size=V, hidden_size=D, num_labels=2)
    dense = BertModel(config)
    search = make(dense.embeddings.word_embeddings.numpy())
    model = dense.with_word_lookup(search)
    weights, arch = split_trainable_variables(model)
    assert {id(v) for v in arch} == {id(v) for v in search.architecture_variables()} != set()
    assert {id(v) for v in search.weight_variables()} <= {id(v) for v in weights}
    assert len(weights) + len(arch) == len(model.trainable_variables)

    ids = np.random.default_rng(4).permutation(V).reshape(2, V // 2).astype(np.int32)  # every cluster
    with tf.GradientTape() as tape:
        logits = model({"input_ids": ids})["logits"]
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits([0, 1], logits))
        loss += 1e-6 * search.embedding_size()
    grads = tape.gradient(loss, arch + search.weight_variables())
    for variable, grad in zip(arch + search.weight_variables(), grads):
        assert grad is not None, variable.path
        assert np.any(tf.convert_to_tensor(grad).numpy() != 0), variable.path


def test_conversion_is_the_best_rank_r_fit_of_what_the_search_computed(random_table):
    # β strictly between 0 and 1: the dropped singular values still contributed during the search.
    table = random_table(V, D)
    assignment = np.random.default_rng(5).integers(0, 3, size=V)
    stage2 = RankSearch.from_assignment(table, assignment, num_clusters=3, beta_threshold=0.5)
    rng = np.random.default_rng(6)
    for beta in stage2.betas:
        beta.assign(rng.uniform(0.05, 0.95, size=beta.shape).astype(np.float32))
    final = stage2.to_clustered_embedding()
    assert list(final.ranks) == stage2.ranks()
    ids = np.arange(V)
    searched, converted = embed(stage2, ids), embed(final, final.remap(ids))
    for i, (u, vt, beta) in enumerate(zip(stage2.us, stage2.vts, stage2.betas), start=1):
        rows = assignment == i
        kept = beta.numpy() > 0.5
        subset = (u.numpy()[:, kept] * beta.numpy()[kept]) @ vt.numpy()[kept]  # keep the top-β components
        # (the layer's cluster rows are in new-id order, which within a cluster is the original id order)
        error = np.linalg.norm(converted[rows] - searched[rows])
        assert error <= np.linalg.norm(subset - searched[rows]) + 1e-5


def test_every_search_mode_has_its_method():
    from tflm_mcubert.compress.nas import MODE_METHODS, MODES

    assert set(MODE_METHODS) == set(MODES)
