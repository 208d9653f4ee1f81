/*
tt_cache: the LFU row cache of a tensor-train embedding (FBTT-Embedding's cache; docs/tt_cache.md). Rows counted
during warm-up steps (lfu_count.cu) are ranked; the top C are rebuilt once by the TT forward into a dense cache
[C, D] fp32; then every step splits its lookups into cached ones (a row of the cache) and TT ones (the chain).
  table   : lfu_count's keys/counts int64[H] plus cache_state int32[H] (cache row, -1 none); key = tbl * E + row
  populate: slots sorted by count, descending (CUB, stable: ties in slot order); sorted position n < C holding a key
            -> cache row n, built by the TT forward; the table is then REBUILT (cleared, the kept keys re-inserted
            cluster by cluster in slot order, so none moves past its window); no row for positions without a key
  step    : per lookup find (stops at an empty slot), cached if cache_state >= 0; the TT part (order kept) goes to
            tt_embedding_forward/backward's default versions with offsets rebuilt on the device and its count left
            there (the backward's shape.nnz_dev: its work follows the part); out += the SUM of cache rows; cache
            backward grouped per row (CUB radix sort, stable): SGD, dense, rowwise Adagrad in lookup order (no race)
  no host round trip in a step; any number of tables (one table of tables * E keys, one cache)
Bytes of a step beyond the TT ops (fewest): 8 nnz (ids) + ~16 per distinct row found + 4 D per cached lookup
  (rows read) + 4 D (1 + w) per cached row updated (w: 1 sgd, 2 adagrad); the step is latency-bound (kernels in series).

Versions (the step: partition, TT forward of the TT part, cached forward, TT backward, cached backward). H200,
2026-12-02, FBTT's default, Zipf 1.15, hit rate 0.992, median ms at the best block, SGD / rowwise Adagrad; TT ops
alone 0.1307 / 0.1353 (results/logs/2026-12-02_bench_tt_cache_warp_rows.log):
  1  per-lookup stages: a warp per bag finds its lookups, CUB ExclusiveSum of the TT flags, an offsets kernel,
     two DevicePartition::Flagged (TT ids, cache rows); the cached backward a warp per row      0.2228 / 0.2436
  2  per-bag stages: the same warps count their bag's TT lookups, CUB ExclusiveSum over bags only, and a
     scatter kernel compacts both parts in order with warp ballots (no per-lookup scan or partition)  0.2108 / 0.2323
  3  version 2 with the cached backward's sort and update on a second stream, forked right after the lookup
     kernel (the sort needs only its keys), the update once the cached forward has read the rows  0.1681 / 0.1845
  4  version 3 with the cached backward by blocks: a row's run split over 8 warps, the parts' sum
     applied once (a hot row's loads 8 warps wide; rows within fp32 rounding, states bitwise)   0.0856 / 0.0991
  5  version 4 with runs cut every 32 sorted positions, a warp per piece and the pieces of a long run
     summed in order by a second kernel (SGD, dense; Adagrad keeps 4's update); the scan of the
     partition inside its scatter kernel (up to 8,192 bags)                                    0.0725 / 0.1004
  6  version 5 sorting dense numbers of the rows hit instead of the rows (the first lookup of a row in
     the step claims one by a CAS on a per-slot stamp): 14 bits instead of 21, 2 radix passes, not 3  0.0667 / 0.0898
  7  the default: version 6 with the TT part's rows built a warp per lookup (its slices staged in shared
     memory by cp.async) and pooled inside the cached forward, where populate expects a small part;
     the TT forward (sized for the batch: 20 us for 83 lookups) elsewhere; --part-rows forces either  0.0594 / 0.0861
  At T = 4 (p 40,50,55,60, q 4,4,2,4, ranks 32, SGD, hit 0.993): TT alone 0.6984, version 6 0.1526, 7 0.1381 (0.198x).
  retired: version 4 as one CUDA graph, 0.0809 / 0.0946 against 0.0862 / 0.0996 (git show 95a9148:<this file>, its 5).
Also printed: populate on its own (op tt_cache_populate; it reads back version 7's hit estimate) and the TT ops
alone on the whole batch (op tt_cache_tt_alone), same run; each version: hit_rate, vs_tt_alone, target (1 - hit / 2).

Check: partition against the CPU (find + cache_state on the CPU-populated table); out against the TT forward
reference of the whole batch (cache rows are TT rows); cores against the TT backward reference of the TT part
(its slice keys zeroed first, so a scan past the count would find lookups); cache rows and dense rows against the
sequential per-lookup reference (versions 1-3 bitwise in practice; 4-7 within 2e-6 x the sum of |update|),
Adagrad state, other rows untouched. Populate: the rebuilt table (every kept key in its window, no empty slot
before it, its count, its row), rows without a key untouched (still poison), the first rows against the CPU chain.

Run: make tt_cache && ./tt_cache all   (FBTT's default: p 200,220,250 q 4,4,4 ranks 32,32, B 512 L 20, Zipf 1.15,
                                          cache 10% of E, 4 warm-up steps)
Lessons (results/notes/tt_cache.md):
  - The TT ops must bound their work by the part's count on the device, not the host's nnz: at T = 4 that alone
    took the step from 1.03x to 0.36x of the TT ops alone (the backward's general kernels ran the whole batch).
  - A hot row (the top Zipf row is in most bags) is the critical path if one warp walks it: 8 warps (4) cut the
    step from 0.1765 to 0.0845 ms, pieces of 32 (5) the update kernel from 21 to 10 + 7 us.
  - Size the TT part's forward by the part (7): 0.0591-0.0608 against 6's 0.0662-0.0668 in alternating runs.
    The warp per lookup wins up to ~1,700 TT lookups a step, ties at ~4,100 and loses at 6,600 (the TT forward's
    grouping); populate's estimate (kept share less rows seen once) picks, since a step may not ask the host.
  - Moving work can lose: the cached forward on a third stream (0.0815 against 4's 0.0767), inside the partition
    kernel (no gain; ~5% slower at T = 4) or first on the side stream (0.0684-0.0714 against 6's 0.0671-0.0679).
*/
#ifndef NO_MAIN
#define NO_MAIN
#define TT_CACHE_MAIN
#endif
#include "lfu_count.cu"
#include "tt_embedding_backward.cu"
#include "tt_embedding_forward.cu"

#include <cub/block/block_reduce.cuh>
#include <cub/device/device_partition.cuh>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_reduce.cuh>
#include <cub/device/device_scan.cuh>

// the optimizers: tt_embedding_backward's ids (TT_EMBEDDING_BACKWARD_DENSE / _SGD / _ADAGRAD) for the cores and the cache
static const int TT_CACHE_EPL = 4;     // cached backward: elements of a row per lane at a time
static const int TT_CACHE_CHUNK = 32;  // cached backward: a row's occurrences staged per step (one per lane)

// ----------------------------------------------------------------------------------------------
// populate's arithmetic, shared by the CPU reference and the kernels

__host__ __device__ inline bool tt_cache_cluster_start(const int64_t* keys, uint64_t H, uint64_t s) {
    return keys[s] != LFU_COUNT_EMPTY && keys[s == 0 ? H - 1 : s - 1] == LFU_COUNT_EMPTY;
}

// Re-inserts the kept keys (rank >= 0) of the old table's cluster that starts at s (a run of occupied slots after
// an empty one) into the cleared table, in slot order. Each lands at or before its old slot: every key placed
// before it came from an earlier slot and sits at or before that one, so its old slot is still free, and the
// slots between its home and there were occupied in the old table by keys of this cluster. So no kept key is
// lost and clusters never meet (each thread owns its cluster's span). Returns the keys lost (0; checked).
__host__ __device__ inline int tt_cache_rebuild_cluster(const int64_t* old_keys, const int64_t* old_counts, const int* rank, uint64_t H,
                                                        uint64_t s, int64_t* keys, int64_t* counts, int* state) {
    int lost = 0;
    for (uint64_t j = s, walked = 0; old_keys[j] != LFU_COUNT_EMPTY && walked < H; j = lfu_count_next(j, H), walked++) {
        if (rank[j] < 0) continue;
        uint64_t t = lfu_count_slot(old_keys[j], H);
        int p = 0;
        while (p < LFU_COUNT_MAX_PROBES && keys[t] != LFU_COUNT_EMPTY) { t = lfu_count_next(t, H); p++; }
        if (p == LFU_COUNT_MAX_PROBES) { lost++; continue; }
        keys[t] = old_keys[j];
        counts[t] = old_counts[j];
        state[t] = rank[j];
    }
    return lost;
}

// cache row of a key: its slot's cache_state, or -1 (not in the table, or not cached)
__host__ __device__ inline int tt_cache_row_of(const int64_t* keys, const int* state, uint64_t H, int64_t key) {
    const int64_t s = lfu_count_find(keys, H, key);
    return s < 0 ? -1 : state[s];
}

// the rowwise Adagrad increment of a bag: the mean of its gradient's squares (fmaf in order: same bits on both sides)
__host__ __device__ inline float tt_cache_mean_square(const float* g, int D) {
    float ss = 0.0f;
    for (int d = 0; d < D; d++) ss = fmaf(g[d], g[d], ss);
    return ss / (float)D;
}

// The cached backward of one row, a chunk of at most TT_CACHE_CHUNK of its occurrences (in lookup order) at a time:
// 1. tt_cache_row_states: the rowwise Adagrad state after each occurrence, s_o = s_{o-1} + msq[bag_o] (a serial
//    chain of adds only: the same sums as the sequential reference); 2. each occurrence's multiplier lr / (sqrt(s_o)
//    + eps) (independent of each other: one per lane on the GPU); 3. tt_cache_apply_chunk: per element, the
//    occurrences' updates in order, one fmaf each (SGD, Adagrad) or an add (dense). The reference's arithmetic,
//    operation for operation (bitwise equal), but the square root and division leave the serial path, and the
//    gradient rows of a chunk can be loaded together.
__host__ __device__ inline float tt_cache_row_states(float s, float* m, int n) {   // m[o]: msq of occurrence o -> s_o
    for (int o = 0; o < n; o++) m[o] = s = s + m[o];
    return s;
}

// x[e]: element d0 + e * lanes + lane of the row (where < D); bags[o], mult[o]: occurrence o's bag and multiplier
__host__ __device__ inline void tt_cache_apply_chunk(int opt, float (&x)[TT_CACHE_EPL], const int* bags, const float* mult, int n,
                                                     const float* __restrict__ dY, int D, int d0, int lane, int lanes) {
#ifdef __CUDA_ARCH__
#pragma unroll 8
#endif
    for (int o = 0; o < n; o++) {
        const float* g = dY + (int64_t)bags[o] * D;
        for (int e = 0; e < TT_CACHE_EPL; e++) {
            const int d = d0 + e * lanes + lane;
            if (d < D) x[e] = opt == TT_EMBEDDING_BACKWARD_DENSE ? x[e] + g[d] : fmaf(-mult[o], g[d], x[e]);
        }
    }
}

// Version 4's cached backward splits a row's occurrences (a stage of at most TT_CACHE_STAGE4, in lookup order) over
// the W warps of a block: warp q takes occurrences [n q / W, n (q + 1) / W) and sums its part's updates, acc =
// fmaf(mult_o, g_o, acc) in order (dense: acc + g_o); the row then takes w -= part_0 + ... + part_{W-1} (in warp
// order; dense: dw = (stage > 0 ? dw : 0) + the sum). The states (and so the multipliers) stay the sequential ones
// bit for bit; the weights are the same sum in another order (within fp32 rounding of the sequential reference).
#ifndef TT_CACHE_BLOCK4_SIZE
#define TT_CACHE_BLOCK4_SIZE 256
#endif
static const int TT_CACHE_BLOCK4 = TT_CACHE_BLOCK4_SIZE, TT_CACHE_WARPS4 = TT_CACHE_BLOCK4 / 32, TT_CACHE_STAGE4 = 1024;
__host__ __device__ inline void tt_cache_part_sum(int opt, float (&acc)[TT_CACHE_EPL], const int* bags, const float* mult, int lo, int hi,
                                                  const float* __restrict__ dY, int D, int d0, int lane, int lanes) {
#ifdef __CUDA_ARCH__
#pragma unroll 4
#endif
    for (int o = lo; o < hi; o++) {
        const float* g = dY + (int64_t)bags[o] * D;
        for (int e = 0; e < TT_CACHE_EPL; e++) {
            const int d = d0 + e * lanes + lane;
            if (d < D) acc[e] = opt == TT_EMBEDDING_BACKWARD_DENSE ? acc[e] + g[d] : fmaf(mult[o], g[d], acc[e]);
        }
    }
}

// ----------------------------------------------------------------------------------------------
// CPU reference

// sorted position of each slot when n < C and the slot holds a key, else -1 (stable: ties in slot order)
std::vector<int> tt_cache_rank_cpu(const int64_t* keys, const int64_t* counts, uint64_t H, int64_t C) {
    std::vector<int64_t> order(H);
    for (uint64_t s = 0; s < H; s++) order[s] = (int64_t)s;
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return counts[a] > counts[b]; });
    std::vector<int> rank(H, -1);
    for (int64_t n = 0; n < std::min<int64_t>(C, (int64_t)H); n++)
        if (keys[order[n]] != LFU_COUNT_EMPTY) rank[order[n]] = (int)n;
    return rank;
}

