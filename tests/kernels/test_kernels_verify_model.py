"""mcubert_verify_model (custom_ops/src/mcubert_verify_model.c) against the Python integrity check.

Both read the same record (SPEC.md section 9): the C verifier must accept exactly the models the
Python reader accepts, name the same corrupted tensor or operator, and never read outside the
model — on the host and on emulated Cortex-M7 / M4, where its cost per KB is also measured.
"""

import ctypes
import random

import numpy as np
import pytest
from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as schema

from tests.export.mcubert_models import small_export
from tests.kernels.verify_model_calls import call_verify
from tests.tflite.test_integrity import constant_buffers, without_record
from tflm_mcubert.ops import kernel_abi
from tflm_mcubert.tflite.integrity import IntegrityError, verify_integrity

MODEL_ERROR = kernel_abi.ERROR_MODEL


@pytest.fixture(scope="module")
def exported():
    return small_export(16).tflite


@pytest.fixture(scope="module")
def verify(host_library):
    library = ctypes.CDLL(str(host_library))
    return lambda model: call_verify(library, model)


def python_verdict(model: bytes) -> str:
    try:
        return "verified" if verify_integrity(model) else "absent"
    except IntegrityError:
        return "corrupted"
    except Exception:  # a flatbuffer the lazy reader cannot walk: corrupted for C too
        return "corrupted"


def c_verdict(status: int, result) -> str:
    if status == MODEL_ERROR:
        return "corrupted"
    if status == kernel_abi.UNVERIFIED:
        assert not result.verified
        return "absent"
    assert status == 0 and result.verified
    return "verified"


def test_an_intact_export_verifies(verify, exported):
    status, result, message = verify(exported)
    assert (status, result.verified, message) == (0, 1, "")


def test_each_corrupted_constant_is_named_as_python_names_it(verify, exported):
    rng = np.random.default_rng(3)
    for buffer, name, start, length in constant_buffers(exported):
        corrupted = bytearray(exported)
        corrupted[start + int(rng.integers(length))] ^= 0x01
        status, result, message = verify(bytes(corrupted))
        assert status == MODEL_ERROR and result.corrupt_buffer == buffer, message
        assert message == f"model: tensor: {name}: constant data corrupted (buffer {buffer})"[:127]
        with pytest.raises(IntegrityError, match=f"{name}: constant data corrupted"):
            verify_integrity(bytes(corrupted))


def test_corrupted_options_name_the_operator(verify, exported):
    model = schema.Model.GetRootAs(exported, 0)
    operator = model.Subgraphs(0).Operators(1)
    start = operator._tab.Vector(operator._tab.Offset(14))  # custom_options
    corrupted = bytearray(exported)
    corrupted[start + 3] ^= 0x40
    status, result, message = verify(bytes(corrupted))
    assert (status, result.corrupt_operator) == (MODEL_ERROR, 1), message
    assert message == "model: operator: 1: custom options corrupted"


def test_a_model_with_mcubert_ops_but_without_the_record_is_refused(verify, exported):
    status, result, message = verify(without_record(exported))
    assert (status, result.verified) == (MODEL_ERROR, 0)
    assert message.startswith("model: MCUBERT_INTEGRITY: missing, but the model uses MCUBERT ops"), message


def test_a_model_without_mcubert_ops_or_record_is_unverified_not_ok(verify, exported):
    status, result, message = verify(without_record(exported, rename_ops=True))
    assert (status, result.verified) == (kernel_abi.UNVERIFIED, 0)
    assert "absent: the model cannot be checked" in message


def test_truncated_padded_and_foreign_bytes_are_refused(verify, exported):
    for model in (exported[:-1], exported[: len(exported) // 2], exported + b"\0" * 4, b"", b"TFL3" * 3):
        status, _, message = verify(model)
        assert status == MODEL_ERROR and message.startswith("model: "), message


def test_random_flips_get_the_verdict_python_gives(verify, exported):
    rng = random.Random(7)
    verdicts = {}
    for _ in range(1500):
        corrupted = bytearray(exported)
        corrupted[rng.randrange(len(corrupted))] ^= 1 << rng.randrange(8)
        status, result, message = verify(bytes(corrupted))
        verdict = c_verdict(status, result)
        expected = python_verdict(bytes(corrupted))
        assert verdict == expected or (verdict, expected) == ("corrupted", "absent"), message
        verdicts[verdict] = verdicts.get(verdict, 0) + 1
    assert verdicts.get("corrupted", 0) > 1400, verdicts


@pytest.mark.parametrize("cpu", ["cortex-m7", "cortex-m4"])
def test_cortex_m_gives_the_same_verdicts_within_a_bounded_cost(arm_images, exported, cpu):
    from tflm_mcubert.measure.arm_emulator import ArmEmulator

    emu = ArmEmulator(arm_images(cpu), cpu)
    root = schema.Model.GetRootAs(exported, 0)
    tables = root.Subgraphs(0).TensorsLength() + root.Subgraphs(0).OperatorsLength() + root.BuffersLength()
    corrupted = bytearray(exported)
    _, name, start, _ = constant_buffers(exported)[4]
    corrupted[start] ^= 0x80
    for model, expected_status in ((exported, 0), (bytes(corrupted), MODEL_ERROR)):
        mark = emu.heap_mark()
        model_at, result_at = emu.put(model), emu.alloc(16)
        message_at = emu.alloc(kernel_abi.MESSAGE_CAPACITY)
        run = emu.call("mcubert_verify_model", model_at, len(model), result_at, message_at, count_instructions=True)
        message = emu.read(message_at, kernel_abi.MESSAGE_CAPACITY).split(b"\0")[0].decode()
        assert run.value == expected_status, message
        if expected_status == 0:
            assert np.frombuffer(emu.read(result_at, 4), "<i4")[0] == 1
            # Nibble-table CRC: 10 instructions per byte (ldrb with post-increment, two nibble
            # steps of and/ldr/eor, compare, branch) plus the walks: to the record (~2,500 on this
            # model) and of the structure before OK (every table inside the file: ~450 instructions
            # per tensor, operator or buffer). One more per byte, as when a NULL test stayed inside
            # the loop (issue 28, finding 5: 12,290 instead of 10,243 per KB), fails this.
            assert run.instructions <= 10 * len(model) + 4096 + 500 * tables, run.instructions - 10 * len(model)
            assert run.stack_bytes < 384
        else:
            assert name in message
        emu.release(mark)
