/*
tt_embedding forward: pooled tensor-train (TT) embedding bags (FBTT-Embedding, TT-Rec, EL-Rec), T = 2..6 cores,
several tables, SUM pooling. Each looked-up row is rebuilt as a chain of small matrix products:
  core t    : fp32 [tables, p_t, R_t q_t R_{t+1}], R_0 = R_T = 1; slice G_t[tbl][i] is R_t x q_t x R_{t+1}, element
              (k, a, k') at (k q_t + a) R_{t+1} + k'
  row index : mixed radix, i_0 most significant: i_t = (idx / prod_{j>t} p_j) % p_t
  one row   : M_0 = G_0[i_0] (q_0 x R_1); M_t = M_{t-1} (Q_{t-1} x R_t) . G_t[i_t] (R_t x q_t R_{t+1}),
              Q_t = q_0 ... q_t; M_{T-1} holds the D = prod q values of the row, d = (a_0, ..., a_{T-1})
  bags      : indices int64 [nnz], offsets int64 [tables B + 1] (table-major); out [tables, B, D] = the SUM of
              each bag's rows (an empty bag gives zeros). Chains in fp32 in both builds; bf16 rounds the output.
FLOPs per lookup: sum_{t=1}^{T-1} 2 Q_{t-1} R_t q_t R_{t+1}; FBTT's default (p 200,220,250, q 4,4,4, ranks 32,32,
  B 512, L 20): 36,864 per lookup, 377.5 MFLOP per call. % below: of the FP32 FMA peak measured in the same run;
  the count is nominal (every lookup's chain): version 6 makes a repeated index's row once, so Zipf rates can pass 100%.
Fewest bytes: 4 sum_t tables p_t R_t q_t R_{t+1} + 8 nnz + 8 (tables B + 1) + tables B D sizeof(out): 4.05 MB at
  the default, under 1 us of HBM time; the op is bound by arithmetic and on-chip latency, not by memory.

Versions (H200, 2026-12-01, FBTT's default, median ms at the best block; results/h200.md):                ms    % FMA
  1  the explicit sum: a thread per (bag, element) over every rank tuple (in double; timed in fp32)   5.690   0.1
  2  FBTT's pipeline (the baseline): per chunk of lookups, a pointer kernel, one cuBLAS batched
     GEMM per chain step, a reduce                                                                 0.381    1.7
  3  one fused kernel per lookup: a warp runs the whole chain in shared memory, a bag per block    0.0534  12.4
  4  grouping: a block per value of i_1 reads G_1's slice once for all its lookups (no sort)      0.0504  13.2
  5  version 4 with 16 / q_0 lookups' chains at a time on tensor cores in 3xTF32 (FP32 accuracy)  0.0461  14.4
  6  the default: version 5's items planned by a first kernel (each key's lookups listed ahead), a
     hash set for repeated rows, PDL; and where 5's kernel is not compiled, the routes below     0.0332  20.0
  retired (git show 33f44ba:<this file>, there numbered 4-8 and 12; history: results/notes/tt_embedding_forward.md):
  CUB-sorted groups 0.0824, TF32 heavy step 0.1365, one-block planner 0.0888, G_1 by rows 0.0519, cp.async ring 0.0481,
  items by counts 0.0421; 7 (G_1 in column tiles) folded into 6.
Version 6 at every shape (its dispatcher, in this order; deterministic at any block size):
  - small p_t where the cut pays (T 4..6): every prefix and suffix product once (a batched cuBLAS GEMM per core), then
    one product per lookup;
  - T = 3, q_0 in {1,2,4,8}, q_2 = 4 (or 8 at R_2 = 32), R_2 a power of two <= 128, at R_2 = 64, at 32 where no kernel
    is compiled, and wherever G_1's slice exceeds shared memory (rank 128): the items with G_1 in column tiles;
  - T = 3, q 4,4,4 at ranks 16 or 32, q 8,4,4 and 4,8,8 at ranks 32 (p_1 <= 65536): the compiled kernel;
  - anything else: version 3. --stash (training) also keeps each lookup's P_1 .. P_{T-2} for the backward.
  The grid (q 8,4,4, ranks 16 and 64, T 4 and 6, D 256, EL-Rec's rank 128) against version 2: results/h200.md.

Compile and run:
  make tt_embedding_forward && ./tt_embedding_forward all
  ./tt_embedding_forward --p 200,220,250 --q 2,2,4 --ranks 128,128 --B 4096 --alpha 1.15 --stash   (EL-Rec, training)
  make tt_embedding_forward_bf16 && ./tt_embedding_forward_bf16 all --check-only

Lessons:
  - Fusing the chain into one kernel (3) beats the cuBLAS pipeline (2) 7x; a buffer pointer chosen at run time between
    shared and global memory made 3 a third slower (generic loads and stores): one instantiation per memory space.
  - At B 512 versions 3-5 all took 45-50 us whether 137 MB (3) or ~45 MB (4) moved through L2: latency rules.
  - Tensor cores (5) cut version 4's instructions by 43% (ncu), not its time; version 6's 27% came from a shorter
    serial path per item (digits once, O(m) duplicates, one wave, PDL; H100: each key's lookups listed ahead, -13%).
  - Sorting first (CUB, a planning kernel) cost more than grouping saved; a map for a hot row's repeats won 1.6x (Zipf).
  - Column tiles: four lookups per FP32 lane step (rank 128: q 2,2,4 1.412 -> 0.604 ms); at rank 64 raw tiles split as
    loaded ran two blocks an SM where three copies of G_1's slice (197 KB) held one (1.5x).
  - Count the divisions: the tables' row kernel, deaf to its block size, had 105 in its PTX; at 30, T 4-6 ran 11% faster.
*/
#include "tt_embedding.h"

// Tolerances: a pooled value is a sum of L rows of O(1) (unit-variance row elements); fp32 chains differ from the
// double chain by a few 1e-7 per step, so 1e-4 leaves a wide margin while an indexing bug gives O(1) errors. bf16 adds
// one rounding of the output. Versions 5 and 6 run 3xTF32 (about FP32's rounding) and are checked the same.
#ifdef ENABLE_BF16
static const float TT_EMBEDDING_FORWARD_ATOL = 1e-4f, TT_EMBEDDING_FORWARD_RTOL = 5e-3f;
#else
static const float TT_EMBEDDING_FORWARD_ATOL = 1e-4f, TT_EMBEDDING_FORWARD_RTOL = 1e-4f;
#endif

#define TT_EMBEDDING_FORWARD_MAX_CORES TT_EMBEDDING_MAX_CORES
#define TT_EMBEDDING_FORWARD_NUM_KERNELS 6
// the default's column-tile kernel (rank 128): its slot in the per-kernel tables, beside versions 1..6
#define TT_EMBEDDING_FORWARD_TILED (TT_EMBEDDING_FORWARD_NUM_KERNELS + 1)
// and its prefix and suffix tables (small p_t): the slot after it
#define TT_EMBEDDING_FORWARD_SPLIT (TT_EMBEDDING_FORWARD_NUM_KERNELS + 2)
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
    int D_pad = 0;     // D rounded up to 4 floats (16-byte aligned shared buffers)
    // the chain's ping-pong buffers: M_t for odd t goes to buffer 0, for even t to buffer 1; each sized for the
    // largest M_t it holds (rounded up to 4 floats; 0 when it holds none: T = 3 needs only buffer 0)
    int buf_pad[2] = {};
};

// the device pointers of the T cores (each [tables, p_t, slice_t]); stash: where the column-tile kernel writes P_1 (the
// stash, tt_embedding.h) as it goes, null where it does not; source (version 6's item kernels): each lookup's position
// in indices of the lookup that computed its row and P_1 (its own, or that of an equal index); key_count, key_lookups
// (version 6 where an item is a whole key, else null): each key's lookups as the digit kernel counted them, and the
// positions of the first key_cap of them ([tables p_1][key_cap]); the item of the key zeroes its count
struct TtEmbeddingForwardCores {
    const float* c[TT_EMBEDDING_FORWARD_MAX_CORES];
    float* stash;
    int64_t* source;
    int* key_count;
    uint32_t* key_lookups;
    int key_cap;
};

inline int64_t tt_embedding_forward_round4(int64_t x) { return (x + 3) / 4 * 4; }

// a printf-style message (the shape checks' reasons)
template <class... Args>
inline std::string tt_embedding_forward_fmt(const char* fmt, Args... args) {
    char buf[256];
    snprintf(buf, sizeof buf, fmt, args...);
    return buf;
}

// A warp step's lane tile (m x n product): the fewest FMAs per lane (ceil(tasks / 32) * rt * cw per k), ties to the
// biggest tile (fewer loads per FMA), and (1 x 4) before (4 x 1) (one float4 load of the slice, one of M)
inline void tt_embedding_forward_pick_tile(int m, int n, int& rt_out, int& cw_out) {
    static const int tiles[6][2] = {{4, 4}, {2, 4}, {1, 4}, {4, 1}, {2, 1}, {1, 1}};
    int64_t best = INT64_MAX;
    for (const auto& tile : tiles) {
        const int rt = tile[0], cw = tile[1];
        if (m % rt != 0 || n % cw != 0) continue;
        const int64_t tasks = (int64_t)(m / rt) * (n / cw), cost = (tasks + 31) / 32 * rt * cw;
        if (cost < best) { best = cost; rt_out = rt; cw_out = cw; }
    }
}

