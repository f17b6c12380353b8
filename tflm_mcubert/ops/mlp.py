"""MCUBERT_MLP: FC1 + GELU + FC2 + residual + LayerNorm, tiled along tokens, in place on x[s, d].

Tokens are independent in an MLP, so the op runs tile by tile (t tokens), finishing each tile
before the next and writing its result over the tile's own input rows:

    for each tile T:
        a = activation_lut[clamp_int8(requantize(bias1 + x[T] . W1, M1) + zp_fc1) + 128]   (t x ffn)
        z = clamp_int16(requantize(bias2 + a . W2, M2) + ((x[T] - zp[c]) << R[c]))      (t x d)
        x[T] = layer_norm(z)

Peak memory: s*d + t*ffn (+ 2*t*d for the int16 pre-norm rows, + the DSP widened rows): the
paper's s*d + t*5d with a wider pre-norm sum. The activation table (GELU, tanh-GELU or ReLU) is
built offline from the FC1-output and activation-output scales; it *is* the spec of the activation.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from tflm_mcubert.ops import contract, kernel_events
from tflm_mcubert.ops.fixed_point import (
    ACTIVATIONS,
    INT8_MAX,
    INT8_MIN,
    LUT_SIZE,
    build_activation_lut,
    saturate,
)
from tflm_mcubert.ops.layernorm import (
    LayerNormParams,
    check_dim,
    check_residual,
    float_layer_norm,
    layer_norm,
    residual_channels,
    residual_sum,
)
from tflm_mcubert.ops.op_def import OpDef, hidden_shape
from tflm_mcubert.ops.linear import Linear, check_layer_bits, layer_widths, uniform_width, weight_bits_options
from tflm_mcubert.ops.linear import widths_from_options
from tflm_mcubert.ops.quantization import TensorQuant
from tflm_mcubert.ops.scratch import LayoutBuilder, ScratchLayout
from tflm_mcubert.ops.validation import OpSpecError, check_array, check_int, check_writable_view

OP = contract.MLP
LAYERS = contract.MLP_LINEAR_LAYERS  # FC1 and FC2, each with its own width in version 8


@functools.lru_cache(maxsize=4096)  # the planner asks for the same layouts across tiles and shapes
def scratch_layout(s: int, d: int, ffn: int, t: int) -> ScratchLayout:
    return (
        LayoutBuilder(OP)
        .add("intermediate", (t, ffn), np.int8)  # FC1 output, then GELU in place
        .add("residual", (t, d), np.int16)  # pre-norm sum of FC2 and the residual
        .add("widened", (contract.DSP_ROWS, max(d, ffn)), np.int16)  # DSP: 4 rows of K
        .build()
    )


def scratch_bytes(s: int, d: int, ffn: int, t: int) -> int:
    return scratch_layout(s, d, ffn, t).total_bytes


@dataclasses.dataclass(frozen=True, eq=False)
class MLPParams:
    seq_len: int
    hidden: int
    ffn: int
    tile: int
    fc1_output_zero_point: int
    fc1: Linear
    activation_lut: np.ndarray  # int8[256]
    fc2: Linear
    layer_norm: LayerNormParams
    residual: np.ndarray  # int32[d, 2]: (zero point, shift R_c) of the incoming hidden state
    # 8 = int8 pair4, 4 = int4 w4row for FC1 and FC2 (version 3, SPEC 3.1.1), or one each (version 8, 3.1.2)
    weight_bits: int | tuple[int, ...] = 8

    @property
    def layer_widths(self) -> tuple[int, ...]:
        return layer_widths(OP, LAYERS, self.weight_bits)

    def validate(self) -> "MLPParams":
        s = check_int(OP, "seq_len", self.seq_len, 1, contract.MAX_SEQ_LEN)
        d = check_dim(OP, "hidden", check_int(OP, "hidden", self.hidden, 1, contract.MAX_HIDDEN))
        f = check_int(OP, "ffn", self.ffn, 1, contract.MAX_FFN)
        check_int(OP, "tile", self.tile, 1, s)
        check_int(OP, "fc1_output_zero_point", self.fc1_output_zero_point, INT8_MIN, INT8_MAX)
        for name, shape, bits in zip(LAYERS, ((f, d), (d, f)), self.layer_widths):
            lin: Linear = getattr(self, name)
            if (lin.out_features, lin.in_features) != shape:
                raise OpSpecError(
                    OP, name, f"expected a {shape[0]} x {shape[1]} layer, got {lin.out_features} x {lin.in_features}"
                )
            check_layer_bits(OP, name, lin, bits)
            lin.validate(OP, name)
        check_array(OP, "activation_lut", self.activation_lut, np.int8, (LUT_SIZE,))
        self.layer_norm.validate(OP, "layer_norm", d)
        check_residual(OP, "residual", self.residual, d)
        return self

    def options(self) -> dict[str, int]:
        return {
            "seq_len": self.seq_len,
            "hidden": self.hidden,
            "ffn": self.ffn,
            "tile": self.tile,
            "fc1_output_zero_point": self.fc1_output_zero_point,
            "ln_eps": self.layer_norm.eps,
            **weight_bits_options(self.layer_widths),
        }

    def tensors(self) -> dict[str, np.ndarray]:
        return {
            "fc1_weights": self.fc1.packed_weights,
            "fc1_channels": self.fc1.channels,
            "activation_lut": self.activation_lut,
            "fc2_weights": self.fc2.packed_weights,
            "fc2_channels": self.fc2.channels,
            "layer_norm": self.layer_norm.table,
            "residual": self.residual,
        }

    @classmethod
    def from_serialized(cls, options: dict[str, int], tensors: dict[str, np.ndarray]):
        d, f, (bits1, bits2) = options["hidden"], options["ffn"], widths_from_options(LAYERS, options)
        return cls(
            options["seq_len"],
            d,
            f,
            options["tile"],
            options["fc1_output_zero_point"],
            Linear(d, f, tensors["fc1_weights"], tensors["fc1_channels"], bits1),
            tensors["activation_lut"],
            Linear(f, d, tensors["fc2_weights"], tensors["fc2_channels"], bits2),
            LayerNormParams(tensors["layer_norm"], options["ln_eps"]),
            tensors["residual"],
            uniform_width((bits1, bits2)),
        ).validate()

    @classmethod
    def quantize(
        cls,
        fw: "MLPFloat",
        quant: "MLPQuant",
        *,
        seq_len: int,
        tile: int,
        weight_bits: int | tuple[int, ...] | dict[str, int] = 8,
    ) -> "MLPParams":
        """`weight_bits`: one width for FC1 and FC2, or one each (a tuple in LAYERS order, or by name)."""
        bits1, bits2 = layer_widths(OP, LAYERS, weight_bits)
        x = quant.input
        residual, z_scale = residual_channels(x, quant.z_max_abs, fw.hidden)
        lut = build_activation_lut(
            ACTIVATIONS[fw.activation],
            quant.fc1_output.scale,
            quant.fc1_output.zero_point,
            quant.activation.scale,
            quant.activation.zero_point,
        )
        fc1 = Linear.from_float(fw.w1, fw.b1, x, quant.fc1_output.scale, bits1)
        return cls(
            seq_len=seq_len,
            hidden=fw.hidden,
            ffn=fw.ffn,
            tile=tile,
            fc1_output_zero_point=quant.fc1_output.zero_point,
            fc1=fc1,
            activation_lut=lut,
            fc2=Linear.from_float(fw.w2, fw.b2, quant.activation, z_scale, bits2),
            layer_norm=LayerNormParams.from_float(fw.gamma, fw.beta, fw.eps, z_scale, quant.output),
            residual=residual,
            weight_bits=uniform_width((bits1, bits2)),
        ).validate()


def run(params: MLPParams, hidden: np.ndarray, scratch: np.ndarray | None = None) -> np.ndarray:
    """Run the op in place on `hidden` (int8[s, d]); returns `hidden`.

    `scratch`: uint8[>= scratch_bytes(s, d, ffn, t)], e.g. a view into a planned arena.
    """
    s, d, t = params.seq_len, params.hidden, params.tile
    check_writable_view(OP, "hidden", hidden, np.int8, (s, d))
    v = scratch_layout(s, d, params.ffn, t).views(scratch)
    lut = params.activation_lut
    for start in range(0, s, t):
        rows = slice(start, min(start + t, s))
        n = rows.stop - start
        a = v["intermediate"][:n]
        a[:] = saturate(
            params.fc1.requantized(hidden[rows]) + params.fc1_output_zero_point, INT8_MIN, INT8_MAX, np.int8
        )
        a[:] = lut[a.astype(np.int64) - INT8_MIN]
        z = v["residual"][:n]
        z[:] = residual_sum(params.fc2.requantized(a), hidden[rows], params.residual)
        hidden[rows] = layer_norm(z, params.layer_norm)
    return hidden


# ---------------------------------------------------------------------------------------------
# Float reference and calibration (offline)
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class MLPQuant:
    input: TensorQuant  # hidden state in (asymmetric)
    fc1_output: TensorQuant  # activation input (asymmetric: it only indexes the table)
    activation: TensorQuant  # activation output (asymmetric: GELU is [-0.17, max])
    z_max_abs: float
    output: TensorQuant


@dataclasses.dataclass(frozen=True, eq=False)
class MLPFloat:
    w1: np.ndarray  # [ffn, d]
    b1: np.ndarray
    w2: np.ndarray  # [d, ffn]
    b2: np.ndarray
    gamma: np.ndarray
    beta: np.ndarray
    activation: str = "gelu"
    eps: float = 1e-12

    @property
    def hidden(self) -> int:
        return int(self.w1.shape[1])

    @property
    def ffn(self) -> int:
        return int(self.w1.shape[0])

    def forward(self, x: np.ndarray, observed: dict | None = None) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        f1 = x @ self.w1.T + self.b1
        a = ACTIVATIONS[self.activation](f1)
        z = a @ self.w2.T + self.b2 + x
        y = float_layer_norm(z, self.gamma, self.beta, self.eps)
        if observed is not None:
            observed.update(fc1_output=f1, activation=a, z=z, output=y)
        return y

    def calibrate(self, x: np.ndarray, input_quant: TensorQuant) -> MLPQuant:
        seen: dict = {}
        self.forward(x, seen)
        return MLPQuant(
            input=input_quant,
            fc1_output=TensorQuant.observe(seen["fc1_output"], symmetric=False),
            activation=TensorQuant.observe(seen["activation"], symmetric=False),
            z_max_abs=float(np.abs(seen["z"]).max()),
            output=TensorQuant.observe(seen["output"], symmetric=False),
        )


def _reference(params: MLPParams, inputs, out: np.ndarray, scratch=None) -> np.ndarray:
    return run(params, inputs[0].reshape(params.seq_len, params.hidden), scratch)


DEFINITION = OpDef(
    code=OP,
    kind="mlp",
    c_name="mlp",
    params_type=MLPParams,
    runtime_inputs=("hidden",),
    output="hidden",
    in_place=True,
    per_layer=True,
    tiled=True,
    reference=_reference,
    scratch_bytes=lambda p: scratch_bytes(p.seq_len, p.hidden, p.ffn, p.tile),
    plan_scratch=lambda s, dims, t: scratch_bytes(s, dims.hidden, dims.ffn, t),
    buffer_size_args=lambda p: (p.seq_len, p.hidden, p.ffn, p.tile),
    output_shape=hidden_shape,
    cost_features=lambda s, dims, t: kernel_events.mlp_features(s, dims.hidden, dims.ffn, t),
    weight_traffic=lambda s, dims, t: kernel_events.mlp_weight_traffic(s, dims.hidden, dims.ffn, t, dims.weight_bits),
    linear_layers=LAYERS,
)
