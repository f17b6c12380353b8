"""Hugging Face causal LMs into `DecoderModel`: a GPT2LMHeadModel or GPTNeoForCausalLM checkpoint
directory (or hub id), with numerical parity to `transformers` (tests/model/test_decoder_parity.py).

GPT-2 stores its projections as Conv1D weights [in, out] (Keras' layout) and fuses q, k and v into one
c_attn; GPT-Neo stores nn.Linear weights [out, in] and separate q/k/v_proj without bias. Both tie
lm_head to the token embedding; an untied lm_head is refused (the tied head is what the clustered table
computes). Causal-mask buffers are dropped; any other unknown, missing or mis-shaped tensor is refused
by name.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from tflm_mcubert.errors import UserError
from tflm_mcubert.model.decoder import DecoderModel, build_decoder
from tflm_mcubert.model.decoder_config import DecoderConfig
from tflm_mcubert.model.hf_import import CONFIG_FILE, read_hf_weights, resolve_checkpoint_dir

_BUFFERS = (".attn.bias", ".attn.masked_bias", ".attn.attention.bias", ".attn.attention.masked_bias")


def load_decoder(source: str | Path) -> tuple[DecoderModel, Path]:
    """(model, checkpoint directory) of a GPT-2 / GPT-Neo causal LM checkpoint."""
    ckpt = resolve_checkpoint_dir(source)
    config_path = ckpt / CONFIG_FILE
    if not config_path.is_file():
        raise UserError(f"{ckpt}: no {CONFIG_FILE}")
    try:
        raw = json.loads(config_path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as err:
        raise UserError(f"{config_path}: not valid JSON ({err})") from None
    if not isinstance(raw, dict):
        raise UserError(f"{config_path}: expected a JSON object")
    config = DecoderConfig.from_hf_dict(raw, str(config_path))
    weights = {k.removeprefix("transformer."): v for k, v in read_hf_weights(ckpt).items()}
    weights = {k: v for k, v in weights.items() if not k.endswith(_BUFFERS)}
    _check_tied_head(weights, str(ckpt))
    check_dimensions(config, weights, str(ckpt))
    model = build_decoder(config)
    assign_decoder_weights(model, weights, source=str(ckpt))
    return model, ckpt


def _check_tied_head(weights: dict, source: str) -> None:
    head = weights.pop("lm_head.weight", None)
    if head is not None and not np.array_equal(head, weights.get("wte.weight")):
        raise UserError(f"{source}: lm_head is not tied to the token embedding (this tool computes the tied head)")


def check_dimensions(config: DecoderConfig, weights: dict, source: str) -> None:
    """The config's sizes against the tensors before any allocation: a config that claims more than the
    file holds would otherwise build a model of the size it claims."""
    d = config.hidden_size
    for name, shape in (("wte.weight", (config.vocab_size, d)), ("wpe.weight", (config.max_positions, d))):
        if name not in weights:
            raise UserError(f"{source}: not a {config.family} decoder of this config: missing tensors ['{name}']")
        if tuple(np.shape(weights[name])) != shape:
            raise UserError(f"{source}: {name} has shape {tuple(np.shape(weights[name]))}, the config needs {shape}")
    layers = {int(k.split(".")[1]) for k in weights if k.startswith("h.") and k.split(".")[1].isdigit()}
    if layers != set(range(config.num_layers)):
        raise UserError(f"{source}: the config has {config.num_layers} layers, the weights {len(layers)}")
    fc = weights.get("h.0.mlp.c_fc.weight")
    if fc is not None and config.intermediate_size not in np.shape(fc):
        raise UserError(
            f"{source}: h.0.mlp.c_fc.weight has shape {tuple(np.shape(fc))}, the config's inner size is "
            f"{config.intermediate_size}"
        )


def decoder_slots(model: DecoderModel) -> dict[str, tuple[object, bool]]:
    """HF name (without `transformer.`) -> (Keras variable, transpose an nn.Linear weight)."""
    c = model.config
    slots = {"wte.weight": (model.token_embeddings, False), "wpe.weight": (model.position_embeddings, False)}
    slots |= {"ln_f.weight": (model.ln_f.gamma, False), "ln_f.bias": (model.ln_f.beta, False)}
    for i, block in enumerate(model.blocks):
        p = f"h.{i}."
        slots |= {p + "ln_1.weight": (block.ln_1.gamma, False), p + "ln_1.bias": (block.ln_1.beta, False)}
        slots |= {p + "ln_2.weight": (block.ln_2.gamma, False), p + "ln_2.bias": (block.ln_2.beta, False)}
        linear = c.family == "gpt_neo"  # nn.Linear [out, in]; GPT-2's Conv1D is [in, out] like Keras
        slots |= {
            p + "mlp.c_fc.weight": (block.fc.kernel, linear),
            p + "mlp.c_fc.bias": (block.fc.bias, False),
            p + "mlp.c_proj.weight": (block.proj.kernel, linear),
            p + "mlp.c_proj.bias": (block.proj.bias, False),
        }
        if linear:
            a = p + "attn.attention."
            slots |= {a + f"{n}_proj.weight": (getattr(block, layer).kernel, True)
                      for n, layer in (("q", "query"), ("k", "key"), ("v", "value"))}  # fmt: skip
            slots |= {a + "out_proj.weight": (block.output_dense.kernel, True),
                      a + "out_proj.bias": (block.output_dense.bias, False)}  # fmt: skip
        else:  # c_attn (fused q, k, v) is split by assign_decoder_weights
            slots |= {p + "attn.c_proj.weight": (block.output_dense.kernel, False),
                      p + "attn.c_proj.bias": (block.output_dense.bias, False)}  # fmt: skip
    return slots


def _split_fused_qkv(weights: dict, model: DecoderModel, source: str) -> dict:
    """GPT-2's c_attn [d, 3d] (+ bias [3d]) as the three projections' weights, under their own names."""
    out, d = dict(weights), model.config.hidden_size
    for i in range(len(model.blocks)):
        for kind, shape in (("weight", (d, 3 * d)), ("bias", (3 * d,))):
            fused = out.pop(f"h.{i}.attn.c_attn.{kind}", None)
            if fused is None:
                continue  # named as missing by the caller
            if tuple(np.shape(fused)) != shape:
                raise UserError(
                    f"{source}: h.{i}.attn.c_attn.{kind} has shape {tuple(np.shape(fused))}, the config needs {shape}"
                )
            for name, part in zip(("query", "key", "value"), np.split(fused, 3, axis=-1)):
                out[f"h.{i}.attn.{name}.{kind}"] = part
    return out


def assign_decoder_weights(model: DecoderModel, weights: dict, *, source: str) -> None:
    """Copy HF weights into `model`, refusing unknown, missing or mis-shaped tensors by name."""
    slots = decoder_slots(model)
    if model.config.family == "gpt2":
        weights = _split_fused_qkv(weights, model, source)
        for i, block in enumerate(model.blocks):
            for name in ("query", "key", "value"):
                layer = getattr(block, name)
                slots[f"h.{i}.attn.{name}.weight"] = (layer.kernel, False)
                slots[f"h.{i}.attn.{name}.bias"] = (layer.bias, False)
    unknown, missing = sorted(set(weights) - set(slots)), sorted(set(slots) - set(weights))
    if unknown or missing:
        what = (f"unknown tensors {unknown[:4]}" if unknown else "") + (
            f"{'; ' if unknown else ''}missing tensors {missing[:4]}" if missing else ""
        )
        raise UserError(f"{source}: not a {model.config.family} decoder of this config: {what}")
    for name, (variable, transpose) in slots.items():
        array = np.asarray(weights[name], np.float32)
        array = array.T if transpose else array
        if tuple(array.shape) != tuple(variable.shape):
            raise UserError(f"{source}: {name} has shape {array.shape}, the config needs {tuple(variable.shape)}")
        variable.assign(array)
