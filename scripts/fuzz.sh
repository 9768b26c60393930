#!/usr/bin/env bash
# Fuzzes the parsers of outside input with libFuzzer, under AddressSanitizer and
# UndefinedBehaviorSanitizer (clang's, which includes float-cast-overflow), into build-fuzz/:
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]   (default: 60 s each; every target)
# Targets (tests/fuzz/): fuzz_frame (a frame from the network: the envelope, then a batch
# read in place and copied on either cut side, a checkpoint chunk, a checkpoint request, a
# rendezvous store request, a status reply as `saccade status` prints it),
# fuzz_config (a job config; what parses writes back to the same config), fuzz_safetensors
# (checkpoint blobs and backbones; what parses serialises back to the same tensors),
# fuzz_tar (a tar shard's headers), fuzz_tar_index (the index cached beside a shard: a good
# shard opens whatever it holds), fuzz_idx (an IDX images file, gzipped or not), fuzz_image
# (an image file: TurboJPEG, then OpenCV).
# Seeds: valid inputs (fuzz_seeds; the repository's configs; tars written by GNU tar and by
# Python's tarfile). Each target's corpus grows in build-fuzz/corpus/TARGET from run to run.
# A crash, a sanitizer report, a leak, an uncaught exception or an input that takes over 10 s
# fails the run; the input is kept in build-fuzz/artifacts/ (replay it:
# build-fuzz/tests/fuzz/TARGET FILE).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ccache_env.sh

seconds=${1:-60}
[ $# -gt 0 ] && shift
targets=(fuzz_frame fuzz_config fuzz_safetensors fuzz_tar fuzz_tar_index fuzz_idx fuzz_image)
[ $# -gt 0 ] && targets=("$@")
BUILD_DIR=${BUILD_DIR:-build-fuzz}

flags="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined"
flags="$flags -fno-omit-frame-pointer -gline-tables-only"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=clang \
  -DCMAKE_CXX_COMPILER=clang++ -DSACCADE_CUDA=OFF -DSACCADE_TORCH_PLUGIN=OFF \
  -DSACCADE_BUILD_BENCH=OFF -DSACCADE_FUZZ=ON -DCMAKE_CXX_FLAGS="$flags" \
  -DCMAKE_C_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
cmake --build "$BUILD_DIR" -j "${JOBS:-$(nproc)}" --target "${targets[@]}" fuzz_seeds

# Seeds, written afresh each run.
seeds=$BUILD_DIR/seeds
rm -rf "$seeds"
"$BUILD_DIR/tests/fuzz/fuzz_seeds" "$seeds"
mkdir -p "$seeds/config" "$seeds/tar" "$seeds/tar_index"
cp configs/*.toml configs/gpu/*.toml "$seeds/config/"
members=$(mktemp -d)
trap 'rm -rf "$members"' EXIT
# A path over 100 bytes: ustar splits it into its prefix field, GNU writes a long-name entry
# ('L'), pax an extended header ('x').
long="$members/a-folder-$(printf 'x%.0s' {1..60})/and-another-$(printf 'y%.0s' {1..40})"
mkdir -p "$long"
printf 'image bytes' >"$members/000000001.jpg"
printf '7' >"$members/000000001.cls"
printf 'more' >"$long/000000002.png"
for format in ustar gnu posix; do
  # A blocking factor of 1: no padding to 10 KB, so that the fuzzer's inputs stay small.
  tar --format=$format -b 1 -C "$members" -cf "$seeds/tar/gnu-$format.tar" .
done
python3 - "$members" "$seeds/tar" <<'PY'
import io, sys, tarfile
src, out = sys.argv[1], sys.argv[2]
for name, fmt in (("python-gnu", tarfile.GNU_FORMAT), ("python-pax", tarfile.PAX_FORMAT)):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as t:
        t.add(src, arcname=".")
        info = tarfile.TarInfo("caf\u00e9/000000003.cls")
        info.size = 1
        t.addfile(info, io.BytesIO(b"4"))
    open(f"{out}/{name}.tar", "wb").write(buf.getvalue())
PY

# A PNG (8-bit RGB, 3 x 2), for OpenCV's side of the image decoder.
python3 - "$seeds/image/rgb.png" <<'PY'
import struct, sys, zlib
def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
rows = b"".join(b"\0" + bytes(range(r * 9, r * 9 + 9)) for r in range(2))
png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 3, 2, 8, 2, 0, 0, 0))
       + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))
open(sys.argv[1], "wb").write(png)
PY
# The body of the index fuzz_tar_index's shard has (its members a.jpg, 600 bytes, and a.cls).
printf '512 600 - a.jpg\n1536 1 3 a.cls\n' >"$seeds/tar_index/index"

declare -A seed_dir=([fuzz_frame]=frame [fuzz_config]=config [fuzz_safetensors]=safetensors
  [fuzz_tar]=tar [fuzz_tar_index]=tar_index [fuzz_idx]=idx [fuzz_image]=image)
failed=()
for target in "${targets[@]}"; do
  corpus=$BUILD_DIR/corpus/$target
  mkdir -p "$corpus" "$BUILD_DIR/artifacts"
  log=$BUILD_DIR/$target.log
  scratch=$BUILD_DIR/tmp/$target  # the files a target writes for the readers that take paths
  rm -rf "$scratch"
  mkdir -p "$scratch"
  # The tars' seeds are 10-20 KB: inputs may grow to 64 KB for every target.
  # OpenCV refuses images over 2^20 pixels before decoding them, as fuzz_image asks of JPEGs.
  if TMPDIR=$scratch OPENCV_IO_MAX_IMAGE_PIXELS=1048576 "$BUILD_DIR/tests/fuzz/$target" \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -max_len=65536 -print_final_stats=1 -artifact_prefix="$BUILD_DIR/artifacts/$target-" \
    "$corpus" "$seeds/${seed_dir[$target]}" >"$log" 2>&1; then
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
    echo "fuzz: $target: clean, $runs inputs in $seconds s, corpus $(ls "$corpus" | wc -l)"
  else
    echo "fuzz: $target FAILED; the end of its log ($log):" >&2
    tail -n 60 "$log" >&2
    failed+=("$target")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: failed: ${failed[*]} (inputs in $BUILD_DIR/artifacts/)" >&2
  exit 1
fi
echo "fuzz: ${#targets[@]} targets clean"
