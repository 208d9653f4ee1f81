/*
tt_embedding forward: pooled tensor-train (TT) embedding bags (FBTT-Embedding / TT-Rec), any number of
cores from 2 to 6, several tables, SUM pooling.

A TT embedding stores an E x D table as T small cores and rebuilds each looked-up row as a chain of small
matrix products (spec: shared/specs/tt_embedding.md, FBTT's layout):
  core t      : fp32 [tables, p_t, R_t * q_t * R_{t+1}], R_0 = R_T = 1, inner ranks R_1..R_{T-1};
                slice G_t[tbl][i] is R_t x q_t x R_{t+1}, element (k, a, k') at (k * q_t + a) * R_{t+1} + k'
  row index   : mixed radix, i_0 most significant: stride[t] = prod_{j>t} p_j, i_t = (idx / stride[t]) % p_t
  one row     : M_0 = G_0[i_0] as q_0 x R_1;  M_t = M_{t-1} (Q_{t-1} x R_t) . G_t[i_t] (R_t x q_t R_{t+1}),
                Q_t = q_0 ... q_t; M_{T-1} is the D = prod q values of the row, d = (a_0, ..., a_{T-1})
  bags        : indices int64 [nnz], offsets int64 [tables * B + 1] (table-major), out [tables, B, D] = the
                SUM over each bag's rows; an empty bag gives zeros

FLOPs per lookup (FBTT's batched-GEMM sizes): sum_{t=1}^{T-1} 2 * Q_{t-1} * R_t * q_t R_{t+1}
  default (FBTT's benchmark: p 200,220,250  q 4,4,4  ranks 32,32, B 512, L 20 -> 10,240 lookups):
  2*4*32*128 + 2*16*32*4 = 36,864 per lookup, 377.5 MFLOP per call.
Fewest bytes (each input read once, the output written once):
  bytes = 4 * sum_t tables * p_t * R_t q_t R_{t+1}   (cores: 958,720 floats = 3.83 MB at the default)
        + 8 * nnz (indices) + 8 * (tables * B + 1) (offsets) + tables * B * D * sizeof(floatX) (output)
  = 4.05 MB at the default: under 1 us of copy bandwidth. The op is bound by arithmetic and by on-chip
  traffic, not by HBM: at an FP32 FMA peak near 60 TFLOP/s the FLOP floor is about 6 us (a prediction, not a
  measurement). The traffic that matters is the gather of core slices per lookup: 128 + 4096 + 128 floats
  = 17 KB per lookup at the default, 174 MB per call if every lookup fetches its own slices from L2; a
  version that does so is bound by L2 bandwidth (tens of us), which is why versions 4+ group lookups by
  the index of the biggest core and fetch that slice once per group.
RESULT lines carry gflops= and pct_fma= (against the FMA peak measured in the same process) and
us_per_lookup= (time / nnz).

Element type: the cores and every chain product stay fp32 in both builds; the bf16 build (-DENABLE_BF16)
writes the pooled output as bf16 (rounded once, at the end). Checks are against a double-precision chain.

Versions. "measured": H200, 2026-11-29, scripts/gpu_check.sh, median ms at the best block size, FBTT's
default unless named (every RESULT line is in results/h200.md and results/logs/). Version 6's prediction is
kept beside its measurement, as a lesson in what the counts missed.
  1  naive: one thread per (bag, output element); for each lookup of its bag, the explicit sum over every
     rank tuple (k_1..k_{T-1}) of the product of T core elements (an odometer over the tuples that keeps
     the prefix products): prod(R_1..R_{T-1}) terms per element. No atomics: deterministic.
     measured: 5.687 ms (66 GFLOP/s).
  2  FBTT's pipeline (the library baseline, in our own code): FBTT's forward takes a bag id per lookup; one
     kernel derives them from the offsets inside the timed call; then per chunk of
     1000 lookups (--chunk) a kernel that fills the A/B/C pointer arrays of every chain step, one
     cublasGemmBatchedEx per step (fp32 compute), and a warp-per-segment reduce of the last buffer into the
     pooled output. Workspace (pointer arrays, step buffers, cuBLAS handle) allocated once, outside timing.
     FBTT stops at 4 cores; this generalizes its pointer kernel to T = 2..6.
     measured: 0.396 ms; Zipf 1.15 0.375; 4-core 0.444; 5-core 0.608; B=4096 2.83.
  3  fused, a bag per block: each warp runs the whole chain of one lookup at a time (lookups of the bag
     dealt round-robin to the warps), intermediates in warp-private shared memory, each lane computing a
     register tile of (rows x 4 columns) with float4 loads of the core slice; the last step accumulates into
     the warp's pooled row; the block adds its warps' rows in a fixed order and writes the bag once. One
     kernel, no atomics, deterministic. Every lookup still fetches its slices from L2 (L2-bound).
     measured: 0.0451 ms (block 256; 8.4 TFLOP/s, 14.7% of the measured FMA peak 56.9 TFLOP/s; 8.8x version
     2, short of the 10x target); Zipf 0.0531; 4-core 0.0568; 5-core 0.118; B=4096 0.246. A two-point fit of
     the default shape (B=512 and 4096; derived, not a separate measurement): 16.4 us + 2.80 ns per lookup.
     At B=4096 its gathers move 81,920 x 17 KB in 0.246 ms = 5.8 TB/s, the L2 limit; the 16 us on top at
     B=512 is most likely latency (each warp runs ~2.5 chains in series, each waiting on L2 every 8 k-steps).
  4  grouped by the heavy core(s): lookups sorted by (table, index of the biggest core [and of the second
     biggest when groups stay >= 8 lookups]) with CUB's radix sort on a 32-bit key; a block takes a window
     of 4 lookups per warp of the sorted order, loads each group's heavy slice(s) into shared memory once,
     and its warps run the chains against shared memory; exact duplicates within a window (Zipf's hot rows)
     are computed once. Rows go to a per-lookup buffer (each lookup written by exactly one warp) and a
     second kernel sums each bag in lookup order: no float atomics, deterministic. L2 traffic drops from
     17 KB to about 2 KB per lookup at the default (cores 0 and 2, plus a 16 KB core-1 slice per run of ~15
     lookups); the price is ~6 launches (keys, CUB's 3-4, chains, pool).
     measured: 0.0823 ms (block 128); Zipf 0.0939; 4-core 0.106; 5-core 0.174; B=4096 0.318. Two-point fit:
     48.6 us + 3.29 ns per lookup; most likely the sort's launches and each window's serial L2 round trips (indices
     through the permutation, the slice, then per lookup core 0 and core 2 from L2 inside the k loops) cost
     more than the 15 KB per lookup of L2 traffic that grouping saves, and per lookup it is no faster than
     version 3 (warp engine: 5 loads per 16 FMAs, one lookup at a time).
  5  version 4 on tensor cores: the heavy core's step, 89% of the FLOPs at the default, becomes one GEMM per
     run of equal keys, [lookups x Q_{h-1} rows] x [R_h x q_h R_{h+1}] from the shared slice, in TF32
     mma.sync.m16n8k8 tiles (16 mma per lookup at the default instead of 512 FMAs per lane); the steps before
     and after it stay on the FP32 warp engine. Needs R_h and q_h R_{h+1} multiples of 8 (skipped otherwise).
     TF32 (10-bit mantissa) is checked against a looser, stated tolerance: 2e-2 absolute + 1e-2 relative
     (see TT_EMBEDDING_FORWARD_TF32_ATOL); the CPU test runs its arithmetic at the default and finds a largest
     pooled error of 5.7e-3 (an emulation, not a GPU measurement).
     measured: 0.138 ms (block 256); Zipf 0.1435; 4-core 0.153; 5-core 0.308; B=4096 0.543: its per-run
     phases (three barriers per run of ~15 lookups) and version 4's launches outweigh the mma's savings.
  6  bucketed by the heavy core(s) with no library sort, two lookups per warp, three launches:
     (a) plan: ONE block of 1024 threads computes each lookup's key (table and the digit(s) of version 4's
         grouped cores), counts the keys in shared memory (integer atomics), scans the counts, cuts each key's
         lookups into items of at most C = 2 x (warps per block) and scatters the lookups (a counting sort:
         per position the lookup and its index; items {start, count, key}; the unused items of the grid
         marked empty);
     (b) chains: a block per item issues all of its global loads first (cp.async of the item's grouped
         slice(s) and of every lookup's other slices, core 0 included), finds exact duplicates (Zipf's hot
         rows: computed once), and each warp runs the chains of two lookups from shared memory only: a grouped
         core's step is one step of both lookups (every float4 of the slice feeds 2 x 16 FMAs; M_0's rows read
         as float4 along k when R_1 % 4 == 0), the other steps one lookup at a time (version 3's lane tiles);
         each row goes to the per-lookup buffer of every lookup with its index;
     (c) version 4's pooling kernel sums each bag in lookup order.
     Deterministic, no float atomics, and independent of the block size: a row is the same fmaf chain as in
     version 3's engine wherever it is computed (the CPU test compares rows bitwise), the integer atomics
     only decide where a lookup sits inside its key's range, bags are summed in lookup order; main checks
     that every block size gives bitwise the same output.
     Counts at the default, block 256 (C = 16): ~750 items (Poisson(46.5) lookups per key; 741 in the CPU
     test's draw); L2 -> SM traffic 741 x 16 KB (core-1 slices) + 10,240 x 1 KB (cores 0 and 2) + the rows written and re-read (2 x 2.6
     MB) = ~28 MB, a sixth of version 3's 174 MB; the FP32 work is version 3's 377.5 MFLOP (6.6 us at the
     measured FMA peak). Compiled for sm_90: the heavy step's inner loop is 128 FFMA in 158 instructions,
     step 2's 8 FFMA in 31; 88 registers (so blocks of up to 512 threads), no spills; 69 KB of shared memory
     per 256-thread block (2 blocks per SM, by registers; 5 of 128 threads). The planner: 64 registers, 9 KB
     of shared memory at the default (one counter per key).
     predicted (not measured): plan ~4 us (10,240 keys x ~60 instructions on one SM, one batch of loads per
     pass), chains ~8-12 us, pooling ~2-3 us, launch gaps ~1-2 us: 0.015-0.025 ms at the default, 16-26x
     version 2 (target >= 10x) and about 2x faster than version 3. Zipf 1.15: no slower (duplicates computed
     once); B=4096: the one-block plan grows to ~15 us, the chains ~8x: ~0.1 ms against version 3's 0.246;
     4-core (cores 1 and 2 shared, ~900 items) ~0.03 ms; 5-core (cores 3 and 2 shared) ~0.05 ms.
     measured (a later run the same day, versions 1-5 re-measured within 2% of the numbers above): 0.0885 ms
     (block 128; version 3 in that run 0.0444); Zipf 0.0782; 4-core 0.1075; 5-core 0.161; B=4096 0.459.
     The prediction missed by 4x: it was checked by counting L2 bytes and FMAs, but the measured time follows
     the serial latencies (one planner block that every item waits for; each item's cp.async batch, then two
     chains per warp, then the pooling launch), which the counts do not see. Version 3, with no planning at
     all and 20 lookups per block in flight, stays the fastest.
     Not done (a next step if the plan or the pooling shows in the measurement): pooling fused into the
     chain kernel (the last writer of a bag sums it, with a per-bag arrival counter), and the plan split over
     more than one SM for large batches. ncu (scripts/profile.sh, second session): the planner is 44 us of
     one block, the chain kernel 40 us, the pooling 4 us.
  Versions 7-9 (second session of 2026-11-29) are written for three cores (T = 3, q_0 = q_2 = 4, R_2 a power
  of two, q_1 R_2 <= 128: FBTT's default family; other shapes are skipped with the reason). Their numbers
  below are one run of scripts/gpu_check.sh --only tt_embedding (results/logs/2026-11-29_s2_bench_tt.log);
  versions 2 and 3 in that run: 0.3799 and 0.0446 ms.
  7  a different split of the lookup over the lanes: step 1 row by row of G_1 (each warp load 512 contiguous
     bytes, each lane 4 columns of M_1 for all q_0 rows, M_0's column broadcast from a transposed copy in
     shared memory), step 2 as a per-lane partial over its 4 values of k_2, and the partials summed over the
     warp's lookups of the bag before any shuffle (they are linear). ncu: ~1,500 warp instructions per lookup
     (version 3: ~1,900). measured: 0.0527 ms (block 128); Zipf 0.0672; B=4096 0.334. Slower: ncu shows it
     issuing on 29% of cycles with the L2 at 29% of its throughput and ~100 registers (4 warps per scheduler):
     each batch of 8 G_1 rows is an L2 round trip the warp waits for, four per lookup, after the index and
     G_0's round trips.
  8  version 7's lanes fed by a per-warp ring of 2 stages of cp.async copies (G_1 whole, G_0 transposed in
     4-byte pieces, G_2), the next lookup's copies in flight while this one computes, the ring running across
     the block's bags. measured: 0.0478 ms (block 32); Zipf 0.0481; B=4096 0.286. 3 stages (sweep script):
     0.0477 / 0.0477 / 0.350. Each stage is 17 KB, so 4-6 warps per SM: the latency is hidden, the
     per-warp issue rate is not.
  9  grouped without a sort: persistent blocks take items (key of core 1, segment of the table's lookups)
     from a global counter, read every index of the segment (division-free digits), list the matching lookups,
     compute equal indices once (Zipf's hot rows) against ONE shared copy of the G_1 slice, and write rows to a
     per-lookup buffer that version 4's pooling kernel sums in lookup order. L2 -> SM traffic by count falls
     from 174 MB (137 MB in ncu for version 3) to ~45 MB (660 G_1 slices 11 MB, index scans 18 MB, G_0/G_2
     10 MB, rows written and re-read 5 MB). Deterministic at any block size (checked). measured: 0.0512 ms
     (block 256); Zipf 0.0406 (the fastest there: 1.3x version 3); B=4096 0.2341 (the fastest there). ncu:
     the chain kernel is 47 us with 16.9M warp instructions (1,650 per lookup: the lane function ~900, the
     segment scans ~200, reductions, staging), 0.34 issued per scheduler per cycle; the pooling 4.3 us. TARGET 8 / 32 lookups per
     item (sweep script): 0.0492 / 0.0493 at uniform, 0.0363 / 0.0429 at Zipf, 0.255 / 0.231 at B=4096.
  The lesson of 7-9: at B=512 every design lands at 45-53 us whether it moves 137 MB through L2 (version 3)
  or ~45 MB (version 9): it is the issue rate per lookup chain (latency-bound warps doing ~900-1,900
  instructions per lookup), not L2 bandwidth, that sets the time. The next step is fewer instructions per
  lookup: the heavy step on tensor cores in 3xTF32 (fp32-accurate), or two lookups per warp sharing the G_1
  reads in version 9 (halves the shared-memory loads per FMA).
  Versions 10-12 (third session) keep version 9's items and are compiled for q = 4,4,4 with ranks 32,32
  (FBTT's default) or 16,16. Their numbers: one run of scripts/gpu_check.sh --only tt_embedding
  (results/logs/2026-11-29_s3_bench_tt.log; versions 2 and 3 in it: 0.3811 and 0.0457 ms); knobs and ncu from
  scripts/tt_forward_sweep.sh 10-12 (results/logs/2026-11-29_s3_tt_forward_sweep.txt, a later run).
  10 version 9 with the chain of four unique lookups at a time on tensor cores: step 1 as one 16-row tile of
     mma.sync.m16n8k8 in 3xTF32 (split hi + lo, three mma per tile and k-step: FP32 accuracy, checked at the
     FP32 tolerance), G_1's slice split and stored in fragment order once per item, step 2 as FP32 FMAs on the
     accumulators in registers. measured: 0.0465 ms (block 128); Zipf 0.0491; B=4096 0.230. ncu (first
     build, before the register cap): 9.6M warp instructions against version 9's 16.9M, in the same 47 us,
     with 12% of the warp slots active: the chain was not what held an item up.
  11 version 10 with the item's serial path cut: a first small kernel writes every lookup's i_1 as uint16
     (computed once instead of by all 220 keys), and an item scans them in one pass of 16-byte loads (a
     prefix count in position order, no atomics; a pass that overfills the list restarts at the first entry
     that did not fit); equal indices found with a shared-memory hash set (O(m), versions 9-10 compare all
     pairs); 64 lookups per item at uniform indices, so the 220 items of the default run in one wave on 2
     blocks of 256 threads per SM; the chain and pooling kernels launched with programmatic dependent launch
     (PDL: their launch and start-up overlap the kernel before). measured: 0.0333 ms (block 256; 11.3
     TFLOP/s, 19.9% of the FMA peak); Zipf 0.0428; B=4096 0.146 (the fastest there: 19.4x version 2).
     Sweep: without PDL 0.0352 / 0.0450 / 0.149; 16 or 32 lookups per item 0.0408 / 0.0389 at uniform.
     ncu: digits 2.9 us, chains 28.7 us (7.3M warp instructions, 21% of warp slots active, 0.32 issued per
     scheduler per cycle; stalls per issue: L2 loads 2.1, fixed-latency dependencies 2.0, barriers 1.8,
     shared memory 1.7), pooling 4.4 us. The time is now one item's path: its scan, the copy of G_1, the split,
     then ~2 tiles per warp (Poisson keys of up to ~70 lookups set the wave's end).
  12 version 11 with items sized by count: the digit kernel also counts each key's lookups, every block
     builds the item table (ceil(count / 48) items per key, none for a key without lookups) in shared memory,
     and the last block to have read the counts zeroes them. Zipf's hot keys no longer make one long item.
     measured: Zipf 0.0319 ms (block 128; the fastest there, 11.9x version 2); uniform 0.0422; B=4096 0.172.
     Uniform pays the counting (atomics on 220 counters) and the table, and its ~300 items are more than
     the 264 resident blocks. Sweep: 64 per item 0.0369 / 0.0326 / 0.164; 32 per item 0.0422 / 0.0382 / 0.182.
Block sizes: versions 3-9 run 32..1024 threads (filtered by their shared memory and the compiled kernel's
register budget, read with cudaFuncGetAttributes); versions 10-12 32..256 (__launch_bounds__(256, 2): 128
registers, two blocks per SM; ptxas reports 4-20 bytes of spill stores); version 1 runs 64 and 256; version 2's block is that of
its small helper kernels (256); version 6's planner always runs one block of 1024. Versions 3-5, 7 and 8 are
deterministic for a given block size; versions 6 and 9-12 for any (main compares every block size bitwise).
Measured: version 2 pays ~46 launches (11 chunks x (pointers + 2 GEMMs + reduce)); version 3 is bound by the
latency of its chains; versions 4-10 were slower than version 3 at the default (9 faster at Zipf 1.15 and at
B=4096); version 11 is the fastest at the default and at B=4096, version 12 at Zipf 1.15. The default KERNEL
is 11 (3 runs every shape). Against the targets (third session's run): version 11 is 11.4x version 2 in the
same run (0.0333 against 0.3811 ms; target 10x: met), 16.4x faster than PyTorch's bmm chain (0.5466 ms, same
run), and 4.3x the time per lookup of the dense embedding-bag forward on an 11,000,000 x 64 table (0.0077 ms,
embedding_bag_forward version 5, first session) at 734x less memory. The 4-core and 5-core shapes still
run best on version 3 (0.0572, 0.118 ms).

Why the 4-core bench shape --p 20,22,25,20 --q 4,2,2,4 --ranks 32,32,32 is sensible: same D = 64 and rank
32 as FBTT's default, so per-step costs compare; T = 4 is FBTT's longest supported chain; E = 220,000 rows
is a mid-size table with near-balanced factors; its two middle cores are equally heavy (2048 floats each),
so grouping by one core is not enough (version 4 groups by both); 53,248 FLOPs per lookup.
The 5-core shape --p 20,20,25,25,40 --q 2,2,2,2,4 --ranks 8,16,32,64 is TT-Rec's rank schedule that FBTT's
users could not run (FBTT issue #10): growing ranks put the weight on the fourth core; 82,944 FLOPs/lookup.

Peers: scripts/peers/tt_embedding.py (the PyTorch gather + torch.bmm chain + index_add_ forward, its
autograd forward+backward and +SGD step, and dense nn.EmbeddingBag 11M x 64 with sparse gradients, on this
op's own inputs).

Compile and run:
  make tt_embedding_forward        && ./tt_embedding_forward all
  make tt_embedding_forward_bf16   && ./tt_embedding_forward_bf16 all --check-only
  ./tt_embedding_forward all --p 20,22,25,20 --q 4,2,2,4 --ranks 32,32,32
*/
#include "common.h"
#include <cub/cub.cuh>

// Tolerances: a pooled value is a sum of L rows of O(1) (the cores are scaled so that each row element has
// unit variance); fp32 chains of dot products of length R differ from the double chain by a few 1e-7 per
// step, so 1e-4 absolute and relative leaves a wide margin while any indexing bug gives O(1) errors. bf16
// adds one rounding of the output (2^-9 relative).
// Version 5 rounds both operands of its heavy step to TF32 (10 mantissa bits, 2^-11 relative): each element
// of M_h is then off by about 4e-4 of its size (errors of 2 x 32 roundings in a 32-term dot product add up
// like a random walk, as the terms do), a row element by as much, a pooled sum of L = 20 rows by about
// 2e-3, and the largest of 32,768 pooled values by about 1e-2: its check uses 2e-2 absolute + 1e-2
// relative (stated here; the FP32 versions keep 1e-4). The CPU test runs version 5's arithmetic (TF32
// rounding included) on FBTT's default and checks that its error stays well inside this.
#ifdef ENABLE_BF16
static const float TT_EMBEDDING_FORWARD_ATOL = 1e-4f, TT_EMBEDDING_FORWARD_RTOL = 5e-3f;
#else
static const float TT_EMBEDDING_FORWARD_ATOL = 1e-4f, TT_EMBEDDING_FORWARD_RTOL = 1e-4f;
#endif
static const float TT_EMBEDDING_FORWARD_TF32_ATOL = 2e-2f, TT_EMBEDDING_FORWARD_TF32_RTOL = 1e-2f;

#define TT_EMBEDDING_FORWARD_MAX_CORES 6
#define TT_EMBEDDING_FORWARD_NUM_KERNELS 12
// version 4: lookups per warp in a block's window of the sorted order
#define TT_EMBEDDING_FORWARD_LOOKUPS_PER_WARP 4
// version 1 is skipped when its explicit sum would exceed this many terms (minutes of GPU time)
#define TT_EMBEDDING_FORWARD_MAX_NAIVE_TERMS (1ll << 35)
// unroll hints in host-callable device code (the host compiler would warn on #pragma unroll)
#ifdef __CUDA_ARCH__
#define TT_EMBEDDING_FORWARD_UNROLL _Pragma("unroll")
#define TT_EMBEDDING_FORWARD_UNROLL4 _Pragma("unroll 4")
#else
#define TT_EMBEDDING_FORWARD_UNROLL
#define TT_EMBEDDING_FORWARD_UNROLL4
#endif

// ----------------------------------------------------------------------------------------------
// shape: everything a kernel needs to know about the chain, computed once on the host

struct TtEmbeddingForwardShape {
    int T = 0, tables = 0, B = 0, L = 0, D = 0;
    int64_t E = 0, prod_p = 0, nnz = 0;
    int p[TT_EMBEDDING_FORWARD_MAX_CORES] = {}, q[TT_EMBEDDING_FORWARD_MAX_CORES] = {};
    int R[TT_EMBEDDING_FORWARD_MAX_CORES + 1] = {};        // R[0] = R[T] = 1
    int Q[TT_EMBEDDING_FORWARD_MAX_CORES] = {};            // Q[t] = q_0 * ... * q_t
    int64_t stride[TT_EMBEDDING_FORWARD_MAX_CORES] = {};   // prod_{j>t} p_j
    int64_t slice[TT_EMBEDDING_FORWARD_MAX_CORES] = {};    // R_t * q_t * R_{t+1} floats
    // chain step t = 1..T-1: (m x k) . (k x n) with m = Q[t-1], k = R[t], n = q[t] * R[t+1]; each lane of a
    // warp computes tiles of rt rows x cw columns (rt | m, cw | n), chosen on the host (see make_shape)
    int step_m[TT_EMBEDDING_FORWARD_MAX_CORES] = {}, step_k[TT_EMBEDDING_FORWARD_MAX_CORES] = {};
    int step_n[TT_EMBEDDING_FORWARD_MAX_CORES] = {};
    int step_rt[TT_EMBEDDING_FORWARD_MAX_CORES] = {}, step_cw[TT_EMBEDDING_FORWARD_MAX_CORES] = {};
    // row stride of M_t as the next step reads it (Q_t rows of R_{t+1}): ld[0] = R_1 (M_0 is the core slice);
    // for the intermediates t = 1..T-2, R_{t+1} rounded up to odd, so that lanes reading different rows at the
    // same k hit different shared-memory banks; ld[T-1] = 1 (the output row)
    int ld[TT_EMBEDDING_FORWARD_MAX_CORES] = {};
    int max_mid = 0;   // largest intermediate Q_t * ld[t], t = 1..T-2 (0 when T = 2: M_0 is read from the core)
    int mid_pad = 0, D_pad = 0;   // both rounded up to 4 floats (16-byte aligned shared buffers)
    // the chain's ping-pong buffers: M_t for odd t goes to buffer 0, for even t to buffer 1; each sized for the
    // largest M_t it holds (rounded up to 4 floats; 0 when it holds none: T = 3 needs only buffer 0)
    int buf_pad[2] = {};
};

// the device pointers of the T cores (each [tables, p_t, slice_t])
struct TtEmbeddingForwardCores {
    const float* c[TT_EMBEDDING_FORWARD_MAX_CORES];
};

inline int64_t tt_embedding_forward_round4(int64_t x) { return (x + 3) / 4 * 4; }

// Builds the shape from the command-line values and validates them; "" = fine, else the broken
// constraint. E = 0 means prod p, D = 0 means prod q.
inline std::string tt_embedding_forward_make_shape(TtEmbeddingForwardShape& s, const std::vector<int>& p,
                                                   const std::vector<int>& q, const std::vector<int>& ranks,
                                                   int64_t E, int D, int tables, int B, int L, double alpha) {
    char buf[256];
    const int T = (int)p.size();
    if (T < 2 || T > TT_EMBEDDING_FORWARD_MAX_CORES) {
        snprintf(buf, sizeof buf, "the number of cores T = len(p) (%d) must be 2..6", T);
        return buf;
    }
    if ((int)q.size() != T) {
        snprintf(buf, sizeof buf, "len(q) (%d) must equal len(p) = T (%d)", (int)q.size(), T);
        return buf;
    }
    if ((int)ranks.size() != T - 1) {
        snprintf(buf, sizeof buf, "ranks has %d entries; T - 1 = %d inner ranks are needed (len(p) = %d)",
                 (int)ranks.size(), T - 1, T);
        return buf;
    }
    for (int t = 0; t < T; t++) {
        if (p[t] < 1 || q[t] < 1) {
            snprintf(buf, sizeof buf, "p and q entries must be >= 1 (p[%d] = %d, q[%d] = %d)", t, p[t], t, q[t]);
            return buf;
        }
    }
    for (int t = 0; t < T - 1; t++) {
        if (ranks[t] < 1) {
            snprintf(buf, sizeof buf, "ranks entries must be >= 1 (ranks[%d] = %d)", t, ranks[t]);
            return buf;
        }
    }
    if (tables < 1 || B < 1 || L < 0) {
        snprintf(buf, sizeof buf, "tables and B must be >= 1 and L >= 0 (got tables %d, B %d, L %d)", tables, B, L);
        return buf;
    }
    const int64_t limit = (int64_t)1 << 24;
    int64_t prod_p = 1, prod_q = 1;
    for (int t = 0; t < T; t++) {
        if (prod_p > ((int64_t)1 << 62) / p[t]) return "prod p overflows 2^62";
        prod_p *= p[t];
        prod_q *= q[t];
        if (prod_q > limit) return "prod q (the embedding dimension) must be <= 2^24";
    }
    if (E == 0) E = prod_p;
    if (D == 0) D = (int)prod_q;
    if (E < 1) {
        snprintf(buf, sizeof buf, "E (%lld) must be >= 1", (long long)E);
        return buf;
    }
    if (prod_p < E) {
        snprintf(buf, sizeof buf, "prod p (%lld) must be >= E (%lld)", (long long)prod_p, (long long)E);
        return buf;
    }
    if (prod_q != D) {
        snprintf(buf, sizeof buf, "prod q (%lld) must equal D (%d)", (long long)prod_q, D);
        return buf;
    }
    const int64_t nbags = (int64_t)tables * B, nnz = nbags * L;
    if (nbags > INT32_MAX || nnz > INT32_MAX) {
        snprintf(buf, sizeof buf, "tables*B (%lld) and tables*B*L (%lld) must fit in 32 bits", (long long)nbags,
                 (long long)nnz);
        return buf;
    }
    if (alpha > 1.0 && E < L) {
        snprintf(buf, sizeof buf, "Zipf bags (alpha %g > 1) need E (%lld) >= L (%d) to draw L distinct rows", alpha,
                 (long long)E, L);
        return buf;
    }
    s = TtEmbeddingForwardShape();
    s.T = T; s.tables = tables; s.B = B; s.L = L; s.D = D; s.E = E; s.prod_p = prod_p; s.nnz = nnz;
    s.R[0] = 1; s.R[T] = 1;
    for (int t = 0; t < T; t++) { s.p[t] = p[t]; s.q[t] = q[t]; }
    for (int t = 1; t < T; t++) s.R[t] = ranks[t - 1];
    int64_t st = 1;
    for (int t = T - 1; t >= 0; t--) { s.stride[t] = st; st *= p[t]; }
    int64_t Qt = 1;
    for (int t = 0; t < T; t++) {
        Qt *= q[t];
        s.Q[t] = (int)Qt;
        s.slice[t] = (int64_t)s.R[t] * q[t] * s.R[t + 1];
        if (s.slice[t] > limit) {
            snprintf(buf, sizeof buf, "core %d slice R_%d*q_%d*R_%d (%lld) must be <= 2^24", t, t, t, t + 1, (long long)s.slice[t]);
            return buf;
        }
        if (Qt * s.R[t + 1] > limit) {
            snprintf(buf, sizeof buf, "chain intermediate Q_%d*R_%d (%lld) must be <= 2^24", t, t + 1, (long long)(Qt * s.R[t + 1]));
            return buf;
        }
        s.ld[t] = (t == 0) ? s.R[1] : (t == T - 1 ? 1 : (s.R[t + 1] | 1));
        if (t >= 1 && t <= T - 2) {
            s.max_mid = std::max<int>(s.max_mid, (int)(Qt * s.ld[t]));
            s.buf_pad[(t & 1) ? 0 : 1] = std::max<int>(s.buf_pad[(t & 1) ? 0 : 1], (int)tt_embedding_forward_round4(Qt * s.ld[t]));
        }
    }
    s.mid_pad = (int)tt_embedding_forward_round4(s.max_mid);
    s.D_pad = (int)tt_embedding_forward_round4(D);
    // lane tiles per step: the fewest FMAs per lane (ceil(tasks / 32) * rt * cw per k), ties to the biggest
    // tile (fewer loads per FMA), and (1 x 4) before (4 x 1) (one float4 load of the slice, one of M)
    static const int tiles[6][2] = {{4, 4}, {2, 4}, {1, 4}, {4, 1}, {2, 1}, {1, 1}};
    for (int t = 1; t < T; t++) {
        const int m = s.Q[t - 1], k = s.R[t], n = q[t] * s.R[t + 1];
        s.step_m[t] = m; s.step_k[t] = k; s.step_n[t] = n;
        int64_t best = INT64_MAX;
        for (const auto& tile : tiles) {
            const int rt = tile[0], cw = tile[1];
            if (m % rt != 0 || n % cw != 0) continue;
            const int64_t tasks = (int64_t)(m / rt) * (n / cw), cost = (tasks + 31) / 32 * rt * cw;
            if (cost < best) { best = cost; s.step_rt[t] = rt; s.step_cw[t] = cw; }
        }
    }
    return "";
}

