"""Static properties of the Cortex-M library, from GCC's own call graph (-fcallgraph-info=su).

* no recursion: the call graph is acyclic;
* fixed stack: every frame is static (no VLA, no alloca), and the worst path from every public
  entry point, libgcc's 64-bit division included, fits MCUBERT_STACK_BOUND_BYTES; the assembly
  micro-kernel's frames come from its disassembly (leaf functions: registers pushed plus any
  SP adjustment);
* no dependencies but libgcc's 64-bit division (no libc, no libm), and no FPU instruction.
(test_kernels_cortex_m measures the same stack bound dynamically.)
"""

from __future__ import annotations

import re
import subprocess

import pytest

from kernel_build import build, need_arm_toolchain
from kernel_cases import HEADER

STACK_BOUND = int(re.search(r"#define MCUBERT_STACK_BOUND_BYTES (\d+)", HEADER.read_text()).group(1))
# libgcc for Armv7E-M: __aeabi_(u)ldivmod pushes 16 bytes, then __udivmoddi4 32 (leaf).
EXTERNAL_STACK = {"__aeabi_uldivmod": 48, "__aeabi_ldivmod": 48}
ENTRY_POINTS = [
    f"mcubert_{op}_{fn}"
    for op in ("embedding", "attention", "mlp", "classifier_head")
    for fn in ("s8", "validate", "get_buffer_size", "parse_options")
] + ["mcubert_uses_dsp_path", "mcubert_status_name"]

_NODE = re.compile(r'node: \{ title: "([^"]+)" label: "[^\\"]+\\n([^\\"]+)(?:\\n(\d+) bytes \((\w+(?:,\w+)?)\))?')
_EDGE = re.compile(r'edge: \{ sourcename: "([^"]+)" targetname: "([^"]+)"')


def call_graph(obj_dir):
    """{function: (frame bytes, [callees])}, static functions keyed "file:name"."""
    defined, edges = {}, []
    for ci in sorted(obj_dir.glob("*.ci")):
        text = ci.read_text()
        local = {}
        for name, where, size, kind in _NODE.findall(text):
            if where == "<built-in>" or not size:
                continue
            assert kind == "static", f"{name}: {kind} stack frame (VLA or alloca?)"
            local[name] = f"{ci.stem}:{name}"
            defined[local[name]] = int(size)
        edges += [(local.get(a, a), local.get(b), b) for a, b in _EDGE.findall(text)]
    exported = {key.split(":", 1)[1]: key for key in defined}  # non-static names are unique
    graph = {key: (size, []) for key, size in defined.items()}
    for source, target_local, target in edges:
        callee = target_local or exported.get(target, target)
        graph[source][1].append(callee)
    return graph


_ASM_FUNCTION = re.compile(r"^[0-9a-f]+ <(\w+)>:$")
_PUSH = re.compile(r"\t(?:push|stmdb\tsp!,)\s*\{([^}]*)\}")
_SUB_SP = re.compile(r"\tsub(?:\.w)?\tsp, #(\d+)")


def asm_frames(obj_dir):
    """{function: frame bytes} of the objects assembled from .S files (DSP builds only)."""
    frames = {}
    for obj in sorted(obj_dir.glob("*.o*")):  # CMake names them <source>.obj on Arm
        if obj.with_suffix(".ci").exists():
            continue  # compiled C: in the call graph already
        disassembly = subprocess.run(
            ["arm-none-eabi-objdump", "-d", str(obj)], capture_output=True, text=True, check=True
        ).stdout
        function = None
        for line in disassembly.splitlines():
            match = _ASM_FUNCTION.match(line)
            if match:
                function = match.group(1)
                frames[function] = 0
                continue
            if function is None:
                continue
            assert not re.search(r"\tblx?\s", line), f"{function} calls out: {line}"
            push = _PUSH.search(line)
            if push:
                frames[function] += 4 * len(push.group(1).split(","))
            sub = _SUB_SP.search(line)
            if sub:
                frames[function] += int(sub.group(1))
    return frames


def worst_path(graph, function, active=()):
    if function in active:
        raise AssertionError(f"recursion: {' -> '.join(active + (function,))}")
    if function not in graph:
        assert function in EXTERNAL_STACK, f"unexpected external dependency: {function}"
        return EXTERNAL_STACK[function], [function]
    size, callees = graph[function]
    best, path = 0, []
    for callee in callees:
        depth, sub = worst_path(graph, callee, active + (function,))
        if depth > best:
            best, path = depth, sub
    return size + best, [function] + path


@pytest.fixture(
    scope="module",
    params=[("cortex-m7", "dsp"), ("cortex-m4", "dsp"), ("cortex-m7", "plain")],
    ids=["m7-dsp", "m4-dsp", "m7-plain"],
)
def library(request, build_dir):
    need_arm_toolchain()
    cpu, path = request.param
    return build(build_dir, cpu, "mcubert", path=path)


def test_no_recursion_and_the_stack_bound_holds_statically(library):
    graph = call_graph(library.object_dir)
    graph.update({name: (size, []) for name, size in asm_frames(library.object_dir).items()})
    for entry in ENTRY_POINTS:
        key = next(k for k in graph if k.endswith(":" + entry))
        depth, path = worst_path(graph, key)
        assert depth <= STACK_BOUND, f"{entry}: {depth} bytes via {' -> '.join(path)}"


def test_the_dsp_builds_use_the_assembly_micro_kernel(library):
    frames = asm_frames(library.object_dir)
    if library.variant.path == "plain":
        assert not frames
    else:
        assert frames == {"mcubert_dsp_4xn_step8": 56, "mcubert_dsp_4xn_step4": 56, "mcubert_dsp_4xn_w4": 64}


def test_only_libgcc_division_is_needed_and_no_fpu_code(library):
    symbols = subprocess.run(
        ["arm-none-eabi-nm", str(library.library)], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    entries = [line.split() for line in symbols if line.strip() and not line.endswith(":")]
    undefined = {e[-1] for e in entries if e[-2] == "U"}
    defined = {e[-1] for e in entries if e[-2] != "U"}
    external = undefined - defined
    assert external <= set(EXTERNAL_STACK), external
    disassembly = subprocess.run(
        ["arm-none-eabi-objdump", "-d", str(library.library)], capture_output=True, text=True, check=True
    ).stdout
    fpu = [line for line in disassembly.splitlines() if re.search(r"\t(v[a-z]+|fm|fld|fst)[a-z0-9.]*\s", line)]
    assert not fpu, fpu[:5]