// Populate on the host table (keys, counts; state resized to H): row_key[n] = the key of cache row n, -1 where
// no key was ranked n (nothing is built there). Returns the keys lost by the rebuild (0).
int tt_cache_populate_cpu(LfuCountHostTable& t, std::vector<int>& state, int64_t C, std::vector<int64_t>& row_key) {
    const uint64_t H = t.keys.size();
    const std::vector<int> rank = tt_cache_rank_cpu(t.keys.data(), t.counts.data(), H, C);
    const std::vector<int64_t> old_keys = t.keys, old_counts = t.counts;
    row_key.assign((size_t)C, -1);
    for (uint64_t s = 0; s < H; s++)
        if (rank[s] >= 0) row_key[rank[s]] = old_keys[s];
    std::fill(t.keys.begin(), t.keys.end(), LFU_COUNT_EMPTY);
    std::fill(t.counts.begin(), t.counts.end(), 0);
    state.assign(H, -1);
    int lost = 0;
    for (uint64_t s = 0; s < H; s++)
        if (tt_cache_cluster_start(old_keys.data(), H, s))
            lost += tt_cache_rebuild_cluster(old_keys.data(), old_counts.data(), rank.data(), H, s, t.keys.data(), t.counts.data(), state.data());
    return lost;
}

// the cached backward, one lookup after another (bags in order, lookups in bag order); mag (optional, [C, D], zeroed
// by the caller): each element's sum of |update| (|g| dense, |mult g| otherwise), the scale of a reordered sum's error
void tt_cache_backward_cpu(int opt, float lr, float eps, float* W, float* st, float* dW, const int* crow, const int64_t* offsets,
                           int64_t nbags, const float* dY, int D, int64_t C, float* mag = nullptr) {
    std::vector<char> seen((size_t)C, 0);
    for (int64_t b = 0; b < nbags; b++) {
        const float* g = dY + b * D;
        const float msq = tt_cache_mean_square(g, D);
        for (int64_t n = offsets[b]; n < offsets[b + 1]; n++) {
            const int c = crow[n];
            if (c < 0) continue;
            float* w = W + (int64_t)c * D;
            float mult = lr;
            if (opt == TT_EMBEDDING_BACKWARD_DENSE) {
                float* dw = dW + (int64_t)c * D;
                if (!seen[c]) std::fill(dw, dw + D, 0.0f);
                for (int d = 0; d < D; d++) dw[d] += g[d];
                mult = 1.0f;
            } else if (opt == TT_EMBEDDING_BACKWARD_SGD) {
                for (int d = 0; d < D; d++) w[d] = fmaf(-lr, g[d], w[d]);
            } else {
                st[c] += msq;
                mult = lr / (sqrtf(st[c]) + eps);
                for (int d = 0; d < D; d++) w[d] = fmaf(-mult, g[d], w[d]);
            }
            if (mag)
                for (int d = 0; d < D; d++) mag[(int64_t)c * D + d] += fabsf(mult * g[d]);
            seen[c] = 1;
        }
    }
}

// The check of the cache's rows: |got - ref| <= 1e-6 + 1e-5 |ref| + TT_CACHE_RTOL_MAG mag. Versions 1-3 apply the
// reference's operations in its order (mag 0: near-bitwise); version 4 sums a row's updates in parts, whose rounding
// scales with the sum of |update| (a dense row's sum of many random-sign gradients can be far smaller than that).
// 2e-6 (about 34 ulp of the magnitude) still fails a dropped or doubled occurrence by orders of magnitude.
static const double TT_CACHE_RTOL_MAG = 2e-6;
__host__ inline bool tt_cache_close(float got, float ref, float mag, bool reordered) {
    return std::fabs((double)got - ref) <= 1e-6 + 1e-5 * std::fabs((double)ref) + (reordered ? TT_CACHE_RTOL_MAG * mag : 0.0);
}

// ----------------------------------------------------------------------------------------------
// GPU kernels: populate

struct TtCacheTable {
    int64_t *keys, *counts;
    int* state;
    uint64_t H;
};

// populate: the slots counted exactly once, added to *singles (version 7's estimate of the unseen rows)
__global__ void tt_cache_singles_kernel(const int64_t* __restrict__ counts, uint64_t H, int64_t* __restrict__ singles) {
    unsigned long long n = 0;
    for (uint64_t s = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; s < H; s += (uint64_t)gridDim.x * blockDim.x) n += counts[s] == 1;
    for (int d = 16; d; d /= 2) n += __shfl_xor_sync(0xffffffffu, n, d);
    if (threadIdx.x % 32 == 0 && n) atomicAdd(reinterpret_cast<unsigned long long*>(singles), n);
}

__global__ void tt_cache_rank_kernel(const int* __restrict__ sorted_slots, const int64_t* __restrict__ old_keys, int64_t n_ranked,
                                     int* __restrict__ rank, int64_t* __restrict__ row_key) {
    const int64_t n = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= n_ranked) return;
    const int slot = sorted_slots[n];
    const int64_t k = old_keys[slot];
    row_key[n] = k;
    if (k != LFU_COUNT_EMPTY) rank[slot] = (int)n;
}

__global__ void tt_cache_rebuild_kernel(const int64_t* __restrict__ old_keys, const int64_t* __restrict__ old_counts,
                                        const int* __restrict__ rank, TtCacheTable t, int* __restrict__ lost) {
    for (uint64_t s = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; s < t.H; s += (uint64_t)gridDim.x * blockDim.x)
        if (tt_cache_cluster_start(old_keys, t.H, s)) {
            const int l = tt_cache_rebuild_cluster(old_keys, old_counts, rank, t.H, s, t.keys, t.counts, t.state);
            if (l) atomicAdd(lost, l);
        }
}

// the rows to build as bags of the TT forward: bag (tbl, n) holds the key of row n when it belongs to table tbl
__global__ void tt_cache_present_kernel(const int64_t* __restrict__ row_key, int64_t C, int tables, int64_t E, int64_t* __restrict__ present) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i > (int64_t)tables * C) return;
    if (i == (int64_t)tables * C) { present[i] = 0; return; }
    const int64_t k = row_key[i % C];
    present[i] = k >= 0 && k / E == i / C;
}

__global__ void tt_cache_build_ids_kernel(const int64_t* __restrict__ row_key, int64_t C, int64_t E, const int64_t* __restrict__ mat_off,
                                          int64_t* __restrict__ mat_ids) {
    const int64_t n = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= C || row_key[n] < 0) return;
    mat_ids[mat_off[(row_key[n] / E) * C + n]] = row_key[n] % E;
}

__global__ void tt_cache_store_rows_kernel(const int64_t* __restrict__ row_key, int64_t C, int64_t E, int D, const floatX* __restrict__ built,
                                           float* __restrict__ cache_w) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= C * D) return;
    const int64_t n = i / D, k = row_key[n];
    if (k >= 0) cache_w[i] = to_float(built[((k / E) * C + n) * D + i % D]);
}

// ----------------------------------------------------------------------------------------------
// GPU kernels: the step

struct TtCacheBatch {            // a step's bags (device) and sizes
    const int64_t *ids, *offsets;
    int64_t nbags, nnz, E;
    int B, tables;
};

struct TtCacheStepBufs {         // what a step writes (device)
    int *crow, *crow_key, *bag_of, *crow_c, *num_sel, *sorted_crow, *sorted_bag;
    char* flag_c;                // version 1: 1 for a cached lookup (DevicePartition's flags)
    int64_t *flag_tt, *pos_tt, *ids_tt, *off_fwd, *off_c, *bag_tt;   // off_fwd[nbags]: the TT part's count
    float* msq;                  // rowwise Adagrad: each bag's mean square of dY
    float* part5;                // versions 5-6: a crossing run's parts, [2 per 32 sorted positions][D]
    int* row_of;                 // version 6: the cache row of each dense key (null: the keys are the rows)
    int* next_id;                // version 6: the next dense key, [2]: a step counts in [step % 2] and zeroes the other
    int64_t* stamp;              // version 6, per table slot: (step << 32) | the slot's dense key in that step
    float* rows;                 // version 7: the TT part's rows [part][D] where a warp per lookup builds them
};

// Versions 1 and 2: a warp per bag finds each lookup's cache row. Writes per lookup the row (-1: TT), the sort key
// of the cached backward (the row, C for TT lookups), the bag, and (version 1) the TT flag; version 2 the bag's
// number of TT lookups instead.
// Version 6's sort key of a cached lookup: a dense number of its row among the rows hit in this step (0, 1, ... in
// the order the rows are first met; fewer bits, so the radix sort takes two passes instead of three). The first
// lookup of a row in the step claims the number with a CAS on the slot's stamp; a later one reads it there. The
// stamp `st` is loaded beside the slot's cache row (both depend only on the slot); a stale one costs a failed CAS.
__device__ inline int tt_cache_dense_key(const TtCacheStepBufs& o, int64_t s, int c, unsigned step, unsigned long long st) {
    unsigned long long* p = (unsigned long long*)(o.stamp + s);
    if ((unsigned)(st >> 32) == step) return (int)(unsigned)st;
    const int mine = atomicAdd(o.next_id + step % 2, 1);
    const unsigned long long old = atomicCAS(p, st, ((unsigned long long)step << 32) | (unsigned)mine);
    if (old != st) return (int)(unsigned)old;             // another lookup of the row claimed it in this step
    o.row_of[mine] = c;
    return mine;
}

template <bool PER_BAG, bool DENSE = false>
__global__ void tt_cache_lookup_kernel(TtCacheBatch b, TtCacheTable t, int C, TtCacheStepBufs o, unsigned step = 0) {
    const int64_t bag = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x % 32;
    if (bag == 0 && lane == 0) { if (PER_BAG) o.bag_tt[b.nbags] = 0; else o.flag_tt[b.nnz] = 0; }
    if (DENSE && bag == 0 && lane == 0) o.next_id[(step + 1) % 2] = 0;   // the next step's counter
    if (bag >= b.nbags) return;
    const int64_t key0 = (bag / b.B) * b.E;
    int tt = 0;
    for (int64_t n = b.offsets[bag] + lane; n < b.offsets[bag + 1]; n += 32) {
        const int64_t s = lfu_count_find(t.keys, t.H, key0 + b.ids[n]);
        const int c = s < 0 ? -1 : t.state[s];
        const unsigned long long st = DENSE && s >= 0 ? __ldcg((const unsigned long long*)(o.stamp + s)) : 0;
        o.crow[n] = c;
        if (DENSE) o.crow_key[n] = c >= 0 ? tt_cache_dense_key(o, s, c, step, st) : (int)b.nnz;
        else o.crow_key[n] = c >= 0 ? c : C;
        o.bag_of[n] = (int)bag;
        if (!PER_BAG) { o.flag_tt[n] = c < 0; o.flag_c[n] = c >= 0; }
        tt += c < 0;
    }
    if (PER_BAG) {
        for (int d = 16; d; d /= 2) tt += __shfl_xor_sync(0xffffffffu, tt, d);
        if (lane == 0) o.bag_tt[bag] = tt;
    }
}

// Version 1: the bags' offsets of the TT part (from the exclusive scan of the flags, pos_tt) and of the cached part
__global__ void tt_cache_offsets_kernel1(TtCacheBatch b, TtCacheStepBufs o) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= b.nbags) {
        o.off_fwd[i] = o.pos_tt[b.offsets[i]];
        o.off_c[i] = b.offsets[i] - o.off_fwd[i];
    }
}

// Version 2: a warp per bag writes its TT ids to ids_tt[tt0 ...] (tt0 = off_fwd[bag]) and its cache rows to
// crow_c[off_c[bag] ...], each in lookup order (a ballot and a popcount per 32 lookups); the cached ids go past the TT
// part (m lookups: valid ids there, read by no bag: the TT forward's digit kernel reads every id below the batch's
// nnz). off_fwd is the scan of the bags' counts; the cached offsets follow.
__device__ inline void tt_cache_scatter_bag(const TtCacheBatch& b, const TtCacheStepBufs& o, int64_t bag, int64_t tt0, int64_t m, int lane) {
    if (bag == b.nbags) {
        if (lane == 0) o.off_c[bag] = b.nnz - m;
        return;
    }
    const int64_t lo = b.offsets[bag], hi = b.offsets[bag + 1], c0 = lo - tt0;
    if (lane == 0) o.off_c[bag] = c0;
    int64_t nt = tt0, nc = c0;
    for (int64_t n0 = lo; n0 < hi; n0 += 32) {
        const int64_t n = n0 + lane;
        const int c = n < hi ? o.crow[n] : 0;
        const unsigned is_tt = __ballot_sync(0xffffffffu, n < hi && c < 0), is_c = __ballot_sync(0xffffffffu, n < hi && c >= 0);
        const unsigned below = (1u << lane) - 1;
        if (n < hi && c < 0) o.ids_tt[nt + __popc(is_tt & below)] = b.ids[n];
        if (n < hi && c >= 0) {
            const int64_t j = nc + __popc(is_c & below);
            o.crow_c[j] = c;
            o.ids_tt[m + j] = b.ids[n];
        }
        nt += __popc(is_tt);
        nc += __popc(is_c);
    }
}

__global__ void tt_cache_scatter_kernel2(TtCacheBatch b, TtCacheStepBufs o) {
    const int64_t bag = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    if (bag <= b.nbags) tt_cache_scatter_bag(b, o, bag, o.off_fwd[bag], o.off_fwd[b.nbags], threadIdx.x % 32);
}

