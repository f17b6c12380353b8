"""Building and measuring the C kernels on emulated Cortex-M cores (bench/ and tests; export imports it
only to measure the tokenizer, when the tools are there: firmware/vocab_files.py).

kernel_build.py         the kernels' one build: custom_ops/CMakeLists.txt per variant, cached per revision
arm_emulator.py         unicorn: ELF loader, direct kernel calls, instruction and stack counts
instruction_classes.py  per-class instruction counts priced into a labelled cycle ESTIMATE
baseline_abi.py         calls into the re-implemented baselines (custom_ops/baselines/)
tokenizer_abi.py        the C tokenizer under the emulator (and its cost, for export's report)
"""