// The kernels' shape from a config that tt_embedding_check_config accepted; "" = fine, else the broken constraint.
// The forward's own limits: every grid of one thread per output value fits 2^31 blocks of 256 (output < 2^38
// values, row values < 2^40), and a chain intermediate Q_t R_{t+1} <= 2^24 floats.
inline std::string tt_embedding_forward_make_shape(TtEmbeddingForwardShape& s, const TtEmbeddingConfig& c) {
    const int T = c.T(), D = c.D, tables = c.tables, B = c.B, L = c.L;
    const int64_t nbags = c.num_bags(), nnz = c.nnz();
    const double big = (double)((int64_t)1 << 40);
    if ((double)nbags * D > big / 4 || (double)nnz * D > big)
        return tt_embedding_forward_fmt("tables*B*D (%.3g output values) must be < 2^38 and tables*B*L*D (%.3g row values) < 2^40", (double)nbags * D,
                    (double)nnz * D);
    const std::vector<int>&p = c.p, &q = c.q;
    int64_t prod_p = 1;
    for (int t = 0; t < T; t++) prod_p *= p[t];
    const int64_t E = c.E, limit = (int64_t)1 << 24;
    s = TtEmbeddingForwardShape();
    s.T = T; s.tables = tables; s.B = B; s.L = L; s.D = D; s.E = E; s.prod_p = prod_p; s.nnz = nnz;
    s.R[0] = 1; s.R[T] = 1;
    for (int t = 0; t < T; t++) { s.p[t] = p[t]; s.q[t] = q[t]; }
    for (int t = 1; t < T; t++) s.R[t] = c.ranks[t - 1];
    int64_t st = 1;
    for (int t = T - 1; t >= 0; t--) { s.stride[t] = st; st *= p[t]; }
    int64_t Qt = 1;
    for (int t = 0; t < T; t++) {
        Qt *= q[t];
        s.Q[t] = (int)Qt;
        s.slice[t] = (int64_t)s.R[t] * q[t] * s.R[t + 1];
        if (Qt * s.R[t + 1] > limit)
            return tt_embedding_forward_fmt("chain intermediate Q_%d*R_%d (%lld) must be <= 2^24", t, t + 1, (long long)(Qt * s.R[t + 1]));
        s.ld[t] = (t == 0) ? s.R[1] : (t == T - 1 ? 1 : (s.R[t + 1] | 1));
        if (t >= 1 && t <= T - 2) {
            s.buf_pad[(t & 1) ? 0 : 1] = std::max<int>(s.buf_pad[(t & 1) ? 0 : 1], (int)tt_embedding_forward_round4(Qt * s.ld[t]));
        }
    }
    s.D_pad = (int)tt_embedding_forward_round4(D);
    for (int t = 1; t < T; t++) {
        const int m = s.Q[t - 1], k = s.R[t], n = q[t] * s.R[t + 1];
        s.step_m[t] = m; s.step_k[t] = k; s.step_n[t] = n;
        tt_embedding_forward_pick_tile(m, n, s.step_rt[t], s.step_cw[t]);
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

// the table of lookup n: the last table whose first lookup (offsets[tbl B], table-major) is at or before n
__host__ __device__ inline int tt_embedding_forward_table_of(const int64_t* offsets, int tables, int B, int64_t n) {
    int lo = 0, hi = tables;
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (offsets[(int64_t)mid * B] <= n) lo = mid; else hi = mid;
    }
    return lo;
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
// CPU reference: the chain, in double

// one row (D values) of table tbl; cores[t] points at core t ([tables, p_t, slice_t]); prefixes: where to put the row's
// P_t (M_t, t = 1..T-2, rounded to float; the stash), or null
inline void tt_embedding_forward_row_cpu(double* row, const float* const* cores, const TtEmbeddingForwardShape& s, int tbl, int64_t idx,
                                         float* const* prefixes = nullptr) {
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
        if (prefixes && t <= s.T - 2) std::copy(cur.begin(), cur.end(), prefixes[t]);
    }
    for (int d = 0; d < s.D; d++) row[d] = cur[d];
}

// out [tables, B, D]: every bag's rows summed in double, rounded once to float; with stash (offsets stash_off), every
// lookup's prefixes too
inline void tt_embedding_forward_cpu(float* out, const float* const* cores, const int64_t* indices, const int64_t* offsets,
                                     const TtEmbeddingForwardShape& s, float* stash = nullptr, const int64_t* stash_off = nullptr) {
    std::vector<double> row(s.D), acc(s.D);
    float* prefixes[TT_EMBEDDING_FORWARD_MAX_CORES] = {};
    for (int64_t bag = 0; bag < (int64_t)s.tables * s.B; bag++) {
        const int tbl = (int)(bag / s.B);
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t n = offsets[bag]; n < offsets[bag + 1]; n++) {
            for (int t = 1; stash && t <= s.T - 2; t++) prefixes[t] = stash + stash_off[t] + n * s.Q[t] * s.R[t + 1];
            tt_embedding_forward_row_cpu(row.data(), cores, s, tbl, indices[n], stash ? prefixes : nullptr);
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
// recomputing only the prefix products that the last increment changed. In double: at ranks 64 an element sums
// millions of tuples, which an fp32 sum rounds past the check's tolerance. Host-callable (tested on the CPU).
__host__ __device__ inline float tt_embedding_forward_explicit_sum(const float* const* g, const int* row_len, const int* R, int T) {
    int k[TT_EMBEDDING_FORWARD_MAX_CORES + 1];
    for (int t = 0; t <= T; t++) k[t] = 0;              // k[0] = k[T] = 0 always (R_0 = R_T = 1)
    double pre[TT_EMBEDDING_FORWARD_MAX_CORES + 1];     // pre[t] = product of factors 0..t-1
    pre[0] = 1.0;
    double sum = 0.0;
    int from = 0;
    for (;;) {
        for (int u = from; u < T; u++) pre[u + 1] = pre[u] * (double)g[u][k[u] * row_len[u] + k[u + 1]];
        sum += pre[T];
        int u = T - 1;                                  // advance the odometer k_{T-1} .. k_1
        while (u >= 1 && ++k[u] == R[u]) { k[u] = 0; u--; }
        if (u == 0) break;
        from = u - 1;                                   // factors u-1 .. T-1 read the changed k's
    }
    return (float)sum;
}

// Version 1: one thread per (bag, output element d). d's digits (a_0..a_{T-1}) fix the middle index of
// every core; the thread adds, for each lookup of its bag, the explicit sum above: prod(R_1..R_{T-1})
// terms per element where the chain needs about sum_t R_t R_{t+1} / q. Slow by design: it is the definition's
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
__global__ void tt_embedding_forward_kernel_bag_ids2(int* __restrict__ bag_of, const int64_t* __restrict__ offsets,
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

__global__ void tt_embedding_forward_kernel_pointers2(const void** __restrict__ a_ptr, const void** __restrict__ b_ptr,
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
__global__ void tt_embedding_forward_kernel_reduce2(float* __restrict__ acc, const float* __restrict__ last,
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

// ---- version 3: the warp chain engine, then one fused kernel per lookup

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

// The whole chain of one lookup by one warp: lane t (< T) holds the slice pointer of core t; every lane must
// call this (full-mask shuffles). Step t writes M_t to buf0 (odd t) or buf1 (even t), the last step writes (or
// adds to) the D-value row `last`. Ends with a __syncwarp, so `last` is visible to the whole warp. With a stash
// (training mode, tt_embedding.h's layout), M_t = P_t of lookup n (its place in indices) is also stored there, t < T-1.
__device__ __forceinline__ void tt_embedding_forward_warp_chain(const TtEmbeddingForwardShape& s, const float* g_lane, float* buf0,
                                                                float* buf1, float* last, bool accumulate_last, int lane,
                                                                float* stash = nullptr, int64_t n = 0) {
    auto core = [&](int t) { return reinterpret_cast<const float*>(__shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(g_lane), t)); };
    const float* in = core(0);
    int64_t off = 0;                                    // the stash's block of P_t: nnz x sum_{u<t} Q_u R_{u+1} before it
    for (int t = 1; t < s.T; t++) {
        const bool is_last = t == s.T - 1;
        float* out = is_last ? last : ((t & 1) ? buf0 : buf1);
        tt_embedding_forward_chain_step(s, t, out, in, core(t), is_last && accumulate_last, lane);
        __syncwarp();
        if (stash && !is_last) {                        // Q_t rows of R_{t+1}, unpadded
            const int r = s.R[t + 1], w = s.Q[t] * r;
            float* dst = stash + off + n * w;
            for (int e = lane; e < w; e += 32) dst[e] = out[(e / r) * s.ld[t] + e % r];
            off += s.nnz * w;
        }
        in = out;
    }
}

inline size_t tt_embedding_forward_smem_bytes3(const TtEmbeddingForwardShape& s, int warps) {
    return (size_t)warps * ((size_t)s.buf_pad[0] + s.buf_pad[1] + s.D_pad) * 4;
}

// Version 3: fused, a bag per block. Warp w runs the chains of lookups w, w+W, ... of the bag and adds each
// result into its own pooled row in shared memory (the last step accumulates in place); then the block
// sums its W rows in a fixed order and writes the bag's D values once. Everything between the index load
// and the pooled write stays on chip; no atomics; the result depends only on the block size.
// Per warp: buf_pad[0] + buf_pad[1] + D_pad floats, in shared memory; or (GLOBAL), where one warp's buffers exceed
// a block's shared memory (ranks 128 with wide intermediates), in a global scratch area (blockDim / 32 warps' worth
// per block). Two instantiations, not a pointer chosen at run time, which would compile to generic loads and stores.
// STASH (version 6 with --stash): each M_t also goes to the stash; an instantiation of its own leaves the plain
// kernel's code as it was.
template <bool GLOBAL, bool STASH = false>
__global__ void tt_embedding_forward_kernel3(floatX* __restrict__ out, const int64_t* __restrict__ indices,
                                             const int64_t* __restrict__ offsets, const __grid_constant__ TtEmbeddingForwardCores cores,
                                             const __grid_constant__ TtEmbeddingForwardShape s, float* __restrict__ scratch) {
    extern __shared__ float4 tt_embedding_forward_smem3[];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, W = blockDim.x / 32;
    const int per_warp = s.buf_pad[0] + s.buf_pad[1] + s.D_pad;
    float* smem = GLOBAL ? scratch + (int64_t)blockIdx.x * W * per_warp : reinterpret_cast<float*>(tt_embedding_forward_smem3);
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
            tt_embedding_forward_warp_chain(s, g, buf0, buf1, acc, true, lane, STASH ? cores.stash : nullptr, n);
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

// ---- building blocks of versions 4-6: the pooling kernel, asynchronous copies, division-free digits, a block's
// list of lookups, the digit scan, and the item loop

// PDL (common.h): kernels of versions 4-6 that follow another kernel call pdl_wait_prior() before reading its output.

// The pooling of versions 4-6: one thread per (bag, element), the bag's rows summed in lookup order. source (version 6,
// else null): lookup n's row is row source[n] of rowbuf, so a repeated index's row is computed and stored once.
__global__ void tt_embedding_forward_kernel_pool(floatX* __restrict__ out, const float* __restrict__ rowbuf,
                                                  const int64_t* __restrict__ source, const int64_t* __restrict__ offsets,
                                                  int64_t nbags, int D) {
    pdl_wait_prior();                      // the rows (version 6 launches this with PDL)
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= nbags * D) return;
    const int64_t bag = i / D;
    const int e = (int)(i - bag * D);
    float sum = 0.0f;
    for (int64_t n = offsets[bag]; n < offsets[bag + 1]; n++) sum += rowbuf[(source ? source[n] : n) * D + e];
    out[i] = from_float<floatX>(sum);
}

// Digits without a 64-bit division (version 4 computes one for every index of its segment). For x < 2^32 and a
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

__device__ __forceinline__ const float* tt_embedding_forward_fast_slice(const TtEmbeddingForwardCores& cores, const TtEmbeddingForwardShape& s,
                                                                      const TtEmbeddingForwardFastDigits& f, bool fast,
                                                                      int tbl, int64_t idx, int t) {
    const int64_t digit = fast ? (int64_t)tt_embedding_forward_fast_digit(f, (uint64_t)idx, t) : tt_embedding_forward_digit(idx, s.stride[t], s.p[t]);
    return cores.c[t] + ((int64_t)tbl * s.p[t] + digit) * s.slice[t];
}

// A block's list of the lookups its item matched (shared memory, cap entries each), and the counters
struct TtEmbeddingForwardList {
    int64_t* idx;     // the lookup's index
    int64_t* pos;     // the lookup's position (its row of rowbuf)
    int* first;       // the entry whose row this one copies: the first with the same index (versions 4, 5), any
                      // one that computes (version 6's hash set); itself when it computes
    int* uniq;        // the entries that compute (first[e] == e), in no particular order
    int* counters;    // [0] list length, [1] unique entries, [2] the block's item, [3] the digit scan's overflow
                      // position; [4 ..] the digit scan's matches per (chunk, warp) of a pass
    int* slots;       // version 6: hash set of indices (2 cap entries; unused by versions 4 and 5)
    int64_t* keep_idx; // version 6: rows an item's earlier rounds computed that had equal indices (KEEP slots,
    int64_t* keep_pos; // index -1 when empty): later rounds copy them instead of computing them again
};

// lookups per item (key, segment) at uniform indices the host aims at (scripts/tt_forward_sweep.sh builds others)
#ifndef TT_EMBEDDING_FORWARD_TARGET4
#define TT_EMBEDDING_FORWARD_TARGET4 16
#endif
#ifndef TT_EMBEDDING_FORWARD_TARGET5
#define TT_EMBEDDING_FORWARD_TARGET5 16
#endif
#ifndef TT_EMBEDDING_FORWARD_TARGET6
#define TT_EMBEDDING_FORWARD_TARGET6 64
#endif
#define TT_EMBEDDING_FORWARD_SCAN_UNROLL 4    // versions 4, 5: indices each thread loads per pass of the scan
#define TT_EMBEDDING_FORWARD_SCAN_CHUNKS 4    // version 6: 16-byte loads of 8 digits each thread makes per pass
#define TT_EMBEDDING_FORWARD_KEEP 16           // version 6: rows kept across an item's rounds (probes: 4)
__host__ __device__ inline int tt_embedding_forward_hash_slots(int cap) { return 2 * cap; }
inline size_t tt_embedding_forward_list_bytes(int cap, bool slots = false) {
    return (size_t)cap * (2 * sizeof(int64_t) + 2 * sizeof(int)) + (4 + TT_EMBEDDING_FORWARD_SCAN_CHUNKS * 32) * sizeof(int) +
           (slots ? (size_t)tt_embedding_forward_hash_slots(cap) * sizeof(int) + TT_EMBEDDING_FORWARD_KEEP * 2 * sizeof(int64_t) : 0);
}

__device__ __forceinline__ TtEmbeddingForwardList tt_embedding_forward_list(void* base, int cap) {
    TtEmbeddingForwardList l;
    l.idx = reinterpret_cast<int64_t*>(base);
    l.pos = l.idx + cap;
    l.first = reinterpret_cast<int*>(l.pos + cap);
    l.uniq = l.first + cap;
    l.counters = l.uniq + cap;
    l.slots = l.counters + 4 + TT_EMBEDDING_FORWARD_SCAN_CHUNKS * 32;
    l.keep_idx = reinterpret_cast<int64_t*>(l.slots + tt_embedding_forward_hash_slots(cap));   // 8-byte aligned: cap is even
    l.keep_pos = l.keep_idx + TT_EMBEDDING_FORWARD_KEEP;
    return l;
}

// per-block list capacity, versions 4 and 5: two passes of the scan (a pass starts only while one more pass fits)
__host__ __device__ inline int tt_embedding_forward_list_cap(int threads) { return 2 * TT_EMBEDDING_FORWARD_SCAN_UNROLL * threads; }

// segments per key: about TARGET lookups per block at uniform indices
inline int tt_embedding_forward_segments(const TtEmbeddingForwardShape& s, int target) {
    const int64_t per_table = s.tables > 0 ? s.nnz / s.tables : 0;
    const int64_t segs = (per_table + (int64_t)s.p[1] * target - 1) / ((int64_t)s.p[1] * target);
    return (int)std::min<int64_t>(std::max<int64_t>(segs, 1), 1024);
}

// The digit scan of version 6 (a building block of the item loop below). Versions 4 and 5 scan int64 indices in
// dependent passes (each an L2 round trip, a 64-bit digit and two barriers) on every item's serial path. Version 6
// computes every lookup's i_1 ONCE (uint16: a quarter of the indices' bytes, which every key re-reads) and scans them 8
// per 16-byte load (__vcmpeq2), CHUNKS loads per thread in flight. The list is filled in position order by a prefix
// count (match masks, warp scans, per-(chunk, warp) totals): no atomics, so a pass may overfill the list; the entries
// past `cap` are dropped and the next round restarts at the first of them (the entry whose slot is cap).
// It also sets every lookup's row source to itself; the item loop then marks only the lookups of repeated indices.
// Where an item is a whole key (cores.key_count), the scan is skipped: this kernel also lists each key's lookups (an
// atomic per run of equal keys in a warp, so Zipf's hot keys do not serialize), and an item whose key has at most
// key_cap of them reads its list in one round trip instead of scanning the table's digits (26% of a block's cycles at
// FBTT's default). The lists are in no particular order; rows depend on the index alone, so the bits do not. With a
// block's first item read before the PDL wait, 5-13% off at uniform indices; at Zipf (hot keys scan) a tie (the notes).
__global__ void tt_embedding_forward_kernel_digits6(uint16_t* __restrict__ digits1, const int64_t* __restrict__ indices,
                                                     const int64_t* __restrict__ offsets, const __grid_constant__ TtEmbeddingForwardCores cores,
                                                     const __grid_constant__ TtEmbeddingForwardShape s,
                                                     const __grid_constant__ TtEmbeddingForwardFastDigits fd, bool fast) {
    pdl_allow_next();                      // the chain kernel's blocks may start (and wait)
    const int64_t l = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int key = -1;                          // none past the end
    if (l < s.nnz) {
        const int64_t idx = indices[l];
        const int d = (int)(fast ? tt_embedding_forward_fast_digit(fd, (uint64_t)idx, 1) : tt_embedding_forward_digit(idx, s.stride[1], s.p[1]));
        digits1[l] = (uint16_t)d;
        cores.source[l] = l;
        if (cores.key_count) key = tt_embedding_forward_table_of(offsets, s.tables, s.B, l) * s.p[1] + d;
    }
    if (!cores.key_count) return;          // grid-uniform
    const unsigned peers = __match_any_sync(0xffffffffu, key);
    const int lane = threadIdx.x % 32, leader = __ffs(peers) - 1;
    int base = 0;
    if (key >= 0 && lane == leader) base = atomicAdd(&cores.key_count[key], __popc(peers));
    base = __shfl_sync(0xffffffffu, base, leader);
    const int slot = base + __popc(peers & ((1u << lane) - 1));
    if (key >= 0 && slot < cores.key_cap) cores.key_lookups[(int64_t)key * cores.key_cap + slot] = (uint32_t)l;
}

// version 6's list capacity
__host__ __device__ inline int tt_embedding_forward_digit_list_cap(int threads) { return 4 * threads; }

// Bit e set when digit e of vector v (8 uint16 in 4 words, little-endian) equals i1 and its position 8 v + e
// lies in [cursor, seg_hi). Host-callable: the CPU test compares it with a per-position check.
__host__ __device__ __forceinline__ unsigned tt_embedding_forward_digit_match_mask(const uint32_t (&w)[4], int i1, int64_t v, int64_t cursor,
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
__device__ __forceinline__ int64_t tt_embedding_forward_digit_pass(const TtEmbeddingForwardList& list, int cap,
                                                                const uint16_t* __restrict__ digits1, const int64_t* __restrict__ indices,
                                                                int64_t cursor, int64_t seg_hi, int i1) {
    constexpr int U = TT_EMBEDDING_FORWARD_SCAN_CHUNKS;
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
            mask[u] = tt_embedding_forward_digit_match_mask(w, i1, v, cursor, seg_hi);
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
__device__ __forceinline__ int64_t tt_embedding_forward_digit_scan(const TtEmbeddingForwardList& list, int cap,
                                                                const uint16_t* __restrict__ digits1, const int64_t* __restrict__ indices,
                                                                int64_t cursor, int64_t seg_hi, int i1) {
    while (cursor < seg_hi) {
        cursor = tt_embedding_forward_digit_pass(list, cap, digits1, indices, cursor, seg_hi, i1);
        if (list.counters[0] >= cap) break;                  // block-uniform (written before the pass's last barrier)
    }
    return cursor;
}

// The item loop of versions 4-6: a persistent block takes items (key = (table, i_1), segment) from work[0], lists
// the segment's lookups whose i_1 matches, marks equal indices and hands the list to the version's engine (the last
// block out resets the counters). The hooks, each called by every thread of the block:
//   on_item(tbl, i1)   at the start of an item (versions 5, 6 start the copy of G_1's slice here)
//   on_work(tbl, i1)   once per item, at its first round with matches (version 4 starts its copy here)
//   on_ready(fresh)    after this thread's copies landed and a barrier; fresh: the round that called on_work
//   compute(tbl, nu)   the rows of the list's nu unique entries into rowbuf (warps pick their share)
// after which the entries equal to another take its row: versions 4 and 5 copy it, version 6 (DIGITS) writes its
// position into source, which the pooling (and, with a stash, the copy of P_1) reads. DIGITS: version 6's digit scan,
// hash set and row sources, and its kernel launched with PDL: a block's first item is its own index (no counter), and
// its slice copy and offsets are read before the wait for the digit kernel, whose lists of keys (cores.key_count,
// where segments is 1) replace the scan.
template <bool DIGITS, class OnItem, class OnWork, class OnReady, class Compute>
__device__ __forceinline__ void tt_embedding_forward_grouped_items(float* __restrict__ rowbuf, const TtEmbeddingForwardCores& cores,
                                                                   const int64_t* __restrict__ indices,
                                                                   const uint16_t* __restrict__ digits1,
                                                                   const int64_t* __restrict__ offsets, const TtEmbeddingForwardShape& s,
                                                                   int segments, const TtEmbeddingForwardFastDigits& fd, bool fast,
                                                                   int* __restrict__ work, const TtEmbeddingForwardList& list, int cap,
                                                                   OnItem on_item, OnWork on_work, OnReady on_ready,
                                                                   Compute compute) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, W = blockDim.x / 32;
    int* counters = list.counters;
    const int64_t stride1 = s.stride[1];
    const int p1 = s.p[1], nkeys = s.tables * p1;
    const int n_items = nkeys * segments;
    const bool by_key = DIGITS && cores.key_count && segments == 1;    // the digit kernel listed each key's lookups
  for (bool first = true;; first = false) {                 // items (key, segment): the block's own, then a global counter
    int item = blockIdx.x;                                  // (the grid is at most n_items)
    if (!first) {
        if ((int)gridDim.x >= n_items) break;               // one item a block: the counter is not needed
        if (threadIdx.x == 0) counters[2] = gridDim.x + atomicAdd(&work[0], 1);
        __syncthreads();
        item = counters[2];
        __syncthreads();                                    // read by all before thread 0 takes the next
        if (item >= n_items) break;
    }
    const int key = item / segments, seg = item % segments, nseg = segments;
    const int tbl = key / p1, i1 = key % p1;
    on_item(tbl, i1);
    const int64_t lo_t = offsets[(int64_t)tbl * s.B], hi_t = offsets[(int64_t)(tbl + 1) * s.B];
    if (DIGITS && first) {
        pdl_wait_prior();                                   // the digit kernel's output from here on
        pdl_allow_next();                                   // the pooling kernel may launch (and wait)
    }
    const int64_t seg_lo = lo_t + (hi_t - lo_t) * seg / nseg, seg_hi = lo_t + (hi_t - lo_t) * (seg + 1) / nseg;
    const int listed = by_key ? cores.key_count[key] : 0;  // zeroed below, after a barrier (every thread read it)
    const bool from_list = by_key && listed <= min(cores.key_cap, cap);
    bool worked = false;
    int64_t cursor = from_list && listed == 0 ? seg_hi : seg_lo;
    if (DIGITS && threadIdx.x < TT_EMBEDDING_FORWARD_KEEP) list.keep_idx[threadIdx.x] = -1;   // ordered by the round's barrier
    while (cursor < seg_hi) {                               // rounds: fill the list, compute it (block-uniform)
        if (threadIdx.x == 0) { counters[0] = 0; counters[1] = 0; }
        __syncthreads();
        if constexpr (DIGITS) {
            if (by_key && threadIdx.x == 0 && cursor == seg_lo) cores.key_count[key] = 0;   // for the next call
            if (from_list) {                                // one round: the key's lookups from the digit kernel's list
                const uint32_t* kl = cores.key_lookups + (int64_t)key * cores.key_cap;
                for (int i = threadIdx.x; i < listed; i += blockDim.x) {
                    const int64_t p = kl[i];
                    list.pos[i] = p;
                    list.idx[i] = indices[p];
                }
                if (threadIdx.x == 0) counters[0] = listed;
                cursor = seg_hi;
                __syncthreads();
            } else {
                cursor = tt_embedding_forward_digit_scan(list, cap, digits1, indices, cursor, seg_hi, i1);
            }
        }
        // scan: passes of blockDim * UNROLL indices while one more pass fits the list
        else for (;;) {
            int64_t idx[TT_EMBEDDING_FORWARD_SCAN_UNROLL];
TT_EMBEDDING_FORWARD_UNROLL
            for (int u = 0; u < TT_EMBEDDING_FORWARD_SCAN_UNROLL; u++) {
                const int64_t p = cursor + (int64_t)u * blockDim.x + threadIdx.x;
                idx[u] = p < seg_hi ? indices[p] : -1;
            }
TT_EMBEDDING_FORWARD_UNROLL
            for (int u = 0; u < TT_EMBEDDING_FORWARD_SCAN_UNROLL; u++) {
                const int64_t d = fast ? (int64_t)tt_embedding_forward_fast_digit(fd, (uint64_t)idx[u], 1)
                                       : (int64_t)tt_embedding_forward_digit(idx[u], stride1, p1);
                if (idx[u] >= 0 && d == i1) {
                    const int slot = atomicAdd(&counters[0], 1);
                    list.idx[slot] = idx[u];
                    list.pos[slot] = cursor + (int64_t)u * blockDim.x + threadIdx.x;
                }
            }
            cursor += (int64_t)TT_EMBEDDING_FORWARD_SCAN_UNROLL * blockDim.x;
            __syncthreads();
            const int count = counters[0];
            __syncthreads();                                // read by all before the next pass adds to it
            if (cursor >= seg_hi || count + TT_EMBEDDING_FORWARD_SCAN_UNROLL * (int)blockDim.x > cap) break;
        }
        const int m = counters[0];
        if (m == 0) continue;                               // block-uniform
        const bool fresh = !worked;
        if (fresh) { on_work(tbl, i1); worked = true; }
        // equal indices: one entry computes, the others take its row. DIGITS: a hash set, O(m) (else O(m^2)); an index
        // in keep_idx (met twice in an earlier round of the item: its slot was marked, bit 30) takes that row, so
        // where one row is most of an item (Zipf's hottest row at L 1, ~95% of the bags) rounds do not recompute it.
        if constexpr (DIGITS) {
            constexpr int K = TT_EMBEDDING_FORWARD_KEEP, MARK = 1 << 30;
            // slots: a power of two >= 4m (>= 32), not twice the list's capacity (clearing and marking 2 cap slots cost
            // an item of ~50 lookups 16 stores and 8 loads a thread); 2m slots were 2-3% slower (the notes)
            const int HS = min(tt_embedding_forward_hash_slots(cap), max(32, 1 << (32 - __clz(4 * m - 1))));
            auto keep_slot = [&](int64_t v) { return (int)(((uint64_t)v * 0x9E3779B97F4A7C15ull) >> 40) & (K - 1); };
            for (int h = threadIdx.x; h < HS; h += blockDim.x) list.slots[h] = -1;
            __syncthreads();
            for (int i = threadIdx.x; i < m; i += blockDim.x) {
                const int64_t v = list.idx[i];
                int f = -1;
                for (int j = 0, h = keep_slot(v); j < 4 && list.keep_idx[h] != -1; j++, h = (h + 1) & (K - 1))
                    if (list.keep_idx[h] == v) { f = -2 - h; break; }
                if (f != -1) { list.first[i] = f; continue; }
                int h = (int)(((uint64_t)v * 0x9E3779B97F4A7C15ull) >> 40) & (HS - 1);
                for (;;) {                                  // linear probing; the table is at most half full
                    const int prev = atomicCAS(&list.slots[h], -1, i);
                    if (prev == -1) { f = i; break; }
                    if (list.idx[prev & ~MARK] == v) { f = prev & ~MARK; atomicOr(&list.slots[h], MARK); break; }
                    h = (h + 1) & (HS - 1);
                }
                list.first[i] = f;                          // any entry of the index will do: rows depend on it alone
                if (f == i) list.uniq[atomicAdd(&counters[1], 1)] = i;
            }
            __syncthreads();
            for (int h = threadIdx.x; h < HS; h += blockDim.x) {
                const int e = list.slots[h];
                if (e == -1 || !(e & MARK)) continue;
                const int64_t v = list.idx[e & ~MARK];
                for (int j = 0, k = keep_slot(v); j < 4; j++, k = (k + 1) & (K - 1)) {
                    if (atomicCAS(reinterpret_cast<unsigned long long*>(&list.keep_idx[k]), ~0ull, (unsigned long long)v) != ~0ull) continue;
                    list.keep_pos[k] = list.pos[e & ~MARK];
                    break;
                }
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
        async_wait_group<0>();          // this thread's copies of G_1
        __syncthreads();
        on_ready(fresh);
        compute(tbl, counters[1]);
        // DIGITS: an equal index gets a position to read, not a row copy. Zipf's hot rows put hundreds of lookups in a few
        // items, and their blocks alone copied every row (a warp each, an L2 round trip per row) on the critical path.
        if constexpr (DIGITS) {
            for (int i = threadIdx.x; i < m; i += blockDim.x) {
                const int f = list.first[i];
                if (f != i) cores.source[list.pos[i]] = f >= 0 ? list.pos[f] : list.keep_pos[-2 - f];
            }
        } else {
            __syncthreads();                                // the block's rows are written (visible to the block)
            for (int i = warp; i < m; i += W) {             // copies for equal indices
                const int f = list.first[i];
                if (f == i) continue;
                for (int e = lane; e < s.D; e += 32) rowbuf[list.pos[i] * s.D + e] = rowbuf[list.pos[f] * s.D + e];
            }
        }
        __syncthreads();                                    // before the list is reused
    }
  }
    async_wait_group<0>();             // nothing may be in flight at exit
    // the last block out resets the two counters for the next call (every block took its last item before); with one
    // item a block nothing touched them
    if (threadIdx.x == 0 && (int)gridDim.x < n_items) {
        __threadfence();
        if (atomicAdd(&work[1], 1) == (int)gridDim.x - 1) {
            work[0] = 0;
            work[1] = 0;
            __threadfence();
        }
    }
}

// ---- version 4: lookups grouped by the index of core 1, which each group reads once

// Version 3 streams each lookup's own slice of G_1 from L2 (16 KB at the default). Version 4 shares it: block (key,
// segment) owns one value (table, i_1) of core 1 and a contiguous segment of that table's lookups, lists the lookups of
// the segment whose i_1 matches, and computes them against ONE shared-memory copy of G_1's slice; equal indices (Zipf's
// hot rows) are computed once and copied. No sort, no planning kernel: every key re-reads the indices, a tenth of the
// slice bytes saved at the default. Persistent blocks take items from a global counter; rows go to a per-lookup buffer
// that the pooling kernel sums in lookup order (no float atomics, deterministic at any block size). Step 1 runs by rows
// of G_1: row k_1 (q_1 R_2 <= 128 floats, a float4 per lane) times M_0's column k_1 (a broadcast float4 of G_0's slice,
// transposed), each lane keeping its 4 columns (a_1, k_2..k_2+3) of M_1 for every row; step 2 multiplies them by G_2's
// rows into a per-lane partial that xor shuffles add over the R_2 / 4 lanes of each a_1. G_0 and G_2 are staged per
// warp with cp.async, the next lookup's while this one computes. Written for T = 3, q_0 = q_2 = 4, R_2 a power of two.
#define TT_EMBEDDING_FORWARD_G1_COLS 128        // q_1 R_2 at most: a float4 of columns per lane
#define TT_EMBEDDING_FORWARD_G1_BATCH 8          // G_1 rows loaded per batch (unrolled)

// acc[0..3] += a * w (host-callable)
__host__ __device__ __forceinline__ void tt_embedding_forward_fma4(float (&acc)[4], float a, const float4& w) {
    acc[0] = fmaf(a, w.x, acc[0]);
    acc[1] = fmaf(a, w.y, acc[1]);
    acc[2] = fmaf(a, w.z, acc[2]);
    acc[3] = fmaf(a, w.w, acc[3]);
}

// R_1 rounded up to whole batches: the transposed G_0 buffer is zero-padded to it
__host__ __device__ inline int tt_embedding_forward_r1_pad(int R1) {
    return (R1 + TT_EMBEDDING_FORWARD_G1_BATCH - 1) / TT_EMBEDDING_FORWARD_G1_BATCH * TT_EMBEDDING_FORWARD_G1_BATCH;
}

// One lane's share of LPW lookups (1 in version 4; the column-tile kernel stacks several, see there): g0t = their G_0 slices
// transposed side by side (R_1 padded rows of LPW Q0 floats, lookup l's M_0[a_0][k] at k LPW Q0 + l Q0 + a_0, zeros
// past R_1), g1 = G_1's slice (R_1 rows of ncols floats), g2[l] = lookup l's G_2 slice (R_2 x Q2). Adds this lane's
// partial of each row, out[a_0][a_1][a_2] for its a_1 summed over its 4 values of k_2 only, into part[l Q0 + a_0][Q2].
// The CPU tests run it for lanes 0..31 and sum the partials as the kernel's shuffles do.
template <int Q0, int Q2, int LPW = 1>
__host__ __device__ __forceinline__ void tt_embedding_forward_g1_rows_lane(float (&part)[Q0 * LPW][Q2], const float* __restrict__ g0t,
                                                                      const float* __restrict__ g1,
                                                                      const float* const (&g2)[LPW], int R1, int R2,
                                                                      int ncols, int lane) {
    constexpr int ROWS = Q0 * LPW;
    static_assert(Q2 == 4 && ROWS % 4 == 0, "a row of G_2 and of the transposed G_0 is read as float4s");
    const int col = 4 * lane;
    if (col >= ncols) return;                              // idle lane (q_1 R_2 < 128)
    const int k2 = col % R2;
    float4 g2r[LPW][4];                                    // G_2 rows k_2..k_2+3 of each lookup (16 aligned bytes)
TT_EMBEDDING_FORWARD_UNROLL
    for (int l = 0; l < LPW; l++)
TT_EMBEDDING_FORWARD_UNROLL
        for (int kk = 0; kk < 4; kk++) g2r[l][kk] = *reinterpret_cast<const float4*>(g2[l] + (k2 + kk) * 4);
    float acc[ROWS][4] = {};
    const float* g1c = g1 + col;
    const int R1p = tt_embedding_forward_r1_pad(R1);
    for (int k = 0; k < R1p; k += TT_EMBEDDING_FORWARD_G1_BATCH) {
        float4 v[TT_EMBEDDING_FORWARD_G1_BATCH];              // a batch of G_1 rows in flight
TT_EMBEDDING_FORWARD_UNROLL
        for (int u = 0; u < TT_EMBEDDING_FORWARD_G1_BATCH; u++) {
            const float4* p = reinterpret_cast<const float4*>(g1c + (int64_t)(k + u) * ncols);
            v[u] = (k + u < R1) ? *p : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
TT_EMBEDDING_FORWARD_UNROLL
        for (int u = 0; u < TT_EMBEDDING_FORWARD_G1_BATCH; u++) {
            float w[ROWS];                                 // M_0[a_0][k_1] for every row
TT_EMBEDDING_FORWARD_UNROLL
            for (int r = 0; r < ROWS; r += 4) {
                const float4 t = *reinterpret_cast<const float4*>(g0t + (k + u) * ROWS + r);
                w[r] = t.x; w[r + 1] = t.y; w[r + 2] = t.z; w[r + 3] = t.w;
            }
TT_EMBEDDING_FORWARD_UNROLL
            for (int r = 0; r < ROWS; r++) tt_embedding_forward_fma4(acc[r], w[r], v[u]);
        }
    }
TT_EMBEDDING_FORWARD_UNROLL
    for (int r = 0; r < ROWS; r++)
TT_EMBEDDING_FORWARD_UNROLL
        for (int kk = 0; kk < 4; kk++) tt_embedding_forward_fma4(part[r], acc[r][kk], g2r[r / Q0][kk]);
}

// the partials of the R_2 / 4 lanes of each a_1 (consecutive lanes, an aligned power of two) summed into every
// one of them (xor shuffles; every lane of the warp calls it)
template <int Q0, int Q2>
__device__ __forceinline__ void tt_embedding_forward_g1_rows_reduce(float (&part)[Q0][Q2], int R2) {
    for (int off = 1; off < R2 / 4; off *= 2)
TT_EMBEDDING_FORWARD_UNROLL
        for (int a0 = 0; a0 < Q0; a0++)
TT_EMBEDDING_FORWARD_UNROLL
            for (int a2 = 0; a2 < Q2; a2++) part[a0][a2] += __shfl_xor_sync(0xffffffffu, part[a0][a2], off);
}

// shared memory: G_1's slice, two staging buffers per warp (G_0 transposed + G_2), the list
// (index int64, position, first equal entry, unique entries) and two counters
inline size_t tt_embedding_forward_smem_bytes4(const TtEmbeddingForwardShape& s, int warps) {
    if (s.T != 3) return 0;
    const int R1p = tt_embedding_forward_r1_pad(s.R[1]);
    const size_t cap = (size_t)tt_embedding_forward_list_cap(32 * warps);
    return sizeof(float) * ((size_t)s.R[1] * s.q[1] * s.R[2] + (size_t)warps * 2 * (R1p * 4 + s.R[2] * 4)) +
           tt_embedding_forward_list_bytes(cap);
}

// the staged part of one lookup, by one warp: G_0's slice transposed into t0 (R_1 rows of ld floats, M_0[a_0][k] at
// k ld + a_0: ld = LPW Q0 and t0 offset by l Q0 for slot l of a stacked group), and G_2's slice (R_2 rows of 4) into
// t0 + R_1p ld unless g2 is null. Host-callable: the CPU tests stage with it.
template <int Q0>
__host__ __device__ __forceinline__ void tt_embedding_forward_stage_copies(float* t0, const float* g0, const float* g2, int R1, int R2, int lane,
                                                                        int ld = Q0) {
    for (int k = lane; k < R1; k += 32)
        for (int a0 = 0; a0 < Q0; a0++) async_copy(t0 + k * ld + a0, g0 + a0 * R1 + k, false);
    float* s2 = t0 + tt_embedding_forward_r1_pad(R1) * ld;
    if (g2)
        for (int c = lane; c < R2; c += 32) async_copy(s2 + 4 * c, g2 + 4 * c, true);
}

// A lane's reduced partials of one lookup (rows a_0 of part) -> its row: the first lane of each a_1 writes
// out[a_0][a1_base + a_1][0..3] (q_2 = 4). a1_base: the first a_1 of the columns in g1 (the column-tile kernel's tiles; 0 in
// version 4). Host-callable.
template <int Q0>
__host__ __device__ __forceinline__ void tt_embedding_forward_g1_rows_store(float* row, const float (*part)[4], int q1, int R2,
                                                                         int a1_base, int ncols, int lane) {
    const int col = 4 * lane, a1 = a1_base + col / R2;
    if (col % R2 != 0 || col >= ncols) return;
TT_EMBEDDING_FORWARD_UNROLL
    for (int a0 = 0; a0 < Q0; a0++)
        *reinterpret_cast<float4*>(row + (a0 * q1 + a1) * 4) = make_float4(part[a0][0], part[a0][1], part[a0][2], part[a0][3]);
}

// The warps' share of one round (version 4 and the column-tile kernel): warp w computes groups w, w+W, ... of LPW unique entries each
// against the ncols columns of G_1 in g1 (R_1 rows of ncols floats; a_1 from a1_base); the next group's G_0 slices
// (and G_2's where G2_STAGED, version 4) are staged while one computes: two stages per warp of stage_floats = R_1p LPW
// Q0 (+ 4 R_2) floats, padding rows zero. The column-tile kernel reads G_2's rows from L2 straight into registers (each lane needs
// its own 4 rows at R_2 = 128, so a staged copy saved nothing and cost 2 KB of shared memory per lookup).
template <int Q0, int LPW, bool G2_STAGED>
__device__ __forceinline__ void tt_embedding_forward_g1_rows_warp(float* __restrict__ rowbuf, const TtEmbeddingForwardList& list, int nu,
                                                               float* stages, int stage_floats, const float* g1, int ncols, int a1_base,
                                                               const TtEmbeddingForwardCores& cores, const TtEmbeddingForwardShape& s,
                                                               const TtEmbeddingForwardFastDigits& fd, bool fast, int tbl) {
    static_assert(!G2_STAGED || LPW == 1, "a staged G_2 is one lookup's");
    constexpr int ROWS = Q0 * LPW;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, W = blockDim.x / 32;
    const int R1 = s.R[1], R2 = s.R[2], R1p = tt_embedding_forward_r1_pad(R1), groups = (nu + LPW - 1) / LPW;
    float* my_stages = stages + warp * 2 * stage_floats;
    auto slice = [&](int e, int t) { return tt_embedding_forward_fast_slice(cores, s, fd, fast, tbl, list.idx[list.uniq[e]], t); };
    auto stage = [&](float* t0, int g) {                    // a partial group's missing slots keep stale values: their
        for (int l = 0; l < LPW && g * LPW + l < nu; l++)  // rows are computed and never stored
            tt_embedding_forward_stage_copies<Q0>(t0 + l * Q0, slice(g * LPW + l, 0), G2_STAGED ? slice(g * LPW + l, 2) : nullptr, R1, R2,
                                                  lane, ROWS);
        async_commit();
    };
    int buf = 0;
    if (warp < groups) stage(my_stages, warp);
    for (int g = warp; g < groups; g += W) {                // warp-uniform
        if (g + W < groups) {
            stage(my_stages + (buf ^ 1) * stage_floats, g + W);
            async_wait_group<1>();
        } else {
            async_wait_group<0>();
        }
        __syncwarp();
        const float* t0 = my_stages + buf * stage_floats;
        const float* g2[LPW];
TT_EMBEDDING_FORWARD_UNROLL
        for (int l = 0; l < LPW; l++) g2[l] = G2_STAGED ? t0 + R1p * ROWS : slice(min(g * LPW + l, nu - 1), 2);
        float part[ROWS][4] = {};
        tt_embedding_forward_g1_rows_lane<Q0, 4, LPW>(part, t0, g1, g2, R1, R2, ncols, lane);
        tt_embedding_forward_g1_rows_reduce<ROWS, 4>(part, R2);
TT_EMBEDDING_FORWARD_UNROLL
        for (int l = 0; l < LPW; l++)
            if (g * LPW + l < nu)
                tt_embedding_forward_g1_rows_store<Q0>(rowbuf + (int64_t)list.pos[list.uniq[g * LPW + l]] * s.D, part + l * Q0, s.q[1], R2,
                                                       a1_base, ncols, lane);
        __syncwarp();                                       // the stage is refilled two groups on
        buf ^= 1;
    }
}

template <int Q0, int Q2>
__global__ void tt_embedding_forward_kernel4(float* __restrict__ rowbuf, const int64_t* __restrict__ indices,
                                             const uint16_t* __restrict__, const int64_t* __restrict__ offsets,
                                             const __grid_constant__ TtEmbeddingForwardCores cores,
                                             const __grid_constant__ TtEmbeddingForwardShape s, int segments,
                                             const __grid_constant__ TtEmbeddingForwardFastDigits fd, bool fast,
                                             int* __restrict__ work) {
    static_assert(Q0 == 4 && Q2 == 4, "version 4 is compiled for q_0 = q_2 = 4");
    extern __shared__ float4 tt_embedding_forward_smem4[];
    const int W = blockDim.x / 32;
    const int R1 = s.R[1], R2 = s.R[2], q1 = s.q[1], ncols = q1 * R2, R1p = tt_embedding_forward_r1_pad(R1);
    const int cap = tt_embedding_forward_list_cap(blockDim.x);
    const int stage_floats = R1p * 4 + R2 * 4;
    float* g1s = reinterpret_cast<float*>(tt_embedding_forward_smem4);
    float* stages = g1s + R1 * ncols;                       // [W][2][stage_floats]
    const TtEmbeddingForwardList list = tt_embedding_forward_list(stages + W * 2 * stage_floats, cap);

    for (int st = 0; st < 2 * W; st++)                      // transposed G_0's padding rows stay zero
        for (int e = R1 * 4 + threadIdx.x; e < R1p * 4; e += blockDim.x) stages[st * stage_floats + e] = 0.0f;
    auto on_item = [](int, int) {};
    auto on_work = [&](int tbl, int i1) {                   // G_1's slice, once, only for a block with work
        const float* g1 = cores.c[1] + ((int64_t)tbl * s.p[1] + i1) * s.slice[1];
        for (int c = threadIdx.x; c < R1 * ncols / 4; c += blockDim.x) async_copy(g1s + 4 * c, g1 + 4 * c, true);
        async_commit();
    };
    auto on_ready = [](bool) {};
    auto compute = [&](int tbl, int nu) {
        tt_embedding_forward_g1_rows_warp<Q0, 1, true>(rowbuf, list, nu, stages, stage_floats, g1s, ncols, 0, cores, s, fd, fast, tbl);
    };
    tt_embedding_forward_grouped_items<false>(rowbuf, cores, indices, nullptr, offsets, s, segments, fd, fast, work, list, cap, on_item,
                                              on_work, on_ready, compute);
}

// the shapes version 4 is written and compiled for; "" when it runs
inline std::string tt_embedding_forward_reason4(const TtEmbeddingForwardShape& s) {
    if (s.T != 3) return tt_embedding_forward_fmt("version 4 is written for three cores (T = %d)", s.T);
    if (s.q[0] != 4 || s.q[2] != 4)
        return tt_embedding_forward_fmt("version 4 is compiled for q_0 = q_2 = 4 (q = %d,%d,%d); add an instantiation for others", s.q[0], s.q[1], s.q[2]);
    const int R2 = s.R[2];
    if (R2 < 4 || (R2 & (R2 - 1)) != 0 || s.q[1] * R2 > TT_EMBEDDING_FORWARD_G1_COLS)
        return tt_embedding_forward_fmt("version 4 needs R_2 a power of two >= 4 and q_1 * R_2 <= %d (R_2 = %d, q_1 = %d)", TT_EMBEDDING_FORWARD_G1_COLS,
                                        R2, s.q[1]);
    return "";
}

// ---- version 5: version 4's groups, the chain on tensor cores in 3xTF32

// Most of version 4's instructions are its FP32 step 1. Version 5 keeps version 4's items and runs the chain of
// 16 / q_0 unique lookups at a time as one 16-row tile of mma.sync.m16n8k8 (TF32 in, FP32 accumulate):
//   step 1  [16 / q_0 lookups x q_0 rows of M_0] (16 x R_1) . G_1 (R_1 x q_1 R_2): q_1 R_2 / 8 n-tiles of R_1 / 8
//           k-steps, in 3xTF32: x = hi + lo, hi = tf32(x), lo = tf32(x - hi), product hi.hi + hi.lo + lo.hi (lo.lo,
//           ~2^-22 relative, dropped): three mma per tile and k-step, about FP32's rounding;
//   step 2  each lane's accumulators are M_1 at (row, a_1, two consecutive k_2): FP32 FMAs with G_2's rows into
//           (a_1, row, a_2) partials, which the quad's four lanes (the other k_2) add at the end.
// K's order inside a GEMM is free as long as A and B agree, so fragment column c of k-step s holds k = KL (c % 4) +
// 2 s + c / 4 (KL = R_1 / 4): a lane reads KL contiguous values of each G_0 row (float4 loads from L2), and G_1's
// slice, stored once per item in fragment order (hi and lo; a lane's KL values of n-tile j in KL / 4 float4s, each
// beside the other lanes' same float4), gives every 16-byte load of B fragments 512 contiguous bytes per warp. The
// slice is copied (cp.async, rows padded by 4 floats) under the index scan and split into fragment order once the
// list is ready.
// Deterministic like version 4. Compiled for (q_0, R_1, q_1, R_2) = (Q0, 8 KS, Q1, 8 JT), q_2 = 4: (4, 4, 4, 4)
// (FBTT's default), (4, 2, 4, 2) (ranks 16), (4, 8, 4, 8) (ranks 64), (8, 4, 4, 4) (q 8,4,4: 2 lookups of 8 rows);
// and with q_2 = 8 (the wide tile below) for (4, 4, 8, 4) (q 4,8,8, D 256).

// fragment column c (0..7) of k-step s -> the k of G_1's row / G_0's column it holds
__host__ __device__ __forceinline__ int tt_embedding_forward_tc_k(int KS, int s, int c) { return 2 * KS * (c & 3) + 2 * s + (c >> 2); }
// where value v (0..KL-1) of a lane's B fragments of n-tile j lives in the fragment-order arrays: each float4 of the
// lane's KL values sits beside the other lanes' same float4, so every 16-byte load of a warp reads 512 contiguous
// bytes (lanes KL floats apart put lanes l and l + 4 on the same banks at KL = 8: twice the wavefronts, 4-7% of the op's
// time)
__host__ __device__ __forceinline__ int tt_embedding_forward_tc_b_at(int KS, int j, int lane, int v) {
    return ((j * (KS / 2) + v / 4) * 32 + lane) * 4 + v % 4;
}
// where element (k, n) of G_1's slice goes: n-tile n / 8, lane 4 (n % 8) + k / KL, value k % KL
__host__ __device__ __forceinline__ int tt_embedding_forward_tc_b_pos(int KS, int k, int n) {
    const int KL = 2 * KS;
    return tt_embedding_forward_tc_b_at(KS, n >> 3, (n & 7) * 4 + k / KL, k % KL);
}
// The split into fragment order (version 5's on_ready): thread i reads row k = i % R_1, float4 n4 = i / R_1 of the raw
// copy and stores its 4 columns. A store's bank is 16 (n % 2) + 4 (k / KL) + k % 4, so the lanes of equal k / KL and
// k % 4 (k ^ 4 at KL = 8, the other n4 at KL = 4) take the columns in the other order: 32 banks a store.
__host__ __device__ __forceinline__ int tt_embedding_forward_tc_split_swap(int k, int n4) { return ((k >> 2) ^ n4) & 1; }
// the G_1 rows padded by 4 floats in the raw copy: lanes reading one column at 32 rows k fall in different banks
__host__ __device__ __forceinline__ int tt_embedding_forward_tc_raw_ld(int ncols) { return ncols + 4; }

inline size_t tt_embedding_forward_smem_bytes5(const TtEmbeddingForwardShape& s, int warps, bool digits) {
    if (s.T != 3) return 0;
    const size_t g1 = (size_t)s.R[1] * s.q[1] * s.R[2], raw = (size_t)s.R[1] * tt_embedding_forward_tc_raw_ld(s.q[1] * s.R[2]);
    const int cap = digits ? tt_embedding_forward_digit_list_cap(32 * warps) : tt_embedding_forward_list_cap(32 * warps);
    return sizeof(float) * (2 * g1 + raw) + tt_embedding_forward_list_bytes(cap, digits);
}

// Tile row r (0..15) holds row a_0 = r % Q0 of M_0 of the tile's lookup slot r / Q0 (16 / Q0 lookups per tile). Lane
// (group g, tig t) holds rows g and g + 8: with Q0 | 8 both are row a_0 = g % Q0, of slots g / Q0 and (g + 8) / Q0.
__host__ __device__ __forceinline__ int tt_embedding_forward_tc_slot(int Q0, int group, int h) { return (group + 8 * h) / Q0; }

// 3xTF32's hi and lo parts of the A fragment of k-step st: a0 (row g, col t) a1 (row g+8, col t) a2 (row g, col t+4)
// a3 (row g+8, col t+4), from x[h][v], the lane's v-th value of K in row g + 8 h (which k that is, the caller's layout)
template <int KL>
__device__ __forceinline__ void tt_embedding_forward_split_a(uint32_t (&ahi)[4], uint32_t (&alo)[4], const float (&x)[2][KL], int st) {
#pragma unroll
    for (int r = 0; r < 4; r++) {
        float hi, lo;
        tf32_split(x[r & 1][2 * st + (r >> 1)], hi, lo);
        ahi[r] = __float_as_uint(hi);
        alo[r] = __float_as_uint(lo);
    }
}

// v[0..N) summed over the four lanes of each quad (xor 1, 2), into every one of them
template <int N>
__device__ __forceinline__ void tt_embedding_forward_quad_sum(float* v) {
#pragma unroll
    for (int i = 0; i < N; i++) {
        v[i] += __shfl_xor_sync(0xffffffffu, v[i], 1);
        v[i] += __shfl_xor_sync(0xffffffffu, v[i], 2);
    }
}

// n-tile j of the tile's step 1 in 3xTF32: the lane's B fragments of every k-step from the fragment-order copies
// (hi, lo), then big = hi.hi and small = lo.hi + hi.lo
template <int KS>
__device__ __forceinline__ void tt_embedding_forward_tc_ntile(float (&big)[4], float (&small)[4], const uint32_t (&ahi)[KS][4],
                                                              const uint32_t (&alo)[KS][4], const float* __restrict__ bhi,
                                                              const float* __restrict__ blo, int j, int lane) {
    constexpr int KL = 2 * KS;
    uint32_t bh[KL], bl[KL];
#pragma unroll
    for (int v = 0; v < KL / 4; v++) {
        const uint4 fh = *reinterpret_cast<const uint4*>(bhi + tt_embedding_forward_tc_b_at(KS, j, lane, 4 * v));
        const uint4 fl = *reinterpret_cast<const uint4*>(blo + tt_embedding_forward_tc_b_at(KS, j, lane, 4 * v));
        bh[4 * v] = fh.x; bh[4 * v + 1] = fh.y; bh[4 * v + 2] = fh.z; bh[4 * v + 3] = fh.w;
        bl[4 * v] = fl.x; bl[4 * v + 1] = fl.y; bl[4 * v + 2] = fl.z; bl[4 * v + 3] = fl.w;
    }
#pragma unroll
    for (int c = 0; c < 4; c++) big[c] = small[c] = 0.0f;
#pragma unroll
    for (int st = 0; st < KS; st++) {
        mma_tf32_m16n8k8(small, alo[st], bh[2 * st], bh[2 * st + 1]);
        mma_tf32_m16n8k8(small, ahi[st], bl[2 * st], bl[2 * st + 1]);
        mma_tf32_m16n8k8(big, ahi[st], bh[2 * st], bh[2 * st + 1]);
    }
}

// A tile's rows (both tiles below): lane (group, tig) = (lane / 4, lane % 4) holds rows h = 0, 1 of the 16, each an
// entry of the list (tt_embedding_forward_tc_slot; valid: below nu), at a_0 = group % Q0. Out: the entries, G_2's slice
// of each from row k_2 = 2 tig (rows Q2 floats long), and the A fragments of every k-step split for 3xTF32: col t (+4)
// -> k = KL t + 2 s (+1), from the lane's KL values of G_0's row a_0 (zeros for an invalid row).
template <int Q0, int KS, int Q2>
__device__ __forceinline__ void tt_embedding_forward_tc_rows(const TtEmbeddingForwardList& list, int mt, int nu, const TtEmbeddingForwardCores& cores,
                                                              const TtEmbeddingForwardShape& s, const TtEmbeddingForwardFastDigits& fd, bool fast,
                                                              int tbl, int group, int tig, int a0, int (&entry)[2], bool (&valid)[2],
                                                              const float* (&g2s)[2], uint32_t (&ahi)[KS][4], uint32_t (&alo)[KS][4]) {
    static_assert(Q0 == 2 || Q0 == 4 || Q0 == 8, "a lane's two tile rows share a_0 only where q_0 divides 8");
    constexpr int KL = 2 * KS, R1 = 8 * KS;
    float x[2][KL];                                         // this lane's KL values of K in each of its two rows
#pragma unroll
    for (int h = 0; h < 2; h++) {
        entry[h] = 16 / Q0 * mt + tt_embedding_forward_tc_slot(Q0, group, h);
        valid[h] = entry[h] < nu;
        g2s[h] = nullptr;
        if (valid[h]) {
            const int64_t idx = list.idx[list.uniq[entry[h]]];
            const float* g0 = tt_embedding_forward_fast_slice(cores, s, fd, fast, tbl, idx, 0) + a0 * R1 + KL * tig;
            g2s[h] = tt_embedding_forward_fast_slice(cores, s, fd, fast, tbl, idx, 2) + 2 * tig * Q2;   // row k_2 = 2 tig
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
#pragma unroll
    for (int st = 0; st < KS; st++) tt_embedding_forward_split_a<KL>(ahi[st], alo[st], x, st);
}

// One 16-row tile: unique entries LPT mt .. LPT mt + LPT - 1 of the list, LPT = 16 / Q0 (fewer at the end: their rows
// are zeros and not written)
template <int Q0, int KS, int Q1, int JT>
__device__ __forceinline__ void tt_embedding_forward_tc_tile(float* __restrict__ rowbuf, const TtEmbeddingForwardList& list,
                                                              int mt, int nu, const float* __restrict__ bhi, const float* __restrict__ blo,
                                                              const TtEmbeddingForwardCores& cores, const TtEmbeddingForwardShape& s,
                                                              const TtEmbeddingForwardFastDigits& fd, bool fast, int tbl, int lane) {
    const int group = lane >> 2, tig = lane & 3, a0 = group % Q0;
    int entry[2];
    bool valid[2];
    const float* g2s[2];
    uint32_t ahi[KS][4], alo[KS][4];
    tt_embedding_forward_tc_rows<Q0, KS, 4>(list, mt, nu, cores, s, fd, fast, tbl, group, tig, a0, entry, valid, g2s, ahi, alo);
    float acc[Q1][2][4] = {};                               // (a_1, row, a_2) partial sums over this lane's k_2
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
            float big[4], small[4];
            tt_embedding_forward_tc_ntile<KS>(big, small, ahi, alo, bhi, blo, j, lane);
            // C: c0 (row g, col 2t) c1 (row g, col 2t+1) c2 (row g+8, col 2t) c3 (row g+8, col 2t+1)
#pragma unroll
            for (int h = 0; h < 2; h++)
#pragma unroll
                for (int e = 0; e < 2; e++) tt_embedding_forward_fma4(acc[b][h], big[2 * h + e] + small[2 * h + e], w[h][e]);
        }
    }
    // the quad's lanes hold the other k_2 of the same rows: add them (every lane ends with the sums)
    tt_embedding_forward_quad_sum<Q1 * 2 * 4>(&acc[0][0][0]);
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

// The tile at q_2 = 8 (q 4,8,8): the partials of every a_1 at once (Q1 x 2 x 8 = 128 floats) spilled 1.2 KB a thread
// at 255 registers, so step 2 runs a_1 by a_1 (16 partials; G_2's rows read again for each a_1, from L1), and the quad
// sums by a reduce-scatter: two shuffle rounds leave lane tig with one float4 of the four (row h, half v) runs, which it
// writes (12 shuffles an a_1 instead of 32: 18% off at q 4,8,8).
template <int Q0, int KS, int Q1, int JT>
__device__ __forceinline__ void tt_embedding_forward_tc_tile_wide(float* __restrict__ rowbuf, const TtEmbeddingForwardList& list,
                                                                   int mt, int nu, const float* __restrict__ bhi, const float* __restrict__ blo,
                                                                   const TtEmbeddingForwardCores& cores, const TtEmbeddingForwardShape& s,
                                                                   const TtEmbeddingForwardFastDigits& fd, bool fast, int tbl, int lane) {
    constexpr int Q2 = 8;
    const int group = lane >> 2, tig = lane & 3, a0 = group % Q0;
    int entry[2];
    bool valid[2];
    const float* g2s[2];
    uint32_t ahi[KS][4], alo[KS][4];
    tt_embedding_forward_tc_rows<Q0, KS, Q2>(list, mt, nu, cores, s, fd, fast, tbl, group, tig, a0, entry, valid, g2s, ahi, alo);
    const float4 zero4 = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 1
    for (int b = 0; b < Q1; b++) {
        float acc[2][2][4] = {};                            // (row h, half v of a_2) over this lane's k_2
#pragma unroll
        for (int jj = 0; jj < JT; jj++) {
            float4 w[2][2][2];                              // G_2 rows k_2 = 8 jj + 2 tig + e, both halves
#pragma unroll
            for (int h = 0; h < 2; h++)
#pragma unroll
                for (int e = 0; e < 2; e++)
#pragma unroll
                    for (int v = 0; v < 2; v++)
                        w[h][e][v] = valid[h] ? __ldg(reinterpret_cast<const float4*>(g2s[h] + (8 * jj + e) * Q2) + v) : zero4;
            float big[4], small[4];
            tt_embedding_forward_tc_ntile<KS>(big, small, ahi, alo, bhi, blo, b * JT + jj, lane);
#pragma unroll
            for (int h = 0; h < 2; h++)
#pragma unroll
                for (int e = 0; e < 2; e++)
#pragma unroll
                    for (int v = 0; v < 2; v++) tt_embedding_forward_fma4(acc[h][v], big[2 * h + e] + small[2 * h + e], w[h][e][v]);
        }
        // reduce-scatter over the quad: round 1 (xor 1) keeps half v = tig & 1 of both rows, round 2 (xor 2) row h = tig >> 1
        const int v = tig & 1, h = tig >> 1;
        float keep[2][4], sum[4];
#pragma unroll
        for (int r = 0; r < 2; r++)
#pragma unroll
            for (int c = 0; c < 4; c++) {
                const float mine = v ? acc[r][1][c] : acc[r][0][c], other = v ? acc[r][0][c] : acc[r][1][c];
                keep[r][c] = mine + __shfl_xor_sync(0xffffffffu, other, 1);
            }
#pragma unroll
        for (int c = 0; c < 4; c++) {
            const float mine = h ? keep[1][c] : keep[0][c], other = h ? keep[0][c] : keep[1][c];
            sum[c] = mine + __shfl_xor_sync(0xffffffffu, other, 2);
        }
        if (valid[h])                                       // element (a_0, a_1 = b, a_2 = 4 v ..) of the row
            *reinterpret_cast<float4*>(rowbuf + (int64_t)list.pos[list.uniq[entry[h]]] * s.D + (a0 * Q1 + b) * Q2 + 4 * v) =
                make_float4(sum[0], sum[1], sum[2], sum[3]);
    }
}

// (two blocks of 256 per SM at ranks up to 32 with q_2 = 4; at rank 64 the slice and its split copies fill one SM's
// shared memory, so one block, and the registers of a 255-per-thread budget for the 2 x 8 k-steps of A fragments; at
// q_2 = 8 likewise, for the wide tile)
template <int Q0, int KS, int Q1, int JT, int Q2, bool DIGITS>
__global__ void __launch_bounds__(256, KS <= 4 && Q2 == 4 ? 2 : 1)
tt_embedding_forward_kernel5(float* __restrict__ rowbuf, const int64_t* __restrict__ indices, const uint16_t* __restrict__ digits1,
                             const int64_t* __restrict__ offsets, const __grid_constant__ TtEmbeddingForwardCores cores,
                             const __grid_constant__ TtEmbeddingForwardShape s, int segments,
                             const __grid_constant__ TtEmbeddingForwardFastDigits fd, bool fast, int* __restrict__ work) {
    constexpr int R1 = 8 * KS, NCOLS = Q1 * 8 * JT, KL = 2 * KS, RAW_LD = NCOLS + 4;
    extern __shared__ float4 tt_embedding_forward_smem5[];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, W = blockDim.x / 32;
    const int cap = DIGITS ? tt_embedding_forward_digit_list_cap(blockDim.x) : tt_embedding_forward_list_cap(blockDim.x);
    float* bhi = reinterpret_cast<float*>(tt_embedding_forward_smem5);     // [n-tile][lane][KL], TF32 hi parts
    float* blo = bhi + R1 * NCOLS;                                           // ... and lo parts
    float* raw = blo + R1 * NCOLS;                                           // [R1][RAW_LD]: the slice as copied
    const TtEmbeddingForwardList list = tt_embedding_forward_list(raw + R1 * RAW_LD, cap);
    auto on_item = [&](int tbl, int i1) {                   // G_1's slice under the scan (even if no lookup matches)
        async_wait_group<0>();          // the last item's copy, if it had no work
        const float* g1 = cores.c[1] + ((int64_t)tbl * s.p[1] + i1) * s.slice[1];
        for (int c = threadIdx.x; c < R1 * NCOLS / 4; c += blockDim.x) {
            const int k = c / (NCOLS / 4);
            async_copy(raw + k * RAW_LD + 4 * (c - k * (NCOLS / 4)), g1 + 4 * c, true);
        }
        async_commit();
    };
    auto on_work = [](int, int) {};
    auto on_ready = [&](bool fresh) {                       // split and scatter to fragment order, once per item
        if (!fresh) return;
        for (int i = threadIdx.x; i < R1 * NCOLS / 4; i += blockDim.x) {
            const int k = i % R1, n4 = i / R1;              // a warp: 32 values of k (rows), one float4 of columns
            const float4 v = *reinterpret_cast<const float4*>(raw + k * RAW_LD + 4 * n4);
            const float xs[4] = {v.x, v.y, v.z, v.w};
            const int swap = tt_embedding_forward_tc_split_swap(k, n4);   // store c: column c ^ swap
#pragma unroll
            for (int c = 0; c < 4; c++) {
                const int pos = tt_embedding_forward_tc_b_pos(KS, k, 4 * n4 + (c ^ swap));
                tf32_split(swap ? xs[c ^ 1] : xs[c], bhi[pos], blo[pos]);
            }
        }
        __syncthreads();
    };
    auto compute = [&](int tbl, int nu) {
        for (int mt = warp; 16 / Q0 * mt < nu; mt += W)    // warp-uniform
            if constexpr (Q2 == 4) tt_embedding_forward_tc_tile<Q0, KS, Q1, JT>(rowbuf, list, mt, nu, bhi, blo, cores, s, fd, fast, tbl, lane);
            else tt_embedding_forward_tc_tile_wide<Q0, KS, Q1, JT>(rowbuf, list, mt, nu, bhi, blo, cores, s, fd, fast, tbl, lane);
    };
    static_assert(KL % 4 == 0, "lanes load their KL values of a row as float4s");
    tt_embedding_forward_grouped_items<DIGITS>(rowbuf, cores, indices, digits1, offsets, s, segments, fd, fast, work,
                                               list, cap, on_item, on_work, on_ready, compute);
}

// the signature of versions 4-6's item kernels (version 4 ignores the digits)
typedef void (*TtEmbeddingForwardGroupedKernel)(float*, const int64_t*, const uint16_t*, const int64_t*, const TtEmbeddingForwardCores,
                                                const TtEmbeddingForwardShape, int, const TtEmbeddingForwardFastDigits, bool, int*);

// version 5's compiled shapes (T = 3; q = 4,4,4 with ranks 16,16, 32,32 or 64,64; q = 8,4,4 and 4,8,8 with ranks
// 32,32): the kernel (version 6's with the digit scan), null for any other
inline TtEmbeddingForwardGroupedKernel tt_embedding_forward_tc_kernel(const TtEmbeddingForwardShape& s, bool digits = false) {
    if (s.T != 3 || s.R[1] != s.R[2]) return nullptr;
    const int R = s.R[1];
    if (s.q[0] == 4 && s.q[1] == 8 && s.q[2] == 8 && R == 32)
        return digits ? tt_embedding_forward_kernel5<4, 4, 8, 4, 8, true> : tt_embedding_forward_kernel5<4, 4, 8, 4, 8, false>;
    if ((s.q[0] != 4 && s.q[0] != 8) || s.q[1] != 4 || s.q[2] != 4) return nullptr;
    if (s.q[0] == 8) return R != 32 ? nullptr : digits ? tt_embedding_forward_kernel5<8, 4, 4, 4, 4, true> : tt_embedding_forward_kernel5<8, 4, 4, 4, 4, false>;
    if (R == 32) return digits ? tt_embedding_forward_kernel5<4, 4, 4, 4, 4, true> : tt_embedding_forward_kernel5<4, 4, 4, 4, 4, false>;
    if (R == 16) return digits ? tt_embedding_forward_kernel5<4, 2, 4, 2, 4, true> : tt_embedding_forward_kernel5<4, 2, 4, 2, 4, false>;
    if (R == 64) return digits ? nullptr : tt_embedding_forward_kernel5<4, 8, 4, 8, 4, false>;   // (6: the column tiles)
    return nullptr;
}

inline std::string tt_embedding_forward_reason5(const TtEmbeddingForwardShape& s) {
    if (tt_embedding_forward_tc_kernel(s)) return "";
    const std::string got = s.T != 3 ? tt_embedding_forward_fmt("T = %d", s.T)
                                     : tt_embedding_forward_fmt("T = 3, q = %d,%d,%d, ranks %d,%d", s.q[0], s.q[1], s.q[2], s.R[1], s.R[2]);
    return "version 5 is compiled for T = 3, q = 4,4,4 with ranks 16,16, 32,32 or 64,64, and q = 8,4,4 or 4,8,8 with ranks 32,32 (" + got +
           "); add an instantiation for others";
}

// where version 6 runs its compiled kernel (version 5's shapes but rank 64, p_1 <= 65536); elsewhere the column tiles
// or version 3's (tt_embedding_forward_runs6)
inline std::string tt_embedding_forward_reason6(const TtEmbeddingForwardShape& s) {
    const std::string why = tt_embedding_forward_reason5(s);
    if (!why.empty()) return "as " + why;
    if (!tt_embedding_forward_tc_kernel(s, true)) return "version 6 runs ranks 64,64 on its column tiles";
    if (s.p[1] > 65536) return "version 6's compiled kernel stores i_1 as uint16: p_1 (" + std::to_string(s.p[1]) + ") must be <= 65536";
    return "";
}

// ---- version 6 (the default): version 5 with the digit scan, a hash set and PDL; G_1 in column tiles at rank 128

// Version 5 ran fewer instructions than version 4 in the same time: an item's serial path, not the chain, held both
// up (few warp slots active). Version 6 cuts that path: the digit kernel, which also lists each key's lookups (an item
// that is a whole key reads its list; others scan the digits), a hash set for equal indices (O(m)), 64 lookups per item
// (one wave of items at the default), the chain and pooling kernels launched with PDL, a block's first item started
// before the wait. As the default it runs every shape: its compiled kernel where that
// applies, the column-tile kernel below where G_1's slice is too big for version 5's copies and that kernel runs the
// shape (tt_embedding_forward_route_tiled), else version 3's.

// ---- version 6 where G_1's slice exceeds shared memory: the same items, G_1 in column tiles

// At EL-Rec's rank 128 (G_1's slice 256 KB at q 4,4,4, 128 KB at q 2,2,4) version 5's three copies of the slice do
// not fit a block, and version 3 streams every lookup's slice from L2. This kernel keeps version 6's items and shares
// the slice a column tile at a time: tiles of whole a_1 (128 columns, 64 KB at R_1 = 128) hold every k_2 of their
// a_1, so step 2 (x G_2) finishes inside the tile and each tile writes its own (a_0, a_1, *) values of the row: no
// partial sums cross tiles, no atomics. Per round of an item and tile the block copies the tile (cp.async) and the
// warps run version 4's FP32 lane step on it, G_0 staged per lookup. A warp runs LPW = 4 / 2 / 1 lookups (q_0 <= 2 /
// 4 / 8) at once as one M_0 of LPW q_0 rows (G_0's slices transposed side by side): each float4 of the tile a lane
// loads from shared memory feeds 32 FMAs instead of q_0 x 4, and the staging, shuffle tree and G_2's rows (from L2
// into registers) are paid once per group. T = 3, q_0 in {1, 2, 4, 8}, q_2 = 4, R_2 a power of two in 4..128, any
// R_1. __launch_bounds__(256, 1): without a minimum of blocks ptxas capped registers and spilled.
#ifndef TT_EMBEDDING_FORWARD_TARGET_TILED
#define TT_EMBEDDING_FORWARD_TARGET_TILED 128
#endif

// a_1 values per column tile (the last tile may hold fewer)
__host__ __device__ inline int tt_embedding_forward_tile_a1(int q1, int R2) {
    return TT_EMBEDDING_FORWARD_G1_COLS / R2 < q1 ? TT_EMBEDDING_FORWARD_G1_COLS / R2 : q1;
}

// G_1's column tile of a_1 in [a1_base, a1_base + n_a1), every k_2, into dst (R_1 rows of n_a1 R_2 floats); thread
// tid of nthreads. Host-callable.
__host__ __device__ inline void tt_embedding_forward_copy_tile(float* dst, const float* g1, int R1, int q1, int R2, int a1_base,
                                                             int n_a1, int tid, int nthreads) {
    const int v4 = n_a1 * R2 / 4;                           // float4s per row of the tile
    for (int c = tid; c < R1 * v4; c += nthreads) {
        const int k = c / v4, j = c - k * v4;
        async_copy(dst + (int64_t)k * v4 * 4 + 4 * j, g1 + ((int64_t)k * q1 + a1_base) * R2 + 4 * j, true);
    }
}

__host__ __device__ constexpr int tt_embedding_forward_lpw_tiled(int q0) { return q0 <= 2 ? 4 : q0 == 4 ? 2 : 1; }  // LPW

// Step 1 on tensor cores where R_2 = TR is 128 (EL-Rec's ranks), 64 or 32, and R_1 <= TR (a tile is one a_1): the FP32
// lane step ran at 43% of the FMA peak at rank 128. The tile stays raw in shared memory; at rank 128 in two buffers, so
// that the next a_1's copy (cp.async) runs under this one's mma (below rank 128 a block holds every a_1's tile). A warp
// takes 16-row tiles (16 / q_0 lookups, as version 5): its lane's TR / 4 values of K per row in registers, split per
// k-step; B split as it is loaded (tf32_split_fast); 3xTF32 into one accumulator per n-tile (all TR k_2 of the a_1);
// step 2 (x G_2, FP32) on the accumulators, the quad's lanes adding their k_2 at the end. At rank 64 it runs ahead of
// version 5's compiled kernel, whose slice and its two split copies (197 KB) leave one block of 255 registers an SM:
// here every a_1's 22.5 KB tile is held (q_1 <= 4), and blocks of 128 threads fit two an SM (1.5x; capped at 128
// registers for two blocks of 256, it spilled). At rank 32 the compiled kernel stays faster at uniform indices (7-16%);
// the tiles, bound to two blocks of 256 (128 registers), take the shapes it lacks (q 2,4,4, q 8,4,8, with q_2 = 8 too:
// 16-29% faster than version 3) and --stash (the times: the notes).
// TR = 128 is compiled twice: up to 8 warps at 255 registers, and 12 warps (blocks of 384) at ptxas's cap of 168,
// which costs 1-13% at uniform but gives pairs of a_1 (below) the warps they need where most items are small (Zipf).
__host__ __device__ inline bool tt_embedding_forward_tiled_tc(int R1, int R2) { return (R2 == 128 || R2 == 64 || R2 == 32) && R1 <= R2; }
// The tile: TR rows k (zeros past R_1) of TR floats k_2, TR + 24 apart, row k shifted by 8 (k / KL), KL = TR / 4. K
// is permuted so that lane tig holds k = KL tig .. KL tig + KL - 1 (its A values: float4 loads along a row, not
// scalars), and its B fragment reads rows KL tig + 2 s (+1), column 8 j + group: the rows of the quad's lanes are KL
// rows apart, KL (TR + 24) floats, a multiple of 32 banks at each TR, so the shift alone puts them 8 banks apart.
__host__ __device__ constexpr int tt_embedding_forward_tiled_tc_pitch(int TR) { return TR + 24; }
__host__ __device__ constexpr int tt_embedding_forward_tiled_tc_floats(int TR) { return TR * (TR + 24); }
// tiles a block holds: below rank 128 every a_1's where they take at most 96 KB (rank 64: q_1 <= 4, 22.5 KB each), so
// that a warp's work is any (m-tile, a_1) and an item's units spread evenly over the warps; else two, double-buffered
__host__ __device__ constexpr int tt_embedding_forward_tiled_tc_held(int TR, int q1) {
    return TR < 128 && q1 * tt_embedding_forward_tiled_tc_floats(TR) <= 24576 ? q1 : 2;
}
template <int TR>
__host__ __device__ constexpr int tt_embedding_forward_tiled_tc_at(int k, int n) { return (TR + 24) * k + 8 * (k / (TR / 4)) + n; }

// a_1's tile of G_1's slice g1 into dst (rows below R_1; TR / 4 float4s a row), thread tid of nthreads
template <int TR>
__device__ __forceinline__ void tt_embedding_forward_tiled_tc_copy(float* dst, const float* g1, int R1, int q1, int a1, int tid, int nthreads) {
    constexpr int V = TR / 4;
    for (int c = tid; c < V * R1; c += nthreads) {
        const int k = c / V, n = 4 * (c % V);
        async_copy(dst + tt_embedding_forward_tiled_tc_at<TR>(k, n), g1 + ((int64_t)k * q1 + a1) * TR + n, true);
    }
}

// A warp's 16-row tile: its lookups (two rows a lane), their G_0 rows in registers (k = KL tig + v, zeros past R_1) and
// G_2 slices. Independent of a_1: where a warp keeps one m-tile for all a_1 it loads them once, under the first copy.
template <int KL_>
struct TtEmbeddingForwardTcRows {
    static constexpr int KL = KL_;
    int entry[2];
    bool valid[2];
    const float* g2s[2];
    float x[2][KL];
};
template <int Q0, int KL>
__device__ __forceinline__ void tt_embedding_forward_tiled_tc_rows(TtEmbeddingForwardTcRows<KL>& r, const TtEmbeddingForwardList& list, int mt, int nu,
                                                           const TtEmbeddingForwardCores& cores, const TtEmbeddingForwardShape& s,
                                                           const TtEmbeddingForwardFastDigits& fd, bool fast, int tbl, int lane) {
    const int group = lane >> 2, tig = lane & 3, a0 = group % Q0, R1 = s.R[1];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        r.entry[h] = 16 / Q0 * mt + tt_embedding_forward_tc_slot(Q0, group, h);
        r.valid[h] = r.entry[h] < nu;
        const int64_t idx = r.valid[h] ? list.idx[list.uniq[r.entry[h]]] : 0;
        const float* g0 = tt_embedding_forward_fast_slice(cores, s, fd, fast, tbl, idx, 0) + a0 * R1 + KL * tig;
        r.g2s[h] = tt_embedding_forward_fast_slice(cores, s, fd, fast, tbl, idx, 2);
        const int n = r.valid[h] ? min(KL, R1 - KL * tig) : 0;   // this lane's values below R_1
        if (R1 % 4 == 0) {                                  // 16-byte aligned rows, n a multiple of 4
#pragma unroll
            for (int v = 0; v < KL / 4; v++) {
                const float4 f = 4 * v < n ? __ldg(reinterpret_cast<const float4*>(g0) + v) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                r.x[h][4 * v] = f.x; r.x[h][4 * v + 1] = f.y; r.x[h][4 * v + 2] = f.z; r.x[h][4 * v + 3] = f.w;
            }
        } else {
#pragma unroll
            for (int v = 0; v < KL; v++) r.x[h][v] = v < n ? __ldg(g0 + v) : 0.0f;
        }
    }
}

// the tile's rows times a_1's tile (step 1, 3xTF32; P_1 into the stash where it is kept), then x G_2 (step 2) into rowbuf
template <int Q0, int TR, int Q2>
__device__ __forceinline__ void tt_embedding_forward_tiled_tc_tile(float* __restrict__ rowbuf, float* __restrict__ stash, const TtEmbeddingForwardList& list,
                                                           const TtEmbeddingForwardTcRows<TR / 4>& r, const float* __restrict__ tile, int a1,
                                                           const TtEmbeddingForwardShape& s, int lane) {
    constexpr int KS = TR / 8, NT = TR / 8, KL = TR / 4;   // R_1 <= TR: TR / 8 k-steps of 8 (zeros past R_1)
    const int group = lane >> 2, tig = lane & 3, a0 = group % Q0;
    float acc[NT][4] = {};
#pragma unroll
    for (int st = 0; st < KS; st++) {
        uint32_t ahi[4], alo[4];                            // A: rows g, g+8 at k = 32 tig + 2 st (r < 2), + 1 (r >= 2)
        tt_embedding_forward_split_a<KL>(ahi, alo, r.x, st);
#pragma unroll
        for (int j = 0; j < NT; j++) {
            const float* b = tile + tt_embedding_forward_tiled_tc_at<TR>(KL * tig + 2 * st, 8 * j + group);   // B: (k, n) = (tig (+4), group)
            uint32_t bhi[2], blo[2];
            tf32_split_fast(b[0], bhi[0], blo[0]);
            tf32_split_fast(b[tt_embedding_forward_tiled_tc_pitch(TR)], bhi[1], blo[1]);
            mma_tf32_m16n8k8(acc[j], alo, bhi[0], bhi[1]);
            mma_tf32_m16n8k8(acc[j], ahi, blo[0], blo[1]);
            mma_tf32_m16n8k8(acc[j], ahi, bhi[0], bhi[1]);
        }
    }
    if (stash) {                                            // training mode: P_1's row (a_0, a_1) of each lookup
#pragma unroll
        for (int h = 0; h < 2; h++)
            if (r.valid[h]) {
                float* dst = stash + (int64_t)list.pos[list.uniq[r.entry[h]]] * s.Q[1] * TR + (a0 * s.q[1] + a1) * TR + 2 * tig;
#pragma unroll
                for (int j = 0; j < NT; j++) *reinterpret_cast<float2*>(dst + 8 * j) = make_float2(acc[j][2 * h], acc[j][2 * h + 1]);
            }
    }
    constexpr int V = Q2 / 4;                               // float4s of a G_2 row
    float part[2][V][4] = {};                               // (row, a_2) over this lane's k_2 = 8 j + 2 tig + e
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int e = 0; e < 2; e++)
#pragma unroll
                for (int v = 0; v < V; v++) {
                    const float4 w = r.valid[h] ? __ldg(reinterpret_cast<const float4*>(r.g2s[h]) + (8 * j + 2 * tig + e) * V + v)
                                                : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                    tt_embedding_forward_fma4(part[h][v], acc[j][2 * h + e], w);
                }
    tt_embedding_forward_quad_sum<8 * V>(&part[0][0][0]);
#pragma unroll
    for (int h = 0; h < 2; h++)
#pragma unroll
        for (int v = 0; v < V; v++)                         // the quad's 2 V float4s, shared out over its lanes
            if (r.valid[h] && tig == (h * V + v) % 4)
                *reinterpret_cast<float4*>(rowbuf + (int64_t)list.pos[list.uniq[r.entry[h]]] * s.D + (a0 * s.q[1] + a1) * Q2 + 4 * v) =
                    make_float4(part[h][v][0], part[h][v][1], part[h][v][2], part[h][v][3]);
}

// shared memory: one column tile (TC: two, rows padded), two stages per warp (FP32: LPW lookups' G_0 transposed),
// version 6's list (and kept rows)
inline size_t tt_embedding_forward_smem_bytes_tiled(const TtEmbeddingForwardShape& s, int warps) {
    if (s.T != 3 || s.R[2] < 1) return 0;
    const size_t list = tt_embedding_forward_list_bytes(tt_embedding_forward_digit_list_cap(32 * warps), true);
    if (tt_embedding_forward_tiled_tc(s.R[1], s.R[2]))
        return sizeof(float) * tt_embedding_forward_tiled_tc_held(s.R[2], s.q[1]) * tt_embedding_forward_tiled_tc_floats(s.R[2]) + list;
    const size_t tile = (size_t)s.R[1] * tt_embedding_forward_tile_a1(s.q[1], s.R[2]) * s.R[2];
    const size_t stage = (size_t)tt_embedding_forward_r1_pad(s.R[1]) * s.q[0] * tt_embedding_forward_lpw_tiled(s.q[0]);
    return sizeof(float) * (tile + (size_t)warps * 2 * stage) + list;
}

template <int Q0, bool TC, bool WIDE = false, int TR = 128, int Q2 = 4>
__global__ void __launch_bounds__(WIDE ? 384 : 256, TR == 32 ? 2 : 1) tt_embedding_forward_kernel_tiled(float* __restrict__ rowbuf, const int64_t* __restrict__ indices,
                                                                   const uint16_t* __restrict__ digits1, const int64_t* __restrict__ offsets,
                                                                   const __grid_constant__ TtEmbeddingForwardCores cores,
                                                                   const __grid_constant__ TtEmbeddingForwardShape s, int segments,
                                                                   const __grid_constant__ TtEmbeddingForwardFastDigits fd, bool fast,
                                                                   int* __restrict__ work) {
    extern __shared__ float4 tt_embedding_forward_smem_tiled[];
    const int W = blockDim.x / 32, R1 = s.R[1], R2 = s.R[2], q1 = s.q[1], R1p = tt_embedding_forward_r1_pad(R1);
    const int tile_a1 = tt_embedding_forward_tile_a1(q1, R2), cap = tt_embedding_forward_digit_list_cap(blockDim.x);
    constexpr int LPW = tt_embedding_forward_lpw_tiled(Q0);
    const int stage_floats = TC ? 0 : R1p * Q0 * LPW;
    constexpr int tc_floats = tt_embedding_forward_tiled_tc_floats(TR);
    const int held = tt_embedding_forward_tiled_tc_held(TR, q1);
    float* tile = reinterpret_cast<float*>(tt_embedding_forward_smem_tiled);    // [R1][tile_a1 R2] (TC: `held` tiles of tc_floats)
    float* stages = tile + (TC ? held * tc_floats : R1 * tile_a1 * R2);    // [W][2][stage_floats]
    const TtEmbeddingForwardList list = tt_embedding_forward_list(stages + W * 2 * stage_floats, cap);
    for (int st = 0; st < 2 * W; st++)                      // transposed G_0's padding rows stay zero
        for (int e = R1 * Q0 * LPW + threadIdx.x; e < stage_floats; e += blockDim.x) stages[st * stage_floats + e] = 0.0f;
    for (int e = tt_embedding_forward_tiled_tc_pitch(TR) * R1 + threadIdx.x; TC && e < tc_floats; e += blockDim.x)   // and the TC tiles'
        for (int h = 0; h < held; h++) tile[h * tc_floats + e] = 0.0f;
    int item_i1 = 0;
    auto on_item = [&](int, int i1) { item_i1 = i1; };
    auto on_work = [](int, int) {};                         // G_1 is copied per tile, in compute
    auto on_ready = [](bool) {};
    auto compute = [&](int tbl, int nu) {
        if (nu == 0) return;                                // a round of kept rows only (block-uniform)
        const float* g1 = cores.c[1] + ((int64_t)tbl * s.p[1] + item_i1) * s.slice[1];
        if constexpr (TC) {
            const int n_mt = (nu + 16 / Q0 - 1) / (16 / Q0), u = threadIdx.x / 32, lane = threadIdx.x % 32;
            using Rows = TtEmbeddingForwardTcRows<TR / 4>;
            auto mma = [&](const Rows& r, const float* t, int a1) {
                tt_embedding_forward_tiled_tc_tile<Q0, TR, Q2>(rowbuf, cores.stash, list, r, t, a1, s, lane);
            };
            auto load = [&](Rows& r, int mt) {
                tt_embedding_forward_tiled_tc_rows<Q0>(r, list, mt, nu, cores, s, fd, fast, tbl, lane);
            };
            // every a_1's tile at once (ranks 32 and 64): warp u takes a contiguous run of the item's n_mt q_1 units
            // (m-tile, a_1), loading an m-tile's rows once per run of its a_1 (ranks 64 at B 512, L 20: 12 m-tiles, 48
            // units, 6 for each of 8 warps, where one m-tile a warp per a_1 left half the warps two and half one)
            if (TR < 128 && held == q1) {
                for (int a1 = 0; a1 < q1; a1++) tt_embedding_forward_tiled_tc_copy<TR>(tile + a1 * tc_floats, g1, R1, q1, a1, threadIdx.x, blockDim.x);
                async_commit();
                const int units = n_mt * q1, per = (units + W - 1) / W, k0 = u * per, k1 = min(units, k0 + per);
                Rows r;
                if (k0 < k1) load(r, k0 / q1);                 // under the copy
                async_wait_group<0>();
                __syncthreads();
                for (int k = k0; k < k1; k++) {                 // warp-uniform
                    const int mt = k / q1, a1 = k - mt * q1;
                    if (k > k0 && a1 == 0) load(r, mt);
                    mma(r, tile + a1 * tc_floats, a1);
                }
                __syncthreads();                                // every warp is done with the tiles the next item refills
                return;
            }
            // wide build, few m-tiles (Zipf: most items hold a row or two): two a_1 at once, a tile in each buffer, so
            // that idle warps take the second; the pair's copy is not hidden, which is why the narrow build keeps one
            if (WIDE && 2 * n_mt <= W && q1 > 1) {
                for (int a1 = 0; a1 < q1; a1 += 2) {
                    const int na = min(2, q1 - a1);
                    for (int h = 0; h < na; h++)
                        tt_embedding_forward_tiled_tc_copy<TR>(tile + h * tc_floats, g1, R1, q1, a1 + h, threadIdx.x, blockDim.x);
                    async_commit();
                    async_wait_group<0>();
                    __syncthreads();
                    if (u < na * n_mt) {                    // warp-uniform
                        Rows r;
                        load(r, u % n_mt);
                        mma(r, tile + u / n_mt * tc_floats, a1 + u / n_mt);
                    }
                    __syncthreads();                        // both buffers read before the next pair's copy
                }
                return;
            }
            auto copy = [&](float* dst, int a1) {
                tt_embedding_forward_tiled_tc_copy<TR>(dst, g1, R1, q1, a1, threadIdx.x, blockDim.x);
                async_commit();
            };
            auto each_a1 = [&](auto&& first, auto&& body) { // else a_1's tile double-buffered: the next one copies under the mma
                copy(tile, 0);
                first();
                for (int a1 = 0; a1 < q1; a1++) {
                    if (a1 + 1 < q1) {
                        copy(tile + ((a1 + 1) & 1) * tc_floats, a1 + 1);
                        async_wait_group<1>();
                    } else {
                        async_wait_group<0>();
                    }
                    __syncthreads();
                    body(tile + (a1 & 1) * tc_floats, a1);
                    __syncthreads();                        // every warp is done with the buffer the next copy refills
                }
            };
            if (!WIDE && n_mt <= W) {                       // a warp's one m-tile: its rows loaded once, under the first copy
                Rows r;
                each_a1([&] { if (u < n_mt) load(r, u); }, [&](const float* t, int a1) { if (u < n_mt) mma(r, t, a1); });
            } else {
                each_a1([] {}, [&](const float* t, int a1) {
                    for (int mt = u; mt < n_mt; mt += W) {   // warp-uniform
                        Rows r;
                        load(r, mt);
                        mma(r, t, a1);
                    }
                });
            }
        } else {
            for (int a1_base = 0; a1_base < q1; a1_base += tile_a1) {
                const int n_a1 = min(tile_a1, q1 - a1_base);
                __syncthreads();                            // the previous tile is read by every warp
                tt_embedding_forward_copy_tile(tile, g1, R1, q1, R2, a1_base, n_a1, threadIdx.x, blockDim.x);
                async_commit();
                async_wait_group<0>();
                __syncthreads();
                tt_embedding_forward_g1_rows_warp<Q0, LPW, false>(rowbuf, list, nu, stages, stage_floats, tile, n_a1 * R2, a1_base, cores, s, fd,
                                                                  fast, tbl);
            }
        }
    };
    tt_embedding_forward_grouped_items<true>(rowbuf, cores, indices, digits1, offsets, s, segments, fd, fast, work, list, cap, on_item,
                                             on_work, on_ready, compute);
}

// the column-tile kernel for the shape's q_0 and a block of `warps` (TC at rank 128: 12 takes the wide build), null where
// none is
template <int Q0>
inline TtEmbeddingForwardGroupedKernel tt_embedding_forward_kernel_tiled_q0(bool tc, int R2, int q2, int warps) {
    return !tc ? tt_embedding_forward_kernel_tiled<Q0, false> : R2 == 64 ? tt_embedding_forward_kernel_tiled<Q0, true, false, 64>
         : R2 == 32 ? (q2 == 8 ? tt_embedding_forward_kernel_tiled<Q0, true, false, 32, 8> : tt_embedding_forward_kernel_tiled<Q0, true, false, 32>)
         : warps > 8 ? tt_embedding_forward_kernel_tiled<Q0, true, true> : tt_embedding_forward_kernel_tiled<Q0, true>;
}
inline TtEmbeddingForwardGroupedKernel tt_embedding_forward_kernel_tiled_for(const TtEmbeddingForwardShape& s, int warps = 8) {
    const bool tc = tt_embedding_forward_tiled_tc(s.R[1], s.R[2]);
    switch (s.T == 3 ? s.q[0] : 0) {
        case 1: return tt_embedding_forward_kernel_tiled_q0<1>(tc, s.R[2], s.q[2], warps);
        case 2: return tt_embedding_forward_kernel_tiled_q0<2>(tc, s.R[2], s.q[2], warps);
        case 4: return tt_embedding_forward_kernel_tiled_q0<4>(tc, s.R[2], s.q[2], warps);
        case 8: return tt_embedding_forward_kernel_tiled_q0<8>(tc, s.R[2], s.q[2], warps);
        default: return nullptr;
    }
}

// the shapes the column-tile kernel is written and compiled for; "" when it runs (shared memory is checked with the others')
inline std::string tt_embedding_forward_reason_tiled(const TtEmbeddingForwardShape& s) {
    if (s.T != 3) return tt_embedding_forward_fmt("the column-tile kernel is written for three cores (T = %d)", s.T);
    if (!tt_embedding_forward_kernel_tiled_for(s) || (s.q[2] != 4 && !(s.q[2] == 8 && s.R[2] == 32 && tt_embedding_forward_tiled_tc(s.R[1], s.R[2]))))
        return tt_embedding_forward_fmt("the column-tile kernel is compiled for q_0 in {1, 2, 4, 8} and q_2 = 4 (8 at R_1 <= R_2 = 32) (q = %d,%d,%d)",
                                        s.q[0], s.q[1], s.q[2]);
    const int R2 = s.R[2];
    if (R2 < 4 || R2 > TT_EMBEDDING_FORWARD_G1_COLS || (R2 & (R2 - 1)) != 0)
        return tt_embedding_forward_fmt("the column-tile kernel needs R_2 a power of two in 4..%d (R_2 = %d)", TT_EMBEDDING_FORWARD_G1_COLS, R2);
    if (s.p[1] > 65536) return tt_embedding_forward_fmt("the column-tile kernel stores i_1 as uint16: p_1 (%d) must be <= 65536", s.p[1]);
    return "";
}

// ---- version 6 where the p_t are small: every prefix and suffix product once, then one product per lookup

// Cut the chain after core k: a row is P (Q_k x R_{k+1}, the product of cores 0..k) times S (R_{k+1} x D_s, cores
// k+1..T-1, D_s = D / Q_k), element d = x D_s + y = sum_r P[x][r] S[r][y]. P depends on (i_0..i_k) only and S on
// (i_{k+1}..i_{T-1}) only. Where those index ranges are small beside the lookups (T 6 with p 10: 1,000 and 1,100
// values for 10,240 lookups), every P and S is made once, into two tables, and a lookup costs R_{k+1} D FMAs instead
// of its chain (T 6, ranks 32: 2,048 against 63,488).
//
// Both tables grow from the left by one step. After core t a side's table holds, for every tuple e of its digits so
// far, a (rows x R_{t+1}) matrix; core t+1 multiplies ALL of them by the same slice G_{t+1}[i]:
//     [M(e = 0); M(1); ...] (n rows x R_{t+1})  .  G_{t+1}[i] (R_{t+1} x q_{t+1} R_{t+2})
// a GEMM per digit i whose row-major output, read in place, is the table after core t+1: entry (i, e) at index
// i n + e (the newer digit more significant), q_{t+1} times as many rows of R_{t+2}. All p_{t+1} digits of all
// tables are one batched cuBLAS call. P starts as G_0's slices (q_0 x R_1), S as G_{k+1}'s ((R_{k+1} q_{k+1}) x
// R_{k+2}) and ends as (R_{k+1} D_s) x 1, which is S as an R_{k+1} x D_s matrix. A side with no step (P at k = 0, S
// at k = T-2) is its core itself. A warp per lookup then stages its P and S in shared memory and writes its row; the
// pooling kernel of versions 4-6 sums each bag's rows in lookup order (deterministic at any block size).
struct TtEmbeddingForwardSplitGemm {  // C_b = M_tbl (m x kk) . G_t[i] (kk x n) for b = tbl p_t + i, one cuBLAS call
    int t = 0, m = 0, kk = 0, n = 0;
    int src = 0, dst = 0;             // buffers: < 0: core -1 - src (a side's first); else ws.split_buf[src]
    int64_t at = 0;                   // its first pointer in the pointer arrays
};
struct TtEmbeddingForwardSplit {
    int k = -1;                       // the cut (-1: no cut pays; version 6 runs another kernel)
    int R = 0, Qk = 0, Ds = 0;        // R_{k+1}, Q_k, D / Q_k
    int64_t n_pre = 0, n_suf = 0;     // entries per table: prod_{t<=k} p_t and prod_{t>k} p_t
    int pre_len = 0, suf_len = 0;     // floats per entry: Q_k R and R D_s
    int n_gemms = 0;                  // P's steps then S's (T - 2 in all)
    TtEmbeddingForwardSplitGemm gemm[TT_EMBEDDING_FORWARD_MAX_CORES];
    int64_t floats[4] = {};           // ws.split_buf: two step buffers (a side's tables before its last), P's, S's table
    int64_t pointers = 0;             // entries of each pointer array: tables p_t summed over the steps
    int ldp = 0, ps_len = 0, ss_len = 0;   // P's row stride in a row warp's shared memory (R made odd: no bank conflicts);
                                      // its P's and S's floats there (rounded up to 4)
    double cost = 0.0;                // the model below, in FMAs
};
enum { TT_EMBEDDING_FORWARD_SPLIT_TMP = 0, TT_EMBEDDING_FORWARD_SPLIT_PRE = 2, TT_EMBEDDING_FORWARD_SPLIT_SUF = 3 };

// the plan of cut k: the steps of both sides, the buffers, and the cost (GEMM FMAs, each lookup's product and staging)
inline TtEmbeddingForwardSplit tt_embedding_forward_split_at(const TtEmbeddingForwardShape& s, int k) {
    TtEmbeddingForwardSplit c;
    c.k = k; c.R = s.R[k + 1]; c.Qk = s.Q[k]; c.Ds = s.D / s.Q[k];
    c.n_suf = s.stride[k]; c.n_pre = s.prod_p / s.stride[k];
    c.pre_len = c.Qk * c.R;
    c.suf_len = c.R * c.Ds;
    c.ldp = c.R | 1;
    c.ps_len = (int)tt_embedding_forward_round4((int64_t)c.Qk * c.ldp);
    c.ss_len = (int)tt_embedding_forward_round4(c.suf_len);
    double fma = 0.0;
    auto side = [&](int first, int last, int table) {
        int64_t n = s.p[first], rows = (int64_t)s.R[first] * s.q[first];   // entries and rows of the table after `first`
        for (int t = first + 1, j = 0; t <= last; t++, j++) {
            TtEmbeddingForwardSplitGemm& g = c.gemm[c.n_gemms++];
            const double m = (double)n * rows;
            g.t = t; g.m = (int)std::min<double>(m, INT32_MAX); g.kk = s.R[t]; g.n = s.q[t] * s.R[t + 1];
            g.src = j == 0 ? -1 - first : TT_EMBEDDING_FORWARD_SPLIT_TMP + ((j - 1) & 1);
            g.dst = t == last ? table : TT_EMBEDDING_FORWARD_SPLIT_TMP + (j & 1);
            g.at = c.pointers;
            c.pointers += (int64_t)s.tables * s.p[t];
            fma += (double)s.tables * s.p[t] * m * g.kk * g.n;
            n *= s.p[t];
            rows *= s.q[t];
            c.floats[g.dst] = std::max<int64_t>(c.floats[g.dst], (int64_t)std::min<double>((double)s.tables * n * rows * s.R[t + 1], 1e15));
        }
    };
    side(0, k, TT_EMBEDDING_FORWARD_SPLIT_PRE);
    side(k + 1, s.T - 1, TT_EMBEDDING_FORWARD_SPLIT_SUF);
    c.cost = fma + (double)s.tables * ((double)c.n_pre * c.pre_len + (double)c.n_suf * c.suf_len) +
             (double)s.nnz * ((double)c.R * s.D + 2.0 * (c.pre_len + c.suf_len));
    return c;
}

inline size_t tt_embedding_forward_smem_bytes_split_rows(const TtEmbeddingForwardSplit& c, int warps) {
    return (size_t)warps * ((size_t)c.ps_len + c.ss_len) * 4;
}

// The cut version 6 takes: the cheapest k whose tables and step buffers each hold at most 2^26 floats and whose row
// warp fits shared memory, where it costs at most a quarter of every lookup's chain (version 3's kernel or the
// compiled one run those FMAs at 12-20% of the FMA peak; the rows are small products with less to share). k = -1:
// no cut pays.
inline TtEmbeddingForwardSplit tt_embedding_forward_plan_split(const TtEmbeddingForwardShape& s, size_t max_smem) {
    TtEmbeddingForwardSplit best;
    const double chains = (double)s.nnz * tt_embedding_forward_flops_per_lookup(s) / 2.0;
    for (int k = 0; k + 1 < s.T && s.nnz > 0; k++) {
        const TtEmbeddingForwardSplit c = tt_embedding_forward_split_at(s, k);
        bool fits = tt_embedding_forward_smem_bytes_split_rows(c, 1) <= max_smem;
        for (int64_t f : c.floats) fits = fits && f <= ((int64_t)1 << 26);
        if (!fits || 4.0 * c.cost > chains) continue;
        if (best.k < 0 || c.cost < best.cost) best = c;
    }
    return best;
}

// entry b = tbl p_t + i of GEMM j: its three pointers (G_t[i], M_tbl, C_b), written at index g.at + b of each array
// (bufs: ws.split_buf). Host-callable: the CPU test runs these through a column-major GEMM with the launch's arguments.
__host__ __device__ inline void tt_embedding_forward_split_pointers(const void** G, const void** M, void** C, const TtEmbeddingForwardSplit& c,
                                                                    const TtEmbeddingForwardShape& s, const TtEmbeddingForwardCores& cores,
                                                                    float* const* bufs, int j, int64_t b) {
    const TtEmbeddingForwardSplitGemm& g = c.gemm[j];
    const int64_t tbl = b / s.p[g.t];
    const float* src = g.src < 0 ? cores.c[-1 - g.src] : bufs[g.src];
    G[g.at + b] = cores.c[g.t] + b * s.slice[g.t];
    M[g.at + b] = src + tbl * g.m * g.kk;
    C[g.at + b] = bufs[g.dst] + b * g.m * g.n;
}
__global__ void tt_embedding_forward_kernel_split_pointers(const void** G, const void** M, void** C, const __grid_constant__ TtEmbeddingForwardSplit c,
                                                           const __grid_constant__ TtEmbeddingForwardShape s,
                                                           const __grid_constant__ TtEmbeddingForwardCores cores, float* b0, float* b1, float* b2,
                                                           float* b3) {
    float* const bufs[4] = {b0, b1, b2, b3};
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < c.pointers; e += (int64_t)gridDim.x * blockDim.x) {
        int j = 0;
        while (j + 1 < c.n_gemms && c.gemm[j + 1].at <= e) j++;
        tt_embedding_forward_split_pointers(G, M, C, c, s, cores, bufs, j, e - c.gemm[j].at);
    }
}

// A step whose output is narrower than 8 columns (the last of S: n = q_{T-1}) goes around cuBLAS, which tiles it 32 or
// 128 wide in its column-major view, nearly all padding (T 4's suffix step took 31 of the forward's 71 us under ncu).
// Every digit i of core t multiplies the same stacked table M_tbl, so a block stages `rows` rows of it once, with dpb
// digits' slices G_t[i] (kk x n), in shared memory, and a thread makes its row of C_b for those dpb digits: each M value
// is loaded once for dpb n FMAs. The plan trades dpb, then rows, for blocks. It pays on big steps only (T 4's 211,200
// row-digit pairs and T 6's 140,800 18-26% faster; 51,200 a tie; under 20,000 slower), so smaller ones stay on cuBLAS
// (the notes). (A thread per row
// and digit, reading its row of M from global memory for every digit, lost to cuBLAS: tag tt-forward-narrow-steps-lost.)
constexpr int TT_EMBEDDING_FORWARD_NARROW = 8, TT_EMBEDDING_FORWARD_NARROW_DPB = 8;
constexpr double TT_EMBEDDING_FORWARD_NARROW_MIN_PAIRS = 65536;   // tables x rows of M x digits of core t
struct TtEmbeddingForwardNarrow { int rows = 0, dpb = 0; };   // rows = 0: cuBLAS runs the step
__host__ __device__ inline int tt_embedding_forward_narrow_pitch(int kk) { return kk | 1; }   // odd: rows on distinct banks
__host__ __device__ inline int tt_embedding_forward_narrow_g_at(int rows, int kk) {           // Gs after the M tile, 16-byte aligned
    return (rows * tt_embedding_forward_narrow_pitch(kk) + 3) / 4 * 4;
}
inline size_t tt_embedding_forward_smem_bytes_narrow(const TtEmbeddingForwardNarrow& w, int kk, int n) {
    return sizeof(float) * ((size_t)tt_embedding_forward_narrow_g_at(w.rows, kk) + (size_t)w.dpb * kk * n);
}
// where the narrow kernel runs a step: narrower than 8 columns, and big enough
inline bool tt_embedding_forward_narrow_pays(const TtEmbeddingForwardSplitGemm& g, int p, int tables) {
    return g.n < TT_EMBEDDING_FORWARD_NARROW && (double)tables * g.m * p >= TT_EMBEDDING_FORWARD_NARROW_MIN_PAIRS;
}
// its block: the most rows and digits that still give 4 blocks per SM (rows = 0: no block fits shared memory)
inline TtEmbeddingForwardNarrow tt_embedding_forward_narrow_plan(const TtEmbeddingForwardSplitGemm& g, int p, int tables, size_t max_smem,
                                                                int num_sms) {
    TtEmbeddingForwardNarrow best;
    if (g.n >= TT_EMBEDDING_FORWARD_NARROW) return best;
    for (const TtEmbeddingForwardNarrow w : {TtEmbeddingForwardNarrow{128, 8}, {128, 4}, {128, 2}, {128, 1}, {64, 1}, {32, 1}}) {
        if (tt_embedding_forward_smem_bytes_narrow(w, g.kk, g.n) > max_smem) continue;
        best = w;
        if ((double)ceil_div(g.m, w.rows) * tables * ceil_div(p, w.dpb) >= 4.0 * num_sms) break;
    }
    return best;
}
// one thread's row r (row `row` of the staged tile Ms) of C_b for the nd staged digits (Gs: nd slices of kk x N, C[d]:
// digit d's output). Host-callable: the CPU test runs it for every row.
template <int N>
__host__ __device__ inline void tt_embedding_forward_narrow_row(float* const* C, const float* Ms, const float* Gs, int kk, int nd, int64_t r,
                                                                int row) {
    float acc[TT_EMBEDDING_FORWARD_NARROW_DPB][N] = {};
    const float* a = Ms + row * tt_embedding_forward_narrow_pitch(kk);
    for (int k = 0; k < kk; k++) {
        const float v = a[k];
TT_EMBEDDING_FORWARD_UNROLL
        for (int d = 0; d < TT_EMBEDDING_FORWARD_NARROW_DPB; d++) {
            if (d >= nd) break;
            const float* gk = Gs + (d * kk + k) * N;        // one float4 (float2) load where N = 4 (2): Gs is 16-byte aligned
            float g[N];
            if constexpr (N == 4) {
                const float4 t = *reinterpret_cast<const float4*>(gk);
                g[0] = t.x; g[1] = t.y; g[2] = t.z; g[3] = t.w;
            } else if constexpr (N == 2) {
                const float2 t = *reinterpret_cast<const float2*>(gk);
                g[0] = t.x; g[1] = t.y;
            } else {
TT_EMBEDDING_FORWARD_UNROLL
                for (int x = 0; x < N; x++) g[x] = gk[x];
            }
TT_EMBEDDING_FORWARD_UNROLL
            for (int x = 0; x < N; x++) acc[d][x] = fmaf(v, g[x], acc[d][x]);
        }
    }
TT_EMBEDDING_FORWARD_UNROLL
    for (int d = 0; d < TT_EMBEDDING_FORWARD_NARROW_DPB; d++)
TT_EMBEDDING_FORWARD_UNROLL
        for (int x = 0; x < N; x++)
            if (d < nd) C[d][r * N + x] = acc[d][x];
}
// the staging of block (row tile r0, digits i0 .. i0 + nd - 1 of table tbl) by thread tid of nthreads. Host-callable.
template <int N>
__host__ __device__ inline void tt_embedding_forward_narrow_stage(float* Ms, float* Gs, const void* const* G, const void* const* M, int64_t b0,
                                                                  int64_t r0, int nrows, int kk, int nd, int tid, int nthreads) {
    const float* Mt = static_cast<const float*>(M[b0]) + r0 * kk;
    const int pitch = tt_embedding_forward_narrow_pitch(kk);
    for (int e = tid; e < nrows * kk; e += nthreads) Ms[(e / kk) * pitch + e % kk] = Mt[e];
    for (int e = tid; e < nd * kk * N; e += nthreads) {
        const int d = e / (kk * N);
        Gs[e] = static_cast<const float*>(G[b0 + d])[e - d * kk * N];
    }
}
template <int N>
__global__ void tt_embedding_forward_kernel_narrow(const void* const* G, const void* const* M, void* const* C, int m, int kk, int p, int tables,
                                                   int dpb) {
    extern __shared__ float4 tt_embedding_forward_smem_narrow[];
    float* Ms = reinterpret_cast<float*>(tt_embedding_forward_smem_narrow);
    float* Gs = Ms + tt_embedding_forward_narrow_g_at(blockDim.x, kk);
    const int groups = (p + dpb - 1) / dpb;
    const int64_t r0 = (int64_t)blockIdx.x * blockDim.x;
    const int nrows = (int)min((int64_t)blockDim.x, (int64_t)m - r0);
    for (int64_t y = blockIdx.y; y < (int64_t)tables * groups; y += gridDim.y) {
        const int tbl = (int)(y / groups), i0 = (int)(y % groups) * dpb, nd = min(dpb, p - i0);
        const int64_t b0 = (int64_t)tbl * p + i0;
        __syncthreads();                                    // the previous group's tiles are read
        tt_embedding_forward_narrow_stage<N>(Ms, Gs, G, M, b0, r0, nrows, kk, nd, threadIdx.x, blockDim.x);
        __syncthreads();
        if ((int)threadIdx.x < nrows) {
            float* Cd[TT_EMBEDDING_FORWARD_NARROW_DPB];
            for (int d = 0; d < TT_EMBEDDING_FORWARD_NARROW_DPB; d++) Cd[d] = d < nd ? static_cast<float*>(C[b0 + d]) : nullptr;
            tt_embedding_forward_narrow_row<N>(Cd, Ms, Gs, kk, nd, r0 + threadIdx.x, threadIdx.x);
        }
    }
}
typedef void (*TtEmbeddingForwardNarrowKernel)(const void* const*, const void* const*, void* const*, int, int, int, int, int);
inline TtEmbeddingForwardNarrowKernel tt_embedding_forward_narrow_kernel(int n) {
    static const TtEmbeddingForwardNarrowKernel k[TT_EMBEDDING_FORWARD_NARROW] = {
        nullptr, tt_embedding_forward_kernel_narrow<1>, tt_embedding_forward_kernel_narrow<2>, tt_embedding_forward_kernel_narrow<3>,
        tt_embedding_forward_kernel_narrow<4>, tt_embedding_forward_kernel_narrow<5>, tt_embedding_forward_kernel_narrow<6>,
        tt_embedding_forward_kernel_narrow<7>};
    return n >= 1 && n < TT_EMBEDDING_FORWARD_NARROW ? k[n] : nullptr;
}

// entry of a lookup's index in a side's table (cores first..last): its digits with the later ones more significant (the
// definition, which the CPU test checks the row kernel's lane terms against: tt_embedding_forward_split_term)
__host__ __device__ inline int64_t tt_embedding_forward_split_entry(const TtEmbeddingForwardShape& s, int64_t idx, int first, int last) {
    int64_t j = 0, w = 1;
    for (int t = first; t <= last; t++) {
        j += tt_embedding_forward_digit(idx, s.stride[t], s.p[t]) * w;
        w *= s.p[t];
    }
    return j;
}

// Lane t's share of a lookup's two entries (t < T): its digit times that digit's weight in its side's entry. Summed over
// the lanes it is tt_embedding_forward_split_entry of both sides: the T digits' divisions side by side in one warp step
// instead of one after another in every lane. Host-callable.
__host__ __device__ inline int64_t tt_embedding_forward_split_term(const TtEmbeddingForwardShape& s, int k, int64_t idx, int t) {
    int64_t w = 1;
    for (int j = t <= k ? 0 : k + 1; j < t; j++) w *= s.p[j];
    return tt_embedding_forward_digit(idx, s.stride[t], s.p[t]) * w;
}
static_assert(TT_EMBEDDING_FORWARD_MAX_CORES <= 8, "the row kernel sums a lookup's digit terms over 8 lanes");

// One lane's share of a lookup's row: stage (P into Ps with row stride ldp, S into Ss; float4 loads where `vec`: both
// entries' lengths multiples of 4 and 16-byte aligned), __syncwarp, then the product. Where D_s is a multiple of 4 a
// lane makes 1 x 4 of the row per pass (one P value and one float4 of S for 4 FMAs), else one element. The kernel is
// bound by issued integer work more than by its loads: P's padded copy took 8 integer divisions per float4, now 1 where
// R_{k+1} % 4 == 0, and with the digits below the kernel's PTX went from 105 divisions to 30 (T 4 and T 6 11% faster).
// Host-callable.
__host__ __device__ inline void tt_embedding_forward_split_stage(const TtEmbeddingForwardSplit& c, const float* __restrict__ P,
                                                                 const float* __restrict__ S, float* Ps, float* Ss, bool vec, int lane) {
    if (!vec) {
        for (int e = lane; e < c.pre_len; e += 32) Ps[(e / c.R) * c.ldp + e % c.R] = P[e];
        for (int e = lane; e < c.suf_len; e += 32) Ss[e] = S[e];
        return;
    }
    for (int f = 4 * lane; f < c.pre_len; f += 128) {
        const float4 v = *reinterpret_cast<const float4*>(P + f);
        const float w[4] = {v.x, v.y, v.z, v.w};
        if (c.R % 4 == 0) {                    // the float4 lies in one row of P: one division, not eight
            const int x = f / c.R;
            float* d = Ps + x * c.ldp + (f - x * c.R);
            for (int u = 0; u < 4; u++) d[u] = w[u];
        } else {
            for (int u = 0; u < 4; u++) Ps[((f + u) / c.R) * c.ldp + (f + u) % c.R] = w[u];
        }
    }
    for (int f = 4 * lane; f < c.suf_len; f += 128) *reinterpret_cast<float4*>(Ss + f) = *reinterpret_cast<const float4*>(S + f);
}
__host__ __device__ inline void tt_embedding_forward_split_row(const TtEmbeddingForwardSplit& c, const float* Ps, const float* Ss,
                                                               float* __restrict__ row, int lane) {
    if (c.Ds % 4 == 0) {
        const int w = c.Ds / 4;
        for (int u = lane; u < c.Qk * w; u += 32) {
            const int x = u / w, y = 4 * (u - x * w);
            const float* a = Ps + x * c.ldp;
            float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
TT_EMBEDDING_FORWARD_UNROLL4
            for (int r = 0; r < c.R; r++) {
                const float4 b = *reinterpret_cast<const float4*>(Ss + r * c.Ds + y);
                const float v = a[r];
                acc.x = fmaf(v, b.x, acc.x); acc.y = fmaf(v, b.y, acc.y); acc.z = fmaf(v, b.z, acc.z); acc.w = fmaf(v, b.w, acc.w);
            }
            *reinterpret_cast<float4*>(row + x * c.Ds + y) = acc;
        }
        return;
    }
    for (int e = lane; e < c.Qk * c.Ds; e += 32) {
        const int x = e / c.Ds, y = e - x * c.Ds;
        const float* a = Ps + x * c.ldp;
        float sum = 0.0f;
TT_EMBEDDING_FORWARD_UNROLL4
        for (int r = 0; r < c.R; r++) sum = fmaf(a[r], Ss[r * c.Ds + y], sum);
        row[e] = sum;
    }
}

// the row kernel: a warp per lookup, its row into rowbuf (summed per bag by the pooling kernel)
__global__ void tt_embedding_forward_kernel_split_rows(float* __restrict__ rowbuf, const int64_t* __restrict__ indices,
                                                       const int64_t* __restrict__ offsets, const float* __restrict__ pre,
                                                       const float* __restrict__ suf, bool vec, const __grid_constant__ TtEmbeddingForwardShape s,
                                                       const __grid_constant__ TtEmbeddingForwardSplit c) {
    extern __shared__ float4 tt_embedding_forward_smem_split[];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, W = blockDim.x / 32;
    float* Ps = reinterpret_cast<float*>(tt_embedding_forward_smem_split) + (int64_t)warp * (c.ps_len + c.ss_len);
    float* Ss = Ps + c.ps_len;
    pdl_wait_prior();                                       // the tables
    for (int64_t n = (int64_t)blockIdx.x * W + warp; n < s.nnz; n += (int64_t)gridDim.x * W) {   // warp-uniform
        const int64_t idx = indices[n];
        const int tbl = tt_embedding_forward_table_of(offsets, s.tables, s.B, n);
        int64_t jp = 0, js = 0;                             // lane t's digit term, then their sums over lanes 0-7
        if (lane < s.T) (lane <= c.k ? jp : js) = tt_embedding_forward_split_term(s, c.k, idx, lane);
        for (int o = 4; o; o >>= 1) {
            jp += __shfl_xor_sync(0xffffffffu, jp, o);
            js += __shfl_xor_sync(0xffffffffu, js, o);
        }
        jp = __shfl_sync(0xffffffffu, jp, 0);
        js = __shfl_sync(0xffffffffu, js, 0);
        tt_embedding_forward_split_stage(c, pre + ((int64_t)tbl * c.n_pre + jp) * c.pre_len, suf + ((int64_t)tbl * c.n_suf + js) * c.suf_len,
                                         Ps, Ss, vec, lane);
        __syncwarp();
        tt_embedding_forward_split_row(c, Ps, Ss, rowbuf + n * s.D, lane);
        __syncwarp();
    }
}

// ---- training mode (--stash): every lookup's prefixes P_t for the backward

// The column tiles write P_1 of the lookups they compute; a lookup whose index another lookup of its item computed (a
// twin) gets a copy here, a warp per lookup over the whole grid. Not in the item loop: at Zipf one item holds most
// lookups (the hot rows share i_1), and its block alone copying ~8 KB per twin made the forward 9x slower at L 1; nor
// through a list with an atomic per twin (those atomics, in series on the same block, still cost 1.8x). The digit kernel
// sets each lookup's source to itself, the item loop marks the twins (no list, no count), and a twin costs its
// 2 x 4 B x Q_1 R_2 of traffic. The rows themselves are not copied at all: the pooling reads them through source.
__global__ void tt_embedding_forward_kernel_stash_twins(float4* __restrict__ stash, const int64_t* __restrict__ source, int64_t nnz,
                                                        int64_t w4) {
    const int lane = threadIdx.x % 32;
    for (int64_t n = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32; n < nnz; n += (int64_t)gridDim.x * blockDim.x / 32) {
        const int64_t from = source[n];
        if (from == n) continue;                            // its own tile wrote it (warp-uniform)
        for (int64_t e = lane; e < w4; e += 32) stash[n * w4 + e] = stash[from * w4 + e];
    }
}

// ----------------------------------------------------------------------------------------------
// workspace (allocated once, outside timing), launchers, and what each version runs

struct TtEmbeddingForwardWorkspace {
    size_t max_smem = 48 * 1024;           // the device's opt-in shared memory per block
    int num_sms = 1;
    int max_threads[TT_EMBEDDING_FORWARD_SPLIT + 1] = {};     // per version (and the column tiles, the tables): the largest block
    int resident[TT_EMBEDDING_FORWARD_TILED + 1][33] = {};    // versions 4-6 (and tiles): blocks per SM, by warps per block
    // version 2
    int chunk = 1000;
    cublasHandle_t handle = nullptr;
    int* bag_of = nullptr;                 // [nnz]
    float* tr[TT_EMBEDDING_FORWARD_MAX_CORES] = {};   // step buffers [chunk][Q_{t+1} R_{t+2}], t = 0..T-2
    const void** a_ptr = nullptr;          // [(T-1) * chunk] each: cuBLAS's A, B and C pointer arrays
    const void** b_ptr = nullptr;
    void** c_ptr = nullptr;
    float* acc = nullptr;                  // fp32 pooled sums [tables*B*D] (bf16 build; fp32 writes out)
    // version 3 where one warp's buffers exceed a block's shared memory: the buffers in global memory
    float* chain_scratch = nullptr;
    int64_t chain_scratch_warps = 0;       // warps it holds (the grid is cut to fit)
    // versions 4-6
    float* rowbuf = nullptr;               // [nnz][D]: every lookup's row, summed per bag by the pooling kernel
    int* item_counters = nullptr;          // next item, finished blocks; zero between calls
    TtEmbeddingForwardFastDigits fast_digits = {};
    bool use_fast_digits = false;
    uint16_t* lookup_i1 = nullptr;         // version 6: i_1 of every lookup [nnz rounded up to 8, + 8]
    int64_t* row_source = nullptr;         // version 6: [nnz] where each lookup's row (and P_1) is (TtEmbeddingForwardCores)
    int* key_count = nullptr;              // version 6: each key's lookups [tables p_1], zero between calls, and their
    uint32_t* key_lookups = nullptr;       // positions [tables p_1][key_cap] (TtEmbeddingForwardCores); null where key_cap is 0
    int key_cap = 0;
    // --stash (version 6): the lookups' prefixes P_1..P_{T-2} (tt_embedding.h's layout)
    float* stash = nullptr;
    int64_t stash_off[TT_EMBEDDING_FORWARD_MAX_CORES] = {}, stash_floats = 0;
    // version 6 at small p_t: the cut, the prefix and suffix tables
    TtEmbeddingForwardSplit split;
    float* split_buf[4] = {};              // two step buffers, P's table [tables][n_pre][pre_len], S's [tables][n_suf][suf_len]
    const void** split_g = nullptr;        // [split.pointers] each: the steps' cuBLAS pointers (G_t[i], M_tbl, C_b)
    const void** split_m = nullptr;
    void** split_c = nullptr;
    const float* split_filled_for[TT_EMBEDDING_FORWARD_MAX_CORES] = {};   // the cores the pointers were written for
};

// Versions 4-6's item kernels by `kernel`: 4, 5, 6 (version 6's compiled kernel) or TT_EMBEDDING_FORWARD_TILED (its
// column tiles); version 3's kernel is 3. A block's shared memory (version 3: its buffers in shared memory), the
// compiled kernel for the shape (null where none is), the lookups per item the host aims at.
inline size_t tt_embedding_forward_smem_bytes(int kernel, const TtEmbeddingForwardShape& s, int warps) {
    return kernel == 3 ? tt_embedding_forward_smem_bytes3(s, warps) : kernel == 4 ? tt_embedding_forward_smem_bytes4(s, warps)
         : kernel == TT_EMBEDDING_FORWARD_TILED ? tt_embedding_forward_smem_bytes_tiled(s, warps) : tt_embedding_forward_smem_bytes5(s, warps, kernel == 6);
}
inline TtEmbeddingForwardGroupedKernel tt_embedding_forward_grouped_kernel(int kernel, const TtEmbeddingForwardShape& s, int warps) {
    return kernel == 4 ? tt_embedding_forward_kernel4<4, 4>
         : kernel == TT_EMBEDDING_FORWARD_TILED ? tt_embedding_forward_kernel_tiled_for(s, warps) : tt_embedding_forward_tc_kernel(s, kernel == 6);
}
inline int tt_embedding_forward_target(int kernel) {
    return kernel == 4 ? TT_EMBEDDING_FORWARD_TARGET4 : kernel == 5 ? TT_EMBEDDING_FORWARD_TARGET5
         : kernel == 6 ? TT_EMBEDDING_FORWARD_TARGET6 : TT_EMBEDDING_FORWARD_TARGET_TILED;
}

// what versions 4-6 share beyond their compiled shapes: the index reads of all items and one warp's shared memory
inline std::string tt_embedding_forward_grouped_reason(int kernel, const TtEmbeddingForwardShape& s, size_t max_smem) {
    const double reads = (double)s.p[1] * (double)s.nnz;          // every item reads its segment's indices
    if ((double)s.tables * s.p[1] * tt_embedding_forward_segments(s, tt_embedding_forward_target(kernel)) > (double)INT32_MAX || reads > 1e10)
        return tt_embedding_forward_fmt("its blocks would read %.3g indices in all (p_1 x lookups; limit 1e10) or exceed the grid", reads);
    const size_t smem1 = tt_embedding_forward_smem_bytes(kernel, s, 1);
    if (smem1 > max_smem) return tt_embedding_forward_fmt("one warp's shared memory (%zu bytes) exceeds the %zu bytes per block", smem1, max_smem);
    return "";
}

// version 6 runs its compiled kernel where that applies, the column-tile kernel at rank 64 and where G_1's slice is too
// big for version 5's copies (and that kernel runs), version 3's everywhere else (tt_embedding_forward_runs6 says which)
inline bool tt_embedding_forward_fast6(const TtEmbeddingForwardShape& s, size_t max_smem) {
    return tt_embedding_forward_reason6(s).empty() && tt_embedding_forward_grouped_reason(6, s, max_smem).empty();
}
// the column tiles run the shape (TC: on tensor cores)
inline bool tt_embedding_forward_tiles_run(const TtEmbeddingForwardShape& s, size_t max_smem, bool tc) {
    return s.T == 3 && tt_embedding_forward_reason_tiled(s).empty() && tt_embedding_forward_grouped_reason(TT_EMBEDDING_FORWARD_TILED, s, max_smem).empty() &&
           (!tc || tt_embedding_forward_tiled_tc(s.R[1], s.R[2]));
}
// version 6 takes them on tensor cores at rank 64, and at rank 32 where it compiled no kernel (q 2,4,4, q 8,4,8);
// where version 5's copies of G_1's slice do not fit (rank 128), on tensor cores or not
inline bool tt_embedding_forward_route_tiled(const TtEmbeddingForwardShape& s, size_t max_smem) {
    if (!tt_embedding_forward_tiles_run(s, max_smem, false)) return false;
    const bool fast6 = tt_embedding_forward_fast6(s, max_smem);
    if (tt_embedding_forward_tiled_tc(s.R[1], s.R[2]) && (s.R[2] == 64 || (s.R[2] == 32 && !fast6))) return true;
    return !fast6 && tt_embedding_forward_smem_bytes5(s, 1, true) > max_smem;
}
// what version 6 runs: the prefix and suffix tables where a cut pays, else as above. With --stash, only the kernels that
// write every lookup's prefixes as they make them: the column tiles on tensor cores (at rank 32 too, ahead of the
// compiled kernel), else version 3's chain (the compiled kernel, the FP32 tiles and the tables keep no P_1 of their own;
// a kernel after them making the stash from the cores cost 2-6x the forward: results/notes/tt_embedding_forward.md)
inline int tt_embedding_forward_runs6(const TtEmbeddingForwardShape& s, size_t max_smem, bool stash = false) {
    if (stash)
        return tt_embedding_forward_tiles_run(s, max_smem, true) && (s.R[2] < 128 || tt_embedding_forward_route_tiled(s, max_smem))
                   ? TT_EMBEDDING_FORWARD_TILED : 3;
    if (tt_embedding_forward_plan_split(s, max_smem).k >= 0) return TT_EMBEDDING_FORWARD_SPLIT;
    return tt_embedding_forward_route_tiled(s, max_smem) ? TT_EMBEDDING_FORWARD_TILED : tt_embedding_forward_fast6(s, max_smem) ? 6 : 3;
}

// terms of version 1's explicit sum over the whole call
inline double tt_embedding_forward_naive_terms(const TtEmbeddingForwardShape& s) {
    double terms = 1.0;
    for (int t = 1; t < s.T; t++) terms *= s.R[t];
    return terms * (double)s.nnz * s.D;
}

// the precondition of each version on a shape, "" when it runs; version 6 (the default) runs every shape
std::string tt_embedding_forward_skip_reason(int kernel_num, const TtEmbeddingForwardShape& s, size_t max_smem, bool stash = false) {
    if (stash && kernel_num != 6) return "--stash (training mode) is written by version 6, the default, only";
    if (kernel_num == 1 && (double)s.tables * s.B * s.D > (double)INT32_MAX * 64)
        return "its grid (a thread per output value, blocks of 64) would exceed 2^31 blocks";
    if (kernel_num == 1 && tt_embedding_forward_naive_terms(s) > (double)TT_EMBEDDING_FORWARD_MAX_NAIVE_TERMS)
        return tt_embedding_forward_fmt("its explicit sum has %.3g terms per call (> 2^35, minutes of GPU time); the chain versions cover this shape",
                                        tt_embedding_forward_naive_terms(s));
    if (kernel_num == 4 || kernel_num == 5) {
        std::string why = kernel_num == 4 ? tt_embedding_forward_reason4(s) : tt_embedding_forward_reason5(s);
        if (!why.empty()) return why + " (version 6 runs every shape)";
        return tt_embedding_forward_grouped_reason(kernel_num, s, max_smem);
    }
    return "";
}

// version 6's lists of each key's lookups: room for 4x a key's mean count + 16 (a key with more takes the digit scan),
// where positions fit 32 bits and the lists take at most 256 MB (else 0: none)
inline int tt_embedding_forward_key_cap(const TtEmbeddingForwardShape& s) {
    const int64_t keys = (int64_t)s.tables * s.p[1];
    if (keys == 0 || s.nnz >= (1ll << 32)) return 0;
    const int64_t cap = std::min<int64_t>((4 * (s.nnz / keys) + 16 + 3) / 4 * 4, 4096);
    return keys * (cap + 1) * 4 <= (256ll << 20) ? (int)cap : 0;
}

// device bytes the op allocates at this shape (inputs, output, every version's workspace); version 3's scratch
// counted at its 256 MB cap
inline double tt_embedding_forward_device_bytes(const TtEmbeddingForwardShape& s, int chunk) {
    const double nbags = (double)s.tables * s.B, nnz = (double)s.nnz;
    double b = 4.0 * (double)tt_embedding_forward_core_floats(s) + 8.0 * (nnz + nbags + 1) + 8.0 * nbags * s.D;   // + fp32 acc
    b += 4.0 * nnz + 3.0 * 8.0 * (s.T - 1) * chunk;
    for (int t = 0; t + 1 < s.T; t++) b += 4.0 * chunk * s.Q[t + 1] * s.R[t + 2];
    if (tt_embedding_forward_reason4(s).empty() || tt_embedding_forward_reason5(s).empty() || tt_embedding_forward_reason_tiled(s).empty())
        b += 4.0 * nnz * s.D + 10.0 * nnz + 64 + 4.0 * (double)s.tables * s.p[1] * (tt_embedding_forward_key_cap(s) + 1);
    const TtEmbeddingForwardSplit c = tt_embedding_forward_plan_split(s, SIZE_MAX);
    if (c.k >= 0) b += 4.0 * (double)(c.floats[0] + c.floats[1] + c.floats[2] + c.floats[3]) + 24.0 * c.pointers + 4.0 * nnz * s.D;
    return b + (256 << 20);
}

void tt_embedding_forward_setup(TtEmbeddingForwardWorkspace& ws, const TtEmbeddingForwardShape& s, int chunk, const cudaDeviceProp& prop) {
    ws.max_smem = prop.sharedMemPerBlockOptin;
    ws.num_sms = prop.multiProcessorCount;
    const int64_t nnz = s.nnz, nbags = (int64_t)s.tables * s.B;
    // no __launch_bounds__ on version 3's kernel (a bound of 512 made ptxas cap it at 64 registers and spill): the
    // largest block each compiled kernel accepts is read here
    cudaFuncAttributes attr;
    ws.max_threads[3] = 1024;
    for (auto k3 : {tt_embedding_forward_kernel3<false, false>, tt_embedding_forward_kernel3<true, false>, tt_embedding_forward_kernel3<false, true>,
                    tt_embedding_forward_kernel3<true, true>}) {
        cudaCheck(cudaFuncSetAttribute(k3, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)ws.max_smem));
        cudaCheck(cudaFuncGetAttributes(&attr, k3));
        ws.max_threads[3] = std::min(ws.max_threads[3], attr.maxThreadsPerBlock);
    }
    if (tt_embedding_forward_smem_bytes3(s, 1) > ws.max_smem) {     // at most 256 MB, at most 64 warps per SM
        const int64_t per_warp = tt_embedding_forward_smem_bytes3(s, 1);
        ws.chain_scratch_warps = std::max<int64_t>(32, std::min<int64_t>((int64_t)64 * ws.num_sms, ((int64_t)256 << 20) / per_warp));
        ws.chain_scratch = device_alloc<float>((size_t)(ws.chain_scratch_warps * per_warp / 4));
    }
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
    // version 6's tables where a cut pays
    ws.split = tt_embedding_forward_plan_split(s, ws.max_smem);
    const TtEmbeddingForwardSplit& c = ws.split;
    if (c.k >= 0) {
        for (int i = 0; i < 4; i++)
            if (c.floats[i] > 0) ws.split_buf[i] = device_alloc<float>((size_t)c.floats[i]);
        if (c.pointers > 0) {
            ws.split_g = const_cast<const void**>(device_alloc<void*>((size_t)c.pointers));
            ws.split_m = const_cast<const void**>(device_alloc<void*>((size_t)c.pointers));
            ws.split_c = device_alloc<void*>((size_t)c.pointers);
        }
        cudaCheck(cudaFuncSetAttribute(tt_embedding_forward_kernel_split_rows, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)ws.max_smem));
        for (int n = 1; n < TT_EMBEDDING_FORWARD_NARROW; n++)
            cudaCheck(cudaFuncSetAttribute(tt_embedding_forward_narrow_kernel(n), cudaFuncAttributeMaxDynamicSharedMemorySize, (int)ws.max_smem));
        cudaCheck(cudaFuncGetAttributes(&attr, tt_embedding_forward_kernel_split_rows));
        ws.max_threads[TT_EMBEDDING_FORWARD_SPLIT] = attr.maxThreadsPerBlock;
        ws.rowbuf = device_alloc<float>((size_t)nnz * s.D);
    }
    // versions 4-6, at the shapes they are compiled for
    if (!tt_embedding_forward_reason4(s).empty() && !tt_embedding_forward_reason5(s).empty() && !tt_embedding_forward_reason_tiled(s).empty()) return;
    if (!ws.rowbuf) ws.rowbuf = device_alloc<float>((size_t)nnz * s.D);
    ws.item_counters = device_alloc<int>(2);
    cudaCheck(cudaMemset(ws.item_counters, 0, 2 * sizeof(int)));
    ws.use_fast_digits = tt_embedding_forward_make_fast_digits(s, ws.fast_digits);
    const size_t i1_len = (size_t)(nnz + 7) / 8 * 8 + 8;
    ws.lookup_i1 = device_alloc<uint16_t>(i1_len);
    cudaCheck(cudaMemset(ws.lookup_i1, 0, i1_len * sizeof(uint16_t)));     // the padding
    ws.row_source = device_alloc<int64_t>((size_t)nnz);
    ws.key_cap = tt_embedding_forward_key_cap(s);
    if (ws.key_cap > 0) {
        const size_t keys = (size_t)s.tables * s.p[1];
        ws.key_count = device_alloc<int>(keys);
        cudaCheck(cudaMemset(ws.key_count, 0, keys * sizeof(int)));
        ws.key_lookups = device_alloc<uint32_t>(keys * ws.key_cap);
    }
    auto fit = [&](int v) {                                 // opt-in shared memory, block limit, residency
        for (int w : {1, 32}) {                             // the widest block's build sets the limit
            const TtEmbeddingForwardGroupedKernel kernel = tt_embedding_forward_grouped_kernel(v, s, w);
            cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)ws.max_smem));
            cudaCheck(cudaFuncGetAttributes(&attr, kernel));
        }
        ws.max_threads[v] = attr.maxThreadsPerBlock;
        for (int w = 1; w <= 32; w++) {
            const size_t smem = tt_embedding_forward_smem_bytes(v, s, w);
            if (32 * w > ws.max_threads[v] || smem > ws.max_smem) break;
            cudaCheck(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ws.resident[v][w], tt_embedding_forward_grouped_kernel(v, s, w), 32 * w, smem));
        }
    };
    if (tt_embedding_forward_reason4(s).empty()) fit(4);
    if (tt_embedding_forward_tc_kernel(s)) fit(5);
    if (tt_embedding_forward_tc_kernel(s, true)) fit(6);
    if (tt_embedding_forward_reason_tiled(s).empty()) fit(TT_EMBEDDING_FORWARD_TILED);
}

void tt_embedding_forward_free(TtEmbeddingForwardWorkspace& ws) {
    cublasCheck(cublasDestroy(ws.handle));
    for (auto* p : ws.tr) cudaCheck(cudaFree(p));
    cudaCheck(cudaFree(const_cast<void**>(ws.a_ptr)));
    cudaCheck(cudaFree(const_cast<void**>(ws.b_ptr)));
    for (void* p : {(void*)ws.bag_of, (void*)ws.c_ptr, (void*)ws.acc, (void*)ws.chain_scratch, (void*)ws.rowbuf, (void*)ws.item_counters,
                    (void*)ws.lookup_i1, (void*)ws.row_source, (void*)ws.key_count, (void*)ws.key_lookups, (void*)ws.stash, (void*)ws.split_buf[0], (void*)ws.split_buf[1],
                    (void*)ws.split_buf[2], (void*)ws.split_buf[3], (void*)ws.split_m, (void*)ws.split_c})
        cudaCheck(cudaFree(p));
    cudaCheck(cudaFree(const_cast<void**>(ws.split_g)));
}

// NaN into every intermediate a version reads back, so a row or buffer it forgot to write fails the check
void tt_embedding_forward_poison_workspace(TtEmbeddingForwardWorkspace& ws, const TtEmbeddingForwardShape& s) {
    for (int t = 0; t + 1 < s.T; t++) poison(ws.tr[t], (size_t)ws.chunk * s.Q[t + 1] * s.R[t + 2] * sizeof(float));
    poison(ws.acc, (size_t)s.tables * s.B * s.D * sizeof(float));
    if (ws.rowbuf) poison(ws.rowbuf, std::max<size_t>((size_t)s.nnz * s.D, 1) * sizeof(float));
    if (ws.chain_scratch) poison(ws.chain_scratch, (size_t)ws.chain_scratch_warps * tt_embedding_forward_smem_bytes3(s, 1));
    if (ws.stash) poison(ws.stash, (size_t)ws.stash_floats * sizeof(float));
    if (ws.row_source) poison(ws.row_source, (size_t)s.nnz * sizeof(int64_t));
    if (ws.key_lookups) poison(ws.key_lookups, (size_t)s.tables * s.p[1] * ws.key_cap * sizeof(uint32_t));
    for (int i = 0; i < 4; i++)
        if (ws.split_buf[i]) poison(ws.split_buf[i], (size_t)ws.split.floats[i] * sizeof(float));
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
        tt_embedding_forward_kernel_bag_ids2<<<(unsigned)ceil_div<int64_t>(nnz, block_size), block_size>>>(ws.bag_of, offsets, nbags, nnz);
        TtEmbeddingForwardCores bufs = {};
        for (int t = 0; t + 1 < s.T; t++) bufs.c[t] = ws.tr[t];
        const float one = 1.0f, zero = 0.0f;
        for (int64_t start = 0; start < nnz; start += ws.chunk) {
            const int N = (int)std::min<int64_t>(ws.chunk, nnz - start);
            tt_embedding_forward_kernel_pointers2<<<ceil_div(N, block_size), block_size>>>(
                ws.a_ptr, ws.b_ptr, ws.c_ptr, indices, ws.bag_of, start, N, cores, s, bufs);
            for (int t = 0; t + 1 < s.T; t++) {
                const TtEmbeddingForwardGemmArgs g = tt_embedding_forward_gemm_args(s, t);
                cublasCheck(cublasGemmBatchedEx(ws.handle, CUBLAS_OP_N, CUBLAS_OP_N, g.rows, g.cols, g.inner, &one,
                                                ws.a_ptr + (int64_t)t * N, CUDA_R_32F, g.lda,
                                                ws.b_ptr + (int64_t)t * N, CUDA_R_32F, g.ldb,
                                                &zero, ws.c_ptr + (int64_t)t * N, CUDA_R_32F, g.ldc,
                                                N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
            }
            tt_embedding_forward_kernel_reduce2<<<(unsigned)ceil_div<int64_t>((int64_t)N * 32, block_size), block_size>>>(
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
    if (ws.chain_scratch) {                                 // buffers in global memory: as many blocks as the scratch holds
        const int64_t grid = std::max<int64_t>(1, std::min<int64_t>(nbags, ws.chain_scratch_warps / (block_size / 32)));
        (cores.stash ? tt_embedding_forward_kernel3<true, true> : tt_embedding_forward_kernel3<true, false>)<<<(unsigned)grid, block_size, 0>>>(
            out, indices, offsets, cores, s, ws.chain_scratch);
        return;
    }
    const unsigned grid = (unsigned)std::min<int64_t>(nbags, INT32_MAX);
    (cores.stash ? tt_embedding_forward_kernel3<false, true> : tt_embedding_forward_kernel3<false, false>)<<<grid, block_size,
        tt_embedding_forward_smem_bytes3(s, block_size / 32)>>>(out, indices, offsets, cores, s, nullptr);
}

// Versions 4-6 (kernel: 4, 5, 6 or TT_EMBEDDING_FORWARD_TILED, version 6's column tiles): persistent blocks over the
// items (as many as fit at once), then the pooling kernel. Version 6 runs the digit kernel first and launches the
// chain and pooling kernels with PDL.
void tt_embedding_forward_grouped(floatX* out, const int64_t* indices, const int64_t* offsets, const TtEmbeddingForwardCores& cores,
                                  const TtEmbeddingForwardShape& s, TtEmbeddingForwardWorkspace& ws, int block_size, int kernel) {
    const int64_t nbags = (int64_t)s.tables * s.B, n = nbags * s.D;
    const unsigned pool_blocks = (unsigned)ceil_div<int64_t>(n, 256);
    if (s.nnz == 0) {
        tt_embedding_forward_kernel_pool<<<pool_blocks, 256>>>(out, ws.rowbuf, nullptr, offsets, nbags, s.D);
        return;
    }
    const int segments = tt_embedding_forward_segments(s, tt_embedding_forward_target(kernel)), warps = block_size / 32;
    const int64_t items = (int64_t)s.tables * s.p[1] * segments;
    const unsigned blocks = (unsigned)std::min<int64_t>(items, (int64_t)std::max(ws.resident[kernel][warps], 1) * ws.num_sms);
    const TtEmbeddingForwardGroupedKernel chain = tt_embedding_forward_grouped_kernel(kernel, s, warps);
    const size_t smem = tt_embedding_forward_smem_bytes(kernel, s, warps);
    if (kernel == 4 || kernel == 5) {
        chain<<<blocks, block_size, smem>>>(ws.rowbuf, indices, ws.lookup_i1, offsets, cores, s, segments, ws.fast_digits, ws.use_fast_digits,
                                            ws.item_counters);
        tt_embedding_forward_kernel_pool<<<pool_blocks, 256>>>(out, ws.rowbuf, nullptr, offsets, nbags, s.D);
        return;
    }
    TtEmbeddingForwardCores c = cores;                      // the lists of keys where an item is a whole key
    if (segments == 1 && ws.key_cap > 0) {
        c.key_count = ws.key_count;
        c.key_lookups = ws.key_lookups;
        c.key_cap = ws.key_cap;
    } else {
        c.key_count = nullptr;
        c.key_lookups = nullptr;
        c.key_cap = 0;
    }
    tt_embedding_forward_kernel_digits6<<<(unsigned)ceil_div<int64_t>(s.nnz, 256), 256>>>(ws.lookup_i1, indices, offsets, c, s,
                                                                                      ws.fast_digits, ws.use_fast_digits);
    launch_pdl(chain, blocks, (unsigned)block_size, smem, ws.rowbuf, indices, (const uint16_t*)ws.lookup_i1, offsets, c, s, segments,
               ws.fast_digits, ws.use_fast_digits, ws.item_counters);
    launch_pdl(tt_embedding_forward_kernel_pool, pool_blocks, 256u, (size_t)0, out, (const float*)ws.rowbuf, (const int64_t*)cores.source,
               offsets, nbags, s.D);
    if (cores.stash)                                        // the twins' P_1 (stream order: after the chain kernel)
        tt_embedding_forward_kernel_stash_twins<<<(unsigned)std::min<int64_t>(ceil_div<int64_t>(s.nnz, 8), 16 * ws.num_sms), 256>>>(
            reinterpret_cast<float4*>(cores.stash), cores.source, s.nnz, (int64_t)s.Q[1] * s.R[2] / 4);
}

// a table step's cuBLAS arguments: row-major C (m x n) = M (m x kk) . G (kk x n), read column-major as version 2's
// steps (A = G, B = M); the CPU test runs exactly these
inline TtEmbeddingForwardGemmArgs tt_embedding_forward_split_gemm_args(const TtEmbeddingForwardSplitGemm& g) {
    return {g.n, g.m, g.kk, g.n, g.kk, g.n};
}

// version 6's tables: the steps' pointer arrays (written again only when the cores move), a batched GEMM per step (big
// steps narrower than 8 columns: the narrow kernel), then the row and pooling kernels (both with PDL)
void tt_embedding_forward_split(floatX* out, const int64_t* indices, const int64_t* offsets, const TtEmbeddingForwardCores& cores,
                                const TtEmbeddingForwardShape& s, TtEmbeddingForwardWorkspace& ws, int block_size) {
    const TtEmbeddingForwardSplit& c = ws.split;
    const int64_t nbags = (int64_t)s.tables * s.B;
    if (c.pointers > 0 && !std::equal(cores.c, cores.c + s.T, ws.split_filled_for)) {
        tt_embedding_forward_kernel_split_pointers<<<(unsigned)std::min<int64_t>(ceil_div<int64_t>(c.pointers, 256), 4096), 256>>>(
            ws.split_g, ws.split_m, ws.split_c, c, s, cores, ws.split_buf[0], ws.split_buf[1], ws.split_buf[2], ws.split_buf[3]);
        std::copy(cores.c, cores.c + s.T, ws.split_filled_for);
    }
    const float one = 1.0f, zero = 0.0f;
    for (int j = 0; j < c.n_gemms; j++) {
        const TtEmbeddingForwardSplitGemm& g = c.gemm[j];
        const TtEmbeddingForwardNarrow w = tt_embedding_forward_narrow_pays(g, s.p[g.t], s.tables)
                                               ? tt_embedding_forward_narrow_plan(g, s.p[g.t], s.tables, ws.max_smem, ws.num_sms)
                                               : TtEmbeddingForwardNarrow();
        if (w.rows) {
            const dim3 grid((unsigned)ceil_div(g.m, w.rows), (unsigned)std::min<int64_t>((int64_t)s.tables * ceil_div(s.p[g.t], w.dpb), 65535));
            tt_embedding_forward_narrow_kernel(g.n)<<<grid, w.rows, tt_embedding_forward_smem_bytes_narrow(w, g.kk, g.n)>>>(
                ws.split_g + g.at, ws.split_m + g.at, ws.split_c + g.at, g.m, g.kk, s.p[g.t], s.tables, w.dpb);
            continue;
        }
        const TtEmbeddingForwardGemmArgs a = tt_embedding_forward_split_gemm_args(g);
        cublasCheck(cublasGemmBatchedEx(ws.handle, CUBLAS_OP_N, CUBLAS_OP_N, a.rows, a.cols, a.inner, &one, ws.split_g + g.at, CUDA_R_32F, a.lda,
                                        ws.split_m + g.at, CUDA_R_32F, a.ldb, &zero, ws.split_c + g.at, CUDA_R_32F, a.ldc,
                                        (int)(s.tables * s.p[g.t]), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    }
    const float* pre = c.k > 0 ? ws.split_buf[TT_EMBEDDING_FORWARD_SPLIT_PRE] : cores.c[0];   // a side with no step: its core
    const float* suf = c.k + 2 < s.T ? ws.split_buf[TT_EMBEDDING_FORWARD_SPLIT_SUF] : cores.c[s.T - 1];
    const bool vec = c.pre_len % 4 == 0 && c.suf_len % 4 == 0 && (uintptr_t)pre % 16 == 0 && (uintptr_t)suf % 16 == 0;
    const int warps = block_size / 32;
    launch_pdl(tt_embedding_forward_kernel_split_rows, (unsigned)std::max<int64_t>(1, std::min<int64_t>(ceil_div<int64_t>(s.nnz, warps), INT32_MAX)),
               (unsigned)block_size, tt_embedding_forward_smem_bytes_split_rows(c, warps), ws.rowbuf, indices, offsets, pre, suf, vec, s, c);
    launch_pdl(tt_embedding_forward_kernel_pool, (unsigned)ceil_div<int64_t>(nbags * s.D, 256), 256u, (size_t)0, out, (const float*)ws.rowbuf,
               (const int64_t*)nullptr, offsets, nbags, s.D);
}

void tt_embedding_forward(int kernel_num, floatX* out, const int64_t* indices, const int64_t* offsets,
                          const TtEmbeddingForwardCores& cores, const TtEmbeddingForwardShape& s,
                          TtEmbeddingForwardWorkspace& ws, int block_size) {
    switch (kernel_num) {
        case 1: tt_embedding_forward1(out, indices, offsets, cores, s, block_size); break;
        case 2: tt_embedding_forward2(out, indices, offsets, cores, s, ws, block_size); break;
        case 3: tt_embedding_forward3(out, indices, offsets, cores, s, ws, block_size); break;
        case 4:
        case 5: tt_embedding_forward_grouped(out, indices, offsets, cores, s, ws, block_size, kernel_num); break;
        case 6: {                                   // the default: its tables, compiled kernel, column tiles or version 3's
            const int k = tt_embedding_forward_runs6(s, ws.max_smem, ws.stash != nullptr);
            TtEmbeddingForwardCores c6 = cores;     // --stash: the routes that write it as they go
            c6.stash = ws.stash;
            c6.source = ws.row_source;
            if (k == TT_EMBEDDING_FORWARD_SPLIT) tt_embedding_forward_split(out, indices, offsets, cores, s, ws, block_size);
            else if (k == 3) tt_embedding_forward3(out, indices, offsets, c6, s, ws, block_size);
            else tt_embedding_forward_grouped(out, indices, offsets, c6, s, ws, block_size, k);
            break;
        }
        default: fail_args("tt_embedding_forward has no version %d", kernel_num);
    }
}

// each version's block sizes: version 1 two (it is slow), version 2 one (its kernels are small helpers around
// cuBLAS), the others those whose shared memory and registers fit (version 6: those of the kernel it runs; kernel_num
// may also be TT_EMBEDDING_FORWARD_TILED)
std::vector<int> tt_embedding_forward_blocks(int kernel_num, const TtEmbeddingForwardShape& s, const TtEmbeddingForwardWorkspace& ws) {
    if (kernel_num == 1) return {64, 256};
    if (kernel_num == 2) return {256};
    if (kernel_num == 6) kernel_num = tt_embedding_forward_runs6(s, ws.max_smem, ws.stash != nullptr);
    std::vector<int> out;
    if (kernel_num == TT_EMBEDDING_FORWARD_SPLIT) {         // the row kernel's block
        for (int b : {32, 64, 128, 256, 512, 1024})
            if (b <= ws.max_threads[kernel_num] && tt_embedding_forward_smem_bytes_split_rows(ws.split, b / 32) <= ws.max_smem) out.push_back(b);
        return out;
    }
    for (int b : {32, 64, 128, 256, 384, 512, 1024}) {
        if (b == 384 && (kernel_num != TT_EMBEDDING_FORWARD_TILED || !tt_embedding_forward_tiled_tc(s.R[1], s.R[2]) || s.R[2] != 128))
            continue;                                       // 12 warps: step 1 on tensor cores at rank 128
        if (b > ws.max_threads[kernel_num]) break;          // the compiled kernel's register budget
        if ((kernel_num == 3 && ws.chain_scratch) || tt_embedding_forward_smem_bytes(kernel_num, s, b / 32) <= ws.max_smem) out.push_back(b);
    }
    return out;
}

// ----------------------------------------------------------------------------------------------
// a run: the device inputs, output and workspace, the reference, and what the check keeps between block sizes

struct TtEmbeddingForwardBench {
    TtEmbeddingForwardShape s;
    TtEmbeddingForwardCores cores = {};
    int64_t *indices = nullptr, *offsets = nullptr;
    floatX* out = nullptr;
    TtEmbeddingForwardWorkspace ws;
    std::vector<float> ref;                                         // empty where nothing reads it
    std::vector<float> stash_ref;                                   // --stash: every lookup's P_t (empty where unchecked)
    int fitted[TT_EMBEDDING_FORWARD_NUM_KERNELS + 1] = {};          // --block N as each version runs it
    std::vector<floatX> first_out[TT_EMBEDDING_FORWARD_NUM_KERNELS + 1];
    int first_block[TT_EMBEDDING_FORWARD_NUM_KERNELS + 1] = {};
};

// host bytes beyond the inputs: the reference, a download of the output for the check, its first copy and a dump's
inline double tt_embedding_forward_host_bytes(const TtEmbeddingForwardShape& s) { return 16.0 * (double)s.tables * s.B * s.D; }

// the device memory checked against what is free (exit 2), the uploads, the workspace, the reference
void tt_embedding_forward_setup_bench(TtEmbeddingForwardBench& b, const TtEmbeddingInputs& in, int chunk, const cudaDeviceProp& prop,
                                      bool need_ref, bool stash) {
    const TtEmbeddingForwardShape& s = b.s;
    const int64_t stash_floats = stash ? tt_embedding_stash_layout(s.T, s.q, s.R, s.nnz, b.ws.stash_off) : 0;
    require_device_memory(tt_embedding_forward_device_bytes(s, chunk) + (stash ? 4.0 * (double)stash_floats : 0.0),
                          "tt_embedding_forward (inputs, output, every version's workspace, the stash)");
    std::vector<const float*> core_ptrs(s.T);
    for (int t = 0; t < s.T; t++) {
        b.cores.c[t] = device_upload(in.cores[t]);
        core_ptrs[t] = in.cores[t].data();
    }
    b.indices = device_upload(in.indices);
    b.offsets = device_upload(in.offsets);
    b.out = device_alloc<floatX>((size_t)s.tables * s.B * s.D);
    tt_embedding_forward_setup(b.ws, s, chunk, prop);
    if (stash_floats) {
        b.ws.stash_floats = stash_floats;
        b.ws.stash = device_alloc<float>((size_t)stash_floats);
    }
    if (!need_ref) return;
    b.ref.resize((size_t)s.tables * s.B * s.D);
    b.stash_ref.resize((size_t)stash_floats);
    tt_embedding_forward_cpu(b.ref.data(), core_ptrs.data(), in.indices.data(), in.offsets.data(), s, stash_floats ? b.stash_ref.data() : nullptr,
                             b.ws.stash_off);
}

// --block N: the largest allowed size <= N for each version (whole warps, shared memory that fits), fitted here
void tt_embedding_forward_fit_blocks(TtEmbeddingForwardBench& b, int block) {
    for (int k = 3; k <= TT_EMBEDDING_FORWARD_NUM_KERNELS && block; k++) {
        std::vector<int> ok = tt_embedding_forward_skip_reason(k, b.s, b.ws.max_smem, b.ws.stash).empty() ? tt_embedding_forward_blocks(k, b.s, b.ws)
                                                                                           : std::vector<int>();
        b.fitted[k] = ok.empty() ? 32 : ok[0];
        for (int x : ok) if (x <= block) b.fitted[k] = x;
        if (!ok.empty() && b.fitted[k] != block) printf("version %d runs --block %d as %d (whole warps, shared memory that fits)\n", k, block, b.fitted[k]);
    }
}

// The output against the reference; versions 4-6 (6 on its compiled or its column-tile kernel) also claim bitwise the same output at
// every block size (rows do not depend on where they are computed, bags are summed in lookup order): the first
// block's output is kept and compared
bool tt_embedding_forward_check(TtEmbeddingForwardBench& b, int k, int block) {
    const size_t n = (size_t)b.s.tables * b.s.B * b.s.D;
    bool ok = validate_device("out", b.out, b.ref.data(), n, TT_EMBEDDING_FORWARD_ATOL, TT_EMBEDDING_FORWARD_RTOL);
    if (b.ws.stash)                                         // fp32 chains in both builds: fp32's tolerance
        ok = validate_device("stash", b.ws.stash, b.stash_ref.data(), b.stash_ref.size(), 1e-4f, 1e-4f) && ok;
    if (k < 4 || (k == 6 && tt_embedding_forward_runs6(b.s, b.ws.max_smem, b.ws.stash != nullptr) == 3)) return ok;
    std::vector<floatX> got = device_download(b.out, n);
    if (b.first_out[k].empty()) {
        b.first_out[k] = got;
        b.first_block[k] = block;
        return ok;
    }
    size_t diff = 0;
    for (size_t i = 0; i < n; i++) diff += memcmp(&got[i], &b.first_out[k][i], sizeof(floatX)) != 0;
    printf("version %d, block %d: %s block %d's output (%zu of %zu values differ)\n", k, block,
           diff ? "NOT bitwise equal to" : "bitwise equal to", b.first_block[k], diff, n);
    return ok && diff == 0;
}

// --dump: the inputs (tt_embedding.h), the reference (unless --no-check: at EL-Rec's L 20 it takes the CPU a minute)
// and the last version's output as .npy, and the RESULT shape for the peers
void tt_embedding_forward_dump(const std::string& dir, const TtEmbeddingConfig& c, const TtEmbeddingInputs& in, const std::string& shape,
                               const TtEmbeddingForwardBench& b) {
    const TtEmbeddingForwardShape& s = b.s;
    tt_embedding_dump_inputs(dir, "tt_embedding_forward", c, in);
    std::vector<float> got = to_float_vec(device_download(b.out, (size_t)s.tables * s.B * s.D));
    if (!b.ref.empty()) write_npy(dir, "tt_embedding_forward_out_ref", b.ref.data(), {s.tables, s.B, s.D});
    write_npy(dir, "tt_embedding_forward_out", got.data(), {s.tables, s.B, s.D});
    write_text(dir, "tt_embedding_forward_shape.txt", shape + "\n");
    printf("dumped tt_embedding_forward_{meta,core0..%d,indices,offsets,%sout}.npy and _shape.txt to %s\n", s.T - 1,
           b.ref.empty() ? "" : "out_ref,", dir.c_str());
}

void tt_embedding_forward_free_bench(TtEmbeddingForwardBench& b) {
    tt_embedding_forward_free(b.ws);
    for (int t = 0; t < b.s.T; t++) cudaCheck(cudaFree(const_cast<float*>(b.cores.c[t])));
    for (void* p : {(void*)b.indices, (void*)b.offsets, (void*)b.out}) cudaCheck(cudaFree(p));
}

// Version 7 (G_1 in column tiles) is now version 6's kernel where G_1's slice exceeds shared memory: asked for by
// number, exit 2 saying so; `all` skips it.
void tt_embedding_forward_drop_folded(Cli& cli) {
    const int folded = TT_EMBEDDING_FORWARD_NUM_KERNELS + 1;
    for (int k : cli.kernels)
        if (!cli.all && k == folded)
            fail_args("version 7 (G_1 in column tiles) is now part of the default: version 6 runs its kernel where G_1's slice "
                      "exceeds shared memory (T = 3 at rank 128, EL-Rec's shapes); versions 1-6 run");
    cli.kernels.erase(std::remove(cli.kernels.begin(), cli.kernels.end(), folded), cli.kernels.end());
}

// ----------------------------------------------------------------------------------------------

#ifndef NO_MAIN
// what runs: the shape's sizes and FLOPs, the cores' compression, and which kernel version 6 takes here
void tt_embedding_forward_describe(const TtEmbeddingForwardBench& b, const TtEmbeddingConfig& c, const std::string& shape) {
    const TtEmbeddingForwardShape& s = b.s;
    const double core_floats = (double)tt_embedding_forward_core_floats(s);
    const int runs6 = tt_embedding_forward_runs6(s, b.ws.max_smem, b.ws.stash != nullptr);
    printf("%s: %lld lookups in %lld bags, D %d, %.0f FLOPs per lookup, cores %.0f floats (%.1fx smaller than the table%s); version 6 "
           "runs %s\n", shape.c_str(), (long long)s.nnz, (long long)c.num_bags(), s.D, tt_embedding_forward_flops_per_lookup(s), core_floats,
           (double)s.E * s.D * s.tables / core_floats, s.tables > 1 ? "s" : "",
           runs6 == 6 ? "its compiled kernel" : runs6 == 3 ? "version 3's kernel" : runs6 == TT_EMBEDDING_FORWARD_TILED ? "its column-tile kernel"
           : tt_embedding_forward_fmt("its prefix and suffix tables (cut after core %d)", b.ws.split.k).c_str());
    if (b.ws.chain_scratch) printf("version 3's per-warp buffers exceed shared memory: kept in global memory\n");
}

int main(int argc, char** argv) {
    TtEmbeddingConfig c;
    std::string distinct = "on";
    int chunk = 1000;
    Cli cli("tt_embedding_forward",
            "Tensor-train embedding bags, forward: each looked-up row is a chain of T core-slice products; SUM over each bag.",
            TT_EMBEDDING_FORWARD_NUM_KERNELS + 1, 6);
    tt_embedding_add_flags(cli, c, distinct);
    tt_embedding_add_stash_flag(cli, c);
    cli.add_int("chunk", &chunk, "lookups per cuBLAS batch in version 2 (FBTT's batch_count)");
    cli.constraints = std::string(TT_EMBEDDING_CONSTRAINTS) + ";\n  tables*B*D < 2^38, tables*B*L*D < 2^40, Q_t R_{t+1} <= 2^24; --chunk 1..2^20";
    cli.parse(argc, argv);
    tt_embedding_forward_drop_folded(cli);
    require(chunk >= 1 && chunk <= (1 << 20), "--chunk (%d) must be 1..2^20", chunk);
    TtEmbeddingForwardBench b;
    const TtEmbeddingInputs in = tt_embedding_inputs(cli, "tt_embedding_forward", c, distinct, false, [&](const TtEmbeddingConfig& cc) {
        const std::string why = tt_embedding_forward_make_shape(b.s, cc);
        if (!why.empty()) fail_args("%s", why.c_str());
        int64_t off[TT_EMBEDDING_FORWARD_MAX_CORES];
        return tt_embedding_forward_host_bytes(b.s) + (cc.stash ? 4.0 * (double)tt_embedding_stash_layout(b.s.T, b.s.q, b.s.R, b.s.nnz, off) : 0.0);
    });
    const TtEmbeddingForwardShape& s = b.s;
    cudaDeviceProp prop = cuda_init();
    tt_embedding_forward_setup_bench(b, in, chunk, prop, !cli.no_check, c.stash);
    const std::string shape = tt_embedding_shape_name(c);
    tt_embedding_forward_describe(b, c, shape);
    tt_embedding_forward_fit_blocks(b, cli.block);
    OpRunner r;
    r.op = "tt_embedding_forward";
    r.shape = shape;
    r.bytes = tt_embedding_forward_bytes(s) + 4.0 * (double)b.ws.stash_floats;   // (the stash: written)
    r.flops = tt_embedding_forward_flops_per_lookup(s) * (double)s.nnz;
    r.skip_reason = [&](int k) { return tt_embedding_forward_skip_reason(k, s, b.ws.max_smem, c.stash); };
    r.blocks_for = [&](int k) { return tt_embedding_forward_blocks(k, s, b.ws); };
    r.prepare_check = [&] {
        poison(b.out, (size_t)c.num_bags() * s.D * sizeof(floatX));
        tt_embedding_forward_poison_workspace(b.ws, s);
    };
    r.launch = [&](int k, int block) { tt_embedding_forward(k, b.out, b.indices, b.offsets, b.cores, s, b.ws, b.fitted[k] ? b.fitted[k] : block); };
    r.check = [&](int k, int block) { return tt_embedding_forward_check(b, k, block); };
    r.extra = tt_embedding_per_lookup(s.nnz);
    const int rc = run_versions(cli, r);
    if (!cli.dump_dir.empty()) tt_embedding_forward_dump(cli.dump_dir, c, in, shape, b);
    tt_embedding_forward_free_bench(b);
    return rc;
}
#endif
