#!/usr/bin/env bash
# Builds saccade and its process-level tests with sanitizers and runs them. A report from any
# process (child processes too: each writes its own log) fails the check.
#   scripts/check_sanitizers.sh [--thread] [TEST_BINARY...]   (default: all of the mode's)
# Default: AddressSanitizer and UndefinedBehaviorSanitizer, into build-asan/: the torch-free
# components' tests (the code that reads frames, files, configs and checkpoints from outside
# the process; leaks checked too), the runtime's tests (coordinator, agents and actors
# started, killed and restarted as processes) and the jobs' and the CLI's (learners, probe,
# policy and benches in real processes).
# --thread: ThreadSanitizer (with GCC's float-cast-overflow check, which -fsanitize=undefined
# leaves out), into build-tsan/, without the LibTorch plugin (LibTorch is not built with
# ThreadSanitizer): the torch-free test binaries, whose code runs threads (the kernels'
# thread pool, the loader's workers, the data actor's threads, the learner's batch source
# and ZeroMQ's I/O threads handing frames back to the frame pool, the coordinator's
# services). Not the runtime's processes by default: `--thread coordinator_runtime_tests`
# runs them, 5-15 times slower, with their tests' waits and their jobs' heartbeat, stall and
# drain timeouts scaled by SACCADE_TEST_SLOWDOWN (default 10 here;
# tests/support/subprocess.h). Of the first 17 (stopped there, after 20 minutes) 10 passed
# and none reported a race; the fault tests that time a restart, a drain window, a
# coordinator's restart or a 2,000-chunk transfer failed on timing.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ccache_env.sh

mode=address
if [ "${1:-}" = "--thread" ]; then
  mode=thread
  shift
fi
if [ $mode = thread ]; then
  BUILD_DIR=${BUILD_DIR:-build-tsan}
  binaries=(common_tests schemas_tests storage_tests kernels_tests dataloader_tests
    data_plane_tests coordinator_unit_tests)
  export SACCADE_TEST_SLOWDOWN=${SACCADE_TEST_SLOWDOWN:-10}
  flags="-fsanitize=thread,float-cast-overflow -fno-omit-frame-pointer"
  link="-fsanitize=thread,float-cast-overflow"
  plugin=OFF
  label="ThreadSanitizer"
else
  BUILD_DIR=${BUILD_DIR:-build-asan}
  binaries=(common_tests schemas_tests storage_tests safetensors_tests kernels_tests
    dataloader_tests data_plane_tests coordinator_unit_tests coordinator_runtime_tests
    job_tests cli_tests)
  flags="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
  link="-fsanitize=address,undefined"
  plugin=ON
  label="ASan and UBSan"
fi
[ $# -gt 0 ] && binaries=("$@")
# Their processes run LibTorch, whose OpenMP threads crash LeakSanitizer's tracer at exit
# ("Tracer caught signal 11"): memory errors and undefined behaviour only.
torch_processes=" job_tests cli_tests "

cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSACCADE_CUDA=OFF \
  -DSACCADE_TORCH_PLUGIN=$plugin -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_C_FLAGS="$flags" \
  -DCMAKE_EXE_LINKER_FLAGS="$link" -DCMAKE_SHARED_LINKER_FLAGS="$link" >/dev/null
# (The binaries that start processes depend on saccade and saccade_test_actor in CMake.)
cmake --build "$BUILD_DIR" -j "${JOBS:-$(nproc)}" --target "${binaries[@]}"

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
asan_options="log_path=$logs/asan:strict_string_checks=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$logs/ubsan"
export TSAN_OPTIONS="log_path=$logs/tsan:second_deadlock_stack=1:history_size=7:suppressions=$PWD/scripts/tsan.supp"
export OMP_WAIT_POLICY=passive
failed=()
for name in "${binaries[@]}"; do
  binary=$(find "$BUILD_DIR/tests" -name "$name" -type f -perm -u+x | head -1)
  if [ -z "$binary" ]; then
    echo "check_sanitizers: $name: no such test binary in $BUILD_DIR/tests" >&2
    exit 2
  fi
  leaks=1
  [[ "$torch_processes" == *" $name "* ]] && leaks=0
  start=$SECONDS
  if ASAN_OPTIONS="detect_leaks=$leaks:$asan_options" "$binary" --gtest_brief=1 \
    >"$logs/$name.out" 2>&1; then
    echo "check_sanitizers: $name passed ($((SECONDS - start)) s)"
  else
    echo "check_sanitizers: $name FAILED ($((SECONDS - start)) s); its output:" >&2
    grep -A 12 ': Failure$' "$logs/$name.out" | head -n 60 >&2 || true  # the assertions
    # What the processes of the failed tests warned of (restarts, missed heartbeats, refusals).
    grep -E '\[(warning|error|critical)\]' "$logs/$name.out" | head -n 80 >&2 || true
    tail -n 40 "$logs/$name.out" >&2
    failed+=("$name")
  fi
done
reports=$(find "$logs" -name 'asan.*' -o -name 'ubsan.*' -o -name 'tsan.*')
if [ -n "$reports" ]; then
  for report in $reports; do
    echo "check_sanitizers: report $(basename "$report"):" >&2
    head -n 60 "$report" >&2
  done
  failed+=("sanitizer reports")
fi
if [ ${#failed[@]} -gt 0 ]; then
  echo "check_sanitizers: failed: ${failed[*]}" >&2
  exit 1
fi
echo "check_sanitizers: ${#binaries[@]} test binaries clean under $label"