// Version 5: the scan inside the scatter. Each block first sums the TT counts of the bags before its own and of all
// bags (every block reads the same few KB from L2), then its warps take their offsets from the block's counts: one
// launch where CUB's scan took two more in series. The sums grow as nbags^2 / TT_CACHE_BAGS5, so the step uses this
// kernel up to TT_CACHE_MAX_BAGS5 bags and CUB's scan with version 2's scatter above. The bound is chosen, not
// measured: at 8,192 bags each of 512 blocks reads 64 KB of counts from L2 (measured only at FBTT's 512 bags).
static const int TT_CACHE_BLOCK5 = 512, TT_CACHE_BAGS5 = TT_CACHE_BLOCK5 / 32, TT_CACHE_MAX_BAGS5 = 8192;
__global__ void __launch_bounds__(TT_CACHE_BLOCK5) tt_cache_scatter_kernel5(TtCacheBatch b, TtCacheStepBufs o) {
    using Reduce = cub::BlockReduce<long long, TT_CACHE_BLOCK5>;
    __shared__ typename Reduce::TempStorage tmp;
    __shared__ long long before_s, total_s, count_s[TT_CACHE_BAGS5];
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int64_t first = (int64_t)blockIdx.x * TT_CACHE_BAGS5, bag = first + warp;
    long long before = 0, total = 0;
    for (int64_t k = tid; k < b.nbags; k += TT_CACHE_BLOCK5) {
        const long long v = o.bag_tt[k];
        total += v;
        before += k < first ? v : 0;
    }
    before = Reduce(tmp).Sum(before);
    __syncthreads();
    total = Reduce(tmp).Sum(total);
    if (tid == 0) { before_s = before; total_s = total; }
    if (lane == 0) count_s[warp] = bag < b.nbags ? o.bag_tt[bag] : 0;
    __syncthreads();
    if (bag > b.nbags) return;
    int64_t tt0 = before_s;
    for (int v = 0; v < warp; v++) tt0 += count_s[v];
    if (lane == 0) o.off_fwd[bag] = tt0;              // bag nbags: the TT part's count
    tt_cache_scatter_bag(b, o, bag, tt0, total_s, lane);
}

// rowwise Adagrad: each bag's mean square of its gradient (every lookup of a bag shares it)
__global__ void tt_cache_msq_kernel(const float* __restrict__ dY, int64_t nbags, int D, float* __restrict__ msq) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < nbags) msq[i] = tt_cache_mean_square(dY + i * D, D);
}

// cached forward: a thread per (bag, column) adds the SUM of the bag's cached rows (in lookup order) to the TT part's
// output. The loads of a bag's rows are independent (their rows come from crow_c), so eight are in flight per thread;
// a warp per bag walking its columns in turns (D / 32 passes, each a chain of L loads) left most of the machine idle.
// TT_ROWS (version 7's small parts): the TT part's rows are in o.rows, not pooled yet: the thread sums the bag's TT
// rows first (in lookup order, as the TT forward's pooling does) and writes every bag.
template <bool TT_ROWS = false>
__global__ void tt_cache_forward_kernel(floatX* __restrict__ out, const float* __restrict__ cache_w, TtCacheBatch b, int D,
                                        TtCacheStepBufs o) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < b.nbags * D; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t bag = i / D;
        const int64_t lo = o.off_c[bag], hi = o.off_c[bag + 1];
        if (!TT_ROWS && lo == hi) continue;
        const int d = (int)(i - bag * D);
        float tt = 0.0f, sum = 0.0f;
        if (TT_ROWS)
            for (int64_t j = o.off_fwd[bag]; j < o.off_fwd[bag + 1]; j++) tt += o.rows[j * D + d];
#pragma unroll 8
        for (int64_t j = lo; j < hi; j++) sum += cache_w[(int64_t)o.crow_c[j] * D + d];
        out[i] = from_float<floatX>((TT_ROWS ? tt : to_float(out[i])) + sum);
    }
}

// the end of the run of row c that starts at sorted position i (a warp, 32 entries at a time)
__device__ inline int64_t tt_cache_run_end(const int* __restrict__ sorted_crow, int64_t nnz, int64_t i, int c, int lane) {
    int64_t end = i + 1;
    for (;;) {
        const int64_t j = end + lane;
        const unsigned differ = __ballot_sync(0xffffffffu, j >= nnz || sorted_crow[j] != c);
        if (differ) return end + __ffs(differ) - 1;
        end += 32;
    }
}

// cached backward: a warp per sorted position; the warp at the start of a row's run (sorted by row, stable, so in
// lookup order) finds the run's end 32 entries at a time and applies its occurrences a chunk of 32 at a time: lane o
// stages occurrence o's bag and (Adagrad) mean square, lane 0 chains the states, lane o computes occurrence o's
// multiplier, then every lane applies the chunk to its elements (tt_cache_row_states, tt_cache_apply_chunk)
__global__ void tt_cache_backward_kernel(int opt, float lr, float eps, float* __restrict__ cache_w, float* __restrict__ cache_st,
                                         float* __restrict__ cache_dw, const float* __restrict__ dY, int64_t nnz, int C, int D,
                                         TtCacheStepBufs o) {
    __shared__ int bags_s[1024 / 32][TT_CACHE_CHUNK];
    __shared__ float mult_s[1024 / 32][TT_CACHE_CHUNK];
    const int64_t i = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (i >= nnz) return;
    const int c = o.sorted_crow[i];
    if (c >= C || (i > 0 && o.sorted_crow[i - 1] == c)) return;
    const int64_t end = tt_cache_run_end(o.sorted_crow, nnz, i, c, lane);
    int* bags = bags_s[warp];
    float* mult = mult_s[warp];
    float* w = (opt == TT_EMBEDDING_BACKWARD_DENSE ? cache_dw : cache_w) + (int64_t)c * D;
    float st = opt == TT_EMBEDDING_BACKWARD_ADAGRAD ? cache_st[c] : 0.0f;
    for (int64_t c0 = i; c0 < end; c0 += TT_CACHE_CHUNK) {
        const int n = (int)min((int64_t)TT_CACHE_CHUNK, end - c0);
        if (lane < n) {
            bags[lane] = o.sorted_bag[c0 + lane];
            mult[lane] = opt == TT_EMBEDDING_BACKWARD_ADAGRAD ? o.msq[bags[lane]] : lr;
        }
        __syncwarp();
        if (opt == TT_EMBEDDING_BACKWARD_ADAGRAD) {
            if (lane == 0) st = tt_cache_row_states(st, mult, n);
            __syncwarp();
            if (lane < n) mult[lane] = lr / (sqrtf(mult[lane]) + eps);
            __syncwarp();
        }
        for (int d0 = 0; d0 < D; d0 += 32 * TT_CACHE_EPL) {
            float x[TT_CACHE_EPL];
            for (int e = 0; e < TT_CACHE_EPL; e++) {
                const int d = d0 + e * 32 + lane;
                x[e] = d < D && (opt != TT_EMBEDDING_BACKWARD_DENSE || c0 > i) ? w[d] : 0.0f;
            }
            tt_cache_apply_chunk(opt, x, bags, mult, n, dY, D, d0, lane, 32);
            for (int e = 0; e < TT_CACHE_EPL; e++)
                if (d0 + e * 32 + lane < D) w[d0 + e * 32 + lane] = x[e];
        }
        __syncwarp();                           // the chunk's bags and multipliers are read before the next overwrites them
    }
    if (opt == TT_EMBEDDING_BACKWARD_ADAGRAD && lane == 0) cache_st[c] = st;
}

// Version 4's cached backward: blocks take sorted positions in turn (block-uniform); at the start of a row's run the
// block stages the run's bags and multipliers (as version 1's warp does, thread 0 chaining the states), its warps sum
// their parts of the run, and the row takes the parts' sum (tt_cache_part_sum): a hot row's hundreds of occurrences
// go through 8 warps' loads at once instead of one warp's.
__global__ void __launch_bounds__(TT_CACHE_BLOCK4) tt_cache_backward_kernel4(int opt, float lr, float eps, float* __restrict__ cache_w,
                                                                             float* __restrict__ cache_st, float* __restrict__ cache_dw,
                                                                             const float* __restrict__ dY, int64_t nnz, int C, int D, TtCacheStepBufs o) {
    __shared__ int bags[TT_CACHE_STAGE4];
    __shared__ float mult[TT_CACHE_STAGE4];
    __shared__ float part[TT_CACHE_WARPS4][32 * TT_CACHE_EPL];
    __shared__ long long run_end;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    for (int64_t i = blockIdx.x; i < nnz; i += gridDim.x) {
        const int key = o.sorted_crow[i];
        if (key >= C || (i > 0 && o.sorted_crow[i - 1] == key)) continue;   // the same in every thread (C: the TT key)
        const int c = o.row_of ? o.row_of[key] : key;
        if (warp == 0) {
            const int64_t end = tt_cache_run_end(o.sorted_crow, nnz, i, key, lane);
            if (lane == 0) run_end = end;
        }
        __syncthreads();
        const int64_t end = run_end;
        float* w = (opt == TT_EMBEDDING_BACKWARD_DENSE ? cache_dw : cache_w) + (int64_t)c * D;
        float st = opt == TT_EMBEDDING_BACKWARD_ADAGRAD && tid == 0 ? cache_st[c] : 0.0f;
        for (int64_t s0 = i; s0 < end; s0 += TT_CACHE_STAGE4) {
            const int n = (int)min((int64_t)TT_CACHE_STAGE4, end - s0);
            for (int k = tid; k < n; k += blockDim.x) {
                const int b = o.sorted_bag[s0 + k];
                bags[k] = b;
                mult[k] = opt == TT_EMBEDDING_BACKWARD_ADAGRAD ? o.msq[b] : lr;
            }
            __syncthreads();
            if (opt == TT_EMBEDDING_BACKWARD_ADAGRAD) {
                if (tid == 0) st = tt_cache_row_states(st, mult, n);
                __syncthreads();
                for (int k = tid; k < n; k += blockDim.x) mult[k] = lr / (sqrtf(mult[k]) + eps);
                __syncthreads();
            }
            const int lo = n * warp / TT_CACHE_WARPS4, hi = n * (warp + 1) / TT_CACHE_WARPS4;
            for (int d0 = 0; d0 < D; d0 += 32 * TT_CACHE_EPL) {
                float acc[TT_CACHE_EPL] = {};
                tt_cache_part_sum(opt, acc, bags, mult, lo, hi, dY, D, d0, lane, 32);
                for (int e = 0; e < TT_CACHE_EPL; e++) part[warp][e * 32 + lane] = acc[e];
                __syncthreads();
                for (int t = tid; t < 32 * TT_CACHE_EPL && d0 + t < D; t += blockDim.x) {
                    float sum = 0.0f;
                    for (int q = 0; q < TT_CACHE_WARPS4; q++) sum += part[q][t];
                    w[d0 + t] = opt == TT_EMBEDDING_BACKWARD_DENSE ? (s0 > i ? w[d0 + t] : 0.0f) + sum : w[d0 + t] - sum;
                }
                __syncthreads();                    // part and the stage are read before they are refilled
            }
        }
        if (opt == TT_EMBEDDING_BACKWARD_ADAGRAD && tid == 0) cache_st[c] = st;
    }
}

// Version 5's cached backward for SGD and dense, whose row update is a plain sum of its occurrences' terms (any
// grouping is the same sum within rounding): runs are cut at every 32nd sorted position, and each piece is a warp's
// unit. A warp per sorted position: it has a unit where a run starts, or where a run goes on across a multiple of
// 32; its unit ends at the run's end or at the next multiple (one ballot), so it holds 1..32 occurrences. It sums
// them (lanes over the row's elements, eight rows' loads in flight at a time); a unit that is a whole run is applied
// at once, the piece of a longer run goes to part5 (slot 1 of its 32 positions for the run's first piece, slot 0 for
// the others), and tt_cache_combine_kernel5 sums each such run's pieces in order. Version 4's hot row (~1,400
// occurrences at FBTT's default: one block, 8 warps over ~175 loads each) becomes ~44 warps over 32.
static const int TT_CACHE_SEG5 = 32, TT_CACHE_BATCH5 = 8;
__global__ void tt_cache_backward_kernel5(int opt, float lr, float* __restrict__ cache_w, float* __restrict__ cache_dw,
                                          const float* __restrict__ dY, int64_t nnz, int C, int D, TtCacheStepBufs o) {
    const int lane = threadIdx.x % 32;
    const int64_t i = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    if (i >= nnz) return;
    const int key = o.sorted_crow[i];
    const bool begins = i == 0 || o.sorted_crow[i - 1] != key;
    if (key >= C || (!begins && i % TT_CACHE_SEG5 != 0)) return;         // the same in every lane (C: the TT key)
    const int c = o.row_of ? o.row_of[key] : key;
    const int64_t seg = i / TT_CACHE_SEG5, seg_end = min(nnz, (seg + 1) * TT_CACHE_SEG5), j = i + 1 + lane;
    const unsigned differ = __ballot_sync(0xffffffffu, j < seg_end && o.sorted_crow[j] != key);
    const int n = (int)(differ ? __ffs(differ) : seg_end - i);              // the unit's occurrences
    const bool whole = begins && !(i + n == seg_end && seg_end < nnz && o.sorted_crow[seg_end] == key);
    const int bag = lane < n ? o.sorted_bag[i + lane] : 0;
    const bool dense = opt == TT_EMBEDDING_BACKWARD_DENSE;
    for (int d0 = 0; d0 < D; d0 += 32 * TT_CACHE_EPL) {
        float acc[TT_CACHE_EPL] = {};
        for (int k0 = 0; k0 < n; k0 += TT_CACHE_BATCH5) {                     // the batch's loads first, then its terms in order
            float x[TT_CACHE_BATCH5][TT_CACHE_EPL];
#pragma unroll
            for (int k = 0; k < TT_CACHE_BATCH5; k++) {
                const float* g = dY + (int64_t)__shfl_sync(0xffffffffu, bag, (k0 + k) % 32) * D;
#pragma unroll
                for (int e = 0; e < TT_CACHE_EPL; e++) {
                    const int d = d0 + e * 32 + lane;
                    x[k][e] = k0 + k < n && d < D ? g[d] : 0.0f;
                }
            }
#pragma unroll
            for (int k = 0; k < TT_CACHE_BATCH5; k++)
#pragma unroll
                for (int e = 0; e < TT_CACHE_EPL; e++)
                    if (k0 + k < n) acc[e] = dense ? acc[e] + x[k][e] : fmaf(lr, x[k][e], acc[e]);
        }
        for (int e = 0; e < TT_CACHE_EPL; e++) {
            const int d = d0 + e * 32 + lane;
            if (d >= D) continue;
            if (!whole) o.part5[(seg * 2 + begins) * D + d] = acc[e];
            else if (dense) cache_dw[(int64_t)c * D + d] = acc[e];
            else cache_w[(int64_t)c * D + d] -= acc[e];
        }
    }
}