// Bags and indices as an op consumes them: offsets[0] = 0, non-decreasing, offsets[num_bags] = nnz, every
// index in [0, E). "" = fine.
inline std::string tt_embedding_forward_validate_bags(const std::vector<int64_t>& indices,
                                                      const std::vector<int64_t>& offsets, int64_t num_bags, int64_t E) {
    char buf[256];
    if ((int64_t)offsets.size() != num_bags + 1) {
        snprintf(buf, sizeof buf, "offsets has %zu entries; tables*B + 1 = %lld needed", offsets.size(), (long long)(num_bags + 1));
        return buf;
    }
    if (offsets[0] != 0) {
        snprintf(buf, sizeof buf, "offsets[0] (%lld) must be 0", (long long)offsets[0]);
        return buf;
    }
    for (int64_t b = 0; b < num_bags; b++) {
        if (offsets[b + 1] < offsets[b]) {
            snprintf(buf, sizeof buf, "offsets must be non-decreasing (offsets[%lld] = %lld > offsets[%lld] = %lld)",
                     (long long)b, (long long)offsets[b], (long long)(b + 1), (long long)offsets[b + 1]);
            return buf;
        }
    }
    if (offsets[num_bags] != (int64_t)indices.size()) {
        snprintf(buf, sizeof buf, "offsets[tables*B] (%lld) must equal the number of indices (%zu)",
                 (long long)offsets[num_bags], indices.size());
        return buf;
    }
    for (size_t i = 0; i < indices.size(); i++) {
        if (indices[i] < 0 || indices[i] >= E) {
            snprintf(buf, sizeof buf, "index %lld at lookup %zu is out of range: every index must be >= 0 and < E (%lld)",
                     (long long)indices[i], i, (long long)E);
            return buf;
        }
    }
    return "";
}

// FLOPs of one lookup's chain (FBTT's batched-GEMM sizes)
inline double tt_embedding_forward_flops_per_lookup(const TtEmbeddingForwardShape& s) {
    double f = 0.0;
    for (int t = 1; t < s.T; t++) f += 2.0 * s.step_m[t] * s.step_k[t] * s.step_n[t];
    return f;
}

// floats in all cores of all tables
inline int64_t tt_embedding_forward_core_floats(const TtEmbeddingForwardShape& s) {
    int64_t n = 0;
    for (int t = 0; t < s.T; t++) n += (int64_t)s.tables * s.p[t] * s.slice[t];
    return n;
}

// the fewest bytes of one call (see the header)
inline double tt_embedding_forward_bytes(const TtEmbeddingForwardShape& s) {
    return 4.0 * (double)tt_embedding_forward_core_floats(s) + 8.0 * (double)s.nnz +
           8.0 * ((double)s.tables * s.B + 1) + (double)s.tables * s.B * s.D * sizeof(floatX);
}

// Offsets of tables*B bags over nnz = tables*B*L lookups: L each, or (ragged) cut at random points with
// the first bag of every table empty, so that bags of every size from 0 up appear.
inline std::vector<int64_t> tt_embedding_forward_make_offsets(const TtEmbeddingForwardShape& s, bool ragged, Rng& rng) {
    const int64_t nbags = (int64_t)s.tables * s.B;
    std::vector<int64_t> off((size_t)nbags + 1);
    if (!ragged) {
        for (int64_t b = 0; b <= nbags; b++) off[b] = b * s.L;
        return off;
    }
    for (int64_t b = 1; b < nbags; b++) off[b] = rng.randint(0, s.nnz + 1);
    std::sort(off.begin() + 1, off.end() - 1);
    off[0] = 0;
    off[nbags] = s.nnz;
    for (int tbl = 0; tbl < s.tables; tbl++) {        // bag 0 of each table empty: it ends where it starts
        int64_t b = (int64_t)tbl * s.B;
        if (b + 1 < nbags) off[b + 1] = off[b];
    }
    return off;
}

// digit t of a row index: (idx / stride) % p, in 32 bits when the values allow (the common case)
__host__ __device__ inline int tt_embedding_forward_digit(int64_t idx, int64_t stride, int p) {
    uint64_t qv;
    if ((((uint64_t)idx | (uint64_t)stride) >> 32) == 0) qv = (uint32_t)idx / (uint32_t)stride;
    else qv = (uint64_t)idx / (uint64_t)stride;
    if ((qv >> 32) == 0) return (int)((uint32_t)qv % (uint32_t)p);
    return (int)(qv % (uint64_t)p);
}

// ----------------------------------------------------------------------------------------------
// CPU reference: the chain of the spec, in double

// one row (D values) of table tbl; cores[t] points at core t ([tables, p_t, slice_t])
inline void tt_embedding_forward_row_cpu(double* row, const float* const* cores, const TtEmbeddingForwardShape& s,
                                         int tbl, int64_t idx) {
    std::vector<double> cur, nxt;
    auto slice = [&](int t) {
        return cores[t] + ((int64_t)tbl * s.p[t] + tt_embedding_forward_digit(idx, s.stride[t], s.p[t])) * s.slice[t];
    };
    const float* g0 = slice(0);
    cur.assign(g0, g0 + s.slice[0]);                    // M_0: q_0 x R_1
    for (int t = 1; t < s.T; t++) {
        const int m = s.step_m[t], k = s.step_k[t], n = s.step_n[t];
        const float* G = slice(t);
        nxt.assign((size_t)m * n, 0.0);
        for (int i = 0; i < m; i++)
            for (int kk = 0; kk < k; kk++) {
                const double a = cur[(size_t)i * k + kk];
                const float* g = G + (int64_t)kk * n;
                double* o = nxt.data() + (size_t)i * n;
                for (int j = 0; j < n; j++) o[j] += a * (double)g[j];
            }
        cur.swap(nxt);
    }
    for (int d = 0; d < s.D; d++) row[d] = cur[d];
}

// out [tables, B, D]: every bag's rows summed in double, rounded once to float
inline void tt_embedding_forward_cpu(float* out, const float* const* cores, const int64_t* indices,
                                     const int64_t* offsets, const TtEmbeddingForwardShape& s) {
    std::vector<double> row(s.D), acc(s.D);
    for (int64_t bag = 0; bag < (int64_t)s.tables * s.B; bag++) {
        const int tbl = (int)(bag / s.B);
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t n = offsets[bag]; n < offsets[bag + 1]; n++) {
            tt_embedding_forward_row_cpu(row.data(), cores, s, tbl, indices[n]);
            for (int d = 0; d < s.D; d++) acc[d] += row[d];
        }
        for (int d = 0; d < s.D; d++) out[bag * s.D + d] = (float)acc[d];
    }
}

// ----------------------------------------------------------------------------------------------
// GPU kernels

// address of the slice of core t for (table, row index) (host-callable: the CPU tests use it too)
__host__ __device__ __forceinline__ const float* tt_embedding_forward_slice_ptr(const TtEmbeddingForwardCores& cores,
                                                                       const TtEmbeddingForwardShape& s,
                                                                       int tbl, int64_t idx, int t) {
    return cores.c[t] + ((int64_t)tbl * s.p[t] + tt_embedding_forward_digit(idx, s.stride[t], s.p[t])) * s.slice[t];
}

// The explicit sum of one row element: g[t] points at element (0, a_t, 0) of core t's slice, so that
// element (k, a_t, k') is g[t][k * row_len[t] + k'] (row_len[t] = q_t R_{t+1}). Sums the product of the T
// factors over every rank tuple (k_1..k_{T-1}), walking the tuples like an odometer (k_{T-1} fastest) and
// recomputing only the prefix products that the last increment changed. Host-callable (tested on the CPU).
__host__ __device__ inline float tt_embedding_forward_explicit_sum(const float* const* g, const int* row_len, const int* R, int T) {
    int k[TT_EMBEDDING_FORWARD_MAX_CORES + 1];
    for (int t = 0; t <= T; t++) k[t] = 0;              // k[0] = k[T] = 0 always (R_0 = R_T = 1)
    float pre[TT_EMBEDDING_FORWARD_MAX_CORES + 1];      // pre[t] = product of factors 0..t-1
    pre[0] = 1.0f;
    float sum = 0.0f;
    int from = 0;
    for (;;) {
        for (int u = from; u < T; u++) pre[u + 1] = pre[u] * g[u][k[u] * row_len[u] + k[u + 1]];
        sum += pre[T];
        int u = T - 1;                                  // advance the odometer k_{T-1} .. k_1
        while (u >= 1 && ++k[u] == R[u]) { k[u] = 0; u--; }
        if (u == 0) break;
        from = u - 1;                                   // factors u-1 .. T-1 read the changed k's
    }
    return sum;
}

// Version 1: one thread per (bag, output element d). d's digits (a_0..a_{T-1}) fix the middle index of
// every core; the thread adds, for each lookup of its bag, the explicit sum above: prod(R_1..R_{T-1})
// terms per element where the chain needs about sum_t R_t R_{t+1} / q. Slow by design: it is the spec's
// formula, run on the GPU, with nothing shared between threads.
__global__ void tt_embedding_forward_kernel1(floatX* __restrict__ out, const int64_t* __restrict__ indices,
                                             const int64_t* __restrict__ offsets,
                                             const __grid_constant__ TtEmbeddingForwardCores cores,
                                             const __grid_constant__ TtEmbeddingForwardShape s) {
    const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t nbags = (int64_t)s.tables * s.B;
    if (tid >= nbags * s.D) return;
    const int64_t bag = tid / s.D;
    const int d = (int)(tid - bag * s.D);
    const int tbl = (int)(bag / s.B);
    const int T = s.T;
    int a[TT_EMBEDDING_FORWARD_MAX_CORES];
    for (int t = T - 1, rem = d; t >= 0; t--) { a[t] = rem % s.q[t]; rem /= s.q[t]; }
    float pooled = 0.0f;
    for (int64_t n = offsets[bag]; n < offsets[bag + 1]; n++) {
        const int64_t idx = indices[n];
        // g[t] points at element (0, a_t, 0) of the slice; element (k, a_t, k') is g[t][k * q_t R_{t+1} + k']
        const float* g[TT_EMBEDDING_FORWARD_MAX_CORES];
        int row_len[TT_EMBEDDING_FORWARD_MAX_CORES];
        for (int t = 0; t < T; t++) {
            g[t] = tt_embedding_forward_slice_ptr(cores, s, tbl, idx, t) + a[t] * s.R[t + 1];
            row_len[t] = s.q[t] * s.R[t + 1];
        }
        pooled += tt_embedding_forward_explicit_sum(g, row_len, s.R, T);
    }
    out[tid] = from_float<floatX>(pooled);
}

// ---- version 2: FBTT's pipeline

// bag id of every lookup: the last bag whose offset is <= n (binary search over the offsets)
__global__ void tt_embedding_forward_kernel2_bag_ids(int* __restrict__ bag_of, const int64_t* __restrict__ offsets,
                                                     int64_t nbags, int64_t nnz) {
    const int64_t n = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= nnz) return;
    int64_t lo = 0, hi = nbags - 1;
    while (lo < hi) {
        const int64_t mid = (lo + hi + 1) / 2;
        if (offsets[mid] <= n) lo = mid; else hi = mid - 1;
    }
    bag_of[n] = (int)lo;
}

// The cuBLAS operands of lookup n (of N in the chunk) for every step t = 0..T-2: step t multiplies M_t (B
// operand: G_0's slice for t = 0, else step t-1's buffer row) by G_{t+1}'s slice (A operand) into step t's
// buffer row n (C), in cuBLAS's column-major view (see the launcher). Host-callable (tested on the CPU).
__host__ __device__ inline void tt_embedding_forward_fill_pointers(const void** a_ptr, const void** b_ptr, void** c_ptr,
                                                                   int n, int N, int tbl, int64_t idx,
                                                                   const TtEmbeddingForwardCores& cores,
                                                                   const TtEmbeddingForwardShape& s,
                                                                   const TtEmbeddingForwardCores& bufs) {
    const float* prev = tt_embedding_forward_slice_ptr(cores, s, tbl, idx, 0);
    for (int t = 0; t + 1 < s.T; t++) {
        float* buf = const_cast<float*>(bufs.c[t]) + (int64_t)n * s.Q[t + 1] * s.R[t + 2];
        a_ptr[(int64_t)t * N + n] = tt_embedding_forward_slice_ptr(cores, s, tbl, idx, t + 1);
        b_ptr[(int64_t)t * N + n] = prev;
        c_ptr[(int64_t)t * N + n] = buf;
        prev = buf;
    }
}

__global__ void tt_embedding_forward_kernel2_pointers(const void** __restrict__ a_ptr, const void** __restrict__ b_ptr,
                                                      void** __restrict__ c_ptr, const int64_t* __restrict__ indices,
                                                      const int* __restrict__ bag_of, int64_t start, int N,
                                                      const __grid_constant__ TtEmbeddingForwardCores cores,
                                                      const __grid_constant__ TtEmbeddingForwardShape s,
                                                      const __grid_constant__ TtEmbeddingForwardCores bufs) {
    const int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    tt_embedding_forward_fill_pointers(a_ptr, b_ptr, c_ptr, n, N, bag_of[start + n] / s.B, indices[start + n], cores, s, bufs);
}

// One warp per lookup of the chunk; the warp that starts a run of equal bag ids adds the run's rows of
// the last buffer to the pooled output (read-modify-write: a bag cut by a chunk boundary gets a second
// run in the next chunk, whose reduce runs after this one on the stream).
__global__ void tt_embedding_forward_kernel2_reduce(float* __restrict__ acc, const float* __restrict__ last,
                                                    const int* __restrict__ bag_of, int N, int D) {
    const int n = (int)(((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32);
    const int lane = threadIdx.x % 32;
    if (n >= N) return;
    const int bag = bag_of[n];
    if (n > 0 && bag_of[n - 1] == bag) return;
    int len = 1;
    while (n + len < N && bag_of[n + len] == bag) len++;
    for (int e = lane; e < D; e += 32) {
        float sum = acc[(int64_t)bag * D + e];
        for (int l = 0; l < len; l++) sum += last[(int64_t)(n + l) * D + e];
        acc[(int64_t)bag * D + e] = sum;
    }
}

// bf16 build: the fp32 pooled sums rounded once into the output
__global__ void tt_embedding_forward_kernel_to_floatX(floatX* __restrict__ out, const float* __restrict__ in, int64_t n) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = from_float<floatX>(in[i]);
}

// ---- the warp chain engine of versions 3 and 4

// One chain step by one warp: out (m x n) = in (m x k, row stride ld_in) . G (k x n), or out += ... when
// `accumulate`. The product is stored reshaped for the next step: element (i, j) goes to row i * q + j / r,
// column j % r of a matrix with row stride ld_out (r = the next rank R_{t+1}, q * r = n; ld_out = r for the
// dense layout, more to pad). Lane tasks are tiles of RT rows x CW columns, columns fastest across the lanes,
// so a warp's G loads are consecutive (float4 when CW = 4: n % 4 == 0 and G 16-byte aligned, which the caller
// guarantees) and its loads of `in` are broadcasts, or rows apart by an odd stride (no bank conflicts).
// RT | m and CW | n: no bounds checks inside. Pointers may be global or shared. Lanes share nothing within a
// step, so the CPU tests emulate a warp by calling this for lane = 0..31 in turn.
template <int RT, int CW>
__host__ __device__ __forceinline__ void tt_embedding_forward_warp_step_tiled(float* __restrict__ out, int r, int ld_out,
                                                                     const float* __restrict__ in, int ld_in,
                                                                     const float* __restrict__ G, int m, int k, int n,
                                                                     bool accumulate, int lane) {
    const int groups = n / CW;
    const int tasks = (m / RT) * groups;
    const int out_rs = (n / r) * ld_out;                 // distance between rows i and i+1 of the product
    for (int task = lane; task < tasks; task += 32) {
        const int rt = task / groups;
        const int j0 = (task - rt * groups) * CW;
        const float* a_ptr = in + rt * RT * ld_in;
        const float* g_ptr = G + j0;
        float acc[RT][CW];
TT_EMBEDDING_FORWARD_UNROLL
        for (int i = 0; i < RT; i++)
TT_EMBEDDING_FORWARD_UNROLL
            for (int c = 0; c < CW; c++) acc[i][c] = 0.0f;
TT_EMBEDDING_FORWARD_UNROLL4
        for (int kk = 0; kk < k; kk++) {
            float g[CW];
            if constexpr (CW == 4) {
                const float4 v = *reinterpret_cast<const float4*>(g_ptr + kk * n);
                g[0] = v.x; g[1] = v.y; g[2] = v.z; g[3] = v.w;
            } else {
                g[0] = g_ptr[kk * n];
            }
TT_EMBEDDING_FORWARD_UNROLL
            for (int i = 0; i < RT; i++) {
                const float a = a_ptr[i * ld_in + kk];
TT_EMBEDDING_FORWARD_UNROLL
                for (int c = 0; c < CW; c++) acc[i][c] = fmaf(a, g[c], acc[i][c]);
            }
        }
        int col[CW];                                     // where columns j0.. land in the reshaped output row
        {
            int a = j0 / r, kp = j0 - a * r;
TT_EMBEDDING_FORWARD_UNROLL
            for (int c = 0; c < CW; c++) {
                col[c] = a * ld_out + kp;
                if (++kp == r) { kp = 0; a++; }
            }
        }
        float* o = out + rt * RT * out_rs;
TT_EMBEDDING_FORWARD_UNROLL
        for (int i = 0; i < RT; i++)
TT_EMBEDDING_FORWARD_UNROLL
            for (int c = 0; c < CW; c++) {
                float* dst = o + i * out_rs + col[c];
                *dst = accumulate ? *dst + acc[i][c] : acc[i][c];
            }
    }
}

__host__ __device__ __forceinline__ void tt_embedding_forward_warp_step(float* out, int r, int ld_out, const float* in, int ld_in,
                                                               const float* G, int m, int k, int n, int rt, int cw,
                                                               bool accumulate, int lane) {
    if (cw == 4) {
        if (rt == 4) tt_embedding_forward_warp_step_tiled<4, 4>(out, r, ld_out, in, ld_in, G, m, k, n, accumulate, lane);
        else if (rt == 2) tt_embedding_forward_warp_step_tiled<2, 4>(out, r, ld_out, in, ld_in, G, m, k, n, accumulate, lane);
        else tt_embedding_forward_warp_step_tiled<1, 4>(out, r, ld_out, in, ld_in, G, m, k, n, accumulate, lane);
    } else {
        if (rt == 4) tt_embedding_forward_warp_step_tiled<4, 1>(out, r, ld_out, in, ld_in, G, m, k, n, accumulate, lane);
        else if (rt == 2) tt_embedding_forward_warp_step_tiled<2, 1>(out, r, ld_out, in, ld_in, G, m, k, n, accumulate, lane);
        else tt_embedding_forward_warp_step_tiled<1, 1>(out, r, ld_out, in, ld_in, G, m, k, n, accumulate, lane);
    }
}

// chain step t (1..T-1) of the shape: in = M_{t-1} (row stride ld[t-1]), G = core t's slice, out = M_t
// (row stride ld[t]; for t = T-1 the D-value output row)
__host__ __device__ __forceinline__ void tt_embedding_forward_chain_step(const TtEmbeddingForwardShape& s, int t, float* out,
                                                                const float* in, const float* G, bool accumulate, int lane) {
    tt_embedding_forward_warp_step(out, s.R[t + 1], s.ld[t], in, s.ld[t - 1], G, s.step_m[t], s.step_k[t], s.step_n[t],
                                   s.step_rt[t], s.step_cw[t], accumulate, lane);
}

// Chain steps t0..t1-1 (1 <= t0 < t1 <= T) of one lookup by one warp. Lane t (< T) holds the slice pointer of
// core t (global, or shared for a grouped core); every lane must call this (full-mask shuffles). The first
// step reads `in0` (M_{t0-1} with row stride ld[t0-1]), or core 0's slice when in0 is null (t0 = 1); the last
// step writes (or adds to) `last` (M_{t1-1}, row stride ld[t1-1]: the D-value row when t1 = T); the steps
// between ping-pong through buf0 and buf1 (warp-private, padded rows). Ends with a __syncwarp, so `last` is
// visible to the whole warp.
__device__ __forceinline__ void tt_embedding_forward_warp_chain_range(const TtEmbeddingForwardShape& s, const float* g_lane,
                                                                      int t0, int t1, const float* in0, float* last,
                                                                      float* buf0, float* buf1, bool accumulate_last,
                                                                      int lane) {
    const unsigned full = 0xffffffffu;
    const float* core0 = reinterpret_cast<const float*>(__shfl_sync(full, reinterpret_cast<unsigned long long>(g_lane), 0));
    const float* in = in0 ? in0 : core0;
    for (int t = t0; t < t1; t++) {
        const float* G = reinterpret_cast<const float*>(__shfl_sync(full, reinterpret_cast<unsigned long long>(g_lane), t));
        const bool is_last = (t == t1 - 1);
        float* out = is_last ? last : ((t & 1) ? buf0 : buf1);
        tt_embedding_forward_chain_step(s, t, out, in, G, is_last && accumulate_last, lane);
        __syncwarp();
        in = out;
    }
}

// the whole chain (steps 1..T-1) into the D-value row `last`
__device__ __forceinline__ void tt_embedding_forward_warp_chain(const TtEmbeddingForwardShape& s, const float* g_lane,
                                                                float* buf0, float* buf1, float* last,
                                                                bool accumulate_last, int lane) {
    tt_embedding_forward_warp_chain_range(s, g_lane, 1, s.T, nullptr, last, buf0, buf1, accumulate_last, lane);
}

// Version 3: fused, a bag per block. Warp w runs the chains of lookups w, w+W, ... of the bag and adds each
// result into its own pooled row in shared memory (the last step accumulates in place); then the block
// sums its W rows in a fixed order and writes the bag's D values once. Everything between the index load
// and the pooled write stays on chip; no atomics; the result depends only on the block size.
// Per warp: buf_pad[0] + buf_pad[1] + D_pad floats, in shared memory; or, at shapes where one warp's buffers
// exceed the shared memory of a block (ranks 128 with wide intermediates), in a global scratch area
// (`scratch`: blockDim / 32 warps' worth per block), which the same code reads through L1/L2.
__global__ void tt_embedding_forward_kernel3(floatX* __restrict__ out, const int64_t* __restrict__ indices,
                                                                     const int64_t* __restrict__ offsets,
                                                                     const __grid_constant__ TtEmbeddingForwardCores cores,
                                                                     const __grid_constant__ TtEmbeddingForwardShape s,
                                                                     float* __restrict__ scratch) {
    extern __shared__ float4 tt_embedding_forward_smem3[];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, W = blockDim.x / 32;
    const int per_warp = s.buf_pad[0] + s.buf_pad[1] + s.D_pad;
    float* smem = scratch ? scratch + (int64_t)blockIdx.x * W * per_warp : reinterpret_cast<float*>(tt_embedding_forward_smem3);
    float* buf0 = smem + warp * per_warp;
    float* buf1 = buf0 + s.buf_pad[0];
    float* acc = buf1 + s.buf_pad[1];
    const int64_t nbags = (int64_t)s.tables * s.B;
    for (int64_t bag = blockIdx.x; bag < nbags; bag += gridDim.x) {
        for (int e = lane; e < s.D; e += 32) acc[e] = 0.0f;
        __syncwarp();
        const int tbl = (int)(bag / s.B);
        const int64_t end = offsets[bag + 1];
        for (int64_t n = offsets[bag] + warp; n < end; n += W) {     // warp-uniform loop
            const int64_t idx = indices[n];
            const float* g = nullptr;
            if (lane < s.T) g = tt_embedding_forward_slice_ptr(cores, s, tbl, idx, lane);
            tt_embedding_forward_warp_chain(s, g, buf0, buf1, acc, true, lane);
        }
        __syncthreads();
        for (int e = threadIdx.x; e < s.D; e += blockDim.x) {
            float sum = 0.0f;
            for (int w = 0; w < W; w++) sum += smem[w * per_warp + s.buf_pad[0] + s.buf_pad[1] + e];
            out[bag * s.D + e] = from_float<floatX>(sum);
        }
        __syncthreads();                                              // before the next bag clears acc
    }
}

// ---- version 4: grouped by the heavy core(s)

// which cores version 4 keeps in shared memory, and its sort key: key = tbl * P + digits of the grouped
// cores (first grouped core most significant), P = product of their p
struct TtEmbeddingForwardGroup {
    int ncores = 0;
    int core[2] = {-1, -1};
    int64_t nkeys = 0;     // tables * P
    int end_bit = 1;       // bits of the largest key
    int slice_pad[2] = {0, 0};
};

// The biggest core slice always (or `first`, when given); the second biggest too when it is >= 1024 floats
// (worth sharing) and the groups of both stay >= 8 lookups on uniform indices. Returns "" or why the version
// cannot run.
inline std::string tt_embedding_forward_make_group(const TtEmbeddingForwardShape& s, TtEmbeddingForwardGroup& g,
                                                   int first = -1) {
    g = TtEmbeddingForwardGroup();
    int h1 = 0;
    for (int t = 1; t < s.T; t++) if (s.slice[t] > s.slice[h1]) h1 = t;
    if (first >= 0) h1 = first;
    int h2 = -1;
    for (int t = 0; t < s.T; t++) if (t != h1 && (h2 < 0 || s.slice[t] > s.slice[h2])) h2 = t;
    g.ncores = 1;
    g.core[0] = h1;
    g.nkeys = (int64_t)s.tables * s.p[h1];
    if (g.nkeys > INT32_MAX)
        return "tables * p_" + std::to_string(h1) + " (" + std::to_string(g.nkeys) + ") does not fit the 32-bit sort key";
    if (h2 >= 0 && s.slice[h2] >= 1024 && (int64_t)g.nkeys * s.p[h2] <= INT32_MAX &&
        (double)s.nnz >= 8.0 * (double)g.nkeys * s.p[h2]) {
        g.ncores = 2;
        g.core[1] = h2;
        g.nkeys *= s.p[h2];
    }
    for (int c = 0; c < g.ncores; c++) g.slice_pad[c] = (int)tt_embedding_forward_round4(s.slice[g.core[c]]);
    g.end_bit = 1;
    while (g.end_bit < 32 && ((int64_t)1 << g.end_bit) < g.nkeys) g.end_bit++;
    return "";
}

// shared-memory bytes of version 4 for `warps` warps: window metadata, grouped slices, per-warp buffers
inline size_t tt_embedding_forward_smem4_bytes(const TtEmbeddingForwardShape& s, const TtEmbeddingForwardGroup& g, int warps) {
    const size_t C = (size_t)warps * TT_EMBEDDING_FORWARD_LOOKUPS_PER_WARP;
    size_t meta = C * (8 + 4 + 4 + 4);
    meta = (meta + 15) / 16 * 16;
    size_t floats = (size_t)g.slice_pad[0] + g.slice_pad[1] + (size_t)warps * (2 * s.mid_pad + s.D_pad);
    return meta + floats * 4;
}

inline size_t tt_embedding_forward_smem3_bytes(const TtEmbeddingForwardShape& s, int warps) {
    return (size_t)warps * ((size_t)s.buf_pad[0] + s.buf_pad[1] + s.D_pad) * 4;
}

// version 4's sort key of a lookup of table tbl
__host__ __device__ inline uint32_t tt_embedding_forward_group_key(const TtEmbeddingForwardShape& s,
                                                                   const TtEmbeddingForwardGroup& g, int tbl, int64_t idx) {
    uint32_t key = (uint32_t)tbl;
    for (int c = 0; c < g.ncores; c++) {
        const int t = g.core[c];
        key = key * (uint32_t)s.p[t] + (uint32_t)tt_embedding_forward_digit(idx, s.stride[t], s.p[t]);
    }
    return key;
}

// the table of a key, and the slice of grouped core c (0 or 1) that every lookup with this key reads
__host__ __device__ inline int tt_embedding_forward_group_table(const TtEmbeddingForwardShape& s,
                                                                const TtEmbeddingForwardGroup& g, uint32_t key) {
    for (int c = g.ncores - 1; c >= 0; c--) key /= (uint32_t)s.p[g.core[c]];
    return (int)key;
}
__host__ __device__ inline const float* tt_embedding_forward_group_slice(const TtEmbeddingForwardCores& cores,
                                                                         const TtEmbeddingForwardShape& s,
                                                                         const TtEmbeddingForwardGroup& g, uint32_t key, int c) {
    const int tbl = tt_embedding_forward_group_table(s, g, key);
    if (c == 0 && g.ncores == 2) key /= (uint32_t)s.p[g.core[1]];      // drop the second core's digit
    const int t = g.core[c];
    const uint32_t digit = key % (uint32_t)s.p[t];
    return cores.c[t] + ((int64_t)tbl * s.p[t] + digit) * s.slice[t];
}

// sort key and position of every lookup (the table from a binary search over the tables' first offsets)
__global__ void tt_embedding_forward_kernel4_keys(uint32_t* __restrict__ keys, int* __restrict__ vals,
                                                  const int64_t* __restrict__ indices, const int64_t* __restrict__ offsets,
                                                  const __grid_constant__ TtEmbeddingForwardShape s,
                                                  const __grid_constant__ TtEmbeddingForwardGroup g) {
    const int64_t n = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= s.nnz) return;
    int lo = 0, hi = s.tables - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (offsets[(int64_t)mid * s.B] <= n) lo = mid; else hi = mid - 1;
    }
    keys[n] = tt_embedding_forward_group_key(s, g, lo, indices[n]);
    vals[n] = (int)n;
}

