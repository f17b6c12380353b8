"""`evaluate`: accuracy or fidelity of the float, int8 (MCUBERT reference) and stock TFLM models."""
