"""Run the Cortex-M build of the MCUBERT kernels under unicorn: call them, count instructions.

    emu = ArmEmulator("build/cortex-m7/mcubert_emu.elf", cpu="cortex-m7")
    run = run_kernel(emu, kernel_abi.mlp_call(params, hidden), count_instructions=True)
    run.status, run.output, run.instructions, run.stack_bytes

The image is custom_ops' `mcubert_emu` target (measure/kernel_build.py; the static library linked at the MPS2 memory
map of custom_ops/test/arm/mps2.ld). Its loadable segments are copied to their run addresses
(no startup code runs), arrays and structs are placed on a bump heap after the image's RAM, and a
function is called AAPCS-style: r0-r3 then the stack, LR pointing at `mcubert_emu_stop`, where
emulation halts. The CPU model is the real core's (UC_CPU_ARM_CORTEX_M7 / M4 / M33 / M3; the M0 for the M0+,
which has the same ARMv6-M instruction set), so DSP instructions
behave as on silicon; unlike QEMU's system emulation, unicorn does not fault on unaligned LDRD/LDM
(custom_ops' QEMU firmware test covers that).

Instruction counts come from a basic-block hook: every execution of a translated block is
counted, and each block's Thumb instructions are decoded once (16/32-bit lengths of its bytes).
Executed instructions, not cycles: conditional instructions inside IT blocks count as executed.
The hook is a few lines of C compiled on first use with the host C compiler (`cc`) and called
by unicorn directly — about 5x the speed of a Python callback, which is what makes benchmarking
whole layers affordable; without a C compiler the runner falls back to a Python hook (same
counts). `CallResult.blocks` gives the per-block execution counts (for instruction-class
profiles). Stack use is measured by painting the stack before a call and finding the deepest
overwritten word after it.
"""

from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import os
import shutil
import struct
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from tflm_mcubert.ops import kernel_abi
from tflm_mcubert.ops.kernel_abi import KernelCall
from tflm_mcubert.ops.registry import op as op_of

CODE_BASE = 0x00000000
CODE_SIZE = 4 << 20
RAM_BASE = 0x20000000
STACK_PAINT = 0xA5
_PT_LOAD = 1
_SHT_SYMTAB = 2


class EmulatorError(RuntimeError):
    """The emulated code faulted, ran away, or the image is not what the runner expects."""


