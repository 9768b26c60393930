#!/bin/bash
# Runs one saccade job over plain ssh: the coordinator on the first host, one
# agent per host. Usage:
#   scripts/ssh/saccade-ssh.sh CONFIG HOST1 [HOST2 ...]
# Each HOST must be a [[cluster.nodes]] name of CONFIG (the agent registers
# under it), reachable by `ssh HOST` without a password, with saccade on its
# PATH (or SACCADE=/path/to/saccade) and CONFIG (and any [security] key files)
# at the same path. Ctrl-C (or SIGTERM) drains the job; the script exits with
# the coordinator's code (0 finished, 4 drained before the budget: run the same
# command again to resume, 3 failed).
set -euo pipefail

CONFIG=${1:?usage: saccade-ssh.sh CONFIG HOST1 [HOST2 ...]}
shift
HOSTS=("$@")
[ ${#HOSTS[@]} -gt 0 ] || { echo "saccade-ssh.sh: name at least one host" >&2; exit 2; }
SACCADE=${SACCADE:-saccade}
"$SACCADE" config check "$CONFIG" >/dev/null
HEAD=${HOSTS[0]}
PORT=$("$SACCADE" config show "$CONFIG" | awk '/^coordinator_port/ {print $3}')

# ssh -tt gives each remote command a terminal: ending the local ssh hangs up
# the remote one (SIGHUP), which the coordinator treats like SIGTERM (drain).
# One launch identity for every process of this run: agents of another run of the
# same job (or another job on the same ports) are refused at once.
LAUNCH=${SACCADE_LAUNCH:-ssh-$(date +%s)-$$}
ssh -tt "$HEAD" "$SACCADE" coordinator "$CONFIG" --launch "$LAUNCH" &
COORDINATOR=$!
PIDS=()
for host in "${HOSTS[@]}"; do
  ssh -tt "$host" "$SACCADE" agent --coordinator "$HEAD:$PORT" --node "$host" --config "$CONFIG" \
    --launch "$LAUNCH" &
  PIDS+=($!)
done
drain() { kill -TERM "$COORDINATOR" 2>/dev/null || true; }
trap drain TERM INT

CODE=0
wait $COORDINATOR || CODE=$?
for pid in "${PIDS[@]}"; do wait "$pid" || true; done
exit $CODE
