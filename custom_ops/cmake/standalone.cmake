# custom_ops configured by itself: the kernels' own build, with the flags the tests and benchmarks
# measure (included by ../CMakeLists.txt when MCUBERT_STANDALONE is on). Every output lands in the
# build folder's root. tflm_mcubert/measure/kernel_build.py configures one folder per variant.
#
# Host (no toolchain file):
#   mcubert                    libmcubert.a (plain C path, -O2 -fPIC)
#   mcubert_shared             libmcubert.so (the same objects' flags; ctypes tests)
#   mcubert_runner_emulate     ASan/UBSan test driver, DSP path with emulated intrinsics
#   mcubert_runner_plain       ASan/UBSan test driver, plain C path
#   mcubert_gemm_runner_emulate, mcubert_gemm_runner_plain   the same for the gemm driver (test/gemm_driver.c)
# Cortex-M (-DCMAKE_TOOLCHAIN_FILE=cmake/arm-none-eabi.cmake):
#   -DMCUBERT_CPU=cortex-m0plus|cortex-m3|cortex-m4|cortex-m7|cortex-m33|cortex-m55   (default cortex-m7)
#   -DMCUBERT_KERNEL_PATH=dsp|plain|noasm|mve   dsp: the DSP path where the core has it (cores without
#                              take the plain path by themselves); plain: MCUBERT_FORCE_PLAIN; noasm: the
#                              DSP path's micro-kernel from its C version (MCUBERT_DSP_NO_ASM); mve
#                              (cortex-m55): the DSP path with the gemms and dot products on MVE (MCUBERT_MVE)
#   -DMCUBERT_FLOAT_ABI=hard|soft   hard: -mfloat-abi=hard and the core's FPU (cores without an FPU
#                              build soft-float); the kernels are identical either way
#   mcubert                    libmcubert.a (-O2 -g -mgeneral-regs-only, stack usage and call graph
#                              files beside the objects: CMakeFiles/mcubert.dir/src/)
#   mcubert_emu                mcubert_emu.elf: the library linked for the unicorn runner (MPS2 memory map)
#   mcubert_baselines_emu      mcubert_baselines_emu.elf: the library + baselines/ (benchmark and tests)
#   mcubert_gemm_emu           mcubert_gemm_emu.elf: the library + test/gemm_driver.c (W4/W8 gemm tests, bench)
#   mcubert_gemm_check         mcubert_gemm_check.elf: self-checking QEMU firmware of the pair4 gemm
#                              (test/arm/gemm_check_main.c)
#   <MCUBERT_FIRMWARE>         with -DMCUBERT_GOLDEN=<cases .c>: <name>.elf (default mcubert_firmware),
#                              self-checking QEMU firmware (mps2, mps3-an547) running the generated golden cases
# Both: -DMCUBERT_WERROR=ON makes warnings errors.

set(MCUBERT_WERROR OFF CACHE BOOL "warnings are errors")
set(mcubert_warnings -std=c99 -Wall -Wextra -Wpedantic -Wshadow -Wvla -Wstrict-prototypes
    -Wmissing-prototypes -Wcast-align -Wundef)
if(MCUBERT_WERROR)
  list(APPEND mcubert_warnings -Werror)
endif()
set(mcubert_src "${CMAKE_CURRENT_SOURCE_DIR}/src")
set(mcubert_test "${CMAKE_CURRENT_SOURCE_DIR}/test")
file(GLOB mcubert_headers CONFIGURE_DEPENDS "${mcubert_src}/*.h" "${CMAKE_CURRENT_SOURCE_DIR}/include/mcubert/*.h")

if(CMAKE_CROSSCOMPILING)
  include("${CMAKE_CURRENT_LIST_DIR}/standalone_cortex_m.cmake")
else()
  include("${CMAKE_CURRENT_LIST_DIR}/standalone_host.cmake")
endif()