// a warp per 32 sorted positions; where a run that crosses the next multiple of 32 starts among them, the warp sums
// its pieces in order (slot 1 here, then slot 0 of each following 32 while the run goes on) and applies the sum once
__global__ void tt_cache_combine_kernel5(int opt, float* __restrict__ cache_w, float* __restrict__ cache_dw, int64_t nnz, int C, int D,
                                         TtCacheStepBufs o) {
    const int lane = threadIdx.x % 32;
    const int64_t seg = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32, base = seg * TT_CACHE_SEG5;
    if (base + TT_CACHE_SEG5 >= nnz) return;                                 // no run crosses the end of the batch
    const int key = o.sorted_crow[base + TT_CACHE_SEG5 - 1];
    if (key >= C || o.sorted_crow[base + TT_CACHE_SEG5] != key || (base > 0 && o.sorted_crow[base - 1] == key)) return;
    const int c = o.row_of ? o.row_of[key] : key;
    const int64_t nseg = ceil_div<int64_t>(nnz, TT_CACHE_SEG5);
    int64_t last = seg + 1;                                                  // where the run ends: 32 candidates at a time
    for (;; last += 32) {
        const int64_t k = last + lane, next = (k + 1) * TT_CACHE_SEG5;
        const unsigned stop = __ballot_sync(0xffffffffu, k >= nseg - 1 || next >= nnz || o.sorted_crow[next] != key);
        if (stop) { last += __ffs(stop) - 1; break; }
    }
    for (int d = lane; d < D; d += 32) {
        float sum = o.part5[(seg * 2 + 1) * D + d];
#pragma unroll 8
        for (int64_t k = seg + 1; k <= last; k++) sum += o.part5[k * 2 * D + d];
        if (opt == TT_EMBEDDING_BACKWARD_DENSE) cache_dw[(int64_t)c * D + d] = sum;
        else cache_w[(int64_t)c * D + d] -= sum;
    }
}

// ----------------------------------------------------------------------------------------------
// The TT ops' code: every call into tt_embedding_forward.cu and tt_embedding_backward.cu is in this section.
// Forward: version 6 (its default; tt_cache's version 7 builds small parts itself, below); backward: version 7 (its
// default) at its block size.

struct TtCacheTtBackward {       // one TT backward call's arguments and buffers (inputs: offsets, ids, dY)
    TtEmbeddingBackwardArgs a;
    TtEmbeddingBackwardInputs in;
    TtEmbeddingBackwardGroupPlan plan;
};

struct TtCacheTt {
    std::vector<int> p, q, ranks;
    TtEmbeddingForwardShape fwd, build;      // the batch, and the cache rows as bags of one lookup
    TtEmbeddingForwardWorkspace fws, bws;
    int fwd_block = 32, build_block = 32;
    TtCacheTtBackward alone, part;           // the whole batch, the TT part (its count on the device: offsets[tables B])
};

// the TT ops' config of a batch (tt_embedding.h); "" or the broken constraint (E = 0 becomes prod p)
inline std::string tt_cache_tt_config(TtEmbeddingConfig& c, const TtCacheTt& t, int64_t E, int tables, int B, int L, double alpha) {
    c = TtEmbeddingConfig();
    c.p = t.p; c.q = t.q; c.ranks = t.ranks;
    c.E = E; c.tables = tables; c.B = B; c.L = L; c.alpha = alpha;
    return tt_embedding_check_config(c);
}

// "" or the broken constraint. E = 0: prod p. Sets t's shapes (not its buffers).
std::string tt_cache_tt_shapes(TtCacheTt& t, int64_t E, int tables, int B, int L, double alpha, int64_t C, double lr, double eps) {
    TtEmbeddingConfig c, build;
    std::string why = tt_cache_tt_config(c, t, E, tables, B, L, alpha);
    if (why.empty()) why = tt_embedding_forward_make_shape(t.fwd, c);
    if (why.empty()) why = tt_embedding_backward_check_config(c, lr, eps);
    if (!why.empty()) return why;
    if (C < 1) return "--cache-rows (" + std::to_string(C) + ") must be >= 1 (or -1 for 10% of tables * E)";
    if (C > (int64_t)tables * t.fwd.E)
        return "--cache-rows (" + std::to_string(C) + ") is larger than the table: at most tables * E = " + std::to_string((int64_t)tables * t.fwd.E);
    if ((int64_t)tables * C >= INT32_MAX) return "tables * cache rows must be < 2^31 (the rows are built as bags of the TT forward)";
    why = tt_cache_tt_config(build, t, t.fwd.E, tables, (int)C, 1, 0.0);
    return why.empty() ? tt_embedding_forward_make_shape(t.build, build) : why;
}

inline float* tt_cache_core(const TtCacheTtBackward& b, int t) { return b.a.cores + b.a.s.core_off[t]; }

void tt_cache_tt_backward_setup(TtCacheTtBackward& b, const TtCacheTt& t, int64_t nnz, int opt, float lr, float eps, size_t smem_optin) {
    memset(&b.a, 0, sizeof b.a);
    b.a.s = tt_embedding_backward_make_shape(t.p, t.q, t.ranks, t.fwd.E, t.fwd.tables, t.fwd.B);
    b.a.s.nnz = (int)nnz;
    b.a.opt = opt; b.a.lr = lr; b.a.eps = eps;
    b.a.smem_limit = smem_optin - 1024;
    b.plan = tt_embedding_backward_group_make_plan(b.a.s, b.a.W_off, TT_EMBEDDING_BACKWARD_TC_BLOCK);
    tt_embedding_backward_alloc(b.a, b.in, b.plan);
    b.a.offsets = b.in.offsets; b.a.indices = b.in.indices; b.a.dY = b.in.dY;
    if (tt_embedding_backward_route(b.a.s, b.a.W_off, b.a.smem_limit, TT_EMBEDDING_BACKWARD_TC_BLOCK) == TT_EMBEDDING_BACKWARD_ROUTE_CUBLAS)
        fail_args("tt_cache: at this shape the TT backward runs version 2's pipeline, which sizes its work on the host (no device-side count)");
}

// the cores (tt_embedding_backward's layout: one buffer, core t at core_off[t]) and their elementwise Adagrad state,
// drawn as tt_embedding.h draws the TT ops' cores
std::vector<float> tt_cache_tt_make_cores(const TtCacheTt& t, Rng& rng, std::vector<float>& state) {
    const TtEmbeddingBackwardShape s = tt_embedding_backward_make_shape(t.p, t.q, t.ranks, t.fwd.E, t.fwd.tables, t.fwd.B);
    TtEmbeddingConfig c;
    if (!tt_cache_tt_config(c, t, t.fwd.E, t.fwd.tables, t.fwd.B, t.fwd.L, 0.0).empty()) fail_args("tt_cache: the TT shape changed after its checks");
    std::vector<std::vector<float>> per_core;
    tt_embedding_make_cores(c, rng, per_core);
    std::vector<float> cores = tt_embedding_backward_pack(s, per_core);
    state.assign(cores.size(), 0.0f);
    for (auto& x : state) x = rng.uniform(0.1f, 1.0f);
    return cores;
}

void tt_cache_tt_setup(TtCacheTt& t, int64_t nnz, int opt, float lr, float eps, const cudaDeviceProp& prop, const std::vector<float>& cores,
                       const std::vector<float>& state) {
    tt_embedding_forward_setup(t.fws, t.fwd, 1000, prop);
    tt_embedding_forward_setup(t.bws, t.build, 1000, prop);
    auto pick = [](const std::vector<int>& ok) { int b = ok.empty() ? 32 : ok[0]; for (int x : ok) if (x <= 256) b = x; return b; };
    t.fwd_block = pick(tt_embedding_forward_blocks(6, t.fwd, t.fws));
    t.build_block = pick(tt_embedding_forward_blocks(6, t.build, t.bws));
    tt_cache_tt_backward_setup(t.alone, t, nnz, opt, lr, eps, prop.sharedMemPerBlockOptin);
    tt_cache_tt_backward_setup(t.part, t, nnz, opt, lr, eps, prop.sharedMemPerBlockOptin);
    t.part.a.s.nnz_dev = t.part.a.offsets + (int64_t)t.fwd.tables * t.fwd.B;   // the step writes the part's offsets there
    t.part.a.dY = t.alone.a.dY;                                             // the batch's gradient (both read it)
    for (TtCacheTtBackward* b : {&t.alone, &t.part})
        for (float* d : {b->in.cores0, b->a.cores, b->in.state0, b->a.state}) {
            const std::vector<float>& v = (d == b->in.cores0 || d == b->a.cores) ? cores : state;
            cudaCheck(cudaMemcpy(d, v.data(), v.size() * 4, cudaMemcpyHostToDevice));
        }
}

TtEmbeddingForwardCores tt_cache_cores(const TtCacheTtBackward& b) {
    TtEmbeddingForwardCores c = {};
    for (int i = 0; i < b.a.s.T; i++) c.c[i] = tt_cache_core(b, i);
    return c;
}

void tt_cache_tt_forward(TtCacheTt& t, bool build, const TtCacheTtBackward& cores, floatX* out, const int64_t* ids, const int64_t* offsets) {
    if (build) tt_embedding_forward(6, out, ids, offsets, tt_cache_cores(cores), t.build, t.bws, t.build_block);
    else tt_embedding_forward(6, out, ids, offsets, tt_cache_cores(cores), t.fwd, t.fws, t.fwd_block);
}

void tt_cache_tt_backward(TtCacheTtBackward& b) { tt_embedding_backward(7, b.a, TT_EMBEDDING_BACKWARD_TC_BLOCK); }

// Version 7: the TT part's rows, a warp per TT lookup. Version 6 hands the part to the TT forward's default, which is
// sized for the batch, not the part: its digit kernel reads every id of the batch and each of its p_1 items copies a
// slice of G_1, however few lookups the part has (83 of 10,240 at FBTT's default: 20 us, of which the chain kernel
// 15). Here warp w takes TT lookups w, w + warps, ... below the part's count (on the device), copies the lookup's T
// slices into its shared memory with every load in flight (cp.async), runs the TT forward's warp chain on them and
// writes the row to rows[n]; the cached forward pools both parts (tt_cache_forward_kernel<true>). STAGE = false where
// a warp's slices do not fit: the chain reads them from global memory (L2) instead.
static const int TT_CACHE_ROWS_BLOCK7 = 128;
template <bool STAGE>
__global__ void __launch_bounds__(TT_CACHE_ROWS_BLOCK7) tt_cache_part_rows_kernel(float* __restrict__ rows, const int64_t* __restrict__ ids_tt,
                                                                              const int64_t* __restrict__ off_tt, const __grid_constant__ TtEmbeddingForwardCores cores,
                                                                              const __grid_constant__ TtEmbeddingForwardShape s, int per_warp) {
    extern __shared__ float4 tt_cache_smem7[];
    const int lane = threadIdx.x % 32, W = blockDim.x / 32;
    float* buf0 = reinterpret_cast<float*>(tt_cache_smem7) + (int64_t)(threadIdx.x / 32) * per_warp;
    float* buf1 = buf0 + s.buf_pad[0];
    float* staged = buf1 + s.buf_pad[1];
    const int64_t count = off_tt[(int64_t)s.tables * s.B];
    for (int64_t n = (int64_t)blockIdx.x * W + threadIdx.x / 32; n < count; n += (int64_t)gridDim.x * W) {   // warp-uniform
        const int tbl = tt_embedding_forward_table_of(off_tt, s.tables, s.B, n);   // its table's TT lookups start at or before n
        const int64_t idx = ids_tt[n];
        const float* g = lane < s.T ? tt_embedding_forward_slice_ptr(cores, s, tbl, idx, lane) : nullptr;
        if (STAGE) {
            float* dst = staged;
            for (int t = 0; t < s.T; t++) {
                const float* src = reinterpret_cast<const float*>(__shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(g), t));
                if (s.slice[t] % 4 == 0)                      // the slice is 16-byte aligned (cores are, slices are whole float4s)
                    for (int e = 4 * lane; e < s.slice[t]; e += 128) async_copy(dst + e, src + e, true);
                else
                    for (int e = lane; e < s.slice[t]; e += 32) async_copy(dst + e, src + e, false);
                if (lane == t) g = dst;
                dst += (s.slice[t] + 3) / 4 * 4;
            }
            async_commit();
            async_wait_group<0>();
            __syncwarp();
        }
        tt_embedding_forward_warp_chain(s, g, buf0, buf1, rows + n * s.D, false, lane);   // ends with a __syncwarp
    }
}

// version 7's per-warp shared memory (floats): the chain's buffers, plus the slices where STAGE
inline int64_t tt_cache_rows_floats7(const TtEmbeddingForwardShape& s, bool stage) {
    int64_t f = s.buf_pad[0] + s.buf_pad[1];
    if (stage)
        for (int t = 0; t < s.T; t++) f += tt_embedding_forward_round4(s.slice[t]);
    return f;
}

