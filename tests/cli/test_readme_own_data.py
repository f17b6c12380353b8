"""The "Your own data, start to finish" commands of docs/your-own-data.md, run as written.

The commands are read from the page's code block, so the docs cannot drift from what works, and the
README's five own-data commands must be the same ones. Only what
a CI machine cannot afford changes: all-MiniLM-L6-v2 becomes a tiny local encoder, `my_data/` a small folder
of string-labelled CSVs, the output folders land in tmp, and each command gets short-run flags. Then the
bare-metal text check runs the export under QEMU: it prints the label names, with the reference's int8
logits."""

import re
import shlex
from pathlib import Path

from tests.conftest import build_hf_checkpoint

from .cli_helpers import run_text_check_under_qemu
from .test_cli_labels import NAMES, _run, write_named

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "your-own-data.md"
HEADING = "# Your own data, start to finish"
README = ROOT / "README.md"
README_HEADING = "## Your own data in five commands"
MINILM = "sentence-transformers/all-MiniLM-L6-v2"
SEQ_LEN = 16
QUICK = {  # per command: what makes it a seconds-long run on the tiny model and data
    "finetune": ["--epochs", "3", "--lr", "3e-3", "--batch-size", "16", "--max-seq-len", str(SEQ_LEN), "--quiet"],
    "distill": ["--epochs", "3", "--lr", "3e-3", "--batch-size", "16", "--max-seq-len", str(SEQ_LEN), "--quiet"],
    "search": ["--epochs", "1", "--finetune-epochs", "1", "--batch-size", "16", "--max-seq-len", str(SEQ_LEN)]
    + ["--export-seq-len", str(SEQ_LEN), "--quiet"],  # the export's sequence: the board budget counts it
    "export": ["--seq-len", str(SEQ_LEN)],
    "evaluate": ["--seq-len", str(SEQ_LEN), "--calibration-samples", "8"],
}


def readme_commands(page: Path = PAGE, heading: str = HEADING) -> list[list[str]]:
    """The argv of each `python -m tflm_mcubert ...` line of the section's first code block."""
    text = page.read_text(encoding="utf-8")
    section = text[text.index(heading) :]
    block = re.search(r"```sh\n(.*?)```", section, re.DOTALL).group(1)
    prefix = ["python", "-m", "tflm_mcubert"]
    commands = [shlex.split(line) for line in block.splitlines() if line.strip()]
    assert all(c[:3] == prefix for c in commands), block
    return [c[3:] for c in commands]


def as_test_run(argv: list[str], paths: dict[str, Path]) -> list[str]:
    """`argv` with the page's names mapped to `paths`, and QUICK."""
    return [str(paths.get(arg, arg)) for arg in argv] + QUICK[argv[0]]


def test_the_readme_gives_the_docs_own_data_commands():
    assert readme_commands(README, README_HEADING) == readme_commands()


def test_the_readme_s_own_data_commands_run_from_a_csv_to_the_firmware(tmp_path, capsys):
    commands = readme_commands()
    assert [c[0] for c in commands] == ["finetune", "distill", "search", "export", "evaluate"]
    data = tmp_path / "my_data"
    data.mkdir()
    write_named(data / "train.csv", count=120, seed=0)
    write_named(data / "test.csv", count=30, seed=1)
    paths = {MINILM: build_hf_checkpoint(tmp_path, vocab_size=30), "my_data/": data}
    paths.update({f"{name}/": tmp_path / name for name in ("teacher", "student", "small", "fw")})
    for argv in commands:
        assert _run(*as_test_run(argv, paths)) == 0, (argv, capsys.readouterr().err[-3000:])
    out = capsys.readouterr().out
    assert "the training split of" in (tmp_path / "fw" / "report.json").read_text()  # calibrated on my_data
    assert f"the {data} test split (30 of its 30 rows)" in out
    seen = run_text_check_under_qemu(tmp_path / "fw", ["good happy film", "bad sad movie"], NAMES, SEQ_LEN, tmp_path)
    assert seen == {0, 1}