// Version 4, the chains: block b takes positions [b*C, b*C + C) of the sorted order (C = 4 lookups per
// warp). Lookups with equal keys are contiguous there; for each run the block copies the run's grouped
// slice(s) into shared memory once, and the warps run the run's chains against them (the other cores from
// L2). A lookup whose (table, index) appeared earlier in the window is not recomputed: the first one's warp
// writes the row for both. Every lookup's row goes to rowbuf at its original position.
__global__ void tt_embedding_forward_kernel4(float* __restrict__ rowbuf, const uint32_t* __restrict__ keys,
                                                                     const int* __restrict__ perm, const int64_t* __restrict__ indices,
                                                                     const __grid_constant__ TtEmbeddingForwardCores cores,
                                                                     const __grid_constant__ TtEmbeddingForwardShape s,
                                                                     const __grid_constant__ TtEmbeddingForwardGroup g) {
    extern __shared__ float4 tt_embedding_forward_smem4[];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, W = blockDim.x / 32;
    const int C = W * TT_EMBEDDING_FORWARD_LOOKUPS_PER_WARP;
    // layout: idx[C] int64 | key[C] u32 | lid[C] int | alias[C] int | pad to 16 | slices | per-warp buffers
    int64_t* idx_s = reinterpret_cast<int64_t*>(tt_embedding_forward_smem4);
    uint32_t* key_s = reinterpret_cast<uint32_t*>(idx_s + C);
    int* lid_s = reinterpret_cast<int*>(key_s + C);
    int* alias_s = lid_s + C;
    const size_t meta = ((size_t)C * 20 + 15) / 16 * 16;
    float* slice0 = reinterpret_cast<float*>(reinterpret_cast<char*>(tt_embedding_forward_smem4) + meta);
    float* slice1 = slice0 + g.slice_pad[0];
    float* buf0 = slice1 + g.slice_pad[1] + warp * (2 * s.mid_pad + s.D_pad);
    float* buf1 = buf0 + s.mid_pad;
    float* row = buf1 + s.mid_pad;

    const int64_t w0 = (int64_t)blockIdx.x * C;
    const int cnt = (int)min((int64_t)C, s.nnz - w0);
    for (int j = threadIdx.x; j < cnt; j += blockDim.x) {
        key_s[j] = keys[w0 + j];
        const int l = perm[w0 + j];
        lid_s[j] = l;
        idx_s[j] = indices[l];
    }
    __syncthreads();
    for (int j = threadIdx.x; j < cnt; j += blockDim.x) {
        int a = j;
        for (int jj = 0; jj < j; jj++)
            if (key_s[jj] == key_s[j] && idx_s[jj] == idx_s[j]) { a = jj; break; }
        alias_s[j] = a;
    }
    __syncthreads();

    for (int r0 = 0; r0 < cnt;) {                                  // runs of equal keys, block-uniform
        const uint32_t key = key_s[r0];
        int r1 = r0 + 1;
        while (r1 < cnt && key_s[r1] == key) r1++;
        const int tbl = tt_embedding_forward_group_table(s, g, key);
        for (int c = 0; c < g.ncores; c++) {
            const float* src = tt_embedding_forward_group_slice(cores, s, g, key, c);
            float* dst = c == 0 ? slice0 : slice1;
            const int len = (int)s.slice[g.core[c]];
            if (len % 4 == 0) {                                    // slice base 16-byte aligned then
                const float4* src4 = reinterpret_cast<const float4*>(src);
                float4* dst4 = reinterpret_cast<float4*>(dst);
                for (int i = threadIdx.x; i < len / 4; i += blockDim.x) dst4[i] = __ldg(src4 + i);
            } else {
                for (int i = threadIdx.x; i < len; i += blockDim.x) dst[i] = __ldg(src + i);
            }
        }
        __syncthreads();
        for (int j = r0 + warp; j < r1; j += W) {                  // warp-uniform loop
            if (alias_s[j] != j) continue;
            const float* gp = nullptr;
            if (lane < s.T) {
                if (lane == g.core[0]) gp = slice0;
                else if (lane == g.core[1]) gp = slice1;
                else gp = tt_embedding_forward_slice_ptr(cores, s, tbl, idx_s[j], lane);
            }
            tt_embedding_forward_warp_chain(s, gp, buf0, buf1, row, false, lane);
            for (int jj = j; jj < r1; jj++) {
                if (alias_s[jj] != j) continue;
                float* dst = rowbuf + (int64_t)lid_s[jj] * s.D;
                for (int e = lane; e < s.D; e += 32) dst[e] = row[e];
            }
            __syncwarp();                                          // row is rewritten by the next chain
        }
        __syncthreads();                                           // slices are reloaded for the next run
        r0 = r1;
    }
}

// Programmatic dependent launch (sm_90; versions 11 and 12): a kernel launched with the attribute may start
// while the kernel before it in the stream still runs, once that one's blocks have all executed
// launch_dependents (or exited); it must execute griddepcontrol.wait before reading what that kernel wrote (the
// wait returns when the earlier grid has completed and its writes are visible). Both instructions are no-ops in a
// kernel launched without the attribute. What overlaps is the launch itself and each block's start-up.
__device__ __forceinline__ void tt_embedding_forward_wait_prior() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }
__device__ __forceinline__ void tt_embedding_forward_allow_next() { asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory"); }

template <typename... Params, typename... Args>
void tt_embedding_forward_launch_pdl(void (*kernel)(Params...), unsigned grid, unsigned block, size_t smem, Args... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(grid);
    cfg.blockDim = dim3(block);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = 0;
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = &attr;
#ifdef TT_EMBEDDING_FORWARD_NO_PDL          // scripts/tt_forward_sweep.sh: the same launches without the attribute
    cfg.numAttrs = 0;
#else
    cfg.numAttrs = 1;
#endif
    cudaCheck(cudaLaunchKernelEx(&cfg, kernel, args...));
}

// Version 4, the pooling: one thread per (bag, element), the bag's rows summed in lookup order
__global__ void tt_embedding_forward_kernel4_pool(floatX* __restrict__ out, const float* __restrict__ rowbuf,
                                                  const int64_t* __restrict__ offsets, int64_t nbags, int D) {
    tt_embedding_forward_wait_prior();                      // the rows (versions 11 and 12 launch this with PDL)
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= nbags * D) return;
    const int64_t bag = i / D;
    const int e = (int)(i - bag * D);
    float sum = 0.0f;
    for (int64_t n = offsets[bag]; n < offsets[bag + 1]; n++) sum += rowbuf[n * D + e];
    out[i] = from_float<floatX>(sum);
}

// ---- version 5: version 4 with the heavy step on tensor cores (TF32 mma.sync)

// Version 5's plan: the core h (>= 1) with the biggest slice runs its chain step as one GEMM over all the
// lookups of a run (their M_{h-1} stacked as rows: Q_{h-1} rows each, R_h columns) times the shared slice
// (R_h x q_h R_{h+1}), in 16 x 8 x 8 TF32 mma tiles; the steps before and after it run per lookup on the FP32
// warp engine. Needs R_h and q_h R_{h+1} multiples of 8.
struct TtEmbeddingForwardTc {
    int h = -1;
    int ldg = 0;      // row stride of core h's slice in shared memory: >= n, = 8 (mod 32), so the 32 lanes'
                      // B-fragment loads (rows k..k+3, 8 columns) fall in 32 different banks
    int in_sz = 0;    // floats per lookup for M_{h-1} (0 when h = 1: M_0 is core 0's slice, read from L2)
    int out_sz = 0;   // floats per lookup for M_h
    int mid = 0;      // warp-private intermediates of the steps before and after h (0 if none)
};

inline std::string tt_embedding_forward_make_tc(const TtEmbeddingForwardShape& s, TtEmbeddingForwardTc& tc) {
    tc = TtEmbeddingForwardTc();
    int h = 1;
    for (int t = 2; t < s.T; t++) if (s.slice[t] > s.slice[h]) h = t;
    const int k = s.step_k[h], n = s.step_n[h];
    if (k % 8 != 0 || n % 8 != 0)
        return "its tensor-core step (core " + std::to_string(h) + ", R_" + std::to_string(h) + " = " + std::to_string(k) +
               ", q_" + std::to_string(h) + "*R_" + std::to_string(h + 1) + " = " + std::to_string(n) + ") needs both multiples of 8";
    tc.h = h;
    tc.ldg = n + ((8 - n % 32) + 32) % 32;
    tc.in_sz = h >= 2 ? (int)tt_embedding_forward_round4((int64_t)s.Q[h - 1] * s.ld[h - 1]) : 0;
    tc.out_sz = (int)tt_embedding_forward_round4((int64_t)s.Q[h] * s.ld[h]);
    int mid = 0;
    for (int t = 1; t <= h - 2; t++) mid = std::max(mid, s.Q[t] * s.ld[t]);
    for (int t = h + 1; t <= s.T - 2; t++) mid = std::max(mid, s.Q[t] * s.ld[t]);
    tc.mid = (int)tt_embedding_forward_round4(mid);
    return "";
}

inline size_t tt_embedding_forward_smem5_bytes(const TtEmbeddingForwardShape& s, const TtEmbeddingForwardGroup& g,
                                               const TtEmbeddingForwardTc& tc, int warps) {
    const size_t C = (size_t)warps * TT_EMBEDDING_FORWARD_LOOKUPS_PER_WARP;
    const size_t meta = (C * 24 + 4 + 15) / 16 * 16;
    const size_t floats = (size_t)s.step_k[tc.h] * tc.ldg + g.slice_pad[1] + C * (tc.in_sz + tc.out_sz) +
                          (size_t)warps * (2 * tc.mid + s.D_pad);
    return meta + floats * 4;
}

// round to TF32 (10 explicit mantissa bits, to nearest, ties away from zero), as cvt.rna.tf32.f32 does;
// host-callable so the CPU tests can run version 5's arithmetic
__host__ __device__ inline float tt_embedding_forward_tf32(float x) {
#ifdef __CUDA_ARCH__
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return __uint_as_float(r);
#else
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & 0xffffe000u;   // finite: round the 13 low bits away
    float r;
    memcpy(&r, &u, 4);
    return r;
#endif
}

// The 16 x 8 x 8 TF32 MMA tile (PTX mma.m16n8k8, A row-major, B column-major), lane = 4 * group + tig:
//   A (16x8): a0 (group, tig), a1 (group + 8, tig), a2 (group, tig + 4), a3 (group + 8, tig + 4)
//   B (8x8):  b0 (k = tig, n = group), b1 (k = tig + 4, n = group)
//   C (16x8): c0 (group, 2 tig), c1 (group, 2 tig + 1), c2 (group + 8, 2 tig), c3 (group + 8, 2 tig + 1)
__device__ __forceinline__ void tt_embedding_forward_mma_tf32(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Row r of the stacked A matrix of a run: lookup number r / m of the run's primaries, row r % m of its
// M_{h-1} (row stride ld[h-1]); null past the last lookup (those rows are zeros). `a_base[pi]` is the
// lookup's M_{h-1}. Host-callable (the CPU test runs the stacked GEMM through these helpers).
__host__ __device__ inline const float* tt_embedding_forward_tc_a_row(const TtEmbeddingForwardShape& s,
                                                                     const TtEmbeddingForwardTc& tc,
                                                                     const float* const* a_base, int np, int r) {
    const int m = s.step_m[tc.h];
    const int pi = r / m;
    if (pi >= np) return nullptr;
    return a_base[pi] + (r - pi * m) * s.ld[tc.h - 1];
}

// Where element (r, c) of the stacked product goes: lookup r / m's M_h buffer, row r % m, column c, stored
// reshaped (row i * q_h + c / R_{h+1}, column c % R_{h+1}, row stride ld[h]) for the next step
__host__ __device__ inline float* tt_embedding_forward_tc_c_addr(const TtEmbeddingForwardShape& s,
                                                                const TtEmbeddingForwardTc& tc, float* outbuf, int r, int c) {
    const int m = s.step_m[tc.h], rr = s.R[tc.h + 1], ld = s.ld[tc.h];
    const int pi = r / m, i = r - pi * m, a = c / rr;
    return outbuf + (size_t)pi * tc.out_sz + (size_t)i * s.q[tc.h] * ld + a * ld + (c - a * rr);
}

// What lane (group = lane / 4, tig = lane % 4) puts in its registers for the tile at row tile rt, k step ks and
// n-tile columns col0..col0+7 (the layout above); host-callable: the CPU test assembles these per-lane
// registers into the tiles by the PTX layout and checks the product.
__host__ __device__ inline int tt_embedding_forward_tc_a_rowidx(int rt, int hf, int group) { return rt * 16 + group + 8 * hf; }
__host__ __device__ inline void tt_embedding_forward_tc_a_frag(float (&a)[4], const float* arow0, const float* arow1, int ks, int tig) {
    a[0] = arow0 ? tt_embedding_forward_tf32(arow0[ks + tig]) : 0.0f;
    a[1] = arow1 ? tt_embedding_forward_tf32(arow1[ks + tig]) : 0.0f;
    a[2] = arow0 ? tt_embedding_forward_tf32(arow0[ks + tig + 4]) : 0.0f;
    a[3] = arow1 ? tt_embedding_forward_tf32(arow1[ks + tig + 4]) : 0.0f;
}
__host__ __device__ inline void tt_embedding_forward_tc_b_frag(float (&b)[2], const float* gh, int ldg, int ks, int col0,
                                                               int group, int tig) {
    b[0] = gh[(ks + tig) * ldg + col0 + group];
    b[1] = gh[(ks + tig + 4) * ldg + col0 + group];
}
__host__ __device__ inline void tt_embedding_forward_tc_c_rc(int rt, int col0, int q, int group, int tig, int& r, int& c) {
    r = rt * 16 + group + 8 * (q >> 1);
    c = col0 + 2 * tig + (q & 1);
}

// Version 5: version 4's windows of the sorted order and shared slices, with each run in three phases:
//   A  per primary lookup, a warp runs steps 1..h-1 (FP32) into the lookup's M_{h-1} buffer (skipped for
//      h = 1: M_0 is core 0's slice, read straight from L2);
//   B  the warps split the stacked GEMM [np * Q_{h-1} x R_h] . [R_h x q_h R_{h+1}] into (16-row tile, 32-column
//      group) items: per 8-deep k step, one A fragment (4 loads, rounded to TF32) and four B fragments from the
//      shared slice (stored TF32-rounded, conflict-free stride), four mma; results into each lookup's M_h buffer;
//   C  per primary lookup, a warp runs steps h+1..T-1 (FP32) into its row and writes it for the lookup and
//      its duplicates in the window.
// At FBTT's default the heavy step is 89% of the FLOPs: 16 mma per lookup instead of 512 FMAs per lane.
__global__ void tt_embedding_forward_kernel5(float* __restrict__ rowbuf, const uint32_t* __restrict__ keys,
                                             const int* __restrict__ perm, const int64_t* __restrict__ indices,
                                             const __grid_constant__ TtEmbeddingForwardCores cores,
                                             const __grid_constant__ TtEmbeddingForwardShape s,
                                             const __grid_constant__ TtEmbeddingForwardGroup g,
                                             const __grid_constant__ TtEmbeddingForwardTc tc) {
    extern __shared__ float4 tt_embedding_forward_smem5[];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, W = blockDim.x / 32;
    const int C = W * TT_EMBEDDING_FORWARD_LOOKUPS_PER_WARP;
    // layout: idx[C] int64 | key[C] u32 | lid[C] | alias[C] | prim[C] | np | pad to 16 | core h's slice
    // (k x ldg) | second grouped slice | M_{h-1} buffers [C] | M_h buffers [C] | per-warp buffers
    int64_t* idx_s = reinterpret_cast<int64_t*>(tt_embedding_forward_smem5);
    uint32_t* key_s = reinterpret_cast<uint32_t*>(idx_s + C);
    int* lid_s = reinterpret_cast<int*>(key_s + C);
    int* alias_s = lid_s + C;
    int* prim_s = alias_s + C;
    int* np_s = prim_s + C;
    const size_t meta = ((size_t)C * 24 + 4 + 15) / 16 * 16;
    const int h = tc.h, k = s.step_k[h], n = s.step_n[h], ldg = tc.ldg;
    float* gh = reinterpret_cast<float*>(reinterpret_cast<char*>(tt_embedding_forward_smem5) + meta);
    float* g2 = gh + k * ldg;
    float* inbuf = g2 + g.slice_pad[1];
    float* outbuf = inbuf + (size_t)C * tc.in_sz;
    float* wbuf0 = outbuf + (size_t)C * tc.out_sz + warp * (2 * tc.mid + s.D_pad);
    float* wbuf1 = wbuf0 + tc.mid;
    float* wrow = wbuf1 + tc.mid;

    const int64_t w0 = (int64_t)blockIdx.x * C;
    const int cnt = (int)min((int64_t)C, s.nnz - w0);
    for (int j = threadIdx.x; j < cnt; j += blockDim.x) {
        key_s[j] = keys[w0 + j];
        const int l = perm[w0 + j];
        lid_s[j] = l;
        idx_s[j] = indices[l];
    }
    __syncthreads();
    for (int j = threadIdx.x; j < cnt; j += blockDim.x) {
        int a = j;
        for (int jj = 0; jj < j; jj++)
            if (key_s[jj] == key_s[j] && idx_s[jj] == idx_s[j]) { a = jj; break; }
        alias_s[j] = a;
    }
    __syncthreads();

    const int group = lane >> 2, tig = lane & 3;
    for (int r0 = 0; r0 < cnt;) {                                  // runs of equal keys, block-uniform
        const uint32_t key = key_s[r0];
        int r1 = r0 + 1;
        while (r1 < cnt && key_s[r1] == key) r1++;
        const int tbl = tt_embedding_forward_group_table(s, g, key);
        {   // core h's slice, TF32-rounded, rows padded to ldg; the second grouped core's as it is
            const float* src = tt_embedding_forward_group_slice(cores, s, g, key, 0);
            for (int i = threadIdx.x; i < k * n; i += blockDim.x) {
                const int row = i / n;
                gh[row * ldg + (i - row * n)] = tt_embedding_forward_tf32(__ldg(src + i));
            }
            if (g.ncores == 2) {
                const float* src2 = tt_embedding_forward_group_slice(cores, s, g, key, 1);
                const int len = (int)s.slice[g.core[1]];
                for (int i = threadIdx.x; i < len; i += blockDim.x) g2[i] = __ldg(src2 + i);
            }
        }
        if (threadIdx.x == 0) {                                    // the run's primaries, in order
            int np = 0;
            for (int j = r0; j < r1; j++) if (alias_s[j] == j) prim_s[np++] = j;
            *np_s = np;
        }
        __syncthreads();
        const int np = *np_s;
        auto lane_slice = [&](int j) -> const float* {            // lane t's core-t slice for window lookup j
            if (lane >= s.T) return nullptr;
            if (lane == g.core[1]) return g2;
            if (lane == h) return nullptr;                         // core h is never read by the warp engine
            return tt_embedding_forward_slice_ptr(cores, s, tbl, idx_s[j], lane);
        };
        // phase A: M_{h-1} of every primary (h >= 2)
        if (h >= 2) {
            for (int pi = warp; pi < np; pi += W)
                tt_embedding_forward_warp_chain_range(s, lane_slice(prim_s[pi]), 1, h, nullptr, inbuf + (size_t)pi * tc.in_sz,
                                                      wbuf0, wbuf1, false, lane);
            __syncthreads();
        }
        // phase B: the stacked GEMM on tensor cores
        const int m = s.step_m[h], rows = np * m;
        const int row_tiles = (rows + 15) / 16, ntiles = n / 8, ngroups = (ntiles + 3) / 4;
        for (int item = warp; item < row_tiles * ngroups; item += W) {      // warp-uniform
            const int rt = item / ngroups, ng = item - rt * ngroups;
            const int nt_count = min(4, ntiles - ng * 4);
            const float* arow[2];
            for (int hf = 0; hf < 2; hf++) {
                const int r = tt_embedding_forward_tc_a_rowidx(rt, hf, group);
                arow[hf] = nullptr;
                if (r < rows) {
                    const int pi = r / m;
                    const float* base = h >= 2 ? inbuf + (size_t)pi * tc.in_sz
                                               : tt_embedding_forward_slice_ptr(cores, s, tbl, idx_s[prim_s[pi]], 0);
                    arow[hf] = tt_embedding_forward_tc_a_row(s, tc, &base, 1, r - pi * m);
                }
            }
            float acc[4][4];
#pragma unroll
            for (int nt = 0; nt < 4; nt++)
#pragma unroll
                for (int q = 0; q < 4; q++) acc[nt][q] = 0.0f;
            for (int ks = 0; ks < k; ks += 8) {
                float af[4];
                tt_embedding_forward_tc_a_frag(af, arow[0], arow[1], ks, tig);
                const uint32_t a[4] = {__float_as_uint(af[0]), __float_as_uint(af[1]), __float_as_uint(af[2]), __float_as_uint(af[3])};
#pragma unroll
                for (int nt = 0; nt < 4; nt++) {
                    if (nt < nt_count) {                           // warp-uniform
                        float bf[2];
                        tt_embedding_forward_tc_b_frag(bf, gh, ldg, ks, ng * 32 + nt * 8, group, tig);
                        const uint32_t b[2] = {__float_as_uint(bf[0]), __float_as_uint(bf[1])};
                        tt_embedding_forward_mma_tf32(acc[nt], a, b);
                    }
                }
            }
#pragma unroll
            for (int nt = 0; nt < 4; nt++) {
                if (nt >= nt_count) continue;
#pragma unroll
                for (int q = 0; q < 4; q++) {
                    int r, c;
                    tt_embedding_forward_tc_c_rc(rt, ng * 32 + nt * 8, q, group, tig, r, c);
                    if (r < rows) *tt_embedding_forward_tc_c_addr(s, tc, outbuf, r, c) = acc[nt][q];
                }
            }
        }
        __syncthreads();
        // phase C: steps h+1..T-1 per primary, rows out for the lookup and its duplicates
        for (int pi = warp; pi < np; pi += W) {
            const int j = prim_s[pi];
            const float* row = outbuf + (size_t)pi * tc.out_sz;    // M_{T-1} = the row when h = T-1
            if (h < s.T - 1) {
                tt_embedding_forward_warp_chain_range(s, lane_slice(j), h + 1, s.T, row, wrow, wbuf0, wbuf1, false, lane);
                row = wrow;
            }
            for (int jj = j; jj < r1; jj++) {
                if (alias_s[jj] != j) continue;
                float* dst = rowbuf + (int64_t)lid_s[jj] * s.D;
                for (int e = lane; e < s.D; e += 32) dst[e] = row[e];
            }
            __syncwarp();
        }
        __syncthreads();                                           // slices, prim and buffers are rewritten next
        r0 = r1;
    }
}

// ---- version 6: lookups bucketed by the heavy core(s) with a one-block counting sort, two lookups per warp

// Lookups per warp in version 6: a warp runs the chains of P lookups side by side, and in the steps whose
// core slice they share (the grouped cores) every load of the slice feeds all P of them.
#define TT_EMBEDDING_FORWARD_V6_P 2
// threads of version 6's planning kernel (one block), and the lookups each thread loads at once
#define TT_EMBEDDING_FORWARD_V6_PLAN_THREADS 1024
#define TT_EMBEDDING_FORWARD_V6_PLAN_BATCH 8
#ifdef __CUDA_ARCH__
#define TT_EMBEDDING_FORWARD_NO_UNROLL _Pragma("unroll 1")
#else
#define TT_EMBEDDING_FORWARD_NO_UNROLL
#endif

// Version 6's plan of a shape: the grouped cores (version 4's choice: the biggest slice, and the second
// biggest when it is worth it), where each block keeps the item's slices and each warp its lookups' chains.
// Shared memory of a block of W warps (C = W * P lookups per item):
//   meta       idx[C] int64 | lid[C] | alias[C] | prim[C] | np          (rounded up to 16 bytes)
//   gs[0..1]   the item's slice of each grouped core (slice_pad floats each, 16-byte aligned)
//   stage      per lookup of the item, the slices of the other cores (core 0 included): stage_per_lookup
//              floats per lookup, core t at stage_off[t] (each rounded up to 4 floats)
//   slots      W * P slots of slot_floats: the odd intermediates (mid0), the even ones (mid1), the row (D_pad)
struct TtEmbeddingForwardPlan6 {
    TtEmbeddingForwardGroup g;
    int grouped[TT_EMBEDDING_FORWARD_MAX_CORES] = {};   // 1: core t's slice is the same for every lookup of an item
    int n_ng = 0;                                        // the other cores, in order
    int ng_core[TT_EMBEDDING_FORWARD_MAX_CORES] = {};
    int stage_off[TT_EMBEDDING_FORWARD_MAX_CORES] = {};
    int stage_per_lookup = 0;
    int mid0 = 0, mid1 = 0, slot_floats = 0;
    int avec1 = 0;   // step 1 reads M_0 (rows of R_1 floats, 16-byte aligned in shared memory) as float4 along k
};

inline std::string tt_embedding_forward_make_plan6(const TtEmbeddingForwardShape& s, TtEmbeddingForwardPlan6& pl) {
    pl = TtEmbeddingForwardPlan6();
    std::string why = tt_embedding_forward_make_group(s, pl.g);
    if (!why.empty()) return why;
    int64_t off = 0;
    for (int t = 0; t < s.T; t++) {
        pl.grouped[t] = (t == pl.g.core[0] || t == pl.g.core[1]) ? 1 : 0;
        if (pl.grouped[t]) continue;
        pl.ng_core[pl.n_ng++] = t;
        pl.stage_off[t] = (int)off;
        off += tt_embedding_forward_round4(s.slice[t]);    // <= 6 * 2^24: fits an int
    }
    pl.stage_per_lookup = (int)off;
    int64_t m0 = 0, m1 = 0;
    for (int t = 1; t <= s.T - 2; t++) {
        const int64_t sz = (int64_t)s.Q[t] * s.ld[t];
        if (t & 1) m0 = std::max(m0, sz); else m1 = std::max(m1, sz);
    }
    pl.mid0 = (int)tt_embedding_forward_round4(m0);
    pl.mid1 = (int)tt_embedding_forward_round4(m1);
    pl.slot_floats = pl.mid0 + pl.mid1 + s.D_pad;
    pl.avec1 = s.R[1] % 4 == 0 ? 1 : 0;
    return "";
}

__host__ __device__ inline size_t tt_embedding_forward_v6_meta_bytes(int C) { return ((size_t)C * 20 + 4 + 15) / 16 * 16; }

// shared memory of version 6's chain kernel for `warps` warps, and of its planning kernel
inline size_t tt_embedding_forward_smem6_bytes(const TtEmbeddingForwardShape& s, const TtEmbeddingForwardPlan6& pl, int warps) {
    (void)s;
    const size_t C = (size_t)warps * TT_EMBEDDING_FORWARD_V6_P;
    return tt_embedding_forward_v6_meta_bytes((int)C) +
           4 * ((size_t)pl.g.slice_pad[0] + pl.g.slice_pad[1] + C * pl.stage_per_lookup + C * pl.slot_floats);
}
inline size_t tt_embedding_forward_plan6_smem_bytes(const TtEmbeddingForwardPlan6& pl) {
    return 4 * ((size_t)pl.g.nkeys + 2 * TT_EMBEDDING_FORWARD_V6_PLAN_THREADS + 65);
}

// Blocks of the chain kernel: items = sum over non-empty keys of ceil(count / C) <= nnz / C + (non-empty keys),
// and <= nnz (an item holds >= 1 lookup). The grid is this bound; the planner marks the unused items empty.
inline int tt_embedding_forward_v6_max_items(const TtEmbeddingForwardShape& s, const TtEmbeddingForwardPlan6& pl, int C) {
    const int64_t bound = ceil_div<int64_t>(s.nnz, C) + std::min<int64_t>(pl.g.nkeys, s.nnz);
    return (int)std::min<int64_t>(s.nnz, bound);
}

// integer atomics in shared memory (the host runs the threads one after the other)
__host__ __device__ inline int tt_embedding_forward_atomic_add_int(int* p, int v) {
#ifdef __CUDA_ARCH__
    return atomicAdd(p, v);
#else
    const int old = *p;
    *p = old + v;
    return old;
#endif
}

// Asynchronous global -> shared copies of 16 bytes (both addresses 16-byte aligned) or 4 bytes (cp.async,
// sm_80+); made visible by tt_embedding_forward_async_wait() and a barrier. The host copies at once.
__host__ __device__ inline void tt_embedding_forward_async_copy(float* dst, const float* src, bool vec4) {
#ifdef __CUDA_ARCH__
    const unsigned saddr = (unsigned)__cvta_generic_to_shared(dst);
    if (vec4) asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(saddr), "l"(src) : "memory");
    else asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(saddr), "l"(src) : "memory");
#else
    memcpy(dst, src, vec4 ? 16 : 4);
#endif
}
__device__ __forceinline__ void tt_embedding_forward_async_wait() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

