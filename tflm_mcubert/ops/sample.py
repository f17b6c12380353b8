"""MCUBERT_SAMPLE: a decoder's next token drawn from the LM head's k candidates (temperature, top-k, top-p),
with a seeded 32-bit generator whose state lives in the arena. Greedy decoding is the graph without it.

The input is the LM head's int32[2, k] (ids best first, then their scores; logit = score * s), rewritten in
place: the drawn candidate moves to the front, the ones before it shift one place back, so the next id is
top[0][0] with or without this op. Integers only, so the host and every core draw the same ids:

    state    = state + 0x6D2B79F5 (mod 2^32)                        the int32[1] state, a variable tensor
    u        = mix(state + seed)                                     mulberry32's output function, uint32
    j_i      = min(255, requantize(clamp32(score_0 - score_i), M, shift))   M/shift fold s / (T * step)
    w_i      = exp_lut[j_i]               i < keep                   EXP_ONE * exp(-j * step), [0] = EXP_ONE
    c_i      = w_0 + ... + w_i
    m        = the first i with c_i * 2^15 >= top_p * c_(keep-1)     top_p in Q15, (0, 1]
    r        = (u * c_m) >> 32                                       uniform in [0, c_m)
    drawn    = the first i with c_i > r

So the candidates' probabilities are softmax(logit / T) over the `keep` best, cut to the smallest prefix
holding a share top_p of their mass, each up to the table's rounding (a step of exp(-16/255) per index,
2^-14 of the best one's weight). A candidate 16 nats or more below the best has weight 0 and is never
drawn. Reset() (ResetVariableTensors) zeroes the state: a text then draws the same ids for the same seed.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tflm_mcubert.ops import contract
from tflm_mcubert.ops.fixed_point import (
    EXP_ONE,
    INT32_MAX,
    LUT_SIZE,
    build_exp_lut,
    check_multipliers,
    quantize_multiplier,
    requantize,
)
from tflm_mcubert.ops.op_def import OpDef
from tflm_mcubert.ops.scratch import LayoutBuilder, ScratchLayout
from tflm_mcubert.ops.validation import OpSpecError, check_array, check_int

OP = contract.SAMPLE

LUT_RANGE = 16.0  # nats the exp table covers: exp(-16) * EXP_ONE rounds to 0
LUT_STEP = LUT_RANGE / (LUT_SIZE - 1)  # nats per table index
TOP_P_ONE = 1 << 15  # top_p = 1.0 in Q15
STATE_STEP = 0x6D2B79F5  # mulberry32's Weyl increment
_U32 = 0xFFFFFFFF


def scratch_layout(top_k: int) -> ScratchLayout:
    return LayoutBuilder(OP).add("cumulative", (top_k,), np.int32).build()  # c_i


def scratch_bytes(top_k: int) -> int:
    return scratch_layout(top_k).total_bytes


@dataclasses.dataclass(frozen=True, eq=False)
class SampleParams:
    top_k: int  # k: the LM head's candidates
    keep: int  # top-k: the best `keep` of them are drawn from
    top_p: int  # Q15, (0, 1]: the smallest prefix holding this share of their weight
    index_multiplier: int  # (score_0 - score_i) -> table index: s / (T * LUT_STEP)
    index_shift: int
    seed: int  # uint32, added to the state before mixing
    exp_lut: np.ndarray  # int16[256]

    def validate(self) -> "SampleParams":
        k = check_int(OP, "top_k", self.top_k, 1, contract.MAX_TOP_K)
        check_int(OP, "keep", self.keep, 1, contract.MAX_TOP_K)
        if self.keep > k:
            raise OpSpecError(OP, "keep", f"{self.keep} exceeds top_k {k}")
        check_int(OP, "top_p", self.top_p, 1, TOP_P_ONE)
        check_int(OP, "seed", self.seed, 0, _U32)
        problem = check_multipliers(np.array([self.index_multiplier]), np.array([self.index_shift]))
        if problem:
            raise OpSpecError(OP, "index_multiplier", problem)
        lut = check_array(OP, "exp_lut", self.exp_lut, np.int16, (LUT_SIZE,), 0, EXP_ONE)
        if lut[0] != EXP_ONE:
            raise OpSpecError(OP, "exp_lut", f"entry 0 must be EXP_ONE = {EXP_ONE} (the best candidate's weight)")
        return self

    @classmethod
    def of(
        cls, top_k: int, score_scale: float, temperature: float, keep: int = 0, top_p: float = 1.0, seed: int = 0
    ) -> "SampleParams":
        """Drawing at `temperature` from the LM head's k candidates whose logit is score * `score_scale`:
        the `keep` best (0: all k), then the smallest prefix with a share `top_p` of their weight."""
        if not (np.isfinite(temperature) and temperature > 0):
            raise ValueError(f"temperature must be > 0, got {temperature!r}")
        if not 0 < top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {top_p!r}")
        if not 0 <= keep <= top_k:
            raise ValueError(f"top-k {keep} is outside [0, {top_k}] (the LM head keeps {top_k} candidates)")
        real = score_scale / (temperature * LUT_STEP)
        if not real < 2.0**30:
            raise ValueError(f"temperature {temperature!r} is too small for scores of scale {score_scale!r}")
        multiplier, shift = quantize_multiplier(real)
        return cls(
            top_k=top_k,
            keep=keep or top_k,
            top_p=max(1, min(TOP_P_ONE, round(top_p * TOP_P_ONE))),
            index_multiplier=int(multiplier),
            index_shift=int(shift),
            seed=int(seed) & _U32,
            exp_lut=build_exp_lut(LUT_STEP),
        ).validate()

    def options(self) -> dict[str, int]:
        return {
            "top_k": self.top_k,
            "keep": self.keep,
            "top_p": self.top_p,
            "index_multiplier": self.index_multiplier,
            "index_shift": self.index_shift,
            "seed": self.seed,
        }

    def tensors(self) -> dict[str, np.ndarray]:
        return {"exp_lut": self.exp_lut}

    @classmethod
    def from_serialized(cls, options: dict[str, int], tensors: dict[str, np.ndarray]) -> "SampleParams":
        return cls(**options, exp_lut=tensors["exp_lut"]).validate()


def mix(z: int) -> int:
    """mulberry32's output function of a uint32 (Tommy Ettinger's generator), as uint32 arithmetic."""
    z &= _U32
    z = ((z ^ (z >> 15)) * (z | 1)) & _U32
    z ^= (z + ((z ^ (z >> 7)) * (z | 61))) & _U32
    return (z ^ (z >> 14)) & _U32


def cumulative_weights(params: SampleParams, scores: np.ndarray) -> np.ndarray:
    """c_i, i < keep: the running sum of the candidates' table weights."""
    differences = np.clip(np.int64(scores[0]) - scores[: params.keep].astype(np.int64), 0, INT32_MAX)
    index = np.minimum(requantize(differences, params.index_multiplier, params.index_shift), LUT_SIZE - 1)
    return np.cumsum(params.exp_lut.astype(np.int64)[index])