void tt_cache_tt_restore(TtCacheTtBackward& b) {
    const size_t bytes = (size_t)b.a.s.core_off[b.a.s.T] * 4;
    cudaCheck(cudaMemcpyAsync(b.a.cores, b.in.cores0, bytes, cudaMemcpyDeviceToDevice));
    cudaCheck(cudaMemcpyAsync(b.a.state, b.in.state0, bytes, cudaMemcpyDeviceToDevice));
}

// the TT backward's check of the part (host bags of the TT lookups), printed; pass?
bool tt_cache_tt_check(const TtCacheTt& t, const TtCacheTtBackward& b, const std::vector<float>& cores0, const std::vector<float>& state0,
                       const std::vector<int64_t>& off_tt, const std::vector<int64_t>& ids_tt, const std::vector<float>& dY) {
    TtEmbeddingBackwardShape s = tt_embedding_backward_make_shape(t.p, t.q, t.ranks, t.fwd.E, t.fwd.tables, t.fwd.B);
    s.nnz = (int)ids_tt.size();
    const TtEmbeddingBackwardReference ref = tt_embedding_backward_reference(s, cores0, off_tt, ids_tt, dY, true);
    const int64_t n = s.core_off[s.T];
    std::vector<float> c = device_download(b.a.cores, n), st = device_download(b.a.state, n), g = device_download(b.a.dG, n);
    return tt_embedding_backward_check(s, b.a.opt, b.a.lr, b.a.eps, ref, cores0.data(), state0.data(), c.data(), st.data(), g.data());
}

void tt_cache_tt_forward_cpu(const TtCacheTt& t, const std::vector<float>& cores, float* out, const int64_t* ids, const int64_t* offsets,
                             TtEmbeddingForwardShape s) {
    const TtEmbeddingBackwardShape bs = tt_embedding_backward_make_shape(t.p, t.q, t.ranks, t.fwd.E, t.fwd.tables, t.fwd.B);
    const float* ptrs[TT_EMBEDDING_FORWARD_MAX_CORES];
    for (int i = 0; i < bs.T; i++) ptrs[i] = cores.data() + bs.core_off[i];
    tt_embedding_forward_cpu(out, ptrs, ids, offsets, s);
}

void tt_cache_tt_free(TtCacheTt& t) {
    tt_embedding_forward_free(t.fws);
    tt_embedding_forward_free(t.bws);
    for (TtCacheTtBackward* b : {&t.alone, &t.part}) tt_embedding_backward_free(b->a, b->in, b->plan);
}

// ----------------------------------------------------------------------------------------------
// launchers

enum { TT_CACHE_ROWS_AUTO = 0, TT_CACHE_ROWS_WARP = 1, TT_CACHE_ROWS_TT = 2 };
struct TtCacheWorkspace {
    // populate
    int64_t *old_keys, *old_counts, *sorted_counts, *row_key, *present, *mat_off, *mat_ids;
    int *slots, *sorted_slots, *rank, *lost;
    floatX* built;
    // the step
    TtCacheStepBufs o;
    void *temp, *temp_side;      // CUB's scratch: the main stream's, and the side stream's sort (they overlap)
    size_t temp_bytes, temp_side_bytes;
    int crow_bits;               // bits of the cached backward's sort keys (rows 0..C)
    int dense_bits;              // version 6: bits of the dense keys (0..nnz)
    unsigned step = 0;           // version 6: steps taken (the stamps' tag)
    // version 7: a warp per TT lookup where populate expects a small TT part (and a warp's buffers fit a block)
    bool rows7_fits = false, stage7 = false, rows7 = false;
    int rows7_mode = 0;          // --part-rows: TT_CACHE_ROWS_AUTO (populate's estimate), _WARP, _TT
    int per_warp7 = 0;
    unsigned grid7 = 1;
    size_t smem7 = 0;
    double expected_hit = 0.0;   // populate's estimate of a step's hit rate (tt_cache_populate)
    int64_t* count_sums;         // populate: [0] the kept rows' counts, [1] all counts, [2] rows counted once
    cudaStream_t side;           // versions 3-6: the cached part's sort and backward
    cudaEvent_t split, cached_fwd, joined;
};

