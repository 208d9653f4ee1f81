#!/usr/bin/env bash
# Per-kernel profile of the slow spots, on a GPU machine where ncu may read the performance counters.
# Each case runs one version at one block size with a few samples; ncu reports every kernel of the
# call (memsets of the L2 flush excluded by the name filter): duration, SM and memory throughput, L2 and
# DRAM bytes, achieved occupancy. Clocks are left alone (--clock-control none).
#
#   bash scripts/profile.sh                 every case below
#   bash scripts/profile.sh tt_embedding    cases whose text contains the pattern
#   bash scripts/profile.sh --detail KERNEL_REGEX "op args"    ncu's full sections (memory, warp states,
#                                           scheduler) for the first launch of one kernel of one run
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/build/gpu}
mkdir -p "$OUT"
PAT=${1:-}
if [ "$PAT" = "--detail" ]; then
    make -C dev/cuda -j"$(nproc)" $(echo "$3" | cut -d' ' -f1) > /dev/null || exit 1
    (cd dev/cuda && timeout 300 ncu --clock-control none -k "regex:$2" -s 2 -c 1 --section SpeedOfLight \
        --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section Occupancy \
        --section LaunchStats ./$3 --no-check --repeat 2 2>&1) | grep -v "^==PROF==" | cut -c1-160
    exit 0
fi
make -C dev/cuda -j"$(nproc)" tt_embedding_forward tt_embedding_backward embedding_bag_backward embedding_bag_forward > /dev/null || exit 1
METRICS=gpu__time_duration.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed,lts__t_bytes.sum,dram__bytes.sum,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,launch__grid_size,launch__block_size,launch__registers_per_thread
while read -r line; do
    case "$line" in ''|\#*) continue;; esac
    if [ -n "$PAT" ] && ! echo "$line" | grep -q -- "$PAT"; then continue; fi
    echo "### $line"
    # --repeat 2: the warm-up and two samples; -c caps the kernels profiled per case
    (cd dev/cuda && timeout 240 ncu --clock-control none --print-units base -c 60 --metrics $METRICS \
        --csv ./$line --no-check --repeat 2 2>&1) | python3 -c '
import csv, sys, collections
rows = [r for r in csv.reader(l for l in sys.stdin if l.startswith("\""))]
if not rows: print("  (no ncu rows)"); sys.exit()
hdr = rows[0]; ki = hdr.index("Kernel Name"); mi = hdr.index("Metric Name"); vi = hdr.index("Metric Value"); ii = hdr.index("ID")
per = collections.OrderedDict()
for r in rows[1:]:
    per.setdefault((r[ii], r[ki][:60]), {})[r[mi]] = r[vi]
for (i, k), m in per.items():
    if "emset" in k: continue
    print("  %-4s %-60s us=%-8.2f sm%%=%-5s mem%%=%-5s L2MB=%-7.1f dramMB=%-6.1f occ%%=%-5s inst=%-10s grid=%s block=%s regs=%s" % (i, k,
        float(m.get("gpu__time_duration.sum", "0").replace(",", "")) / 1e3,
        m.get("sm__throughput.avg.pct_of_peak_sustained_elapsed"), m.get("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"),
        float(m.get("lts__t_bytes.sum", "0").replace(",", "")) / 1e6, float(m.get("dram__bytes.sum", "0").replace(",", "")) / 1e6,
        m.get("sm__warps_active.avg.pct_of_peak_sustained_active"), m.get("smsp__inst_executed.sum"),
        m.get("launch__grid_size"), m.get("launch__block_size"), m.get("launch__registers_per_thread")))
'
done <<'CASES'
tt_embedding_forward 3 --block 256
tt_embedding_forward 6 --block 256
tt_embedding_forward 2
tt_embedding_backward 7
tt_embedding_backward 6
tt_embedding_backward 7 --q 2,2,4 --ranks 128,128 --B 4096 --L 1
tt_embedding_backward 7 --q 4,4,4 --ranks 128,128 --B 4096 --L 1
tt_embedding_backward 7 --ranks 64,64
embedding_bag_backward 4 --alpha 0
embedding_bag_backward 7 --alpha 0 --block 64
embedding_bag_backward 8 --alpha 0 --block 64
embedding_bag_backward 8 --block 64
embedding_bag_backward 4
embedding_bag_forward 4 --alpha 0 --block 64
embedding_bag_forward 6 --alpha 0 --block 64
CASES
