# Sourced by the build scripts from the checkout's root: one ccache for every build tree,
# with paths relative to the checkout, so a fresh clone (CI) hits the cache of an earlier one.
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/ccache}
export CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-10G}
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
# Without this ccache refuses every file compiled with the precompiled torch header
# ("could not use precompiled header"; ccache manual, "Precompiled headers").
export CCACHE_SLOPPINESS=${CCACHE_SLOPPINESS:-pch_defines,time_macros}
# With -g (the sanitizer build) ccache would hash the build directory, different in every
# clone; the price is debug info naming the directory of the clone that filled the cache.
export CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
