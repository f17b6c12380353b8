"""The topologies: the op sequences they accept, their plan steps, and how a graph's first op names one."""

import pytest

from tflm_mcubert.ops.topology import DECODER, ENCODER, TOPOLOGIES, topology_of


@pytest.mark.parametrize("topology", TOPOLOGIES, ids=lambda t: t.name)
@pytest.mark.parametrize("layers", [1, 3])
def test_an_op_sequence_gives_back_its_layers(topology, layers):
    assert topology.shape_of(topology.ops(layers)) == (layers, 1)
    for ends in range(topology.least_ending, len(topology.ending) + 1):
        assert topology.shape_of(topology.ops(layers, ends)) == (layers, ends)
    if topology.least_ending:
        assert topology.ops(layers, 0) == topology.ops(layers)
    assert topology_of(topology.ops(layers)[0]) is topology


@pytest.mark.parametrize("topology", TOPOLOGIES, ids=lambda t: t.name)
def test_a_sequence_of_another_shape_is_named(topology):
    ops = topology.ops(2)
    for wrong in ([], ops[:1], ops[1:], ops[:2] + ops[3:], ops + [topology.first], topology.ops(1) + [ops[1]]):
        with pytest.raises(ValueError, match=f"is not {topology.first.code}, .* x L >= 1"):
            topology.shape_of(wrong)


def test_the_topologies_do_not_mix():
    with pytest.raises(ValueError, match="is not"):
        ENCODER.shape_of(DECODER.ops(1))
    with pytest.raises(ValueError, match="no topology starts with MCUBERT_MLP"):
        topology_of(ENCODER.layer[1])


def test_the_steps_name_the_values_each_op_reads():
    assert [(op.code, name, inputs) for op, name, inputs in DECODER.steps(2)] == [
        ("MCUBERT_DECODER_EMBEDDING", "decoder_embedding", ("input_id", "position")),
        ("MCUBERT_CAUSAL_ATTENTION", "layer0.causal_attention", ("hidden", "position", "cache0")),
        ("MCUBERT_DECODER_MLP", "layer0.decoder_mlp", ("hidden",)),
        ("MCUBERT_CAUSAL_ATTENTION", "layer1.causal_attention", ("hidden", "position", "cache1")),
        ("MCUBERT_DECODER_MLP", "layer1.decoder_mlp", ("hidden",)),
        ("MCUBERT_LM_HEAD", "lm_head", ("hidden",)),
    ]
    assert [(name, inputs) for _, name, inputs in ENCODER.steps(1, 0)] == [
        ("embedding", ("input_ids", "token_type_ids")),
        ("layer0.attention", ("hidden", "attention_mask")),
        ("layer0.mlp", ("hidden",)),
    ]
    assert DECODER.is_state("cache1") and not ENCODER.is_state("cache1")
