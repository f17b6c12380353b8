"""The shape of a causal decoder LM: GPT-2 and GPT-Neo, read from a Hugging Face config.json.

Both families are one architecture here: learned positions, pre-LayerNorm blocks (attention, then an MLP
with a GELU), a final LayerNorm and an LM head tied to the token embedding. What differs is carried per
layer, so the model and the ops never ask which family they run:

  attention_scales  what q·k is multiplied by: GPT-2 1/sqrt(head size) (divided again by layer + 1 with
                    `scale_attn_by_inverse_layer_idx`); GPT-Neo 1 (it does not scale)
  windows           None (global attention) or how many positions a query sees, itself included: GPT-Neo's
                    "local" layers see `window_size`
  qkv_bias          GPT-2's fused c_attn has a bias; GPT-Neo's q/k/v projections have none
"""

from __future__ import annotations

import dataclasses
import math

from tflm_mcubert.errors import UserError
from tflm_mcubert.model.config import MAX_PARAMS, SUPPORTED_CHECKPOINTS

# A searched decoder checkpoint's tied table (compress/decoder_search.py): ClusteredLowRankEmbedding.to_arrays
SEARCHED_EMBEDDING_FILE = "searched_embedding.npz"
SEARCHED_KEY = "tflm_mcubert_searched_embedding"  # its config.json's entry: how the table was found

FAMILIES = ("gpt2", "gpt_neo")
# A config.json without model_type still names its class; these are the causal LMs read here.
ARCHITECTURES = {"GPT2LMHeadModel": "gpt2", "GPTNeoForCausalLM": "gpt_neo"}


def decoder_family(raw: dict) -> str | None:
    """The decoder family a config.json describes (its model_type, else its architectures), or None."""
    family = raw.get("model_type")
    if family in FAMILIES:
        return family
    if family is None:
        found = {ARCHITECTURES.get(a) for a in raw.get("architectures") or [] if isinstance(a, str)} - {None}
        return found.pop() if len(found) == 1 else None
    return None


ACTIVATIONS = ("gelu_new", "gelu_pytorch_tanh", "gelu", "relu")


@dataclasses.dataclass(frozen=True)
class DecoderConfig:
    family: str
    vocab_size: int
    max_positions: int
    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int
    activation: str
    layer_norm_eps: float
    attention_scales: tuple[float, ...]
    windows: tuple[int | None, ...]
    qkv_bias: bool

    def __post_init__(self):
        if self.family not in FAMILIES:
            raise UserError(f"decoder family {self.family!r} is not supported (choose from {', '.join(FAMILIES)})")
        for name in ("vocab_size", "max_positions", "hidden_size", "num_layers", "num_heads", "intermediate_size"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise UserError(f"decoder config: {name} must be a positive integer, got {getattr(self, name)!r}")
        if self.hidden_size % self.num_heads:
            raise UserError(
                f"decoder config: hidden size {self.hidden_size} is not a multiple of {self.num_heads} heads"
            )
        if self.activation not in ACTIVATIONS:
            raise UserError(f"decoder config: activation {self.activation!r} (choose from {', '.join(ACTIVATIONS)})")
        if len(self.attention_scales) != self.num_layers or len(self.windows) != self.num_layers:
            raise UserError(f"decoder config: per-layer settings for {self.num_layers} layers expected")
        if any(w is not None and w < 1 for w in self.windows):
            raise UserError("decoder config: a local attention window must be at least 1")
        if self.param_count() > MAX_PARAMS:
            raise UserError(
                f"decoder config: {self.param_count():,} parameters is absurd for this tool (limit {MAX_PARAMS:,}); "
                "refusing before allocating memory"
            )

    @property
    def head_size(self) -> int:
        return self.hidden_size // self.num_heads

    def param_count(self) -> int:
        """Parameters with the LM head tied to the token embedding (stored once)."""
        d, f = self.hidden_size, self.intermediate_size
        attention = 3 * d * d + (3 * d if self.qkv_bias else 0) + d * d + d
        mlp = d * f + f + f * d + d
        per_layer = attention + mlp + 4 * d  # two LayerNorms
        return self.vocab_size * d + self.max_positions * d + self.num_layers * per_layer + 2 * d

    @classmethod
    def from_hf_dict(cls, raw: dict, source: str = "config.json") -> "DecoderConfig":
        """A GPT2LMHeadModel's or GPTNeoForCausalLM's config.json."""
        family = decoder_family(raw)
        try:
            if family == "gpt2":
                return _gpt2(raw)
            if family == "gpt_neo":
                return _gpt_neo(raw)
        except (KeyError, TypeError, ValueError) as err:
            raise UserError(f"{source}: not a readable {family} config ({type(err).__name__}: {err})") from None
        raise UserError(f"{source}: model_type {raw.get('model_type')!r} is not supported: {SUPPORTED_CHECKPOINTS}")


def _gpt2(raw: dict) -> DecoderConfig:
    layers, heads, hidden = int(raw["n_layer"]), int(raw["n_head"]), int(raw["n_embd"])
    if raw.get("add_cross_attention"):
        raise UserError("config.json: a GPT-2 with cross-attention is an encoder-decoder, not a causal LM")
    if not 1 <= heads <= hidden:  # the head size scales the scores: named here, before it divides by zero
        raise UserError(f"decoder config: {heads} heads for a hidden size of {hidden} (1..{max(hidden, 1)} heads)")
    scale = 1.0 / math.sqrt(hidden // heads) if raw.get("scale_attn_weights", True) else 1.0
    by_layer = raw.get("scale_attn_by_inverse_layer_idx", False)
    return DecoderConfig(
        family="gpt2",
        vocab_size=int(raw["vocab_size"]),
        max_positions=int(raw["n_positions"]),
        hidden_size=hidden,
        num_layers=layers,
        num_heads=heads,
        intermediate_size=int(raw.get("n_inner") or 4 * hidden),
        activation=str(raw.get("activation_function", "gelu_new")),
        layer_norm_eps=float(raw.get("layer_norm_epsilon", 1e-5)),
        attention_scales=tuple(scale / (i + 1) if by_layer else scale for i in range(layers)),
        windows=(None,) * layers,
        qkv_bias=True,
    )


def _gpt_neo(raw: dict) -> DecoderConfig:
    layers, hidden = int(raw["num_layers"]), int(raw["hidden_size"])
    kinds = list(raw["attention_layers"])
    if len(kinds) != layers or any(k not in ("global", "local") for k in kinds):
        raise UserError(f"config.json: attention_layers must name 'global' or 'local' for each of {layers} layers")
    window = int(raw.get("window_size", 256))
    return DecoderConfig(
        family="gpt_neo",
        vocab_size=int(raw["vocab_size"]),
        max_positions=int(raw["max_position_embeddings"]),
        hidden_size=hidden,
        num_layers=layers,
        num_heads=int(raw["num_heads"]),
        intermediate_size=int(raw.get("intermediate_size") or 4 * hidden),
        activation=str(raw.get("activation_function", "gelu_new")),
        layer_norm_eps=float(raw.get("layer_norm_epsilon", 1e-5)),
        attention_scales=(1.0,) * layers,  # GPT-Neo does not scale q·k
        windows=tuple(window if k == "local" else None for k in kinds),
        qkv_bias=False,
    )
