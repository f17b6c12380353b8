"""Post-training calibration: activation ranges from the float model, then every op's integer params.

    ranges  = observe(float model on calibration samples)     one ActivationRange per quantized tensor
    quant   = choose(range)                                    min/max, or a percentile clip
    params  = <Op>Params.quantize(float weights, quant)        the ops' own offline path

Which inputs each op is calibrated on (`propagation`):

  float       every op sees the float model's activations (classic PTQ). Default: on MiniLM-L6
              the two are within 0.002 of each other and this one is faster
              (bench/mcubert_fidelity.py);
  quantized   op k sees the *dequantized int8 output* of the int8 ops 0..k-1 (sequential PTQ):
              its ranges then cover what the deployed op will actually receive, drift included.

Hidden states (every LayerNorm output) are quantized per channel, each channel's scale a power of
two over the pre-norm scale of the op that consumes it (layernorm.hidden_quant), so choosing op k's
output quantization takes op k+1's calibrated pre-norm peak: its float run on op k's float outputs.

Only valid (unmasked) tokens enter a range: padded rows are masked as keys, so whatever they hold
cannot reach a real token, and the hidden state of [PAD] rows would otherwise set the scale.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable, Mapping

import numpy as np

from tflm_mcubert.errors import UserError
from tflm_mcubert.ops import contract, embedding
from tflm_mcubert.ops.classifier_head import ClassifierHeadParams, ClassifierHeadQuant, tanh_output_quant
from tflm_mcubert.ops.embedding import EmbeddingParams
from tflm_mcubert.ops.layernorm import hidden_quant
from tflm_mcubert.ops.op_def import OpDef
from tflm_mcubert.ops.quantization import TensorQuant
from tflm_mcubert.quantize.float_model import FloatBert
from tflm_mcubert.quantize.op_quantizers import QUANTIZERS, Choose
from tflm_mcubert.ops.topology import ENCODER
from tflm_mcubert.ops.widths import Widths
from tflm_mcubert.quantize.quantized_model import QuantizedBert

METHODS = ("minmax", "percentile")
PROPAGATIONS = ("float", "quantized")
# Values kept per tensor for percentiles: plenty for a 99.99th percentile, bounded memory.
_RESERVOIR = 1 << 18


@dataclasses.dataclass(frozen=True)
class CalibrationSettings:
    method: str = "minmax"
    percentile: float = 99.99  # used by method "percentile" (two-sided for asymmetric)
    propagation: str = "float"
    seed: int = 0
    embedding_bits: int = 8  # storage of the embedding's word tables: 8 (int8) or 4 (int4, SPEC 4.1.1)
    widths: Widths = Widths()  # of every attention and MLP matrix: int8, int4 (w4row, SPEC 3.1.1) or per matrix

    def __post_init__(self):
        if self.embedding_bits not in (4, 8):
            raise UserError(f"embedding bits {self.embedding_bits!r} (choose 4 or 8)")
        if self.method not in METHODS:
            raise UserError(f"calibration method {self.method!r} (choose from {', '.join(METHODS)})")
        if self.propagation not in PROPAGATIONS:
            raise UserError(f"propagation {self.propagation!r} (choose from {', '.join(PROPAGATIONS)})")
        if not 50.0 < self.percentile <= 100.0:
            raise UserError(f"percentile {self.percentile} must be in (50, 100]")


class ActivationRange:
    """Exact min / max / max |x| of everything observed, plus a uniform subsample for percentiles
    (every value is kept with probability p; when the pool overflows, half of it is dropped at
    random and p halves, so the pool stays a uniform sample of everything seen)."""

    def __init__(self, rng: np.random.Generator):
        self._rng = rng
        self.lo, self.hi, self.max_abs = np.inf, -np.inf, 0.0
        self._pool: list[np.ndarray] = []
        self._pool_size = 0
        self._keep = 1.0
        self._seen = 0

    def add(self, values: np.ndarray) -> None:
        flat = np.asarray(values, np.float64).reshape(-1)
        if not flat.size:
            return
        self._seen += flat.size
        self.lo, self.hi = min(self.lo, float(flat.min())), max(self.hi, float(flat.max()))
        self.max_abs = max(self.max_abs, float(np.abs(flat).max()))
        kept = flat if self._keep == 1.0 else flat[self._rng.random(flat.size) < self._keep]
        self._pool.append(kept)
        self._pool_size += kept.size
        while self._pool_size > _RESERVOIR:
            pool = np.concatenate(self._pool)
            pool = pool[self._rng.random(pool.size) < 0.5]
            self._pool, self._pool_size, self._keep = [pool], pool.size, self._keep / 2

    @property
    def sample(self) -> np.ndarray:
        if len(self._pool) > 1:
            self._pool = [np.concatenate(self._pool)]
        return self._pool[0]

    @property
    def empty(self) -> bool:
        return self._seen == 0

    def percentile(self, q: float) -> float:
        return float(np.percentile(self.sample, q))


class RangeSet:
    def __init__(self, seed: int):
        self._rng = np.random.default_rng(seed)
        self.ranges: dict[str, ActivationRange] = {}

    def observe(self, name: str, values: np.ndarray) -> None:
        self.ranges.setdefault(name, ActivationRange(self._rng)).add(values)

    def __getitem__(self, name: str) -> ActivationRange:
        r = self.ranges.get(name)
        if r is None or r.empty:
            raise ValueError(f"calibration saw no values of {name}")
        return r


def symmetric(r: ActivationRange, settings: CalibrationSettings) -> TensorQuant:
    if settings.method == "percentile":
        return TensorQuant.symmetric(float(np.percentile(np.abs(r.sample), settings.percentile)))
    return TensorQuant.symmetric(r.max_abs)


def asymmetric(r: ActivationRange, settings: CalibrationSettings) -> TensorQuant:
    if settings.method == "percentile":
        return TensorQuant.asymmetric(r.percentile(100.0 - settings.percentile), r.percentile(settings.percentile))
    return TensorQuant.asymmetric(r.lo, r.hi)


# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ModelInput:
    """One calibration/evaluation sequence in the model's vocabulary."""

    input_ids: np.ndarray  # int32[s]
    token_type_ids: np.ndarray  # int32[s]
    valid: np.ndarray  # bool[s]

    def mask(self, mask_mode: int) -> np.ndarray:
        if mask_mode == contract.MASK_MODE_KEY_MASK:
            return self.valid.astype(np.int8)
        return np.array([int(self.valid.sum())], np.int32)


