"""What a firmware needs besides the .tflite: the C/C++ files an export writes (model data, settings,
test vectors, the op resolver, the on-device vocabulary), the Arduino and CMake bundles, the bare-metal
C data and the layer and text checks. export/ makes the model; this package turns it into firmware."""
