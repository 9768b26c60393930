# Build options of saccade. Every option is listed here and nowhere else.

set(SACCADE_CUDA "AUTO" CACHE STRING
    "CUDA kernels and NCCL: AUTO (on when nvcc and a CUDA LibTorch are both present), ON (compile CUDA sources against the toolkit even with a CPU LibTorch), OFF")
set_property(CACHE SACCADE_CUDA PROPERTY STRINGS AUTO ON OFF)
set(SACCADE_CUDA_ARCHITECTURES "90" CACHE STRING "CUDA architectures (H100/H200 = 90)")
option(SACCADE_WERROR "Treat warnings as errors" OFF)
option(SACCADE_BUILD_TESTS "Build the GoogleTest suite" ON)
option(SACCADE_BUILD_BENCH "Build the benchmarks" ON)
option(SACCADE_IMAGE_CODECS "Decode image files with OpenCV imgcodecs (image-folder data sets, the extraction bench's photos); OFF drops imgcodecs and its ~100 libraries, e.g. for the GPU bundle (scripts/gpu/bundle.sh)" ON)
option(SACCADE_TORCH_PLUGIN "Build the saccade executable's LibTorch commands (libsaccade_torch.so) with it; OFF builds the torch-free runtime alone, e.g. for ThreadSanitizer (scripts/check_sanitizers.sh --thread)" ON)
option(SACCADE_FUZZ "Build the libFuzzer targets of the parsers of outside input (tests/fuzz/; needs clang): scripts/fuzz.sh" OFF)

find_program(SACCADE_CCACHE ccache)
if(SACCADE_CCACHE)
  set(CMAKE_C_COMPILER_LAUNCHER ${SACCADE_CCACHE})
  set(CMAKE_CXX_COMPILER_LAUNCHER ${SACCADE_CCACHE})
  set(CMAKE_CUDA_COMPILER_LAUNCHER ${SACCADE_CCACHE})
endif()

# Warnings for saccade's own sources only (dependencies come in as SYSTEM includes).
set(SACCADE_WARNINGS -Wall -Wextra -Wno-unused-parameter)
if(SACCADE_WERROR)
  list(APPEND SACCADE_WARNINGS -Werror)
endif()
