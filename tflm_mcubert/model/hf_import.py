"""Hugging Face BERT checkpoints in and out of our Keras `BertModel`.

Only data is read from a checkpoint: `config.json` as JSON, weights as safetensors (numpy) or, for a
`pytorch_model.bin`, through torch's weights-only unpickler, which refuses any pickle that would run code.
`transformers` serves the tokenizer alone: never AutoModel, never remote code.

A checkpoint without pooler weights (BertForMaskedLM, or a BertModel saved with add_pooling_layer=False)
loads with a randomly initialised pooler and a logged warning, as `transformers` does: the encoder is what
matters there, and fine-tuning trains the pooler. A classifier without a pooler is an error, since its
logits would be meaningless.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import pickle
import re
from pathlib import Path
from typing import Any

import keras
import ml_dtypes  # noqa: F401  (registers numpy's bfloat16, so bf16 safetensors load)
import numpy as np

from tflm_mcubert.errors import UserError
from tflm_mcubert.model.bert import BertModel
from tflm_mcubert.model.config import BertConfig

log = logging.getLogger(__name__)

CONFIG_FILE = "config.json"
SAFETENSORS_FILE = "model.safetensors"
SAFETENSORS_INDEX_FILE = "model.safetensors.index.json"
TORCH_BIN_FILE = "pytorch_model.bin"
# Either one is enough for AutoTokenizer to build a BERT tokenizer.
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt")

_HUB_COMMON_PATTERNS = [CONFIG_FILE, *TOKENIZER_FILES, "tokenizer_config.json", "special_tokens_map.json"]
_HUB_SAFETENSORS_PATTERNS = [SAFETENSORS_FILE, SAFETENSORS_INDEX_FILE, "model-*-of-*.safetensors"]

# "owner/name", as on the hub. Bare names ("bert-base-uncased") are not accepted: a mistyped local
# directory would otherwise turn into a confusing network error.
_HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")

# Non-parameter tensors that HF checkpoints may carry: registered buffers and pretraining heads.
_IGNORED_WEIGHT = re.compile(r"embeddings\.(position_ids|token_type_ids)|cls\..+")

_POOLER_WEIGHTS = frozenset({"pooler.dense.weight", "pooler.dense.bias"})


@dataclasses.dataclass
class LoadedCheckpoint:
    model: BertModel
    config: BertConfig
    tokenizer: Any  # a transformers tokenizer, or None when the checkpoint ships no vocab/tokenizer file
    source: str  # what the caller passed (a directory or a hub id)
    architecture: str  # as declared in config.json, e.g. "BertForMaskedLM"; the model built follows config


def load_checkpoint(source: str | Path) -> LoadedCheckpoint:
    """Load a local HF checkpoint directory, or a hub id such as "prajjwal1/bert-tiny"."""
    ckpt_dir = resolve_checkpoint_dir(source)
    config = BertConfig.from_json_file(ckpt_dir / CONFIG_FILE)
    weights = normalise_hf_names(read_hf_weights(ckpt_dir), source=str(ckpt_dir))
    model = BertModel(config)
    assign_hf_weights(model, weights, source=str(ckpt_dir))
    return LoadedCheckpoint(model=model, config=config, tokenizer=load_tokenizer(ckpt_dir, config),
                            source=str(source), architecture=_declared_architecture(ckpt_dir, config))


def save_checkpoint(model: BertModel, out_dir: str | Path, tokenizer=None) -> Path:
    """Write an HF-layout directory that `load_checkpoint` and `transformers.*.from_pretrained` both read."""
    from safetensors.numpy import save_file

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    config_text = json.dumps(model.config.to_hf_dict(), indent=2) + "\n"
    _write_atomically(out / CONFIG_FILE, lambda tmp: tmp.write_text(config_text))
    # transformers refuses safetensors files without a "format" entry in their metadata.
    tensors = to_hf_state_dict(model)
    _write_atomically(out / SAFETENSORS_FILE, lambda tmp: save_file(tensors, tmp, metadata={"format": "pt"}))
    if tokenizer is not None:
        tokenizer.save_pretrained(out)
    return out


# --- Locating the checkpoint -------------------------------------------------------------------------

def resolve_checkpoint_dir(source: str | Path) -> Path:
    path = Path(source).expanduser()
    if path.is_dir():
        return path
    if path.exists():
        raise UserError(f"{path}: is a file; pass the checkpoint directory that contains it")
    # A Path object is always meant as local; only a string may name a hub repository.
    if isinstance(source, str) and _HUB_ID.fullmatch(source):
        return _download_from_hub(source)
    raise UserError(f"{source}: no such checkpoint directory")


def _download_from_hub(repo_id: str) -> Path:
    import huggingface_hub
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError, RepositoryNotFoundError

    try:
        path = Path(huggingface_hub.snapshot_download(
            repo_id, allow_patterns=_HUB_COMMON_PATTERNS + _HUB_SAFETENSORS_PATTERNS))
        if not _has_weights(path):  # older repositories ship only pytorch_model.bin
            path = Path(huggingface_hub.snapshot_download(
                repo_id, allow_patterns=_HUB_COMMON_PATTERNS + [TORCH_BIN_FILE]))
    except RepositoryNotFoundError:  # also covers gated repositories
        raise UserError(f"{repo_id}: no such local directory, and no such (accessible) model "
                        f"on the Hugging Face hub") from None
    except (LocalEntryNotFoundError, HfHubHTTPError, OSError) as exc:
        reason = ("HF_HUB_OFFLINE is set" if huggingface_hub.constants.HF_HUB_OFFLINE
                  else _first_line(exc))
        raise UserError(f"{repo_id}: no such local directory, and the Hugging Face hub could not be "
                        f"reached to download it ({reason}); pass a local checkpoint directory") from None
    return path


def _has_weights(ckpt_dir: Path) -> bool:
    return any((ckpt_dir / name).is_file()
               for name in (SAFETENSORS_FILE, SAFETENSORS_INDEX_FILE, TORCH_BIN_FILE))


def _declared_architecture(ckpt_dir: Path, config: BertConfig) -> str:
    # config.json was already parsed and validated by BertConfig.from_json_file.
    declared = json.loads((ckpt_dir / CONFIG_FILE).read_text()).get("architectures") or []
    if declared:
        return declared[0]
    return "BertForSequenceClassification" if config.num_labels else "BertModel"


# --- Reading tensors ---------------------------------------------------------------------------------

def read_hf_weights(ckpt_dir: Path) -> dict[str, np.ndarray]:
    """Every tensor of the checkpoint, by its HF name; safetensors preferred over pytorch_model.bin."""
    weights: dict[str, np.ndarray] = {}
    for path in _weight_files(ckpt_dir):
        weights.update(_read_safetensors(path) if path.suffix == ".safetensors" else _read_torch_bin(path))
    return weights


def _weight_files(ckpt_dir: Path) -> list[Path]:
    if (ckpt_dir / SAFETENSORS_FILE).is_file():
        return [ckpt_dir / SAFETENSORS_FILE]
    if (ckpt_dir / SAFETENSORS_INDEX_FILE).is_file():
        return _shards_of(ckpt_dir / SAFETENSORS_INDEX_FILE)
    if (ckpt_dir / TORCH_BIN_FILE).is_file():
        return [ckpt_dir / TORCH_BIN_FILE]
    raise UserError(f"{ckpt_dir}: no weights ({SAFETENSORS_FILE}, {SAFETENSORS_INDEX_FILE} "
                    f"or {TORCH_BIN_FILE})")


def _shards_of(index_path: Path) -> list[Path]:
    try:
        weight_map = json.loads(index_path.read_text())["weight_map"]
        shard_names = sorted(set(weight_map.values()))
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, AttributeError) as exc:
        raise UserError(f"{index_path}: malformed shard index ({exc!r})") from None
    shards = []
    for name in shard_names:
        # Shards live next to the index; anything else ("../x") is not a checkpoint we wrote or HF did.
        if not isinstance(name, str) or Path(name).name != name:
            raise UserError(f"{index_path}: shard name {name!r} is not a plain file name")
        if not (index_path.parent / name).is_file():
            raise UserError(f"{index_path}: shard {name} is missing")
        shards.append(index_path.parent / name)
    return shards


def _read_safetensors(path: Path) -> dict[str, np.ndarray]:
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    try:
        tensors = load_file(path)
    except (SafetensorError, OSError, TypeError) as exc:  # TypeError: a dtype numpy cannot represent
        raise UserError(f"{path}: not a readable safetensors file ({_first_line(exc)})") from None
    return {name: _as_float32_if_float(array) for name, array in tensors.items()}


def _read_torch_bin(path: Path) -> dict[str, np.ndarray]:
    try:
        import torch
    except ImportError:
        raise UserError(f"{path}: reading a .bin checkpoint needs PyTorch; install torch, "
                        f"or convert the checkpoint to safetensors") from None
    try:
        # weights_only: the unpickler accepts tensors and plain containers, and refuses anything that
        # would import or call code. Never retry without it.
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise UserError(f"{path}: refused to unpickle ({_unpickler_refusal(exc)}): only plain tensor "
                        f"checkpoints are accepted, since anything else could run code when loaded") from None
    except Exception as exc:  # torch reports a corrupt archive as RuntimeError, EOFError, ValueError...
        raise UserError(f"{path}: not a readable PyTorch checkpoint ({_first_line(exc)})") from None
    if not isinstance(state, dict) or not all(
            isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()):
        raise UserError(f"{path}: expected a flat mapping of tensor names to tensors (a state_dict)")
    # numpy has no bfloat16 of its own; every float becomes float32 in torch before conversion.
    return {name: (t.detach().to(torch.float32) if t.is_floating_point() else t.detach()).numpy()
            for name, t in state.items()}


def _unpickler_refusal(exc: pickle.UnpicklingError) -> str:
    # torch's message opens with advice to retry with weights_only=False; quote only the cause.
    text = str(exc)
    if found := re.search(r"GLOBAL (\S+)", text):
        return f"it references {found.group(1)}"
    if found := re.search(r"WeightsUnpickler error:\s*(\S[^\n]*)", text):
        return found.group(1).strip()
    return "rejected by torch's weights-only unpickler"


def _as_float32_if_float(array: np.ndarray) -> np.ndarray:
    if array.dtype.kind == "f" or array.dtype == ml_dtypes.bfloat16:
        return array.astype(np.float32, copy=False)
    return array


# --- Names -------------------------------------------------------------------------------------------

def normalise_hf_names(weights: dict[str, np.ndarray], *, source: str) -> dict[str, np.ndarray]:
    """HF names without the `bert.` prefix or legacy gamma/beta, buffers and pretraining heads dropped."""
    out: dict[str, np.ndarray] = {}
    for name, array in weights.items():
        key = name.removeprefix("bert.")
        if key.endswith("LayerNorm.gamma"):
            key = key.removesuffix("gamma") + "weight"
        elif key.endswith("LayerNorm.beta"):
            key = key.removesuffix("beta") + "bias"
        if _IGNORED_WEIGHT.fullmatch(key):
            continue
        if key in out:
            raise UserError(f"{source}: weight {key} appears twice (as {name} and another spelling)")
        out[key] = array
    return out


@dataclasses.dataclass(frozen=True)
class WeightSlot:
    variable: keras.Variable
    transpose: bool  # torch Linear stores [out, in]; a Keras Dense kernel is [in, out]

    def hf_shape(self) -> tuple[int, ...]:
        shape = tuple(self.variable.shape)
        return shape[::-1] if self.transpose else shape


def hf_weight_slots(model: BertModel) -> dict[str, WeightSlot]:
    """Every Keras variable of `model` under its HF name (without the `bert.` prefix)."""
    slots: dict[str, WeightSlot] = {}

    def dense(hf_name: str, layer: keras.layers.Dense):
        slots[f"{hf_name}.weight"] = WeightSlot(layer.kernel, transpose=True)
        slots[f"{hf_name}.bias"] = WeightSlot(layer.bias, transpose=False)

    def layer_norm(hf_name: str, layer):
        slots[f"{hf_name}.weight"] = WeightSlot(layer.gamma, transpose=False)
        slots[f"{hf_name}.bias"] = WeightSlot(layer.beta, transpose=False)

    emb = model.embeddings
    if not hasattr(emb, "word_embeddings"):  # a model whose word lookup was swapped for a compressed one
        raise ValueError("this model has no dense word-embedding table, so it has no HF equivalent")
    for table in ("word_embeddings", "position_embeddings", "token_type_embeddings"):
        slots[f"embeddings.{table}.weight"] = WeightSlot(getattr(emb, table), transpose=False)
    layer_norm("embeddings.LayerNorm", emb.layer_norm)
    for i, layer in enumerate(model.encoder_layers):
        prefix, attention, ff = f"encoder.layer.{i}", layer.attention, layer.feed_forward
        dense(f"{prefix}.attention.self.query", attention.query)
        dense(f"{prefix}.attention.self.key", attention.key)
        dense(f"{prefix}.attention.self.value", attention.value)
        dense(f"{prefix}.attention.output.dense", attention.output_dense)
        layer_norm(f"{prefix}.attention.output.LayerNorm", attention.layer_norm)
        dense(f"{prefix}.intermediate.dense", ff.intermediate)
        dense(f"{prefix}.output.dense", ff.output_dense)
        layer_norm(f"{prefix}.output.LayerNorm", ff.layer_norm)
    dense("pooler.dense", model.pooler)
    if model.classifier is not None:
        dense("classifier", model.classifier)
    return slots


def assign_hf_weights(model: BertModel, weights: dict[str, np.ndarray], *, source: str) -> None:
    """Copy normalised HF weights into `model`, refusing unknown, missing or mis-shaped tensors."""
    slots = hf_weight_slots(model)
    c = model.config
    kind = f"a {c.num_hidden_layers}-layer {'classifier' if model.classifier is not None else 'BertModel'}"
    unknown = sorted(set(weights) - set(slots))
    if unknown:
        hint = ("; config.json does not declare BertForSequenceClassification"
                if model.classifier is None and "classifier.weight" in unknown else "")
        raise UserError(f"{source}: {len(unknown)} weight(s) unknown to {kind}: {_preview(unknown)}{hint}")
    missing = set(slots) - set(weights)
    if _POOLER_WEIGHTS <= missing and model.classifier is None:
        log.warning("%s: no pooler weights; pooler_output comes from a randomly initialised pooler", source)
        missing -= _POOLER_WEIGHTS
    if missing:
        raise UserError(f"{source}: {len(missing)} weight(s) of {kind} missing: {_preview(sorted(missing))}")
    for name, array in weights.items():
        slot = slots[name]
        if array.shape != slot.hf_shape():
            raise UserError(f"{source}: weight {name} has shape {list(array.shape)}, "
                            f"but config.json implies {list(slot.hf_shape())}")
        if array.dtype.kind != "f":
            raise UserError(f"{source}: weight {name} has dtype {array.dtype}; expected floating point")
    for name, array in weights.items():
        slot = slots[name]
        slot.variable.assign((array.T if slot.transpose else array).astype(np.float32))


def to_hf_state_dict(model: BertModel) -> dict[str, np.ndarray]:
    """The model's weights under the names `transformers` itself would save them with."""
    # BertForSequenceClassification nests the encoder under `bert.`; a bare BertModel has no prefix.
    prefix = "bert." if model.classifier is not None else ""
    state = {}
    for name, slot in hf_weight_slots(model).items():
        value = keras.ops.convert_to_numpy(slot.variable)
        hf_name = name if name.startswith("classifier.") else prefix + name
        state[hf_name] = np.ascontiguousarray(value.T if slot.transpose else value, dtype=np.float32)
    return state


