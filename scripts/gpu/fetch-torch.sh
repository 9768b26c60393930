#!/usr/bin/env bash
# Unpacks the CUDA LibTorch that the GPU machine runs (the `torch` wheel from PyPI,
# default 2.11.0 = +cu130) into DIR (default .cache/torch-<version>), once; prints
# its CMake prefix. Only the wheel's torch/ folder is kept (headers, cmake, libs).
#   bash scripts/gpu/fetch-torch.sh [DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
version=${SACCADE_GPU_TORCH_VERSION:-2.11.0}
dir=${1:-$PWD/.cache/torch-$version}
if [ ! -f "$dir/torch/share/cmake/Torch/TorchConfig.cmake" ]; then
  mkdir -p "$dir/wheel"
  # The GPU machine's python is 3.12; the C++ library inside is the same for every python.
  python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 "torch==$version" -d "$dir/wheel" >&2
  wheel=$(ls "$dir"/wheel/torch-"$version"-*.whl | head -1)
  python3 - "$wheel" "$dir" <<'PY'
import sys, zipfile
wheel, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    z.extractall(dest, [n for n in z.namelist() if n.startswith("torch/")])
PY
  rm -rf "$dir/wheel"
fi
cuda=$(sed -n "s/^cuda: Optional\[str\] = '\(.*\)'/\1/p" "$dir/torch/version.py")
echo "fetch-torch: torch $version (CUDA ${cuda:-none}) in $dir" >&2
echo "$dir/torch/share/cmake"