// len floats from src to dst by threads tid = 0..nthreads-1: 16-byte pieces when len % 4 == 0 (every slice
// then starts 16-byte aligned: cudaMalloc bases, slices of len floats, shared areas rounded to 4 floats)
__host__ __device__ inline void tt_embedding_forward_v6_copy(float* dst, const float* src, int64_t len, int tid, int nthreads) {
    if (len % 4 == 0) {
        for (int64_t i = tid; i < len / 4; i += nthreads) tt_embedding_forward_async_copy(dst + 4 * i, src + 4 * i, true);
    } else {
        for (int64_t i = tid; i < len; i += nthreads) tt_embedding_forward_async_copy(dst + i, src + i, false);
    }
}

// ---- version 6, the planning kernel (one block): a counting sort of the lookups by key into items

// the table of lookup n: the last table whose first offset is <= n
__host__ __device__ inline int tt_embedding_forward_v6_table_of(const TtEmbeddingForwardShape& s, const int64_t* offsets, int64_t n) {
    int lo = 0, hi = s.tables - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (offsets[(int64_t)mid * s.B] <= n) lo = mid; else hi = mid - 1;
    }
    return lo;
}

// phase 1, thread tid of NT: the keys of lookups tid, tid + NT, ... (loaded BATCH at a time), counted per key
__host__ __device__ inline void tt_embedding_forward_v6_plan_count(int* cnt, uint32_t* keys, const int64_t* indices,
                                                                   const int64_t* offsets, const TtEmbeddingForwardShape& s,
                                                                   const TtEmbeddingForwardGroup& g, int tid, int NT) {
    for (int64_t base = tid; base < s.nnz; base += (int64_t)NT * TT_EMBEDDING_FORWARD_V6_PLAN_BATCH) {
        int64_t idx[TT_EMBEDDING_FORWARD_V6_PLAN_BATCH];
TT_EMBEDDING_FORWARD_UNROLL
        for (int u = 0; u < TT_EMBEDDING_FORWARD_V6_PLAN_BATCH; u++) {
            const int64_t n = base + (int64_t)u * NT;
            idx[u] = n < s.nnz ? indices[n] : 0;
        }
TT_EMBEDDING_FORWARD_UNROLL
        for (int u = 0; u < TT_EMBEDDING_FORWARD_V6_PLAN_BATCH; u++) {
            const int64_t n = base + (int64_t)u * NT;
            if (n < s.nnz) {
                const uint32_t key = tt_embedding_forward_group_key(s, g, tt_embedding_forward_v6_table_of(s, offsets, n), idx[u]);
                keys[n] = key;
                tt_embedding_forward_atomic_add_int(&cnt[key], 1);
            }
        }
    }
}

// phase 2: thread tid owns keys [tid * per, tid * per + per); tot[tid] = its lookups, tot[NT + tid] = its items
__host__ __device__ inline void tt_embedding_forward_v6_plan_key_range(int nkeys, int tid, int NT, int& k0, int& k1) {
    const int per = (nkeys + NT - 1) / NT;
    k0 = tid * per < nkeys ? tid * per : nkeys;
    k1 = k0 + per < nkeys ? k0 + per : nkeys;
}
__host__ __device__ inline void tt_embedding_forward_v6_plan_sums(const int* cnt, int* tot, int nkeys, int C, int tid, int NT) {
    int k0, k1;
    tt_embedding_forward_v6_plan_key_range(nkeys, tid, NT, k0, k1);
    int sc = 0, si = 0;
    for (int key = k0; key < k1; key++) {
        const int c = cnt[key];
        sc += c;
        si += (c + C - 1) / C;
    }
    tot[tid] = sc;
    tot[NT + tid] = si;
}

// phase 3, lanes of warp 0 (part 1, __syncwarp, part 2): tot[] becomes its exclusive prefix sums (lookups
// and items separately); lane l takes entries [l * NT/32, (l+1) * NT/32); seg[64] = the number of items
__host__ __device__ inline void tt_embedding_forward_v6_plan_scan1(const int* tot, int* seg, int NT, int lane) {
    const int per = NT / 32;
    int a = 0, b = 0;
    for (int i = lane * per; i < lane * per + per; i++) { a += tot[i]; b += tot[NT + i]; }
    seg[lane] = a;
    seg[32 + lane] = b;
}
__host__ __device__ inline void tt_embedding_forward_v6_plan_scan2(int* tot, int* seg, int NT, int lane) {
    const int per = NT / 32;
    int a = 0, b = 0;
    for (int l = 0; l < lane; l++) { a += seg[l]; b += seg[32 + l]; }
    for (int i = lane * per; i < lane * per + per; i++) {
        const int ta = tot[i], tb = tot[NT + i];
        tot[i] = a;
        tot[NT + i] = b;
        a += ta;
        b += tb;
    }
    if (lane == 31) seg[64] = b;
}

// phase 4: each key's first position (cnt[key] becomes its cursor) and its items {start, count <= C, key, 0};
// items [number of items, max_items) are written empty (count 0: their blocks return at once)
__host__ __device__ inline void tt_embedding_forward_v6_plan_items(int* cnt, const int* tot, const int* seg, int4* items,
                                                                   int nkeys, int C, int max_items, int tid, int NT) {
    int k0, k1;
    tt_embedding_forward_v6_plan_key_range(nkeys, tid, NT, k0, k1);
    int start = tot[tid], it = tot[NT + tid];
    for (int key = k0; key < k1; key++) {
        const int c = cnt[key];
        cnt[key] = start;
        for (int j = 0; j < c; j += C) items[it++] = make_int4(start + j, c - j < C ? c - j : C, key, 0);
        start += c;
    }
    for (int i = seg[64] + tid; i < max_items; i += NT) items[i] = make_int4(0, 0, 0, 0);
}

// phase 5: every lookup to the next free position of its key: perm[pos] = lookup, sidx[pos] = its index.
// The order inside a key's range follows the atomics (not fixed); no row depends on it (see version 6).
__host__ __device__ inline void tt_embedding_forward_v6_plan_scatter(int* cnt, int* perm, int64_t* sidx, const uint32_t* keys,
                                                                     const int64_t* indices, int64_t nnz, int tid, int NT) {
    for (int64_t base = tid; base < nnz; base += (int64_t)NT * TT_EMBEDDING_FORWARD_V6_PLAN_BATCH) {
        uint32_t key[TT_EMBEDDING_FORWARD_V6_PLAN_BATCH];
        int64_t idx[TT_EMBEDDING_FORWARD_V6_PLAN_BATCH];
TT_EMBEDDING_FORWARD_UNROLL
        for (int u = 0; u < TT_EMBEDDING_FORWARD_V6_PLAN_BATCH; u++) {
            const int64_t n = base + (int64_t)u * NT;
            key[u] = n < nnz ? keys[n] : 0u;
            idx[u] = n < nnz ? indices[n] : 0;
        }
TT_EMBEDDING_FORWARD_UNROLL
        for (int u = 0; u < TT_EMBEDDING_FORWARD_V6_PLAN_BATCH; u++) {
            const int64_t n = base + (int64_t)u * NT;
            if (n < nnz) {
                const int pos = tt_embedding_forward_atomic_add_int(&cnt[key[u]], 1);
                perm[pos] = (int)n;
                sidx[pos] = idx[u];
            }
        }
    }
}

// Version 6, the planning kernel: one block of 1024 threads, shared memory cnt[nkeys] | tot[2 NT] | seg[65].
// keys[] is scratch ([nnz]); items[] has max_items entries (the chain kernel's grid).
__global__ void __launch_bounds__(TT_EMBEDDING_FORWARD_V6_PLAN_THREADS)
tt_embedding_forward_kernel6_plan(int4* __restrict__ items, int* __restrict__ perm, int64_t* __restrict__ sidx,
                                  uint32_t* __restrict__ keys, const int64_t* __restrict__ indices,
                                  const int64_t* __restrict__ offsets, const __grid_constant__ TtEmbeddingForwardShape s,
                                  const __grid_constant__ TtEmbeddingForwardGroup g, int C, int max_items) {
    extern __shared__ int tt_embedding_forward_smem6p[];
    const int NT = blockDim.x, tid = threadIdx.x, nkeys = (int)g.nkeys;
    int* cnt = tt_embedding_forward_smem6p;
    int* tot = cnt + nkeys;
    int* seg = tot + 2 * NT;
    for (int i = tid; i < nkeys; i += NT) cnt[i] = 0;
    __syncthreads();
    tt_embedding_forward_v6_plan_count(cnt, keys, indices, offsets, s, g, tid, NT);
    __syncthreads();
    tt_embedding_forward_v6_plan_sums(cnt, tot, nkeys, C, tid, NT);
    __syncthreads();
    if (tid < 32) {
        tt_embedding_forward_v6_plan_scan1(tot, seg, NT, tid);
        __syncwarp();
        tt_embedding_forward_v6_plan_scan2(tot, seg, NT, tid);
    }
    __syncthreads();
    tt_embedding_forward_v6_plan_items(cnt, tot, seg, items, nkeys, C, max_items, tid, NT);
    __syncthreads();
    tt_embedding_forward_v6_plan_scatter(cnt, perm, sidx, keys, indices, s.nnz, tid, NT);
}

// ---- version 6, the chains

// One chain step for P lookups by one warp, out_p (m x n) = in_p (m x k) . G (k x n) for p < P with ONE G:
// version 3's step (same lane tiles, same reshaped output) with every load of G feeding all P products.
// With AVEC (k % 4 == 0, ld_in % 4 == 0, in_p 16-byte aligned) the rows of in_p are read as float4 along k.
// Each output element is the same fmaf chain over kk = 0..k-1 as in tt_embedding_forward_warp_step_tiled,
// so the rows are bitwise those of version 3's engine (the CPU test checks it).
template <int P, int RT, int CW, bool AVEC>
__host__ __device__ __forceinline__ void tt_embedding_forward_warp_step_multi_tiled(float* const* out, int r, int ld_out,
                                                                                  const float* const* in, int ld_in,
                                                                                  const float* __restrict__ G, int m, int k,
                                                                                  int n, int lane) {
    const int groups = n / CW;
    const int tasks = (m / RT) * groups;
    const int out_rs = (n / r) * ld_out;
    for (int task = lane; task < tasks; task += 32) {
        const int rt = task / groups;
        const int j0 = (task - rt * groups) * CW;
        const float* g_ptr = G + j0;
        const int a_off = rt * RT * ld_in;
        float acc[P][RT][CW];
TT_EMBEDDING_FORWARD_UNROLL
        for (int p = 0; p < P; p++)
TT_EMBEDDING_FORWARD_UNROLL
            for (int i = 0; i < RT; i++)
TT_EMBEDDING_FORWARD_UNROLL
                for (int c = 0; c < CW; c++) acc[p][i][c] = 0.0f;
        if constexpr (AVEC) {             // not unrolled: 88 registers (113 unrolled by 2: fewer blocks per SM)
TT_EMBEDDING_FORWARD_NO_UNROLL
            for (int kk = 0; kk < k; kk += 4) {
                float g[4][CW];
TT_EMBEDDING_FORWARD_UNROLL
                for (int u = 0; u < 4; u++) {
                    if constexpr (CW == 4) {
                        const float4 v = *reinterpret_cast<const float4*>(g_ptr + (kk + u) * n);
                        g[u][0] = v.x; g[u][1] = v.y; g[u][2] = v.z; g[u][3] = v.w;
                    } else {
                        g[u][0] = g_ptr[(kk + u) * n];
                    }
                }
TT_EMBEDDING_FORWARD_UNROLL
                for (int p = 0; p < P; p++)
TT_EMBEDDING_FORWARD_UNROLL
                    for (int i = 0; i < RT; i++) {
                        const float4 a = *reinterpret_cast<const float4*>(in[p] + a_off + i * ld_in + kk);
TT_EMBEDDING_FORWARD_UNROLL
                        for (int c = 0; c < CW; c++) {
                            float v = acc[p][i][c];
                            v = fmaf(a.x, g[0][c], v);
                            v = fmaf(a.y, g[1][c], v);
                            v = fmaf(a.z, g[2][c], v);
                            v = fmaf(a.w, g[3][c], v);
                            acc[p][i][c] = v;
                        }
                    }
            }
        } else {
TT_EMBEDDING_FORWARD_UNROLL4
            for (int kk = 0; kk < k; kk++) {
                float g[CW];
                if constexpr (CW == 4) {
                    const float4 v = *reinterpret_cast<const float4*>(g_ptr + kk * n);
                    g[0] = v.x; g[1] = v.y; g[2] = v.z; g[3] = v.w;
                } else {
                    g[0] = g_ptr[kk * n];
                }
TT_EMBEDDING_FORWARD_UNROLL
                for (int p = 0; p < P; p++)
TT_EMBEDDING_FORWARD_UNROLL
                    for (int i = 0; i < RT; i++) {
                        const float a = in[p][a_off + i * ld_in + kk];
TT_EMBEDDING_FORWARD_UNROLL
                        for (int c = 0; c < CW; c++) acc[p][i][c] = fmaf(a, g[c], acc[p][i][c]);
                    }
            }
        }
        int col[CW];                                     // where columns j0.. land in the reshaped output row
        {
            int a = j0 / r, kp = j0 - a * r;
TT_EMBEDDING_FORWARD_UNROLL
            for (int c = 0; c < CW; c++) {
                col[c] = a * ld_out + kp;
                if (++kp == r) { kp = 0; a++; }
            }
        }
TT_EMBEDDING_FORWARD_UNROLL
        for (int p = 0; p < P; p++) {
            float* o = out[p] + rt * RT * out_rs;
TT_EMBEDDING_FORWARD_UNROLL
            for (int i = 0; i < RT; i++)
TT_EMBEDDING_FORWARD_UNROLL
                for (int c = 0; c < CW; c++) o[i * out_rs + col[c]] = acc[p][i][c];
        }
    }
}

// chain step t (1..T-1) of the shape for P lookups sharing G (the tile of version 3's plan; float4 rows of
// in_p when avec)
template <int P>
__host__ __device__ __forceinline__ void tt_embedding_forward_chain_step_multi(const TtEmbeddingForwardShape& s, int t,
                                                                              float* const* out, const float* const* in,
                                                                              const float* G, bool avec, int lane) {
    const int r = s.R[t + 1], ldo = s.ld[t], ldi = s.ld[t - 1];
    const int m = s.step_m[t], k = s.step_k[t], n = s.step_n[t], rt = s.step_rt[t], cw = s.step_cw[t];
    if (cw == 4) {
        if (avec) {
            if (rt == 4) tt_embedding_forward_warp_step_multi_tiled<P, 4, 4, true>(out, r, ldo, in, ldi, G, m, k, n, lane);
            else if (rt == 2) tt_embedding_forward_warp_step_multi_tiled<P, 2, 4, true>(out, r, ldo, in, ldi, G, m, k, n, lane);
            else tt_embedding_forward_warp_step_multi_tiled<P, 1, 4, true>(out, r, ldo, in, ldi, G, m, k, n, lane);
        } else {
            if (rt == 4) tt_embedding_forward_warp_step_multi_tiled<P, 4, 4, false>(out, r, ldo, in, ldi, G, m, k, n, lane);
            else if (rt == 2) tt_embedding_forward_warp_step_multi_tiled<P, 2, 4, false>(out, r, ldo, in, ldi, G, m, k, n, lane);
            else tt_embedding_forward_warp_step_multi_tiled<P, 1, 4, false>(out, r, ldo, in, ldi, G, m, k, n, lane);
        }
    } else {                                             // cw = 1: scalar rows of in_p (avec would not pay)
        if (rt == 4) tt_embedding_forward_warp_step_multi_tiled<P, 4, 1, false>(out, r, ldo, in, ldi, G, m, k, n, lane);
        else if (rt == 2) tt_embedding_forward_warp_step_multi_tiled<P, 2, 1, false>(out, r, ldo, in, ldi, G, m, k, n, lane);
        else tt_embedding_forward_warp_step_multi_tiled<P, 1, 1, false>(out, r, ldo, in, ldi, G, m, k, n, lane);
    }
}

// a block's shared memory, carved as the plan says (see TtEmbeddingForwardPlan6)
struct TtEmbeddingForwardV6Smem {
    int64_t* idx;
    int* lid;
    int* alias;
    int* prim;
    int* np;
    float* gs[2];
    float* stage;
    float* slots;
};
__host__ __device__ inline TtEmbeddingForwardV6Smem tt_embedding_forward_v6_carve(void* base, const TtEmbeddingForwardPlan6& pl, int C) {
    TtEmbeddingForwardV6Smem m;
    m.idx = reinterpret_cast<int64_t*>(base);
    m.lid = reinterpret_cast<int*>(m.idx + C);
    m.alias = m.lid + C;
    m.prim = m.alias + C;
    m.np = m.prim + C;
    m.gs[0] = reinterpret_cast<float*>(reinterpret_cast<char*>(base) + tt_embedding_forward_v6_meta_bytes(C));
    m.gs[1] = m.gs[0] + pl.g.slice_pad[0];
    m.stage = m.gs[1] + pl.g.slice_pad[1];
    m.slots = m.stage + (size_t)C * pl.stage_per_lookup;
    return m;
}

// the slice of core t that lookup j of the item reads: the item's copy (grouped core) or its own staged copy
__host__ __device__ inline const float* tt_embedding_forward_v6_slice(const TtEmbeddingForwardV6Smem& m,
                                                                      const TtEmbeddingForwardPlan6& pl, int t, int j) {
    if (pl.grouped[t]) return t == pl.g.core[0] ? m.gs[0] : m.gs[1];
    return m.stage + (size_t)j * pl.stage_per_lookup + pl.stage_off[t];
}

// block phase 1 (all threads): the item's grouped slices (cp.async) and its lookups' ids and indices
__host__ __device__ inline void tt_embedding_forward_v6_stage_grouped(const TtEmbeddingForwardV6Smem& m, const TtEmbeddingForwardCores& cores,
                                                                      const TtEmbeddingForwardShape& s, const TtEmbeddingForwardPlan6& pl,
                                                                      uint32_t key, int tid, int nthreads) {
    for (int c = 0; c < pl.g.ncores; c++)                 // (c ? gs[1] : gs[0]: no dynamic index, m stays in registers)
        tt_embedding_forward_v6_copy(c ? m.gs[1] : m.gs[0], tt_embedding_forward_group_slice(cores, s, pl.g, key, c),
                                     s.slice[pl.g.core[c]], tid, nthreads);
}
__host__ __device__ inline void tt_embedding_forward_v6_load_meta(const TtEmbeddingForwardV6Smem& m, const int* perm, const int64_t* sidx,
                                                                  int start, int cnt, int tid, int nthreads) {
    for (int j = tid; j < cnt; j += nthreads) {
        m.lid[j] = perm[start + j];
        m.idx[j] = sidx[start + j];
    }
}

// block phase 2: every lookup's other slices (cp.async, a warp per (lookup, core)); and alias[j] = the first
// lookup of the item with the same index (j itself for a primary)
__host__ __device__ inline void tt_embedding_forward_v6_stage_lookups(const TtEmbeddingForwardV6Smem& m, const TtEmbeddingForwardCores& cores,
                                                                      const TtEmbeddingForwardShape& s, const TtEmbeddingForwardPlan6& pl,
                                                                      uint32_t key, int cnt, int warp, int W, int lane) {
    const int tbl = tt_embedding_forward_group_table(s, pl.g, key);
    for (int pr = warp; pr < cnt * pl.n_ng; pr += W) {
        const int j = pr / pl.n_ng, t = pl.ng_core[pr - j * pl.n_ng];
        tt_embedding_forward_v6_copy(m.stage + (size_t)j * pl.stage_per_lookup + pl.stage_off[t],
                                     tt_embedding_forward_slice_ptr(cores, s, tbl, m.idx[j], t), s.slice[t], lane, 32);
    }
}
__host__ __device__ inline void tt_embedding_forward_v6_alias(const TtEmbeddingForwardV6Smem& m, int cnt, int tid, int nthreads) {
    for (int j = tid; j < cnt; j += nthreads) {
        const int64_t x = m.idx[j];
        int a = j;
        for (int jj = 0; jj < j; jj++)
            if (m.idx[jj] == x) { a = jj; break; }
        m.alias[j] = a;
    }
}

// block phase 3: prim[0..np) = the primaries in item order
__host__ __device__ inline void tt_embedding_forward_v6_primaries(const TtEmbeddingForwardV6Smem& m, int cnt, int tid, int nthreads) {
    for (int j = tid; j < cnt; j += nthreads) {
        int rank = 0;
        for (int jj = 0; jj < j; jj++) rank += m.alias[jj] == jj ? 1 : 0;
        const int is_prim = m.alias[j] == j ? 1 : 0;
        if (is_prim) m.prim[rank] = j;
        if (j == cnt - 1) *m.np = rank + is_prim;
    }
}

// block phase 4, per warp: primaries P*warp .. P*warp + nw - 1 (nw = 0 .. P), each in its own slot
struct TtEmbeddingForwardV6Warp {
    int nw;
    int j[TT_EMBEDDING_FORWARD_V6_P];
    float* slot[TT_EMBEDDING_FORWARD_V6_P];
};
__host__ __device__ inline int tt_embedding_forward_v6_warp_lookups(TtEmbeddingForwardV6Warp& w, const TtEmbeddingForwardV6Smem& m,
                                                                    const TtEmbeddingForwardPlan6& pl, int warp) {
    const int np = *m.np, p0 = warp * TT_EMBEDDING_FORWARD_V6_P;
    w.nw = np <= p0 ? 0 : (np - p0 < TT_EMBEDDING_FORWARD_V6_P ? np - p0 : TT_EMBEDDING_FORWARD_V6_P);
TT_EMBEDDING_FORWARD_UNROLL
    for (int p = 0; p < TT_EMBEDDING_FORWARD_V6_P; p++) {
        w.j[p] = w.nw > 0 ? m.prim[p0 + (p < w.nw ? p : w.nw - 1)] : 0;
        w.slot[p] = m.slots + ((size_t)warp * TT_EMBEDDING_FORWARD_V6_P + p) * pl.slot_floats;
    }
    return w.nw;
}

// M_t of a slot: the row (D values) for t = T-1, else the odd-step (t odd) or even-step intermediate
__host__ __device__ inline float* tt_embedding_forward_v6_buf(const TtEmbeddingForwardShape& s, const TtEmbeddingForwardPlan6& pl,
                                                              float* slot, int t) {
    return t == s.T - 1 ? slot + pl.mid0 + pl.mid1 : ((t & 1) ? slot : slot + pl.mid0);
}

// Chain step t of the warp's lookups, lane `lane` (the warp calls it for t = 1..T-1 with a __syncwarp after
// each): a grouped core's step as one step of both lookups (shared loads of the item's slice), any other
// step (or a lone lookup) one lookup at a time from its staged slice.
static_assert(TT_EMBEDDING_FORWARD_V6_P == 2, "version 6's step dispatch is written for two lookups per warp");
__host__ __device__ __forceinline__ void tt_embedding_forward_v6_step(const TtEmbeddingForwardShape& s, const TtEmbeddingForwardPlan6& pl,
                                                                      const TtEmbeddingForwardV6Smem& m, const TtEmbeddingForwardV6Warp& w,
                                                                      int t, int lane) {
    const bool avec = t == 1 && pl.avec1;
    float* out[2];
    const float* in[2];
TT_EMBEDDING_FORWARD_UNROLL
    for (int p = 0; p < 2; p++) {
        out[p] = tt_embedding_forward_v6_buf(s, pl, w.slot[p], t);
        in[p] = t == 1 ? tt_embedding_forward_v6_slice(m, pl, 0, w.j[p]) : tt_embedding_forward_v6_buf(s, pl, w.slot[p], t - 1);
    }
    if (pl.grouped[t] && w.nw == 2) {
        tt_embedding_forward_chain_step_multi<2>(s, t, out, in, tt_embedding_forward_v6_slice(m, pl, t, w.j[0]), avec, lane);
    } else {
        for (int p = 0; p < w.nw; p++) {
            float* o[1] = {p ? out[1] : out[0]};
            const float* i1[1] = {p ? in[1] : in[0]};
            tt_embedding_forward_chain_step_multi<1>(s, t, o, i1, tt_embedding_forward_v6_slice(m, pl, t, p ? w.j[1] : w.j[0]), avec, lane);
        }
    }
}

// the warp's rows (finished, after a __syncwarp) to every lookup of the item that has their index
__host__ __device__ inline void tt_embedding_forward_v6_write_rows(float* rowbuf, const TtEmbeddingForwardShape& s,
                                                                   const TtEmbeddingForwardPlan6& pl, const TtEmbeddingForwardV6Smem& m,
                                                                   const TtEmbeddingForwardV6Warp& w, int cnt, int lane) {
    for (int p = 0; p < w.nw; p++) {
        const int j = p ? w.j[1] : w.j[0];
        const float* row = tt_embedding_forward_v6_buf(s, pl, p ? w.slot[1] : w.slot[0], s.T - 1);
        for (int jj = j; jj < cnt; jj++) {
            if (m.alias[jj] != j) continue;
            float* dst = rowbuf + (int64_t)m.lid[jj] * s.D;
            for (int e = lane; e < s.D; e += 32) dst[e] = row[e];
        }
    }
}

// Version 6, the chains: block b takes item b = {start, count, key} of the plan (count 0: nothing to do).
//   1  cp.async of the item's grouped slice(s); lookup ids and indices of positions start.. into shared memory
//   2  cp.async of each lookup's other slices (core 0 included); duplicates found (alias); wait for the copies
//   3  the primaries listed
//   4  warp w runs the chains of primaries 2w, 2w+1 entirely from shared memory and writes each row to every
//      lookup of the item with that index
// Every global load of the block is issued in phases 1-2, before the first barrier it waits on.
__global__ void tt_embedding_forward_kernel6(float* __restrict__ rowbuf, const int4* __restrict__ items, const int* __restrict__ perm,
                                             const int64_t* __restrict__ sidx, const __grid_constant__ TtEmbeddingForwardCores cores,
                                             const __grid_constant__ TtEmbeddingForwardShape s,
                                             const __grid_constant__ TtEmbeddingForwardPlan6 pl) {
    extern __shared__ float4 tt_embedding_forward_smem6[];
    const int4 item = items[blockIdx.x];
    if (item.y == 0) return;                                       // block-uniform: an unused item
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, W = blockDim.x / 32;
    const TtEmbeddingForwardV6Smem m = tt_embedding_forward_v6_carve(tt_embedding_forward_smem6, pl, W * TT_EMBEDDING_FORWARD_V6_P);
    const int start = item.x, cnt = item.y;
    const uint32_t key = (uint32_t)item.z;
    tt_embedding_forward_v6_stage_grouped(m, cores, s, pl, key, threadIdx.x, blockDim.x);
    tt_embedding_forward_v6_load_meta(m, perm, sidx, start, cnt, threadIdx.x, blockDim.x);
    __syncthreads();                                               // idx, lid
    tt_embedding_forward_v6_stage_lookups(m, cores, s, pl, key, cnt, warp, W, lane);
    tt_embedding_forward_v6_alias(m, cnt, threadIdx.x, blockDim.x);
    tt_embedding_forward_async_wait();                             // this thread's copies landed
    __syncthreads();                                               // everyone's copies, alias
    tt_embedding_forward_v6_primaries(m, cnt, threadIdx.x, blockDim.x);
    __syncthreads();                                               // prim, np
    TtEmbeddingForwardV6Warp w;
    if (tt_embedding_forward_v6_warp_lookups(w, m, pl, warp) > 0) {   // warp-uniform
        for (int t = 1; t < s.T; t++) {
            tt_embedding_forward_v6_step(s, pl, m, w, t, lane);
            __syncwarp();                                          // M_t complete before step t+1 (or the copy) reads it
        }
        tt_embedding_forward_v6_write_rows(rowbuf, s, pl, m, w, cnt, lane);
    }
}

// ---- version 7: three cores, the heavy core streamed row by row through the whole warp

// Version 7 is version 3's bag per block with a different split of each lookup's work over the lanes,
// written for T = 3 (FBTT's and TT-Rec's usual chain). Step 1, M_1 = M_0 (q_0 x R_1) . G_1 (R_1 x q_1 R_2),
// is done by rows of G_1: row k_1 holds q_1 R_2 = 128 floats (one float4 per lane), so every load of the
// warp is 512 consecutive bytes and each lane keeps its 4 columns (a_1, k_2..k_2+3) of M_1 in q_0 x 4
// registers; the q_0 factors M_0[.][k_1] that all lanes need come from a transposed copy of G_0's slice in
// shared memory (one broadcast float4 per k_1). Step 2 needs the sum over all R_2 values of k_2, which are
// spread over R_2 / 4 lanes: each lane multiplies its 4 k_2 by G_2's matching rows (16 values in
// registers) and keeps the partial (q_0 x q_2 values for its a_1). Partials are linear, so they are summed
// over the warp's lookups of the bag first and across lanes (xor shuffles within the R_2 / 4 lanes of one
// a_1) once per bag, not once per lookup. Per lookup a warp issues 32 float4 loads of G_1, 32 shared
// float4 loads and 640 FFMA at the default, and never stages G_1; with index math, staging and loop
// control ncu counts ~1,500 warp instructions per lookup (version 3: ~1,900).
// Lanes whose columns fall past q_1 R_2 (< 128) sit idle; q_1 R_2 > 128 is not handled (skipped).
#define TT_EMBEDDING_FORWARD_V7_COLS 128
#define TT_EMBEDDING_FORWARD_V7_KU 8          // G_1 rows loaded per batch (unrolled)

// R_1 rounded up to whole batches: the transposed G_0 buffer is zero-padded to it
__host__ __device__ inline int tt_embedding_forward_v7_r1_pad(int R1) {
    return (R1 + TT_EMBEDDING_FORWARD_V7_KU - 1) / TT_EMBEDDING_FORWARD_V7_KU * TT_EMBEDDING_FORWARD_V7_KU;
}

