#!/usr/bin/env bash
# scripts/slurm/saccade.sbatch under a real one-node Slurm (Debian's slurm-wlm 22.05
# and munge, from scripts/install-deps.sh): munged, slurmctld and slurmd start here
# on free ports with their state in a temporary folder and are stopped by pid at the
# end. Jobs run the real coordinator and agents with the test actor
# (tests/coordinator/test_actor.cpp: steps, real checkpoints streamed to the
# coordinator). Checks:
#   1. a job finishes with exit 0;
#   2. scancel drains it with a final checkpoint and exit 4; resubmitting resumes
#      from that checkpoint and finishes;
#   3. scontrol requeue drains and the requeued job resumes and finishes;
#   4. a config whose node names are not the allocation's fails within 10 s;
#   5. two jobs on one node (nodes_from = "slurm", ports_per_job) run side by side
#      and both finish;
#   6. a second job on the same ports (no ports_per_job) fails fast without starting
#      agents, and the first runs on to its end;
#   7. one config on two nodes (--nodes=2): two more slurmd on this host (slurmd -N;
#      Debian builds Slurm with multiple-slurmd support), reached at NodeAddr
#      127.0.0.2 and 127.0.0.3, so each node's actors bind their own address.
# Usage: slurm_test.sh SACCADE TEST_ACTOR SBATCH_SCRIPT
set -euo pipefail
source "$(dirname "$0")/launcher_test_lib.sh"
SACCADE=$(realpath "$1")
ACTOR=$(realpath "$2")
SCRIPT=$(realpath "$3")
if [ "$(id -u)" -ne 0 ]; then
  echo "slurm_test: slurmd must run as root on this machine; skipped"
  exit 77
fi
for b in munged slurmctld slurmd sbatch scontrol scancel sinfo; do
  command -v "$b" >/dev/null || {
    echo "slurm_test: $b is missing: run scripts/install-deps.sh" >&2
    exit 1
  }
done

