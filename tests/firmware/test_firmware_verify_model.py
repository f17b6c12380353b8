"""Every firmware front end checks the model's integrity record before TFLM trusts its bytes."""

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FIRMWARES = [
    "examples/baremetal/src/mcubert_app_main.cc",
    "mbed_app/main.cpp",
    "arduino_lib/examples/mcubert_bert_tiny/mcubert_bert_tiny.ino",
]


@pytest.mark.parametrize("path", FIRMWARES)
def test_the_model_is_verified_before_the_interpreter_sees_it(path):
    source = (REPO / path).read_text()
    verify = source.find("mcubert_verify_model(g_model_data, g_model_data_len,")
    assert verify >= 0, "no mcubert_verify_model call on the exported model"
    assert verify < source.find("tflite::GetModel(g_model_data)") < source.find("interpreter.AllocateTensors()")
    # A corrupted model stops the program with the verifier's message; it is not run.
    failure = source[verify : source.find("tflite::GetModel(g_model_data)")]
    assert "!= MCUBERT_OK" in failure and "return" in failure and "message.text" in failure