# --- Tokenizer ---------------------------------------------------------------------------------------

def load_tokenizer(ckpt_dir: Path, config: BertConfig):
    if not any((ckpt_dir / name).is_file() for name in TOKENIZER_FILES):
        return None
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(ckpt_dir, local_files_only=True, trust_remote_code=False)
    except Exception as exc:  # transformers raises OSError, ValueError, KeyError... for bad files
        raise UserError(f"{ckpt_dir}: the tokenizer files could not be loaded ({_first_line(exc)})") from None
    # A token id past the embedding table would crash the model later, far from the cause.
    if len(tokenizer) > config.vocab_size:
        raise UserError(f"{ckpt_dir}: the tokenizer has {len(tokenizer)} tokens but config.json "
                        f"vocab_size is {config.vocab_size}")
    return tokenizer


# --- Helpers -----------------------------------------------------------------------------------------

def _preview(names: list[str], limit: int = 5) -> str:
    shown = ", ".join(names[:limit])
    return shown if len(names) <= limit else f"{shown} and {len(names) - limit} more"


def _first_line(exc: BaseException) -> str:
    lines = [line for line in str(exc).splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__


def _write_atomically(path: Path, write) -> None:
    """Write via a sibling temp file, so an interrupted save never leaves a truncated file behind."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
