"""Per-op PTQ: how calibration runs an encoder op in float and turns its observed ranges into the
op's integer parameters. The quantizer side of an op (as ExecuTorch keeps `quantizer/` apart from
`ops/`): one entry per op that calibration handles, keyed by the op's kind; the op's own offline
path (`<Op>Params.quantize`) does the arithmetic.

    forward(float layer, x, valid, name, see) -> y      the float op, reporting `name.<tensor>` ranges
    params(float layer, name, ranges, input, output, seq_len, mask_mode, choose, weight_bits) -> validated params

`weight_bits` is the storage width of the op's linear layers: 4 or 8 for all (SPEC.md 3.1.1), or a tuple
with one per layer (3.1.2).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from tflm_mcubert.ops.attention import AttentionParams, AttentionQuant, choose_score_scale
from tflm_mcubert.ops.mlp import MLPParams, MLPQuant
from tflm_mcubert.ops.op_def import OpDef
from tflm_mcubert.ops.topology import ENCODER
from tflm_mcubert.quantize.float_model import attention_forward, mlp_forward


@dataclasses.dataclass(frozen=True)
class Choose:
    """The calibration method's (scale, zero point) choice for a range: symmetric or asymmetric."""

    symmetric: Callable[[Any], Any]
    asymmetric: Callable[[Any], Any]


@dataclasses.dataclass(frozen=True)
class OpQuantizer:
    op: OpDef
    forward: Callable[..., Any]
    params: Callable[..., Any]


def _attention_params(fw, name, ranges, input_quant, output, seq_len, mask_mode, choose: Choose, weight_bits=8):
    aq = AttentionQuant(
        input=input_quant,
        query=choose.symmetric(ranges[f"{name}.query"]),
        key=choose.symmetric(ranges[f"{name}.key"]),
        value=choose.symmetric(ranges[f"{name}.value"]),
        score_scale=choose_score_scale(ranges[f"{name}.scores"].max_abs),
        context=choose.symmetric(ranges[f"{name}.context"]),
        z_max_abs=ranges[f"{name}.z"].max_abs,
        output=output,
    )
    return AttentionParams.quantize(fw, aq, seq_len=seq_len, tile=seq_len, mask_mode=mask_mode, weight_bits=weight_bits)


def _mlp_params(fw, name, ranges, input_quant, output, seq_len, mask_mode, choose: Choose, weight_bits=8):
    mq = MLPQuant(
        input=input_quant,
        fc1_output=choose.asymmetric(ranges[f"{name}.fc1_output"]),
        activation=choose.asymmetric(ranges[f"{name}.activation"]),
        z_max_abs=ranges[f"{name}.z"].max_abs,
        output=output,
    )
    return MLPParams.quantize(fw, mq, seq_len=seq_len, tile=seq_len, weight_bits=weight_bits)


QUANTIZERS: dict[str, OpQuantizer] = {
    q.op.kind: q
    for q in (
        # an encoder layer's ops, in order
        OpQuantizer(ENCODER.layer[0], attention_forward, _attention_params),
        OpQuantizer(ENCODER.layer[1], mlp_forward, _mlp_params),
    )
}
