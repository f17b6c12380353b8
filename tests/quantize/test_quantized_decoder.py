"""The int8 decoder (issue 26) calibrated from a float DecoderModel: its nodes run the four decoder ops, its
logits track the float model's at every position of a 64-token text, and greedy decoding over the KV
caches agrees with the float model's."""

from __future__ import annotations

import numpy as np
import pytest

from tflm_mcubert.model.decoder import build_decoder
from tflm_mcubert.model.decoder_config import DecoderConfig
from tflm_mcubert.ops import contract
from tflm_mcubert.quantize.quantized_decoder import calibrate_decoder

VOCAB = 97


def tiny_config(**overrides) -> DecoderConfig:
    raw = {"model_type": "gpt2", "vocab_size": VOCAB, "n_positions": 96, "n_embd": 32, "n_layer": 2, "n_head": 4}
    return DecoderConfig.from_hf_dict({**raw, **overrides})


@pytest.fixture(scope="module")
def models():
    model = build_decoder(tiny_config(), seed=3)
    rng = np.random.default_rng(0)
    calibration = [rng.integers(0, VOCAB, 32) for _ in range(16)]
    return model, calibrate_decoder(model, calibration, top_k=4)


def float_logits(model, tokens) -> np.ndarray:
    return np.asarray(model(np.asarray([tokens], np.int32))[0], np.float64)


def test_the_nodes_are_the_decoder_ops(models):
    _, decoder = models
    codes = [n.op.code for n in decoder.nodes()]
    assert codes == [contract.DECODER_EMBEDDING] + [contract.CAUSAL_ATTENTION, contract.DECODER_MLP] * 2 + [
        contract.LM_HEAD
    ]


def test_int8_logits_track_the_float_model_at_every_position(models):
    model, decoder = models
    tokens = list(np.random.default_rng(1).integers(0, VOCAB, 64))
    expected = float_logits(model, tokens)
    caches = decoder.new_caches()
    agree = 0
    for position, token in enumerate(tokens):
        got = decoder.logits(token, position, caches)
        assert np.corrcoef(got, expected[position])[0, 1] > 0.99, position
        agree += int(np.argmax(got) == np.argmax(expected[position]))
    assert agree >= 0.8 * len(tokens), agree


def test_the_top_k_is_the_head_s_best_scores(models):
    _, decoder = models
    caches, caches_copy = decoder.new_caches(), decoder.new_caches()
    for position, token in enumerate((5, 17, 40)):
        top = decoder.step(token, position, caches)
        logits = decoder.logits(token, position, caches_copy)
        assert list(top[0]) == list(np.argsort(-logits, kind="stable")[:4])


def test_int8_perplexity_is_within_10_percent_of_float(models):
    """The issue's target shape (here a random model on random text: both near the vocabulary size)."""
    model, decoder = models
    tokens = list(np.random.default_rng(2).integers(0, VOCAB, 48))
    expected = float_logits(model, tokens)
    caches = decoder.new_caches()

    def nll(logits, target):
        shifted = logits - logits.max()
        return float(np.log(np.exp(shifted).sum()) - shifted[target])

    ints = [nll(decoder.logits(t, p, caches), tokens[p + 1]) for p, t in enumerate(tokens[:-1])]
    floats = [nll(expected[p], tokens[p + 1]) for p in range(len(tokens) - 1)]
    ratio = np.exp(np.mean(ints)) / np.exp(np.mean(floats))
    assert abs(ratio - 1) < 0.10, ratio


def test_greedy_decoding_over_the_caches(models):
    model, decoder = models
    from tflm_mcubert.model.decoder import greedy_continuation

    prompt = [3, 14, 15, 92, 65]
    ints = decoder.greedy(prompt, 20)
    floats = greedy_continuation(model, prompt, 20)
    assert len(ints) == 20 and all(0 <= t < VOCAB for t in ints)
    # The continuations agree until the int8 one takes the float model's runner-up at a near-tie (top-2 margin
    # under 2% of the logits' spread), after which they are different texts; measured: step 6 of 20 (margin
    # 0.0014, 1.5% of the spread), the first 6 agree.
    first = next((i for i, (a, b) in enumerate(zip(ints, floats)) if a != b), len(ints))
    assert first >= 5, (ints, floats)
    if first < len(ints):
        logits = float_logits(model, prompt + floats[:first])[-1]
        runner_up, best = np.argsort(logits)[-2:]
        assert ints[first] == runner_up and logits[best] - logits[runner_up] < 0.02 * logits.std(), first
    with pytest.raises(ValueError, match="prompt"):
        decoder.greedy([], 3)
