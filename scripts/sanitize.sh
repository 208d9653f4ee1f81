#!/usr/bin/env bash
# `make sanitize`: compute-sanitizer's memcheck and racecheck over every version of every op (fp32 and
# bf16) at small shapes, including the shapes the specialised versions need (vector widths, D <= 64 rows,
# mixed table widths, weighted and mean bags, every optimizer, the TT ops' compiled tensor-core shapes and
# rank 128, the LFU cache, half weights), SAN_JOBS runs at a time (default 8); SAN_ONLY=REGEX runs the
# cases it matches; SAN_NO_BUILD=1 uses the binaries as they are. GPU only: on a machine without a GPU it
# says so and exits 0. Ends with `N passed, M failed, K skipped` (skipped: the op refused the line, e.g. a
# build without that mode) and exits 1 if a run reported an error.
set -u
cd "$(dirname "$0")/.."
if ! command -v nvidia-smi > /dev/null 2>&1 || ! nvidia-smi -L > /dev/null 2>&1; then
    echo "make sanitize: no GPU here, nothing run"; exit 0
fi
SAN=${COMPUTE_SANITIZER:-compute-sanitizer}
command -v "$SAN" > /dev/null 2>&1 || SAN=/usr/local/cuda/bin/compute-sanitizer
[ -n "${SAN_NO_BUILD:-}" ] || make -C dev/cuda -j"$(nproc)" all > /dev/null 2>&1 || { echo "build failed: run make -C dev/cuda all"; exit 1; }
mkdir -p build/sanitize
cases=(
  "repkv_forward all --check-only --B 2 --T 5 --NH 8 --NKV 2 --HD 16"
  "repkv_forward all --check-only --B 1 --T 3 --NH 3 --NKV 1 --HD 5"
  "repkv_backward all --check-only --B 2 --T 5 --NH 8 --NKV 2 --HD 16"
  "repkv_backward all --check-only --B 1 --T 3 --NH 3 --NKV 1 --HD 5"
  "embedding_bag_forward all --check-only --T 4 --Ds 4,12,132,260 --Es 50,7,33,90 --B 37 --L 13 --weighted --pooling mean --empty-frac 0.2"
  "embedding_bag_forward all --check-only --T 2 --Ds 1028,64 --Es 11,40 --B 5 --L 40 --alpha 0"
  "embedding_bag_backward all --check-only --T 3 --Ds 4,16,64 --Es 50,7,33 --B 17 --L 9 --distinct off"
  "embedding_bag_backward all --check-only --T 2 --Ds 132,1024 --Es 20,9 --B 9 --L 70 --alpha 0 --weighted --pooling mean --optimizer adagrad"
  "embedding_bag_backward all --check-only --T 2 --D 8 --E 30 --B 40 --L 5 --one-row --optimizer dense"
  "embedding_bag_backward all --check-only --T 2 --D 32 --E 3000 --B 64 --L 20 --optimizer sgd"
  "tt_embedding_forward all --check-only --p 7,9,5 --q 2,4,2 --ranks 8,16 --B 4 --L 3"
  "tt_embedding_backward all --check-only --p 3,4,5 --q 2,2,2 --ranks 2,3 --B 3 --L 2"
  "tt_embedding_forward all --check-only --p 7,9,5 --q 4,4,4 --ranks 32,32 --B 5 --L 3"
  "tt_embedding_forward all --check-only --p 7,9,5 --q 4,4,4 --ranks 16,16 --B 5 --L 3 --tables 2"
  "tt_embedding_forward all --check-only --p 5,3,4 --q 2,2,4 --ranks 128,128 --B 3 --L 2"
  "tt_embedding_backward all --check-only --p 7,9,5 --q 4,4,4 --ranks 32,32 --B 5 --L 3 --optimizer sgd"
  "tt_embedding_backward all --check-only --p 7,9,5 --q 4,4,4 --ranks 16,16 --B 5 --L 3 --optimizer adagrad --tables 2"
  "tt_embedding_backward all --check-only --p 5,3,4 --q 2,2,4 --ranks 128,128 --B 3 --L 2 --optimizer dense"
  "lfu_count all --check-only --E 1000 --B 16 --L 5 --H 300 --steps 2"
  "tt_cache all --check-only --p 7,11,13 --q 2,3,2 --ranks 5,3 --B 17 --L 5 --optimizer adagrad"
  "tt_cache all --check-only --p 10,10,10 --q 4,4,4 --ranks 32,32 --tables 2 --B 9 --L 3 --cache-rows 300 --part-rows warp"
  "tt_cache all --check-only --p 10,10,10 --q 2,2,4 --ranks 4,4 --B 64 --L 8 --alpha 1.3 --optimizer dense"
  "embedding_bag_forward all --check-only --T 3 --Ds 4,12,132 --Es 50,7,33 --B 13 --L 7 --weights fp16"
  "embedding_bag_backward all --check-only --T 3 --Ds 4,16,64 --Es 50,7,33 --B 17 --L 9 --weights bf16"
  "embedding_bag_backward all --check-only --T 2 --D 36 --E 60 --B 11 --L 6 --weights fp16 --optimizer sgd --pooling none"
)
# one sanitizer run: prints PASS / SKIP / FAIL and its log's name; the runs go SAN_JOBS at a time (default 8)
san_one() {
    local tool=$1 line=$2 log="build/sanitize/$(echo "$1 $2" | tr -c 'A-Za-z0-9_.,-' '_' | cut -c1-180).log" rc summary
    (cd dev/cuda && timeout 900 "$SAN" --tool "$tool" --error-exitcode 99 ./$line) > "$log" 2>&1 < /dev/null; rc=$?
    summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$log" | tail -1)
    if [ $rc -eq 0 ]; then
        echo "PASS $tool $line ($summary)"
    elif [ $rc -eq 2 ] && ! grep -q "========= [A-Z].*[Ee]rror\|Race reported" "$log"; then   # the op refused it: no sanitizer result
        echo "SKIP $tool $line (the op refused it: $(grep -m1 '^error' "$log"))"
    else
        echo "FAIL $tool $line (exit $rc; ${summary:-no summary}; log $log)"; grep -m5 "=========" "$log"
    fi
}
export -f san_one
export SAN
jobs_file=build/sanitize/jobs.txt
: > "$jobs_file"
for c in "${cases[@]}"; do
    [[ "$c" =~ ${SAN_ONLY:-.} ]] || continue          # SAN_ONLY=REGEX: only the cases it matches
    for dt in "" _bf16; do
        line="${c%% *}$dt ${c#* }"
        [ -x "dev/cuda/${line%% *}" ] || continue
        [ -n "$dt" ] && grep -q "has no bf16 mode" "dev/cuda/${c%% *}.cu" && continue   # its bf16 build only refuses
        for tool in memcheck racecheck; do printf '%s\t%s\n' "$tool" "$line" >> "$jobs_file"; done
    done
done
out=build/sanitize/summary.txt
tr '\n' '\0' < "$jobs_file" | xargs -0 -P "${SAN_JOBS:-8}" -I{} bash -c 'san_one "${1%%	*}" "${1#*	}"' _ {} | tee "$out"
pass=$(grep -c '^PASS' "$out"); fail=$(grep -c '^FAIL' "$out"); skip=$(grep -c '^SKIP' "$out")
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
