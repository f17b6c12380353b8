"""Instruction classes of executed Thumb code, and a cycle ESTIMATE for Cortex-M7, M4, M33, M55 and M0+.

The emulator (measure/arm_emulator.py) counts executions per translated block; this module
disassembles the same ELF once (arm-none-eabi-objdump), classifies every instruction, and turns a
block profile into class counts and estimated cycles:

    profile = InstructionProfile("build/cortex-m7/mcubert_baselines_emu.elf")
    classes = profile.classes(run.blocks)          # {"mac": ..., "load": ..., ...}
    cycles = profile.cycles(run.blocks, "cortex-m7")

The cycle numbers are estimates from instruction classes, not measurements. Assumptions, from Arm's
public documentation of the cores (Cortex-M4 TRM r0p1 "Instruction set summary" cycle table;
Cortex-M7 TRM r1p2 and Arm's Cortex-M7 processor overview for the pipeline):

  Cortex-M4 (3-stage, in order, single issue): data processing, SIMD, saturation, IT and every
    multiply / multiply-accumulate including the 64-bit and dual 16-bit ones (SMULL, SMLAL,
    SMLAD, SMMLA, ...): 1 cycle. LDR*: 2, or 1 when it directly follows another load/store it
    pipelines with; STR*: 1. LDRD/STRD: 3; LDM/STM/PUSH/POP of N registers: 1 + N. Taken branch
    1 + P with P = 2 (pipeline refill, 1..3 in the TRM); TBB/TBH 2 + P; SDIV/UDIV 7 (2..12).
  Cortex-M7 (6-stage, dual issue): two integer ALU pipes, one MAC pipe, one load/store pipe with
    a 64-bit data path, a branch target cache. Per translated block the estimate is the largest of
    (instructions / 2) [issue width], (multiplies) [one MAC pipe] and (load/store beats: one per
    LDR/STR, ceil(N / 2) per LDM/STM/LDRD/STRD) [one load/store pipe], plus 1 cycle per taken
    branch (a predicted taken branch still costs a fetch bubble) and 6 extra per division.
    Mispredictions, result latencies, dual-issue pairing rules and cache/flash wait states are
    ignored: it is close to a throughput bound, for code and data in zero-wait-state memory
    (TCM, or cache hits).
  Cortex-M33 (3-stage, in order, single issue, single-cycle 32-bit multiplier and DSP MACs): Arm
    publishes no per-instruction cycle table for it, so the Cortex-M4 table stands in.
  Cortex-M0+ (2-stage; Cortex-M0+ TRM r0p1 "Instruction set summary", with the single-cycle
    multiplier option the RP2040 has): data processing and MULS 1; LDR*/STR* 2; LDM/STM/PUSH/POP
    of N registers 1 + N, POP with pc 3 + N; taken branch 2 (BL 3), not taken 1.
  Cortex-M55 (in order; Helium): from LLVM's scheduling model of the core (llvm/lib/Target/ARM/
    ARMScheduleM55.td, written with Arm; Arm's Software Optimization Guide for the M55 gives the same
    beat rules). Every MVE instruction takes two beats (64 bits each) on one of the EPU's pipes: load/
    store (VLDR, VLD2x, VSTR...), integer (VADD, VREV, VSHR, VMOVL...) or float/multiply (VMUL, VMLA,
    VMLADAV, VMLAV, VADDV, VCMP...); the next MVE instruction may start one cycle later when it goes
    down another pipe (its first beat overlapping the previous one's second), else when its pipe is
    free; VCTP/VPST/VPNOT take one cycle. Issue is in order, so pipe-grouped code does not overlap.
    Scalar instructions take the Cortex-M4 table's cycles (LLVM: the M55's scalar pipeline is "a lot
    like the M4/M33"), its dual issue of 16-bit pairs ignored; LE, the low-overhead loop's end, is
    free, and a loop body's cost is its steady state (its next iteration overlapping). Result
    latencies and memory wait states are ignored: for TCM-resident code and data.
    Blocks come from QEMU (measure/qemu_blocks.py); objdump decodes MVE with `-m armv8.1-m.main`.
  Branches (every core): which way a conditional branch went is not in a block profile; the
    static heuristic "backward taken, forward not taken" stands in (loop back-edges dominate
    these kernels); unconditional branches, returns and table branches are taken.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import shutil
import subprocess
from pathlib import Path

CLASSES = (
    "alu",
    "mac",
    "load",
    "load_double",
    "load_multiple",
    "store",
    "store_double",
    "store_multiple",
    "branch",
    "table_branch",
    "divide",
)

_CONDITIONS = "eq|ne|cs|hs|cc|lo|mi|pl|vs|vc|hi|ls|ge|lt|gt|le|al"
_BRANCH = re.compile(rf"^(?:b|bl|blx|bx)(?:{_CONDITIONS})?$")
_MAC = re.compile(
    r"^(?:mul|mla|mls|smull|umull|smlal|umlal|umaal|smla|smlsd|smlsld|smuad|smusd|smmul|"
    r"smmla|smmls|smul)"
)
_LINE = re.compile(r"^\s*([0-9a-f]+):\s+((?:[0-9a-f]{4}\s?){1,2})\s+(\S+)\s*(.*)$")


@dataclasses.dataclass(frozen=True)
class Instruction:
    address: int
    size: int
    klass: str
    registers: int = 0  # transferred registers (multiple / double)
    writes_pc: bool = False  # POP {.., pc} / LDR pc: also a branch
    target: int | None = None  # direct branch target
    conditional: bool = False  # b<cond>, cbz, cbnz
    links: bool = False  # bl: a call
    mnemonic: str = ""  # as disassembled (the Cortex-M55 model reads MVE instructions by name)
    operands: str = ""

    @property
    def taken(self) -> bool:
        """Static guess: unconditional and backward branches taken, forward conditional ones not."""
        if self.klass == "table_branch" or self.writes_pc:
            return True
        if self.klass != "branch":
            return False
        if not self.conditional:
            return True
        return self.target is not None and self.target <= self.address


def classify(mnemonic: str, operands: str) -> tuple[str, int, bool]:
    """(class, registers transferred, writes pc) of one GNU-syntax Thumb instruction."""
    base = mnemonic.split(".")[0].lower()
    reg_list = re.search(r"\{([^}]*)\}", operands)
    count = 0
    if reg_list:
        for part in reg_list.group(1).split(","):
            part = part.strip()
            if "-" in part:
                lo, hi = (int(re.sub(r"\D", "", x) or 0) for x in part.split("-"))
                count += hi - lo + 1
            elif part:
                count += 1
    writes_pc = bool(reg_list and re.search(r"\bpc\b", reg_list.group(1)))
    if base in ("cbz", "cbnz") or _BRANCH.match(base):
        return "branch", 0, False
    if base in ("tbb", "tbh"):
        return "table_branch", 0, False
    if base in ("sdiv", "udiv"):
        return "divide", 0, False
    if _MAC.match(base):
        return "mac", 0, False
    if base.startswith(("ldm", "pop")):
        return "load_multiple", count, writes_pc
    if base.startswith(("stm", "push")):
        return "store_multiple", count, False
    if base.startswith("ldrd"):
        return "load_double", 2, False
    if base.startswith("strd"):
        return "store_double", 2, False
    if base.startswith("ldr"):
        return "load", 1, operands.split(",")[0].strip() == "pc"
    if base.startswith("str"):
        return "store", 1, False
    return "alu", 0, False


def _objdump() -> str:
    tool = shutil.which("arm-none-eabi-objdump")
    if tool is None:
        raise RuntimeError("arm-none-eabi-objdump not found (Debian: gcc-arm-none-eabi)")
    return tool


class InstructionProfile:
    """The classified instructions of one ELF image, by address."""

    def __init__(self, elf: str | Path, architecture: str | None = None):
        """`architecture`: objdump's -m (e.g. "armv8.1-m.main", which it needs to decode MVE)."""
        machine = ["-m", architecture] if architecture else []
        text = subprocess.run(
            [_objdump(), "-d", "--no-show-raw-insn", *machine, str(elf)], capture_output=True, text=True, check=True
        ).stdout
        raw = subprocess.run([_objdump(), "-d", *machine, str(elf)], capture_output=True, text=True, check=True).stdout
        sizes: dict[int, int] = {}
        for line in raw.splitlines():
            match = _LINE.match(line)
            if match:
                sizes[int(match.group(1), 16)] = len(match.group(2).replace(" ", "")) // 2
        self.instructions: dict[int, Instruction] = {}
        for line in text.splitlines():
            parts = line.split("\t")
            if len(parts) < 2 or not parts[0].strip().endswith(":"):
                continue
            try:
                address = int(parts[0].strip()[:-1], 16)
            except ValueError:
                continue
            mnemonic = parts[1].strip()
            operands = parts[2].strip() if len(parts) > 2 else ""
            if address not in sizes or not mnemonic or mnemonic.startswith("."):
                continue
            klass, registers, writes_pc = classify(mnemonic, operands)
            target, conditional, links = None, False, False
            if klass == "branch":
                found = re.match(r"([0-9a-f]+)\b", operands.split(",")[-1].strip())
                target = int(found.group(1), 16) if found else None
                base = mnemonic.split(".")[0].lower()
                conditional = base in ("cbz", "cbnz") or (base not in ("b", "bl", "blx", "bx") and base.startswith("b"))
                links = base == "bl"
            self.instructions[address] = Instruction(
                address, sizes[address], klass, registers, writes_pc, target, conditional, links, mnemonic, operands
            )

    @functools.lru_cache(maxsize=None)
    def block(self, address: int, size: int) -> tuple[Instruction, ...]:
        """The instructions of a translated block [address, address + size)."""
        out, at = [], address
        while at < address + size:
            instruction = self.instructions.get(at)
            if instruction is None:  # data in the code (literal pools are never executed)
                break
            out.append(instruction)
            at += instruction.size
        return tuple(out)

    def classes(self, blocks: dict[tuple[int, int], int]) -> dict[str, int]:
        """Executed instructions per class, from an emulator block profile."""
        totals = dict.fromkeys(CLASSES, 0)
        for (address, size), count in blocks.items():
            for instruction in self.block(address, size):
                totals[instruction.klass] += count
        return totals

    def cycles(self, blocks: dict[tuple[int, int], int], cpu: str) -> float:
        """Estimated cycles (see the module docstring) of a block profile on `cpu`."""
        cost = CYCLE_MODELS[cpu]
        return float(sum(count * cost(self.block(address, size)) for (address, size), count in blocks.items()))


