# The Cortex-M part of the kernels' own build (standalone.cmake): one core's library and the images
# linked from it at the MPS2 memory map (test/arm/mps2.ld) for unicorn and QEMU, or, for the
# Cortex-M55 (QEMU only: unicorn has no M55), at mps3-an547's (test/arm/an547.ld).
set(MCUBERT_CPU "cortex-m7" CACHE STRING "cortex-m0plus, cortex-m3, cortex-m4, cortex-m7, cortex-m33 or cortex-m55")
set(MCUBERT_KERNEL_PATH "dsp" CACHE STRING "dsp, plain (MCUBERT_FORCE_PLAIN), noasm (MCUBERT_DSP_NO_ASM) or mve (cortex-m55)")
set(MCUBERT_FLOAT_ABI "hard" CACHE STRING "hard (the core's FPU) or soft")
set(MCUBERT_GOLDEN "" CACHE FILEPATH "generated golden cases (.c): builds the QEMU firmware")
set(MCUBERT_FIRMWARE "mcubert_firmware" CACHE STRING "name of the QEMU firmware image")

# Cores without an FPU (Cortex-M0+, M3) have no hard-float ABI: they build soft-float.
set(mcubert_fpu_cortex-m7 fpv5-d16)
set(mcubert_fpu_cortex-m4 fpv4-sp-d16)
set(mcubert_fpu_cortex-m33 fpv5-sp-d16)
set(mcubert_fpu_cortex-m55 auto) # the core's own: FPv5 double precision and MVE-F
if(NOT DEFINED mcubert_fpu_${MCUBERT_CPU} OR MCUBERT_FLOAT_ABI STREQUAL "soft")
  set(mcubert_float -mfloat-abi=soft)
else()
  set(mcubert_float -mfloat-abi=${MCUBERT_FLOAT_ABI} -mfpu=${mcubert_fpu_${MCUBERT_CPU}})
endif()
set(mcubert_arch -mcpu=${MCUBERT_CPU} -mthumb ${mcubert_float})

# The kernels never touch the FPU registers (-mgeneral-regs-only), except on the mve path, where
# the gemms and dot products use MVE (Helium), which computes in them.
set(mcubert_regs -mgeneral-regs-only)
if(MCUBERT_KERNEL_PATH STREQUAL "plain")
  target_compile_definitions(mcubert PRIVATE MCUBERT_FORCE_PLAIN)
elseif(MCUBERT_KERNEL_PATH STREQUAL "noasm")
  target_compile_definitions(mcubert PRIVATE MCUBERT_DSP_NO_ASM)
elseif(MCUBERT_KERNEL_PATH STREQUAL "mve")
  if(NOT MCUBERT_CPU STREQUAL "cortex-m55")
    message(FATAL_ERROR "MCUBERT_KERNEL_PATH=mve needs a core with MVE: cortex-m55")
  endif()
  # Every file alike (MCUBERT_MVE must agree across them: the widening is chosen in the callers),
  # and no auto-vectorization: the rest of the code stays the DSP path's, the gemm alone differs.
  set(mcubert_regs -fno-tree-vectorize)
elseif(NOT MCUBERT_KERNEL_PATH STREQUAL "dsp")
  message(FATAL_ERROR "MCUBERT_KERNEL_PATH=${MCUBERT_KERNEL_PATH} is not one of: dsp plain noasm mve")
endif()
set(mcubert_c_flags ${mcubert_warnings} -O2 -g ${mcubert_regs} -ffunction-sections -fdata-sections -fstack-usage
    -fcallgraph-info=su)
target_compile_options(mcubert PRIVATE ${mcubert_arch} "$<$<COMPILE_LANGUAGE:C>:${mcubert_c_flags}>"
  "$<$<COMPILE_LANGUAGE:ASM>:-g>")

# An image of the library: startup code, `sources`, the MPS2 linker script, newlib-nano.
if(MCUBERT_CPU STREQUAL "cortex-m55")
  set(mcubert_linker_script "${mcubert_test}/arm/an547.ld")
else()
  set(mcubert_linker_script "${mcubert_test}/arm/mps2.ld")
endif()
function(mcubert_image name)
  add_executable(${name} "${mcubert_test}/arm/startup.c" ${ARGN})
  set_target_properties(${name} PROPERTIES SUFFIX ".elf" LINK_DEPENDS "${mcubert_linker_script}")
  target_compile_options(${name} PRIVATE ${mcubert_warnings} ${mcubert_arch} -O2 -g -ffunction-sections
                         -fdata-sections)
  target_link_libraries(${name} PRIVATE mcubert)
  target_link_options(${name} PRIVATE ${mcubert_arch} -nostartfiles "-T${mcubert_linker_script}"
                      --specs=nano.specs --specs=nosys.specs -Wl,--gc-sections "-Wl,-Map=$<TARGET_FILE:${name}>.map")
endfunction()

mcubert_image(mcubert_emu "${mcubert_test}/arm/emu_main.c")

# The gemm driver (test/gemm_driver.c) for the unicorn runner: the pair4 and w4row micro-kernels
# called directly (tests/kernels/test_kernels_gemm.py, bench/w4_gemm.py).
mcubert_image(mcubert_gemm_emu "${mcubert_test}/arm/emu_gemm.c" "${mcubert_test}/gemm_driver.c")
target_include_directories(mcubert_gemm_emu PRIVATE "${mcubert_src}" "${mcubert_test}")
target_compile_options(mcubert_gemm_emu PRIVATE -mgeneral-regs-only)

# The pair4 gemm against plain sums, self-checking under QEMU (tests/kernels/test_kernels_qemu.py):
# every K to 40, row count, channel count and row kind, on whichever path the library takes. It
# includes the library's gemm header, so it takes the library's register flags (MCUBERT_MVE).
mcubert_image(mcubert_gemm_check "${mcubert_test}/arm/gemm_check_main.c")
target_include_directories(mcubert_gemm_check PRIVATE "${mcubert_src}" "${mcubert_test}/arm")
target_compile_options(mcubert_gemm_check PRIVATE ${mcubert_regs})

file(GLOB mcubert_baseline_sources CONFIGURE_DEPENDS "${CMAKE_CURRENT_SOURCE_DIR}/baselines/*.c")
mcubert_image(mcubert_baselines_emu ${mcubert_baseline_sources})
target_include_directories(mcubert_baselines_emu PRIVATE "${mcubert_src}" "${CMAKE_CURRENT_SOURCE_DIR}/baselines")
target_compile_options(mcubert_baselines_emu PRIVATE -mgeneral-regs-only)

if(MCUBERT_GOLDEN)
  mcubert_image(${MCUBERT_FIRMWARE} "${mcubert_test}/arm/firmware_main.c" "${MCUBERT_GOLDEN}")
  target_include_directories(${MCUBERT_FIRMWARE} PRIVATE "${mcubert_test}/arm")
endif()
