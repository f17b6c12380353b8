"""The whole decoder on an emulated core, as the firmware will run it: every op's kernel called in node
order, one token per step, each layer's KV cache living in the core's memory between steps and the greedy
id fed back. Every step's top-k and, at the end, every cache equal the numpy reference's (QuantizedDecoder),
with int8 weights and with int4 ones (all four projections and both MLP layers, and a per-matrix mix)."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from tflm_mcubert.ops import kernel_abi
from tflm_mcubert.ops.kernel_abi import make_params

pytest.importorskip("unicorn", reason="the `unicorn` package runs the Cortex-M tests")

VOCAB = 97
CORES = [
    ("cortex-m7", False, 256),
    ("cortex-m4", False, 48),
    ("cortex-m7", True, 48),
    ("cortex-m33", False, 24),  # Raspberry Pi Pico 2: ARMv8-M with the DSP extension
    ("cortex-m0plus", False, 24),  # Raspberry Pi Pico: ARMv6-M, the plain path by itself
]


# int4 everywhere in layer 0; layer 1 mixes widths inside both ops (SPEC 3.1.2: the mask of version 9)
INT4_MATRICES = {
    **{f"layer0.causal_attention.{m}": 4 for m in ("query", "key", "value", "output")},
    **{f"layer0.decoder_mlp.{m}": 4 for m in ("fc1", "fc2")},
    "layer1.causal_attention.key": 4,
    "layer1.causal_attention.value": 4,
    "layer1.decoder_mlp.fc1": 4,
}


def calibrated(int4_matrices=()):
    from tflm_mcubert.model.decoder import build_decoder
    from tflm_mcubert.model.decoder_config import DecoderConfig
    from tflm_mcubert.ops.widths import Widths
    from tflm_mcubert.quantize.quantized_decoder import calibrate_decoder

    raw = {"model_type": "gpt2", "vocab_size": VOCAB, "n_positions": 256, "n_embd": 32, "n_layer": 2, "n_head": 4}
    model = build_decoder(DecoderConfig.from_hf_dict(raw), seed=5)
    rng = np.random.default_rng(0)
    sequences = [rng.integers(0, VOCAB, 48) for _ in range(8)]
    widths = Widths.per_matrix(dict.fromkeys(int4_matrices, 4))
    return calibrate_decoder(model, sequences, top_k=4, widths=widths)


@pytest.fixture(scope="module")
def decoder():
    return calibrated()


@pytest.fixture(scope="module")
def int4_decoder():
    return calibrated(INT4_MATRICES)


class OnCore:
    """The decoder's nodes placed once in emulated memory: constants, params and weights per node, one
    hidden buffer, the position and id words, each layer's cache, the head's output."""

    def __init__(self, emulator, decoder):
        self.emu, self.nodes = emulator, decoder.nodes()
        put = emulator.put
        d = decoder.embedding.hidden
        self.runtime = {
            "input_id": put(np.zeros(1, np.int32), 8),
            "position": put(np.zeros(1, np.int32), 8),
            "hidden": put(np.zeros(d, np.int8), 16),
            "top": put(np.zeros(2 * decoder.head.top_k, np.int32), 16),
            **{name: put(cache, 16) for name, cache in decoder.new_caches().items()},
        }
        self.message = put(bytes(kernel_abi.MESSAGE_CAPACITY), 4)
        self.calls = []
        for node in self.nodes:
            op = node.op
            tensors = node.params.tensors()
            fields = op.weight_fields
            weights = put(
                struct.pack(f"<{len(fields)}I", *(put(np.ascontiguousarray(tensors[f]), 16) for f in fields)), 8
            )
            params = put(bytes(make_params(op.code, node.params.options())), 8)
            size = emulator.call(op.buffer_size_symbol, *op.buffer_size_args(node.params)).value
            context = put(struct.pack("<Ii", put(bytes(max(size, 0)), 16), size), 8)
            arguments = [self.runtime[name] for name in node.inputs]
            if not op.in_place:
                arguments.append(self.runtime["top" if op.output == "top" else op.output])
            self.calls.append((op.kernel_symbol, params, weights, arguments, context))

    def step(self, token: int, position: int) -> np.ndarray:
        self.emu.uc.mem_write(self.runtime["input_id"], struct.pack("<i", token))
        self.emu.uc.mem_write(self.runtime["position"], struct.pack("<i", position))
        for symbol, params, weights, arguments, context in self.calls:
            result = self.emu.call(symbol, params, weights, *arguments, context, self.message)
            assert result.value == kernel_abi.OK, (symbol, self.emu.read(self.message, 128))
        return np.frombuffer(self.emu.read(self.runtime["top"], 8 * self.nodes[-1].params.top_k), np.int32)

    def cache(self, name: str, shape) -> np.ndarray:
        return np.frombuffer(self.emu.read(self.runtime[name], int(np.prod(shape))), np.int8).reshape(shape)


CORE_IDS = [f"{c}-{'plain' if p else 'dsp'}" for c, p, _ in CORES]


@pytest.mark.parametrize("cpu,plain,steps", CORES, ids=CORE_IDS)
def test_greedy_generation_on_the_core_equals_the_reference(arm_images, decoder, cpu, plain, steps):
    generate_on_the_core(arm_images, decoder, cpu, plain, steps)


@pytest.mark.parametrize("cpu,plain,steps", CORES, ids=CORE_IDS)
def test_int4_weights_generate_on_the_core_as_the_reference(arm_images, int4_decoder, cpu, plain, steps):
    widths = [n.params.options().get("int4_layers") for n in int4_decoder.nodes() if n.op.per_layer]
    assert widths == [0b1111, 0b11, 0b0110, 0b01]  # what the kernels are given: version 9's masks
    generate_on_the_core(arm_images, int4_decoder, cpu, plain, min(steps, 64))


def generate_on_the_core(arm_images, decoder, cpu, plain, steps):
    from tflm_mcubert.measure.arm_emulator import ArmEmulator

    emulator = ArmEmulator(arm_images(cpu, plain), cpu)
    on_core = OnCore(emulator, decoder)
    caches = decoder.new_caches()
    token = 7
    for position in range(steps):
        expected = decoder.step(token, position, caches).reshape(-1)
        got = on_core.step(token, position)
        assert np.array_equal(got, expected), f"step {position}"
        token = int(expected[0])
    for name, cache in caches.items():
        assert np.array_equal(on_core.cache(name, cache.shape), cache), name
