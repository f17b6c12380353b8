"""Property: whatever numbers the export flags get, the result is an export or one named error.

Hypothesis sweeps seq-len, calibration samples, QAT steps, the seed, the memory sizes and reserves
(and `plan`'s tile, sequence lengths and boards) over their whole range, edge values included (0, 1,
negative, the model's limits, absurdly large, malformed sizes), on a tiny checkpoint so that each
export takes about a second. CI runs 30 examples; MCUBERT_PROPERTY_EXAMPLES=500 is the longer run.
"""

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .cli_helpers import assert_one_clean_error, run_cli

MAX_POSITIONS = 64  # the tiny checkpoint's position table
SIZES = st.one_of(
    st.sampled_from(
        [
            "0",
            "1",
            "-1",
            "1KB",
            "4KB",
            "64KB",
            "320KB",
            "2MB",
            "1.5MB",
            "0x10",
            "99999999999999999999GB",
            "abc",
            "",
            " 16KB",
            "16 KB",
            "16kb",
        ]
    ),
    st.integers(-2, 1 << 34).map(str),
)
EDGE_INTS = [-(1 << 31), -1, 0, 1, 2, 3, 1 << 31, 1 << 62]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from tests.conftest import build_hf_checkpoint

    return build_hf_checkpoint(tmp_path_factory.mktemp("ckpt"), classifier=True, num_labels=2)


@settings(
    max_examples=int(os.environ.get("MCUBERT_PROPERTY_EXAMPLES", 30)),
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    seq_len=st.one_of(
        st.sampled_from(EDGE_INTS + [MAX_POSITIONS, MAX_POSITIONS + 1]), st.integers(-3, MAX_POSITIONS + 3)
    ),
    calibration_samples=st.one_of(st.sampled_from(EDGE_INTS[:5]), st.integers(1, 4)),
    qat_steps=st.sampled_from([-1, 0, 1]),
    seed=st.sampled_from([-1, 0, 7, 1 << 32, 1 << 70]),
    memory=st.one_of(st.none(), st.tuples(SIZES, SIZES)),
    reserve=st.one_of(st.none(), SIZES),
    flash_reserve=st.one_of(st.none(), SIZES),
    schedule=st.sampled_from(["mcubert", "mcubert", "mcubert", "stock"]),
)
def test_any_numeric_flags_give_an_export_or_one_named_error(
    capsys,
    tmp_path_factory,
    checkpoint,
    seq_len,
    calibration_samples,
    qat_steps,
    seed,
    memory,
    reserve,
    flash_reserve,
    schedule,
):
    argv = [
        "export",
        "--checkpoint",
        checkpoint,
        "--seq-len",
        seq_len,
        "--schedule",
        schedule,
        "--calibration-samples",
        calibration_samples,
        "--qat-steps",
        qat_steps,
        "--seed",
        seed,
        "--out",
        tmp_path_factory.mktemp("out"),
    ]
    if memory:
        argv += ["--sram", memory[0], "--flash", memory[1]]
    for flag, value in (("--reserve", reserve), ("--flash-reserve", flash_reserve)):
        if value is not None:
            argv += [flag, value]
    code, _, err = run_cli(capsys, *argv)
    assert code in (0, 2, 3), err[-2000:]
    if code:
        assert_one_clean_error(err)


@settings(
    max_examples=int(os.environ.get("MCUBERT_PROPERTY_EXAMPLES", 30)),
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    tile=st.one_of(st.sampled_from(EDGE_INTS), st.integers(-2, 600)),
    seq_lens=st.one_of(
        st.sampled_from(["", ",", "0", "-8", "1", "32,64", "2,1024,4096", "x", "1e3", "32,,64"]),
        st.lists(st.integers(-4, 5000), min_size=1, max_size=4).map(lambda v: ",".join(map(str, v))),
    ),
    boards=st.sampled_from(["", "nucleo-f746zg", "nucleo-f746zg,nucleo-h7a3zi-q", "nope", ","]),
)
def test_any_plan_tile_and_sequence_lengths_give_a_plan_or_one_named_error(
    capsys, tmp_path_factory, tile, seq_lens, boards
):
    out = tmp_path_factory.mktemp("plan") / "plan.png"
    code, _, err = run_cli(capsys, "plan", "--tile", tile, "--seq-lens", seq_lens, "--boards", boards, "--out", out)
    assert code in (0, 2), err[-2000:]
    if code:
        assert_one_clean_error(err)
    else:
        assert out.read_bytes()[:4] == b"\x89PNG"