TtCacheWorkspace tt_cache_workspace(const TtCacheTt& t, const TtCacheTable& tab, int64_t C, int64_t nnz) {
    TtCacheWorkspace w;
    const uint64_t H = tab.H;
    const int64_t nbags = (int64_t)t.fwd.tables * t.fwd.B, TC = (int64_t)t.fwd.tables * C;
    w.old_keys = device_alloc<int64_t>(H);
    w.old_counts = device_alloc<int64_t>(H);
    w.sorted_counts = device_alloc<int64_t>(H);
    w.slots = device_alloc<int>(H);
    w.sorted_slots = device_alloc<int>(H);
    w.rank = device_alloc<int>(H);
    w.lost = device_alloc<int>(1);
    w.row_key = device_alloc<int64_t>(C);
    w.present = device_alloc<int64_t>(TC + 1);
    w.mat_off = device_alloc<int64_t>(TC + 1);
    w.mat_ids = device_alloc<int64_t>(TC);
    w.built = device_alloc<floatX>((size_t)TC * t.fwd.D);
    std::vector<int> iota(H);
    for (uint64_t s = 0; s < H; s++) iota[s] = (int)s;
    cudaCheck(cudaMemcpy(w.slots, iota.data(), H * sizeof(int), cudaMemcpyHostToDevice));
    TtCacheStepBufs& o = w.o;
    for (int** p : {&o.crow, &o.crow_key, &o.bag_of, &o.crow_c, &o.sorted_crow, &o.sorted_bag}) *p = device_alloc<int>(nnz);
    o.num_sel = device_alloc<int>(2);
    o.flag_c = device_alloc<char>(nnz);
    o.flag_tt = device_alloc<int64_t>(nnz + 1);
    o.pos_tt = device_alloc<int64_t>(nnz + 1);
    o.off_c = device_alloc<int64_t>(nbags + 1);
    o.bag_tt = device_alloc<int64_t>(nbags + 1);
    o.msq = device_alloc<float>(nbags);
    o.part5 = device_alloc<float>(ceil_div<int64_t>(nnz, TT_CACHE_SEG5) * 2 * t.fwd.D);
    o.row_of = device_alloc<int>(nnz);
    o.next_id = device_alloc<int>(2);
    cudaCheck(cudaMemset(o.next_id, 0, 8));
    o.stamp = device_alloc<int64_t>(H);
    cudaCheck(cudaMemset(o.stamp, 0xFF, H * 8));          // no step's tag
    o.rows = device_alloc<float>((size_t)nnz * t.fwd.D);
    w.count_sums = device_alloc<int64_t>(3);
    {                                                     // version 7's kernel: 4 warps a block, staged where they fit
        int dev = 0, max_smem = 0, sms = 0, per_sm = 0;
        cudaCheck(cudaGetDevice(&dev));
        cudaCheck(cudaDeviceGetAttribute(&max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
        cudaCheck(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
        const int warps = TT_CACHE_ROWS_BLOCK7 / 32;
        w.stage7 = (int64_t)warps * tt_cache_rows_floats7(t.fwd, true) * 4 <= max_smem;
        w.rows7_fits = (int64_t)warps * tt_cache_rows_floats7(t.fwd, false) * 4 <= max_smem;
        w.per_warp7 = (int)tt_cache_rows_floats7(t.fwd, w.stage7);
        w.smem7 = (size_t)warps * w.per_warp7 * 4;
        if (w.rows7_fits) {
            const auto kern = w.stage7 ? tt_cache_part_rows_kernel<true> : tt_cache_part_rows_kernel<false>;
            cudaCheck(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)w.smem7));
            cudaCheck(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kern, TT_CACHE_ROWS_BLOCK7, w.smem7));
            w.grid7 = (unsigned)std::max<int64_t>(1, std::min<int64_t>(ceil_div<int64_t>(nnz, warps), (int64_t)std::max(per_sm, 1) * sms));
        }
    }
    o.ids_tt = const_cast<int64_t*>(t.part.a.indices);   // the TT part's bags (both TT ops read them), written here
    o.off_fwd = const_cast<int64_t*>(t.part.a.offsets);
    w.crow_bits = 1;
    while (w.crow_bits < 31 && (C >> w.crow_bits) != 0) w.crow_bits++;
    w.dense_bits = 1;
    while (w.dense_bits < 31 && (nnz >> w.dense_bits) != 0) w.dense_bits++;
    size_t need[9] = {};
    cudaCheck(cub::DeviceRadixSort::SortPairsDescending(nullptr, need[0], w.old_counts, w.sorted_counts, w.slots, w.sorted_slots, (int)H));
    cudaCheck(cub::DeviceScan::ExclusiveSum(nullptr, need[1], w.present, w.mat_off, (int)(TC + 1)));
    cudaCheck(cub::DeviceScan::ExclusiveSum(nullptr, need[2], o.flag_tt, o.pos_tt, (int)(nnz + 1)));
    cudaCheck(cub::DevicePartition::Flagged(nullptr, need[3], (const int64_t*)nullptr, o.flag_tt, o.ids_tt, o.num_sel, (int)nnz));
    cudaCheck(cub::DevicePartition::Flagged(nullptr, need[4], o.crow, o.flag_c, o.crow_c, o.num_sel, (int)nnz));
    cudaCheck(cub::DeviceScan::ExclusiveSum(nullptr, need[5], o.bag_tt, o.off_fwd, (int)(nbags + 1)));
    cudaCheck(cub::DeviceRadixSort::SortPairs(nullptr, need[6], o.crow_key, o.sorted_crow, o.bag_of, o.sorted_bag, (int)nnz, 0, w.crow_bits));
    cudaCheck(cub::DeviceRadixSort::SortPairs(nullptr, need[7], o.crow_key, o.sorted_crow, o.bag_of, o.sorted_bag, (int)nnz, 0, w.dense_bits));
    cudaCheck(cub::DeviceReduce::Sum(nullptr, need[8], w.old_counts, w.count_sums, (int)H));
    w.temp_bytes = *std::max_element(need, need + 9);
    w.temp = device_alloc<char>(w.temp_bytes);
    w.temp_side_bytes = std::max(need[6], need[7]);
    w.temp_side = device_alloc<char>(w.temp_side_bytes);
    cudaCheck(cudaStreamCreateWithFlags(&w.side, cudaStreamNonBlocking));
    for (cudaEvent_t* e : {&w.split, &w.cached_fwd, &w.joined}) cudaCheck(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
    return w;
}

void tt_cache_free(TtCacheWorkspace& w) {
    cudaCheck(cudaStreamDestroy(w.side));
    for (cudaEvent_t e : {w.split, w.cached_fwd, w.joined}) cudaCheck(cudaEventDestroy(e));
    for (void* p : {(void*)w.old_keys, (void*)w.old_counts, (void*)w.sorted_counts, (void*)w.row_key, (void*)w.present, (void*)w.mat_off,
                    (void*)w.mat_ids, (void*)w.slots, (void*)w.sorted_slots, (void*)w.rank, (void*)w.lost, (void*)w.built, w.temp, w.temp_side})
        cudaCheck(cudaFree(p));
    TtCacheStepBufs& o = w.o;
    for (void* p : {(void*)o.crow, (void*)o.crow_key, (void*)o.bag_of, (void*)o.crow_c, (void*)o.sorted_crow, (void*)o.sorted_bag, (void*)o.num_sel, (void*)o.flag_c,
                    (void*)o.flag_tt, (void*)o.pos_tt, (void*)o.off_c, (void*)o.bag_tt, (void*)o.msq, (void*)o.part5, (void*)o.row_of, (void*)o.next_id, (void*)o.stamp,
                    (void*)o.rows, (void*)w.count_sums})
        cudaCheck(cudaFree(p));
}

// version 7's estimate of a step's hit rate from the counted warm-up: the kept rows' share of the counted accesses,
// less the share of rows counted once (Good-Turing: about the chance that the next lookup is a row never seen)
inline double tt_cache_expected_hit(int64_t kept_counts, int64_t all_counts, int64_t counted_once) {
    return all_counts > 0 ? std::max(0.0, (double)(kept_counts - counted_once) / (double)all_counts) : 0.0;
}

// version 7 builds the TT part's rows a warp per lookup where populate expects at most 4 TT lookups a step per resident
// warp (FBTT's default shape, 1,056 warps: faster at 83-1,657 TT lookups, a tie at 4,137, slower at 6,585)
inline double tt_cache_rows_max7(const TtCacheWorkspace& w) { return 4.0 * w.grid7 * (TT_CACHE_ROWS_BLOCK7 / 32); }

// Populate: rank the slots, rebuild the table with the kept keys, build their rows with the TT forward.
void tt_cache_populate(TtCacheTt& t, const TtCacheTable& tab, int64_t C, float* cache_w, TtCacheWorkspace& w) {
    const uint64_t H = tab.H;
    const int64_t E = t.fwd.E, TC = (int64_t)t.fwd.tables * C, ranked = std::min<int64_t>(C, (int64_t)H);
    cudaCheck(cudaMemcpyAsync(w.old_keys, tab.keys, H * 8, cudaMemcpyDeviceToDevice));
    cudaCheck(cudaMemcpyAsync(w.old_counts, tab.counts, H * 8, cudaMemcpyDeviceToDevice));
    size_t bytes = w.temp_bytes;
    cudaCheck(cub::DeviceRadixSort::SortPairsDescending(w.temp, bytes, w.old_counts, w.sorted_counts, w.slots, w.sorted_slots, (int)H));
    cudaCheck(cudaMemsetAsync(w.rank, 0xFF, H * sizeof(int)));
    cudaCheck(cudaMemsetAsync(w.row_key, 0xFF, C * 8));
    cudaCheck(cudaMemsetAsync(w.lost, 0, sizeof(int)));
    tt_cache_rank_kernel<<<(unsigned)ceil_div<int64_t>(ranked, 256), 256>>>(w.sorted_slots, w.old_keys, ranked, w.rank, w.row_key);
    cudaCheck(cudaMemsetAsync(tab.keys, 0xFF, H * 8));
    cudaCheck(cudaMemsetAsync(tab.counts, 0, H * 8));
    cudaCheck(cudaMemsetAsync(tab.state, 0xFF, H * sizeof(int)));
    tt_cache_rebuild_kernel<<<(unsigned)std::min<uint64_t>(ceil_div<uint64_t>(H, 256), 65536), 256>>>(w.old_keys, w.old_counts, w.rank, tab, w.lost);
    tt_cache_present_kernel<<<(unsigned)ceil_div<int64_t>(TC + 1, 256), 256>>>(w.row_key, C, t.fwd.tables, E, w.present);
    bytes = w.temp_bytes;
    cudaCheck(cub::DeviceScan::ExclusiveSum(w.temp, bytes, w.present, w.mat_off, (int)(TC + 1)));
    cudaCheck(cudaMemsetAsync(w.mat_ids, 0, TC * 8));   // ids past the kept rows: valid (row 0), read by no bag
    tt_cache_build_ids_kernel<<<(unsigned)ceil_div<int64_t>(C, 256), 256>>>(w.row_key, C, E, w.mat_off, w.mat_ids);
    tt_cache_tt_forward(t, true, t.part, w.built, w.mat_ids, w.mat_off);
    tt_cache_store_rows_kernel<<<(unsigned)ceil_div<int64_t>(C * t.fwd.D, 256), 256>>>(w.row_key, C, E, t.fwd.D, w.built, cache_w);
    // version 7's route, read back once here (populate is not on the step's path): the expected hit rate is the kept
    // rows' share of the warm-up's accesses less the share of rows counted once (Good-Turing: about the chance that
    // the next lookup is a row the warm-up never saw; without it a uniform batch whose rows all fit looks like 100%)
    bytes = w.temp_bytes;
    cudaCheck(cub::DeviceReduce::Sum(w.temp, bytes, w.sorted_counts, w.count_sums, (int)ranked));
    bytes = w.temp_bytes;
    cudaCheck(cub::DeviceReduce::Sum(w.temp, bytes, w.sorted_counts, w.count_sums + 1, (int)H));
    cudaCheck(cudaMemsetAsync(w.count_sums + 2, 0, 8));
    tt_cache_singles_kernel<<<(unsigned)std::min<uint64_t>(ceil_div<uint64_t>(H, 256), 1024), 256>>>(w.sorted_counts, H, w.count_sums + 2);
    int64_t sums[3] = {};
    cudaCheck(cudaMemcpy(sums, w.count_sums, sizeof sums, cudaMemcpyDeviceToHost));
    w.expected_hit = tt_cache_expected_hit(sums[0], sums[1], sums[2]);
    w.rows7 = w.rows7_fits && (w.rows7_mode == TT_CACHE_ROWS_WARP ||
                               (w.rows7_mode == TT_CACHE_ROWS_AUTO && (1.0 - w.expected_hit) * (double)t.fwd.nnz <= tt_cache_rows_max7(w)));
}

struct TtCacheState {            // the cache's trainable rows
    float *w, *st, *dw;          // [C, D], [C], [C, D]
    int opt;
    float lr, eps;
};

// version 6 sorts dense numbers of the rows hit where they have fewer bits than the rows (C > nnz)
static bool tt_cache_dense(int k, const TtCacheWorkspace& w) { return k >= 6 && w.dense_bits < w.crow_bits; }

// the cached backward's grouping: a stable radix sort of the lookups by cache row, or by version 6's dense number of
// it (TT lookups sort last; it reads only what the lookup kernel wrote) and, for rowwise Adagrad, each bag's mean square
void tt_cache_backward_group(int k, const TtCacheBatch& b, int D, const float* dY, const TtCacheState& cs, TtCacheWorkspace& w, cudaStream_t st) {
    TtCacheStepBufs& o = w.o;
    size_t bytes = w.temp_side_bytes;
    cudaCheck(cub::DeviceRadixSort::SortPairs(w.temp_side, bytes, o.crow_key, o.sorted_crow, o.bag_of, o.sorted_bag, (int)b.nnz, 0,
                                              tt_cache_dense(k, w) ? w.dense_bits : w.crow_bits, st));
    if (cs.opt == TT_EMBEDDING_BACKWARD_ADAGRAD) tt_cache_msq_kernel<<<(unsigned)ceil_div<int64_t>(b.nbags, 256), 256, 0, st>>>(dY, b.nbags, D, o.msq);
}

// the cached backward's update of the rows (after the cached forward has read them)
void tt_cache_backward_update(int k, const TtCacheBatch& b, int C, int D, const float* dY, const TtCacheState& cs, TtCacheWorkspace& w,
                              int block, cudaStream_t st) {
    TtCacheStepBufs o = w.o;                          // version 6: keys are dense numbers of the rows, TT lookups nnz
    if (tt_cache_dense(k, w)) C = (int)b.nnz;
    else o.row_of = nullptr;
    if (k >= 5 && cs.opt != TT_EMBEDDING_BACKWARD_ADAGRAD) {
        tt_cache_backward_kernel5<<<(unsigned)ceil_div<int64_t>(b.nnz * 32, 256), 256, 0, st>>>(cs.opt, cs.lr, cs.w, cs.dw, dY, b.nnz, C, D, o);
        tt_cache_combine_kernel5<<<(unsigned)ceil_div<int64_t>(ceil_div<int64_t>(b.nnz, TT_CACHE_SEG5) * 32, 256), 256, 0, st>>>(
            cs.opt, cs.w, cs.dw, b.nnz, C, D, o);
    } else if (k >= 4)
        tt_cache_backward_kernel4<<<(unsigned)std::min<int64_t>(b.nnz, 2048), TT_CACHE_BLOCK4, 0, st>>>(cs.opt, cs.lr, cs.eps, cs.w, cs.st, cs.dw, dY,
                                                                                                   b.nnz, C, D, o);
    else
        tt_cache_backward_kernel<<<(unsigned)ceil_div<int64_t>(b.nnz * 32, block), block, 0, st>>>(cs.opt, cs.lr, cs.eps, cs.w, cs.st, cs.dw, dY,
                                                                                                  b.nnz, C, D, o);
}

// one training step of version k on the batch (forward into out, then backward with dY)
void tt_cache_step(int k, TtCacheTt& t, const TtCacheTable& tab, int C, const TtCacheBatch& b, const float* dY, floatX* out,
                   const TtCacheState& cs, TtCacheWorkspace& w, int block) {
    TtCacheStepBufs& o = w.o;
    const int D = t.fwd.D;
    const unsigned bag_warps = (unsigned)ceil_div<int64_t>((b.nbags + 1) * 32, block);
    const unsigned fwd_blocks = (unsigned)std::min<int64_t>(ceil_div<int64_t>(b.nbags * D, block), 1 << 20);
    size_t bytes = w.temp_bytes;
    if (k == 1) {
        tt_cache_lookup_kernel<false><<<bag_warps, block>>>(b, tab, C, o);
        cudaCheck(cub::DeviceScan::ExclusiveSum(w.temp, bytes, o.flag_tt, o.pos_tt, (int)(b.nnz + 1)));
        tt_cache_offsets_kernel1<<<(unsigned)ceil_div<int64_t>(b.nbags + 1, block), block>>>(b, o);
        bytes = w.temp_bytes;
        cudaCheck(cub::DevicePartition::Flagged(w.temp, bytes, b.ids, o.flag_tt, o.ids_tt, o.num_sel, (int)b.nnz));
        bytes = w.temp_bytes;
        cudaCheck(cub::DevicePartition::Flagged(w.temp, bytes, o.crow, o.flag_c, o.crow_c, o.num_sel + 1, (int)b.nnz));
    } else if (tt_cache_dense(k, w)) {
        if (++w.step == 0xFFFFFFFFu) {               // the stamps' tags wrapped (2^32 steps): start them over
            cudaCheck(cudaMemsetAsync(o.stamp, 0xFF, tab.H * 8));
            w.step = 1;
        }
        tt_cache_lookup_kernel<true, true><<<bag_warps, block>>>(b, tab, C, o, w.step);
    } else if (k >= 2 && k <= 7) {
        tt_cache_lookup_kernel<true><<<bag_warps, block>>>(b, tab, C, o);
    } else {
        fail_args("tt_cache has no version %d", k);
    }
    const cudaStream_t side = k >= 3 ? w.side : 0;   // versions 3-6: the cached backward beside the rest
    if (side) {                                      // its sort needs only the lookup kernel's keys
        cudaCheck(cudaEventRecord(w.split, 0));
        cudaCheck(cudaStreamWaitEvent(side, w.split, 0));
        tt_cache_backward_group(k, b, D, dY, cs, w, side);
    }
    if (k >= 5 && b.nbags <= TT_CACHE_MAX_BAGS5) {
        tt_cache_scatter_kernel5<<<(unsigned)ceil_div<int64_t>(b.nbags + 1, TT_CACHE_BAGS5), TT_CACHE_BLOCK5>>>(b, o);
    } else if (k >= 2) {
        cudaCheck(cub::DeviceScan::ExclusiveSum(w.temp, bytes, o.bag_tt, o.off_fwd, (int)(b.nbags + 1)));
        tt_cache_scatter_kernel2<<<bag_warps, block>>>(b, o);
    }
    if (k >= 7 && w.rows7) {                         // version 7, a small TT part: its rows a warp each, pooled with the cached rows
        (w.stage7 ? tt_cache_part_rows_kernel<true> : tt_cache_part_rows_kernel<false>)<<<w.grid7, TT_CACHE_ROWS_BLOCK7, w.smem7>>>(
            o.rows, o.ids_tt, o.off_fwd, tt_cache_cores(t.part), t.fwd, w.per_warp7);
        tt_cache_forward_kernel<true><<<fwd_blocks, block>>>(out, cs.w, b, D, o);
    } else {
        tt_cache_tt_forward(t, false, t.part, out, o.ids_tt, o.off_fwd);
        tt_cache_forward_kernel<<<fwd_blocks, block>>>(out, cs.w, b, D, o);
    }
    if (side) {
        cudaCheck(cudaEventRecord(w.cached_fwd, 0));
        cudaCheck(cudaStreamWaitEvent(side, w.cached_fwd, 0));   // the cached forward has read the rows
        tt_cache_backward_update(k, b, C, D, dY, cs, w, block, side);
    }
    tt_cache_tt_backward(t.part);
    if (side) {
        cudaCheck(cudaEventRecord(w.joined, side));
        cudaCheck(cudaStreamWaitEvent(0, w.joined, 0));
    } else {
        tt_cache_backward_group(k, b, D, dY, cs, w, 0);
        tt_cache_backward_update(k, b, C, D, dY, cs, w, block, 0);
    }
}

// ----------------------------------------------------------------------------------------------
// checks on the CPU

// Populate's check: the CPU populate of the counted table `pt` (replaced by its result) against the GPU's table,
// cache_state and rows' keys, exactly; the rebuilt table's windows (lfu_count's check); rows without a key still
// poison; the first rows against the CPU chain. Printed; pass?
bool tt_cache_check_populate(const TtCacheTt& t, const std::vector<float>& cores, const TtCacheTable& tab, const TtCacheWorkspace& w,
                             const float* d_cw, int64_t C, LfuCountHostTable& pt, std::vector<int>& state_ref, std::vector<int64_t>& row_key,
                             int64_t& kept) {
    const uint64_t H = tab.H;
    const int64_t E = t.fwd.E;
    const int D = t.fwd.D;
    const int lost_ref = tt_cache_populate_cpu(pt, state_ref, C, row_key);
    kept = 0;
    std::unordered_map<int64_t, int64_t> kept_occ;
    for (int64_t n = 0; n < C; n++) if (row_key[n] >= 0) kept++;
    for (uint64_t s = 0; s < H; s++) if (pt.keys[s] >= 0) kept_occ[pt.keys[s]] = pt.counts[s];
    std::string bad;
    if (lost_ref || device_download(w.lost, 1)[0]) bad = "keys lost by the rebuild";
    else if (device_download(tab.keys, H) != pt.keys || device_download(tab.counts, H) != pt.counts) bad = "table differs from the CPU populate";
    else if (device_download(tab.state, H) != state_ref) bad = "cache_state differs from the CPU populate";
    else if (device_download(w.row_key, C) != row_key) bad = "rows' keys differ from the CPU populate";
    if (bad.empty()) bad = lfu_count_check_table(pt.keys.data(), pt.counts.data(), H, 0, kept_occ);
    const std::vector<float> cw = device_download(d_cw, C * D);
    int64_t touched = 0;
    for (int64_t n = kept; n < C; n++)
        for (int d = 0; d < D; d++) { uint32_t u; memcpy(&u, &cw[n * D + d], 4); touched += u != 0xFFFFFFFFu; }
    if (bad.empty() && touched) bad = std::to_string(touched) + " values written in rows without a key";
    printf("populate: %lld of %lld rows kept, %s\n", (long long)kept, (long long)C, bad.empty() ? "table, state and rows' keys ok" : ("FAIL " + bad).c_str());
    const int64_t nrow = std::min<int64_t>(kept, 2048);   // the first rows against the CPU chain
    std::vector<float> got(cw.begin(), cw.begin() + nrow * D), ref((size_t)(nrow * D));
    for (int64_t n = 0; n < nrow; n++) {
        const int64_t tbl = row_key[n] / E, id = row_key[n] % E;
        TtEmbeddingForwardShape s1 = t.fwd;          // bags of tables 0..tbl, one each; only table tbl's holds the row
        s1.tables = (int)tbl + 1;
        s1.B = 1;
        std::vector<int64_t> off1((size_t)tbl + 2, 0);
        off1[tbl + 1] = 1;
        std::vector<float> rows((size_t)(tbl + 1) * D);
        tt_cache_tt_forward_cpu(t, cores, rows.data(), &id, off1.data(), s1);
        std::copy(rows.begin() + tbl * D, rows.end(), ref.begin() + n * D);
    }
    return validate_host("rows (first)", got.data(), ref.data(), got.size(), TT_EMBEDDING_FORWARD_ATOL, TT_EMBEDDING_FORWARD_RTOL) && bad.empty();
}

// The step's split on the CPU (find and cache_state on the populated table): each lookup's row, the TT part's ids
// and offsets, the cached part's rows and offsets
struct TtCachePartitionRef {
    std::vector<int> crow, crow_c;
    std::vector<int64_t> off_tt, ids_tt, off_c;
};

TtCachePartitionRef tt_cache_partition_cpu(const LfuCountHostTable& pt, const std::vector<int>& state, const std::vector<int64_t>& ids,
                                           const std::vector<int64_t>& offsets, int tables, int B, int64_t E) {
    TtCachePartitionRef r;
    const int64_t nbags = (int64_t)tables * B;
    r.crow.resize(ids.size());
    r.off_tt.assign(nbags + 1, 0);
    r.off_c.assign(nbags + 1, 0);
    for (int64_t b = 0; b < nbags; b++) {
        for (int64_t n = offsets[b]; n < offsets[b + 1]; n++) {
            r.crow[n] = tt_cache_row_of(pt.keys.data(), state.data(), pt.keys.size(), (b / B) * E + ids[n]);
            if (r.crow[n] < 0) r.ids_tt.push_back(ids[n]);
            else r.crow_c.push_back(r.crow[n]);
        }
        r.off_tt[b + 1] = (int64_t)r.ids_tt.size();
        r.off_c[b + 1] = (int64_t)r.crow_c.size();
    }
    return r;
}


#ifdef TT_CACHE_MAIN
// ----------------------------------------------------------------------------------------------
// a run: sizes, host inputs and references, device state; main's stages below

struct TtCacheRun {
    TtEmbeddingConfig c;                     // the TT shape and the bags (tt_embedding.h's flags)
    std::string distinct = "on", optimizer = "sgd", part_rows = "auto";
    int warmup = 4, opt = TT_EMBEDDING_BACKWARD_SGD, D = 0;
    int64_t C = -1, H = -1, nbags = 0, nnz = 0;
    double lr = 0.05, eps = 1e-8, hit = 0.0, tt_alone_ms = 0.0;
    TtCacheTt t;
    char shape[320] = {};
    // host: cores and their state, the measured step's bags and dY, the cache rows' state; the warm-up's keys
    std::vector<float> cores, tt_state, dY, cache_st0;
    std::vector<int64_t> ids, offsets, keys_warm;
    std::unordered_map<int64_t, int64_t> occ;
    // device
    TtCacheTable tab = {};
    LfuCountDeviceTable lt = {};
    TtCacheWorkspace w = {};
    TtCacheState cs = {};
    TtCacheBatch batch = {};
    int64_t *cnt_keys = nullptr, *cnt_counts = nullptr;   // the counted table (populate's timing restores it)
    float *cw0 = nullptr, *st0 = nullptr;                // the cache's rows and state after populate (the step's restore)
    floatX *out = nullptr, *out_alone = nullptr;
    // references: the CPU populate (table, state, rows' keys), the step's partition, out, the cache after the step
    LfuCountHostTable pt{1};
    std::vector<int> state_ref;
    std::vector<int64_t> row_key;
    int64_t kept = 0, rows_hit = 0;
    TtCachePartitionRef pr;
    std::vector<float> out_ref, W_ref, st_ref, dW_ref, mag_ref;
    std::vector<char> row_hit;
};

void tt_cache_parse(TtCacheRun& r, Cli& cli, int argc, char** argv) {
    TtEmbeddingConfig& c = r.c;
    c.alpha = 1.15;
    tt_embedding_add_flags(cli, c, r.distinct);
    cli.supports_load = false;
    cli.add_int64("cache-rows", &r.C, "cache rows C; -1: 10% of tables * E (FBTT's default)");
    cli.add_int64("H", &r.H, "hash-table slots; -1: tables * E (FBTT's default)");
    cli.add_int("warmup", &r.warmup, "steps counted before populate (the measured step is the next one, same Zipf map)");
    cli.add_choice("optimizer", &r.optimizer, {"dense", "sgd", "adagrad"}, "TT cores: dense / SGD / elementwise Adagrad; cache: dense / SGD / rowwise Adagrad");
    cli.add_double("lr", &r.lr, "learning rate (sgd, adagrad)");
    cli.add_double("eps", &r.eps, "Adagrad epsilon");
    cli.add_choice("part-rows", &r.part_rows, {"auto", "warp", "tt"}, "version 7: the TT part's rows a warp per lookup (warp), by the TT forward "
                   "as in version 6 (tt), or as populate's estimate of the part says (auto)");
    cli.constraints = "  the TT ops' shape rules (T = len(p) in 2..6, len(q) = T, len(ranks) = T - 1, E <= prod p, D = prod q);\n"
                      "  tables, B, L, warmup >= 1; (warmup + 1) * tables * B * L < 2^31; 1 <= C <= tables * E; 1 <= H < 2^31;\n"
                      "  the warm-up's distinct rows < H (a full table has no empty slot for populate's rebuild); eps > 0; no --ragged";
    cli.parse(argc, argv);
#ifdef ENABLE_BF16
    fail_args("tt_cache has no bf16 mode: the TT backward it calls keeps fp32 cores and state; run ./tt_cache");
#endif
    require(!c.ragged, "--ragged: tt_cache draws bags of L lookups (its warm-up keys take the table from the position)");
    require(c.tables >= 1 && c.B >= 1 && c.L >= 1 && r.warmup >= 1, "tables, B, L, warmup must be >= 1 (got %d, %d, %d, %d)", c.tables, c.B, c.L,
            r.warmup);
    const double all = (double)c.tables * c.B * c.L * (r.warmup + 1);
    require(all < INT32_MAX, "(warmup + 1) * tables * B * L (%.0f) must be < 2^31", all);
    c.distinct = r.distinct == "on";
    std::string why = tt_embedding_check_config(c);          // resolves E and D (C and H default to fractions of E)
    if (!why.empty()) fail_args("%s", why.c_str());
    r.nbags = c.num_bags();
    r.nnz = c.nnz();
    if (r.C == -1) r.C = std::max<int64_t>(1, (int64_t)c.tables * c.E / 10);
    if (r.H == -1) r.H = (int64_t)c.tables * c.E;
    r.t.p = c.p; r.t.q = c.q; r.t.ranks = c.ranks;
    why = tt_cache_tt_shapes(r.t, c.E, c.tables, c.B, c.L, c.alpha, r.C, r.lr, r.eps);
    if (!why.empty()) fail_args("%s", why.c_str());
    require(r.H >= 1, "H (%lld) must be >= 1 (or -1 for H = tables * E)", (long long)r.H);
    require(r.H < INT32_MAX, "H (%lld) must be < 2^31 (CUB sorts the slots with an int count of items)", (long long)r.H);
    require(cli.block % 32 == 0, "--block (%d) must be a multiple of 32 (the kernels give a warp to each bag)", cli.block);
    require(cli.dump_dir.empty(), "--dump: tt_cache writes no dumps (its parts dump through tt_embedding_forward/backward and lfu_count)");
    r.D = c.D;
    r.opt = r.optimizer == "dense" ? TT_EMBEDDING_BACKWARD_DENSE : r.optimizer == "sgd" ? TT_EMBEDDING_BACKWARD_SGD : TT_EMBEDDING_BACKWARD_ADAGRAD;
    snprintf(r.shape, sizeof r.shape, "%s,C%lld,H%lld,%s", tt_embedding_shape_name(c).c_str(), (long long)r.C, (long long)r.H,
             TT_EMBEDDING_BACKWARD_OPT_NAMES[r.opt]);
}

// cores and state, the bags of warmup + 1 steps (one Zipf map: the last is the measured step), dY, the cache's state
void tt_cache_make_inputs(TtCacheRun& r, uint64_t seed) {
    const TtEmbeddingConfig& c = r.c;
    require_host_memory(56.0 * r.H + 16.0 * r.C * r.D + 96.0 * r.nnz * (r.warmup + 1) +
                        bag_indices_host_bytes((int64_t)(r.warmup + 1) * r.nbags, c.L, c.alpha) + 1e8, "the host copies of the table, the cache and the bags");
    Rng rng(seed);
    r.cores = tt_cache_tt_make_cores(r.t, rng, r.tt_state);
    const std::vector<int64_t> ids_all = make_bag_indices((int64_t)(r.warmup + 1) * r.nbags, c.L, c.E, c.alpha, rng, c.distinct);
    r.keys_warm.resize((size_t)(r.warmup * r.nnz));
    for (int64_t j = 0; j < r.warmup * r.nnz; j++) r.keys_warm[j] = ((j % r.nnz) / c.L / c.B) * c.E + ids_all[j];
    r.occ = lfu_count_occurrences(r.keys_warm.data(), (int64_t)r.keys_warm.size());
    require((int64_t)r.occ.size() < r.H, "the warm-up sees %zu distinct rows but the hash table has H = %lld slots: it would be full (populate "
            "rebuilds the table from an empty slot); use a larger --H", r.occ.size(), (long long)r.H);
    r.ids.assign(ids_all.end() - r.nnz, ids_all.end());
    r.offsets.resize((size_t)r.nbags + 1);
    for (int64_t b = 0; b <= r.nbags; b++) r.offsets[b] = b * c.L;
    r.dY = make_random_floats((size_t)(r.nbags * r.D), rng);
    r.cache_st0.resize((size_t)r.C);
    for (auto& x : r.cache_st0) x = rng.uniform(0.1f, 1.0f);
}

void tt_cache_setup_device(TtCacheRun& r) {
    const cudaDeviceProp prop = cuda_init();
    const double H = (double)r.H, C = (double)r.C;
    require_device_memory(76.0 * H + 12.0 * C * r.D + (4.0 * r.D + 32.0) * r.c.tables * C + 8.0 * r.nnz * (r.warmup + 1) + 8.0 * (double)r.nnz * r.D,
                          "the table, the cache and the workspaces");
    tt_cache_tt_setup(r.t, r.nnz, r.opt, (float)r.lr, (float)r.eps, prop, r.cores, r.tt_state);
    const TtEmbeddingBackwardArgs& a = r.t.alone.a;
    cudaCheck(cudaMemcpy(const_cast<int64_t*>(a.indices), r.ids.data(), r.nnz * 8, cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(const_cast<int64_t*>(a.offsets), r.offsets.data(), (r.nbags + 1) * 8, cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(const_cast<float*>(a.dY), r.dY.data(), r.dY.size() * 4, cudaMemcpyHostToDevice));
    r.batch = TtCacheBatch{a.indices, a.offsets, r.nbags, r.nnz, r.c.E, r.c.B, r.c.tables};
    r.tab = TtCacheTable{device_alloc<int64_t>(r.H), device_alloc<int64_t>(r.H), device_alloc<int>(r.H), (uint64_t)r.H};
    r.lt = LfuCountDeviceTable{r.tab.keys, r.tab.counts, (uint64_t)r.H, device_alloc<unsigned long long>(1)};
    r.w = tt_cache_workspace(r.t, r.tab, r.C, r.nnz);
    r.w.rows7_mode = r.part_rows == "warp" ? TT_CACHE_ROWS_WARP : r.part_rows == "tt" ? TT_CACHE_ROWS_TT : TT_CACHE_ROWS_AUTO;
    require(r.w.rows7_fits || r.w.rows7_mode != TT_CACHE_ROWS_WARP, "--part-rows warp: a warp's chain buffers (%d floats) times %d warps do not "
            "fit a block's shared memory at this shape; use auto or tt", (int)tt_cache_rows_floats7(r.t.fwd, false), TT_CACHE_ROWS_BLOCK7 / 32);
    r.cs = TtCacheState{device_alloc<float>(r.C * r.D), device_alloc<float>(r.C), device_alloc<float>(r.C * r.D), r.opt, (float)r.lr, (float)r.eps};
    r.cw0 = device_alloc<float>(r.C * r.D);
    r.st0 = device_upload(r.cache_st0);
    r.out = device_alloc<floatX>(r.nbags * r.D);
    r.out_alone = device_alloc<floatX>(r.nbags * r.D);
}

// the warm-up: lfu_count's default version counts the keys, checked as lfu_count checks it; r.pt = the counted
// table (host), kept on the device for populate's timing. Printed; pass?
bool tt_cache_count(TtCacheRun& r) {
    cudaCheck(cudaMemset(r.tab.keys, 0xFF, r.H * 8));
    cudaCheck(cudaMemset(r.tab.counts, 0, r.H * 8));
    cudaCheck(cudaMemset(r.lt.dropped, 0, 8));
    int64_t* d_keys = device_upload(r.keys_warm);
    LfuCountWorkspace lw = lfu_count_workspace(r.nnz, (int64_t)r.c.tables * r.c.E);
    for (int s = 0; s < r.warmup; s++) lfu_count(1, d_keys + s * r.nnz, r.nnz, r.lt, lw, 256);
    r.pt = LfuCountHostTable((uint64_t)r.H);
    r.pt.keys = device_download(r.tab.keys, r.H);
    r.pt.counts = device_download(r.tab.counts, r.H);
    r.pt.dropped = (int64_t)device_download(r.lt.dropped, 1)[0];
    lfu_count_free(lw);
    cudaCheck(cudaFree(d_keys));
    r.cnt_keys = device_upload(r.pt.keys);
    r.cnt_counts = device_upload(r.pt.counts);
    const std::string bad = lfu_count_check_table(r.pt.keys.data(), r.pt.counts.data(), r.H, r.pt.dropped, r.occ);
    printf("warm-up: %d steps, %zu distinct rows, %lld accesses dropped; counting %s\n", r.warmup, r.occ.size(), (long long)r.pt.dropped,
           bad.empty() ? "ok" : ("FAIL " + bad).c_str());
    return bad.empty();
}

void tt_cache_print_timing(const char* op, const char* shape, const Timing& tm, const char* check, double bytes, const std::string& extra) {
    Result res;
    res.op = op; res.shape = shape; res.check = check; res.kernel = 1; res.block = 0;
    res.ms_median = tm.median; res.ms_min = tm.min; res.ms_max = tm.max;
    res.gbps = bytes / (tm.median * 1e-3) / 1e9;
    res.pct_copy = 100.0 * res.gbps / copy_peak_gbps();
    res.extra = extra;
    print_result(res);
}

// populate, checked against the CPU populate of the counted table (r.pt becomes its result), then timed on its own
// (RESULT op=tt_cache_populate); the cache's rows and state are saved for the step's restore. pass?
bool tt_cache_run_populate(TtCacheRun& r, const Cli& cli) {
    poison(r.cs.w, r.C * r.D * 4);
    tt_cache_populate(r.t, r.tab, r.C, r.cs.w, r.w);
    cudaCheck(cudaDeviceSynchronize());
    const bool pass = tt_cache_check_populate(r.t, r.cores, r.tab, r.w, r.cs.w, r.C, r.pt, r.state_ref, r.row_key, r.kept);
    if (!cli.check_only) {
        const Timing tp = benchmark(std::min(cli.repeat, 20), [&] { tt_cache_populate(r.t, r.tab, r.C, r.cs.w, r.w); }, [&] {
            cudaCheck(cudaMemcpyAsync(r.tab.keys, r.cnt_keys, r.H * 8, cudaMemcpyDeviceToDevice));
            cudaCheck(cudaMemcpyAsync(r.tab.counts, r.cnt_counts, r.H * 8, cudaMemcpyDeviceToDevice));
        });
        tt_cache_print_timing("tt_cache_populate", r.shape, tp, pass ? "pass" : "fail", 36.0 * r.H + 4.0 * r.kept * r.D,   // table read,
                              "rows_kept=" + std::to_string(r.kept));                                                    // sorted, rewritten; rows
    }
    cudaCheck(cudaMemcpy(r.cw0, r.cs.w, r.C * r.D * 4, cudaMemcpyDeviceToDevice));
    printf("populate: expected hit rate %.4f (kept rows' share of the warm-up's counts, less rows counted once): version 7 builds the TT "
           "part's rows %s\n", r.w.expected_hit,
           r.w.rows7 ? (r.w.stage7 ? "a warp per lookup (slices staged in shared memory)" : "a warp per lookup (slices read from L2)")
                     : r.w.rows7_fits ? "with the TT forward (the part is expected too large)" : "with the TT forward (a warp's buffers do not fit a block)");
    return pass;
}

// the step's references: the CPU partition, the whole batch's TT forward, the cached backward (the TT part's backward
// reference is computed in the check)
void tt_cache_references(TtCacheRun& r, bool full) {
    r.pr = tt_cache_partition_cpu(r.pt, r.state_ref, r.ids, r.offsets, r.c.tables, r.c.B, r.c.E);
    const int64_t m = (int64_t)r.pr.ids_tt.size();
    r.hit = 1.0 - (double)m / (double)r.nnz;
    r.out_ref.assign((size_t)(r.nbags * r.D), 0.0f);
    r.W_ref = device_download(r.cw0, r.C * r.D);
    r.st_ref = r.cache_st0;
    r.dW_ref.assign((size_t)(r.C * r.D), 0.0f);
    memset(r.dW_ref.data(), 0xFF, r.dW_ref.size() * 4);
    r.row_hit.assign((size_t)r.C, 0);
    for (int c : r.pr.crow_c) r.row_hit[c] = 1;
    r.rows_hit = std::count(r.row_hit.begin(), r.row_hit.end(), 1);
    if (full) {
        tt_cache_tt_forward_cpu(r.t, r.cores, r.out_ref.data(), r.ids.data(), r.offsets.data(), r.t.fwd);
        r.mag_ref.assign((size_t)(r.C * r.D), 0.0f);
        tt_cache_backward_cpu(r.opt, (float)r.lr, (float)r.eps, r.W_ref.data(), r.st_ref.data(), r.dW_ref.data(), r.pr.crow.data(), r.offsets.data(),
                              r.nbags, r.dY.data(), r.D, r.C, r.mag_ref.data());
    }
    printf("step: %lld lookups, %lld cached (hit rate %.4f), %lld through the TT chain; cache rows read: %lld distinct\n", (long long)r.nnz,
           (long long)(r.nnz - m), r.hit, (long long)m, (long long)r.rows_hit);
}

// the TT ops alone on the whole batch, same run (RESULT op=tt_cache_tt_alone)
void tt_cache_time_tt_alone(TtCacheRun& r, const Cli& cli) {
    TtCacheTt& t = r.t;
    const Timing ta = benchmark(cli.repeat, [&] {
        tt_cache_tt_forward(t, false, t.alone, r.out_alone, t.alone.a.indices, t.alone.a.offsets);
        tt_cache_tt_backward(t.alone);
    }, [&] { tt_cache_tt_restore(t.alone); });
    r.tt_alone_ms = ta.median;
    tt_cache_print_timing("tt_cache_tt_alone", r.shape, ta, "unchecked", 0.0, "tt_forward_version=6 tt_backward_version=7");
}

void tt_cache_restore_step(TtCacheRun& r) {
    tt_cache_tt_restore(r.t.part);
    cudaCheck(cudaMemcpyAsync(r.cs.w, r.cw0, r.C * r.D * 4, cudaMemcpyDeviceToDevice));
    cudaCheck(cudaMemcpyAsync(r.cs.st, r.st0, r.C * 4, cudaMemcpyDeviceToDevice));
}

// before a checked step: restored inputs, every output and workspace the step writes poisoned
void tt_cache_poison_step(TtCacheRun& r) {
    tt_cache_restore_step(r);
    const int64_t nnz = r.nnz, nbags = r.nbags;
    TtCacheStepBufs& o = r.w.o;
    poison(r.cs.dw, r.C * r.D * 4);
    poison(r.out, nbags * r.D * sizeof(floatX));
    for (int* p : {o.crow, o.crow_key, o.bag_of, o.crow_c, o.sorted_crow, o.sorted_bag}) poison(p, nnz * 4);
    poison(o.flag_c, nnz);
    for (int64_t* p : {o.flag_tt, o.pos_tt, o.ids_tt}) poison(p, nnz * 8);
    for (int64_t* p : {o.off_fwd, o.off_c, o.bag_tt}) poison(p, (nbags + 1) * 8);
    poison(o.msq, nbags * 4);
    poison(o.part5, ceil_div<int64_t>(nnz, TT_CACHE_SEG5) * 2 * r.D * 4);
    poison(o.row_of, nnz * 4);
    poison(o.rows, nnz * r.D * 4);
    const TtEmbeddingBackwardArgs& a = r.t.part.a;
    poison(a.dG, a.s.core_off[a.s.T] * 4);
    // the TT part's slice keys: zeros (slice 0 of every core) where no lookup of the part writes them, so that a scan
    // that ran past the device-side count would find lookups that are not there
    cudaCheck(cudaMemset(a.ws.keys, 0, (size_t)a.s.T * tt_embedding_backward_round4(nnz) * 4));
}

// a step's check (version k): the partition (exactly), out, the TT part's cores, the cache's rows (tt_cache_close)
// and state; printed; pass?
bool tt_cache_check_step(TtCacheRun& r, int k, bool full) {
    const int64_t m = (int64_t)r.pr.ids_tt.size(), C = r.C;
    const int D = r.D;
    const TtCacheStepBufs& o = r.w.o;
    const bool same = device_download(o.off_fwd, r.nbags + 1) == r.pr.off_tt && device_download(o.ids_tt, m) == r.pr.ids_tt &&
                      device_download(o.off_c, r.nbags + 1) == r.pr.off_c && device_download(o.crow_c, r.nnz - m) == r.pr.crow_c;
    printf("  partition        %s (%lld TT lookups, %lld cached, in order; offsets of both parts)\n", same ? "ok  " : "FAIL", (long long)m,
           (long long)(r.nnz - m));
    if (!full) return same;
    bool ok = validate_device("out", r.out, r.out_ref.data(), r.out_ref.size(), TT_EMBEDDING_FORWARD_ATOL, TT_EMBEDDING_FORWARD_RTOL) && same;
    ok = tt_cache_tt_check(r.t, r.t.part, r.cores, r.tt_state, r.pr.off_tt, r.pr.ids_tt, r.dY) && ok;
    const bool dense = r.opt == TT_EMBEDDING_BACKWARD_DENSE;
    const std::vector<float> gw = device_download(dense ? r.cs.dw : r.cs.w, C * D), gst = device_download(r.cs.st, C);
    const std::vector<float>& ref = dense ? r.dW_ref : r.W_ref;
    int64_t checked = 0, wrong = 0, wrong_bits = 0;   // the kept rows (dense: the rows hit); the other rows must keep their bits
    double worst = 0.0;
    for (int64_t n = 0; n < C; n++) {
        const bool in = dense ? r.row_hit[n] : n < r.kept;
        for (int64_t i = n * D; i < (n + 1) * D; i++) {
            if (!in) { wrong_bits += memcmp(&gw[i], &ref[i], 4) != 0; continue; }
            checked++;
            if (!tt_cache_close(gw[i], ref[i], r.mag_ref[i], k >= 4)) wrong++;
            worst = std::max(worst, std::fabs((double)gw[i] - ref[i]));
        }
    }
    printf("  %-16s %s (%lld of %lld elements off, max abs err %.3g; tolerance 1e-6 + 1e-5 |ref|%s)\n", dense ? "cache dW (hit)" : "cache rows",
           wrong ? "FAIL" : "ok  ", (long long)wrong, (long long)checked, worst, k >= 4 ? " + 2e-6 x sum |update|" : "");
    printf("  cache untouched  %s (%lld values of other rows changed)\n", wrong_bits ? "FAIL" : "ok  ", (long long)wrong_bits);
    ok = validate_host("cache state", gst.data(), r.st_ref.data(), (size_t)C, 1e-6f, 1e-5f) && ok && wrong == 0 && wrong_bits == 0;
    return ok;
}

void tt_cache_free_run(TtCacheRun& r) {
    tt_cache_free(r.w);
    tt_cache_tt_free(r.t);
    for (void* p : {(void*)r.tab.keys, (void*)r.tab.counts, (void*)r.tab.state, (void*)r.lt.dropped, (void*)r.cnt_keys, (void*)r.cnt_counts,
                    (void*)r.cs.w, (void*)r.cs.st, (void*)r.cs.dw, (void*)r.cw0, (void*)r.st0, (void*)r.out_alone, (void*)r.out})
        cudaCheck(cudaFree(p));
}

int main(int argc, char** argv) {
    TtCacheRun r;
    Cli cli("tt_cache", "LFU row cache of a TT embedding: warm-up counting, populate (top C rows built by the TT forward), then a\n"
            "training step split into cached and TT lookups (TT forward/backward of the TT part, cached SUM and optimizer).", 7, 7);
    tt_cache_parse(r, cli, argc, argv);
    tt_cache_make_inputs(r, cli.seed);
    tt_cache_setup_device(r);
    bool pass = tt_cache_count(r);
    pass = tt_cache_run_populate(r, cli) && pass;
    tt_cache_references(r, !cli.no_check);
    if (!cli.check_only) tt_cache_time_tt_alone(r, cli);

    OpRunner op;
    op.op = "tt_cache";
    op.shape = r.shape;
    op.bytes = 8.0 * r.nnz + 16.0 * (double)r.occ.size() / r.warmup + 4.0 * r.D * r.nnz * r.hit +
               4.0 * r.D * r.rows_hit * (r.opt == TT_EMBEDDING_BACKWARD_ADAGRAD ? 3 : r.opt == TT_EMBEDDING_BACKWARD_SGD ? 2 : 1);
    op.block_sizes = {128, 256, 512};
    op.prepare_check = [&] { tt_cache_poison_step(r); };
    op.prepare_timing = [&] { tt_cache_restore_step(r); };
    op.launch = [&](int k, int block) { tt_cache_step(k, r.t, r.tab, (int)r.C, r.batch, r.t.alone.a.dY, r.out, r.cs, r.w, block); };
    op.check = [&](int k, int) { return tt_cache_check_step(r, k, !cli.no_check); };
    op.extra = [&](int, int, double ms) {
        char buf[160];
        snprintf(buf, sizeof buf, "hit_rate=%.4f tt_alone_ms=%.4f vs_tt_alone=%.3f target=%.3f", r.hit, r.tt_alone_ms,
                 r.tt_alone_ms > 0 ? ms / r.tt_alone_ms : 0.0, 1.0 - r.hit / 2.0);
        return std::string(buf);
    };
    const int rc = run_versions(cli, op);
    tt_cache_free_run(r);
    if (!pass) printf("populate or counting FAILED (above)\n");
    return pass ? rc : EXIT_CHECK_FAILED;
}
#endif