def model_inputs(
    samples: Iterable[Mapping[str, np.ndarray]], seq_len: int, permutation: np.ndarray | None = None
) -> list[ModelInput]:
    """Tokenizer output ({input_ids, attention_mask, token_type_ids} int [1, s] in the original
    vocabulary) -> ModelInputs (ids permuted for a compressed embedding)."""
    out = []
    for n, sample in enumerate(samples):
        ids = np.asarray(sample["input_ids"]).reshape(-1)
        if ids.size != seq_len:
            raise UserError(f"sample {n}: {ids.size} tokens, the model takes {seq_len}")
        mask = np.asarray(sample.get("attention_mask", np.ones_like(ids))).reshape(-1)
        types = np.asarray(sample.get("token_type_ids", np.zeros_like(ids))).reshape(-1)
        if permutation is not None:
            ids = permutation[ids]
        out.append(ModelInput(ids.astype(np.int32), types.astype(np.int32), mask != 0))
    return out


def calibrate(
    model: FloatBert,
    inputs: list[ModelInput],
    *,
    seq_len: int,
    tiles: Mapping[str, int] | None = None,
    mask_mode: int = contract.MASK_MODE_KEY_MASK,
    settings: CalibrationSettings = CalibrationSettings(),
) -> tuple[QuantizedBert, RangeSet]:
    """The int8 model of `model` at `seq_len` with the given tiles ("attention", "mlp"; default s:
    the tiles change memory and speed, never the bytes, and the reference is fastest untiled)."""
    if not inputs:
        raise UserError("calibration needs at least one sample")
    run = _CalibrationRun(model, inputs, seq_len, mask_mode, settings)
    emb_params, hidden_quants = run.embedding()
    stage_params = []
    for k, (quantizer, fw, name) in enumerate(run.stages):
        outs = run.stage_outputs(k)
        output = run.output_quant(f"{name}.output", outs, k + 1)
        params = quantizer.params(
            fw,
            name,
            run.ranges,
            run.current,
            output,
            seq_len,
            mask_mode,
            run.choose,
            settings.widths.of_op(name, quantizer.op.linear_layers),
        )
        stage_params.append(params)
        run.advance(quantizer.op, params, output, outs)
        hidden_quants.append(output)
    per_layer = len(ENCODER.layer)
    layers = [tuple(stage_params[i : i + per_layer]) for i in range(0, len(stage_params), per_layer)]
    head, logits_quant = run.head()
    quantized_model = QuantizedBert(emb_params, tuple(layers), head, tuple(hidden_quants), logits_quant)
    if tiles:
        quantized_model = quantized_model.with_tiles(tiles)
    return quantized_model, run.ranges