D=$(mktemp -d /tmp/saccade-slurm.XXXXXX)
H=$(hostname -s)
export SLURM_CONF=$D/slurm.conf
export SACCADE_ACTOR_BINARY=$ACTOR SACCADE_TEST_STEP_MS=20
failed=0
stop() {
  if [ "$failed" = 1 ]; then
    tail -n 30 "$D"/log/*.log "$D"/*.out >&2 2>/dev/null || true
  fi
  scancel --quiet --full 2>/dev/null || true
  for f in "$D"/slurmd-*.pid "$D/slurmctld.pid" "$D/munged.pid"; do
    [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null || true
  done
  sleep 1
  # Anything our jobs left behind runs a binary of this build with a path under $D.
  pkill -9 -f -- "$D/" 2>/dev/null || true
  rm -rf "$D"
}
trap stop EXIT
fail() {
  echo "slurm_test: FAILED: $*" >&2
  failed=1
  exit 1
}

mkdir -p "$D/state" "$D/spool" "$D/log"
dd if=/dev/urandom bs=1 count=1024 of="$D/munge.key" 2>/dev/null
chmod 400 "$D/munge.key"
munged --force --key-file="$D/munge.key" --socket="$D/munge.sock" --pid-file="$D/munged.pid" \
  --log-file="$D/log/munged.log" --seed-file="$D/munge.seed"
# Below the kernel's ephemeral range (32768 and up), where the other tests' sockets
# (bound to port 0, or to ports they picked that way) cannot take slurmd's ports: an
# ephemeral port in use once made sx2's slurmd fail to bind.
CTLD_PORT=$((20000 + RANDOM % 10000))
cat > "$SLURM_CONF" <<EOF
ClusterName=saccadetest
SlurmctldHost=$H
SlurmctldPort=$CTLD_PORT
SlurmdPort=$((CTLD_PORT + 1))
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket=$D/munge.sock
CredType=cred/munge
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool-%n
SlurmctldPidFile=$D/slurmctld.pid
SlurmdPidFile=$D/slurmd-%n.pid
SlurmctldLogFile=$D/log/slurmctld.log
SlurmdLogFile=$D/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
KillWait=15
MinJobAge=600
NodeName=$H CPUs=2 State=UNKNOWN
NodeName=sx1 NodeHostname=$H NodeAddr=127.0.0.2 Port=$((CTLD_PORT + 2)) CPUs=2 State=UNKNOWN
NodeName=sx2 NodeHostname=$H NodeAddr=127.0.0.3 Port=$((CTLD_PORT + 3)) CPUs=2 State=UNKNOWN
PartitionName=test Nodes=$H Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
PartitionName=multi Nodes=sx[1-2] MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
EOF
slurmctld -f "$SLURM_CONF"
for n in "$H" sx1 sx2; do slurmd -f "$SLURM_CONF" -N "$n"; done
for _ in $(seq 60); do
  [ "$(sinfo -h -o %T 2>/dev/null | sort -u)" = idle ] && break
  sleep 0.5
done
[ "$(sinfo -h -o %T | sort -u)" = idle ] || fail "the slurmd never all became idle: $(sinfo -h)"

# A job of the test actor: NAME STEPS PORT [NODE_NAME [PORTS_PER_JOB]]; NODE_NAME "":
# nodes_from = "slurm".
write_job() {
  local name=$1 steps=$2 port=$3 node=${4:-} per_job=${5:-40}
  {
    printf '[job]\nname = "%s"\nwork_dir = "%s"\nstages = ["pretrain"]\n' "$name" "$D/$name"
    printf '[cluster]\ncoordinator_port = %d\nstore_port = %d\ndata_port_base = %d\n' \
      "$port" $((port + 2)) $((port + 10))
    printf 'heartbeat_interval_ms = 50\nheartbeat_misses = 40\nreconnect_grace_s = 20\n'
    printf 'drain_timeout_s = 5\nstatus_linger_ms = 500\n'
    if [ -z "$node" ]; then
      printf 'nodes_from = "slurm"\nports_per_job = %d\n[[cluster.nodes]]\nname = "template"\n' \
        "$per_job"
    else
      printf '[[cluster.nodes]]\nname = "%s"\nhost = "127.0.0.1"\n' "$node"
    fi
    printf 'data_actors = 1\nlearners = 1\n'
    printf '[ssl]\nepochs = 1\nsteps_per_epoch = %d\ncheckpoint_every_steps = 10\nbatch_size = 16\n' "$steps"
  } > "$D/$name.toml"
}
submit() {  # NAME [SBATCH ARGS...] -> job id
  local name=$1
  shift
  sbatch --parsable -o "$D/$name-%j.out" -J "$name" "$@" "$SCRIPT" "$D/$name.toml" "$SACCADE"
}
state() { scontrol show job "$1" | grep -o 'JobState=[A-Z_]*' | cut -d= -f2; }
exit_code() { scontrol show job "$1" | grep -o ' ExitCode=[0-9]*' | cut -d= -f2; }
wait_done() {  # JOB SECONDS
  for _ in $(seq $(($2 * 2))); do
    case "$(state "$1")" in COMPLETED | FAILED | CANCELLED | TIMEOUT | PREEMPTED) return 0 ;; esac
    sleep 0.5
  done
  fail "job $1 still $(state "$1") after $2 s"
}
# The jobs' ports (+ up to 99 x ports_per_job): below Slurm's and the ephemeral range.
PORT=11000

# 1. A job runs to its budget and exits 0.
write_job ok 60 "$PORT"
j=$(submit ok)
wait_done "$j" 120
[ "$(state "$j")" = COMPLETED ] && [ "$(exit_code "$j")" = 0 ] ||
  fail "job ok ended $(state "$j") with exit $(exit_code "$j")"
grep -q 'job "ok" finished\|job finished' "$D/ok-$j.out" || fail "job ok did not finish"
echo "slurm_test: 1. a job finishes with exit 0: ok"

# 2. scancel drains with a final checkpoint; resubmitting resumes from it and finishes.
write_job drain 100000 "$PORT"
j=$(submit drain)
wait_log "$D/drain-$j.out" "checkpoint 20 committed" 60
scancel "$j"
wait_done "$j" 60
wait_log "$D/drain-$j.out" "job drained" 10
drained_at=$(step_of "$D/drain-$j.out")
[ "$(state "$j")" = CANCELLED ] || fail "scancel: job ended $(state "$j")"
write_job drain $((drained_at + 30)) "$PORT"
j2=$(submit drain)
wait_done "$j2" 120
grep -q "resumes it from checkpoint $drained_at" "$D/drain-$j2.out" ||
  fail "the resubmitted job did not resume from checkpoint $drained_at"
[ "$(state "$j2")" = COMPLETED ] && [ "$(exit_code "$j2")" = 0 ] ||
  fail "the resumed job ended $(state "$j2") with exit $(exit_code "$j2")"
echo "slurm_test: 2. scancel drains at step $drained_at, resubmitting resumes and finishes: ok"

# 3. scontrol requeue: the job drains, runs again and resumes.
write_job requeue 100000 "$PORT"
j=$(submit requeue)
wait_log "$D/requeue-$j.out" "checkpoint 20 committed" 60
scontrol requeue "$j"
# Slurm holds a requeued job back for a while (BeginTime); let it start now.
for _ in $(seq 60); do [ "$(state "$j")" = PENDING ] && break; sleep 0.5; done
scontrol update JobId="$j" StartTime=now
wait_log "$D/requeue-$j.out" "resumes it from checkpoint" 60
scancel "$j"
wait_done "$j" 60
echo "slurm_test: 3. scontrol requeue resumes: ok"

# 4. Node names that are not the allocation's: refused before anything starts.
write_job mismatch 60 "$PORT" not-this-node
start=$SECONDS
j=$(submit mismatch)
wait_done "$j" 10
[ "$(exit_code "$j")" = 2 ] || fail "mismatch: exit $(exit_code "$j"), expected 2"
grep -q "are not .*\[\[cluster.nodes\]\] (not-this-node)" "$D/mismatch-$j.out" ||
  fail "mismatch: the error does not name the nodes"
echo "slurm_test: 4. a node-name mismatch fails in $((SECONDS - start)) s: ok"

# 5. Two jobs on one node at once, same config ports: ports_per_job keeps them apart.
write_job twin-a 300 "$PORT"
write_job twin-b 300 "$PORT"
a=$(submit twin-a)
b=$(submit twin-b)
wait_done "$a" 120
wait_done "$b" 120
for j in "$a" "$b"; do
  [ "$(state "$j")" = COMPLETED ] && [ "$(exit_code "$j")" = 0 ] ||
    fail "twin job $j ended $(state "$j") with exit $(exit_code "$j")"
done
! grep -l "refused\|drains" "$D"/twin-*.out || fail "the twin jobs touched each other"
echo "slurm_test: 5. two jobs on one node both finish: ok"

# 6. The same ports twice: the second job's coordinator cannot bind; it starts no agent,
#    exits non-zero, and the first job finishes untouched.
write_job first 400 "$PORT" "" 0
write_job second 400 "$PORT" "" 0
a=$(submit first)
wait_log "$D/first-$a.out" "checkpoint 10 committed" 60
b=$(submit second)
wait_done "$b" 30
[ "$(state "$b")" = FAILED ] || fail "second: ended $(state "$b"), expected FAILED"
grep -q "the port is taken" "$D/second-$b.out" || fail "second: the bind error is not reported"
! grep -q "agent:0" "$D/second-$b.out" || fail "second: agents started without a coordinator"
wait_done "$a" 120
[ "$(state "$a")" = COMPLETED ] && [ "$(exit_code "$a")" = 0 ] ||
  fail "first: ended $(state "$a") with exit $(exit_code "$a")"
! grep -q "refused\|drains" "$D/first-$a.out" || fail "the second job touched the first"
echo "slurm_test: 6. a second job on the same ports fails fast and touches nothing: ok"

# 7. The same kind of config on two nodes: one agent per node, each node's actors at
#    its NodeAddr, the learners of both nodes in one process group.
write_job pair 200 "$PORT"
j=$(submit pair --nodes=2 -p multi)
wait_done "$j" 120
[ "$(state "$j")" = COMPLETED ] && [ "$(exit_code "$j")" = 0 ] ||
  fail "pair: ended $(state "$j") with exit $(exit_code "$j")"
for n in sx1 sx2; do
  grep -q "node $n registered" "$D/pair-$j.out" || fail "pair: node $n never registered"
done
for a in 127.0.0.2 127.0.0.3; do
  grep -q "started data [01] (.*) at tcp://$a:" "$D/pair-$j.out" ||
    fail "pair: no data actor bound at $a (its node's NodeAddr)"
done
echo "slurm_test: 7. one config on two Slurm nodes (NodeAddr 127.0.0.2, .3) finishes: ok"
