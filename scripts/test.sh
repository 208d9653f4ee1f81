#!/usr/bin/env bash
# `make test`: the one test command.
#   1. builds every op, fp32 and bf16, with warnings as errors (one PASS/FAIL per binary), and scripts/row_roof.cu
#   2. builds and runs the CPU tests in tests/test_*.cu (no GPU needed)
#   3. runs the command-line cases of tests/cli_cases.txt with no GPU visible, then scripts/fuzz.py's CPU
#      part (random valid and invalid command lines for every op: exit 2 or 3 only, no hang, no signal)
#   4. on a machine with a CUDA device: every line of tests/gpu_cases.txt (then the slowest eight, with their
#      seconds), and scripts/torch_check.py where torch imports with CUDA; elsewhere reports the GPU part skipped
# Ends with `N passed, M failed[, K skipped]` and exits 1 if anything failed.
#   bash scripts/test.sh --gpu-only    steps 1 and 4 alone (on a GPU machine, when 2 and 3 passed elsewhere)
#   bash scripts/test.sh --gpu-only --no-torch
#                                      the same without scripts/torch_check.py, to run it as a command of its
#                                      own (together they take over 10 minutes on a 16-core H100 machine)
set -u
GPU_ONLY=0; TORCH=1
for a in "$@"; do
    case "$a" in
        --gpu-only) GPU_ONLY=1;;
        --no-torch) TORCH=0;;
        *) echo "scripts/test.sh: unknown option $a (--gpu-only, --no-torch)"; exit 2;;
    esac
done
cd "$(dirname "$0")/.."
ROOT=$PWD
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
NVCC=${NVCC:-nvcc}
mkdir -p build/tests
pass=0; fail=0; skip=0
ok()   { echo "PASS $*"; pass=$((pass + 1)); }
bad()  { echo "FAIL $*"; fail=$((fail + 1)); }

# ---- 1. build every op and bf16 variant
echo "== build (dev/cuda, warnings as errors)"
make -C dev/cuda -k -j"$JOBS" all > build/build.log 2>&1
targets=$(cd dev/cuda && for f in *.cu; do echo "${f%.cu} ${f%.cu}_bf16"; done)
for t in $targets; do
    if make --no-print-directory -C dev/cuda -q "$t" 2>/dev/null && [ -x "dev/cuda/$t" ]; then ok "build $t"
    else bad "build $t (see build/build.log)"; grep -A3 -E "error|warning" build/build.log | head -20; fi
done

if "$NVCC" -O3 -std=c++17 -arch=sm_90 -Werror all-warnings -Xcompiler -Wall,-Wno-unused-function -I dev/cuda scripts/row_roof.cu \
       -o build/row_roof > build/row_roof.build.log 2>&1; then ok "build scripts/row_roof.cu"
else bad "build scripts/row_roof.cu (see build/row_roof.build.log)"; head -20 build/row_roof.build.log; fi

if [ $GPU_ONLY -eq 0 ]; then
# ---- 2. CPU tests
echo "== CPU tests (tests/test_*.cu)"
for src in tests/test_*.cu; do            # build them in parallel, then run them one by one
    name=$(basename "$src" .cu)
    ( "$NVCC" -O2 -std=c++17 -arch=sm_90 -Werror all-warnings -Xcompiler -Wall,-Wformat-security,-Wno-unused-function \
          -I dev/cuda "$src" -o "build/tests/$name" -lcublas > "build/tests/$name.build.log" 2>&1
      echo $? > "build/tests/$name.build.rc" ) &
done
wait
for src in tests/test_*.cu; do
    name=$(basename "$src" .cu)
    if [ "$(cat "build/tests/$name.build.rc")" != 0 ]; then
        bad "$name: does not build"; head -20 "build/tests/$name.build.log"; continue
    fi
    out=$("build/tests/$name" 2>&1); rc=$?
    echo "$out" | grep -E "^(PASS|FAIL)" | sed "s/^/  [$name] /"
    np=$(echo "$out" | grep -c "^PASS"); nf=$(echo "$out" | grep -c "^FAIL")
    pass=$((pass + np)); fail=$((fail + nf))
    if [ $rc -ne 0 ] && [ "$nf" -eq 0 ]; then bad "$name exited $rc without a FAIL line"; echo "$out" | tail -5; fi
    if [ "$np" -eq 0 ] && [ "$nf" -eq 0 ]; then bad "$name reported no cases"; fi
done

# ---- 3. command line, no GPU visible
echo "== command-line cases (tests/cli_cases.txt, CUDA_VISIBLE_DEVICES= )"
while IFS='|' read -r want cmd expect; do
    want=$(echo "$want" | xargs); cmd=$(echo "$cmd" | xargs); expect=$(echo "$expect" | sed 's/^ *//; s/ *$//')
    case "$want" in ''|\#*) continue;; esac
    bin=${cmd%% *}
    if [ ! -x "dev/cuda/$bin" ]; then bad "cli '$cmd': dev/cuda/$bin not built"; continue; fi
    out=$(cd dev/cuda && CUDA_VISIBLE_DEVICES= timeout 60 ./$cmd 2>&1 < /dev/null); rc=$?
    if [ "$rc" = "$want" ] && echo "$out" | grep -qF -- "$expect"; then ok "cli '$cmd' -> exit $rc"
    else bad "cli '$cmd': want exit $want and '$expect', got exit $rc: $(echo "$out" | tail -2 | tr '\n' ' ')"; fi
