"""Label names reach the firmware as C strings that a compiler reads back byte for byte, and every front end
prints the largest logit as "label <name> (<id>)"."""

import shutil
import subprocess
from pathlib import Path

import pytest

from tflm_mcubert.firmware.c_string import c_string_literal

REPO = Path(__file__).resolve().parents[2]
TRICKY = [
    'say "hi"',
    "back\\slash\\",
    "naïve 東京",
    "é" + "f",  # a hex digit after a non-ASCII byte: a \x escape would swallow it
    "tab\there",
    "new\nline",
    "??=trigraph??/",
    "del\x7f and bell\x07",
    "",
    "100% %d %s",
]


def test_c_string_literals_are_plain_ascii_with_every_quote_backslash_and_byte_escaped():
    assert c_string_literal("positive") == '"positive"'
    assert c_string_literal('a"b\\c') == '"a\\"b\\\\c"'
    assert c_string_literal("é1") == '"\\303\\2511"'
    for text in TRICKY:
        literal = c_string_literal(text)
        assert literal.isascii() and literal.isprintable(), literal


def test_a_c_compiler_reads_the_literals_back_as_the_utf8_bytes(tmp_path):
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("needs gcc")
    literals = ",\n    ".join(c_string_literal(t) for t in TRICKY)
    (tmp_path / "names.c").write_text(
        "#include <stdio.h>\n"
        f"static const char *const kNames[] = {{\n    {literals}\n}};\n"
        "int main(void) {\n"
        "    for (unsigned i = 0; i < sizeof kNames / sizeof kNames[0]; ++i) {\n"
        '        for (const unsigned char *p = (const unsigned char *)kNames[i]; *p; ++p) printf("%02x", *p);\n'
        '        printf("\\n");\n'
        "    }\n"
        "    return 0;\n"
        "}\n"
    )
    subprocess.run(
        [gcc, "-std=c99", "-trigraphs", "-Wall", "-Wextra", "-Werror", "-pedantic", "names.c", "-o", "names"],
        cwd=tmp_path,
        check=True,
        capture_output=True,
    )
    printed = subprocess.run([str(tmp_path / "names")], check=True, capture_output=True, text=True).stdout
    assert printed.split("\n")[: len(TRICKY)] == [t.encode("utf-8").hex() for t in TRICKY]


FRONT_ENDS = [
    "examples/baremetal/src/mcubert_app_main.cc",
    "mbed_app/main.cpp",
    "arduino_lib/examples/mcubert_bert_tiny/mcubert_bert_tiny.ino",
    "tflm_mcubert/firmware/templates/arduino_sketch.ino.tmpl",
    "tflm_mcubert/firmware/templates/cmake_bundle_main.cpp.tmpl",
]


@pytest.mark.parametrize("path", FRONT_ENDS)
def test_every_front_end_names_the_label_from_model_settings(path):
    source = (REPO / path).read_text()
    assert "kLabels[MCUBERT_MODEL_LABEL_COUNT] = MCUBERT_MODEL_LABELS;" in source
    assert "#if MCUBERT_MODEL_NUM_LABELS > 0" in source  # a hidden-state export has no names
    assert "label: " not in source
    named = ('"label %s (%d)\\n", kLabels[label], label', 'Write("label ");\n  Write(kLabels[best]);')
    arduino = 'Serial.print("label ");\n  Serial.print(kLabels[label]);\n  Serial.print(" (");'
    assert any(n in source for n in named) or arduino in source
