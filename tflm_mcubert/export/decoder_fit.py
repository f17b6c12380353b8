"""`export --weight-bits auto` for a decoder: the fewest matrices at int4 that keep the tied word table as it
is (dense, or as `search` stored it) within the board's Flash, the least sensitive among as few; when even
every matrix at int4 leaves too little, all are int4 and the export compresses the table into what is left.

A matrix's sensitivity is the encoder's measure (export/board_fit.py): the mean |logit difference| of the
model with that matrix alone at int4 against all int8, over the first positions of a few calibration
sequences. Calibration propagates in float, so one matrix's quantization does not depend on the others':
the model calibrated with one matrix at int4 is the int8 model with that matrix replaced.
"""

from __future__ import annotations

import numpy as np

from tflm_mcubert.console import log
from tflm_mcubert.export.board_fit import fewest_int4_matrices, widths_report
from tflm_mcubert.ops.linear import stored_size
from tflm_mcubert.ops.widths import Widths
from tflm_mcubert.quantize.quantized_decoder import calibrate_decoder

SENSITIVITY_SEQUENCES = 4  # calibration sequences the logits are compared on
SENSITIVITY_POSITIONS = 16  # positions of each
CALIBRATION_SEQUENCES = 8  # what every variant is calibrated on (the same for all, so only the width differs)


def int4_savings(decoder) -> dict[str, int]:
    """Each matrix ("layer0.causal_attention.query") of a quantized decoder: the Flash int4 saves on it."""
    saved = {}
    for node in decoder.nodes():
        for layer in node.op.linear_layers:
            linear = getattr(node.params, layer)
            out, inputs = linear.out_features, linear.in_features
            saved[f"{node.name}.{layer}"] = stored_size(out, inputs, 8) - stored_size(out, inputs, 4)
    return saved


def _logits(decoder, sample) -> list[np.ndarray]:
    out = []
    for sequence in sample:
        caches = decoder.new_caches()
        out += [decoder.logits(int(token), position, caches) for position, token in enumerate(sequence)]
    return out


def matrix_sensitivity(model, sequences, matrices: list[str], top_k: int) -> dict[str, float]:
    """Per matrix: the mean |logit difference| with it alone at int4, against all int8."""
    calibration = sequences[:CALIBRATION_SEQUENCES]
    sample = [s[:SENSITIVITY_POSITIONS] for s in sequences[:SENSITIVITY_SEQUENCES]]
    reference = _logits(calibrate_decoder(model, calibration, top_k=top_k), sample)
    sensitivity = {}
    for name in matrices:
        one = calibrate_decoder(model, calibration, top_k=top_k, widths=Widths.per_matrix({name: 4}))
        difference = np.mean([np.abs(a - b).mean() for a, b in zip(_logits(one, sample), reference)])
        sensitivity[name] = round(float(difference), 6)
    return sensitivity


def auto_widths(model, sequences, top_k: int, int8_model, missing: int) -> tuple[Widths, dict]:
    """The widths `--weight-bits auto` chooses and report.json's "weight_widths". `int8_model`: the model
    quantized at int8 (its matrices' shapes); `missing`: the bytes the table as it is misses by at int8."""
    saved = int4_savings(int8_model)
    matrices = list(saved)
    if missing <= 0:
        return Widths.uniform(8), _report(matrices, [], None, missing)
    log(f"--weight-bits auto: measuring each of {len(matrices)} matrices' int4 sensitivity ...")
    sensitivity = matrix_sensitivity(model, sequences, matrices, top_k)
    chosen = fewest_int4_matrices(matrices, sensitivity, saved, missing)
    if chosen is None or len(chosen) == len(matrices):
        return Widths.uniform(4), _report(matrices, matrices, sensitivity, missing)
    return Widths.per_matrix(dict.fromkeys(chosen, 4)), _report(matrices, chosen, sensitivity, missing)


def _report(matrices, int4, sensitivity, missing: int) -> dict:
    return widths_report(
        matrices,
        int4,
        sensitivity,
        table_missing_bytes_at_int8=max(missing, 0),
        sensitivity_note="mean |logit difference| with that matrix alone at int4 against all int8, on the first "
        "positions of calibration sequences; int4 matrices are the fewest that keep the word table as it is within "
        "the Flash (all when none do: the table is then compressed), the least sensitive among as few",
    )