class _CalibrationRun:
    """One pass over the stages (embedding, attention and MLP per layer, head), keeping what the
    next stage needs: the current hidden quantization, the float inputs `xs` of the next stage,
    the int8 states (quantized propagation) and the next stage's float outputs computed ahead."""

    def __init__(self, model: FloatBert, inputs: list[ModelInput], seq_len: int, mask_mode: int, settings):
        self.model, self.inputs, self.seq_len, self.mask_mode, self.settings = (
            model,
            inputs,
            seq_len,
            mask_mode,
            settings,
        )
        self.ranges = RangeSet(settings.seed)
        self.quantized = settings.propagation == "quantized"
        self.choose = Choose(lambda r: symmetric(r, settings), lambda r: asymmetric(r, settings))
        self.stages = [
            (QUANTIZERS[op.kind], fw, op.node_name(index))
            for index, layer in enumerate(model.layers)
            for op, fw in zip(ENCODER.layer, layer, strict=True)
        ]
        self.ahead: list[np.ndarray] = []  # float outputs of the next stage, computed to size its input
        self.xs: list[np.ndarray] = []  # float inputs of the next stage
        self.states: list[np.ndarray] = []  # int8 hidden states (quantized propagation)
        self.current: TensorQuant | None = None

    def forward(self, stage, xs, see) -> list[np.ndarray]:
        quantizer, fw, name = stage
        return [quantizer.forward(fw, x, sample.valid, name, see) for x, sample in zip(xs, self.inputs)]

    def output_quant(self, name: str, outs: list[np.ndarray], consumer: int) -> TensorQuant:
        """Per-channel quantization of the hidden state `outs` (layernorm.hidden_quant): its channel
        scales are powers of two over the consuming stage's pre-norm scale, so that stage's float
        run on `outs` comes first (with float propagation it *is* that stage's run)."""
        peak = None
        if consumer < len(self.stages):
            seen = {"z": 0.0}

            def see(key, values):
                if not self.quantized:
                    self.ranges.observe(key, values)
                if key.endswith(".z"):
                    seen["z"] = max(seen["z"], float(np.abs(values).max(initial=0.0)))

            self.ahead = self.forward(self.stages[consumer], outs, see)
            peak = seen["z"]
        rows = np.concatenate([x[sample.valid] for x, sample in zip(outs, self.inputs)])
        if not rows.size:
            raise ValueError(f"calibration saw no values of {name}")
        if self.settings.method == "percentile":
            lo = np.percentile(rows, 100.0 - self.settings.percentile, axis=0)
            hi = np.percentile(rows, self.settings.percentile, axis=0)
        else:
            lo, hi = rows.min(axis=0), rows.max(axis=0)
        return hidden_quant(lo, hi, peak)

    def embedding(self) -> tuple[EmbeddingParams, list[TensorQuant]]:
        """The embedding's params (its output scale comes from the float embedding: the op's input is
        ids) and the hidden quantizations so far."""
        emb_float = self.model.embedding_for(self.seq_len)
        xs = []
        for sample in self.inputs:
            x = emb_float.forward(sample.input_ids, sample.token_type_ids)
            self.ranges.observe("embedding.output", x[sample.valid])
            xs.append(x)
        self.current = self.output_quant("embedding.output", xs, 0)
        emb_params = EmbeddingParams.quantize(emb_float, self.current, self.settings.embedding_bits)
        self.xs = xs
        if self.quantized:
            for sample in self.inputs:
                h = np.zeros((self.seq_len, self.model.hidden), np.int8)
                embedding.run(emb_params, sample.input_ids, sample.token_type_ids, h)
                self.states.append(h)
            self.xs = [self.current.dequantize(h) for h in self.states]
        return emb_params, [self.current]

    def stage_outputs(self, k: int) -> list[np.ndarray]:
        """Float outputs of stage k: run now on the int8 states, or already run ahead (float)."""
        if self.quantized:
            return self.forward(self.stages[k], self.xs, self.ranges.observe)
        return list(self.ahead)

    def advance(self, op: OpDef, params, output: TensorQuant, outs: list[np.ndarray]) -> None:
        """The next stage's inputs: the int8 states run through this stage, or its float outputs `outs`."""
        self.current = output
        if self.quantized:
            for h, sample in zip(self.states, self.inputs):
                values = {"hidden": h, "mask": sample.mask(self.mask_mode)}
                op.reference(params, [values[name] for name in op.runtime_inputs], h, None)
            self.xs = [self.current.dequantize(h) for h in self.states]
        else:
            self.xs = outs

    def head(self):
        """(head params, logits quantization), or (None, None) without a classifier."""
        if self.model.head is None:
            return None, None
        for x in self.xs:
            seen: dict = {}
            self.model.head.forward(x[:1], seen)
            for key in ("pre_activation", "logits"):
                self.ranges.observe(f"head.{key}", seen[key])
        hq = ClassifierHeadQuant(
            input=self.current,
            pre_activation=asymmetric(self.ranges["head.pre_activation"], self.settings),
            pooled=tanh_output_quant(),
            logits=asymmetric(self.ranges["head.logits"], self.settings),
        )
        return ClassifierHeadParams.quantize(self.model.head, hq, seq_len=self.seq_len), hq.logits
