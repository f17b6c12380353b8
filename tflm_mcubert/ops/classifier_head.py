"""MCUBERT_CLASSIFIER_HEAD: BERT's pooler and sequence classifier, fused, on the [CLS] row.

    a[c]      = clamp_int8(requantize(bias_p + x[0] . Wp, Mp[c]) + pooler_zero_point)   (tanh index)
    pooled[c] = tanh_lut[a[c] + 128]                                                   (int8)
    logit[j]  = clamp_int8(requantize(bias_c + pooled . Wc, Mc[j]) + logits_zero_point)

Why a custom op rather than TFLM's STRIDED_SLICE + FULLY_CONNECTED + TANH + FULLY_CONNECTED: the
whole model must be bit-exact between the numpy reference and the firmware, and TFLM's int8
FULLY_CONNECTED (double-rounding MultiplyByQuantizedMultiplier) and TANH (its own fixed-point
approximation, which differs between the reference and CMSIS-NN builds) are other arithmetic than
the rest of this contract. Here the head reuses the contract's building blocks (pair4 linear,
single-rounding requantize, a 256-entry table as the activation), costs 4 tensors of weights and
d + 2d bytes of scratch, and reads only row 0 of the hidden state, so no slice is materialised.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tflm_mcubert.ops import contract
from tflm_mcubert.ops.fixed_point import INT8_MAX, INT8_MIN, LUT_SIZE, build_activation_lut, saturate
from tflm_mcubert.ops.layernorm import check_dim
from tflm_mcubert.ops.op_def import OpDef
from tflm_mcubert.ops.linear import Linear
from tflm_mcubert.ops.quantization import TensorQuant
from tflm_mcubert.ops.scratch import LayoutBuilder, ScratchLayout
from tflm_mcubert.ops.validation import OpSpecError, check_array, check_int

OP = contract.CLASSIFIER_HEAD


def scratch_layout(d: int) -> ScratchLayout:
    return (
        LayoutBuilder(OP)
        .add("pooled", (d,), np.int8)  # tanh index, then the pooled vector in place
        .add("widened", (d,), np.int16)  # DSP path: the one activation row as int16
        .build()
    )


def scratch_bytes(d: int) -> int:
    return scratch_layout(d).total_bytes


def _tanh(x: np.ndarray) -> np.ndarray:
    return np.tanh(np.asarray(x, dtype=np.float64))


@dataclasses.dataclass(frozen=True, eq=False)
class ClassifierHeadParams:
    seq_len: int
    hidden: int
    labels: int
    pooler_zero_point: int  # zero point of the tanh table's input
    logits_zero_point: int
    pooler: Linear  # d -> d
    tanh_lut: np.ndarray  # int8[256]
    classifier: Linear  # d -> labels

    def validate(self) -> "ClassifierHeadParams":
        check_int(OP, "seq_len", self.seq_len, 1, contract.MAX_SEQ_LEN)
        d = check_dim(OP, "hidden", check_int(OP, "hidden", self.hidden, 1, contract.MAX_HIDDEN))
        n = check_int(OP, "labels", self.labels, 1, contract.MAX_LABELS)
        check_int(OP, "pooler_zero_point", self.pooler_zero_point, INT8_MIN, INT8_MAX)
        check_int(OP, "logits_zero_point", self.logits_zero_point, INT8_MIN, INT8_MAX)
        for name, shape in (("pooler", (d, d)), ("classifier", (n, d))):
            lin: Linear = getattr(self, name)
            if (lin.out_features, lin.in_features) != shape:
                raise OpSpecError(
                    OP, name, f"expected a {shape[0]} x {shape[1]} layer, got {lin.out_features} x {lin.in_features}"
                )
            lin.validate(OP, name)
        check_array(OP, "tanh_lut", self.tanh_lut, np.int8, (LUT_SIZE,))
        return self

    def options(self) -> dict[str, int]:
        return {
            "seq_len": self.seq_len,
            "hidden": self.hidden,
            "labels": self.labels,
            "pooler_zero_point": self.pooler_zero_point,
            "logits_zero_point": self.logits_zero_point,
        }

    def tensors(self) -> dict[str, np.ndarray]:
        return {
            "pooler_weights": self.pooler.packed_weights,
            "pooler_channels": self.pooler.channels,
            "tanh_lut": self.tanh_lut,
            "classifier_weights": self.classifier.packed_weights,
            "classifier_channels": self.classifier.channels,
        }

    @classmethod
    def from_serialized(cls, options: dict[str, int], tensors: dict[str, np.ndarray]):
        d, n = options["hidden"], options["labels"]
        return cls(
            options["seq_len"],
            d,
            n,
            options["pooler_zero_point"],
            options["logits_zero_point"],
            Linear(d, d, tensors["pooler_weights"], tensors["pooler_channels"]),
            tensors["tanh_lut"],
            Linear(d, n, tensors["classifier_weights"], tensors["classifier_channels"]),
        ).validate()

    @classmethod
    def quantize(
        cls, fw: "ClassifierHeadFloat", quant: "ClassifierHeadQuant", *, seq_len: int
    ) -> "ClassifierHeadParams":
        lut = build_activation_lut(
            _tanh,
            quant.pre_activation.scale,
            quant.pre_activation.zero_point,
            quant.pooled.scale,
            quant.pooled.zero_point,
        )
        return cls(
            seq_len=seq_len,
            hidden=fw.hidden,
            labels=fw.labels,
            pooler_zero_point=quant.pre_activation.zero_point,
            logits_zero_point=quant.logits.zero_point,
            pooler=Linear.from_float(fw.wp, fw.bp, quant.input, quant.pre_activation.scale),
            tanh_lut=lut,
            classifier=Linear.from_float(fw.wc, fw.bc, quant.pooled, quant.logits.scale),
        ).validate()


def run(
    params: ClassifierHeadParams, hidden: np.ndarray, logits: np.ndarray, scratch: np.ndarray | None = None
) -> np.ndarray:
    """Write int8 logits[labels] from row 0 of `hidden` (int8[s, d]); returns `logits`."""
    s, d, n = params.seq_len, params.hidden, params.labels
    check_array(OP, "hidden", hidden, np.int8, (s, d))
    check_array(OP, "logits", logits, np.int8, (n,))
    if not logits.flags.writeable:
        raise OpSpecError(OP, "logits", "must be writable")
    pooled = scratch_layout(d).views(scratch)["pooled"]
    pooled[:] = saturate(
        params.pooler.requantized(hidden[:1])[0] + params.pooler_zero_point, INT8_MIN, INT8_MAX, np.int8
    )
    pooled[:] = params.tanh_lut[pooled.astype(np.int64) - INT8_MIN]
    logits[:] = saturate(
        params.classifier.requantized(pooled[None])[0] + params.logits_zero_point, INT8_MIN, INT8_MAX, np.int8
    )
    return logits


# ---------------------------------------------------------------------------------------------
# Float reference and quantization (offline)
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ClassifierHeadQuant:
    input: TensorQuant  # the final hidden state
    pre_activation: TensorQuant  # pooler dense output (asymmetric: it only indexes the table)
    pooled: TensorQuant  # tanh output
    logits: TensorQuant


@dataclasses.dataclass(frozen=True, eq=False)
class ClassifierHeadFloat:
    wp: np.ndarray  # [d, d]
    bp: np.ndarray
    wc: np.ndarray  # [labels, d]
    bc: np.ndarray

    @property
    def hidden(self) -> int:
        return int(self.wp.shape[1])

    @property
    def labels(self) -> int:
        return int(self.wc.shape[0])

    def forward(self, cls_rows: np.ndarray, observed: dict | None = None) -> np.ndarray:
        """Logits [n, labels] of [CLS] rows [n, d]."""
        x = np.asarray(cls_rows, dtype=np.float64)
        pre = x @ self.wp.T + self.bp
        pooled = _tanh(pre)
        logits = pooled @ self.wc.T + self.bc
        if observed is not None:
            observed.update(pre_activation=pre, pooled=pooled, logits=logits)
        return logits


def tanh_output_quant() -> TensorQuant:
    """tanh lies in [-1, 1]: a fixed symmetric scale needs no calibration and never clips."""
    return TensorQuant(1.0 / INT8_MAX, 0)


def _reference(params: ClassifierHeadParams, inputs, out: np.ndarray, scratch=None) -> np.ndarray:
    return run(params, inputs[0].reshape(params.seq_len, params.hidden), out.reshape(-1), scratch)


DEFINITION = OpDef(
    code=OP,
    kind="head",
    c_name="classifier_head",
    params_type=ClassifierHeadParams,
    runtime_inputs=("hidden",),
    output="logits",
    in_place=False,
    per_layer=False,
    tiled=False,
    reference=_reference,
    scratch_bytes=lambda p: scratch_bytes(p.hidden),
    buffer_size_args=lambda p: (p.seq_len, p.hidden, p.labels),
    output_shape=lambda p: (1, p.labels),
)
