#!/usr/bin/env bash
# One version of one op, timed from builds of several commits in the same run, the builds alternating at every
# shape (drift in clocks or temperature then falls on all of them alike). Build where nvcc is (no GPU needed),
# run on the GPU machine with build/ab carried along:
#   bash scripts/ab_bench.sh build OP REV...               -> build/ab/<rev>/OP   (REV ".": the working tree, build/ab/tree)
#   bash scripts/ab_bench.sh run OP VERSION REV... < ARGS  -> per line of ARGS, one "AB rev=<rev> ..." line per build
# (AB, not RESULT: scripts/run_all.py tabulates only the current tree's RESULT lines.)
#   e.g. printf '%s\n' "--ranks 64,64" "--q 2,2,4 --ranks 128,128 --B 4096 --L 1" |
#        bash scripts/ab_bench.sh run tt_embedding_backward 7 2628814 .
set -u
cd "$(dirname "$0")/.."
mode=${1:-} op=${2:-}
[ -n "$op" ] || { echo "usage: $0 build OP REV... | run OP VERSION REV... < ARGS" >&2; exit 2; }
shift 2
dir() { if [ "$1" = . ]; then echo build/ab/tree; else echo "build/ab/$(echo "$1" | tr -c 'A-Za-z0-9_\n-' _)"; fi; }
if [ "$mode" = build ]; then
    for rev in "$@"; do
        d=$(dir "$rev"); rm -rf "$d"; mkdir -p "$d"
        if [ "$rev" = . ]; then cp dev/cuda/*.h "dev/cuda/$op.cu" "$d/"
        else for f in $(git ls-tree --name-only "$rev" dev/cuda/ | grep -E '\.(h|cu)$'); do git show "$rev:$f" > "$d/$(basename "$f")"; done; fi
        nvcc -O3 -std=c++17 -lineinfo -arch=sm_90 "$d/$op.cu" -o "$d/$op" -lcublas > "$d/build.log" 2>&1 &
    done
    wait
    for rev in "$@"; do [ -x "$(dir "$rev")/$op" ] || { echo "build of $rev failed: $(dir "$rev")/build.log" >&2; exit 1; }; done
elif [ "$mode" = run ]; then
    ver=$1; shift
    while read -r args; do
        case "$args" in ''|\#*) continue;; esac
        for rev in "$@"; do
            "$(dir "$rev")/$op" "$ver" $args --no-check 2>&1 | grep "^RESULT" | sed "s/^RESULT /AB rev=$rev /"
        done
    done
else
    echo "usage: $0 build OP REV... | run OP VERSION REV... < ARGS" >&2; exit 2
fi
