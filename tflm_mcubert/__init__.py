"""tflm-mcubert: BERT on commodity microcontrollers with TensorFlow Lite Micro (MCUBERT, ICCAD'24)."""

__version__ = "0.1.0"