@dataclasses.dataclass(frozen=True)
class ElfImage:
    """The parts of a 32-bit little-endian Arm ELF the runner needs: load segments and symbols."""

    segments: tuple[tuple[int, bytes, int], ...]  # (address, file bytes, memory size)
    symbols: dict[str, int]

    @classmethod
    def read(cls, path: str | Path) -> "ElfImage":
        data = Path(path).read_bytes()
        if data[:4] != b"\x7fELF" or data[4] != 1 or data[5] != 1:
            raise EmulatorError(f"{path}: not a 32-bit little-endian ELF")
        (e_phoff, e_shoff, _flags, _ehsize, e_phentsize, e_phnum, e_shentsize, e_shnum, _shstrndx) = struct.unpack_from(
            "<IIIHHHHHH", data, 28
        )
        segments = []
        for i in range(e_phnum):
            p_type, p_offset, p_vaddr, _paddr, p_filesz, p_memsz, _flags, _align = struct.unpack_from(
                "<8I", data, e_phoff + i * e_phentsize
            )
            if p_type == _PT_LOAD and p_memsz:
                segments.append((p_vaddr, data[p_offset : p_offset + p_filesz], p_memsz))
        sections = [struct.unpack_from("<10I", data, e_shoff + i * e_shentsize) for i in range(e_shnum)]
        symbols: dict[str, int] = {}
        for sh in sections:
            if sh[1] != _SHT_SYMTAB:
                continue
            strtab = sections[sh[6]]
            str_off = strtab[4]
            for j in range(sh[5] // 16):
                st_name, st_value, _size, _info, _other, _shndx = struct.unpack_from("<IIIBBH", data, sh[4] + j * 16)
                if st_name:
                    end = data.index(b"\0", str_off + st_name)
                    symbols[data[str_off + st_name : end].decode()] = st_value
        return cls(tuple(segments), symbols)


@dataclasses.dataclass(frozen=True)
class CallResult:
    value: int  # r0 as a signed int32
    instructions: int | None  # executed instructions (None when not counted)
    stack_bytes: int  # deepest stack use below the caller's SP
    blocks: dict[tuple[int, int], int] | None = None  # (address, size) -> executions, if counted


# ---------------------------------------------------------------------------------------------
# Native block counter
# ---------------------------------------------------------------------------------------------

_COUNTER_SOURCE = r"""
#include <stdint.h>
/* Block executions by (address << 16 | size), open addressing; `order` lists used slots. */
typedef struct { uint64_t key, count; } slot;
typedef struct { slot *slots; uint32_t *order; uint64_t mask, used, dropped; } table;
void tflm_mcubert_count_block(void *uc, uint64_t address, uint32_t size, void *user)
{
    table *t = (table *)user;
    const uint64_t key = (address << 16) | size;
    uint64_t h = ((key * 0x9E3779B97F4A7C15ull) >> 32) & t->mask;
    (void)uc;
    for (;;) {
        slot *s = &t->slots[h];
        if (s->key == key) { s->count++; return; }
        if (s->key == 0) {
            if (2 * (t->used + 1) > t->mask + 1) { t->dropped++; return; }
            s->key = key; s->count = 1; t->order[t->used++] = (uint32_t)h; return;
        }
        h = (h + 1) & t->mask;
    }
}
"""
_COUNTER_SLOTS = 1 << 16


class _Slot(ctypes.Structure):
    _fields_ = [("key", ctypes.c_uint64), ("count", ctypes.c_uint64)]


class _Table(ctypes.Structure):
    _fields_ = [
        ("slots", ctypes.POINTER(_Slot)),
        ("order", ctypes.POINTER(ctypes.c_uint32)),
        ("mask", ctypes.c_uint64),
        ("used", ctypes.c_uint64),
        ("dropped", ctypes.c_uint64),
    ]


def _counter_library():
    """The compiled counter (cached by source hash), or None without a host C compiler."""
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        return None
    digest = hashlib.sha256(_COUNTER_SOURCE.encode()).hexdigest()[:16]
    user = getattr(os, "getuid", lambda: 0)()
    cache = Path(tempfile.gettempdir()) / f"tflm_mcubert_block_counter_{user}_{digest}.so"
    if not cache.exists():
        source = cache.with_suffix(".c")
        source.write_text(_COUNTER_SOURCE)
        partial = cache.with_suffix(f".{os.getpid()}.tmp")
        proc = subprocess.run(
            [compiler, "-O2", "-shared", "-fPIC", "-o", str(partial), str(source)], capture_output=True, text=True
        )
        if proc.returncode != 0:
            return None
        os.replace(partial, cache)  # atomic: concurrent builders never see half a file
    try:
        return ctypes.CDLL(str(cache))
    except OSError:
        return None


class _NativeCounter:
    """The C hook, installed once for the emulator's lifetime (so every translated block carries
    it); reset before and read after each counted call."""

    def __init__(self, uc, library):
        from unicorn import UC_HOOK_BLOCK
        from unicorn.unicorn_py3 import unicorn as binding

        self._slots = (_Slot * _COUNTER_SLOTS)()
        self._order = (ctypes.c_uint32 * _COUNTER_SLOTS)()
        self._table = _Table(
            ctypes.cast(self._slots, ctypes.POINTER(_Slot)),
            ctypes.cast(self._order, ctypes.POINTER(ctypes.c_uint32)),
            _COUNTER_SLOTS - 1,
            0,
            0,
        )
        self._function = ctypes.cast(library.tflm_mcubert_count_block, ctypes.c_void_p)
        handle = binding.uc_hook_h()
        status = binding.uclib.uc_hook_add(
            uc._uch,
            ctypes.byref(handle),
            UC_HOOK_BLOCK,
            self._function,
            ctypes.cast(ctypes.pointer(self._table), ctypes.c_void_p),
            ctypes.c_uint64(1),
            ctypes.c_uint64(0),
        )
        if status != 0:
            raise EmulatorError(f"uc_hook_add failed ({status})")
        self._handle = handle

    def reset(self):
        ctypes.memset(self._slots, 0, ctypes.sizeof(self._slots))
        self._table.used = 0
        self._table.dropped = 0

    def blocks(self) -> dict[tuple[int, int], int]:
        if self._table.dropped:
            raise EmulatorError("block counter table overflow")
        result = {}
        for i in range(self._table.used):
            entry = self._slots[self._order[i]]
            result[(entry.key >> 16, entry.key & 0xFFFF)] = entry.count
        return result


def _thumb_instruction_count(code: bytes) -> int:
    count = i = 0
    while i + 1 < len(code):
        first = code[i] | (code[i + 1] << 8)
        i += 4 if (first >> 11) in (0b11101, 0b11110, 0b11111) else 2
        count += 1
    return count


class ArmEmulator:
    """One Cortex-M core with the kernel image loaded; reusable for many calls."""

    def __init__(
        self,
        elf: str | Path,
        cpu: str = "cortex-m7",
        *,
        ram_size: int = 16 << 20,
        stack_size: int = 64 << 10,
        native_counter: bool = True,
    ):
        try:
            from unicorn import UC_ARCH_ARM, UC_MODE_MCLASS, UC_MODE_THUMB, Uc
            from unicorn import arm_const
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise EmulatorError("the `unicorn` package is required (pip install unicorn)") from exc
        models = {
            "cortex-m7": arm_const.UC_CPU_ARM_CORTEX_M7,
            "cortex-m4": arm_const.UC_CPU_ARM_CORTEX_M4,
            "cortex-m33": arm_const.UC_CPU_ARM_CORTEX_M33,
            "cortex-m3": arm_const.UC_CPU_ARM_CORTEX_M3,
            # unicorn has no Cortex-M0+ model; the M0 runs the same ISA (ARMv6-M).
            "cortex-m0plus": arm_const.UC_CPU_ARM_CORTEX_M0,
        }
        if cpu not in models:
            raise EmulatorError(f"unsupported cpu {cpu!r} (known: {', '.join(models)})")
        self.cpu = cpu
        self.image = ElfImage.read(elf)
        self.uc = Uc(UC_ARCH_ARM, UC_MODE_THUMB | UC_MODE_MCLASS)
        self.uc.ctl_set_cpu_model(models[cpu])
        self._arm = arm_const
        self.uc.mem_map(CODE_BASE, CODE_SIZE)
        self.uc.mem_map(RAM_BASE, ram_size)
        for address, content, mem_size in self.image.segments:
            self.uc.mem_write(address, content + bytes(mem_size - len(content)))
        self.stack_top = RAM_BASE + ram_size
        self.stack_size = stack_size
        self._heap_start = self._align(self.symbol("end"), 16)
        self._heap = self._heap_start
        self._heap_limit = self.stack_top - stack_size
        self._stop = self.symbol("mcubert_emu_stop") & ~1
        self._block_counts: dict[int, int] = {}
        self._counting_translations = False
        library = _counter_library() if native_counter else None
        self._native = _NativeCounter(self.uc, library) if library is not None else None

    @property
    def native_counter(self) -> bool:
        """Whether instruction counting runs in the compiled hook (else a Python callback)."""
        return self._native is not None

    def block_instructions(self, address: int, size: int) -> int:
        """Thumb instructions in the translated block at `address` of `size` bytes."""
        key = (address << 16) | size
        count = self._block_counts.get(key)
        if count is None:
            count = 0 if address == self._stop else _thumb_instruction_count(self.read(address, size))
            self._block_counts[key] = count
        return count

    @staticmethod
    def _align(value: int, alignment: int) -> int:
        return (value + alignment - 1) // alignment * alignment

    def symbol(self, name: str) -> int:
        try:
            return self.image.symbols[name]
        except KeyError:
            raise EmulatorError(f"symbol {name!r} is not in the image") from None

    # -- memory --------------------------------------------------------------------------

    def alloc(self, nbytes: int, align: int = 16, misalign: int = 0) -> int:
        """Bytes on the bump heap at an address == misalign (mod align)."""
        address = self._align(self._heap, align) + misalign
        if address + nbytes > self._heap_limit:
            raise EmulatorError(f"emulated RAM exhausted ({nbytes} bytes requested)")
        self._heap = address + max(nbytes, 1)
        return address

    def put(self, data: bytes | np.ndarray, align: int = 16, misalign: int = 0) -> int:
        raw = data.tobytes() if isinstance(data, np.ndarray) else bytes(data)
        address = self.alloc(len(raw), align, misalign)
        if raw:
            self.uc.mem_write(address, raw)
        return address

    def read(self, address: int, nbytes: int) -> bytes:
        return bytes(self.uc.mem_read(address, nbytes)) if nbytes else b""

    def heap_mark(self) -> int:
        return self._heap

    def release(self, mark: int) -> None:
        """Free everything allocated after heap_mark() returned `mark`."""
        self._heap = mark

    # -- calls ---------------------------------------------------------------------------

    def _on_block(self, uc, address, size, _user):
        key = (address, size)
        self._python_blocks[key] = self._python_blocks.get(key, 0) + 1

    def call(
        self, function: str | int, *args: int, count_instructions: bool = False, timeout_s: float = 600.0
    ) -> CallResult:
        """Call `function` (symbol or address) with integer arguments; returns r0 and measurements."""
        from unicorn import UC_HOOK_BLOCK, UcError

        arm = self._arm
        address = self.symbol(function) if isinstance(function, str) else function
        words = [int(a) & 0xFFFFFFFF for a in args]
        stacked = words[4:]
        sp = (self.stack_top - 4 * len(stacked) - 64) & ~7  # 8-byte aligned at the call (AAPCS)
        paint_base = self.stack_top - self.stack_size
        self.uc.mem_write(paint_base, bytes([STACK_PAINT]) * (sp - paint_base))
        if stacked:
            self.uc.mem_write(sp, struct.pack(f"<{len(stacked)}I", *stacked))
        for reg, value in zip((arm.UC_ARM_REG_R0, arm.UC_ARM_REG_R1, arm.UC_ARM_REG_R2, arm.UC_ARM_REG_R3), words[:4]):
            self.uc.reg_write(reg, value)
        self.uc.reg_write(arm.UC_ARM_REG_SP, sp)
        self.uc.reg_write(arm.UC_ARM_REG_LR, self._stop | 1)
        hook = None
        self._python_blocks: dict[tuple[int, int], int] = {}
        if count_instructions and self._native is not None:
            self._native.reset()
        elif count_instructions:
            hook = self.uc.hook_add(UC_HOOK_BLOCK, self._on_block)
        python_hooked = hook is not None
        if python_hooked != self._counting_translations:
            # Unicorn compiles block hooks into translated code: blocks translated while no hook
            # was installed would run uncounted (and hooked blocks would keep calling back).
            self.uc.ctl_flush_tb()
            self._counting_translations = python_hooked
        try:
            self.uc.emu_start(address | 1, self._stop, timeout=int(timeout_s * 1e6))
        except UcError as exc:
            pc = self.uc.reg_read(arm.UC_ARM_REG_PC)
            raise EmulatorError(f"{function}: {exc} at pc=0x{pc:08x}") from None
        finally:
            if hook is not None:
                self.uc.hook_del(hook)
        pc = self.uc.reg_read(arm.UC_ARM_REG_PC)
        if pc & ~1 != self._stop:
            raise EmulatorError(f"{function}: stopped at pc=0x{pc:08x} (timeout after {timeout_s} s?)")
        painted = np.frombuffer(self.read(paint_base, sp - paint_base), np.uint8)
        touched = np.flatnonzero(painted != STACK_PAINT)
        stack_bytes = int(sp - (paint_base + touched[0])) if touched.size else 0
        value = self.uc.reg_read(arm.UC_ARM_REG_R0)
        value = value - (1 << 32) if value & 0x80000000 else value
        if not count_instructions:
            return CallResult(value, None, stack_bytes)
        blocks = self._native.blocks() if self._native is not None else self._python_blocks
        instructions = sum(n * self.block_instructions(a, size) for (a, size), n in blocks.items())
        return CallResult(value, instructions, stack_bytes, blocks)


# ---------------------------------------------------------------------------------------------
# Kernel calls
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class KernelRun:
    status: int
    message: str
    output: np.ndarray | None  # the result tensor, of the op's output dtype (None if the kernel failed)
    instructions: int | None  # of the kernel call alone (validate is a separate call)
    stack_bytes: int
    validate_status: int = 0
    blocks: dict[tuple[int, int], int] | None = None  # per-block executions, when counted


def _tensor_elements(call: KernelCall, name: str, array: np.ndarray) -> int:
    return kernel_abi.output_elements(call) if name == "output" else array.size


def run_kernel(
    emu: ArmEmulator,
    call: KernelCall,
    *,
    validate: bool = True,
    count_instructions: bool = False,
    misalign: dict[str, int] | None = None,
    scratch_fill: int = 0x5A,
    scratch_size: int | None = None,
    symbol: str | None = None,
) -> KernelRun:
    """Place `call` in emulated RAM, validate it (optional), run the kernel, read the result.

    `misalign` puts the named int8 tensors at an address of that residue mod 16 (tensors of int8
    elements may live anywhere; int16/int32 tensors must stay aligned to their size). `symbol`
    calls another function with the kernel's arguments (the baselines of measure/baseline_abi.py).
    """
    # Long: one kernel call laid out in emulator memory (every argument), run, and read back.
    misalign = misalign or {}
    mark = emu.heap_mark()
    try:
        op = op_of(call.op)
        addresses: dict[str, int] = {}
        for name, array in call.tensor_list:
            if name == "output" and op.in_place:
                addresses[name] = 0
                continue
            addresses[name] = emu.put(array, 16, misalign.get(name, 0))
        if op.in_place:
            addresses["output"] = addresses[op.runtime_inputs[0]]
        params = emu.put(bytes(call.params), 8)
        weights = emu.put(
            struct.pack(
                f"<{len(kernel_abi.weight_fields(call.op))}I",
                *(addresses[n] for n in kernel_abi.weight_fields(call.op)),
            ),
            8,
        )
        message = emu.put(bytes(kernel_abi.MESSAGE_CAPACITY), 4)
        validate_status = 0
        if validate:
            views = b"".join(
                struct.pack(
                    "<Iii", addresses[name], kernel_abi.DTYPE_CODES[array.dtype], _tensor_elements(call, name, array)
                )
                for name, array in call.tensor_list
            )
            view_address = emu.put(views, 8)
            validate_status = emu.call(
                kernel_abi.VALIDATE_SYMBOLS[call.op], params, view_address, len(call.tensor_list), message
            ).value
            if validate_status != kernel_abi.OK:
                return KernelRun(validate_status, _message(emu, message), None, None, 0, validate_status)
        if scratch_size is None:
            scratch_size = emu.call(op.buffer_size_symbol, *call.dims()).value
        scratch = emu.put(bytes([scratch_fill]) * max(scratch_size, 0), 16)
        context = emu.put(struct.pack("<Ii", scratch, scratch_size), 8)
        symbol = symbol or kernel_abi.KERNEL_SYMBOLS[call.op]
        # The kernel ABI: params, weights, the run-time inputs, the output unless in place, context, message.
        tensors = [addresses[name] for name in op.runtime_inputs] + ([] if op.in_place else [addresses["output"]])
        result = emu.call(symbol, params, weights, *tensors, context, message, count_instructions=count_instructions)
        output = None
        if result.value == kernel_abi.OK:
            n, dtype = kernel_abi.output_elements(call), op.output_dtype
            output = np.frombuffer(emu.read(addresses["output"], n * dtype.itemsize), dtype).copy()
        return KernelRun(
            result.value,
            _message(emu, message),
            output,
            result.instructions,
            result.stack_bytes,
            validate_status,
            result.blocks,
        )
    finally:
        emu.release(mark)


def _message(emu: ArmEmulator, address: int) -> str:
    raw = emu.read(address, kernel_abi.MESSAGE_CAPACITY)
    return raw.split(b"\0", 1)[0].decode(errors="replace")