// One lane's share of one lookup: g0t = G_0's slice transposed (R_1 padded x Q0, zeros past R_1), g1 = G_1's
// slice (R_1 rows of q_1 R_2 floats), g2 = G_2's slice (R_2 x Q2). Adds this lane's partial of the row,
// out[a_0][a_1][a_2] for its a_1 summed over its 4 values of k_2 only, into part[Q0][Q2]. The CPU tests run
// it for lanes 0..31 and sum the partials as the kernel's shuffles do. G1_GLOBAL: G_1 read through the
// read-only cache (version 7); false: from shared memory (version 8).
template <int Q0, int Q2, bool G1_GLOBAL = true>
__host__ __device__ __forceinline__ void tt_embedding_forward_v7_lane(float (&part)[Q0][Q2], const float* __restrict__ g0t,
                                                                      const float* __restrict__ g1,
                                                                      const float* __restrict__ g2, int R1, int R2,
                                                                      int ncols, int lane) {
    const int col = 4 * lane;
    if (col >= ncols) return;                              // idle lane (q_1 R_2 < 128)
    const int k2 = col % R2;
    float g2r[4][Q2];                                      // G_2 rows k_2..k_2+3
TT_EMBEDDING_FORWARD_UNROLL
    for (int kk = 0; kk < 4; kk++) {
        if constexpr (Q2 == 4) {                           // a row is 16 aligned bytes (slices are R_2 * 4 floats)
            const float4 t = *reinterpret_cast<const float4*>(g2 + (k2 + kk) * 4);
            g2r[kk][0] = t.x; g2r[kk][1] = t.y; g2r[kk][2] = t.z; g2r[kk][3] = t.w;
        } else {
TT_EMBEDDING_FORWARD_UNROLL
            for (int a2 = 0; a2 < Q2; a2++) g2r[kk][a2] = g2[(k2 + kk) * Q2 + a2];
        }
    }
    float acc[Q0][4];
TT_EMBEDDING_FORWARD_UNROLL
    for (int a0 = 0; a0 < Q0; a0++)
TT_EMBEDDING_FORWARD_UNROLL
        for (int c = 0; c < 4; c++) acc[a0][c] = 0.0f;
    const float* g1c = g1 + col;
    const int R1p = tt_embedding_forward_v7_r1_pad(R1);
    for (int k = 0; k < R1p; k += TT_EMBEDDING_FORWARD_V7_KU) {
        float4 v[TT_EMBEDDING_FORWARD_V7_KU];              // a batch of G_1 rows in flight
TT_EMBEDDING_FORWARD_UNROLL
        for (int u = 0; u < TT_EMBEDDING_FORWARD_V7_KU; u++) {
            const float4* p = reinterpret_cast<const float4*>(g1c + (int64_t)(k + u) * ncols);
#ifdef __CUDA_ARCH__
            if constexpr (G1_GLOBAL) v[u] = (k + u < R1) ? __ldg(p) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            else v[u] = (k + u < R1) ? *p : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#else
            v[u] = (k + u < R1) ? *p : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#endif
        }
TT_EMBEDDING_FORWARD_UNROLL
        for (int u = 0; u < TT_EMBEDDING_FORWARD_V7_KU; u++) {
            float w[Q0];                                   // M_0[a_0][k_1] for every a_0
            if constexpr (Q0 == 4) {
                const float4 t = *reinterpret_cast<const float4*>(g0t + (k + u) * 4);
                w[0] = t.x; w[1] = t.y; w[2] = t.z; w[3] = t.w;
            } else {
TT_EMBEDDING_FORWARD_UNROLL
                for (int a0 = 0; a0 < Q0; a0++) w[a0] = g0t[(k + u) * Q0 + a0];
            }
TT_EMBEDDING_FORWARD_UNROLL
            for (int a0 = 0; a0 < Q0; a0++) {
                acc[a0][0] = fmaf(w[a0], v[u].x, acc[a0][0]);
                acc[a0][1] = fmaf(w[a0], v[u].y, acc[a0][1]);
                acc[a0][2] = fmaf(w[a0], v[u].z, acc[a0][2]);
                acc[a0][3] = fmaf(w[a0], v[u].w, acc[a0][3]);
            }
        }
    }
TT_EMBEDDING_FORWARD_UNROLL
    for (int a0 = 0; a0 < Q0; a0++)
TT_EMBEDDING_FORWARD_UNROLL
        for (int kk = 0; kk < 4; kk++)
TT_EMBEDDING_FORWARD_UNROLL
            for (int a2 = 0; a2 < Q2; a2++) part[a0][a2] = fmaf(acc[a0][kk], g2r[kk][a2], part[a0][a2]);
}

// G_0's slice (Q0 x R_1, row-major) into dst as R_1p x Q0 (transposed), zeros past R_1; lane-strided
template <int Q0>
__host__ __device__ __forceinline__ void tt_embedding_forward_v7_stage_g0(float* __restrict__ dst, const float* __restrict__ g0,
                                                                          int R1, int lane) {
    const int R1p = tt_embedding_forward_v7_r1_pad(R1);
    for (int k = lane; k < R1p; k += 32) {
        float w[Q0];
TT_EMBEDDING_FORWARD_UNROLL
        for (int a0 = 0; a0 < Q0; a0++) w[a0] = k < R1 ? g0[a0 * R1 + k] : 0.0f;
        if constexpr (Q0 == 4) {
            *reinterpret_cast<float4*>(dst + k * 4) = make_float4(w[0], w[1], w[2], w[3]);
        } else {
TT_EMBEDDING_FORWARD_UNROLL
            for (int a0 = 0; a0 < Q0; a0++) dst[k * Q0 + a0] = w[a0];
        }
    }
}

// the partials of the R_2 / 4 lanes of each a_1 (consecutive lanes, an aligned power of two) summed into every
// one of them (xor shuffles; every lane of the warp calls it)
template <int Q0, int Q2>
__device__ __forceinline__ void tt_embedding_forward_v7_reduce(float (&part)[Q0][Q2], int R2) {
    for (int off = 1; off < R2 / 4; off *= 2)
TT_EMBEDDING_FORWARD_UNROLL
        for (int a0 = 0; a0 < Q0; a0++)
TT_EMBEDDING_FORWARD_UNROLL
            for (int a2 = 0; a2 < Q2; a2++) part[a0][a2] += __shfl_xor_sync(0xffffffffu, part[a0][a2], off);
}

// A bag's pooled row from its block: one lane per a_1 (`writer`) puts the warp's sums into sums[warp], then
// the W rows are added in warp order and the bag written once. Every thread calls it; two barriers.
template <int Q0, int Q2>
__device__ __forceinline__ void tt_embedding_forward_v7_write_bag(floatX* __restrict__ out, int64_t bag, float* sums,
                                                                  const float (&part)[Q0][Q2], const TtEmbeddingForwardShape& s,
                                                                  int warp, int W, int a1, bool writer) {
    if (writer)
TT_EMBEDDING_FORWARD_UNROLL
        for (int a0 = 0; a0 < Q0; a0++)
TT_EMBEDDING_FORWARD_UNROLL
            for (int a2 = 0; a2 < Q2; a2++) sums[warp * s.D_pad + (a0 * s.q[1] + a1) * Q2 + a2] = part[a0][a2];
    __syncthreads();
    for (int e = threadIdx.x; e < s.D; e += blockDim.x) {
        float sum = 0.0f;
        for (int w = 0; w < W; w++) sum += sums[w * s.D_pad + e];
        out[bag * s.D + e] = from_float<floatX>(sum);
    }
    __syncthreads();                                        // before the next bag's sums
}

inline size_t tt_embedding_forward_smem7_bytes(const TtEmbeddingForwardShape& s, int warps) {
    const int q0 = s.T == 3 ? s.q[0] : 1;
    return sizeof(float) * (size_t)warps * (2 * (size_t)tt_embedding_forward_v7_r1_pad(s.R[1]) * q0 + s.D_pad);
}

// Bag per block; warp w takes lookups w, w+W, ... of the bag. Shared memory: per warp two transposed G_0
// buffers (alternating, so one __syncwarp per lookup suffices) and the warp's D sums of the bag.
template <int Q0, int Q2>
__global__ void tt_embedding_forward_kernel7(floatX* __restrict__ out, const int64_t* __restrict__ indices,
                                             const int64_t* __restrict__ offsets,
                                             const __grid_constant__ TtEmbeddingForwardCores cores,
                                             const __grid_constant__ TtEmbeddingForwardShape s) {
    extern __shared__ float4 tt_embedding_forward_smem7[];
    float* smem = reinterpret_cast<float*>(tt_embedding_forward_smem7);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, W = blockDim.x / 32;
    const int R1 = s.R[1], R2 = s.R[2], q1 = s.q[1], ncols = q1 * R2;
    const int g0t_floats = tt_embedding_forward_v7_r1_pad(R1) * Q0;
    float* g0t = smem + warp * 2 * g0t_floats;
    float* sums = smem + W * 2 * g0t_floats;              // [W][D_pad]
    const int col = 4 * lane, a1 = col / R2, k2 = col % R2;
    int parity = 0;
    const int64_t nbags = (int64_t)s.tables * s.B;
    for (int64_t bag = blockIdx.x; bag < nbags; bag += gridDim.x) {
        const int tbl = (int)(bag / s.B);
        const int64_t end = offsets[bag + 1];
        float part[Q0][Q2];
TT_EMBEDDING_FORWARD_UNROLL
        for (int a0 = 0; a0 < Q0; a0++)
TT_EMBEDDING_FORWARD_UNROLL
            for (int a2 = 0; a2 < Q2; a2++) part[a0][a2] = 0.0f;
        int64_t n = offsets[bag] + warp;
        int64_t idx_next = n < end ? indices[n] : 0;                 // one lookup ahead
        for (; n < end; n += W) {                                    // warp-uniform loop
            const int64_t idx = idx_next;
            if (n + W < end) idx_next = indices[n + W];
            float* buf = g0t + parity * g0t_floats;
            parity ^= 1;
            tt_embedding_forward_v7_stage_g0<Q0>(buf, tt_embedding_forward_slice_ptr(cores, s, tbl, idx, 0), R1, lane);
            __syncwarp();
            tt_embedding_forward_v7_lane<Q0, Q2>(part, buf, tt_embedding_forward_slice_ptr(cores, s, tbl, idx, 1),
                                                 tt_embedding_forward_slice_ptr(cores, s, tbl, idx, 2), R1, R2, ncols, lane);
        }
        tt_embedding_forward_v7_reduce<Q0, Q2>(part, R2);
        tt_embedding_forward_v7_write_bag<Q0, Q2>(out, bag, sums, part, s, warp, W, a1, k2 == 0 && col < ncols);
    }
}

// ---- version 8: version 7's lanes fed by a ring of asynchronous copies

// Version 7 issues a batch of 8 G_1 rows and waits for it: four L2 round trips per lookup, plus the index and
// G_0 before them, with 105 registers (4 warps per scheduler) to hide them; ncu on the H200 shows it issuing on
// 29% of cycles with the L2 at 29% of its throughput. Version 8 moves the waiting out of the lookup: each warp
// owns a ring of S stages in shared memory and, while it computes lookup k, the copies of lookups k+1 ..
// k+S-1 are in flight (cp.async: G_1's slice in 16-byte pieces that skip L1, G_0's slice transposed in 4-byte
// pieces, G_2's slice), the index of lookup k+S one step further ahead. The warp's stream of lookups runs
// across its block's bags (grid-stride over bags, a block keeps its warps' bags in step), so the ring does not
// drain at a bag's end. The arithmetic is version 7's, from shared memory: the same lane function. S = 2
// (17 KB per stage at the default; S = 3 and 4 measured no faster at B = 512 and slower at B = 4096).
#ifndef TT_EMBEDDING_FORWARD_V8_STAGES       // scripts/tt_forward_sweep.sh 7-9 builds 3 beside the default
#define TT_EMBEDDING_FORWARD_V8_STAGES 2
#endif

__device__ __forceinline__ void tt_embedding_forward_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void tt_embedding_forward_async_wait_group() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

// one stage: G_1's slice (R_1 rows of q_1 R_2 floats), G_0's slice transposed and zero-padded (R_1p x 4),
// G_2's slice (R_2 x 4); every part a multiple of 4 floats, so 16-byte aligned
__host__ __device__ inline int64_t tt_embedding_forward_v8_stage_floats(const TtEmbeddingForwardShape& s) {
    const int R1p = tt_embedding_forward_v7_r1_pad(s.R[1]);
    return (int64_t)s.R[1] * s.q[1] * s.R[2] + (int64_t)R1p * 4 + (int64_t)s.R[2] * 4;
}

inline size_t tt_embedding_forward_smem8_bytes(const TtEmbeddingForwardShape& s, int warps) {
    if (s.T != 3) return 0;
    return sizeof(float) * (size_t)warps * (TT_EMBEDDING_FORWARD_V8_STAGES * (size_t)tt_embedding_forward_v8_stage_floats(s) + s.D_pad);
}

// a warp's place in its stream of lookups: bags blockIdx.x, + gridDim.x, ...; in each, lookups start + warp, + W, ...
struct TtEmbeddingForwardV8Cursor {
    int64_t bag, n, end;
};

__device__ __forceinline__ void tt_embedding_forward_v8_settle(TtEmbeddingForwardV8Cursor& c, const int64_t* __restrict__ offsets,
                                                               int64_t nbags, int warp) {
    while (c.bag < nbags && c.n >= c.end) {                // past this bag's lookups (or an empty bag): the next bag
        c.bag += gridDim.x;
        if (c.bag < nbags) {
            c.n = offsets[c.bag] + warp;
            c.end = offsets[c.bag + 1];
        }
    }
}

// starts the copies of one lookup into a stage (every lane takes a share; no wait here)
template <int Q0>
__device__ __forceinline__ void tt_embedding_forward_v8_fetch(float* stage, const TtEmbeddingForwardCores& cores,
                                                              const TtEmbeddingForwardShape& s, int tbl, int64_t idx, int lane) {
    const int R1 = s.R[1], R2 = s.R[2];
    const int64_t g1_floats = (int64_t)R1 * s.q[1] * R2;
    const float* g0 = tt_embedding_forward_slice_ptr(cores, s, tbl, idx, 0);
    const float* g1 = tt_embedding_forward_slice_ptr(cores, s, tbl, idx, 1);
    const float* g2 = tt_embedding_forward_slice_ptr(cores, s, tbl, idx, 2);
    for (int64_t c = lane; c < g1_floats / 4; c += 32) tt_embedding_forward_async_copy(stage + 4 * c, g1 + 4 * c, true);
    float* t0 = stage + g1_floats;                          // transposed: element (a_0, k_1) at k_1 * 4 + a_0
    for (int k = lane; k < R1; k += 32)
        for (int a0 = 0; a0 < Q0; a0++) tt_embedding_forward_async_copy(t0 + k * 4 + a0, g0 + a0 * R1 + k, false);
    float* s2 = t0 + tt_embedding_forward_v7_r1_pad(R1) * 4;
    for (int c = lane; c < R2; c += 32) tt_embedding_forward_async_copy(s2 + 4 * c, g2 + 4 * c, true);
}

template <int Q0, int Q2>
__global__ void tt_embedding_forward_kernel8(floatX* __restrict__ out, const int64_t* __restrict__ indices,
                                             const int64_t* __restrict__ offsets,
                                             const __grid_constant__ TtEmbeddingForwardCores cores,
                                             const __grid_constant__ TtEmbeddingForwardShape s) {
    static_assert(Q0 == 4, "version 8's transposed G_0 rows are float4");
    constexpr int S = TT_EMBEDDING_FORWARD_V8_STAGES;
    extern __shared__ float4 tt_embedding_forward_smem8[];
    float* smem = reinterpret_cast<float*>(tt_embedding_forward_smem8);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, W = blockDim.x / 32;
    const int R1 = s.R[1], R2 = s.R[2], q1 = s.q[1], ncols = q1 * R2, R1p = tt_embedding_forward_v7_r1_pad(R1);
    const int64_t stage_floats = tt_embedding_forward_v8_stage_floats(s), g1_floats = (int64_t)R1 * ncols;
    float* ring = smem + warp * S * stage_floats;
    float* sums = smem + W * S * stage_floats;             // [W][D_pad]
    const int col = 4 * lane, a1 = col / R2, k2 = col % R2;
    const int64_t nbags = (int64_t)s.tables * s.B;
    for (int st = 0; st < S; st++)                          // the transposed G_0's padding rows stay zero
        for (int e = R1 * 4 + lane; e < R1p * 4; e += 32) ring[st * stage_floats + g1_floats + e] = 0.0f;

    // the producer: `pre` is one lookup ahead of the next fetch, with its index already loaded
    TtEmbeddingForwardV8Cursor pre = {(int64_t)blockIdx.x, 0, 0};
    if (pre.bag < nbags) { pre.n = offsets[pre.bag] + warp; pre.end = offsets[pre.bag + 1]; }
    tt_embedding_forward_v8_settle(pre, offsets, nbags, warp);
    int64_t idx_pre = pre.bag < nbags ? indices[pre.n] : 0;
    auto fetch_next = [&](float* stage) {                  // copies of the lookup at `pre` (if any), then advance
        if (pre.bag < nbags) {
            tt_embedding_forward_v8_fetch<Q0>(stage, cores, s, (int)(pre.bag / s.B), idx_pre, lane);
            pre.n += W;
            tt_embedding_forward_v8_settle(pre, offsets, nbags, warp);
            if (pre.bag < nbags) idx_pre = indices[pre.n];
        }
        tt_embedding_forward_async_commit();               // one group per lookup slot, empty past the stream's end
    };
    for (int st = 0; st + 1 < S; st++) fetch_next(ring + st * stage_floats);

    int k = 0;                                             // the warp's lookup counter: stage k % S
    for (int64_t bag = blockIdx.x; bag < nbags; bag += gridDim.x) {
        float part[Q0][Q2];
TT_EMBEDDING_FORWARD_UNROLL
        for (int a0 = 0; a0 < Q0; a0++)
TT_EMBEDDING_FORWARD_UNROLL
            for (int a2 = 0; a2 < Q2; a2++) part[a0][a2] = 0.0f;
        const int64_t end = offsets[bag + 1];
        for (int64_t n = offsets[bag] + warp; n < end; n += W, k++) {   // warp-uniform loop
            fetch_next(ring + ((k + S - 1) % S) * stage_floats);        // the stage read at k - 1 (synced below)
            tt_embedding_forward_async_wait_group<S - 1>();              // this lane's copies of lookup k landed
            __syncwarp();                                                // ... and every lane's
            const float* stage = ring + (k % S) * stage_floats;
            const float* t0 = stage + g1_floats;
            tt_embedding_forward_v7_lane<Q0, Q2, false>(part, t0, stage, t0 + R1p * 4, R1, R2, ncols, lane);
            __syncwarp();                                                // stage k % S is free for lookup k + S
        }
        tt_embedding_forward_v7_reduce<Q0, Q2>(part, R2);
        tt_embedding_forward_v7_write_bag<Q0, Q2>(out, bag, sums, part, s, warp, W, a1, k2 == 0 && col < ncols);
    }
    tt_embedding_forward_async_wait_group<0>();             // nothing may be in flight at exit (empty groups only)
}

// ---- version 9: grouped by core 1 without a sort: each block finds its key's lookups itself

// Versions 3, 7 and 8 are three different ways to stream each lookup's own 16 KB slice of G_1 from L2, and
// all three land at 44-53 us at the default (174 MB at 3.3-4 TB/s). The hypothesis behind version 9: the
// L2 -> SM path is the limit, so the slice must be shared between lookups (measured: it was not the limit;
// version 9 moves a quarter of the bytes in about the same time; see the header). Versions 4-6 grouped by
// sorting first and paid for it in launches
// (CUB: 6 launches) or in a one-block planner (version 6: 44 us of its 88). Version 9 does no planning: block
// (key, segment) owns one value (table, i_1) of core 1 and one contiguous segment of that table's lookups; it
// reads every index of its segment, keeps the lookups whose i_1 matches (a shared-memory list), and computes
// them against ONE copy of G_1's slice in shared memory. The redundant index reads cost
// (keys) x (lookups) x 8 bytes of L2 traffic in total: 220 x 10,240 x 8 = 18 MB at the default, against the
// 164 MB of G_1 slices it saves. Equal indices in a block's list (Zipf's hot rows) are computed once and
// copied. Each lookup runs version 7's lane function (G_1 from shared memory, G_0 transposed and G_2 staged
// per warp with cp.async, the next lookup's staged while this one computes), its partials reduced across the
// lanes of each a_1, and its row written to a per-lookup buffer; version 4's pooling kernel sums every bag in
// lookup order. No float atomics: deterministic (integer atomics only order the list, and a row does not
// depend on where it is computed). Two launches. Items (key, segment) are handed to persistent blocks by a
// global counter (the last block out resets it), so a Poisson-heavy key does not set the kernel's tail; the
// host sizes segments for about TARGET = 16 lookups per item.
#define TT_EMBEDDING_FORWARD_V9_UNROLL 4      // indices each thread loads per pass of the scan
#ifndef TT_EMBEDDING_FORWARD_V9_TARGET       // scripts/tt_forward_sweep.sh 7-9 builds 8 and 32 beside the default
#define TT_EMBEDDING_FORWARD_V9_TARGET 16     // lookups per item (key, segment) the host aims at
#endif

// Digits without a 64-bit division (version 9 reads every index of its segment: with int64 '/' and '%' its
// kernel executed 18.4M warp instructions in ncu, 16.2M with these). For x < 2^32 and a
// divisor d <= 2^32, q = mulhi64(x, floor(2^64 / d) + 1) is exactly floor(x / d): the multiplier's excess adds
// less than 2^-32 <= 1/d to x / d, whose fractional part is at most 1 - 1/d. Used when prod p < 2^32.
struct TtEmbeddingForwardFastDigits {
    uint64_t m_stride[3], m_p[3];
    uint32_t stride[3], p[3];
};

inline uint64_t tt_embedding_forward_fast_magic(uint64_t d) { return d == 1 ? 0 : ~0ull / d + 1; }  // d == 1: special-cased below

inline bool tt_embedding_forward_make_fast_digits(const TtEmbeddingForwardShape& s, TtEmbeddingForwardFastDigits& f) {
    if (s.T != 3 || s.prod_p >= (1ll << 32)) return false;             // so every stride and index < 2^32
    for (int t = 0; t < 3; t++) {
        f.stride[t] = (uint32_t)s.stride[t];
        f.p[t] = (uint32_t)s.p[t];
        f.m_stride[t] = tt_embedding_forward_fast_magic(f.stride[t]);
        f.m_p[t] = tt_embedding_forward_fast_magic(f.p[t]);
    }
    return true;
}

// (x / stride[t]) % p[t] for x < 2^32 (host-callable: the CPU test checks it against '/' and '%')
__host__ __device__ __forceinline__ uint32_t tt_embedding_forward_fast_digit(const TtEmbeddingForwardFastDigits& f, uint64_t x, int t) {
#ifdef __CUDA_ARCH__
    const uint64_t q = f.stride[t] == 1 ? x : __umul64hi(x, f.m_stride[t]);
    const uint64_t r = f.p[t] == 1 ? 0 : q - f.p[t] * __umul64hi(q, f.m_p[t]);
#else
    const uint64_t q = f.stride[t] == 1 ? x : (uint64_t)(((unsigned __int128)x * f.m_stride[t]) >> 64);
    const uint64_t r = f.p[t] == 1 ? 0 : q - f.p[t] * (uint64_t)(((unsigned __int128)q * f.m_p[t]) >> 64);
#endif
    return (uint32_t)r;
}

__device__ __forceinline__ const float* tt_embedding_forward_v9_slice(const TtEmbeddingForwardCores& cores, const TtEmbeddingForwardShape& s,
                                                                      const TtEmbeddingForwardFastDigits& f, bool fast,
                                                                      int tbl, int64_t idx, int t) {
    const int64_t digit = fast ? (int64_t)tt_embedding_forward_fast_digit(f, (uint64_t)idx, t) : tt_embedding_forward_digit(idx, s.stride[t], s.p[t]);
    return cores.c[t] + ((int64_t)tbl * s.p[t] + digit) * s.slice[t];
}

// A block's list of the lookups its item matched (shared memory, cap entries each), and the counters
struct TtEmbeddingForwardV9List {
    int64_t* idx;     // the lookup's index
    int64_t* pos;     // the lookup's position (its row of rowbuf)
    int* first;       // the entry whose row this one copies: the first with the same index (9, 10), any one
                      // that computes (11, 12's hash set); itself when it computes
    int* uniq;        // the entries that compute (first[e] == e), in no particular order
    int* counters;    // [0] list length, [1] unique entries, [2] the block's item, [3] version 11's overflow
                      // position; [4 ..] version 11's matches per (chunk, warp) of a scan pass
    int* slots;       // versions 11 and 12: hash set of indices (2 cap entries; unused by 9 and 10), then 12's item table
};

#define TT_EMBEDDING_FORWARD_V11_CHUNKS 4    // version 11: 16-byte loads of 8 digits each thread makes per pass
#ifndef TT_EMBEDDING_FORWARD_V11_TARGET       // version 11: lookups per item at uniform indices (version 9's TARGET)
#define TT_EMBEDDING_FORWARD_V11_TARGET 64
#endif
#ifndef TT_EMBEDDING_FORWARD_V12_TARGET       // version 12: the most lookups an item gets (its items are sized by counts)
#define TT_EMBEDDING_FORWARD_V12_TARGET 48
#endif
__host__ __device__ inline int tt_embedding_forward_v11_slots(int cap) { return 2 * cap; }
inline size_t tt_embedding_forward_v9_list_bytes(int cap, bool slots = false) {
    return (size_t)cap * (2 * sizeof(int64_t) + 2 * sizeof(int)) + (4 + TT_EMBEDDING_FORWARD_V11_CHUNKS * 32) * sizeof(int) +
           (slots ? (size_t)tt_embedding_forward_v11_slots(cap) * sizeof(int) : 0);
}

__device__ __forceinline__ TtEmbeddingForwardV9List tt_embedding_forward_v9_list(void* base, int cap) {
    TtEmbeddingForwardV9List l;
    l.idx = reinterpret_cast<int64_t*>(base);
    l.pos = l.idx + cap;
    l.first = reinterpret_cast<int*>(l.pos + cap);
    l.uniq = l.first + cap;
    l.counters = l.uniq + cap;
    l.slots = l.counters + 4 + TT_EMBEDDING_FORWARD_V11_CHUNKS * 32;
    return l;
}

// per-block list capacity: two passes of the scan (a pass starts only while one more pass fits)
__host__ __device__ inline int tt_embedding_forward_v9_cap(int threads) { return 2 * TT_EMBEDDING_FORWARD_V9_UNROLL * threads; }

// segments per key: about TARGET lookups per block at uniform indices
inline int tt_embedding_forward_v9_segments(const TtEmbeddingForwardShape& s, int target = TT_EMBEDDING_FORWARD_V9_TARGET) {
    const int64_t per_table = s.tables > 0 ? s.nnz / s.tables : 0;
    const int64_t segs = (per_table + (int64_t)s.p[1] * target - 1) / ((int64_t)s.p[1] * target);
    return (int)std::min<int64_t>(std::max<int64_t>(segs, 1), 1024);
}

// shared memory: G_1's slice, two staging buffers per warp (G_0 transposed + G_2), the list
// (index int64, position, first equal entry, unique entries) and two counters
inline size_t tt_embedding_forward_smem9_bytes(const TtEmbeddingForwardShape& s, int warps) {
    if (s.T != 3) return 0;
    const int R1p = tt_embedding_forward_v7_r1_pad(s.R[1]);
    const size_t cap = (size_t)tt_embedding_forward_v9_cap(32 * warps);
    return sizeof(float) * ((size_t)s.R[1] * s.q[1] * s.R[2] + (size_t)warps * 2 * (R1p * 4 + s.R[2] * 4)) +
           tt_embedding_forward_v9_list_bytes(cap);
}

// the staged part of one lookup (G_0 transposed into t0, G_2 into t0 + R_1p * 4), by one warp
template <int Q0>
__device__ __forceinline__ void tt_embedding_forward_v9_fetch(float* t0, const TtEmbeddingForwardCores& cores,
                                                              const TtEmbeddingForwardShape& s, const TtEmbeddingForwardFastDigits& f,
                                                              bool fast, int tbl, int64_t idx, int lane) {
    const int R1 = s.R[1], R2 = s.R[2];
    const float* g0 = tt_embedding_forward_v9_slice(cores, s, f, fast, tbl, idx, 0);
    const float* g2 = tt_embedding_forward_v9_slice(cores, s, f, fast, tbl, idx, 2);
    for (int k = lane; k < R1; k += 32)
        for (int a0 = 0; a0 < Q0; a0++) tt_embedding_forward_async_copy(t0 + k * 4 + a0, g0 + a0 * R1 + k, false);
    float* s2 = t0 + tt_embedding_forward_v7_r1_pad(R1) * 4;
    for (int c = lane; c < R2; c += 32) tt_embedding_forward_async_copy(s2 + 4 * c, g2 + 4 * c, true);
    tt_embedding_forward_async_commit();
}

// ---- version 11's scan (used by the item loop below): a digit array and one ordered pass

