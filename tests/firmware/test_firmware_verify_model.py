"""Every firmware front end checks the model's integrity record, and the model against the size and CRC-32
in model_settings.h (so that a corruption hiding the record cannot switch the check off), before TFLM
trusts its bytes."""

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
    verify = source.find("mcubert_verify_model_expected(g_model_data, g_model_data_len, MCUBERT_MODEL_TFLITE_BYTES,\n")
    assert verify >= 0, "no mcubert_verify_model_expected call on the exported model"
    assert source.find("MCUBERT_MODEL_TFLITE_CRC32, &integrity, &message) != MCUBERT_OK", verify) > verify
    assert verify < source.find("tflite::GetModel(g_model_data)") < source.find("interpreter.AllocateTensors()")
    # A corrupted model stops the program with the verifier's message; it is not run.
    failure = source[verify : source.find("tflite::GetModel(g_model_data)")]
    assert "!= MCUBERT_OK" in failure and "return" in failure and "message.text" in failure
    # MCUBERT_OK means verified: no front end runs a model it reports as unverified.
    assert "not verified" not in source and "integrity.verified ?" not in source