done < tests/cli_cases.txt

echo "== fuzz (scripts/fuzz.py, no GPU visible, ${FUZZ_SECONDS:-60} s)"
if command -v python3 > /dev/null 2>&1; then
    out=$(python3 scripts/fuzz.py --seed "${FUZZ_SEED:-1}" --seconds "${FUZZ_SECONDS:-60}" --jobs "$JOBS" 2>&1); rc=$?
    echo "$out" | tail -21 | sed 's/^/  /'
    if [ $rc -eq 0 ] && echo "$out" | grep -q "^PASS fuzz"; then ok "fuzz (CPU)"; else bad "fuzz (CPU) exited $rc"; fi
else
    echo "SKIP fuzz: no python3"; skip=$((skip + 1))
fi

fi   # GPU_ONLY

# ---- 4. GPU part
has_gpu=0
if command -v nvidia-smi > /dev/null 2>&1 && nvidia-smi -L > /dev/null 2>&1; then has_gpu=1; fi
ncases=$(grep -cvE '^\s*(#|$)' tests/gpu_cases.txt)
if [ $has_gpu -eq 1 ]; then
    echo "== GPU cases (tests/gpu_cases.txt)"
    # The cases are checks, not timings, so GPU_JOBS of them share the GPU at once (default 4); each
    # writes its own log and exit code, and the summary below is in file order.
    rm -rf build/gpu_cases; mkdir -p build/gpu_cases
    grep -vE '^\s*(#|$)' tests/gpu_cases.txt | awk '{print NR "\t" $0}' > build/gpu_cases/list.txt
    run_case() {   # $1 = case number, $2... = binary and args
        n=$1; shift
        t0=$(date +%s.%N)
        (cd dev/cuda && timeout 600 ./"$@") > "build/gpu_cases/case$n.log" 2>&1 < /dev/null
        echo $? > "build/gpu_cases/case$n.rc"
        echo "$t0 $(date +%s.%N)" | awk '{printf "%.1f\n", $2 - $1}' > "build/gpu_cases/case$n.secs"
    }
    export -f run_case
    cut -f1 build/gpu_cases/list.txt | xargs -P "${GPU_JOBS:-4}" -I{} bash -c \
        'run_case {} $(awk -F "\t" -v n={} "\$1 == n {print \$2}" build/gpu_cases/list.txt)'
    while IFS=$'\t' read -r n line; do
        rc=$(cat "build/gpu_cases/case$n.rc" 2>/dev/null || echo missing)
        if [ "$rc" = 0 ]; then ok "gpu '$line'"
        else bad "gpu '$line' exited $rc"; grep -E "FAIL|error|skipped" "build/gpu_cases/case$n.log" | head -12; fi
    done < build/gpu_cases/list.txt
    echo "slowest GPU cases (seconds each, ${GPU_JOBS:-4} cases at a time):"
    while IFS=$'\t' read -r n line; do echo "$(cat "build/gpu_cases/case$n.secs" 2>/dev/null || echo 0) $line"; done \
        < build/gpu_cases/list.txt | sort -rn | head -8 | sed 's/^/  /'
    echo "== PyTorch cross-checks (scripts/torch_check.py)"
    if [ $TORCH -eq 0 ]; then
        echo "SKIP torch cross-checks: --no-torch (run python3 scripts/torch_check.py)"; skip=$((skip + 1))
    elif python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" > /dev/null 2>&1; then
        out=$(python3 scripts/torch_check.py 2>&1); rc=$?
        echo "$out" | grep -E "^(PASS|FAIL|SKIP|PEER)" | sed 's/^/  /'
        np=$(echo "$out" | grep -c "^PASS"); nf=$(echo "$out" | grep -c "^FAIL"); ns=$(echo "$out" | grep -c "^SKIP")
        pass=$((pass + np)); fail=$((fail + nf)); skip=$((skip + ns))
        if [ $rc -ne 0 ] && [ "$nf" -eq 0 ]; then bad "torch_check.py exited $rc"; echo "$out" | tail -8; fi
    else
        echo "SKIP torch cross-checks: torch with CUDA does not import here"; skip=$((skip + 1))
    fi
else
    echo "== GPU part skipped: no CUDA device here ($ncases GPU cases and the PyTorch cross-checks not run)"
    skip=$((skip + ncases + 1))
fi

echo
if [ $skip -gt 0 ]; then echo "$pass passed, $fail failed, $skip skipped"; else echo "$pass passed, $fail failed"; fi
[ $fail -eq 0 ]
