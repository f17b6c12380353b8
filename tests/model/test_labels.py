"""Label names in config.json: HF's id2label / label2id, what counts as no names, and which names win."""

import json

import pytest

from tflm_mcubert.errors import UserError
from tflm_mcubert.model.labels import (
    are_default,
    checkpoint_label_names,
    choose_label_names,
    label_maps,
    names_from_config,
)


def test_default_names_are_hf_s_or_the_ids_and_nothing_else():
    assert are_default(["LABEL_0", "LABEL_1"]) and are_default(["0", "1", "2"])
    assert not are_default(["negative", "positive"]) and not are_default(["1", "0"]) and not are_default(["LABEL_1"])


def test_label_maps_are_what_hf_writes():
    assert label_maps(["neg", "pos"]) == {"id2label": {"0": "neg", "1": "pos"}, "label2id": {"neg": 0, "pos": 1}}
    with pytest.raises(UserError, match="'a' name more than one id"):
        label_maps(["a", "a"])
    with pytest.raises(UserError, match="NUL"):
        label_maps(["a\0b", "c"])


def test_config_names_are_read_by_id_and_defaults_count_as_none(tmp_path):
    raw = {"id2label": {"1": "pos", "0": "neg"}}
    assert names_from_config(raw, 2, "c") == ["neg", "pos"]
    assert names_from_config({"id2label": {"0": "LABEL_0", "1": "LABEL_1"}}, 2, "c") is None
    assert names_from_config(raw, None, "c") is None  # a bare encoder has no classes
    with pytest.raises(UserError, match=r"names ids \[0, 1\], but the classifier has 3 labels"):
        names_from_config(raw, 3, "c")
    with pytest.raises(UserError, match="id2label keys must be ids"):
        names_from_config({"id2label": {"zero": "a"}}, 1, "c")
    (tmp_path / "config.json").write_text(json.dumps(raw))
    assert checkpoint_label_names(tmp_path, 2) == ["neg", "pos"]


def test_the_task_s_names_win_the_checkpoint_s_fill_in_and_a_disagreement_is_said():
    said = []
    assert choose_label_names(["0", "1"], ["neg", "pos"], "--checkpoint", warn=said.append) == ["neg", "pos"]
    assert choose_label_names(["0", "1"], None, "--checkpoint", warn=said.append) == ["LABEL_0", "LABEL_1"]
    assert choose_label_names(["a", "b"], None, "--checkpoint", warn=said.append) == ["a", "b"]
    assert not said
    assert choose_label_names(["a", "b"], ["neg", "pos"], "--checkpoint", warn=said.append) == ["a", "b"]
    assert len(said) == 1 and "['a', 'b'] differ from --checkpoint's id2label ['neg', 'pos']" in said[0]
    # The same names in another order: fine-tuning relearns them (a warning), distilling would teach wrong ids.
    assert choose_label_names(["neg", "pos"], ["pos", "neg"], "--teacher", warn=said.append) == ["neg", "pos"]
    with pytest.raises(UserError, match="in another order"):
        choose_label_names(["neg", "pos"], ["pos", "neg"], "--teacher", strict=True, warn=said.append)
