"""MCUBERT_DECODER_MLP: a decoder's pre-LayerNorm MLP for one token, in place on its residual stream.

GPT-2's second half of a block, x' = x + FC2(act(FC1(LN2(x)))), on the residual-stream format of
MCUBERT_CAUSAL_ATTENTION (one s_z for the whole decoder, channel scales s_z * 2^R):

    z[c]  = (x[c] - zp[c]) << R[c]                                         int16
    a     = layer_norm(z)                                                   LN2, int8
    f     = activation_lut[clamp_int8(requantize(bias1 + a . W1) + zp_fc1) + 128]     int8[ffn]
    z'[c] = clamp_int16(requantize(bias2 + f . W2)[c] + z[c])
    x'[c] = clamp_int8(rsh(z'[c], R'[c]) + zp'[c])

The encoder's MLP (mlp.py) normalizes after the residual add instead; the linear layers, the activation
table and the residual add are the same building blocks.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tflm_mcubert.ops import contract
from tflm_mcubert.ops.causal_attention import stream_channels, stream_residual
from tflm_mcubert.ops.fixed_point import ACTIVATIONS, INT8_MAX, INT8_MIN, build_activation_lut, saturate
from tflm_mcubert.ops.layernorm import (
    LayerNormParams,
    check_dim,
    check_residual,
    float_layer_norm,
    layer_norm,
    residual_out,
    residual_sum,
)
from tflm_mcubert.ops.linear import Linear, int4_layers_option, layer_widths, widths_from_options
from tflm_mcubert.ops.op_def import OpDef
from tflm_mcubert.ops.quantization import TensorQuant
from tflm_mcubert.ops.scratch import LayoutBuilder, ScratchLayout
from tflm_mcubert.ops.validation import OpSpecError, check_array, check_int, check_writable_view

OP = contract.DECODER_MLP
LINEARS = contract.MLP_LINEAR_LAYERS  # ("fc1", "fc2"): bit i of int4_layers


def scratch_layout(d: int, ffn: int) -> ScratchLayout:
    return (
        LayoutBuilder(OP)
        .add("residual", (d,), np.int16)  # z, then z'
        .add("normed", (d,), np.int8)  # a
        .add("intermediate", (ffn,), np.int8)  # f
        .add("widened", (contract.DSP_ROWS, max(d, ffn)), np.int16)  # DSP path: the one row for SMLAD
        .build()
    )


def scratch_bytes(d: int, ffn: int) -> int:
    return scratch_layout(d, ffn).total_bytes


@dataclasses.dataclass(frozen=True, eq=False)
class DecoderMlpParams:
    hidden: int
    ffn: int
    fc1_output_zero_point: int
    layer_norm: LayerNormParams  # LN2
    fc1: Linear
    activation_lut: np.ndarray  # int8[256]
    fc2: Linear  # to s_z units
    residual: np.ndarray  # int32[d, 2]
    output_residual: np.ndarray  # int32[d, 2]

    def validate(self) -> "DecoderMlpParams":
        d = check_dim(OP, "hidden", check_int(OP, "hidden", self.hidden, 1, contract.MAX_HIDDEN))
        f = check_int(OP, "ffn", self.ffn, 1, contract.MAX_FFN)
        check_int(OP, "fc1_output_zero_point", self.fc1_output_zero_point, INT8_MIN, INT8_MAX)
        self.layer_norm.validate(OP, "layer_norm", d)
        for name, shape in (("fc1", (f, d)), ("fc2", (d, f))):
            layer: Linear = getattr(self, name)
            if (layer.out_features, layer.in_features) != shape:
                raise OpSpecError(
                    OP,
                    name,
                    f"expected a {shape[0]} x {shape[1]} layer, got {layer.out_features} x {layer.in_features}",
                )
            layer.validate(OP, name)
        check_array(OP, "activation_lut", self.activation_lut, np.int8, (256,))
        check_residual(OP, "residual", self.residual, d)
        check_residual(OP, "output_residual", self.output_residual, d)
        return self

    def options(self) -> dict[str, int]:
        return {
            "hidden": self.hidden,
            "ffn": self.ffn,
            "fc1_output_zero_point": self.fc1_output_zero_point,
            "ln_eps": self.layer_norm.eps,
            **int4_layers_option((self.fc1, self.fc2)),
        }

    def tensors(self) -> dict[str, np.ndarray]:
        return {
            "layer_norm": self.layer_norm.table,
            "fc1_weights": self.fc1.packed_weights,
            "fc1_channels": self.fc1.channels,
            "activation_lut": self.activation_lut,
            "fc2_weights": self.fc2.packed_weights,
            "fc2_channels": self.fc2.channels,
            "residual": self.residual,
            "output_residual": self.output_residual,
        }

    @classmethod
    def from_serialized(cls, options: dict[str, int], tensors: dict[str, np.ndarray]) -> "DecoderMlpParams":
        d, f, (bits1, bits2) = options["hidden"], options["ffn"], widths_from_options(LINEARS, options)
        return cls(
            d,
            f,
            options["fc1_output_zero_point"],
            LayerNormParams(tensors["layer_norm"], options["ln_eps"]),
            Linear(d, f, tensors["fc1_weights"], tensors["fc1_channels"], bits1),
            tensors["activation_lut"],
            Linear(f, d, tensors["fc2_weights"], tensors["fc2_channels"], bits2),
            tensors["residual"],
            tensors["output_residual"],
        ).validate()


def run(params: DecoderMlpParams, hidden: np.ndarray, scratch: np.ndarray | None = None) -> np.ndarray:
    """Rows of `hidden` (int8[d], or int8[s, d]: tokens are independent) in place; returns `hidden`."""
    d = params.hidden
    rows = hidden.reshape(-1, d) if hidden.ndim == 2 else hidden[None]
    check_writable_view(OP, "hidden", hidden, np.int8, hidden.shape if hidden.ndim == 2 else (d,))
    v = scratch_layout(d, params.ffn).views(scratch)
    for x in rows:
        v["residual"][:] = residual_sum(np.zeros(d, np.int64), x, params.residual)
        v["normed"][:] = layer_norm(v["residual"][None], params.layer_norm)[0]
        pre = saturate(
            params.fc1.requantized(v["normed"][None])[0] + params.fc1_output_zero_point, INT8_MIN, INT8_MAX, np.int8
        )
        v["intermediate"][:] = params.activation_lut[pre.astype(np.int64) - INT8_MIN]
        v["residual"][:] = residual_sum(params.fc2.requantized(v["intermediate"][None])[0], x, params.residual)
        x[:] = residual_out(v["residual"], params.output_residual)
    return hidden


# ---------------------------------------------------------------------------------------------
# Float reference and quantization (offline)
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, eq=False)
class DecoderMlpFloat:
    """GPT-2's MLP with its LayerNorm ln_2, Hugging Face layout (w* [out, in])."""

    w1: np.ndarray
    b1: np.ndarray
    w2: np.ndarray
    b2: np.ndarray
    gamma: np.ndarray
    beta: np.ndarray
    activation: str = "gelu_new"  # GPT-2's tanh approximation (fixed_point.ACTIVATIONS)
    eps: float = 1e-5

    @property
    def hidden(self) -> int:
        return int(self.w1.shape[1])

    @property
    def ffn(self) -> int:
        return int(self.w1.shape[0])

    def forward(self, x: np.ndarray, observed: dict | None = None) -> np.ndarray:
        x = np.asarray(x, np.float64)
        a = float_layer_norm(x, self.gamma, self.beta, self.eps)
        pre = a @ self.w1.T + self.b1
        f = ACTIVATIONS[self.activation](pre)
        y = x + f @ self.w2.T + self.b2
        if observed is not None:
            observed.update(normed=a, pre_activation=pre, activation=f, output=y)
        return y

    def quantize(
        self,
        x: np.ndarray,
        input_quant: TensorQuant,
        z_scale: float | None = None,
        weight_bits: int | tuple[int, ...] | dict[str, int] = 8,
    ) -> DecoderMlpParams:
        """Integer parameters from one float pass over calibration rows x [n, d] (the residual stream
        quantized as `input_quant`); `z_scale` as CausalAttentionFloat.quantize takes it. The output keeps
        s_z (causal_attention.stream_channels). `weight_bits`: one width for FC1 and FC2, or one each."""
        bits1, bits2 = layer_widths(OP, LINEARS, weight_bits)
        seen: dict = {}
        y = self.forward(x, seen)
        z_max = float(max(np.abs(y).max(), np.abs(x).max()))
        residual, z_scale = stream_residual(input_quant, z_max, self.hidden, z_scale)
        normed, pre, act = (
            TensorQuant.observe(seen[k], symmetric=False) for k in ("normed", "pre_activation", "activation")
        )
        lut = build_activation_lut(ACTIVATIONS[self.activation], pre.scale, pre.zero_point, act.scale, act.zero_point)
        return DecoderMlpParams(
            hidden=self.hidden,
            ffn=self.ffn,
            fc1_output_zero_point=int(pre.zero_point),
            layer_norm=LayerNormParams.from_float(self.gamma, self.beta, self.eps, z_scale, normed),
            fc1=Linear.from_float(self.w1, self.b1, normed, pre.scale, bits1),
            activation_lut=lut,
            fc2=Linear.from_float(self.w2, self.b2, act, z_scale, bits2),
            residual=residual,
            output_residual=stream_channels(y.min(axis=0), y.max(axis=0), z_scale),
        ).validate()


def _reference(params: DecoderMlpParams, inputs, out: np.ndarray, scratch=None) -> np.ndarray:
    return run(params, inputs[0].reshape(params.hidden), scratch)


DEFINITION = OpDef(
    code=OP,
    kind="decoder_mlp",
    c_name="decoder_mlp",
    params_type=DecoderMlpParams,
    runtime_inputs=("hidden",),
    output="hidden",
    in_place=True,
    per_layer=True,
    tiled=False,
    reference=_reference,
    scratch_bytes=lambda p: scratch_bytes(p.hidden, p.ffn),
    plan_scratch=lambda s, dims, t: scratch_bytes(dims.hidden, dims.ffn),
    buffer_size_args=lambda p: (p.hidden, p.ffn),
    output_shape=lambda p: (1, p.hidden),
    linear_layers=LINEARS,
)