// Version 10 measured no faster than version 9 (ncu: its kernel issues 9.6M instructions against 16.9M, in the
// same 47 us, with 12% of the warp slots active): the chain was not what held an item up. What does is the
// item's serial path: the scan (7 dependent passes of 512 int64 indices per item at 128 threads, each an L2
// round trip, a 64-bit digit and two barriers), the all-pairs search for equal indices, and 2.5 items per block
// in series. Version 11 computes every lookup's i_1 ONCE (a small kernel writes them as uint16: 20 KB at the
// default instead of 80 KB of indices re-read by every key) and scans them with 16-byte loads of 8 digits
// (two per 32-bit compare, __vcmpeq2), CHUNKS loads per thread in flight: 8,192 lookups per pass at 256
// threads. The list is filled in position order by a prefix count (each thread's 8-bit match mask, a warp scan
// of the counts, per-(chunk, warp) totals in shared memory): no atomics, so a pass may overfill the list: the
// entries past `cap` are dropped and the next round restarts at the first of them (its position is known
// exactly: the entry whose slot is cap). With 64 lookups per item the default's 220 items are one wave.
__global__ void tt_embedding_forward_kernel11_digits(uint16_t* __restrict__ digits1, int* __restrict__ key_count,
                                                     const int64_t* __restrict__ indices, const int64_t* __restrict__ offsets,
                                                     const __grid_constant__ TtEmbeddingForwardShape s,
                                                     const __grid_constant__ TtEmbeddingForwardFastDigits fd, bool fast) {
    tt_embedding_forward_allow_next();                      // the chain kernel's blocks may start (and wait)
    const int64_t l = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (l >= s.nnz) return;
    const int64_t idx = indices[l];
    const int d = (int)(fast ? tt_embedding_forward_fast_digit(fd, (uint64_t)idx, 1) : tt_embedding_forward_digit(idx, s.stride[1], s.p[1]));
    digits1[l] = (uint16_t)d;
    if (key_count) {                                        // the lookup's table: the last t with offsets[t * B] <= l
        int lo = 0, hi = s.tables - 1;
        while (lo < hi) {
            const int mid = (lo + hi + 1) / 2;
            if (offsets[(int64_t)mid * s.B] <= l) lo = mid; else hi = mid - 1;
        }
        atomicAdd(&key_count[lo * s.p[1] + d], 1);
    }
}

// Version 12's items, sized by the counts (tables x p_1 <= MAX_KEYS; version 11 covers more keys): ceil(count /
// TARGET) items for a key, none for a key no lookup has, so no item holds more than TARGET lookups whatever the
// distribution (version 11's one wave lasts as long as its biggest item: Poisson keys of up to ~70 lookups at
// uniform, and Zipf's hot keys in one item each). Every block computes the item table (an exclusive scan of
// the item counts) into shared memory; the last block to have read the counts zeroes them for the next call.
#define TT_EMBEDDING_FORWARD_V12_MAX_KEYS 2048
// scratch: 33 ints of shared memory (the list's counters, free before the first item)
__device__ __forceinline__ void tt_embedding_forward_v12_items(int* seg_start, int* __restrict__ key_count, int nkeys, int* __restrict__ work,
                                                               int* scratch) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int per = (nkeys + blockDim.x - 1) / blockDim.x, k0 = min(nkeys, (int)threadIdx.x * per), k1 = min(nkeys, k0 + per);
    int mine = 0;
    for (int k = k0; k < k1; k++) mine += (__ldcg(key_count + k) + TT_EMBEDDING_FORWARD_V12_TARGET - 1) / TT_EMBEDDING_FORWARD_V12_TARGET;
    int incl = mine;                                        // block scan: warps, then the warp totals
#pragma unroll
    for (int off = 1; off < 32; off *= 2) {
        const int o = __shfl_up_sync(0xffffffffu, incl, off);
        if (lane >= off) incl += o;
    }
    int* warp_total = scratch + 1;
    if (lane == 31) warp_total[warp] = incl;
    __syncthreads();
    int base = incl - mine;
    for (int w = 0; w < warp; w++) base += warp_total[w];
    for (int k = k0; k < k1; k++) {
        seg_start[k] = base;
        base += (__ldcg(key_count + k) + TT_EMBEDDING_FORWARD_V12_TARGET - 1) / TT_EMBEDDING_FORWARD_V12_TARGET;
    }
    if (threadIdx.x == blockDim.x - 1) seg_start[nkeys] = base;   // the last thread's keys end the table
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        scratch[0] = atomicAdd(&work[2], 1) == (int)gridDim.x - 1;
    }
    __syncthreads();
    if (scratch[0]) {                                       // block-uniform: every block has its table, the counts may go
        for (int k = threadIdx.x; k < nkeys; k += blockDim.x) key_count[k] = 0;
        if (threadIdx.x == 0) work[2] = 0;
    }
}

__host__ __device__ inline int tt_embedding_forward_v11_cap(int threads) { return 4 * threads; }

// Bit e set when digit e of vector v (8 uint16 in 4 words, little-endian) equals i1 and its position 8 v + e
// lies in [cursor, seg_hi). Host-callable: the CPU test compares it with a per-position check.
__host__ __device__ __forceinline__ unsigned tt_embedding_forward_v11_match_mask(const uint32_t (&w)[4], int i1, int64_t v, int64_t cursor,
                                                                               int64_t seg_hi) {
    const uint32_t key2 = (uint32_t)i1 * 0x10001u;
    unsigned mask = 0;
    for (int k = 0; k < 4; k++) {                           // two digits per compare: 0xffff in each equal half
#ifdef __CUDA_ARCH__
        const uint32_t eq = __vcmpeq2(w[k], key2);
#else
        const uint32_t x = w[k] ^ key2, eq = ((x & 0xffffu) ? 0u : 0xffffu) | ((x >> 16) ? 0u : 0xffff0000u);
#endif
        mask |= ((eq & 1u) | ((eq >> 15) & 2u)) << (2 * k);
    }
    const int64_t lo_e = cursor - v * 8, hi_e = seg_hi - v * 8;
    if (lo_e >= 8 || hi_e <= 0) return 0;
    if (lo_e > 0) mask &= ~0u << lo_e;
    if (hi_e < 8) mask &= (1u << hi_e) - 1u;
    return mask;
}

// One pass over positions [cursor, seg_hi) (at most CHUNKS x 8 x blockDim of them) into the list, which holds
// counters[0] entries before it. Every thread calls it; returns the next cursor (block-uniform) and leaves the
// list length in counters[0].
__device__ __forceinline__ int64_t tt_embedding_forward_v11_pass(const TtEmbeddingForwardV9List& list, int cap,
                                                                const uint16_t* __restrict__ digits1, const int64_t* __restrict__ indices,
                                                                int64_t cursor, int64_t seg_hi, int i1) {
    constexpr int U = TT_EMBEDDING_FORWARD_V11_CHUNKS;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, W = blockDim.x / 32;
    const int64_t v0 = cursor / 8;                           // 16-byte vectors of 8 digits (the array is padded)
    const int count0 = list.counters[0];
    unsigned mask[U];
    int incl[U];
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int64_t v = v0 + (int64_t)u * blockDim.x + threadIdx.x;
        mask[u] = 0;
        if (v * 8 < seg_hi) {
            const uint4 d = __ldg(reinterpret_cast<const uint4*>(digits1) + v);
            const uint32_t w[4] = {d.x, d.y, d.z, d.w};
            mask[u] = tt_embedding_forward_v11_match_mask(w, i1, v, cursor, seg_hi);
        }
        int c = __popc(mask[u]);                             // inclusive warp scan of the counts
#pragma unroll
        for (int off = 1; off < 32; off *= 2) {
            const int o = __shfl_up_sync(0xffffffffu, c, off);
            if (lane >= off) c += o;
        }
        incl[u] = c;
        if (lane == 31) list.counters[4 + u * 32 + warp] = c;
    }
    __syncthreads();
    int total = 0;                                           // matches in the chunks before u
#pragma unroll
    for (int u = 0; u < U; u++) {
        int chunk_before = 0, chunk_total = 0;
        for (int w = 0; w < W; w++) {
            const int t = list.counters[4 + u * 32 + w];
            chunk_total += t;
            if (w < warp) chunk_before += t;
        }
        int slot = count0 + total + chunk_before + incl[u] - __popc(mask[u]);
        for (unsigned m = mask[u]; m; m &= m - 1, slot++) {  // this thread's matches, in position order
            const int64_t p = (v0 + (int64_t)u * blockDim.x + threadIdx.x) * 8 + (__ffs(m) - 1);
            if (slot < cap) {
                list.pos[slot] = p;
                list.idx[slot] = indices[p];
            } else if (slot == cap) {
                list.counters[3] = (int)(p - cursor);        // the first position that did not fit
            }
        }
        total += chunk_total;
    }
    __syncthreads();
    const bool overflow = count0 + total > cap;
    const int64_t next = overflow ? cursor + list.counters[3] : (v0 + (int64_t)U * blockDim.x) * 8;
    __syncthreads();                                         // counters read by all before they change
    if (threadIdx.x == 0) list.counters[0] = overflow ? cap : count0 + total;
    __syncthreads();
    return overflow ? next : min(next, seg_hi);
}

// passes until the segment ends or the list is full; returns the cursor for the next round
__device__ __forceinline__ int64_t tt_embedding_forward_v11_scan(const TtEmbeddingForwardV9List& list, int cap,
                                                                const uint16_t* __restrict__ digits1, const int64_t* __restrict__ indices,
                                                                int64_t cursor, int64_t seg_hi, int i1) {
    while (cursor < seg_hi) {
        cursor = tt_embedding_forward_v11_pass(list, cap, digits1, indices, cursor, seg_hi, i1);
        if (list.counters[0] >= cap) break;                  // block-uniform (written before the pass's last barrier)
    }
    return cursor;
}

// The item loop of versions 9 and 10: a persistent block takes items (key = (table, i_1), segment) from the
// global counter work[0], reads every index of the segment, lists the lookups whose i_1 matches, marks equal
// indices, and hands the list to the version's engine; the last block out resets the counters. The engine's
// hooks, each called by every thread of the block:
//   on_item(tbl, i1)   at the start of an item (version 10 starts the copy of G_1's slice here)
//   on_work(tbl, i1)   once per item, at its first round with matches (version 9 starts its copy here)
//   on_ready(fresh)    after this thread's copies landed and a barrier; fresh: the round that called on_work
//   compute(tbl, nu)   the rows of the list's nu unique entries into rowbuf (warps pick their share)
// after which the entries equal to an earlier one copy its row.
template <bool DIGITS, class OnItem, class OnWork, class OnReady, class Compute>
__device__ __forceinline__ void tt_embedding_forward_grouped_items(float* __restrict__ rowbuf, const int64_t* __restrict__ indices,
                                                                   const uint16_t* __restrict__ digits1,
                                                                   const int64_t* __restrict__ offsets, const TtEmbeddingForwardShape& s,
                                                                   int segments, const TtEmbeddingForwardFastDigits& fd, bool fast,
                                                                   int* __restrict__ work, const TtEmbeddingForwardV9List& list, int cap,
                                                                   const int* seg_start, OnItem on_item, OnWork on_work, OnReady on_ready,
                                                                   Compute compute) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, W = blockDim.x / 32;
    int* counters = list.counters;
    const int64_t stride1 = s.stride[1];
    const int p1 = s.p[1], nkeys = s.tables * p1;
    // items: `segments` per key, or (seg_start, shared memory) key k's items seg_start[k] .. seg_start[k + 1] - 1
    const int n_items = seg_start ? seg_start[nkeys] : nkeys * segments;
  for (;;) {                                                // items (key, segment) from a global counter
    if (threadIdx.x == 0) counters[2] = atomicAdd(&work[0], 1);
    __syncthreads();
    const int item = counters[2];
    __syncthreads();                                        // read by all before thread 0 takes the next
    if (item >= n_items) break;
    int key = item / segments, seg = item % segments, nseg = segments;
    if (seg_start) {                                        // the last key whose first item is <= item
        int lo = 0, hi = nkeys - 1;
        while (lo < hi) {
            const int mid = (lo + hi + 1) / 2;
            if (seg_start[mid] <= item) lo = mid; else hi = mid - 1;
        }
        key = lo;
        seg = item - seg_start[key];
        nseg = seg_start[key + 1] - seg_start[key];
    }
    const int tbl = key / p1, i1 = key % p1;
    on_item(tbl, i1);
    const int64_t lo_t = offsets[(int64_t)tbl * s.B], hi_t = offsets[(int64_t)(tbl + 1) * s.B];
    const int64_t seg_lo = lo_t + (hi_t - lo_t) * seg / nseg, seg_hi = lo_t + (hi_t - lo_t) * (seg + 1) / nseg;
    bool worked = false;
    int64_t cursor = seg_lo;
    while (cursor < seg_hi) {                               // rounds: fill the list, compute it (block-uniform)
        if (threadIdx.x == 0) { counters[0] = 0; counters[1] = 0; }
        __syncthreads();
        if constexpr (DIGITS) cursor = tt_embedding_forward_v11_scan(list, cap, digits1, indices, cursor, seg_hi, i1);
        // scan: passes of blockDim * UNROLL indices while one more pass fits the list
        else for (;;) {
            int64_t idx[TT_EMBEDDING_FORWARD_V9_UNROLL];
TT_EMBEDDING_FORWARD_UNROLL
            for (int u = 0; u < TT_EMBEDDING_FORWARD_V9_UNROLL; u++) {
                const int64_t p = cursor + (int64_t)u * blockDim.x + threadIdx.x;
                idx[u] = p < seg_hi ? indices[p] : -1;
            }
TT_EMBEDDING_FORWARD_UNROLL
            for (int u = 0; u < TT_EMBEDDING_FORWARD_V9_UNROLL; u++) {
                const int64_t d = fast ? (int64_t)tt_embedding_forward_fast_digit(fd, (uint64_t)idx[u], 1)
                                       : (int64_t)tt_embedding_forward_digit(idx[u], stride1, p1);
                if (idx[u] >= 0 && d == i1) {
                    const int slot = atomicAdd(&counters[0], 1);
                    list.idx[slot] = idx[u];
                    list.pos[slot] = cursor + (int64_t)u * blockDim.x + threadIdx.x;
                }
            }
            cursor += (int64_t)TT_EMBEDDING_FORWARD_V9_UNROLL * blockDim.x;
            __syncthreads();
            const int count = counters[0];
            __syncthreads();                                // read by all before the next pass adds to it
            if (cursor >= seg_hi || count + TT_EMBEDDING_FORWARD_V9_UNROLL * (int)blockDim.x > cap) break;
        }
        const int m = counters[0];
        if (m == 0) continue;                               // block-uniform
        const bool fresh = !worked;
        if (fresh) { on_work(tbl, i1); worked = true; }
        // equal indices: one entry computes, the others copy its row
        if constexpr (DIGITS) {                             // version 11: a shared-memory hash set, O(m) (9, 10: O(m^2))
            const int HS = tt_embedding_forward_v11_slots(cap);
            for (int h = threadIdx.x; h < HS; h += blockDim.x) list.slots[h] = -1;
            __syncthreads();
            for (int i = threadIdx.x; i < m; i += blockDim.x) {
                const int64_t v = list.idx[i];
                int h = (int)(((uint64_t)v * 0x9E3779B97F4A7C15ull) >> 40) & (HS - 1), f;
                for (;;) {                                  // linear probing; the table is at most half full
                    const int prev = atomicCAS(&list.slots[h], -1, i);
                    if (prev == -1) { f = i; break; }
                    if (list.idx[prev] == v) { f = prev; break; }
                    h = (h + 1) & (HS - 1);
                }
                list.first[i] = f;                          // any entry of the index will do: rows depend on it alone
                if (f == i) list.uniq[atomicAdd(&counters[1], 1)] = i;
            }
        } else {
            for (int i = threadIdx.x; i < m; i += blockDim.x) {
                const int64_t v = list.idx[i];
                int f = i;
                for (int j = 0; j < i; j++)
                    if (list.idx[j] == v) { f = j; break; }
                list.first[i] = f;
                if (f == i) list.uniq[atomicAdd(&counters[1], 1)] = i;
            }
        }
        tt_embedding_forward_async_wait_group<0>();          // this thread's copies of G_1
        __syncthreads();
        on_ready(fresh);
        compute(tbl, counters[1]);
        __syncthreads();                                    // the block's rows are written (visible to the block)
        for (int i = warp; i < m; i += W) {                 // copies for equal indices
            const int f = list.first[i];
            if (f == i) continue;
            const float* src = rowbuf + (int64_t)list.pos[f] * s.D;
            float* dst = rowbuf + (int64_t)list.pos[i] * s.D;
            for (int e = lane; e < s.D; e += 32) dst[e] = src[e];
        }
        __syncthreads();                                    // before the list is reused
    }
  }
    tt_embedding_forward_async_wait_group<0>();             // nothing may be in flight at exit
    // the last block out resets the two counters for the next call (every block took its last item before)
    if (threadIdx.x == 0) {
        __threadfence();
        if (atomicAdd(&work[1], 1) == (int)gridDim.x - 1) {
            work[0] = 0;
            work[1] = 0;
            __threadfence();
        }
    }
}

template <int Q0, int Q2>
__global__ void tt_embedding_forward_kernel9(float* __restrict__ rowbuf, const int64_t* __restrict__ indices,
                                             const int64_t* __restrict__ offsets,
                                             const __grid_constant__ TtEmbeddingForwardCores cores,
                                             const __grid_constant__ TtEmbeddingForwardShape s, int segments,
                                             const __grid_constant__ TtEmbeddingForwardFastDigits fd, bool fast,
                                             int* __restrict__ work) {
    static_assert(Q0 == 4, "version 9's transposed G_0 rows are float4");
    extern __shared__ float4 tt_embedding_forward_smem9[];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, W = blockDim.x / 32;
    const int R1 = s.R[1], R2 = s.R[2], q1 = s.q[1], ncols = q1 * R2, R1p = tt_embedding_forward_v7_r1_pad(R1);
    const int cap = tt_embedding_forward_v9_cap(blockDim.x);
    const int stage_floats = R1p * 4 + R2 * 4;
    float* g1s = reinterpret_cast<float*>(tt_embedding_forward_smem9);
    float* stages = g1s + R1 * ncols;                       // [W][2][stage_floats]
    const TtEmbeddingForwardV9List list = tt_embedding_forward_v9_list(stages + W * 2 * stage_floats, cap);

    for (int st = 0; st < 2 * W; st++)                      // transposed G_0's padding rows stay zero
        for (int e = R1 * 4 + threadIdx.x; e < R1p * 4; e += blockDim.x) stages[st * stage_floats + e] = 0.0f;
    const int col = 4 * lane, a1 = col / R2, k2 = col % R2;
    auto on_item = [](int, int) {};
    auto on_work = [&](int tbl, int i1) {                   // G_1's slice, once, only for a block with work
        const float* g1 = cores.c[1] + ((int64_t)tbl * s.p[1] + i1) * s.slice[1];
        for (int c = threadIdx.x; c < R1 * ncols / 4; c += blockDim.x) tt_embedding_forward_async_copy(g1s + 4 * c, g1 + 4 * c, true);
        tt_embedding_forward_async_commit();
    };
    auto on_ready = [](bool) {};
    auto compute = [&](int tbl, int nu) {
        // warp w computes unique entries w, w+W, ...; the next one's G_0/G_2 are staged while this one runs
        float* my_stages = stages + warp * 2 * stage_floats;
        int buf = 0;
        if (warp < nu) tt_embedding_forward_v9_fetch<Q0>(my_stages, cores, s, fd, fast, tbl, list.idx[list.uniq[warp]], lane);
        for (int u = warp; u < nu; u += W) {                // warp-uniform
            if (u + W < nu) {
                tt_embedding_forward_v9_fetch<Q0>(my_stages + (buf ^ 1) * stage_floats, cores, s, fd, fast, tbl, list.idx[list.uniq[u + W]], lane);
                tt_embedding_forward_async_wait_group<1>();
            } else {
                tt_embedding_forward_async_wait_group<0>();
            }
            __syncwarp();
            const float* t0 = my_stages + buf * stage_floats;
            float part[Q0][Q2];
TT_EMBEDDING_FORWARD_UNROLL
            for (int a0 = 0; a0 < Q0; a0++)
TT_EMBEDDING_FORWARD_UNROLL
                for (int a2 = 0; a2 < Q2; a2++) part[a0][a2] = 0.0f;
            tt_embedding_forward_v7_lane<Q0, Q2, false>(part, t0, g1s, t0 + R1p * 4, R1, R2, ncols, lane);
            tt_embedding_forward_v7_reduce<Q0, Q2>(part, R2);
            if (k2 == 0 && col < ncols) {
                float* row = rowbuf + (int64_t)list.pos[list.uniq[u]] * s.D;
TT_EMBEDDING_FORWARD_UNROLL
                for (int a0 = 0; a0 < Q0; a0++)
                    *reinterpret_cast<float4*>(row + (a0 * q1 + a1) * 4) = make_float4(part[a0][0], part[a0][1], part[a0][2], part[a0][3]);
            }
            __syncwarp();                                   // the stage is refilled two lookups on
            buf ^= 1;
        }
    };
    tt_embedding_forward_grouped_items<false>(rowbuf, indices, nullptr, offsets, s, segments, fd, fast, work, list, cap, nullptr, on_item,
                                              on_work, on_ready, compute);
}

// ---- version 10: version 9's groups, the chain on tensor cores in 3xTF32

// ncu on version 9 (second session): 1,650 warp instructions per lookup, ~900 of them the lane function's FP32
// step 1 (16,384 FMAs a lookup, 512 per lane, each with its share of shared-memory loads). Version 10 keeps
// version 9's items and lists and runs the chain of four unique lookups at a time as one 16-row tile of
// mma.sync.m16n8k8 (TF32 in, FP32 accumulate):
//   step 1  [4 lookups x q_0 rows of M_0 = G_0 slices] (16 x R_1) . G_1 (R_1 x q_1 R_2): q_1 R_2 / 8 n-tiles of
//           R_1 / 8 k-steps. In 3xTF32: x = hi + lo with hi = tf32(x), lo = tf32(x - hi); the product is
//           hi.hi + hi.lo + lo.hi (lo.lo, ~2^-22 relative, dropped): three mma per tile and k-step, accurate to
//           about FP32's rounding, so version 10 is checked at the FP32 tolerance, not version 5's.
//   step 2  each n-tile's accumulators are, per lane, M_1 at (row, a_1, two consecutive k_2): the lane multiplies
//           them by the matching rows of G_2 (FP32 FMAs, 16 per tile) into its (a_1, row, a_2) partial sums, and
//           the four lanes of a quad, which hold the other k_2 of the same rows, add theirs at the end.
// Per tile of 4 lookups at FBTT's default, per lane: 192 mma, 64 16-byte shared loads of B fragments, 256 FFMA
// (step 2), 64 shuffles; version 9's lane function issues 576 FFMA per lookup per lane (512 of them step 1).
// Layout tricks, both free because K's order inside a GEMM is arbitrary as long as A and B agree:
//   - the fragment column c of k-step s is k = KL * (c % 4) + 2 s + c / 4 (KL = R_1 / 4 values per lane), so a lane
//     needs KL CONTIGUOUS values of each G_0 row (float4 loads from L2) and KL contiguous rows of B;
//   - G_1's slice is stored once per item in fragment order, hi and lo: lane l's KL values of n-tile j at
//     (j * 32 + l) * KL, so each k-step's B fragment comes from float4 loads that are 512 contiguous bytes per warp.
// The slice is copied (cp.async, rows padded by 4 floats) at the start of the item, under the index scan, and
// converted (split and scattered to fragment order; conflict-free in both directions) once the list is ready.
// A row's value does not depend on which tile slot it lands in: deterministic at any block size, like version 9.
// Compiled for R_1 = 8 KS, q_1 = Q1, R_2 = 8 JT with (KS, Q1, JT) = (4, 4, 4) (FBTT's default) and (2, 4, 2) (ranks 16).
#ifndef TT_EMBEDDING_FORWARD_V10_TARGET      // lookups per item the host aims at (version 9's TARGET is 16)
#define TT_EMBEDDING_FORWARD_V10_TARGET 16
#endif

// fragment column c (0..7) of k-step s -> the k of G_1's row / G_0's column it holds
__host__ __device__ __forceinline__ int tt_embedding_forward_v10_k(int KS, int s, int c) { return 2 * KS * (c & 3) + 2 * s + (c >> 2); }
// where element (k, n) of G_1's slice goes in the fragment-order arrays: n-tile n / 8, lane 4 (n % 8) + k / KL
__host__ __device__ __forceinline__ int tt_embedding_forward_v10_b_pos(int KS, int k, int n) {
    const int KL = 2 * KS;
    return ((n >> 3) * 32 + (n & 7) * 4 + k / KL) * KL + k % KL;
}
// the G_1 rows padded by 4 floats in the raw copy: lanes reading one column at 32 rows k fall in different banks
__host__ __device__ __forceinline__ int tt_embedding_forward_v10_raw_ld(int ncols) { return ncols + 4; }

inline size_t tt_embedding_forward_smem10_bytes(const TtEmbeddingForwardShape& s, int warps, bool v11 = false) {
    if (s.T != 3) return 0;
    const size_t g1 = (size_t)s.R[1] * s.q[1] * s.R[2], raw = (size_t)s.R[1] * tt_embedding_forward_v10_raw_ld(s.q[1] * s.R[2]);
    const int cap = v11 ? tt_embedding_forward_v11_cap(32 * warps) : tt_embedding_forward_v9_cap(32 * warps);
    return sizeof(float) * (2 * g1 + raw) + tt_embedding_forward_v9_list_bytes(cap, v11) +
           (v11 ? (TT_EMBEDDING_FORWARD_V12_MAX_KEYS + 1) * sizeof(int) : 0);   // the item table
}

// one mma without `volatile`, so the compiler may interleave independent tiles
__device__ __forceinline__ void tt_embedding_forward_v10_mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// x = hi + lo, both TF32 (host-callable: the CPU test checks the split)
__host__ __device__ __forceinline__ void tt_embedding_forward_v10_split(float x, float& hi, float& lo) {
    hi = tt_embedding_forward_tf32(x);
    lo = tt_embedding_forward_tf32(x - hi);
}

// One 16-row tile: unique entries 4 mt .. 4 mt + 3 of the list (fewer at the end: their rows are zeros and not
// written). Lane (group g, tig t) holds tile rows g and g + 8: entry 4 mt + g / 4 (+ 2), row a_0 = g % 4 of M_0.
template <int KS, int Q1, int JT>
__device__ __forceinline__ void tt_embedding_forward_v10_tile(float* __restrict__ rowbuf, const TtEmbeddingForwardV9List& list,
                                                              int mt, int nu, const float* __restrict__ bhi, const float* __restrict__ blo,
                                                              const TtEmbeddingForwardCores& cores, const TtEmbeddingForwardShape& s,
                                                              const TtEmbeddingForwardFastDigits& fd, bool fast, int tbl, int lane) {
    constexpr int KL = 2 * KS, R1 = 8 * KS;
    const int group = lane >> 2, tig = lane & 3, a0 = group & 3;
    int entry[2];
    bool valid[2];
    const float* g2s[2];
    float x[2][KL];                                         // this lane's KL values of K in each of its two rows
#pragma unroll
    for (int h = 0; h < 2; h++) {
        entry[h] = 4 * mt + (group >> 2) + 2 * h;
        valid[h] = entry[h] < nu;
        g2s[h] = nullptr;
        if (valid[h]) {
            const int64_t idx = list.idx[list.uniq[entry[h]]];
            const float* g0 = tt_embedding_forward_v9_slice(cores, s, fd, fast, tbl, idx, 0) + a0 * R1 + KL * tig;
            g2s[h] = tt_embedding_forward_v9_slice(cores, s, fd, fast, tbl, idx, 2) + 8 * tig;   // row k_2 = 2 tig
#pragma unroll
            for (int v = 0; v < KL / 4; v++) {
                const float4 f = __ldg(reinterpret_cast<const float4*>(g0) + v);
                x[h][4 * v] = f.x; x[h][4 * v + 1] = f.y; x[h][4 * v + 2] = f.z; x[h][4 * v + 3] = f.w;
            }
        } else {
#pragma unroll
            for (int e = 0; e < KL; e++) x[h][e] = 0.0f;
        }
    }
    // A fragments: a0 (row g, col t) a1 (row g+8, col t) a2 (row g, col t+4) a3 (row g+8, col t+4) -> k = KL t + 2 s (+1)
    uint32_t ahi[KS][4], alo[KS][4];
#pragma unroll
    for (int st = 0; st < KS; st++)
#pragma unroll
        for (int r = 0; r < 4; r++) {
            float hi, lo;
            tt_embedding_forward_v10_split(x[r & 1][2 * st + (r >> 1)], hi, lo);
            ahi[st][r] = __float_as_uint(hi);
            alo[st][r] = __float_as_uint(lo);
        }
    float acc[Q1][2][4];                                    // (a_1, row, a_2) partial sums over this lane's k_2
#pragma unroll
    for (int b = 0; b < Q1; b++)
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int c = 0; c < 4; c++) acc[b][h][c] = 0.0f;
    const float4 zero4 = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int jj = 0; jj < JT; jj++) {                       // k_2 = 8 jj + 2 tig + e of every a_1
        float4 w[2][2];                                     // G_2 rows k_2 of each row's lookup
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int e = 0; e < 2; e++) w[h][e] = valid[h] ? __ldg(reinterpret_cast<const float4*>(g2s[h] + 32 * jj + 4 * e)) : zero4;
#pragma unroll
        for (int b = 0; b < Q1; b++) {
            const int j = b * JT + jj;                      // n-tile: columns a_1 = b, k_2 = 8 jj .. 8 jj + 7
            uint32_t bh[KL], bl[KL];
#pragma unroll
            for (int v = 0; v < KL / 4; v++) {
                const uint4 fh = reinterpret_cast<const uint4*>(bhi + (j * 32 + lane) * KL)[v];
                const uint4 fl = reinterpret_cast<const uint4*>(blo + (j * 32 + lane) * KL)[v];
                bh[4 * v] = fh.x; bh[4 * v + 1] = fh.y; bh[4 * v + 2] = fh.z; bh[4 * v + 3] = fh.w;
                bl[4 * v] = fl.x; bl[4 * v + 1] = fl.y; bl[4 * v + 2] = fl.z; bl[4 * v + 3] = fl.w;
            }
            float big[4] = {0.0f, 0.0f, 0.0f, 0.0f}, small[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
            for (int st = 0; st < KS; st++) {
                tt_embedding_forward_v10_mma(small, alo[st], bh[2 * st], bh[2 * st + 1]);
                tt_embedding_forward_v10_mma(small, ahi[st], bl[2 * st], bl[2 * st + 1]);
                tt_embedding_forward_v10_mma(big, ahi[st], bh[2 * st], bh[2 * st + 1]);
            }
            // C: c0 (row g, col 2t) c1 (row g, col 2t+1) c2 (row g+8, col 2t) c3 (row g+8, col 2t+1)
#pragma unroll
            for (int h = 0; h < 2; h++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const float m1 = big[2 * h + e] + small[2 * h + e];
                    acc[b][h][0] = fmaf(m1, w[h][e].x, acc[b][h][0]);
                    acc[b][h][1] = fmaf(m1, w[h][e].y, acc[b][h][1]);
                    acc[b][h][2] = fmaf(m1, w[h][e].z, acc[b][h][2]);
                    acc[b][h][3] = fmaf(m1, w[h][e].w, acc[b][h][3]);
                }
        }
    }
    // the quad's lanes hold the other k_2 of the same rows: add them (every lane ends with the sums)
