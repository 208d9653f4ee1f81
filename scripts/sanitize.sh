#!/usr/bin/env bash
# `make sanitize`: compute-sanitizer's memcheck and racecheck over every version of every op (fp32 and
# bf16) at small shapes, including the shapes the specialised versions need (vector widths, D <= 64 rows,
# mixed table widths, weighted and mean bags, every optimizer). GPU only: on a machine without a GPU it
# says so and exits 0. Ends with `N passed, M failed, K skipped` (skipped: the op refused the line, e.g. a
# build without that mode) and exits 1 if a run reported an error.
set -u
cd "$(dirname "$0")/.."
if ! command -v nvidia-smi > /dev/null 2>&1 || ! nvidia-smi -L > /dev/null 2>&1; then
    echo "make sanitize: no GPU here, nothing run"; exit 0
fi
SAN=${COMPUTE_SANITIZER:-compute-sanitizer}
command -v "$SAN" > /dev/null 2>&1 || SAN=/usr/local/cuda/bin/compute-sanitizer
make -C dev/cuda -j"$(nproc)" all > /dev/null 2>&1 || { echo "build failed: run make -C dev/cuda all"; exit 1; }
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
)
pass=0; fail=0; skip=0; i=0
for c in "${cases[@]}"; do
    for dt in "" _bf16; do
        line="${c%% *}$dt ${c#* }"
        [ -x "dev/cuda/${line%% *}" ] || continue
        for tool in memcheck racecheck; do
            i=$((i + 1)); log="build/sanitize/run$i.log"
            (cd dev/cuda && timeout 900 "$SAN" --tool "$tool" --error-exitcode 99 ./$line) > "$log" 2>&1 < /dev/null; rc=$?
            summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$log" | tail -1)
            if [ $rc -eq 0 ]; then
                echo "PASS $tool $line ($summary)"; pass=$((pass + 1))
            elif [ $rc -eq 2 ] && ! grep -q "========= [A-Z].*[Ee]rror\|Race reported" "$log"; then   # the op refused it: no sanitizer result
                echo "SKIP $tool $line (the op refused it: $(grep -m1 '^error' "$log"))"; skip=$((skip + 1))
            else
                echo "FAIL $tool $line (exit $rc; ${summary:-no summary}; log $log)"; grep -m5 "=========" "$log"; fail=$((fail + 1))
            fi
        done
    done
done
echo "$pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ]