def m4_instruction_cycles(ins: Instruction, previous_memory: bool) -> int:
    """One instruction's cycles in the Cortex-M4 table (see the module docstring); `previous_memory`: it
    directly follows a load or store."""
    k = ins.klass
    if k == "load":
        return (1 if previous_memory else 2) + (2 if ins.writes_pc else 0)
    if k in ("load_double", "store_double"):
        return 3
    if k in ("load_multiple", "store_multiple"):
        return 1 + ins.registers + (2 if ins.writes_pc else 0)
    if k == "branch":
        return 3 if ins.taken else 1
    return {"table_branch": 4, "divide": 7}.get(k, 1)  # store, alu, mac: 1


@functools.lru_cache(maxsize=None)
def _block_cycles_m4(block: tuple[Instruction, ...]) -> float:
    cycles = 0.0
    previous_memory = False
    for ins in block:
        cycles += m4_instruction_cycles(ins, previous_memory)
        previous_memory = ins.klass in ("load", "store")
    return cycles


@functools.lru_cache(maxsize=None)
def _block_cycles_m7(block: tuple[Instruction, ...]) -> float:
    issue = len(block) / 2
    mac = sum(1 for ins in block if ins.klass == "mac")
    memory = 0.0
    extra = 0.0
    for ins in block:
        if ins.klass in ("load", "store"):
            memory += 1
        elif ins.klass in ("load_double", "store_double", "load_multiple", "store_multiple"):
            memory += (ins.registers + 1) // 2
        elif ins.klass == "divide":
            extra += 6
        if ins.taken:
            extra += 1
    return max(issue, mac, memory) + extra


