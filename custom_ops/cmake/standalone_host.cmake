# The host part of the kernels' own build (standalone.cmake): the library for ctypes and the
# ASan/UBSan runners of both kernel paths.
set(mcubert_host_flags ${mcubert_warnings} -O2)
# The Thumb-2 micro-kernel is for Arm only: the host builds compile the C sources alone.
set(mcubert_host_sources ${MCUBERT_KERNEL_SOURCES})
list(FILTER mcubert_host_sources INCLUDE REGEX "\\.c$")
set(mcubert_arm_only ${MCUBERT_KERNEL_SOURCES})
list(FILTER mcubert_arm_only EXCLUDE REGEX "\\.c$")
set_source_files_properties(${mcubert_arm_only} PROPERTIES HEADER_FILE_ONLY ON)
set_target_properties(mcubert PROPERTIES POSITION_INDEPENDENT_CODE ON)
target_compile_options(mcubert PRIVATE "$<$<COMPILE_LANGUAGE:C>:${mcubert_host_flags}>")

add_library(mcubert_shared SHARED ${mcubert_host_sources})
set_target_properties(mcubert_shared PROPERTIES OUTPUT_NAME mcubert)
target_include_directories(mcubert_shared PRIVATE "${CMAKE_CURRENT_SOURCE_DIR}/include" "${mcubert_src}")
target_compile_options(mcubert_shared PRIVATE "$<$<COMPILE_LANGUAGE:C>:${mcubert_host_flags}>")

set(mcubert_sanitize -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer)
foreach(dsp emulate plain)
  add_executable(mcubert_runner_${dsp} "${mcubert_test}/host_runner.c" ${mcubert_host_sources})
  target_include_directories(mcubert_runner_${dsp} PRIVATE "${CMAKE_CURRENT_SOURCE_DIR}/include" "${mcubert_src}")
  target_compile_options(mcubert_runner_${dsp} PRIVATE
                         "$<$<COMPILE_LANGUAGE:C>:${mcubert_warnings};-O2;-g;${mcubert_sanitize}>")
  target_link_options(mcubert_runner_${dsp} PRIVATE ${mcubert_sanitize})
  if(dsp STREQUAL "emulate")
    target_compile_definitions(mcubert_runner_${dsp} PRIVATE MCUBERT_EMULATE_DSP)
  endif()
endforeach()

# The gemm drivers (test/host_gemm_runner.c): whole matrix products through the chunked
# micro-kernels (pair4 int8 and w4row int4 weights) under ASan/UBSan, both kernel paths.
foreach(dsp emulate plain)
  add_executable(mcubert_gemm_runner_${dsp} "${mcubert_test}/host_gemm_runner.c" "${mcubert_test}/gemm_driver.c"
                 ${mcubert_host_sources})
  target_include_directories(mcubert_gemm_runner_${dsp} PRIVATE "${CMAKE_CURRENT_SOURCE_DIR}/include" "${mcubert_src}"
                             "${mcubert_test}")
  target_compile_options(mcubert_gemm_runner_${dsp} PRIVATE
                         "$<$<COMPILE_LANGUAGE:C>:${mcubert_warnings};-O2;-g;${mcubert_sanitize}>")
  target_link_options(mcubert_gemm_runner_${dsp} PRIVATE ${mcubert_sanitize})
  if(dsp STREQUAL "emulate")
    target_compile_definitions(mcubert_gemm_runner_${dsp} PRIVATE MCUBERT_EMULATE_DSP)
  endif()
endforeach()
