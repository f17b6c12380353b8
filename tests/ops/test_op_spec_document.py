"""SPEC.md stays in step with the code: its hash, version and hashed contract text are current."""

from pathlib import Path

import pytest

from tflm_mcubert.model.config import PRESETS
from tflm_mcubert.ops import contract, contract_versions, registry
from tflm_mcubert.schedule import planner
from tflm_mcubert.schedule.planner import KIB

SPEC = Path(registry.__file__).with_name("SPEC.md").read_text()


def test_spec_quotes_the_current_hash_and_version():
    assert f"**`0x{registry.SPEC_HASH:08x}`** (`SPEC_VERSION = {registry.SPEC_VERSION}`)" in SPEC


def test_spec_contains_the_hashed_contract_text_verbatim():
    block = SPEC.split("## 8. Contract text (hashed)", 1)[1].split("```\n", 2)[1]
    assert block == registry.contract_text(), "regenerate section 8 from registry.contract_text()"


def test_every_option_field_is_documented():
    for spec in contract.CONTRACTS.values():
        for field in spec.options:
            mentions = (f"`{field.name}", f" {field.name},", f" {field.name}`")
            assert any(m in SPEC for m in mentions), field.name


@pytest.mark.parametrize(
    "preset,s,budget,row",
    [
        ("bert-tiny", 128, 44 * KIB, "| BERT-tiny @ 128, 44 KiB | {bytes} ("),
        ("bert-tiny", 512, 170 * KIB, "| BERT-tiny @ 512, 170 KiB | {bytes} ("),
        ("bert-mini", 512, 298 * KIB, "| BERT-mini @ 512, 298 KiB | {bytes} ("),
    ],
)
def test_the_planned_bytes_table_is_current(preset, s, budget, row):
    plan = planner.plan_model(PRESETS[preset], s, budget)
    assert row.format(bytes=plan.planned_bytes) in SPEC


def test_the_integrity_record_section_quotes_the_record_constants():
    from tflm_mcubert.tflite import integrity

    section = SPEC.split("## 9. Integrity record", 1)[1]
    assert f"`{integrity.INTEGRITY_METADATA}`" in section
    assert f"magic `0x{integrity.INTEGRITY_MAGIC:08X}`" in section
    assert f"record version **{integrity.INTEGRITY_VERSION}**" in section


def test_spec_quotes_version_2_and_its_addendum():
    assert (
        f"Version 2 (hash **`0x{registry.SPEC_HASH_V2:08x}`**, `SPEC_VERSION_INT4 = {registry.SPEC_VERSION_INT4}`)"
        in SPEC
    )
    block = SPEC.split("Version 2 hashes version 1's text above", 1)[1].split("```\n", 2)[1]
    assert registry.contract_text() + block == registry.contract_text_v2()
    for fields in contract_versions.VERSION_OPTIONS.values():
        for op_fields in fields.values():
            for field in op_fields:
                assert f"`{field.name}`" in SPEC
