#!/usr/bin/env bash
# Installs everything saccade needs to build, test and run its demo on Debian 12.
# Idempotent: apt-get skips what is already there. Nothing is fetched at run time.
set -euo pipefail

packages=(
  # toolchain
  build-essential cmake ninja-build ccache pkg-config git clang-format python3
  # clang's libFuzzer for the parsers of outside input (scripts/fuzz.sh)
  clang libclang-rt-14-dev
  # plots of the demo and the documents (scripts/plot_*.py)
  python3-matplotlib
  # the training step in plain PyTorch (scripts/gpu/torch_step.py), tested on the CPU
  python3-torch
  # ML: Debian's CPU LibTorch (1.13) with Gloo, and a fast BLAS (docs/references.md)
  libtorch-dev libgloo-dev libopenblas0-pthread
  # runtime: messaging, serialisation, storage, config, logging, CLI
  libzmq3-dev cppzmq-dev libsodium-dev capnproto libcapnp-dev librocksdb-dev
  libtomlplusplus-dev libspdlog-dev libfmt-dev libcli11-dev nlohmann-json3-dev
  # images (JPEGs decode through TurboJPEG, the rest through OpenCV)
  libopencv-dev libturbojpeg0-dev
  # gzipped IDX files (dataloader/idx_dataset.cpp links ZLIB::ZLIB)
  zlib1g-dev
  # tests and benchmarks; a real one-node Slurm for tests/scripts/slurm_test.sh
  libgtest-dev libgmock-dev libbenchmark-dev slurm-wlm munge
  # data: Fashion-MNIST (IDX) and real high-resolution photos
  dataset-fashion-mnist lomiri-wallpapers-16.04
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
echo "install-deps: all ${#packages[@]} packages present"
