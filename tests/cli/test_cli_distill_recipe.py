"""`distill --recipe`: which values the four recipe options take, given or not (argument level: no model
is built; tests/train/test_intermediate_kd.py trains with them)."""

from __future__ import annotations

import pytest

from tflm_mcubert.cli import build_parser
from tflm_mcubert.cli.train import apply_recipe, layer_options
from tflm_mcubert.errors import UserError
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


def test_without_a_recipe_the_default_applies_and_a_given_option_wins():
    args = parsed("--augment", 3, "--intermediate-epochs", 0.5)
    assert apply_recipe(args) == DEFAULT_RECIPE
    assert values(args) == {**RECIPES[DEFAULT_RECIPE], "augment": 3, "intermediate_epochs": 0.5}


def test_the_recipes_differ_in_every_option_they_set():
    layers, logits = RECIPES["layers"], RECIPES["logits"]
    assert set(layers) == set(logits) == set(KEYS)
    assert all(layers[key] != logits[key] for key in KEYS)
    assert LayerKD(logits["intermediate_kd"], logits["intermediate_epochs"], 8, logits["init"]) == LayerKD()


@pytest.mark.parametrize("extra", [("--preset", "auto", "--board", "nucleo-f746zg"), ("--prune-vocab", "sst2")])
def test_where_the_layer_terms_cannot_run_the_default_is_logits(extra):
    args = parsed(*extra)
    assert apply_recipe(args) == "logits"
    assert values(args) == RECIPES["logits"]


def test_asking_for_the_layers_recipe_with_preset_auto_is_refused_naming_it():
    args = parsed("--recipe", "layers", "--preset", "auto", "--board", "nucleo-f746zg")
    with pytest.raises(UserError, match="--recipe layers"):
        layer_options(args)
