# Cross-compiling with the GNU Arm Embedded toolchain (arm-none-eabi-gcc, newlib) on the PATH, or
# under ARM_TOOLCHAIN_DIR (its bin/ directory). The one toolchain file of the repository: custom_ops'
# own build, examples/baremetal (through its cmake/arm-none-eabi.cmake) and the exported CMake bundle
# use it: cmake -DCMAKE_TOOLCHAIN_FILE=<repo>/custom_ops/cmake/arm-none-eabi.cmake
set(CMAKE_SYSTEM_NAME Generic)
set(CMAKE_SYSTEM_PROCESSOR arm)

set(ARM_TOOLCHAIN_DIR "" CACHE PATH "directory holding arm-none-eabi-gcc (default: the PATH)")
if(ARM_TOOLCHAIN_DIR)
  set(_prefix "${ARM_TOOLCHAIN_DIR}/arm-none-eabi-")
else()
  set(_prefix "arm-none-eabi-")
endif()
set(CMAKE_C_COMPILER "${_prefix}gcc")
set(CMAKE_CXX_COMPILER "${_prefix}g++")
set(CMAKE_ASM_COMPILER "${_prefix}gcc")
set(CMAKE_OBJCOPY "${_prefix}objcopy" CACHE FILEPATH "objcopy")
set(CMAKE_SIZE "${_prefix}size" CACHE FILEPATH "size")

# No OS to link a test executable for: compiler checks build a static library instead.
set(CMAKE_TRY_COMPILE_TARGET_TYPE STATIC_LIBRARY)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
