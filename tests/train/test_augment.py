"""Teacher-labelled data's texts (issue 41, train/augment.py): augmented copies seeded and different from
their originals, embedding neighbours by cosine, unlabeled text read with clear errors."""

from __future__ import annotations

import numpy as np
import pytest

from tflm_mcubert.errors import UserError
from tflm_mcubert.train.augment import Augmentation, augment_texts, embedding_neighbours, read_unlabeled

TEXTS = [
    "the movie was good and the cast was happy",
    "a bad film with a sad ending",
    "this is not a very good movie",
    "it sat on the mat",
    "the dog and the cat were funny",
]
NEIGHBOURS = {"good": ("great", "fine"), "bad": ("awful", "poor"), "movie": ("film",), "sad": ("gloomy",)}


def test_the_same_seed_gives_the_same_copies_and_another_seed_others():
    first = augment_texts(TEXTS, 4, 7, NEIGHBOURS, "[MASK]")
    assert first == augment_texts(TEXTS, 4, 7, NEIGHBOURS, "[MASK]")
    assert first != augment_texts(TEXTS, 4, 8, NEIGHBOURS, "[MASK]")
    assert len(first) == 4 * len(TEXTS)


def test_every_copy_differs_from_its_original_and_the_edits_vary():
    copies = augment_texts(TEXTS, 6, 0, NEIGHBOURS, "[MASK]")
    for i, text in enumerate(TEXTS):
        assert all(copy != text for copy in copies[6 * i : 6 * (i + 1)]), text
    joined = " ".join(copies)
    assert "[MASK]" in joined  # masking
    assert any(w in joined.split() for w in ("great", "fine", "awful", "poor", "gloomy"))  # neighbours
    assert any(len(c.split()) < len(TEXTS[i // 6].split()) for i, c in enumerate(copies))  # dropping
    assert any(sorted(c.split()) == sorted(TEXTS[i // 6].split()) for i, c in enumerate(copies))  # swapping


def test_without_a_mask_token_no_mask_appears():
    assert "[MASK]" not in " ".join(augment_texts(TEXTS, 6, 0, NEIGHBOURS, None))


def test_neighbours_are_the_nearest_rows_by_cosine_never_the_word_itself():
    vocab = {"[PAD]": 0, "good": 1, "great": 2, "fine": 3, "bad": 4, "awful": 5, "##ly": 6, "poor": 7}
    table = np.array([[0, 0], [1, 0.1], [2, 0.25], [1, 0.3], [-1, 0.1], [-3, 0.2], [1, 0.1], [-1, 0.5]], np.float32)
    found = embedding_neighbours(["Good bad unknown"], vocab, table, count=2)
    assert set(found) == {"good", "bad"}  # the text's words in the vocabulary, lower-cased
    assert found["good"] == ("great", "fine")  # cosine, not distance; "##ly" is not a whole word
    assert found["bad"] == ("awful", "poor")


def test_unlabeled_file_and_directory_are_read_in_name_order(tmp_path):
    (tmp_path / "b.txt").write_text("second file\n", encoding="utf-8")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "c.txt").write_text("nested\n", encoding="utf-8")
    (tmp_path / "a.txt").write_text("first line\n\n  \nfirst line\ncafé ✓\n", encoding="utf-8")
    (tmp_path / "notes.md").write_text("not read\n", encoding="utf-8")
    assert read_unlabeled(tmp_path / "a.txt") == ["first line", "café ✓"]
    assert read_unlabeled(tmp_path) == ["first line", "café ✓", "second file", "nested"]


@pytest.mark.parametrize(
    "name, make, fragments",
    [
        ("x.txt", lambda p: p.write_bytes(b"fine\n\xff\xfe bad"), ["x.txt", "not UTF-8", "line 2"]),
        ("empty", lambda p: p.mkdir(), ["empty", "no .txt files"]),
        ("blank.txt", lambda p: p.write_text("\n \n"), ["blank.txt", "no text"]),
        ("missing", lambda p: None, ["missing", "no such file or directory"]),
    ],
    ids=["not-utf8", "empty-dir", "blank-file", "missing"],
)
def test_bad_unlabeled_input_is_named(tmp_path, name, make, fragments):
    make(tmp_path / name)
    with pytest.raises(UserError) as caught:
        read_unlabeled(tmp_path / name)
    for fragment in fragments:
        assert fragment in str(caught.value)


def test_the_copy_count_is_checked():
    with pytest.raises(UserError, match="--augment"):
        Augmentation(per_sentence=-1)
    assert not Augmentation().active and Augmentation(unlabeled="x").active
