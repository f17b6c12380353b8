"""MCUBERT_SAMPLE's reference (ops/sample.py): the drawn frequencies over many generator states follow its
probabilities (chi-square), those probabilities are softmax(logit / T) with top-k and top-p to the table's
rounding, and a near-zero temperature, or a keep of one, is greedy decoding."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tflm_mcubert.ops import sample
from tflm_mcubert.ops.sample import SampleParams
from tflm_mcubert.ops.validation import OpSpecError

SCORE_SCALE = 2e-3  # logit per score unit
SCORES = np.array([4000, 3900, 3600, 3550, 3000, 2500, 2400, 900, -2000, -9000], np.int64)  # best first
TOP = np.array([np.arange(10) * 7 + 3, SCORES], np.int32)


def chi_square_critical(dof: int, z: float = 3.09) -> float:
    """The chi-square quantile at the normal quantile z (3.09: p = 0.001), Wilson-Hilferty."""
    return dof * (1 - 2 / (9 * dof) + z * math.sqrt(2 / (9 * dof))) ** 3


def drawn_counts(params: SampleParams, draws: int) -> np.ndarray:
    counts, state = np.zeros(params.top_k, np.int64), np.zeros(1, np.int32)
    ids = list(TOP[0])
    for _ in range(draws):
        top = TOP.copy()
        sample.run(params, top, state)
        counts[ids.index(int(top[0, 0]))] += 1
    return counts


def table_probabilities(params: SampleParams) -> np.ndarray:
    """What the op draws with: the kept prefix's integer weights, normalized."""
    cumulative = sample.cumulative_weights(params, TOP[1])
    kept = int(np.argmax(cumulative * sample.TOP_P_ONE >= params.top_p * cumulative[-1]))
    weights = np.diff(cumulative[: kept + 1], prepend=0).astype(np.float64)
    return np.pad(weights / weights.sum(), (0, params.top_k - weights.size))


def float_probabilities(temperature: float, keep: int, top_p: float) -> np.ndarray:
    logits = SCORES[:keep] * SCORE_SCALE / temperature
    p = np.exp(logits - logits.max())
    p /= p.sum()
    kept = int(np.argmax(np.cumsum(p) >= top_p - 1e-12)) + 1
    return np.pad(p[:kept] / p[:kept].sum(), (0, SCORES.size - kept))


@pytest.mark.parametrize("temperature,keep,top_p", [(1.0, 0, 1.0), (0.6, 6, 1.0), (1.5, 0, 0.8), (0.8, 8, 0.9)])
def test_the_drawn_frequencies_follow_the_probabilities(temperature, keep, top_p):
    params = SampleParams.of(10, SCORE_SCALE, temperature, keep=keep, top_p=top_p, seed=11)
    expected = table_probabilities(params)
    draws = 20_000
    counts = drawn_counts(params, draws)
    live = expected > 0
    assert counts[~live].sum() == 0, "a candidate outside top-k / top-p was drawn"
    statistic = float((((counts[live] - draws * expected[live]) ** 2) / (draws * expected[live])).sum())
    assert statistic < chi_square_critical(int(live.sum()) - 1), (statistic, counts, expected)
    # the integer weights are softmax(logit / T) over the same candidates to the table's rounding
    reference = float_probabilities(temperature, keep or 10, top_p)
    assert np.abs(expected - reference).max() < 0.04, (expected, reference)


def test_a_cold_or_single_candidate_draw_is_greedy():
    for params in (SampleParams.of(10, SCORE_SCALE, 1e-3, seed=5), SampleParams.of(10, SCORE_SCALE, 2.0, keep=1)):
        assert drawn_counts(params, 300)[0] == 300


def test_the_seed_and_the_state_make_the_draws_reproducible():
    params = SampleParams.of(10, SCORE_SCALE, 1.5, seed=1)
    other = SampleParams.of(10, SCORE_SCALE, 1.5, seed=2)

    def sequence(p, state=0):
        s, out = np.array([state], np.int32), []
        for _ in range(64):
            top = TOP.copy()
            out.append(int(sample.run(p, top, s)[0, 0]))
        return out

    assert sequence(params) == sequence(params)
    assert sequence(params) != sequence(other) and sequence(params) != sequence(params, state=12345)


def test_the_generator_is_mulberry32():
    """mulberry32(0)'s first outputs (0.26642920868471265, 0.0003297457005828619, 0.2232720274478197 as
    fractions of 2^32): state + seed = 0x6D2B79F5 * n."""
    outputs = [sample.mix((n * sample.STATE_STEP) & 0xFFFFFFFF) for n in (1, 2, 3)]
    assert outputs == [1144304738, 1416247, 958946056]


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"temperature": 0.0}, "temperature must be > 0"),
        ({"temperature": 1.0, "top_p": 0.0}, "top_p must be in"),
        ({"temperature": 1.0, "keep": 11}, "top-k 11 is outside"),
        ({"temperature": 1e-12}, "too small"),
    ],
)
def test_bad_settings_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SampleParams.of(10, SCORE_SCALE, **kwargs)


def test_a_bad_table_is_refused():
    params = SampleParams.of(10, SCORE_SCALE, 1.0)
    table = params.exp_lut.copy()
    table[0] = 1
    with pytest.raises(OpSpecError, match="exp_lut: entry 0 must be EXP_ONE"):
        SampleParams(**params.options(), exp_lut=table).validate()