#pragma unroll
    for (int b = 0; b < Q1; b++)
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int c = 0; c < 4; c++) {
                acc[b][h][c] += __shfl_xor_sync(0xffffffffu, acc[b][h][c], 1);
                acc[b][h][c] += __shfl_xor_sync(0xffffffffu, acc[b][h][c], 2);
            }
    // the quad's 2 x Q1 float4s, shared out over its lanes: element (a_0, a_1 = b, a_2) of the row
#pragma unroll
    for (int h = 0; h < 2; h++) {
        if (!valid[h]) continue;
        float* row = rowbuf + (int64_t)list.pos[list.uniq[entry[h]]] * s.D + a0 * Q1 * 4;
#pragma unroll
        for (int b = 0; b < Q1; b++)
            if (((2 * b + h) & 3) == tig) *reinterpret_cast<float4*>(row + 4 * b) = make_float4(acc[b][h][0], acc[b][h][1], acc[b][h][2], acc[b][h][3]);
    }
}

template <int KS, int Q1, int JT, bool DIGITS>
__global__ void __launch_bounds__(256, 2) tt_embedding_forward_kernel10(float* __restrict__ rowbuf, const int64_t* __restrict__ indices,
                                              const uint16_t* __restrict__ digits1, int* __restrict__ key_count,
                                              const int64_t* __restrict__ offsets,
                                              const __grid_constant__ TtEmbeddingForwardCores cores,
                                              const __grid_constant__ TtEmbeddingForwardShape s, int segments,
                                              const __grid_constant__ TtEmbeddingForwardFastDigits fd, bool fast,
                                              int* __restrict__ work) {
    constexpr int R1 = 8 * KS, NCOLS = Q1 * 8 * JT, KL = 2 * KS, RAW_LD = NCOLS + 4;
    extern __shared__ float4 tt_embedding_forward_smem10[];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, W = blockDim.x / 32;
    const int cap = DIGITS ? tt_embedding_forward_v11_cap(blockDim.x) : tt_embedding_forward_v9_cap(blockDim.x);
    float* bhi = reinterpret_cast<float*>(tt_embedding_forward_smem10);     // [n-tile][lane][KL], TF32 hi parts
    float* blo = bhi + R1 * NCOLS;                                           // ... and lo parts
    float* raw = blo + R1 * NCOLS;                                           // [R1][RAW_LD]: the slice as copied
    const TtEmbeddingForwardV9List list = tt_embedding_forward_v9_list(raw + R1 * RAW_LD, cap);
    auto on_item = [&](int tbl, int i1) {                   // G_1's slice under the scan (even if no lookup matches)
        tt_embedding_forward_async_wait_group<0>();          // the last item's copy, if it had no work
        const float* g1 = cores.c[1] + ((int64_t)tbl * s.p[1] + i1) * s.slice[1];
        for (int c = threadIdx.x; c < R1 * NCOLS / 4; c += blockDim.x) {
            const int k = c / (NCOLS / 4);
            tt_embedding_forward_async_copy(raw + k * RAW_LD + 4 * (c - k * (NCOLS / 4)), g1 + 4 * c, true);
        }
        tt_embedding_forward_async_commit();
    };
    auto on_work = [](int, int) {};
    auto on_ready = [&](bool fresh) {                       // split and scatter to fragment order, once per item
        if (!fresh) return;
        for (int i = threadIdx.x; i < R1 * NCOLS / 4; i += blockDim.x) {
            const int k = i % R1, n4 = i / R1;              // a warp: 32 values of k (rows), one float4 of columns
            const float4 v = *reinterpret_cast<const float4*>(raw + k * RAW_LD + 4 * n4);
            const float xs[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
            for (int c = 0; c < 4; c++) {
                const int pos = tt_embedding_forward_v10_b_pos(KS, k, 4 * n4 + c);
                tt_embedding_forward_v10_split(xs[c], bhi[pos], blo[pos]);
            }
        }
        __syncthreads();
    };
    auto compute = [&](int tbl, int nu) {
        for (int mt = warp; 4 * mt < nu; mt += W)           // warp-uniform
            tt_embedding_forward_v10_tile<KS, Q1, JT>(rowbuf, list, mt, nu, bhi, blo, cores, s, fd, fast, tbl, lane);
    };
    static_assert(KL % 4 == 0, "lanes load their KL values of a row as float4s");
    int* seg_start = nullptr;
    if constexpr (DIGITS) {
        tt_embedding_forward_wait_prior();                  // the digit kernel's output (launched with PDL)
        tt_embedding_forward_allow_next();
        if (key_count) {                                    // version 11's items sized by the counts (see above)
            seg_start = list.slots + tt_embedding_forward_v11_slots(cap);
            tt_embedding_forward_v12_items(seg_start, key_count, s.tables * s.p[1], work, list.counters + 3);
        }
    }
    tt_embedding_forward_grouped_items<DIGITS>(rowbuf, indices, digits1, offsets, s, segments, fd, fast, work, list, cap, seg_start, on_item,
                                               on_work, on_ready, compute);
}

// the shapes version 7 is written and compiled for; "" when it runs
inline std::string tt_embedding_forward_v7_reason(const TtEmbeddingForwardShape& s) {
    char buf[256];
    if (s.T != 3) {
        snprintf(buf, sizeof buf, "version 7 is written for three cores (T = %d)", s.T);
        return buf;
    }
    if (s.q[0] != 4 || s.q[2] != 4) {
        snprintf(buf, sizeof buf, "version 7 is compiled for q_0 = q_2 = 4 (q = %d,%d,%d); add an instantiation for others",
                 s.q[0], s.q[1], s.q[2]);
        return buf;
    }
    const int R2 = s.R[2];
    if (R2 < 4 || (R2 & (R2 - 1)) != 0 || s.q[1] * R2 > TT_EMBEDDING_FORWARD_V7_COLS) {
        snprintf(buf, sizeof buf, "version 7 needs R_2 a power of two >= 4 and q_1 * R_2 <= %d (R_2 = %d, q_1 = %d)",
                 TT_EMBEDDING_FORWARD_V7_COLS, R2, s.q[1]);
        return buf;
    }
    return "";
}

// version 10's compiled shapes (T = 3, q = 4,4,4; ranks 32,32 or 16,16): the kernel (version 11's with
// digits), null for any other
typedef void (*TtEmbeddingForwardKernel10)(float*, const int64_t*, const uint16_t*, int*, const int64_t*, const TtEmbeddingForwardCores,
                                           const TtEmbeddingForwardShape, int, const TtEmbeddingForwardFastDigits, bool, int*);
inline TtEmbeddingForwardKernel10 tt_embedding_forward_v10_kernel(const TtEmbeddingForwardShape& s, bool digits = false) {
    if (s.T != 3 || s.q[0] != 4 || s.q[1] != 4 || s.q[2] != 4) return nullptr;
    if (s.R[1] == 32 && s.R[2] == 32) return digits ? tt_embedding_forward_kernel10<4, 4, 4, true> : tt_embedding_forward_kernel10<4, 4, 4, false>;
    if (s.R[1] == 16 && s.R[2] == 16) return digits ? tt_embedding_forward_kernel10<2, 4, 2, true> : tt_embedding_forward_kernel10<2, 4, 2, false>;
    return nullptr;
}

inline std::string tt_embedding_forward_v10_reason(const TtEmbeddingForwardShape& s) {
    if (tt_embedding_forward_v10_kernel(s)) return "";
    std::string got = "T = " + std::to_string(s.T);
    if (s.T == 3)
        got += ", q = " + std::to_string(s.q[0]) + "," + std::to_string(s.q[1]) + "," + std::to_string(s.q[2]) + ", ranks " +
               std::to_string(s.R[1]) + "," + std::to_string(s.R[2]);
    return "version 10 is compiled for T = 3, q = 4,4,4 and ranks 32,32 or 16,16 (" + got + "); add an instantiation for others";
}

inline std::string tt_embedding_forward_v11_reason(const TtEmbeddingForwardShape& s) {
    const std::string why = tt_embedding_forward_v10_reason(s);
    if (!why.empty()) return "as " + why;
    if (s.p[1] > 65536) return "version 11 stores i_1 as uint16: p_1 (" + std::to_string(s.p[1]) + ") must be <= 65536";
    return "";
}

// ----------------------------------------------------------------------------------------------
// workspace (allocated once, outside timing) and launchers

struct TtEmbeddingForwardWorkspace {
    // version 2
    int chunk = 1000;
    cublasHandle_t handle = nullptr;
    int* bag_of = nullptr;                 // [nnz]
    float* tr[TT_EMBEDDING_FORWARD_MAX_CORES] = {};   // step buffers [chunk][Q_{t+1} R_{t+2}], t = 0..T-2
    const void** a_ptr = nullptr;          // [(T-1) * chunk] each: cuBLAS's A, B and C pointer arrays
    const void** b_ptr = nullptr;
    void** c_ptr = nullptr;
    float* acc = nullptr;                  // fp32 pooled sums [tables*B*D] (bf16 build; fp32 writes out)
    // version 4
    TtEmbeddingForwardGroup group;
    bool group_ok = false;
    uint32_t* keys_in = nullptr; uint32_t* keys_out = nullptr;
    int* vals_in = nullptr; int* vals_out = nullptr;
    void* cub_temp = nullptr;
    size_t cub_temp_bytes = 0;
    float* rowbuf = nullptr;               // [nnz][D]
    // version 5 (shares the key/sort buffers and rowbuf with version 4)
    TtEmbeddingForwardGroup group5;
    TtEmbeddingForwardTc tc;
    bool tc_ok = false;
    // version 6 (shares rowbuf with versions 4 and 5)
    TtEmbeddingForwardPlan6 plan6;
    bool plan6_ok = false;
    uint32_t* keys6 = nullptr;             // [nnz] scratch of the planning kernel
    int* perm6 = nullptr;                  // [nnz] lookup at each position of the bucketed order
    int64_t* sidx6 = nullptr;              // [nnz] its index
    int4* items6 = nullptr;                // [nnz] >= max_items for any block size
    size_t max_smem = 48 * 1024;           // the device's opt-in shared memory per block
    int max_threads[TT_EMBEDDING_FORWARD_NUM_KERNELS + 1] = {};   // per version, from cudaFuncGetAttributes
    int num_sms = 1;
    int* work9 = nullptr;                  // versions 9-11: item counter, finished blocks, (11) blocks that read the counts;
                                           // zero between calls
    int per_sm9[33] = {};                  // version 9's resident blocks per SM, by warps per block
    TtEmbeddingForwardFastDigits fd9 = {}; // version 9's division-free digits (used when fast9)
    bool fast9 = false;
    int per_sm10[33] = {};                 // version 10's resident blocks per SM, by warps per block
    int per_sm11[33] = {};                 // versions 11 and 12's (one kernel)
    uint16_t* digits11 = nullptr;          // version 11: i_1 of every lookup [nnz rounded up to 8]
    int* key_count11 = nullptr;            // version 11: lookups per key [tables * p_1] when <= MAX_KEYS, zero between calls
    // version 3 at shapes whose per-warp buffers exceed a block's shared memory: the buffers in global memory
    float* scratch3 = nullptr;
    int64_t scratch3_warps = 0;            // warps the scratch holds (the grid is cut to fit it)
};

// the default (11) runs its compiled kernel where that applies (T = 3, q = 4,4,4, ranks 32,32 or 16,16, p_1 <=
// 65536, shared memory and index reads within bounds), version 3's kernel everywhere else
std::string tt_embedding_forward_tc_reason(int kernel_num, const TtEmbeddingForwardShape& s, const TtEmbeddingForwardWorkspace& ws);
inline bool tt_embedding_forward_v11_fast(const TtEmbeddingForwardShape& s, const TtEmbeddingForwardWorkspace& ws) {
    return tt_embedding_forward_tc_reason(11, s, ws).empty();
}

// version 3 keeps its buffers in global memory when one warp's do not fit in a block's shared memory
inline bool tt_embedding_forward_v3_global(const TtEmbeddingForwardShape& s, const TtEmbeddingForwardWorkspace& ws) {
    return tt_embedding_forward_smem3_bytes(s, 1) > ws.max_smem;
}

void tt_embedding_forward_setup(TtEmbeddingForwardWorkspace& ws, const TtEmbeddingForwardShape& s, int chunk,
                                const cudaDeviceProp& prop) {
    ws.max_smem = prop.sharedMemPerBlockOptin;
    cudaCheck(cudaFuncSetAttribute(tt_embedding_forward_kernel3, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)ws.max_smem));
    cudaCheck(cudaFuncSetAttribute(tt_embedding_forward_kernel4, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)ws.max_smem));
    // no __launch_bounds__ on the chain kernels (a bound of 512 made ptxas cap them at 64 registers and
    // spill); the largest block each compiled kernel accepts is read here instead (1024 at <= 64 registers)
    cudaFuncAttributes attr;
    cudaCheck(cudaFuncGetAttributes(&attr, tt_embedding_forward_kernel3));
    ws.max_threads[3] = attr.maxThreadsPerBlock;
    cudaCheck(cudaFuncGetAttributes(&attr, tt_embedding_forward_kernel4));
    ws.max_threads[4] = attr.maxThreadsPerBlock;
    cudaCheck(cudaFuncSetAttribute(tt_embedding_forward_kernel5, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)ws.max_smem));
    cudaCheck(cudaFuncGetAttributes(&attr, tt_embedding_forward_kernel5));
    ws.max_threads[5] = attr.maxThreadsPerBlock;
    cudaCheck(cudaFuncSetAttribute(tt_embedding_forward_kernel6, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)ws.max_smem));
    cudaCheck(cudaFuncGetAttributes(&attr, tt_embedding_forward_kernel6));
    ws.max_threads[6] = attr.maxThreadsPerBlock;
    cudaCheck(cudaFuncSetAttribute(tt_embedding_forward_kernel7<4, 4>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)ws.max_smem));
    cudaCheck(cudaFuncGetAttributes(&attr, tt_embedding_forward_kernel7<4, 4>));
    ws.max_threads[7] = attr.maxThreadsPerBlock;
    cudaCheck(cudaFuncSetAttribute(tt_embedding_forward_kernel8<4, 4>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)ws.max_smem));
    cudaCheck(cudaFuncGetAttributes(&attr, tt_embedding_forward_kernel8<4, 4>));
    ws.max_threads[8] = attr.maxThreadsPerBlock;
    ws.num_sms = prop.multiProcessorCount;
    cudaCheck(cudaFuncSetAttribute(tt_embedding_forward_kernel9<4, 4>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)ws.max_smem));
    cudaCheck(cudaFuncGetAttributes(&attr, tt_embedding_forward_kernel9<4, 4>));
    ws.max_threads[9] = attr.maxThreadsPerBlock;
    cudaCheck(cudaFuncSetAttribute(tt_embedding_forward_kernel6_plan, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)ws.max_smem));
    cudaCheck(cudaFuncGetAttributes(&attr, tt_embedding_forward_kernel6_plan));
    if (attr.maxThreadsPerBlock < TT_EMBEDDING_FORWARD_V6_PLAN_THREADS) {   // __launch_bounds__ makes it fit
        fprintf(stderr, "tt_embedding_forward_kernel6_plan accepts %d threads per block, needs %d\n", attr.maxThreadsPerBlock,
                TT_EMBEDDING_FORWARD_V6_PLAN_THREADS);
        exit(EXIT_CUDA_ERROR);
    }
    const int64_t nnz = s.nnz, nbags = (int64_t)s.tables * s.B;
    // version 2
    ws.chunk = chunk;
    cublasCheck(cublasCreate(&ws.handle));
    cublasCheck(cublasSetStream(ws.handle, 0));
    ws.bag_of = device_alloc<int>(nnz);
    for (int t = 0; t + 1 < s.T; t++) ws.tr[t] = device_alloc<float>((size_t)chunk * s.Q[t + 1] * s.R[t + 2]);
    ws.a_ptr = const_cast<const void**>(device_alloc<void*>((size_t)(s.T - 1) * chunk));
    ws.b_ptr = const_cast<const void**>(device_alloc<void*>((size_t)(s.T - 1) * chunk));
    ws.c_ptr = device_alloc<void*>((size_t)(s.T - 1) * chunk);
    ws.acc = device_alloc<float>((size_t)nbags * s.D);
    // version 4
    ws.group_ok = tt_embedding_forward_make_group(s, ws.group).empty();
    ws.keys_in = device_alloc<uint32_t>(nnz);
    ws.keys_out = device_alloc<uint32_t>(nnz);
    ws.vals_in = device_alloc<int>(nnz);
    ws.vals_out = device_alloc<int>(nnz);
    ws.rowbuf = device_alloc<float>((size_t)nnz * s.D);
    ws.tc_ok = tt_embedding_forward_make_tc(s, ws.tc).empty() && tt_embedding_forward_make_group(s, ws.group5, ws.tc.h).empty();
    if ((ws.group_ok || ws.tc_ok) && nnz > 0) {             // one temp buffer for both versions' sorts
        for (int v = 4; v <= 5; v++) {
            if (!(v == 4 ? ws.group_ok : ws.tc_ok)) continue;
            size_t bytes = 0;
            cudaCheck(cub::DeviceRadixSort::SortPairs(nullptr, bytes, ws.keys_in, ws.keys_out, ws.vals_in, ws.vals_out,
                                                      (int)nnz, 0, (v == 4 ? ws.group : ws.group5).end_bit));
            ws.cub_temp_bytes = std::max(ws.cub_temp_bytes, bytes);
        }
        ws.cub_temp = device_alloc<char>(ws.cub_temp_bytes);
    }
    // version 6
    ws.plan6_ok = tt_embedding_forward_make_plan6(s, ws.plan6).empty();
    ws.keys6 = device_alloc<uint32_t>(nnz);
    ws.perm6 = device_alloc<int>(nnz);
    ws.sidx6 = device_alloc<int64_t>(nnz);
    ws.items6 = device_alloc<int4>(nnz);
    ws.work9 = device_alloc<int>(3);
    cudaCheck(cudaMemset(ws.work9, 0, 3 * sizeof(int)));
    if ((int64_t)s.tables * s.p[1] <= TT_EMBEDDING_FORWARD_V12_MAX_KEYS) {
        ws.key_count11 = device_alloc<int>((size_t)s.tables * s.p[1]);
        cudaCheck(cudaMemset(ws.key_count11, 0, (size_t)s.tables * s.p[1] * sizeof(int)));
    }
    ws.fast9 = tt_embedding_forward_make_fast_digits(s, ws.fd9);
    for (int w = 1; w <= 32 && s.T == 3; w++) {
        const size_t smem = tt_embedding_forward_smem9_bytes(s, w);
        if (32 * w > ws.max_threads[9] || smem > ws.max_smem) break;
        cudaCheck(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ws.per_sm9[w], tt_embedding_forward_kernel9<4, 4>, 32 * w, smem));
    }
    for (int v = 10; v <= 11; v++) {
        TtEmbeddingForwardKernel10 k10 = tt_embedding_forward_v10_kernel(s, v == 11);
        if (!k10) continue;
        cudaCheck(cudaFuncSetAttribute(k10, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)ws.max_smem));
        cudaCheck(cudaFuncGetAttributes(&attr, k10));
        ws.max_threads[v] = attr.maxThreadsPerBlock;
        for (int w = 1; w <= 32; w++) {
            const size_t smem = tt_embedding_forward_smem10_bytes(s, w, v == 11);
            if (32 * w > ws.max_threads[v] || smem > ws.max_smem) break;
            cudaCheck(cudaOccupancyMaxActiveBlocksPerMultiprocessor(v == 10 ? &ws.per_sm10[w] : &ws.per_sm11[w], k10, 32 * w, smem));
        }
    }
    ws.max_threads[12] = ws.max_threads[11];               // version 12 runs version 11's kernel
    if (tt_embedding_forward_v3_global(s, ws)) {           // at most 256 MB, at most 64 warps per SM
        const int64_t per_warp = tt_embedding_forward_smem3_bytes(s, 1);
        ws.scratch3_warps = std::max<int64_t>(32, std::min<int64_t>((int64_t)64 * ws.num_sms, ((int64_t)256 << 20) / per_warp));
        ws.scratch3 = device_alloc<float>((size_t)(ws.scratch3_warps * per_warp / 4));
    }
    ws.digits11 = device_alloc<uint16_t>((size_t)(nnz + 7) / 8 * 8 + 8);
    cudaCheck(cudaMemset(ws.digits11, 0, ((size_t)(nnz + 7) / 8 * 8 + 8) * sizeof(uint16_t)));   // the padding
}

void tt_embedding_forward_free(TtEmbeddingForwardWorkspace& ws) {
    cublasCheck(cublasDestroy(ws.handle));
    cudaCheck(cudaFree(ws.bag_of));
    for (auto* p : ws.tr) if (p) cudaCheck(cudaFree(p));
    cudaCheck(cudaFree(const_cast<void**>(ws.a_ptr))); cudaCheck(cudaFree(const_cast<void**>(ws.b_ptr)));
    cudaCheck(cudaFree(ws.c_ptr));
    cudaCheck(cudaFree(ws.acc));
    cudaCheck(cudaFree(ws.keys_in)); cudaCheck(cudaFree(ws.keys_out));
    cudaCheck(cudaFree(ws.vals_in)); cudaCheck(cudaFree(ws.vals_out));
    if (ws.cub_temp) cudaCheck(cudaFree(ws.cub_temp));
    cudaCheck(cudaFree(ws.rowbuf));
    cudaCheck(cudaFree(ws.keys6)); cudaCheck(cudaFree(ws.perm6));
    cudaCheck(cudaFree(ws.sidx6)); cudaCheck(cudaFree(ws.items6));
    cudaCheck(cudaFree(ws.work9));
    cudaCheck(cudaFree(ws.digits11));
    if (ws.key_count11) cudaCheck(cudaFree(ws.key_count11));
    if (ws.scratch3) cudaCheck(cudaFree(ws.scratch3));

}

// NaN into every intermediate a version reads back, so a row or buffer it forgot to write fails the check
void tt_embedding_forward_poison_workspace(TtEmbeddingForwardWorkspace& ws, const TtEmbeddingForwardShape& s) {
    for (int t = 0; t + 1 < s.T; t++) poison(ws.tr[t], (size_t)ws.chunk * s.Q[t + 1] * s.R[t + 2] * sizeof(float));
    poison(ws.acc, (size_t)s.tables * s.B * s.D * sizeof(float));
    poison(ws.rowbuf, std::max<size_t>((size_t)s.nnz * s.D, 1) * sizeof(float));
}

void tt_embedding_forward1(floatX* out, const int64_t* indices, const int64_t* offsets, const TtEmbeddingForwardCores& cores,
                           const TtEmbeddingForwardShape& s, int block_size) {
    const int64_t n = (int64_t)s.tables * s.B * s.D;
    tt_embedding_forward_kernel1<<<(unsigned)ceil_div<int64_t>(n, block_size), block_size>>>(out, indices, offsets, cores, s);
}

// Version 2's GEMM of step t (0..T-2). cuBLAS is column-major: the row-major step C (m x n) = M (m x k) .
// G (k x n) is, read column-major, C^T (n x m) = G^T (n x k, ld n) . M^T (k x m, ld k), so
// gemm(N, N, rows = n, cols = m, inner = k, A = G (lda n), B = M (ldb k), C (ldc n)). The CPU test runs
// exactly these arguments through a column-major reference GEMM.
struct TtEmbeddingForwardGemmArgs { int rows, cols, inner, lda, ldb, ldc; };
inline TtEmbeddingForwardGemmArgs tt_embedding_forward_gemm_args(const TtEmbeddingForwardShape& s, int t) {
    const int m = s.step_m[t + 1], k = s.step_k[t + 1], n = s.step_n[t + 1];
    return {n, m, k, n, k, n};
}

