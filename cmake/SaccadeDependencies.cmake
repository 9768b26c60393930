# Every third-party dependency is found here, once.
find_package(Threads REQUIRED)
find_package(ZLIB REQUIRED)  # gzipped IDX files
find_package(spdlog REQUIRED)
find_package(fmt REQUIRED)
find_package(tomlplusplus REQUIRED)
find_package(nlohmann_json 3 REQUIRED)  # JSON: safetensors headers, --json and metrics output
find_package(CLI11 REQUIRED)
find_package(cppzmq REQUIRED)
find_package(CapnProto REQUIRED)
find_package(RocksDB REQUIRED)
if(SACCADE_IMAGE_CODECS)
  find_package(OpenCV REQUIRED COMPONENTS core imgproc imgcodecs)
else()
  find_package(OpenCV REQUIRED COMPONENTS core imgproc)
endif()
# What decodes image files: link this, test SACCADE_HAS_IMAGE_CODECS (0 or 1). JPEGs
# always decode through libjpeg-turbo's TurboJPEG (Debian: libturbojpeg0-dev), which the
# GPU bundle carries where OpenCV's imgcodecs (and its ~100 libraries) stay out.
find_package(PkgConfig REQUIRED)
pkg_check_modules(TURBOJPEG REQUIRED IMPORTED_TARGET libturbojpeg)
add_library(saccade_image_codecs INTERFACE)
target_link_libraries(saccade_image_codecs INTERFACE PkgConfig::TURBOJPEG)
if(SACCADE_IMAGE_CODECS)
  target_link_libraries(saccade_image_codecs INTERFACE opencv_imgcodecs)
  target_compile_definitions(saccade_image_codecs INTERFACE SACCADE_HAS_IMAGE_CODECS=1)
else()
  target_compile_definitions(saccade_image_codecs INTERFACE SACCADE_HAS_IMAGE_CODECS=0)
endif()
find_package(GTest REQUIRED)
find_package(benchmark REQUIRED)
# A CUDA LibTorch's Caffe2 config detects the GPUs with a CUDA try_run (which fails on
# a machine without one, and on CMake's missing CUDA20 flags) unless it is told the
# architectures: derive them from ours ("90" -> "9.0").
if(NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST} AND SACCADE_CUDA_ARCHITECTURES)
  string(REGEX REPLACE "([0-9])([0-9])" "\\1.\\2" _saccade_torch_arch "${SACCADE_CUDA_ARCHITECTURES}")
  string(REPLACE ";" " " _saccade_torch_arch "${_saccade_torch_arch}")
  set(ENV{TORCH_CUDA_ARCH_LIST} "${_saccade_torch_arch}")
endif()
find_package(Torch REQUIRED)
# Debian's Caffe2 config makes an imported "gflags" target with an empty
# IMPORTED_LOCATION ("old-style gflags target"), which breaks generation of any
# target linking torch. Point it at the library.
if(TARGET gflags)
  get_target_property(_saccade_gflags_location gflags IMPORTED_LOCATION)
  if(NOT _saccade_gflags_location)
    find_library(SACCADE_GFLAGS_LIBRARY gflags REQUIRED)
    set_target_properties(gflags PROPERTIES IMPORTED_LOCATION ${SACCADE_GFLAGS_LIBRARY})
  endif()
endif()


# Debian's TorchConfig puts its include directories on a plain variable; expose
# them as SYSTEM so torch's own warnings do not drown ours.
add_library(saccade_torch INTERFACE)
target_link_libraries(saccade_torch INTERFACE ${TORCH_LIBRARIES})
target_include_directories(saccade_torch SYSTEM INTERFACE ${TORCH_INCLUDE_DIRS})
target_compile_options(saccade_torch INTERFACE ${TORCH_CXX_FLAGS})
# A torch wheel ships a newer fmt in its include directory, which would shadow the
# system fmt that spdlog was built against (fmt uses versioned inline namespaces, so
# both can live in one program). Put the system fmt first through a one-link directory.
foreach(_saccade_dir ${TORCH_INCLUDE_DIRS})
  if(EXISTS "${_saccade_dir}/fmt/core.h")
    get_target_property(_saccade_fmt_dirs fmt::fmt INTERFACE_INCLUDE_DIRECTORIES)
    foreach(_saccade_fmt_dir ${_saccade_fmt_dirs})
      if(EXISTS "${_saccade_fmt_dir}/fmt/core.h" AND NOT _saccade_fmt_dir STREQUAL _saccade_dir)
        file(MAKE_DIRECTORY "${CMAKE_BINARY_DIR}/system-fmt")
        file(CREATE_LINK "${_saccade_fmt_dir}/fmt" "${CMAKE_BINARY_DIR}/system-fmt/fmt" SYMBOLIC)
        target_include_directories(saccade_torch SYSTEM BEFORE INTERFACE "${CMAKE_BINARY_DIR}/system-fmt")
        break()
      endif()
    endforeach()
    break()
  endif()
endforeach()

# Does this LibTorch carry CUDA (a torch 2.x wheel via CMAKE_PREFIX_PATH), or is it Debian's CPU one?
set(SACCADE_TORCH_HAS_CUDA OFF)
if(TARGET torch_cuda OR TORCH_CUDA_LIBRARIES OR CAFFE2_USE_CUDA)
  set(SACCADE_TORCH_HAS_CUDA ON)
endif()

include(CheckLanguage)
check_language(CUDA)
set(SACCADE_WITH_CUDA OFF)   # CUDA kernels in kernels/
set(SACCADE_WITH_NCCL OFF)   # NCCL code (c10d ProcessGroupNCCL when torch has CUDA, else against the toolkit)
if(SACCADE_CUDA STREQUAL "ON" OR (SACCADE_CUDA STREQUAL "AUTO" AND CMAKE_CUDA_COMPILER AND SACCADE_TORCH_HAS_CUDA))
  if(NOT CMAKE_CUDA_COMPILER)
    message(FATAL_ERROR "SACCADE_CUDA=ON but no CUDA compiler (nvcc) was found; install the CUDA toolkit or set -DSACCADE_CUDA=OFF")
  endif()
  set(CMAKE_CUDA_ARCHITECTURES ${SACCADE_CUDA_ARCHITECTURES})
  set(CMAKE_CUDA_STANDARD 17)  # CMake 3.25 knows no CUDA20 flags for nvcc
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
  set(SACCADE_WITH_CUDA ON)
  find_path(SACCADE_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ${CUDAToolkit_LIBRARY_ROOT}/include)
  find_library(SACCADE_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}/lib ${CUDAToolkit_LIBRARY_ROOT}/lib64)
  if(SACCADE_NCCL_INCLUDE_DIR AND SACCADE_NCCL_LIBRARY)
    set(SACCADE_WITH_NCCL ON)
    add_library(saccade_nccl INTERFACE)
    target_include_directories(saccade_nccl SYSTEM INTERFACE ${SACCADE_NCCL_INCLUDE_DIR})
    target_link_libraries(saccade_nccl INTERFACE ${SACCADE_NCCL_LIBRARY} CUDA::cudart)
  elseif(SACCADE_CUDA STREQUAL "ON")
    message(FATAL_ERROR "SACCADE_CUDA=ON but NCCL (nccl.h, libnccl) was not found next to the CUDA toolkit")
  endif()
endif()
