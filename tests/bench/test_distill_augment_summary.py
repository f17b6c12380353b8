"""bench/distill_augment.py's cheap logic: the commands it runs per arm, the paired t-test and the summary's
statistics and table made from the runs' bits (the runs themselves are the benchmark's, not CI's)."""

import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import distill_augment as bench  # noqa: E402
from results_bits import pack  # noqa: E402


def opts(tmp_path):
    return SimpleNamespace(
        teacher=tmp_path / "teacher",
        runs=tmp_path,
        task="rotten_tomatoes",
        max_seq_len=64,
        search_epochs=0.5,
        search_finetune_epochs=1.0,
    )


def test_each_arm_distills_with_its_augmentation_and_every_arm_takes_the_same_board_path(tmp_path):
    base, aug = (bench.student_command(opts(tmp_path), arm, 3) for arm in ("base", "aug2"))
    assert "--augment" not in base and aug[aug.index("--augment") + 1] == "2"
    assert base[base.index("--recipe") + 1] == "logits" == aug[aug.index("--recipe") + 1]
    assert base[base.index("--out") + 1] == str(tmp_path / "base-s3") and "--resume" in base
    longer = bench.student_command(opts(tmp_path), "epochs12", 3)
    assert longer[longer.index("--epochs") + 1] == "12" and "--augment" not in longer
    layered = bench.student_command(opts(tmp_path), "ikd", 3)
    assert layered[layered.index("--init") + 1] == "projected" and "--intermediate-kd" in layered
    assert layered[layered.index("--out") + 1] == str(tmp_path / "ikd-s3")
    for unknown in ("augmented", "epochs", "e12"):
        with pytest.raises(SystemExit):
            bench.arm_args(unknown)
    (search_a, evaluate_a), (search_b, _) = (bench.board_commands(opts(tmp_path), arm, 3) for arm in ("base", "aug2"))
    assert [a for a in search_a if "base" not in a] == [a for a in search_b if "aug2" not in a]
    assert search_a[search_a.index("--board") + 1] == "nucleo-f746zg" and search_a[search_a.index("--seed") + 1] == "3"
    assert evaluate_a[evaluate_a.index("--weight-bits") + 1] == "8" and "test" in evaluate_a


def test_the_board_benchmarks_student_and_its_longer_layers_stage_name_their_own_recipe(tmp_path):
    anchor = bench.student_command(opts(tmp_path), "layers-q8", 5)
    longer = bench.student_command(opts(tmp_path), "layers-q8-i6", 5)
    for command in (anchor, longer):
        assert command.count("--recipe") == 1 and command[command.index("--recipe") + 1] == "layers"
        assert command[command.index("--qat-weight-bits") + 1] == "8" and "--augment" not in command
    assert "--intermediate-epochs" not in anchor  # the recipe's own 2
    assert longer[longer.index("--intermediate-epochs") + 1] == "6"
    mine = [[a for a in command if "layers-q8" not in a] for command in (anchor, longer)]  # but --out
    assert sorted(mine[1]) == sorted([*mine[0], "--intermediate-epochs", "6"])
    more = bench.student_command(opts(tmp_path), "layers-q8-aug4", 5)
    assert more[more.index("--augment") + 1] == "4" and "--intermediate-epochs" not in more
    both = bench.arm_args("layers-q8-i6-aug4")
    assert both[both.index("--intermediate-epochs") + 1] == "6" and both[both.index("--augment") + 1] == "4"
    assert bench.arm_args("layers-q4") == ["--recipe", "layers", "--qat-weight-bits", "4"]  # BERT-mini's int4
    for unknown in ("layers-q8-i", "layers-q8-aug", "layers-q8-aug4-i6", "layers-q2", "layers"):
        with pytest.raises(SystemExit):
            bench.arm_args(unknown)


def test_a_preset_and_a_board_configuration_reach_the_student_and_its_board_path(tmp_path):
    default = bench.student_command(opts(tmp_path), "ikd", 1)
    assert "--preset" not in default  # distill's own default student
    mini = SimpleNamespace(
        **{**vars(opts(tmp_path)), "task": "debate_speakers"}, preset="bert-mini", board_config="mini-f767-w4e4p"
    )
    student = bench.student_command(mini, "ikd", 1)
    assert student[student.index("--preset") + 1] == "bert-mini" and "--init" in student
    search, evaluate = bench.board_commands(mini, "ikd", 1)
    assert search[search.index("--board") + 1] == "nucleo-f767zi" and search[search.index("--weight-bits") + 1] == "4"
    assert search[search.index("--embedding-bits") + 1] == "4" and evaluate[evaluate.index("--weight-bits") + 1] == "4"
    assert search[search.index("--prune-vocab") + 1] == "debate_speakers"  # a task name `search` reads itself
    assert bench.board_name({"board_config": "mini-f767-w4e4p"}) == "F767ZI"
    assert bench.board_name({"board_config": None}) == "F746ZG"  # summaries from before the option


