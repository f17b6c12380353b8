"""MCUBERT custom ops: the numerics contract (SPEC.md), its numpy reference, and its serialization.

    fixed_point.py   rounding, requantization, isqrt / inverse sqrt, LUT builders (shared by all ops)
    quantization.py  offline (scale, zero point) of activations
    linear.py        quantized linear layers, the pair4 weight layout, exact integer matmul
    layernorm.py     integer LayerNorm and the pre-norm residual sum
    scratch.py       scratch layouts: where each op keeps its intermediates
    embedding.py     MCUBERT_EMBEDDING      attention.py  MCUBERT_ATTENTION      mlp.py  MCUBERT_MLP
    contract.py      option fields, tensor signatures, constants      registry.py  SPEC_HASH
    options.py       flexbuffer options: encode, verify and decode
    testing.py       synthetic parameters (tests, golden vectors for the C kernels)

Pure numpy; no TensorFlow import anywhere in this package.
"""
