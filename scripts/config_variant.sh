#!/usr/bin/env bash
# A config variant: a file that includes BASE and overrides some of its keys (the
# config loader merges them over BASE; docs/config.md), the one way the scripts
# (ssl_ablations.sh, policy_ablations.sh, gpu/run.sh) and the docs' seed recipes write one.
#   bash scripts/config_variant.sh BASE OUT SECTION.KEY=VALUE...
# VALUE is TOML; a bare word is a string (policy.reward=increase is reward = "increase").
# cluster.nodes.KEY=VALUE sets KEY in every [[cluster.nodes]] entry: an array of tables
# replaces its base's as a whole, so every node of the resolved BASE is written out.
# The include is relative to OUT's folder; OUT is checked with `saccade config check`.
# SACCADE=path/to/saccade picks the binary (default build/saccade).
# Sourced, it defines config_variant BASE OUT PAIR... and config_value CONFIG SECTION KEY.

# TOML for one value given on a command line: numbers, booleans, quoted strings and
# arrays as written; anything else becomes a string.
toml_value() {
  if [[ "$1" =~ ^(-?[0-9][0-9_.eE+-]*|true|false|\".*\"|\'.*\'|\[.*\])$ ]]; then
    printf '%s' "$1"
  else
    printf '"%s"' "$1"
  fi
}

# The resolved value of SECTION.KEY (a string without its quotes).
config_value() {
  "${SACCADE:-build/saccade}" config show "$1" |
    awk -v sec="[$2]" -v key="$3" '
      /^\[/ { in_sec = ($0 == sec); next }
      in_sec && !found && index($0, key " = ") == 1 {  # reads to the end: no SIGPIPE
        v = substr($0, length(key) + 4); sub(/  # .*$/, "", v); gsub(/^"|"$/, "", v); print v; found = 1
      }'
}

config_variant() {
  local base=$1 out=$2
  shift 2
  [[ -f "$base" ]] || {
    echo "config_variant: $base: no such config" >&2
    return 2
  }
  local -a sections=() node_keys=() node_values=()
  local -A body=()
  local pair section key value
  for pair in "$@"; do
    [[ "$pair" =~ ^([a-z_]+)\.([a-z_.]+)=(.*)$ ]] || {
      echo "config_variant: \"$pair\": expected SECTION.KEY=VALUE" >&2
      return 2
    }
    section=${BASH_REMATCH[1]} key=${BASH_REMATCH[2]} value=$(toml_value "${BASH_REMATCH[3]}")
    if [[ "$section.$key" == cluster.nodes.* ]]; then
      node_keys+=("${key#nodes.}") node_values+=("$value")
      continue
    fi
    [[ -v "body[$section]" ]] || sections+=("$section")
    body[$section]+="$key = $value"$'\n'
  done
  mkdir -p "$(dirname "$out")"
  {
    echo "# scripts/config_variant.sh: $base with the keys below."
    echo "include = \"$(realpath -m --relative-to="$(dirname "$out")" "$base")\""
    for section in "${sections[@]}"; do
      printf '\n[%s]\n%s' "$section" "${body[$section]}"
    done
    if [[ ${#node_keys[@]} -gt 0 ]]; then
      # BASE's nodes as resolved, without the doc comments, with the keys replaced.
      "${SACCADE:-build/saccade}" config show "$base" | awk \
        -v keys="${node_keys[*]}" -v values="$(printf '%s\x1f' "${node_values[@]}")" '
        BEGIN { n = split(keys, k, " "); split(values, v, "\x1f"); for (i = 1; i <= n; ++i) set[k[i]] = v[i] }
        /^\[\[cluster\.nodes\]\]$/ { in_node = 1; print ""; print; next }
        /^\[/ { in_node = 0; next }
        in_node && /^[a-z_]+ = / {
          sub(/  # .*$/, ""); name = substr($0, 1, index($0, " = ") - 1)
          if (name in set) { print name " = " set[name]; seen[name] = 1 } else print
        }
        END { for (name in set) if (!(name in seen)) { print "config_variant: cluster.nodes." name ": no such node key" > "/dev/stderr"; exit 2 } }'
    fi
  } >"$out" || return 2
  # A bad key or value is refused here, by name, before anything runs.
  "${SACCADE:-build/saccade}" config check "$out" >/dev/null
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  set -euo pipefail
  [[ $# -ge 2 ]] || {
    echo "usage: bash scripts/config_variant.sh BASE OUT [SECTION.KEY=VALUE...]" >&2
    exit 2
  }
  config_variant "$@"
fi
