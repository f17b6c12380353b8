"""`distill --recipe`: which values the four recipe options take, given or not (argument level: no model
is built; tests/train/test_intermediate_kd.py trains with them)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from tflm_mcubert.cli import build_parser
from tflm_mcubert.cli import train as train_cli
from tflm_mcubert.cli.train import apply_recipe, layer_options
from tflm_mcubert.errors import UserError
from tflm_mcubert.model.config import preset
from tflm_mcubert.train.layer_kd import DEFAULT_RECIPE, RECIPES, LayerKD

REQUIRED = ("distill", "--teacher", "t", "--task", "sst2", "--out", "o")
KEYS = ("augment", "init", "intermediate_kd", "intermediate_epochs")


def parsed(*extra):
    parser, _ = build_parser(("tflm_mcubert.cli.train",))
    return parser.parse_args([*REQUIRED, *map(str, extra)])


def values(args) -> dict:
    return {key: getattr(args, key) for key in KEYS}


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_a_recipe_sets_every_option_not_given(recipe):
    args = parsed("--recipe", recipe)
    assert apply_recipe(args) == recipe
    assert values(args) == RECIPES[recipe]


def test_without_a_recipe_the_default_applies_and_a_given_option_wins(tmp_path):
    args = parsed("--augment", 3, "--intermediate-epochs", 0.5)
    args.teacher = str(teacher_folder(tmp_path, 384, 12, 1536))  # one the default recipe can run with
    assert apply_recipe(args) == DEFAULT_RECIPE
    assert values(args) == {**RECIPES[DEFAULT_RECIPE], "augment": 3, "intermediate_epochs": 0.5}


def test_the_recipes_differ_in_every_option_they_set():
    layers, logits = RECIPES["layers"], RECIPES["logits"]
    assert set(layers) == set(logits) == set(KEYS)
    assert all(layers[key] != logits[key] for key in KEYS)
    assert LayerKD(logits["intermediate_kd"], logits["intermediate_epochs"], 8, logits["init"]) == LayerKD()


def test_with_a_pruned_vocabulary_the_default_is_logits():
    args = parsed("--prune-vocab", "sst2")
    assert apply_recipe(args) == "logits"
    assert values(args) == RECIPES["logits"]


AUTO = ("--preset", "auto", "--board", "nucleo-f746zg")


@pytest.mark.parametrize(
    "teacher, expected",
    [
        ((384, 12, 1536), "layers"),  # all-MiniLM-L6-v2: every shape of the space is whole heads of it
        ((768, 12, 3072), "logits"),  # BERT-base: heads of 64 channels, and the space has heads of 32
    ],
)
def test_with_preset_auto_the_default_is_layers_where_every_shape_can_be_cut(
    tmp_path, monkeypatch, capsys, teacher, expected
):
    monkeypatch.setattr(train_cli, "DEFAULT_RECIPE", "layers")
    args = parsed(*AUTO)
    args.teacher = str(teacher_folder(tmp_path, *teacher))
    assert apply_recipe(args) == expected
    assert values(args) == RECIPES[expected]
    if expected == "logits":  # the shape that could not be cut is named
        assert "heads of 32" in capsys.readouterr().err


def test_an_explicit_layers_recipe_with_preset_auto_is_refused_before_training_a_shape_it_cannot_cut(tmp_path):
    from tflm_mcubert.export.shape_space import Shape

    args = parsed("--recipe", "layers", *AUTO)
    args.teacher = str(teacher_folder(tmp_path, 768, 12, 3072))
    assert apply_recipe(args) == "layers"
    layer_options(args)
    train_cli.check_layer_options(args, [Shape(1, 128, 2, 256, 8)])  # heads of 64: two teacher heads wide
    with pytest.raises(UserError, match="candidate L1-H96-A3-F192-w4: --init projected"):
        train_cli.check_layer_options(args, [Shape(1, 128, 2, 256, 8), Shape(1, 96, 3, 192, 4)])


def teacher_folder(tmp_path, hidden: int, heads: int, ffn: int):
    """A teacher checkpoint's config.json alone: all the default recipe reads before training."""
    config = dataclasses.replace(preset("bert-tiny", num_labels=2), hidden_size=hidden, num_attention_heads=heads)
    config = dataclasses.replace(config, intermediate_size=ffn, num_hidden_layers=6)
    (tmp_path / "config.json").write_text(json.dumps(config.to_hf_dict()))
    return tmp_path


@pytest.mark.parametrize(
    "teacher, extra, expected",
    [
        ((384, 12, 1536), (), "layers"),  # all-MiniLM-L6-v2's shape: bert-tiny is two of its heads wide
        ((32, 2, 64), (), "logits"),  # the student is wider than the teacher: it cannot be cut from it
        ((36, 3, 144), ("--preset", "L1-H24-A2-F48"), "logits"),  # 8 relation heads divide neither width
        ((36, 3, 144), ("--preset", "L1-H24-A2-F48", "--relation-heads", 4), "layers"),
    ],
)
def test_the_layers_default_falls_back_to_logits_where_it_cannot_run(tmp_path, monkeypatch, teacher, extra, expected):
    monkeypatch.setattr(train_cli, "DEFAULT_RECIPE", "layers")
    args = parsed(*extra)
    args.teacher = str(teacher_folder(tmp_path, *teacher))
    assert apply_recipe(args) == expected
    assert values(args) == RECIPES[expected]


def test_an_explicit_layers_recipe_is_kept_where_the_default_would_fall_back(tmp_path, monkeypatch):
    monkeypatch.setattr(train_cli, "DEFAULT_RECIPE", "layers")
    args = parsed("--recipe", "layers")
    args.teacher = str(teacher_folder(tmp_path, 32, 2, 64))
    assert apply_recipe(args) == "layers"
