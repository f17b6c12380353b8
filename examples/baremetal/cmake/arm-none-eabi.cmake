# The repository's one Arm toolchain file lives with the kernels (custom_ops/cmake/), so that a
# wheel's copy of custom_ops/ has it too; this path stays for the commands that name it.
include("${CMAKE_CURRENT_LIST_DIR}/../../../custom_ops/cmake/arm-none-eabi.cmake")
