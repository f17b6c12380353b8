"""Running the CLI in-process and checking its one-line errors: shared by the CLI tests."""

from tflm_mcubert.cli import main


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_one_clean_error(err, *fragments):
    """No traceback, and the last line is `error: ...` naming every fragment."""
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: ")
    for fragment in fragments:
        assert fragment in last, (fragment, last)
