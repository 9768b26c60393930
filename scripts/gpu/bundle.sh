#!/usr/bin/env bash
# Builds saccade against the GPU machine's CUDA LibTorch (scripts/gpu/fetch-torch.sh)
# in build-gpu/ and packs what the GPU checks need into gpu-bundle/: the binaries, the
# torch plugin, and exactly the shared libraries they load that the GPU machine lacks
# (not glibc, libstdc++, LibTorch, CUDA or NCCL: its PyTorch brings those). Prints the
# size, and fails when it exceeds the device tool's carry limit (64 MiB). Then, there:
#   bash gpu-bundle/run.sh        (device tool: carry ["gpu-bundle"], command as above)
# (SACCADE_GPU_TRAIN=CONFIG adds a pretraining run on the bundle's Fashion-MNIST; see run.sh.)
set -euo pipefail
cd "$(dirname "$0")/../.."
prefix=$(bash scripts/gpu/fetch-torch.sh "${SACCADE_GPU_TORCH_DIR:-$PWD/.cache/torch-${SACCADE_GPU_TORCH_VERSION:-2.11.0}}")
torch_root=$(dirname "$(dirname "$(dirname "$prefix")")")  # .../torch
export PATH=$PATH:/usr/local/cuda/bin
source scripts/ccache_env.sh
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DSACCADE_CUDA=ON \
  -DSACCADE_IMAGE_CODECS=OFF -DCMAKE_PREFIX_PATH="$prefix" >build-gpu.configure.log 2>&1 ||
  { cat build-gpu.configure.log >&2; exit 1; }
grep -E "LibTorch|backend" build-gpu.configure.log
cmake --build build-gpu -j "${JOBS:-$(nproc)}" --target saccade kernels_cuda_tests pretrain_cuda_tests

out=build-gpu/bundle-stage  # bin/ and lib/, packed into gpu-bundle/payload.tar.xz below
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
cp build-gpu/saccade build-gpu/libsaccade_torch.so build-gpu/tests/kernels/kernels_cuda_tests \
  build-gpu/tests/workers/pretrain_cuda_tests "$out/bin/"
# Libraries the GPU machine provides itself: its C runtime, and its PyTorch with the
# CUDA wheels it depends on (and the driver). Image codecs are left out of this build
# (-DSACCADE_IMAGE_CODECS=OFF): Debian's imgcodecs pulls in ~100 libraries (GDAL...).
provided='^((ld-linux|libc|libm|libdl|librt|libpthread|libutil|libresolv|libstdc\+\+|libgcc_s)[.-]|(libcuda|libnvidia|libtorch|libc10|libcaffe2|libgomp|libcudart|libcublas|libcufft|libcurand|libcusolver|libcusparse|libnccl|libnvrtc|libnvJitLink|libnvToolsExt|libcupti|libcudnn|libnvshmem|libcufile|libshm))'
for bin in "$out"/bin/*; do
  LD_LIBRARY_PATH="$torch_root/lib" ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
  if [[ ! $name =~ $provided ]]; then cp -L "$path" "$out/lib/$name"; fi
done
missing=$(for bin in "$out"/bin/*; do LD_LIBRARY_PATH="$torch_root/lib" ldd "$bin"; done |
  awk '/not found/ {print $1}' | sort -u | grep -Ev "$provided" || true)
if [ -n "$missing" ]; then echo "bundle: unresolved libraries:" >&2; echo "$missing" >&2; exit 1; fi
strip --strip-unneeded "$out"/bin/* "$out"/lib/* 2>/dev/null || true
rm -rf gpu-bundle
mkdir -p gpu-bundle
cp scripts/gpu/run.sh scripts/gpu/results.py scripts/gpu/torch_step.py scripts/config_variant.sh configs/vit-s-imagenet.toml gpu-bundle/
# Fashion-MNIST (30 MB) for run.sh's training step (SACCADE_GPU_TRAIN), when installed here.
fashion=${SACCADE_GPU_DATA:-/usr/share/datasets/fashion-mnist}
if [ -d "$fashion" ]; then mkdir -p gpu-bundle/data && cp "$fashion"/*-ubyte.gz gpu-bundle/data/; fi
git rev-parse HEAD >gpu-bundle/COMMIT 2>/dev/null || true
# OpenBLAS (opencv_core's LAPACK) alone is 36 MB: compressed, the payload fits.
tar -C "$out" -cf - bin lib | xz -9 -T "${JOBS:-$(nproc)}" >gpu-bundle/payload.tar.xz
unpacked=$(du -sb "$out" | cut -f1)
bytes=$(du -sb gpu-bundle | cut -f1)
echo "bundle: gpu-bundle/, $(ls "$out/lib" | wc -l) libraries, $((unpacked / 1024 / 1024)) MiB unpacked, $((bytes / 1024 / 1024)) MiB packed ($bytes bytes)"
if [ "$bytes" -gt $((64 * 1024 * 1024)) ]; then
  echo "bundle: over the device tool's 64 MiB carry limit" >&2
  exit 1
fi