@functools.lru_cache(maxsize=None)
def _block_cycles_m0plus(block: tuple[Instruction, ...]) -> float:
    cycles = 0.0
    for ins in block:
        k = ins.klass
        if k in ("load", "store"):
            cycles += 2 + (1 if ins.writes_pc else 0)
        elif k in ("load_multiple", "store_multiple", "load_double", "store_double"):
            cycles += 1 + ins.registers + (2 if ins.writes_pc else 0)
        elif k == "branch":
            cycles += (3 if ins.links else 2) if ins.taken else 1
        else:  # alu, mac (MULS); ARMv6-M has no divide or table branch
            cycles += 1
    return cycles


# ---- Cortex-M55 (Helium) ----------------------------------------------------------------------------
# MVE pipes of the M55's EPU, after LLVM's scheduling model of the core (ARMScheduleM55.td): "ls" load/store,
# "int" integer, "mul" float/multiply; "sys" (VCTP, VPST, VPNOT) takes one cycle. Names not listed: "int".
_MVE_MUL = re.compile(
    r"^(?:vmul|vmla|vmls|vrmla|vrmls|vqdm|vqrdm|vrmul|vaddv|vaddlv|vcmp|vpt|vcvt|vfm|vcmla|vcmul|vmov\.i)"
)
_MVE_LS = re.compile(r"^(?:vldr|vstr|vld[24]|vst[24])")
_MVE_SYS = ("vctp", "vpst", "vpnot")
_Q_REGISTER = re.compile(r"\bq[0-7]\b")


