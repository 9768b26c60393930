# Shared by slurm_test.sh and ssh_launcher_test.sh (sourced; each defines fail MESSAGE).

# Waits until FILE holds PATTERN, or fails after SECONDS.
wait_log() {  # FILE PATTERN SECONDS
  for _ in $(seq $(($3 * 2))); do
    grep -q -- "$2" "$1" 2>/dev/null && return 0
    sleep 0.5
  done
  fail "no '$2' in $1 after $3 s"
}

# The step of the last checkpoint the coordinator's log in FILE says it committed.
step_of() { grep -o 'checkpoint [0-9]* committed' "$1" | tail -1 | grep -o '[0-9]*'; }