def synthetic_runs(rng, better: float) -> list[dict]:
    def bits(rate):
        return {split: pack(rng.random(400) < rate) for split in bench.SPLITS}

    return [
        {
            "seed": seed,
            "student": {"steps": 10, "seconds": 60.0, "labelling_seconds": 0.0, "correct": bits(0.75 + better)},
            "board": {
                "search_seconds": 30.0,
                "evaluate_seconds": 6.0,
                "correct": {bench.INTEGER: bits(0.74 + better), bench.FLOAT: bits(0.75 + better)},
            }
            if seed < 3
            else None,
        }
        for seed in range(5)
    ]


def test_the_summary_is_recomputed_from_bits_and_pairs_only_the_seeds_both_arms_have():
    rng = np.random.default_rng(0)
    runs = {"base": synthetic_runs(rng, 0.0), "aug1": synthetic_runs(rng, 0.1)}
    stats = bench.summarize(runs)
    student = stats["arms"]["aug1"]["student"]["test"]
    expected = [bench.accuracy_bits(r, "student", "test").mean() * 100 for r in runs["aug1"]]
    assert student["mean"] == pytest.approx(np.mean(expected)) and student["n"] == 5
    assert stats["arms"]["aug1"][f"board:{bench.INTEGER}"]["test"]["n"] == 3
    versus = stats["differences"]["aug1"]
    assert versus["student"]["seeds"] == [0, 1, 2, 3, 4] and versus[f"board:{bench.INTEGER}"]["seeds"] == [0, 1, 2]
    assert versus["student"]["test"]["points"] > 5 and versus["student"]["test"]["paired_t_p"] < 0.05
    assert stats["arms"]["base"]["student_minutes"]["mean"] == pytest.approx(1.0)
    table = bench.markdown_table({"runs": runs})
    assert table == bench.markdown(stats) and "aug1: integer model (F746ZG) | 3 |" in table


def test_a_later_arm_is_also_set_against_each_earlier_one_but_the_first():
    rng = np.random.default_rng(1)
    runs = {"base": synthetic_runs(rng, 0.0), "epochs12": synthetic_runs(rng, 0.05), "aug1": synthetic_runs(rng, 0.1)}
    stats = bench.summarize(runs)
    assert [(p["arm"], p["against"]) for p in stats["pairs"]] == [("aug1", "epochs12")]
    pair = stats["pairs"][0]["versus"]["student"]["test"]
    assert pair["points"] == pytest.approx(
        stats["differences"]["aug1"]["student"]["test"]["points"]
        - stats["differences"]["epochs12"]["student"]["test"]["points"]
    )
    assert "| aug1 against epochs12: float student | 5 |" in bench.markdown(stats)


def test_the_tasks_table_gives_the_share_of_the_teachers_lead_that_the_second_recipe_closes():
    rng = np.random.default_rng(2)
    runs = {"base": synthetic_runs(rng, 0.0), "layers-q8": synthetic_runs(rng, 0.1)}
    for rows in runs.values():
        for r in rows:
            r["student"]["teacher_accuracy"] = {"validation": 90.0, "test": 88.0}
    gap = bench.teacher_gap(runs, "layers-q8")
    stats = bench.summarize(runs)
    reference = stats["arms"]["base"][f"board:{bench.INTEGER}"]["test"]["mean"]
    assert gap["lead"] == pytest.approx(88.0 - reference) and gap["seeds"] == [0, 1, 2]
    assert gap["closed"] == pytest.approx(gap["gain"]["points"] / gap["lead"]) and 0 < gap["closed"] < 1
    table = bench.tasks_markdown([("party_speeches", "BERT-tiny, F746ZG", {"runs": runs}, "layers-q8")])
    assert "| party_speeches | BERT-tiny, F746ZG | 90.00 / 88.00 | base, layers-q8 |" in table
    assert f"{gap['gain']['points']:.2f} of {gap['lead']:.2f}" in table
    runs["base"][0]["student"]["teacher_accuracy"] = {"validation": 90.0, "test": 87.0}
    with pytest.raises(SystemExit, match="2 teachers"):
        bench.teacher_gap(runs, "layers-q8")
