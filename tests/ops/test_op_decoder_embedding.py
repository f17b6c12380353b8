"""MCUBERT_DECODER_EMBEDDING (SPEC 4.8): word + position into the residual stream tracks the float sum, reads the
same word tables as the embedding op, and refuses ids and positions out of range naming the field."""

from __future__ import annotations

import numpy as np
import pytest

from tflm_mcubert.ops import decoder_embedding, testing
from tflm_mcubert.ops.causal_attention import stream_quant
from tflm_mcubert.ops.decoder_embedding import DecoderEmbeddingParams
from tflm_mcubert.ops.validation import OpSpecError


def embed(params, token: int, p: int) -> np.ndarray:
    out = np.zeros(params.hidden, np.int8)
    return decoder_embedding.run(params, np.array([token], np.int32), np.array([p], np.int32), out)


@pytest.mark.parametrize("word_bits,steps", [(8, 1.5), (4, 12.0)])
def test_word_plus_position_tracks_the_float_sum(word_bits, steps):
    params, clusters, position, z_scale = testing.quantized_decoder_embedding(d=64, context=16, word_bits=word_bits)
    dense = np.concatenate([u if vt is None else u @ vt for u, vt in clusters])
    quant = stream_quant(params.output_residual, z_scale)
    step = np.asarray(quant.scale)
    for token, p in ((0, 0), (39, 3), (40, 15), (150, 7), (199, 1)):
        got = quant.dequantize(embed(params, token, p))
        expected = dense[token] + position[p]
        # within the stream's own rounding (half a step) plus the tables' (int8: well under a step)
        assert np.all(np.abs(got - expected) <= steps * step), (token, p)


def test_ids_and_positions_out_of_range_are_refused():
    params, *_ = testing.quantized_decoder_embedding(context=8)
    with pytest.raises(OpSpecError, match=r"input_id: 200 is outside \[0, 200\)"):
        embed(params, 200, 0)
    with pytest.raises(OpSpecError, match=r"position: 8 is outside \[0, 8\)"):
        embed(params, 0, 8)


@pytest.mark.parametrize("word_bits", [8, 4])
def test_round_trip(word_bits):
    params, *_ = testing.quantized_decoder_embedding(context=8, word_bits=word_bits)
    assert params.options().get("word_bits", 8) == word_bits
    again = DecoderEmbeddingParams.from_serialized(params.options(), params.tensors())
    assert all(np.array_equal(a, params.tensors()[k]) for k, a in again.tensors().items())
    assert np.array_equal(embed(again, 77, 5), embed(params, 77, 5))