def draw(params: SampleParams, scores: np.ndarray, u: int) -> int:
    """The candidate drawn by the uint32 `u` from scores best first."""
    cumulative = cumulative_weights(params, scores)
    kept = int(np.argmax(cumulative * TOP_P_ONE >= params.top_p * int(cumulative[-1])))
    r = (u * int(cumulative[kept])) >> 32
    return int(np.argmax(cumulative[: kept + 1] > r))


def run(params: SampleParams, top: np.ndarray, state: np.ndarray, scratch: np.ndarray | None = None) -> np.ndarray:
    """Advance `state` (int32[1]) and move the drawn candidate of `top` (int32[2, k], in place) to the
    front; returns `top`."""
    check_array(OP, "top", top, np.int32, (2, params.top_k))
    check_array(OP, "rng_state", state, np.int32, (1,))
    if not (top.flags.writeable and state.flags.writeable):
        raise OpSpecError(OP, "top" if not top.flags.writeable else "rng_state", "must be writable")
    scratch_layout(params.top_k).views(scratch)  # the kernel's scratch contract: checked, not needed here
    advanced = (int(state[0]) + STATE_STEP) & _U32
    state[0] = np.uint32(advanced).view(np.int32)
    drawn = draw(params, top[1], mix(advanced + params.seed))
    top[:, : drawn + 1] = np.roll(top[:, : drawn + 1], 1, axis=1)
    return top


def _reference(params: SampleParams, inputs, out: np.ndarray, scratch=None) -> np.ndarray:
    top, state = inputs
    return run(params, top.reshape(2, params.top_k), state.reshape(1), scratch)


DEFINITION = OpDef(
    code=OP,
    kind="sample",
    c_name="sample",
    params_type=SampleParams,
    runtime_inputs=("top", "rng_state"),
    output="top",
    in_place=True,
    per_layer=False,
    tiled=False,
    reference=_reference,
    scratch_bytes=lambda p: scratch_bytes(p.top_k),
    plan_scratch=lambda s, dims, t: scratch_bytes(contract.MAX_TOP_K),
    buffer_size_args=lambda p: (p.top_k,),
    output_shape=lambda p: (1, 2, p.top_k),
)