def mve_pipe(ins: Instruction) -> str | None:
    """The EPU pipe an MVE instruction occupies, or None for a scalar (or scalar floating-point) one."""
    name = ins.mnemonic.lower()
    if name.split(".")[0] in _MVE_SYS:
        return "sys"
    if not name.startswith("v") or not _Q_REGISTER.search(ins.operands.lower()):
        return None
    if _MVE_LS.match(name):
        return "ls"
    return "mul" if _MVE_MUL.match(name) else "int"


def _is_loop_end(ins: Instruction) -> bool:
    return ins.mnemonic.lower().split(".")[0] in ("le", "letp")


def _m55_schedule(block: tuple[Instruction, ...]) -> float:
    """Cycles of one pass over `block`: every MVE instruction is two beats on its pipe, and the next one
    may start one cycle later when it goes down another pipe (beat overlap), else when its pipe frees;
    a scalar instruction issues after the previous one with the Cortex-M4's costs (LLVM: the M55's
    scalar pipeline is "a lot like the M4/M33"); LE, the low-overhead loop's end, costs nothing."""
    free = dict.fromkeys(("ls", "int", "mul", "sys"), 0.0)
    issue, end, previous_memory = -1.0, 0.0, False
    for ins in block:
        pipe = mve_pipe(ins)
        if pipe is not None:
            beats = 1 if pipe == "sys" else 2
            issue = max(issue + 1, free[pipe])
            free[pipe] = issue + beats
            end = max(end, issue + beats)
        elif not _is_loop_end(ins):
            cost = m4_instruction_cycles(ins, previous_memory)
            end = max(end, issue + 1 + cost)
            issue += cost
        previous_memory = ins.klass in ("load", "store")
    return end


@functools.lru_cache(maxsize=None)
def _block_cycles_m55(block: tuple[Instruction, ...]) -> float:
    """A block that ends in LE back to its own start is a loop body, executed once per iteration: its
    steady-state cost (two passes less one) lets an iteration's first beats overlap the last one's."""
    if block and _is_loop_end(block[-1]):
        return _m55_schedule(block + block) - _m55_schedule(block)
    return _m55_schedule(block)


# The cores with a cycle model; the M33 uses the M4's table (see the module docstring).
CYCLE_MODELS = {
    "cortex-m7": _block_cycles_m7,
    "cortex-m4": _block_cycles_m4,
    "cortex-m33": _block_cycles_m4,
    "cortex-m0plus": _block_cycles_m0plus,
    "cortex-m55": _block_cycles_m55,
}
