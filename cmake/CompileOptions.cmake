# One INTERFACE target carries the language standard and the warnings; nothing is set
# globally. Every target of the project links xmc_options.
add_library(xmc_options INTERFACE)
target_compile_features(xmc_options INTERFACE cxx_std_20)
set(CMAKE_CXX_EXTENSIONS OFF)
target_compile_options(xmc_options INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor
                            -Wcast-align -Woverloaded-virtual -Wno-unknown-pragmas>
  # Nothing in xmctrain reads or traps on floating-point exception flags, and with the
  # default -ftrapping-math GCC refuses to if-convert a comparison, which keeps loops such
  # as the loss functions' exp (model/fast_math.h) scalar. IEEE results are unchanged.
  $<$<COMPILE_LANGUAGE:CXX>:-fno-trapping-math>
  # Nothing reads errno after a math call either; with the default -fmath-errno GCC keeps
  # every std::sqrt scalar (a branch to sqrtf for the errno of a negative input), which
  # made the Adam update (model/optimizer.cpp) 14x slower than its vectorised form
  # (docs/benchmarks.md, issue 19). vsqrtps is correctly rounded: IEEE results unchanged.
  $<$<COMPILE_LANGUAGE:CXX>:-fno-math-errno>
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${XMC_WERROR}>>:-Werror>
  $<$<AND:$<COMPILE_LANGUAGE:CUDA>,$<BOOL:${XMC_WERROR}>>:-Werror=all-warnings>)
if(NOT CMAKE_BUILD_TYPE AND NOT CMAKE_CONFIGURATION_TYPES)
  set(CMAKE_BUILD_TYPE Release CACHE STRING "Build type" FORCE)
endif()

# Host code for the CPU that builds it (AVX2/FMA/AVX-512 where present). The hand-written
# CPU kernels (fixed fan-in, group-shared, losses, optimizers) are auto-vectorised; at the
# x86-64 baseline they run at SSE2 width. OpenBLAS picks its kernels at run time either
# way. Turn off to build a binary for another machine.
option(XMC_NATIVE "Optimise host code for this machine's CPU (-march=native)" ON)
# XMC_MARCH: an explicit -march instead (the GPU kit uses x86-64-v3: AVX2/FMA, which every
# H100/H200 host has, so binaries built here run there).
set(XMC_MARCH "" CACHE STRING "Host code -march (overrides XMC_NATIVE when set)")
if(XMC_MARCH)
  target_compile_options(xmc_options INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-march=${XMC_MARCH}>)
elseif(XMC_NATIVE)
  include(CheckCXXCompilerFlag)
  check_cxx_compiler_flag(-march=native XMC_HAS_MARCH_NATIVE)
  if(XMC_HAS_MARCH_NATIVE)
    target_compile_options(xmc_options INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-march=native>)
  endif()
endif()

# ASan + UBSan for the whole build (tools/sanitize.sh): every target links xmc_options, so
# the library, the binary and the tests are all instrumented. UBSan findings abort (no
# recovery), so a report fails the test that triggered it.
if(XMC_SANITIZE)
  set(xmc_sanitize_flags -fsanitize=address,undefined -fno-sanitize-recover=undefined
                         -fno-omit-frame-pointer)
  target_compile_options(xmc_options INTERFACE "$<$<COMPILE_LANGUAGE:CXX>:${xmc_sanitize_flags}>")
  target_link_options(xmc_options INTERFACE ${xmc_sanitize_flags})
endif()
