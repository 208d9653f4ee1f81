#!/usr/bin/env bash
# The GPU driver: in one call, build everything, run `make test` (CPU + GPU parts), run every line of
# scripts/bench_cases.txt (every version at the bench sizes), run the PyTorch/FBGEMM peers, and turn it
# all into results/<gpu>.md, .csv and .png. Logs go to build/logs; results and a tarball of the logs to
# $OUT (default ./build/gpu).
#
#   bash scripts/gpu_check.sh                  everything
#   bash scripts/gpu_check.sh --only repkv     bench lines and peers whose text contains 'repkv'
#   bash scripts/gpu_check.sh --no-test        skip `make test`
#   bash scripts/gpu_check.sh --no-peers       skip the peers
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/build/gpu}
mkdir -p "$OUT" build/logs
ONLY=""; RUN_TEST=1; RUN_PEERS=1
while [ $# -gt 0 ]; do
    case "$1" in
        --only) ONLY=$2; shift 2;;
        --no-test) RUN_TEST=0; shift;;
        --no-peers) RUN_PEERS=0; shift;;
        *) echo "unknown option $1"; exit 2;;
    esac
done
LOGS=build/logs
start=$(date +%s)
{ nvidia-smi; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,clocks.max.sm,power.draw,temperature.gpu --format=csv; } > $LOGS/nvidia-smi.txt 2>&1
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n1 | tr 'A-Z' 'a-z' | sed 's/nvidia //; s/[^a-z0-9]/_/g')
GPU=${GPU:-unknown}
echo "gpu: $GPU"

echo "== build ($(nproc) jobs)"
make -C dev/cuda -k -j"$(nproc)" all > $LOGS/build.log 2>&1 || { echo "build failed"; tail -30 $LOGS/build.log; }
echo "build: $(( $(date +%s) - start )) s"

if [ $RUN_TEST -eq 1 ]; then
    echo "== make test"
    JOBS=$(nproc) bash scripts/test.sh > $LOGS/test.log 2>&1
    grep -E "^FAIL|^  .*FAIL" $LOGS/test.log | head -40
    tail -1 $LOGS/test.log
    echo "test: $(( $(date +%s) - start )) s"
fi

echo "== bench cases"
: > $LOGS/bench.log
while read -r line; do
    case "$line" in ''|\#*) continue;; esac
    if [ -n "$ONLY" ] && ! echo "$line" | grep -q -- "$ONLY"; then continue; fi
    echo "### $line" >> $LOGS/bench.log
    t0=$(date +%s)
    (cd dev/cuda && timeout 300 ./$line) >> $LOGS/bench.log 2>&1 < /dev/null
    rc=$?
    echo "### exit $rc after $(( $(date +%s) - t0 )) s" >> $LOGS/bench.log
    echo "  exit $rc  $(( $(date +%s) - t0 ))s  $line"
done < scripts/bench_cases.txt

# The flush's own cost: one short and one long case again with L2_FLUSH=read (a read flush leaves L2
# clean; the default write flush leaves dirty lines whose write-back lands in the timed kernel).
if [ -z "$ONLY" ] || echo "flush" | grep -q -- "$ONLY"; then
    echo "== L2 flush: write (default) against read" | tee $LOGS/flush.txt
    for line in "embedding_bag_forward 4 --alpha 0 --block 64" "repkv_backward 3 --block 1024"; do
        for mode in write read; do
            (cd dev/cuda && L2_FLUSH=$mode ./$line 2>&1) | grep -E "^(RESULT|PEAK)" | sed "s/^/$mode flush: /" | tee -a $LOGS/flush.txt
        done
    done
fi

if [ $RUN_PEERS -eq 1 ]; then
    echo "== peers"
    PYTHONUNBUFFERED=1 python3 scripts/torch_check.py ${ONLY:+--only "$ONLY"} > $LOGS/peers.log 2>&1
    grep -E "^(PASS|FAIL|SKIP|PEER)" $LOGS/peers.log | head -60
fi

echo "== results"
python3 scripts/run_all.py --logs $LOGS --gpu "$GPU" --out results
cp results/"$GPU".md results/"$GPU".csv "$OUT"/ 2>/dev/null
cp results/"$GPU".png "$OUT"/ 2>/dev/null
tar czf "$OUT"/logs.tgz -C build logs gpu_cases 2>/dev/null || tar czf "$OUT"/logs.tgz -C build logs
echo "total: $(( $(date +%s) - start )) s"
