"""Everything that reads, writes or edits a `.tflite` flatbuffer.

graph.py           generic reader: operators, tensors, named inputs/outputs, constant bytes
mcubert_writer.py  the MCUBERT int8 model -> .tflite (custom ops, offline arena plan, aligned buffers)
mcubert_reader.py  an MCUBERT .tflite -> op parameters, verifying everything a kernel relies on
edit.py            rewrites of a converted (stock) .tflite that the converter cannot be asked for
"""
