#!/bin/bash
# Runs one saccade job over plain ssh: the coordinator on the first host, one
# agent per host. Usage:
#   scripts/ssh/saccade-ssh.sh CONFIG HOST1 [HOST2 ...]
# Each HOST must be a [[cluster.nodes]] name of CONFIG (the agent registers
# under it), reachable by `ssh HOST` without a password, with saccade on its
# PATH (or SACCADE=/path/to/saccade) and CONFIG (and any [security] key files)
# at the same path. Ctrl-C (or SIGTERM) drains the job; the script exits with
# the coordinator's code (0 finished, 4 drained before the budget: run the same
# command again to resume, 3 failed), or 5 when the coordinator refused an agent.
# An agent that cannot start (ssh cannot reach its host) drains the job: 4.
set -euo pipefail

CONFIG=${1:?usage: saccade-ssh.sh CONFIG HOST1 [HOST2 ...]}
shift
HOSTS=("$@")
[ ${#HOSTS[@]} -gt 0 ] || { echo "saccade-ssh.sh: name at least one host" >&2; exit 2; }
SACCADE=${SACCADE:-saccade}
# Actors run `$SACCADE actor ...` unless SACCADE_ACTOR_BINARY names another build.
ACTOR_ARGS=()
[ -z "${SACCADE_ACTOR_BINARY:-}" ] || ACTOR_ARGS=(--actor-binary "$SACCADE_ACTOR_BINARY")
"$SACCADE" config check "$CONFIG" >/dev/null
HEAD=${HOSTS[0]}
RESOLVED=$("$SACCADE" config show "$CONFIG")
PORT=$(awk '$1 == "coordinator_port" {print $3; exit}' <<<"$RESOLVED")
JOB=$(awk '/^\[job\]/ {j = 1; next} /^\[/ {j = 0} j && $1 == "name" {gsub(/"/, "", $3); print $3}' <<<"$RESOLVED")

# ssh -tt gives each remote command a terminal: ending the local ssh hangs up
# the remote one (SIGHUP), which the coordinator treats like SIGTERM (drain).
# One launch identity for every process of this run: agents of another run of the
# same job (or another job on the same ports) are refused at once.
LAUNCH=${SACCADE_LAUNCH:-ssh-$(date +%s)-$$}
ssh -tt "$HEAD" "$SACCADE" coordinator "$CONFIG" --launch "$LAUNCH" &
COORDINATOR=$!
# Agents start once the coordinator answers (as in scripts/slurm/saccade.sbatch).
until "$SACCADE" status --coordinator "$HEAD:$PORT" --job "$JOB" --config "$CONFIG" \
  --timeout-ms 1000 >/dev/null 2>&1; do
  if ! kill -0 $COORDINATOR 2>/dev/null; then
    CODE=0
    wait $COORDINATOR || CODE=$?
    echo "saccade-ssh.sh: the coordinator ended before it served $HEAD:$PORT (exit $CODE)" >&2
    exit $CODE
  fi
  sleep 0.5
done
PIDS=()
declare -A HOST_OF
for host in "${HOSTS[@]}"; do
  ssh -tt "$host" "$SACCADE" agent --coordinator "$HEAD:$PORT" --node "$host" --config "$CONFIG" \
    --launch "$LAUNCH" "${ACTOR_ARGS[@]}" &
  PIDS+=($!)
  HOST_OF[$!]=$host
done
drain() { kill -TERM "$COORDINATOR" 2>/dev/null || true; }
trap drain TERM INT

# Until the coordinator ends. An agent the coordinator refused (exit 5: a host that
# is no node of CONFIG, or another launch) ends the run at once instead of leaving
# the coordinator waiting for that node. An agent that fails otherwise while the job
# runs (ssh cannot reach its host: 255; no saccade there: 127) leaves its node without
# an agent, which nothing here starts again: the job drains (exit 4), and the same
# command resumes it once the host is back, instead of the coordinator waiting
# cluster.reconnect_grace_s for that node and failing the job.
CODE=
STOPPED=  # the launcher stopped the job itself (an agent refused or failed)
LIVE=("${PIDS[@]}")
while [ -z "$CODE" ]; do
  DONE=
  wait -n -p DONE "$COORDINATOR" "${LIVE[@]}" && rc=0 || rc=$?
  [ -n "${DONE:-}" ] || continue  # a signal (drain() ran): wait -n unsets DONE
  for i in "${!LIVE[@]}"; do if [ "${LIVE[$i]}" = "$DONE" ]; then unset "LIVE[$i]"; fi; done
  if [ "$DONE" = "$COORDINATOR" ]; then
    CODE=$rc
  elif [ "$rc" -eq 5 ]; then
    echo "saccade-ssh.sh: an agent was refused by the coordinator (see its log): stopping" >&2
    drain
    wait $COORDINATOR || true
    CODE=5
    STOPPED=1
  elif [ "$rc" -ne 0 ]; then
    echo "saccade-ssh.sh: the agent on ${HOST_OF[$DONE]} ended with exit $rc (see its output" \
      "above): its node has no agent; draining the job" >&2
    drain
    STOPPED=1
  fi
done
# The coordinator's Shutdown ends the agents that registered within seconds. One that never
# heard from it (it connected after the coordinator had stopped, as a slow host's may when
# the launcher stops the job early) would wait cluster.reconnect_grace_s for a coordinator
# that is not coming back: its session is ended here (the remote agent gets SIGHUP and
# drains), at once when the launcher stopped the job, otherwise after 10 s.
alive() { for pid in "${LIVE[@]}"; do kill -0 "$pid" 2>/dev/null && return 0; done; return 1; }
if [ -z "$STOPPED" ]; then
  for _ in $(seq 20); do alive || break; sleep 0.5; done
fi
for pid in "${LIVE[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
for pid in "${PIDS[@]}"; do wait "$pid" || true; done
exit $CODE
