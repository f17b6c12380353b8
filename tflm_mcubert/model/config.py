"""BERT hyper-parameters: presets, validation, and the mapping from a Hugging Face `config.json`."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

from tflm_mcubert.errors import UserError

# A float32 model whose parameters exceed this is refused before anything is allocated: no
# checkpoint that could ever reach a microcontroller comes anywhere near it.
MAX_PARAMS = 2_000_000_000
# What every refusal of a checkpoint's kind names.
SUPPORTED_CHECKPOINTS = (
    "this tool reads BERT encoders (model_type bert: BertModel, BertForSequenceClassification) and GPT-2 / "
    "GPT-Neo decoders (model_type gpt2 / gpt_neo: GPT2LMHeadModel, GPTNeoForCausalLM)"
)

# Activations we implement exactly (HF names). "gelu" in HF BERT is the exact erf form.
SUPPORTED_ACTIVATIONS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu")


@dataclasses.dataclass(frozen=True)
class BertConfig:
    vocab_size: int = 30522
    hidden_size: int = 128
    num_hidden_layers: int = 2
    num_attention_heads: int = 2
    intermediate_size: int = 512
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    hidden_act: str = "gelu"
    pad_token_id: int = 0
    # None: a bare BertModel (no classifier). An int: BertForSequenceClassification.
    num_labels: int | None = None

    @property
    def head_size(self) -> int:
        return self.hidden_size // self.num_attention_heads

    def validate(self) -> "BertConfig":
        """Refuse configs that HF would refuse or that cannot fit in memory, before allocating."""
        for name in (
            "vocab_size",
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "intermediate_size",
            "max_position_embeddings",
            "type_vocab_size",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise UserError(f"config: {name} must be a positive integer, got {value!r}")
        if self.hidden_size % self.num_attention_heads:
            raise UserError(
                f"config: hidden_size {self.hidden_size} is not a multiple of "
                f"num_attention_heads {self.num_attention_heads}"
            )
        if self.hidden_act not in SUPPORTED_ACTIVATIONS:
            raise UserError(
                f"config: hidden_act {self.hidden_act!r} is not supported "
                f"(supported: {', '.join(SUPPORTED_ACTIVATIONS)})"
            )
        if self.num_labels is not None and (not isinstance(self.num_labels, int) or self.num_labels <= 0):
            raise UserError(f"config: num_labels must be a positive integer, got {self.num_labels!r}")
        if not (0 < float(self.layer_norm_eps) < 1):
            raise UserError(f"config: layer_norm_eps {self.layer_norm_eps!r} is out of range")
        if self.param_count() > MAX_PARAMS:
            raise UserError(
                f"config: {self.param_count():,} parameters is absurd for this tool "
                f"(limit {MAX_PARAMS:,}); refusing before allocating memory"
            )
        return self

    def embedding_param_count(self) -> int:
        """Word + position + token-type tables and the embedding LayerNorm."""
        d = self.hidden_size
        return (self.vocab_size + self.max_position_embeddings + self.type_vocab_size) * d + 2 * d

    def encoder_layer_param_count(self) -> int:
        d, f = self.hidden_size, self.intermediate_size
        return 4 * (d * d + d) + (d * f + f) + (f * d + d) + 2 * 2 * d

    def param_count(self) -> int:
        d = self.hidden_size
        total = self.embedding_param_count() + self.num_hidden_layers * self.encoder_layer_param_count()
        total += d * d + d  # pooler
        if self.num_labels:
            total += d * self.num_labels + self.num_labels
        return total

    def to_hf_dict(self) -> dict[str, Any]:
        out = {
            "architectures": ["BertForSequenceClassification" if self.num_labels else "BertModel"],
            "model_type": "bert",
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "intermediate_size": self.intermediate_size,
            "max_position_embeddings": self.max_position_embeddings,
            "type_vocab_size": self.type_vocab_size,
            "layer_norm_eps": self.layer_norm_eps,
            "hidden_act": self.hidden_act,
            "pad_token_id": self.pad_token_id,
        }
        if self.num_labels:
            out["num_labels"] = self.num_labels
        return out

    @classmethod
    def from_hf_dict(cls, raw: dict[str, Any], *, source: str = "config.json") -> "BertConfig":
        model_type = raw.get("model_type")
        if model_type not in (None, "bert"):
            if model_type in ("gpt2", "gpt_neo"):
                raise UserError(
                    f"{source}: model_type {model_type!r} is a decoder; this command reads BERT encoders (model_type "
                    "bert): export, evaluate and search read GPT-2 / GPT-Neo decoders"
                )
            raise UserError(f"{source}: model_type {model_type!r} is not supported: {SUPPORTED_CHECKPOINTS}")
        archs = raw.get("architectures") or []
        if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
            raise UserError(f"{source}: architectures must be a list of class names, got {archs!r}")
        for arch in archs:
            if arch not in ("BertModel", "BertForSequenceClassification", "BertForPreTraining", "BertForMaskedLM"):
                raise UserError(f"{source}: architecture {arch!r} is not supported: {SUPPORTED_CHECKPOINTS}")
        if raw.get("position_embedding_type", "absolute") != "absolute":
            raise UserError(
                f"{source}: position_embedding_type {raw['position_embedding_type']!r} "
                f"is not supported (only 'absolute')"
            )
        is_classifier = "BertForSequenceClassification" in archs
        num_labels = None
        if is_classifier:
            if "num_labels" in raw:
                num_labels = raw["num_labels"]
            elif isinstance(raw.get("id2label"), (dict, list)):
                num_labels = len(raw["id2label"])
            else:
                num_labels = 2
        defaults = cls()
        kwargs = {}
        for field in dataclasses.fields(cls):
            if field.name == "num_labels":
                continue
            kwargs[field.name] = raw.get(field.name, getattr(defaults, field.name))
        if kwargs.get("pad_token_id") is None:
            kwargs["pad_token_id"] = 0
        try:
            return cls(num_labels=num_labels, **kwargs).validate()
        except TypeError as exc:  # wrong-typed fields in a hand-written config.json
            raise UserError(f"{source}: {exc}") from None

    @classmethod
    def from_json_file(cls, path: str | Path) -> "BertConfig":
        path = Path(path)
        try:
            raw = json.loads(path.read_text())
        except FileNotFoundError:
            raise UserError(f"{path}: no config.json (is this a Hugging Face checkpoint directory?)") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise UserError(f"{path}: malformed JSON ({exc})") from None
        if not isinstance(raw, dict):
            raise UserError(f"{path}: expected a JSON object")
        return cls.from_hf_dict(raw, source=str(path))


PRESETS: dict[str, BertConfig] = {
    # Turc et al. 2019, "Well-read students learn better": the BERT-tiny / BERT-mini checkpoints.
    "bert-tiny": BertConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=512),
    "bert-mini": BertConfig(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024),
}


# Any encoder shape by name: layers, hidden width, attention heads, FFN size (`boards --shapes` lists them).
_SHAPE_NAME = re.compile(r"L(\d+)-H(\d+)-A(\d+)-F(\d+)", re.IGNORECASE)


def shape_name(config: BertConfig) -> str:
    """The encoder shape of `config` as `preset` reads it: L<layers>-H<hidden>-A<heads>-F<ffn>."""
    return (
        f"L{config.num_hidden_layers}-H{config.hidden_size}-A{config.num_attention_heads}-F{config.intermediate_size}"
    )


def preset(name: str, *, num_labels: int | None = None) -> BertConfig:
    """A preset by name (bert-tiny, bert-mini), or any shape named as `shape_name` names it."""
    shape = _SHAPE_NAME.fullmatch(name.strip())
    if name in PRESETS:
        base = PRESETS[name]
    elif shape:
        layers, hidden, heads, ffn = (int(v) for v in shape.groups())
        base = BertConfig(
            hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads, intermediate_size=ffn
        )
    else:
        raise UserError(
            f"unknown preset {name!r} (choose from: {', '.join(PRESETS)}, or a shape "
            "L<layers>-H<hidden>-A<heads>-F<ffn> such as L2-H128-A2-F512)"
        )
    return dataclasses.replace(base, num_labels=num_labels).validate()


# [CLS] and [SEP] frame every input: a shorter sequence cannot hold one.
MIN_SEQ_LEN = 2


def check_seq_len(seq_len: int, config: BertConfig | None = None, flag: str = "--seq-len") -> None:
    """A UserError unless `seq_len` holds [CLS] + [SEP] and, given a config, its position table covers it."""
    if seq_len < MIN_SEQ_LEN:
        raise UserError(
            f"{flag} must be at least {MIN_SEQ_LEN} (a sequence holds [CLS] and [SEP] around the text), got {seq_len}"
        )
    if config is not None and seq_len > config.max_position_embeddings:
        raise UserError(f"{flag} {seq_len} exceeds the model's {config.max_position_embeddings} position embeddings")
