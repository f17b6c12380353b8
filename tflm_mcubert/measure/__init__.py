"""Measuring the C kernels on emulated Cortex-M cores (bench/ and tests only; export never imports it).

arm_emulator.py         unicorn: ELF loader, direct kernel calls, instruction and stack counts
instruction_classes.py  per-class instruction counts priced into a labelled cycle ESTIMATE
baseline_abi.py         calls into the re-implemented baselines (custom_ops/baselines/)
"""