void tt_embedding_forward2(floatX* out, const int64_t* indices, const int64_t* offsets, const TtEmbeddingForwardCores& cores,
                           const TtEmbeddingForwardShape& s, TtEmbeddingForwardWorkspace& ws, int block_size) {
    const int64_t nbags = (int64_t)s.tables * s.B, nnz = s.nnz;
    float* acc = (sizeof(floatX) == sizeof(float)) ? reinterpret_cast<float*>(out) : ws.acc;
    cudaCheck(cudaMemsetAsync(acc, 0, (size_t)nbags * s.D * sizeof(float)));
    if (nnz > 0) {
        tt_embedding_forward_kernel2_bag_ids<<<(unsigned)ceil_div<int64_t>(nnz, block_size), block_size>>>(ws.bag_of, offsets, nbags, nnz);
        TtEmbeddingForwardCores bufs = {};
        for (int t = 0; t + 1 < s.T; t++) bufs.c[t] = ws.tr[t];
        const float one = 1.0f, zero = 0.0f;
        for (int64_t start = 0; start < nnz; start += ws.chunk) {
            const int N = (int)std::min<int64_t>(ws.chunk, nnz - start);
            tt_embedding_forward_kernel2_pointers<<<ceil_div(N, block_size), block_size>>>(
                ws.a_ptr, ws.b_ptr, ws.c_ptr, indices, ws.bag_of, start, N, cores, s, bufs);
            for (int t = 0; t + 1 < s.T; t++) {
                const TtEmbeddingForwardGemmArgs g = tt_embedding_forward_gemm_args(s, t);
                cublasCheck(cublasGemmBatchedEx(ws.handle, CUBLAS_OP_N, CUBLAS_OP_N, g.rows, g.cols, g.inner, &one,
                                                ws.a_ptr + (int64_t)t * N, CUDA_R_32F, g.lda,
                                                ws.b_ptr + (int64_t)t * N, CUDA_R_32F, g.ldb,
                                                &zero, ws.c_ptr + (int64_t)t * N, CUDA_R_32F, g.ldc,
                                                N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
            }
            tt_embedding_forward_kernel2_reduce<<<(unsigned)ceil_div<int64_t>((int64_t)N * 32, block_size), block_size>>>(
                acc, ws.tr[s.T - 2], ws.bag_of + start, N, s.D);
        }
    }
    if (sizeof(floatX) != sizeof(float)) {
        const int64_t n = nbags * s.D;
        tt_embedding_forward_kernel_to_floatX<<<(unsigned)ceil_div<int64_t>(n, 256), 256>>>(out, acc, n);
    }
}

void tt_embedding_forward3(floatX* out, const int64_t* indices, const int64_t* offsets, const TtEmbeddingForwardCores& cores,
                           const TtEmbeddingForwardShape& s, const TtEmbeddingForwardWorkspace& ws, int block_size) {
    const int64_t nbags = (int64_t)s.tables * s.B;
    if (ws.scratch3) {                                      // buffers in global memory: as many blocks as the scratch holds
        const int64_t grid = std::max<int64_t>(1, std::min<int64_t>(nbags, ws.scratch3_warps / (block_size / 32)));
        tt_embedding_forward_kernel3<<<(unsigned)grid, block_size, 0>>>(out, indices, offsets, cores, s, ws.scratch3);
        return;
    }
    const unsigned grid = (unsigned)std::min<int64_t>(nbags, INT32_MAX);
    const size_t smem = tt_embedding_forward_smem3_bytes(s, block_size / 32);
    tt_embedding_forward_kernel3<<<grid, block_size, smem>>>(out, indices, offsets, cores, s, nullptr);
}

void tt_embedding_forward4(floatX* out, const int64_t* indices, const int64_t* offsets, const TtEmbeddingForwardCores& cores,
                           const TtEmbeddingForwardShape& s, TtEmbeddingForwardWorkspace& ws, int block_size) {
    const int64_t nbags = (int64_t)s.tables * s.B, nnz = s.nnz;
    if (nnz > 0) {
        tt_embedding_forward_kernel4_keys<<<(unsigned)ceil_div<int64_t>(nnz, 256), 256>>>(ws.keys_in, ws.vals_in, indices, offsets, s, ws.group);
        size_t temp = ws.cub_temp_bytes;
        cudaCheck(cub::DeviceRadixSort::SortPairs(ws.cub_temp, temp, ws.keys_in, ws.keys_out, ws.vals_in, ws.vals_out,
                                                  (int)nnz, 0, ws.group.end_bit));
        const int warps = block_size / 32, C = warps * TT_EMBEDDING_FORWARD_LOOKUPS_PER_WARP;
        const size_t smem = tt_embedding_forward_smem4_bytes(s, ws.group, warps);
        tt_embedding_forward_kernel4<<<(unsigned)ceil_div<int64_t>(nnz, C), block_size, smem>>>(
            ws.rowbuf, ws.keys_out, ws.vals_out, indices, cores, s, ws.group);
    }
    const int64_t n = nbags * s.D;
    tt_embedding_forward_kernel4_pool<<<(unsigned)ceil_div<int64_t>(n, 256), 256>>>(out, ws.rowbuf, offsets, nbags, s.D);
}

void tt_embedding_forward5(floatX* out, const int64_t* indices, const int64_t* offsets, const TtEmbeddingForwardCores& cores,
                           const TtEmbeddingForwardShape& s, TtEmbeddingForwardWorkspace& ws, int block_size) {
    const int64_t nbags = (int64_t)s.tables * s.B, nnz = s.nnz;
    if (nnz > 0) {
        tt_embedding_forward_kernel4_keys<<<(unsigned)ceil_div<int64_t>(nnz, 256), 256>>>(ws.keys_in, ws.vals_in, indices, offsets, s, ws.group5);
        size_t temp = ws.cub_temp_bytes;
        cudaCheck(cub::DeviceRadixSort::SortPairs(ws.cub_temp, temp, ws.keys_in, ws.keys_out, ws.vals_in, ws.vals_out,
                                                  (int)nnz, 0, ws.group5.end_bit));
        const int warps = block_size / 32, C = warps * TT_EMBEDDING_FORWARD_LOOKUPS_PER_WARP;
        const size_t smem = tt_embedding_forward_smem5_bytes(s, ws.group5, ws.tc, warps);
        tt_embedding_forward_kernel5<<<(unsigned)ceil_div<int64_t>(nnz, C), block_size, smem>>>(
            ws.rowbuf, ws.keys_out, ws.vals_out, indices, cores, s, ws.group5, ws.tc);
    }
    const int64_t n = nbags * s.D;
    tt_embedding_forward_kernel4_pool<<<(unsigned)ceil_div<int64_t>(n, 256), 256>>>(out, ws.rowbuf, offsets, nbags, s.D);
}

// Version 6: plan (one block), chains (a block per item), then version 4's pooling in lookup order
void tt_embedding_forward6(floatX* out, const int64_t* indices, const int64_t* offsets, const TtEmbeddingForwardCores& cores,
                           const TtEmbeddingForwardShape& s, TtEmbeddingForwardWorkspace& ws, int block_size) {
    const int64_t nbags = (int64_t)s.tables * s.B, nnz = s.nnz;
    if (nnz > 0) {
        const int warps = block_size / 32, C = warps * TT_EMBEDDING_FORWARD_V6_P;
        const int max_items = tt_embedding_forward_v6_max_items(s, ws.plan6, C);
        tt_embedding_forward_kernel6_plan<<<1, TT_EMBEDDING_FORWARD_V6_PLAN_THREADS, tt_embedding_forward_plan6_smem_bytes(ws.plan6)>>>(
            ws.items6, ws.perm6, ws.sidx6, ws.keys6, indices, offsets, s, ws.plan6.g, C, max_items);
        tt_embedding_forward_kernel6<<<(unsigned)max_items, block_size, tt_embedding_forward_smem6_bytes(s, ws.plan6, warps)>>>(
            ws.rowbuf, ws.items6, ws.perm6, ws.sidx6, cores, s, ws.plan6);
    }
    const int64_t n = nbags * s.D;
    tt_embedding_forward_kernel4_pool<<<(unsigned)ceil_div<int64_t>(n, 256), 256>>>(out, ws.rowbuf, offsets, nbags, s.D);
}

// Version 7: one kernel, a bag per block (its shape checked by tt_embedding_forward_v7_reason)
void tt_embedding_forward7(floatX* out, const int64_t* indices, const int64_t* offsets, const TtEmbeddingForwardCores& cores,
                           const TtEmbeddingForwardShape& s, int block_size) {
    const int64_t nbags = (int64_t)s.tables * s.B;
    const unsigned grid = (unsigned)std::min<int64_t>(nbags, INT32_MAX);
    tt_embedding_forward_kernel7<4, 4><<<grid, block_size, tt_embedding_forward_smem7_bytes(s, block_size / 32)>>>(
        out, indices, offsets, cores, s);
}

// Version 8: as many blocks as fit on the device at once (each warp's ring runs through several bags)
void tt_embedding_forward8(floatX* out, const int64_t* indices, const int64_t* offsets, const TtEmbeddingForwardCores& cores,
                           const TtEmbeddingForwardShape& s, const TtEmbeddingForwardWorkspace& ws, int block_size) {
    const int64_t nbags = (int64_t)s.tables * s.B;
    const size_t smem = tt_embedding_forward_smem8_bytes(s, block_size / 32);
    const int per_sm = std::max<int>(1, (int)std::min<size_t>(ws.max_smem / smem, 2048 / block_size));
    const unsigned grid = (unsigned)std::min<int64_t>(nbags, (int64_t)per_sm * ws.num_sms);
    tt_embedding_forward_kernel8<4, 4><<<std::max(grid, 1u), block_size, smem>>>(out, indices, offsets, cores, s);
}

// Version 9: a block per (key of core 1, segment of the table's lookups), then version 4's pooling
void tt_embedding_forward9(floatX* out, const int64_t* indices, const int64_t* offsets, const TtEmbeddingForwardCores& cores,
                           const TtEmbeddingForwardShape& s, TtEmbeddingForwardWorkspace& ws, int block_size) {
    const int64_t nbags = (int64_t)s.tables * s.B;
    if (s.nnz > 0) {
        const int segments = tt_embedding_forward_v9_segments(s);
        const int64_t grid = (int64_t)s.tables * s.p[1] * segments;
        const size_t smem = tt_embedding_forward_smem9_bytes(s, block_size / 32);
        const int per_sm = ws.per_sm9[block_size / 32];     // persistent blocks: as many as fit at once
        const int64_t blocks = std::min<int64_t>(grid, (int64_t)std::max(per_sm, 1) * ws.num_sms);
        tt_embedding_forward_kernel9<4, 4><<<(unsigned)blocks, block_size, smem>>>(ws.rowbuf, indices, offsets, cores, s,
                                                                                 segments, ws.fd9, ws.fast9, ws.work9);
    }
    const int64_t n = nbags * s.D;
    tt_embedding_forward_kernel4_pool<<<(unsigned)ceil_div<int64_t>(n, 256), 256>>>(out, ws.rowbuf, offsets, nbags, s.D);
}

// Versions 10-12: version 9's items with the chain on tensor cores, then version 4's pooling. 11 and 12 run the
// digit kernel first (12 also counts each key's lookups) and launch the chain and pooling kernels with PDL.
void tt_embedding_forward10(floatX* out, const int64_t* indices, const int64_t* offsets, const TtEmbeddingForwardCores& cores,
                            const TtEmbeddingForwardShape& s, TtEmbeddingForwardWorkspace& ws, int block_size, int version) {
    const int64_t nbags = (int64_t)s.tables * s.B;
    const bool digits = version >= 11, counts = version == 12;
    if (s.nnz > 0) {
        if (digits)
            tt_embedding_forward_kernel11_digits<<<(unsigned)ceil_div<int64_t>(s.nnz, 256), 256>>>(
                ws.digits11, counts ? ws.key_count11 : nullptr, indices, offsets, s, ws.fd9, ws.fast9);
        const int segments = tt_embedding_forward_v9_segments(s, digits ? TT_EMBEDDING_FORWARD_V11_TARGET : TT_EMBEDDING_FORWARD_V10_TARGET);
        const int64_t grid = (int64_t)s.tables * s.p[1] * segments;
        const size_t smem = tt_embedding_forward_smem10_bytes(s, block_size / 32, digits);
        const int per_sm = (digits ? ws.per_sm11 : ws.per_sm10)[block_size / 32];
        // (version 12: the items are known on the device only; blocks without one exit at once)
        const unsigned blocks = (unsigned)std::min<int64_t>(counts ? INT32_MAX : grid, (int64_t)std::max(per_sm, 1) * ws.num_sms);
        TtEmbeddingForwardKernel10 kernel = tt_embedding_forward_v10_kernel(s, digits);
        int* key_count = counts ? ws.key_count11 : nullptr;
        if (digits)
            tt_embedding_forward_launch_pdl(kernel, blocks, (unsigned)block_size, smem, ws.rowbuf, indices, (const uint16_t*)ws.digits11,
                                            key_count, offsets, cores, s, segments, ws.fd9, ws.fast9, ws.work9);
        else
            kernel<<<blocks, block_size, smem>>>(ws.rowbuf, indices, ws.digits11, key_count, offsets, cores, s, segments, ws.fd9, ws.fast9,
                                                 ws.work9);
    }
    const int64_t n = nbags * s.D;
    const unsigned pool_blocks = (unsigned)ceil_div<int64_t>(n, 256);
    if (digits && s.nnz > 0)
        tt_embedding_forward_launch_pdl(tt_embedding_forward_kernel4_pool, pool_blocks, 256u, (size_t)0, out, (const float*)ws.rowbuf, offsets,
                                        nbags, s.D);
    else
        tt_embedding_forward_kernel4_pool<<<pool_blocks, 256>>>(out, ws.rowbuf, offsets, nbags, s.D);
}

void tt_embedding_forward(int kernel_num, floatX* out, const int64_t* indices, const int64_t* offsets,
                          const TtEmbeddingForwardCores& cores, const TtEmbeddingForwardShape& s,
                          TtEmbeddingForwardWorkspace& ws, int block_size) {
    switch (kernel_num) {
        case 1: tt_embedding_forward1(out, indices, offsets, cores, s, block_size); break;
        case 2: tt_embedding_forward2(out, indices, offsets, cores, s, ws, block_size); break;
        case 3: tt_embedding_forward3(out, indices, offsets, cores, s, ws, block_size); break;
        case 4: tt_embedding_forward4(out, indices, offsets, cores, s, ws, block_size); break;
        case 5: tt_embedding_forward5(out, indices, offsets, cores, s, ws, block_size); break;
        case 6: tt_embedding_forward6(out, indices, offsets, cores, s, ws, block_size); break;
        case 7: tt_embedding_forward7(out, indices, offsets, cores, s, block_size); break;
        case 8: tt_embedding_forward8(out, indices, offsets, cores, s, ws, block_size); break;
        case 9: tt_embedding_forward9(out, indices, offsets, cores, s, ws, block_size); break;
        case 11:                            // the default: version 3's kernel at the shapes 11 is not compiled for
            if (!tt_embedding_forward_v11_fast(s, ws)) { tt_embedding_forward3(out, indices, offsets, cores, s, ws, block_size); break; }
            tt_embedding_forward10(out, indices, offsets, cores, s, ws, block_size, kernel_num);
            break;
        case 10:
        case 12: tt_embedding_forward10(out, indices, offsets, cores, s, ws, block_size, kernel_num); break;
        default: fail_args("tt_embedding_forward has no version %d", kernel_num);
    }
}

// terms of version 1's explicit sum over the whole call
inline double tt_embedding_forward_naive_terms(const TtEmbeddingForwardShape& s) {
    double terms = 1.0;
    for (int t = 1; t < s.T; t++) terms *= s.R[t];
    return terms * (double)s.nnz * s.D;
}

// versions 10-12's preconditions (11's decide whether the default runs its compiled kernel); "" when it runs
std::string tt_embedding_forward_tc_reason(int kernel_num, const TtEmbeddingForwardShape& s, const TtEmbeddingForwardWorkspace& ws) {
    char buf[256];
    std::string why = kernel_num == 10 ? tt_embedding_forward_v10_reason(s) : tt_embedding_forward_v11_reason(s);
    if (!why.empty()) return kernel_num == 12 ? "as version 11: " + why : why;
    if (kernel_num == 12 && (int64_t)s.tables * s.p[1] > TT_EMBEDDING_FORWARD_V12_MAX_KEYS) {
        snprintf(buf, sizeof buf, "its item table holds tables x p_1 <= %d keys (%lld); version 11 covers this shape",
                 TT_EMBEDDING_FORWARD_V12_MAX_KEYS, (long long)s.tables * s.p[1]);
        return buf;
    }
    const double reads = (double)s.p[1] * (double)s.nnz;          // as version 9
    const int target = kernel_num == 10 ? TT_EMBEDDING_FORWARD_V10_TARGET : TT_EMBEDDING_FORWARD_V11_TARGET;   // (12: at most)
    if ((double)s.tables * s.p[1] * tt_embedding_forward_v9_segments(s, target) > (double)INT32_MAX || reads > 1e10) {
        snprintf(buf, sizeof buf, "its blocks would read %.3g indices in all (p_1 x lookups; limit 1e10) or exceed the grid", reads);
        return buf;
    }
    if (tt_embedding_forward_smem10_bytes(s, 1, kernel_num >= 11) > ws.max_smem) {
        snprintf(buf, sizeof buf, "one warp's buffers (%zu bytes) exceed the %zu bytes of shared memory per block",
                 tt_embedding_forward_smem10_bytes(s, 1, kernel_num >= 11), ws.max_smem);
        return buf;
    }
    return "";
}

// the precondition of each version on a shape, "" when it can run
std::string tt_embedding_forward_skip_reason(int kernel_num, const TtEmbeddingForwardShape& s,
                                             const TtEmbeddingForwardWorkspace& ws) {
    char buf[256];
    if (kernel_num == 1 && tt_embedding_forward_naive_terms(s) > (double)TT_EMBEDDING_FORWARD_MAX_NAIVE_TERMS) {
        snprintf(buf, sizeof buf, "its explicit sum has %.3g terms per call (> 2^35, minutes of GPU time); the chain versions cover this shape",
                 tt_embedding_forward_naive_terms(s));
        return buf;
    }
    if (kernel_num == 4) {
        TtEmbeddingForwardGroup g;
        std::string why = tt_embedding_forward_make_group(s, g);
        if (!why.empty()) return why;
        if (tt_embedding_forward_smem4_bytes(s, g, 1) > ws.max_smem) {
            snprintf(buf, sizeof buf, "the grouped slices and one warp's buffers (%zu bytes) exceed the %zu bytes of shared memory per block",
                     tt_embedding_forward_smem4_bytes(s, g, 1), ws.max_smem);
            return buf;
        }
    }
    if (kernel_num == 5) {
        TtEmbeddingForwardTc tc;
        std::string why = tt_embedding_forward_make_tc(s, tc);
        if (!why.empty()) return why;
        TtEmbeddingForwardGroup g;
        why = tt_embedding_forward_make_group(s, g, tc.h);
        if (!why.empty()) return why;
        if (tt_embedding_forward_smem5_bytes(s, g, tc, 1) > ws.max_smem) {
            snprintf(buf, sizeof buf, "its slices and one warp's buffers (%zu bytes) exceed the %zu bytes of shared memory per block",
                     tt_embedding_forward_smem5_bytes(s, g, tc, 1), ws.max_smem);
            return buf;
        }
    }
    if (kernel_num == 6) {
        TtEmbeddingForwardPlan6 pl;
        std::string why = tt_embedding_forward_make_plan6(s, pl);
        if (!why.empty()) return why;
        if (tt_embedding_forward_plan6_smem_bytes(pl) > ws.max_smem) {
            snprintf(buf, sizeof buf, "its planner's per-key counters (%lld keys, %zu bytes) exceed the %zu bytes of shared memory per block",
                     (long long)pl.g.nkeys, tt_embedding_forward_plan6_smem_bytes(pl), ws.max_smem);
            return buf;
        }
        if (tt_embedding_forward_smem6_bytes(s, pl, 1) > ws.max_smem) {
            snprintf(buf, sizeof buf, "the item's slices and one warp's buffers (%zu bytes) exceed the %zu bytes of shared memory per block",
                     tt_embedding_forward_smem6_bytes(s, pl, 1), ws.max_smem);
            return buf;
        }
    }
    if (kernel_num >= 7 && kernel_num <= 9) {
        std::string why = tt_embedding_forward_v7_reason(s);
        if (!why.empty()) return (kernel_num > 7 ? "as version 7: " : "") + why;
        if (kernel_num == 9) {
            const double reads = (double)s.p[1] * (double)s.nnz;          // every block reads its segment's indices
            if ((double)s.tables * s.p[1] * tt_embedding_forward_v9_segments(s) > (double)INT32_MAX || reads > 1e10) {
                snprintf(buf, sizeof buf, "its blocks would read %.3g indices in all (p_1 x lookups; limit 1e10) or exceed the grid", reads);
                return buf;
            }
        }
        const size_t bytes = kernel_num == 7 ? tt_embedding_forward_smem7_bytes(s, 1)
                             : kernel_num == 8 ? tt_embedding_forward_smem8_bytes(s, 1) : tt_embedding_forward_smem9_bytes(s, 1);
        if (bytes > ws.max_smem) {
            snprintf(buf, sizeof buf, "one warp's buffers (%zu bytes) exceed the %zu bytes of shared memory per block",
                     bytes, ws.max_smem);
            return buf;
        }
    }
    if (kernel_num == 11) return "";                         // the default runs every shape (see tt_embedding_forward)
    if (kernel_num >= 10) return tt_embedding_forward_tc_reason(kernel_num, s, ws);
    return "";
}

// each version's block sizes: version 1 two (it is slow), version 2 one (its kernels are small helpers
// around cuBLAS), versions 3-6 those whose shared memory and registers fit
std::vector<int> tt_embedding_forward_blocks(int kernel_num, const TtEmbeddingForwardShape& s,
                                             const TtEmbeddingForwardWorkspace& ws) {
    if (kernel_num == 1) return {64, 256};
    if (kernel_num == 2) return {256};
    std::vector<int> out;
    for (int b : {32, 64, 128, 256, 512, 1024}) {
        if (kernel_num == 11 && !tt_embedding_forward_v11_fast(s, ws)) return tt_embedding_forward_blocks(3, s, ws);
        if (b > ws.max_threads[kernel_num]) break;          // the compiled kernel's register budget
        if (kernel_num == 3 && ws.scratch3) { out.push_back(b); continue; }
        const size_t bytes = kernel_num == 3   ? tt_embedding_forward_smem3_bytes(s, b / 32)
                             : kernel_num == 4 ? tt_embedding_forward_smem4_bytes(s, ws.group, b / 32)
                             : kernel_num == 5 ? tt_embedding_forward_smem5_bytes(s, ws.group5, ws.tc, b / 32)
                             : kernel_num == 6 ? tt_embedding_forward_smem6_bytes(s, ws.plan6, b / 32)
                             : kernel_num == 7 ? tt_embedding_forward_smem7_bytes(s, b / 32)
                             : kernel_num == 8 ? tt_embedding_forward_smem8_bytes(s, b / 32)
                             : kernel_num == 9 ? tt_embedding_forward_smem9_bytes(s, b / 32)
                                               : tt_embedding_forward_smem10_bytes(s, b / 32, kernel_num >= 11);
        if (bytes <= ws.max_smem) out.push_back(b);
    }
    return out;
}

// ----------------------------------------------------------------------------------------------

#ifndef NO_MAIN
int main(int argc, char** argv) {
    std::vector<int> p = {200, 220, 250}, q = {4, 4, 4}, ranks = {32, 32};
    int tables = 1, B = 512, L = 20, D = 0, chunk = 1000;
    int64_t E = 0;
    double alpha = 0.0;
    bool ragged = false;
    Cli cli("tt_embedding_forward",
            "Tensor-train embedding bags, forward: each looked-up row is a chain of T core-slice products; SUM over each bag.",
            TT_EMBEDDING_FORWARD_NUM_KERNELS, 11);
    cli.add_int_list("p", &p, "row factors p_0..p_{T-1} (T = len(p) cores)");
    cli.add_int_list("q", &q, "column factors q_0..q_{T-1}");
    cli.add_int_list("ranks", &ranks, "inner TT ranks R_1..R_{T-1}");
    cli.add_int("tables", &tables, "number of tables (cores batched over tables)");
    cli.add_int("B", &B, "bags per table");
    cli.add_int("L", &L, "lookups per bag");
    cli.add_int64("E", &E, "rows per table (0: prod p)");
    cli.add_int("D", &D, "embedding dimension, must equal prod q (0: prod q)");
    cli.add_double("alpha", &alpha, "Zipf exponent of the indices (<= 1: uniform)");
    cli.add_flag("ragged", &ragged, "bags of random sizes (the first bag of every table empty), same total lookups");
    cli.add_int("chunk", &chunk, "lookups per cuBLAS batch in version 2 (FBTT's batch_count)");
    cli.constraints = "  T = len(p) in 2..6, len(q) = T, len(ranks) = T - 1, all entries >= 1;\n"
                      "  prod p >= E, prod q = D; tables, B >= 1, L >= 0; Zipf (alpha > 1) needs E >= L;\n"
                      "  every index < E (made so here; the validator checks it)";
    cli.parse(argc, argv);
    TtEmbeddingForwardShape s;
    std::string why = tt_embedding_forward_make_shape(s, p, q, ranks, E, D, tables, B, L, alpha);
    if (!why.empty()) fail_args("%s", why.c_str());
    require(chunk >= 1, "--chunk (%d) must be >= 1", chunk);

    // inputs: cores uniform in +-sqrt(3 / R_{t+1}) (unit variance per row element), then bags
    Rng rng(cli.seed);
    std::vector<std::vector<float>> cores_h(s.T);
    for (int t = 0; t < s.T; t++) {
        const float a = sqrtf(3.0f / (float)s.R[t + 1]);
        cores_h[t] = make_random_floats((size_t)s.tables * s.p[t] * s.slice[t], rng, -a, a);
    }
    const int64_t nbags = (int64_t)s.tables * s.B;
    std::vector<int64_t> indices = make_bag_indices(nbags, s.L, s.E, alpha, rng);
    std::vector<int64_t> offsets = tt_embedding_forward_make_offsets(s, ragged, rng);
    why = tt_embedding_forward_validate_bags(indices, offsets, nbags, s.E);
    if (!why.empty()) fail_args("%s", why.c_str());

    cudaDeviceProp prop = cuda_init();

    std::vector<const float*> core_ptrs(s.T);
    for (int t = 0; t < s.T; t++) core_ptrs[t] = cores_h[t].data();
    std::vector<float> ref((size_t)nbags * s.D);
    tt_embedding_forward_cpu(ref.data(), core_ptrs.data(), indices.data(), offsets.data(), s);

    TtEmbeddingForwardCores cores = {};
    for (int t = 0; t < s.T; t++) cores.c[t] = device_upload(cores_h[t]);
    int64_t* d_indices = device_upload(indices);
    int64_t* d_offsets = device_upload(offsets);
    floatX* d_out = device_alloc<floatX>((size_t)nbags * s.D);
    TtEmbeddingForwardWorkspace ws;
    tt_embedding_forward_setup(ws, s, chunk, prop);

    std::string shape = "T" + std::to_string(s.T) + ",p";
    for (int t = 0; t < s.T; t++) shape += (t ? "x" : "") + std::to_string(s.p[t]);
    shape += ",q";
    for (int t = 0; t < s.T; t++) shape += (t ? "x" : "") + std::to_string(s.q[t]);
    shape += ",r";
    for (int t = 1; t < s.T; t++) shape += (t > 1 ? "x" : "") + std::to_string(s.R[t]);
    shape += ",nt" + std::to_string(s.tables) + ",B" + std::to_string(s.B) + ",L" + std::to_string(s.L);
    if (s.E != s.prod_p) shape += ",E" + std::to_string(s.E);
    {
        char a[32];
        snprintf(a, sizeof a, ",alpha%g", alpha);
        shape += a;
    }
    if (ragged) shape += ",ragged";

    const double flops_lookup = tt_embedding_forward_flops_per_lookup(s);
    printf("%s: %lld lookups in %lld bags, D %d, %.0f FLOPs per lookup, cores %lld floats (%.1fx smaller than the %lld x %d table%s)\n",
           shape.c_str(), (long long)s.nnz, (long long)nbags, s.D, flops_lookup,
           (long long)tt_embedding_forward_core_floats(s),
           (double)s.E * s.D * s.tables / (double)tt_embedding_forward_core_floats(s), (long long)s.E, s.D,
           s.tables > 1 ? "s" : "");
    if (ws.group_ok)
        printf("version 4 groups by core%s %d%s%s (%lld keys)\n", ws.group.ncores > 1 ? "s" : "", ws.group.core[0],
               ws.group.ncores > 1 ? " and " : "", ws.group.ncores > 1 ? std::to_string(ws.group.core[1]).c_str() : "",
               (long long)ws.group.nkeys);
    if (ws.plan6_ok) {
        const int C = 8 * TT_EMBEDDING_FORWARD_V6_P;
        printf("version 6 buckets by core%s %d%s%s (%lld keys; at block 256 items of <= %d lookups, <= %d items), %d other slice%s staged per lookup\n",
               ws.plan6.g.ncores > 1 ? "s" : "", ws.plan6.g.core[0], ws.plan6.g.ncores > 1 ? " and " : "",
               ws.plan6.g.ncores > 1 ? std::to_string(ws.plan6.g.core[1]).c_str() : "", (long long)ws.plan6.g.nkeys, C,
               tt_embedding_forward_v6_max_items(s, ws.plan6, C), ws.plan6.n_ng, ws.plan6.n_ng == 1 ? "" : "s");
    }
    if (ws.tc_ok)
        printf("version 5 runs core %d's step on tensor cores (TF32), groups by core%s %d%s%s (%lld keys)\n", ws.tc.h,
               ws.group5.ncores > 1 ? "s" : "", ws.group5.core[0], ws.group5.ncores > 1 ? " and " : "",
               ws.group5.ncores > 1 ? std::to_string(ws.group5.core[1]).c_str() : "", (long long)ws.group5.nkeys);

    OpRunner r;
    r.op = "tt_embedding_forward";
    r.shape = shape;
    r.bytes = tt_embedding_forward_bytes(s);
    r.flops = flops_lookup * (double)s.nnz;
    r.skip_reason = [&](int k) { return tt_embedding_forward_skip_reason(k, s, ws); };
    r.blocks_for = [&](int k) { return tt_embedding_forward_blocks(k, s, ws); };
    r.prepare_check = [&] {
        poison(d_out, (size_t)nbags * s.D * sizeof(floatX));
        tt_embedding_forward_poison_workspace(ws, s);
    };
    // --block N bypasses the block lists: versions 3-6 need whole warps and shared memory that fits, so a
    // given block is fitted once here (the largest allowed size <= N), not inside the timed launch
    int fitted[TT_EMBEDDING_FORWARD_NUM_KERNELS + 1] = {};
    if (cli.block) {
        for (int k = 3; k <= TT_EMBEDDING_FORWARD_NUM_KERNELS; k++) {
            if (!tt_embedding_forward_skip_reason(k, s, ws).empty()) continue;
            std::vector<int> ok = tt_embedding_forward_blocks(k, s, ws);
            fitted[k] = ok.empty() ? 32 : ok[0];
            for (int b : ok) if (b <= cli.block) fitted[k] = b;
            if (fitted[k] != cli.block) printf("version %d runs --block %d as %d (whole warps, shared memory that fits)\n", k, cli.block, fitted[k]);
        }
    }
    r.launch = [&](int k, int block) {
        tt_embedding_forward(k, d_out, d_indices, d_offsets, cores, s, ws, fitted[k] ? fitted[k] : block);
    };
    // versions 6 and 9-11 claim bitwise the same output at every block size (rows do not depend on where they
    // are computed, bags are summed in lookup order): the first block's output is kept and the others compared
    std::vector<floatX> first_out[TT_EMBEDDING_FORWARD_NUM_KERNELS + 1];
    int first_block[TT_EMBEDDING_FORWARD_NUM_KERNELS + 1] = {};
    r.check = [&](int k, int block) {
        const bool tf32 = k == 5;
        bool ok = validate_device(tf32 ? "out (TF32)" : "out", d_out, ref.data(), (size_t)nbags * s.D,
                                  tf32 ? std::max(TT_EMBEDDING_FORWARD_TF32_ATOL, TT_EMBEDDING_FORWARD_ATOL) : TT_EMBEDDING_FORWARD_ATOL,
                                  tf32 ? std::max(TT_EMBEDDING_FORWARD_TF32_RTOL, TT_EMBEDDING_FORWARD_RTOL) : TT_EMBEDDING_FORWARD_RTOL);
        if (k == 6 || (k >= 9 && (k != 11 || tt_embedding_forward_v11_fast(s, ws)))) {
            std::vector<floatX> got = device_download(d_out, (size_t)nbags * s.D);
            if (first_out[k].empty()) {
                first_out[k] = got;
                first_block[k] = block;
            } else {
                size_t diff = 0;
                for (size_t i = 0; i < got.size(); i++) diff += memcmp(&got[i], &first_out[k][i], sizeof(floatX)) != 0;
                printf("version %d, block %d: %s block %d's output (%zu of %zu values differ)\n", k, block,
                       diff ? "NOT bitwise equal to" : "bitwise equal to", first_block[k], diff, got.size());
                ok = ok && diff == 0;
            }
        }
        return ok;
    };
    r.extra = [&](int, int, double ms) {
        char buf[64];
        snprintf(buf, sizeof buf, "us_per_lookup=%.5f", s.nnz > 0 ? ms * 1e3 / (double)s.nnz : 0.0);
        return std::string(buf);
    };
    int rc = run_versions(cli, r);

    if (!cli.dump_dir.empty()) {
        std::vector<float> got = to_float_vec(device_download(d_out, (size_t)nbags * s.D));
        for (int t = 0; t < s.T; t++)
            write_npy(cli.dump_dir, "tt_embedding_forward_core" + std::to_string(t), cores_h[t].data(),
                      {s.tables, s.p[t], s.slice[t]});
        write_npy(cli.dump_dir, "tt_embedding_forward_indices", indices.data(), {(int64_t)indices.size()});
        write_npy(cli.dump_dir, "tt_embedding_forward_offsets", offsets.data(), {(int64_t)offsets.size()});
        // meta: T, tables, B, E, D, then p[0..T-1], q[0..T-1], R[0..T]
        std::vector<int64_t> meta = {s.T, s.tables, s.B, s.E, s.D};
        for (int t = 0; t < s.T; t++) meta.push_back(s.p[t]);
        for (int t = 0; t < s.T; t++) meta.push_back(s.q[t]);
        for (int t = 0; t <= s.T; t++) meta.push_back(s.R[t]);
        write_npy(cli.dump_dir, "tt_embedding_forward_meta", meta.data(), {(int64_t)meta.size()});
        write_npy(cli.dump_dir, "tt_embedding_forward_out_ref", ref.data(), {s.tables, s.B, s.D});
        write_npy(cli.dump_dir, "tt_embedding_forward_out", got.data(), {s.tables, s.B, s.D});
        const std::string shape_path = cli.dump_dir + "/tt_embedding_forward_shape.txt";   // the RESULT shape, for the peers
        FILE* f = fopen(shape_path.c_str(), "w");
        if (!f) fail_args("cannot write '%s': %s", shape_path.c_str(), strerror(errno));
        fprintf(f, "%s\n", shape.c_str());
        fclose(f);
        printf("dumped tt_embedding_forward_{core0..%d,indices,offsets,meta,out_ref,out}.npy and _shape.txt to %s\n", s.T - 1,
               cli.dump_dir.c_str());
    }
    tt_embedding_forward_free(ws);
    for (int t = 0; t < s.T; t++) cudaCheck(cudaFree(const_cast<float*>(cores.c[t])));
    cudaCheck(cudaFree(d_indices));
    cudaCheck(cudaFree(d_offsets));
    cudaCheck(cudaFree(d_out));
    return rc;
}
#endif
