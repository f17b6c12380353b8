"""int8 quantization of a float BERT into MCUBERT op parameters.

float_model.py      the Keras model's weights in the ops' float layouts, and its float64 forward
calibrate.py        PTQ: activation ranges on calibration samples -> every op's integer params
qat.py              optional KD quantization-aware fine-tune (fake quant) before calibration
quantized_model.py  the int8 encoder (QuantizedBert): params, tensor quantization, reference run
quantized_decoder.py the int8 decoder (QuantizedDecoder): calibration, one token per step over KV caches
holders.py          each topology's parameter holder (ops/topology.py), for readers
"""
