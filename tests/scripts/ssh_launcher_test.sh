#!/usr/bin/env bash
# scripts/ssh/saccade-ssh.sh with the real coordinator, agents and test actor on this
# machine; only the ssh transport is replaced (an `ssh` first on PATH that runs the
# remote command here), as this machine has no ssh server. The two "hosts" are names
# that resolve to loopback. Checks the launcher's parity with the Slurm script:
#   1. a two-node job finishes with exit 0;
#   2. SIGTERM drains with a final checkpoint and exit 4 (Ctrl-C's SIGINT takes the
#      same trap; a background job of a script cannot get SIGINT, so the test sends
#      TERM); running the same command again resumes from that checkpoint and finishes;
#   3. a host that is no node of the config is refused: the run ends with exit 5
#      within 10 s instead of waiting for that node, also when another host's agent
#      starts only after the refusal stopped the coordinator (it would wait
#      cluster.reconnect_grace_s for it);
#   4. a host ssh cannot reach (exit 255) drains the job within 10 s, naming the host,
#      instead of the coordinator waiting cluster.reconnect_grace_s for its node.
# Usage: ssh_launcher_test.sh SACCADE TEST_ACTOR LAUNCHER
set -euo pipefail
source "$(dirname "$0")/launcher_test_lib.sh"
export SACCADE=$(realpath "$1")
export SACCADE_ACTOR_BINARY=$(realpath "$2")
LAUNCHER=$(realpath "$3")
export SACCADE_TEST_STEP_MS=20
D=$(mktemp -d /tmp/saccade-ssh.XXXXXX)
cleanup() {
  pkill -9 -f -- "$D/" 2>/dev/null || true
  [ -n "${KEEP:-}" ] || rm -rf "$D"
}
trap cleanup EXIT
fail() {
  echo "ssh_launcher_test: FAILED: $*" >&2
  tail -n 30 "$D"/*.log >&2 || true
  exit 1
}

mkdir -p "$D/bin"
cat > "$D/bin/ssh" <<'EOF'
#!/usr/bin/env bash
# ssh [-options] HOST COMMAND...: runs COMMAND here; the agent of host $SSH_TEST_LATE_AGENT
# starts 2 s late, and host $SSH_TEST_UNREACHABLE cannot be reached for an agent.
while [[ "${1:-}" == -* ]]; do shift; done
host=$1
shift
if [[ " $* " == *" agent "* ]]; then
  [ "$host" != "${SSH_TEST_LATE_AGENT:-}" ] || sleep 2
  if [ "$host" = "${SSH_TEST_UNREACHABLE:-}" ]; then
    echo "ssh: connect to host $host port 22: Connection refused" >&2
    exit 255
  fi
fi
exec "$@"
EOF
chmod +x "$D/bin/ssh"
export PATH="$D/bin:$PATH"

PORT=$((21000 + RANDOM % 20000))
write_job() {  # STEPS
  {
    printf '[job]\nname = "ssh-test"\nwork_dir = "%s/work"\nstages = ["pretrain"]\n' "$D"
    printf '[cluster]\ncoordinator_port = %d\nstore_port = %d\ndata_port_base = %d\n' \
      "$PORT" $((PORT + 2)) $((PORT + 10))
    printf 'heartbeat_interval_ms = 50\nheartbeat_misses = 40\nreconnect_grace_s = 20\n'
    printf 'drain_timeout_s = 5\nstatus_linger_ms = 500\n'
    for n in localhost 127.0.0.1; do
      printf '[[cluster.nodes]]\nname = "%s"\nhost = "127.0.0.1"\ndata_actors = 1\nlearners = 1\n' "$n"
    done
    printf '[ssl]\nepochs = 1\nsteps_per_epoch = %d\ncheckpoint_every_steps = 10\nbatch_size = 16\n' "$1"
  } > "$D/job.toml"
}
# 1. Two nodes run to the budget.
write_job 60
code=0
bash "$LAUNCHER" "$D/job.toml" localhost 127.0.0.1 > "$D/ok.log" 2>&1 || code=$?
[ "$code" = 0 ] || fail "the job ended with $code, expected 0"
grep -q "job finished" "$D/ok.log" || fail "the job did not finish"
echo "ssh_launcher_test: 1. a two-node job finishes with exit 0: ok"

# 2. Ctrl-C drains (exit 4); the same command again resumes and finishes.
rm -rf "$D/work"
write_job 100000
bash "$LAUNCHER" "$D/job.toml" localhost 127.0.0.1 > "$D/drain.log" 2>&1 &
run=$!
wait_log "$D/drain.log" "checkpoint 20 committed" 60
kill -TERM "$run"
code=0
wait "$run" || code=$?
[ "$code" = 4 ] || fail "SIGTERM: exit $code, expected 4 (drained)"
grep -q "job drained" "$D/drain.log" || fail "SIGTERM did not drain"
at=$(step_of "$D/drain.log")
write_job $((at + 30))
code=0
bash "$LAUNCHER" "$D/job.toml" localhost 127.0.0.1 > "$D/resume.log" 2>&1 || code=$?
[ "$code" = 0 ] || fail "the resumed job ended with $code"
grep -q "resumes it from checkpoint $at" "$D/resume.log" || fail "did not resume from $at"
echo "ssh_launcher_test: 2. SIGTERM drains at step $at (exit 4), running again resumes: ok"

# 3. A host that is no node of the config: refused, the run ends fast.
rm -rf "$D/work"
write_job 100000
start=$SECONDS
code=0
timeout 30 bash "$LAUNCHER" "$D/job.toml" localhost vm > "$D/stray.log" 2>&1 || code=$?
[ "$code" = 5 ] || fail "a stray host: exit $code, expected 5"
[ $((SECONDS - start)) -le 10 ] || fail "a stray host took $((SECONDS - start)) s to fail"
grep -q 'node "vm" is not in cluster.nodes' "$D/stray.log" || fail "the refusal names no node"
echo "ssh_launcher_test: 3. a stray host is refused in $((SECONDS - start)) s: ok"
# The same with the other host's agent starting after the refusal (a slow host).
start=$SECONDS
code=0
SSH_TEST_LATE_AGENT=localhost timeout 30 bash "$LAUNCHER" "$D/job.toml" localhost vm \
  > "$D/stray-late.log" 2>&1 || code=$?
[ "$code" = 5 ] || fail "a stray host and a late agent: exit $code, expected 5"
[ $((SECONDS - start)) -le 10 ] ||
  fail "a stray host and a late agent took $((SECONDS - start)) s to end the run"
echo "ssh_launcher_test: 3b. ... and with a late agent, in $((SECONDS - start)) s: ok"

# 4. A host ssh cannot reach: the job drains at once, naming the host.
start=$SECONDS
code=0
SSH_TEST_UNREACHABLE=127.0.0.1 timeout 30 bash "$LAUNCHER" "$D/job.toml" localhost 127.0.0.1 \
  > "$D/unreachable.log" 2>&1 || code=$?
[ "$code" = 4 ] || fail "an unreachable host: exit $code, expected 4 (drained)"
[ $((SECONDS - start)) -le 10 ] || fail "an unreachable host took $((SECONDS - start)) s to end the run"
grep -q "the agent on 127.0.0.1 ended with exit 255" "$D/unreachable.log" ||
  fail "the launcher did not name the unreachable host"
echo "ssh_launcher_test: 4. an unreachable host drains the job in $((SECONDS - start)) s: ok"
