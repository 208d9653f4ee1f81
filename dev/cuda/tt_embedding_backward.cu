/*
tt_embedding backward: the gradients of the tensor-train (TT) cores of a pooled embedding bag, and the
optimizer step on them (dense gradient, SGD, or elementwise Adagrad). The backward of FBTT-Embedding
(the TT-Rec paper's library, Yin et al. MLSys 2021), for any number of cores from 2 to 6.

Shapes and layout (FBTT's, ../../shared/specs/tt_embedding.md):
  T cores, ranks R_0 = R_T = 1 and inner ranks R_1 .. R_{T-1}; E <= prod p_t logical rows of D = prod q_t.
  core t: fp32 [tables, p_t, R_t * q_t * R_{t+1}]. The slice G_t[tbl][i] is an R_t x q_t x R_{t+1}
  block, element (k, a, k') at (k*q_t + a)*R_{t+1} + k'; n_t = q_t R_{t+1} is its row length.
  row -> (i_0 .. i_{T-1}) and d -> (a_0 .. a_{T-1}) in mixed radix, index 0 most significant:
    Emb[row][d] = sum_{k_1..k_{T-1}} G_0[i_0][0,a_0,k_1] G_1[i_1][k_1,a_1,k_2] ... G_{T-1}[i_{T-1}][k_{T-1},a_{T-1},0]
  bags: offsets [tables*B + 1] int64 (bag (tbl, b) is offsets[tbl*B + b] .. offsets[tbl*B + b + 1]),
  indices [nnz] int64; dY, the pooled (SUM) gradient: fp32 [tables, B, D].

Math. A lookup of bag (tbl, b) back-propagates g = dY[tbl][b]. With m_t = q_0 ... q_t, the prefix
  P_t = G_0[i_0] ... G_t[i_t] as an m_t x R_{t+1} matrix, and dM_t, the gradient of P_t:
    dM_{T-1} = g (m_{T-2} x q_{T-1}),   dM_{t-1} = dM_t . G_t^T    (dM_t viewed as m_{t-1} x n_t)
    dG_t[tbl][i_t] += P_{t-1}^T . dM_t                              (P_{-1} = 1, so dG_0 = dM_0)
  summed over every lookup. Then, on the summed gradient, once per touched slice:
    dense:   dG is written with the cores' shapes, zero where no lookup touched; cores unchanged
    sgd:     G -= lr * dG
    adagrad: s += dG^2;  G -= lr * dG / (sqrt(s) + eps)        (s: fp32, same shape as the cores)
  lr = 0.05 and eps = 1e-8 unless --lr / --eps say otherwise; the Adagrad state starts uniform in
  [0.1, 1) (a state earlier steps accumulated), so a step depends on the size of dG, not only its sign.
  Slices no lookup touched stay bit-identical (cores and state); the check verifies it.

FLOPs per lookup (FBTT's count: the forward chain recomputed, then two GEMMs per step):
    F = sum_{t=0}^{T-3} 2 m_t R_{t+1} n_{t+1}  +  sum_{t=1}^{T-1} 2 * 2 m_{t-1} R_t n_t
  default (p 200,220,250  q 4,4,4  ranks 32,32): 32,768 + 2*(32,768 + 4,096) = 106,496 FLOPs per lookup,
  1.09 GFLOP for the 10,240 lookups of a step. OpRunner::flops = F * nnz; every RESULT line adds
  us_per_lookup = time / nnz.
Fewest bytes: indices and offsets and dY read once; every touched slice of every core read once; the
  update written once: bytes = 8 nnz + 8 (tables B + 1) + 4 tables B D + 4 U (1 + w) + (dense) 4 C,
  U = elements of the touched slices, w = 1 (sgd: write G), 3 (adagrad: read and write s, write G),
  0 (dense), C = all core elements (dense writes every slice). About 4-12 MB at the default: the op is
  bound by arithmetic and latency, not bandwidth; pct_copy is reported anyway.

Versions (one idea each; times are measured on the H200 by the lead and go to results/h200.md):
  1  naive: one thread per (lookup, core, slice element) forms the partial derivative by the explicit
     sum over every other digit and rank index, atomicAdd into a zeroed dense dG; then an elementwise
     optimizer pass over all core elements.
  2  FBTT's pipeline, in our own code: per chunk of 1000 lookups a pointer-array kernel, the forward
     chain recomputed with one cublasGemmBatchedEx per step, then per step back two batched GEMMs
     (dG_t = P^T . dM, dM_{t-1} = dM . G_t^T) and an atomicAdd scatter of the [chunk, slice] gradients;
     then the optimizer pass. (FBTT's own optimizer grid leaves core rows stale; ours covers every
     element: tests/test_tt_embedding_backward.cu emulates both.)
  3  fused: one block per lookup holds its slices, its dY row and the chain in shared memory, runs the
     2T-3 phases of small GEMMs with one output per thread, and atomically adds every slice gradient
     straight from registers into the dense dG; then the optimizer pass. One launch instead of ~9 per
     1000 lookups, and no [nnz, slice] buffers in global memory.
  4  deterministic, optimizer fused: one CUB radix sort of the T*nnz (slice key, lookup) pairs groups
     the lookups of every slice. The core with the largest slice (the pivot: core 1 at the default,
     4096 floats) is processed slice by slice: a block takes up to 32 lookups of one pivot slice, loads
     that slice once instead of once per lookup, runs their chains in batches of NB and sums the pivot
     gradient in shared memory in a fixed order; the other cores' per-lookup gradients go to a
     workspace. A last kernel, one block per slice, sums each slice's gradients in sorted order and
     applies the optimizer there. No float atomics: the result is bitwise the same run after run.
  5  version 4 with register tiles: every thread computes a 4x4 (or 2x2) tile of each small GEMM, 8
     shared-memory loads per 16 FMAs instead of 2 per FMA (versions 3 and 4 are bound by shared-memory
     bandwidth: one 32-lane load wavefront per 16 FMAs).
Checks: every version at every block size against the double reference, outputs poisoned first (NaN
in dG and every workspace; cores and state restored). Per element |got - ref| <= atol + ROUND |ref| +
RTOL_MAG * (the element's sum of |terms|, propagated through the optimizer): see the tolerances below.
Versions 1-3 add with float atomics in a run-dependent order, so only the tolerance applies to them;
versions 4-5 are also run twice and must agree bit for bit. Slices no lookup touched must come back
bit-identical. The CPU test (tests/test_tt_embedding_backward.cu) runs every version's device code on
the CPU, thread by thread (cuBLAS and CUB replaced by loops with the same arguments), on T = 2..6.
Inputs: those of tt_embedding_forward for the same --seed and flags (cores, indices, offsets), then
dY uniform in [-1, 1) and the Adagrad state.
Timing: every sample restores the cores and the Adagrad state (untimed, prepare_timing), so each
sample runs the same step from the same weights. Workspace (chunk buffers, pointer arrays, CUB temp
storage, sort and segment arrays) is allocated once, before timing.

Predictions from the counts (not measurements): at the default, 1.09 GFLOP per step is ~18 us at a
60 TFLOP/s FP32 peak. Version 3 fetches 17 KB of slices per lookup (174 MB per step from L2) and
issues 4352 float atomics per lookup (45 M per step): L2-bound, tens of us at best. Versions 4-5 fetch
the 16 KB pivot slice once per chunk of up to 32 lookups (~440 blocks) and write 1 KB per lookup of
non-pivot gradients (10 MB): bound by shared-memory bandwidth in version 4 (2 loads per FMA, ~4x the
FLOP floor), closer to the FLOP floor in version 5; the sort, segment search, scan and reduction add
~6 launches. At the 4-core shape both middle cores hold 2048-float slices: only the pivot is grouped,
the other's per-lookup gradients (8 KB per lookup, 84 MB per step) go through the workspace, the next
thing to fix there (group by both heavy cores, as tt_embedding_forward's version 4 does).

Compile and run (fp32 only: FBTT's cores and optimizer state are fp32; the _bf16 build exits 2):
  make tt_embedding_backward && ./tt_embedding_backward all
  ./tt_embedding_backward 5 --optimizer adagrad --alpha 1.15
  ./tt_embedding_backward all --p 20,22,25,20 --q 4,2,2,4 --ranks 32,32,32
*/
#include "common.h"
#include <cub/cub.cuh>

#define TT_BWD_MAX_T 6
// #pragma unroll inside __host__ __device__ code, for the device pass only (the host compiler warns)
#ifdef __CUDA_ARCH__
#define TT_BWD_UNROLL _Pragma("unroll")
#define TT_BWD_UNROLL4 _Pragma("unroll 4")
#else
#define TT_BWD_UNROLL
#define TT_BWD_UNROLL4
#endif
enum { TT_BWD_DENSE = 0, TT_BWD_SGD = 1, TT_BWD_ADAGRAD = 2 };
static const char* TT_BWD_OPT_NAMES[3] = {"dense", "sgd", "adagrad"};
static const int TT_BWD_FBTT_CHUNK = 1000;      // version 2: lookups per batched-GEMM call (FBTT's batch_count)
static const int TT_BWD_CHUNK = 32;             // versions 4-5: lookups of one pivot slice per block
static const int TT_BWD_MAX_NB = 8;             // versions 4-5: lookups per batch in a block
static const int TT_BWD_SMEM_TARGET = 80 * 1024;  // versions 4-5: largest NB whose shared memory fits this
static const int TT_BWD_MAX_FUSED_BLOCK = 512;  // versions 3-5 are compiled for at most 512 threads
static const double TT_BWD_NAIVE_MAX_TERMS = 4e9;  // version 1 is skipped above this many explicit-sum terms

// Tolerances. Every GPU version computes in fp32, and sums many products of T factors: the error of
// an element is bounded by a multiple of u * mag, where mag is the same sum over |factors| (the CPU
// reference computes it in double next to dG). A random-sign sum of N terms in fp32 errs by about
// u * mag whatever N; a same-sign one by about sqrt(N/3) u * mag. 2e-5 (about 170 u) leaves room for
// atomics in any order and long segments, and still fails a dropped lookup in a slice summed over
// 10,000 lookups (an error near 1e-4 mag). The stored fp32 result adds its own rounding (ROUND * |ref|).
static const double TT_BWD_ATOL = 1e-7, TT_BWD_RTOL_MAG = 2e-5, TT_BWD_ROUND = 4.8e-7;  // ROUND = 4 ulp

// ----------------------------------------------------------------------------------------------
// shape, validation, inputs (host)

struct TtEmbeddingBackwardShape {
    int T, tables, B, D, num_bags, nnz;
    int p[7], q[7], R[7];   // R[0] = R[T] = 1
    int S[7], n[7], m[7];   // slice size R_t q_t R_{t+1}, slice row length q_t R_{t+1}, m_t = q_0 .. q_t
    int key_base[7];        // sort key of slice (t, tbl, i) = key_base[t] + tbl * p_t + i; key_base[T] = all slices
    int64_t Lrad[7];        // mixed radix of a row: prod_{j > t} p_j
    int64_t core_off[7];    // float offset of core t in the one buffer that holds all cores (128-byte aligned)
    int64_t E;
};

inline int64_t tt_embedding_backward_core_elems(const TtEmbeddingBackwardShape& s, int t) { return (int64_t)s.tables * s.p[t] * s.S[t]; }

// "" when the shape is fine, else the broken constraint
std::string tt_embedding_backward_check_shape(const std::vector<int>& p, const std::vector<int>& q,
                                              const std::vector<int>& ranks, int64_t E, int tables, int B, int L,
                                              double alpha, double lr, double eps) {
    char buf[256];
    const int T = (int)p.size();
    if (T < 2 || T > TT_BWD_MAX_T) {
        snprintf(buf, sizeof buf, "T = the number of cores (entries of --p) is %d; it must be 2..%d", T, TT_BWD_MAX_T);
        return buf;
    }
    if (q.size() != p.size()) {
        snprintf(buf, sizeof buf, "--q has %zu entries but --p has %d: one per core", q.size(), T);
        return buf;
    }
    if ((int)ranks.size() != T - 1) {
        snprintf(buf, sizeof buf, "--ranks has %zu entries; T = %d cores need T-1 = %d inner ranks", ranks.size(), T, T - 1);
        return buf;
    }
    for (int t = 0; t < T; t++) {
        if (p[t] < 1 || q[t] < 1 || (t < T - 1 && ranks[t] < 1)) {
            snprintf(buf, sizeof buf, "every entry of --p, --q and --ranks must be >= 1 (core %d: p %d, q %d%s)", t, p[t], q[t],
                     t < T - 1 ? (", rank " + std::to_string(ranks[t])).c_str() : "");
            return buf;
        }
    }
    if (tables < 1 || B < 1 || L < 0) {
        snprintf(buf, sizeof buf, "--tables (%d) and --B (%d) must be >= 1 and --L (%d) >= 0", tables, B, L);
        return buf;
    }
    double prod_p = 1.0, D = 1.0, sum_p = 0.0;
    for (int t = 0; t < T; t++) { prod_p *= p[t]; D *= q[t]; sum_p += p[t]; }
    if (prod_p > 4e18) { snprintf(buf, sizeof buf, "prod p (%.3g) must be < 4e18 (64-bit row ids)", prod_p); return buf; }
    int64_t prod_pi = 1;
    for (int t = 0; t < T; t++) prod_pi *= p[t];
    if (E < 0) { snprintf(buf, sizeof buf, "E (%lld) must be >= 1 (or 0 for prod p)", (long long)E); return buf; }
    if (E > prod_pi) {
        snprintf(buf, sizeof buf, "prod p (%lld) must be >= E (%lld): every row needs core indices", (long long)prod_pi, (long long)E);
        return buf;
    }
    if (D > (1 << 20)) { snprintf(buf, sizeof buf, "D = prod q (%.0f) must be <= 1048576", D); return buf; }
    for (int t = 0; t < T; t++) {
        double r0 = t == 0 ? 1 : ranks[t - 1], r1 = t == T - 1 ? 1 : ranks[t];
        if (r0 * q[t] * r1 > (1 << 24)) {
            snprintf(buf, sizeof buf, "the slice of core %d (R_t*q_t*R_t+1 = %.0f floats) must be <= 16777216", t, r0 * q[t] * r1);
            return buf;
        }
    }
    if ((double)tables * sum_p >= 2147483647.0) {
        snprintf(buf, sizeof buf, "tables * sum(p) (%.0f slices) must be < 2^31 (int32 sort keys)", (double)tables * sum_p);
        return buf;
    }
    if ((double)T * tables * B * L >= 2147483647.0) {
        snprintf(buf, sizeof buf, "T * tables * B * L (%.0f sort items) must be < 2^31", (double)T * tables * B * L);
        return buf;
    }
    const int64_t E_eff = E == 0 ? prod_pi : E;
    if (alpha > 1.0 && E_eff < L) {
        snprintf(buf, sizeof buf, "Zipf bags (--alpha > 1) need E (%lld) >= L (%d) distinct rows", (long long)E_eff, L);
        return buf;
    }
    if (!(eps > 0.0)) { snprintf(buf, sizeof buf, "--eps (%g) must be > 0", eps); return buf; }
    if (!std::isfinite(lr)) { snprintf(buf, sizeof buf, "--lr must be finite"); return buf; }
    return "";
}

// "" when the bags are well formed, else what is wrong (an index >= E, offsets out of order, ...)
std::string tt_embedding_backward_check_bags(const std::vector<int64_t>& offsets, const std::vector<int64_t>& indices,
                                             int64_t num_bags, int64_t E) {
    char buf[256];
    if ((int64_t)offsets.size() != num_bags + 1) {
        snprintf(buf, sizeof buf, "offsets has %zu entries; tables*B = %lld bags need %lld", offsets.size(),
                 (long long)num_bags, (long long)(num_bags + 1));
        return buf;
    }
    if (offsets[0] != 0) { snprintf(buf, sizeof buf, "offsets[0] (%lld) must be 0", (long long)offsets[0]); return buf; }
    for (int64_t b = 0; b < num_bags; b++) {
        if (offsets[b + 1] < offsets[b]) {
            snprintf(buf, sizeof buf, "offsets must be nondecreasing: offsets[%lld] = %lld < offsets[%lld] = %lld",
                     (long long)(b + 1), (long long)offsets[b + 1], (long long)b, (long long)offsets[b]);
            return buf;
        }
    }
    if (offsets[num_bags] != (int64_t)indices.size()) {
        snprintf(buf, sizeof buf, "offsets[%lld] (%lld) must equal the number of indices (%zu)", (long long)num_bags,
                 (long long)offsets[num_bags], indices.size());
        return buf;
    }
    for (size_t j = 0; j < indices.size(); j++) {
        if (indices[j] < 0 || indices[j] >= E) {
            snprintf(buf, sizeof buf, "index %lld at position %zu is %s E (%lld)", (long long)indices[j], j,
                     indices[j] < 0 ? "negative, not in 0 ..": ">=", (long long)E);
            return buf;
        }
    }
    return "";
}

// the shape of a validated command line; nnz is set once the bags exist
TtEmbeddingBackwardShape tt_embedding_backward_make_shape(const std::vector<int>& p, const std::vector<int>& q,
                                            const std::vector<int>& ranks, int64_t E, int tables, int B) {
    TtEmbeddingBackwardShape s;
    memset(&s, 0, sizeof s);
    s.T = (int)p.size();
    s.tables = tables;
    s.B = B;
    s.num_bags = tables * B;
    const int T = s.T;
    for (int t = 0; t < T; t++) { s.p[t] = p[t]; s.q[t] = q[t]; }
    s.R[0] = 1;
    for (int t = 1; t < T; t++) s.R[t] = ranks[t - 1];
    s.R[T] = 1;
    for (int t = 0; t < T; t++) {
        s.n[t] = s.q[t] * s.R[t + 1];
        s.S[t] = s.R[t] * s.n[t];
        s.m[t] = (t ? s.m[t - 1] : 1) * s.q[t];
    }
    s.D = s.m[T - 1];
    s.Lrad[T - 1] = 1;
    for (int t = T - 2; t >= 0; t--) s.Lrad[t] = s.Lrad[t + 1] * s.p[t + 1];
    int64_t prod_p = s.Lrad[0] * s.p[0];
    s.E = E == 0 ? prod_p : E;
    int64_t off = 0;
    for (int t = 0; t < T; t++) {
        s.core_off[t] = off;
        off += (tt_embedding_backward_core_elems(s, t) + 31) / 32 * 32;
    }
    s.core_off[T] = off;
    s.key_base[0] = 0;
    for (int t = 0; t < T; t++) s.key_base[t + 1] = s.key_base[t] + tables * s.p[t];
    return s;
}

// The inputs are tt_embedding_forward's for the same seed and flags (same draws in the same order):
// cores first, core t uniform in +-sqrt(3 / R_{t+1}) (a row element then has unit variance), padding
// between cores zero; then the indices, make_bag_indices(tables*B, L, E, alpha) (FBGEMM's recipe:
// uniform for alpha <= 1, Zipf otherwise); then the offsets: L per bag, or with `ragged` the same
// tables*B*L lookups split at random points with bag 0 of every table empty. Then (ours only) dY and
// the Adagrad state.
std::vector<float> tt_embedding_backward_make_cores(const TtEmbeddingBackwardShape& s, Rng& rng) {
    std::vector<float> cores((size_t)s.core_off[s.T], 0.0f);
    for (int t = 0; t < s.T; t++) {
        const float c = sqrtf(3.0f / (float)s.R[t + 1]);
        for (int64_t e = 0; e < tt_embedding_backward_core_elems(s, t); e++) cores[s.core_off[t] + e] = rng.uniform(-c, c);
    }
    return cores;
}

void tt_embedding_backward_make_bags(const TtEmbeddingBackwardShape& s, int L, double alpha, bool ragged, Rng& rng,
                                     std::vector<int64_t>& offsets, std::vector<int64_t>& indices) {
    indices = make_bag_indices(s.num_bags, L, s.E, alpha, rng);
    const int64_t nb = s.num_bags, nnz = (int64_t)indices.size();
    offsets.assign((size_t)nb + 1, 0);
    if (!ragged) {
        for (int64_t b = 0; b <= nb; b++) offsets[b] = b * L;
        return;
    }
    for (int64_t b = 1; b < nb; b++) offsets[b] = rng.randint(0, nnz + 1);
    std::sort(offsets.begin() + 1, offsets.end() - 1);
    offsets[nb] = nnz;
    for (int tbl = 0; tbl < s.tables; tbl++) {       // bag 0 of every table empty
        const int64_t b = (int64_t)tbl * s.B;
        if (b + 1 < nb) offsets[b + 1] = offsets[b];
    }
}

// ----------------------------------------------------------------------------------------------
// CPU reference, in double

// row -> core indices (mixed radix, i_0 most significant)
__host__ __device__ inline void tt_embedding_backward_decode_row(const TtEmbeddingBackwardShape& s, int64_t row, int* idx) {
TT_BWD_UNROLL
    for (int t = 0; t < TT_BWD_MAX_T; t++) {
        if (t >= s.T) break;
        idx[t] = (int)(row / s.Lrad[t]);
        row -= (int64_t)idx[t] * s.Lrad[t];
    }
}

// The summed slice gradients dG (cores' layout), by the "sandwich" form of each slice's derivative:
//   dG_t[k, a, k'] = sum_{alpha, beta} P_{t-1}[alpha, k] g[alpha, a, beta] Suf_{t+1}[k', beta]
// with the prefix P_{t-1} (m_{t-1} x R_t) and the suffix Suf_{t+1} = G_{t+1} ... G_{T-1} (R_{t+1} x
// q_{t+1}..q_{T-1}), alpha the digits before a, beta those after. (The GPU versions use FBTT's
// recursion dM_{t-1} = dM_t G_t^T instead; tests check this one against finite differences.)
// `absolute` sums |factors| instead: the magnitude that scales the fp32 error of each element.
void tt_embedding_backward_cpu(const TtEmbeddingBackwardShape& s, const float* cores_f, const int64_t* offsets, const int64_t* indices,
                               const float* dY_f, double* dG, bool absolute = false) {
    const int T = s.T;
    std::fill(dG, dG + s.core_off[T], 0.0);
    auto val = [&](float x) { return absolute ? fabs((double)x) : (double)x; };
    int64_t w[8];                      // w[t] = q_t ... q_{T-1}, w[T] = 1
    w[T] = 1;
    for (int t = T - 1; t >= 0; t--) w[t] = w[t + 1] * s.q[t];
    std::vector<double> P[TT_BWD_MAX_T], Suf[TT_BWD_MAX_T + 1], H, sl[TT_BWD_MAX_T], g(s.D);
    for (int bag = 0; bag < s.num_bags; bag++) {
        const int tbl = bag / s.B;
        for (int d = 0; d < s.D; d++) g[d] = val(dY_f[(int64_t)bag * s.D + d]);
        for (int64_t j = offsets[bag]; j < offsets[bag + 1]; j++) {
            int idx[TT_BWD_MAX_T];
            tt_embedding_backward_decode_row(s, indices[j], idx);
            int64_t off[TT_BWD_MAX_T];
            for (int t = 0; t < T; t++) {
                off[t] = s.core_off[t] + ((int64_t)tbl * s.p[t] + idx[t]) * s.S[t];
                sl[t].resize(s.S[t]);
                for (int e = 0; e < s.S[t]; e++) sl[t][e] = val(cores_f[off[t] + e]);
            }
            // prefixes P_t (m_t x R_{t+1}), t = 0 .. T-2
            P[0] = sl[0];
            for (int t = 1; t <= T - 2; t++) {
                const int Rt = s.R[t], Rn = s.R[t + 1], qt = s.q[t];
                P[t].assign((size_t)s.m[t] * Rn, 0.0);
                for (int al = 0; al < s.m[t - 1]; al++)
                    for (int k = 0; k < Rt; k++) {
                        const double pv = P[t - 1][(size_t)al * Rt + k];
                        for (int a = 0; a < qt; a++)
                            for (int kn = 0; kn < Rn; kn++)
                                P[t][((size_t)al * qt + a) * Rn + kn] += pv * sl[t][((size_t)k * qt + a) * Rn + kn];
                    }
            }
            // suffixes Suf_t (R_t x w_t), t = T-1 .. 1; Suf_T = [1]
            Suf[T].assign(1, 1.0);
            for (int t = T - 1; t >= 1; t--) {
                const int Rt = s.R[t], Rn = s.R[t + 1], qt = s.q[t];
                Suf[t].assign((size_t)Rt * w[t], 0.0);
                for (int k = 0; k < Rt; k++)
                    for (int a = 0; a < qt; a++)
                        for (int kn = 0; kn < Rn; kn++) {
                            const double gv = sl[t][((size_t)k * qt + a) * Rn + kn];
                            for (int64_t be = 0; be < w[t + 1]; be++)
                                Suf[t][(size_t)k * w[t] + a * w[t + 1] + be] += gv * Suf[t + 1][(size_t)kn * w[t + 1] + be];
                        }
            }
            // every core's slice gradient
            for (int t = 0; t < T; t++) {
                const int Rt = s.R[t], Rn = s.R[t + 1], qt = s.q[t];
                const int mp = t == 0 ? 1 : s.m[t - 1];
                const int64_t w1 = w[t + 1];
                H.assign((size_t)mp * qt * Rn, 0.0);     // H[alpha, a, k'] = sum_beta g[alpha, a, beta] Suf_{t+1}[k', beta]
                for (int al = 0; al < mp; al++)
                    for (int a = 0; a < qt; a++)
                        for (int kn = 0; kn < Rn; kn++) {
                            double acc = 0.0;
                            for (int64_t be = 0; be < w1; be++)
                                acc += g[((size_t)al * qt + a) * w1 + be] * Suf[t + 1][(size_t)kn * w1 + be];
                            H[((size_t)al * qt + a) * Rn + kn] = acc;
                        }
                double* dst = dG + off[t];
                for (int k = 0; k < Rt; k++)
                    for (int al = 0; al < mp; al++) {
                        const double pv = t == 0 ? 1.0 : P[t - 1][(size_t)al * Rt + k];
                        for (int a = 0; a < qt; a++)
                            for (int kn = 0; kn < Rn; kn++)
                                dst[((size_t)k * qt + a) * Rn + kn] += pv * H[((size_t)al * qt + a) * Rn + kn];
                    }
            }
        }
    }
}

// The pooled forward Y [num_bags, D] by the explicit sum over rank indices (the spec's formula),
// in double from double cores: the tests differentiate <Y(G), dY> with it.
void tt_embedding_backward_forward_cpu(const TtEmbeddingBackwardShape& s, const double* cores, const int64_t* offsets,
                                       const int64_t* indices, double* Y) {
    const int T = s.T;
    std::fill(Y, Y + (int64_t)s.num_bags * s.D, 0.0);
    for (int bag = 0; bag < s.num_bags; bag++) {
        const int tbl = bag / s.B;
        for (int64_t j = offsets[bag]; j < offsets[bag + 1]; j++) {
            int idx[TT_BWD_MAX_T];
            tt_embedding_backward_decode_row(s, indices[j], idx);
            const double* sl[TT_BWD_MAX_T];
            for (int t = 0; t < T; t++) sl[t] = cores + s.core_off[t] + ((int64_t)tbl * s.p[t] + idx[t]) * s.S[t];
            for (int d = 0; d < s.D; d++) {
                int a[TT_BWD_MAX_T];
                int rest = d;
                for (int t = T - 1; t >= 0; t--) { a[t] = rest % s.q[t]; rest /= s.q[t]; }
                int k[TT_BWD_MAX_T + 1] = {0};
                double sum = 0.0;
                for (;;) {
                    double prod = 1.0;
                    for (int t = 0; t < T; t++) prod *= sl[t][((int64_t)k[t] * s.q[t] + a[t]) * s.R[t + 1] + k[t + 1]];
                    sum += prod;
                    int v = 1;
                    while (v < T && ++k[v] == s.R[v]) k[v++] = 0;
                    if (v == T) break;
                }
                Y[(int64_t)bag * s.D + d] += sum;
            }
        }
    }
}

// what a check needs from the reference
struct TtEmbeddingBackwardReference {
    std::vector<double> dG, mag;   // summed gradients and their magnitudes (sum of |terms|), cores' layout
    std::vector<char> touched;     // per slice key: used by at least one lookup
};

TtEmbeddingBackwardReference tt_embedding_backward_reference(const TtEmbeddingBackwardShape& s, const std::vector<float>& cores,
                                               const std::vector<int64_t>& offsets, const std::vector<int64_t>& indices,
                                               const std::vector<float>& dY) {
    TtEmbeddingBackwardReference ref;
    ref.dG.resize((size_t)s.core_off[s.T]);
    ref.mag.resize((size_t)s.core_off[s.T]);
    tt_embedding_backward_cpu(s, cores.data(), offsets.data(), indices.data(), dY.data(), ref.dG.data(), false);
    tt_embedding_backward_cpu(s, cores.data(), offsets.data(), indices.data(), dY.data(), ref.mag.data(), true);
    ref.touched.assign((size_t)s.key_base[s.T], 0);
    for (int bag = 0; bag < s.num_bags; bag++)
        for (int64_t j = offsets[bag]; j < offsets[bag + 1]; j++) {
            int idx[TT_BWD_MAX_T];
            tt_embedding_backward_decode_row(s, indices[j], idx);
            for (int t = 0; t < s.T; t++) ref.touched[(size_t)s.key_base[t] + (bag / s.B) * s.p[t] + idx[t]] = 1;
        }
    return ref;
}

// elements of the slices some lookup touched (for the bytes formula)
int64_t tt_embedding_backward_touched_elems(const TtEmbeddingBackwardShape& s, const TtEmbeddingBackwardReference& ref) {
    int64_t u = 0;
    for (int t = 0; t < s.T; t++)
        for (int k = s.key_base[t]; k < s.key_base[t + 1]; k++) u += ref.touched[k] ? s.S[t] : 0;
    return u;
}

// Per-element check with a tolerance per element (atol + ROUND |ref| + the propagated RTOL_MAG * mag).
ValidateStats tt_embedding_backward_compare(const float* got, const double* ref, const double* tol, size_t n) {
    ValidateStats st;
    st.n = n;
    for (size_t i = 0; i < n; i++) {
        const double g = got[i], r = ref[i];
        bool bad;
        if (!std::isfinite(g)) {
            bad = true;
            st.nonfinite++;
        } else {
            const double abs_err = fabs(g - r);
            st.max_abs = std::max(st.max_abs, abs_err);
            if (fabs(r) > TT_BWD_ATOL) st.max_rel = std::max(st.max_rel, abs_err / fabs(r));
            bad = abs_err > tol[i];
        }
        if (bad) {
            if (st.first_bad.size() < 5) st.first_bad.push_back(i);
            st.failures++;
        }
    }
    return st;
}

// Checks one step's results against the reference: the dense gradient (dense) or the updated cores
// (sgd, adagrad) and state (adagrad), per element with the propagated tolerance; cores unchanged in
// dense mode; and every slice no lookup touched bit-identical (cores, state), or exactly 0 in dG.
// Prints a line per array; returns pass.
bool tt_embedding_backward_check(const TtEmbeddingBackwardShape& s, int opt, float lr, float eps, const TtEmbeddingBackwardReference& ref,
                                 const float* cores0, const float* state0, const float* cores, const float* state,
                                 const float* dG) {
    bool pass = true;
    for (int t = 0; t < s.T; t++) {
        const int64_t n = tt_embedding_backward_core_elems(s, t), off = s.core_off[t];
        std::vector<double> rG(n), tG(n), rS, tS;
        if (opt == TT_BWD_ADAGRAD) { rS.resize(n); tS.resize(n); }
        for (int64_t e = 0; e < n; e++) {
            const double g = ref.dG[off + e], del = TT_BWD_RTOL_MAG * ref.mag[off + e], G0 = cores0[off + e];
            if (opt == TT_BWD_DENSE) {
                rG[e] = g;
                tG[e] = TT_BWD_ATOL + TT_BWD_ROUND * fabs(g) + del;
            } else if (opt == TT_BWD_SGD) {
                rG[e] = G0 - (double)lr * g;
                tG[e] = TT_BWD_ATOL + TT_BWD_ROUND * fabs(rG[e]) + fabs((double)lr) * del;
            } else {
                const double s0 = state0[off + e], s1 = s0 + g * g, u = g / (sqrt(s1) + eps);
                rS[e] = s1;
                tS[e] = TT_BWD_ATOL + TT_BWD_ROUND * s1 + 2.0 * fabs(g) * del + del * del;
                rG[e] = G0 - (double)lr * u;
                // |du/dg| <= 1/sqrt(s0); an fp32 sqrt and divide add a few ulps of u
                const double du = std::min(2.0, del / sqrt(std::max(s0, 1e-30)));
                tG[e] = TT_BWD_ATOL + TT_BWD_ROUND * fabs(rG[e]) + fabs((double)lr) * (du + 4.0 * TT_BWD_ROUND * fabs(u));
            }
        }
        const float* got = (opt == TT_BWD_DENSE ? dG : cores) + off;
        std::vector<float> rG_f(rG.begin(), rG.end());
        char name[32];
        snprintf(name, sizeof name, "%s%d", opt == TT_BWD_DENSE ? "dG" : "G", t);
        ValidateStats st = tt_embedding_backward_compare(got, rG.data(), tG.data(), (size_t)n);
        bool ok = report_validation(name, st, got, rG_f.data(), (float)TT_BWD_ATOL, (float)TT_BWD_RTOL_MAG);
        if (opt == TT_BWD_ADAGRAD) {
            std::vector<float> rS_f(rS.begin(), rS.end());
            snprintf(name, sizeof name, "state%d", t);
            ValidateStats ss = tt_embedding_backward_compare(state + off, rS.data(), tS.data(), (size_t)n);
            ok = report_validation(name, ss, state + off, rS_f.data(), (float)TT_BWD_ATOL, (float)TT_BWD_RTOL_MAG) && ok;
        }
        if (!ok) {
            for (size_t i : st.first_bad) {
                const int64_t slice = (int64_t)i / s.S[t];
                printf("    core %d element %zu = table %lld row %lld slice element %lld\n", t, i, (long long)(slice / s.p[t]),
                       (long long)(slice % s.p[t]), (long long)(i % s.S[t]));
            }
        }
        pass = ok && pass;
    }
    // rows (slices) no lookup touched: bit-identical, and the dense gradient exactly zero there
    int64_t untouched = 0, bad = 0;
    for (int t = 0; t < s.T; t++)
        for (int k = s.key_base[t]; k < s.key_base[t + 1]; k++) {
            const int64_t off = s.core_off[t] + (int64_t)(k - s.key_base[t]) * s.S[t];
            const size_t bytes = (size_t)s.S[t] * sizeof(float);
            bool same = true;
            if (opt == TT_BWD_DENSE || !ref.touched[k]) same = memcmp(cores + off, cores0 + off, bytes) == 0;
            if (!ref.touched[k]) {
                untouched++;
                if (opt == TT_BWD_ADAGRAD) same = same && memcmp(state + off, state0 + off, bytes) == 0;
                if (opt == TT_BWD_DENSE)
                    for (int e = 0; e < s.S[t]; e++) same = same && dG[off + e] == 0.0f;
            }
            if (!same) {
                if (bad < 5)
                    printf("    core %d slice %d (table %d row %d) %s\n", t, k - s.key_base[t], (k - s.key_base[t]) / s.p[t],
                           (k - s.key_base[t]) % s.p[t],
                           ref.touched[k] ? "changed in dense mode" : "untouched by lookups but changed (or dG != 0)");
                bad++;
            }
        }
    if (bad) {
        printf("  untouched        FAIL  %lld slices changed that must stay bit-identical\n", (long long)bad);
        pass = false;
    } else {
        printf("  untouched        ok    (%lld of %d slices untouched by lookups: bit-identical%s)\n", (long long)untouched,
               s.key_base[s.T], opt == TT_BWD_DENSE ? "; cores unchanged, dG zero there" : "");
    }
    return pass;
}

// ----------------------------------------------------------------------------------------------
// device building blocks. Kernels are thin: the per-thread and per-block work lives in
// __host__ __device__ functions that the CPU test runs too (one block emulated thread by thread,
// phase by phase), so the index math of every version is checked without a GPU.

__host__ __device__ inline void tt_embedding_backward_atomic_add(float* p, float v) {
#ifdef __CUDA_ARCH__
    atomicAdd(p, v);
#else
    *p += v;
#endif
}

// the bag of lookup n: the last b with offsets[b] <= n (empty bags share offsets)
__host__ __device__ inline int tt_embedding_backward_bag_of(const int64_t* offsets, int num_bags, int64_t n) {
    int lo = 0, hi = num_bags - 1;
    while (lo < hi) {
        const int mid = lo + (hi - lo + 1) / 2;
        if (offsets[mid] <= n) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

// first position in a sorted int array with a[pos] >= key
__host__ __device__ inline int tt_embedding_backward_lower_bound(const int* a, int n, int key) {
    int lo = 0, hi = n;
    while (lo < hi) {
        const int mid = lo + (hi - lo) / 2;
        if (a[mid] < key) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

// The optimizer on one element, given its summed gradient (used by the optimizer pass of versions 1-3
// and the fused reduction of versions 4-5, so all apply the same fp32 arithmetic).
__host__ __device__ inline void tt_embedding_backward_apply(int opt, float lr, float eps, float* G, float* st, float* dG,
                                                            int64_t i, float grad) {
    if (opt == TT_BWD_DENSE) {
        dG[i] = grad;
    } else if (opt == TT_BWD_SGD) {
        G[i] -= lr * grad;
    } else {
        const float s = st[i] + grad * grad;
        st[i] = s;
        G[i] -= lr * grad / (sqrtf(s) + eps);
    }
}

// The optimizer pass of versions 1-3: every element of the cores' buffer (padding included, where dG
// is 0 and nothing changes) by a grid-stride loop, so no row can be missed whatever p_t is.
// An untouched element has dG = 0: G - lr*0 and s + 0*0 are bit-identical to G and s.
__global__ void tt_embedding_backward_optimizer_kernel(int64_t total, int opt, float lr, float eps, float* cores,
                                                       float* state, const float* dG) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x)
        tt_embedding_backward_apply(opt, lr, eps, cores, state, nullptr, i, dG[i]);
}

// grid of the optimizer pass (host; the test emulates it to show every element is covered)
inline unsigned tt_embedding_backward_optimizer_grid(int64_t total, int block) {
    return (unsigned)std::max<int64_t>(1, std::min<int64_t>(ceil_div<int64_t>(total, block), 8192));
}

// ---- version 1 ---------------------------------------------------------------------------------

// One (lookup, core t, slice element (k, a, k')) of thread `gid`: the explicit sum, over every digit
// a_j (j != t) and every rank index k_j (j != t, t+1), of dY[bag][d(a)] * prod_{j != t} G_j[i_j][k_j, a_j, k_{j+1}].
__host__ __device__ inline void tt_embedding_backward_naive_element(const TtEmbeddingBackwardShape& s, int64_t gid, int Ssum,
                                                                    const int64_t* offsets, const int64_t* indices,
                                                                    const float* cores, const float* dY, float* dG) {
    const int T = s.T;
    const int64_t n = gid / Ssum;
    int r = (int)(gid - n * Ssum), t = 0;
    while (r >= s.S[t]) { r -= s.S[t]; t++; }
    const int bag = tt_embedding_backward_bag_of(offsets, s.num_bags, n);
    const int tbl = bag / s.B;
    int idx[TT_BWD_MAX_T];
    tt_embedding_backward_decode_row(s, indices[n], idx);
    int64_t off[TT_BWD_MAX_T];
    for (int j = 0; j < T; j++) off[j] = s.core_off[j] + ((int64_t)tbl * s.p[j] + idx[j]) * s.S[j];
    int a[TT_BWD_MAX_T] = {0}, k[TT_BWD_MAX_T + 1] = {0};
    k[t] = r / s.n[t];
    a[t] = (r % s.n[t]) / s.R[t + 1];
    k[t + 1] = r % s.R[t + 1];
    const float* g = dY + (int64_t)bag * s.D;
    float sum = 0.0f;
    for (;;) {
        int d = 0;
        for (int j = 0; j < T; j++) d = d * s.q[j] + a[j];
        float term = g[d];
        for (int j = 0; j < T; j++)
            if (j != t) term *= cores[off[j] + ((int64_t)k[j] * s.q[j] + a[j]) * s.R[j + 1] + k[j + 1]];
        sum += term;
        // odometer over the free indices: digits first, then inner ranks
        bool done = true;
        for (int j = 0; j < T && done; j++) {
            if (j == t) continue;
            if (++a[j] < s.q[j]) done = false;
            else a[j] = 0;
        }
        for (int j = 1; j < T && done; j++) {
            if (j == t || j == t + 1) continue;
            if (++k[j] < s.R[j]) done = false;
            else k[j] = 0;
        }
        if (done) break;
    }
    tt_embedding_backward_atomic_add(dG + off[t] + r, sum);
}

__global__ void tt_embedding_backward_kernel1(const __grid_constant__ TtEmbeddingBackwardShape s, int Ssum, const int64_t* offsets,
                                              const int64_t* indices, const float* cores, const float* dY, float* dG) {
    const int64_t total = (int64_t)s.nnz * Ssum;
    for (int64_t gid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; gid < total; gid += (int64_t)gridDim.x * blockDim.x)
        tt_embedding_backward_naive_element(s, gid, Ssum, offsets, indices, cores, dY, dG);
}

// explicit-sum terms of version 1 per lookup (its skip rule and a measure of its waste)
inline double tt_embedding_backward_naive_terms(const TtEmbeddingBackwardShape& s) {
    double total = 0.0;
    for (int t = 0; t < s.T; t++) {
        double free = 1.0;
        for (int j = 0; j < s.T; j++) if (j != t) free *= s.q[j];
        for (int j = 1; j < s.T; j++) if (j != t && j != t + 1) free *= s.R[j];
        total += (double)s.S[t] * free;
    }
    return total;
}

// ---- version 2: FBTT's pipeline ---------------------------------------------------------------

// Per chunk of lookups, pointer arrays for one cublasGemmBatchedEx per GEMM of the chain:
//   forward t = 0..T-3:  P_{t+1} = P_t . G_{t+1}             slots 3t + {A, B, C}
//   grad t = T-1..1:     dG_t    = P_{t-1}^T . dM_t          slots 3(T-2) + 6(t-1) + {0, 1, 2}
//   dm t = T-1..1:       dM_{t-1} = dM_t . G_t^T             slots 3(T-2) + 6(t-1) + {3, 4, 5}
// P_0 is core 0's slice itself, dM_{T-1} the dY row; dM_t (1 <= t <= T-2) overwrites P_t in place
// (P_t is read by grad t+1, which runs before dm t+1 writes dM_t), and dM_0 is core 0's gradient.
struct TtEmbeddingBackwardFbttBufs {
    float* P[TT_BWD_MAX_T];     // t = 1..T-2: [chunk, m_t R_{t+1}]
    float* trG[TT_BWD_MAX_T];   // t = 0..T-1: [chunk, S_t] per-lookup slice gradients
};

inline int tt_embedding_backward_fbtt_slots(int T) { return 3 * (T - 2) + 6 * (T - 1); }

struct TtEmbeddingBackwardBlasCall {
    cublasOperation_t ta, tb;
    int m, n, k, lda, ldb, ldc, slot_a, slot_b, slot_c;
};

// cuBLAS is column-major: a row-major r x c matrix is a column-major c x r one with ld = c, so each
// row-major product X = Y . Z is issued as X^T = Z^T . Y^T.
//   kind 0 (forward t): P_{t+1}^T (n_{t+1} x m_t) = G^T (n_{t+1} x R_{t+1}) . P_t^T        N, N
//   kind 1 (grad t):    dG_t^T (n_t x R_t)        = dM_t^T (n_t x m_{t-1}) . P_{t-1}        N, T
//   kind 2 (dm t):      dM_{t-1}^T (R_t x m_{t-1}) = G_t (R_t x n_t) . dM_t^T               T, N
inline TtEmbeddingBackwardBlasCall tt_embedding_backward_fbtt_call(const TtEmbeddingBackwardShape& s, int kind, int t) {
    TtEmbeddingBackwardBlasCall c;
    if (kind == 0) {
        c.ta = CUBLAS_OP_N; c.tb = CUBLAS_OP_N;
        c.m = s.n[t + 1]; c.n = s.m[t]; c.k = s.R[t + 1];
        c.lda = s.n[t + 1]; c.ldb = s.R[t + 1]; c.ldc = s.n[t + 1];
        c.slot_a = 3 * t; c.slot_b = 3 * t + 1; c.slot_c = 3 * t + 2;
    } else {
        const int base = 3 * (s.T - 2) + 6 * (t - 1);
        if (kind == 1) {
            c.ta = CUBLAS_OP_N; c.tb = CUBLAS_OP_T;
            c.m = s.n[t]; c.n = s.R[t]; c.k = s.m[t - 1];
            c.lda = s.n[t]; c.ldb = s.R[t]; c.ldc = s.n[t];
            c.slot_a = base; c.slot_b = base + 1; c.slot_c = base + 2;
        } else {
            c.ta = CUBLAS_OP_T; c.tb = CUBLAS_OP_N;
            c.m = s.R[t]; c.n = s.m[t - 1]; c.k = s.n[t];
            c.lda = s.n[t]; c.ldb = s.n[t]; c.ldc = s.R[t];
            c.slot_a = base + 3; c.slot_b = base + 4; c.slot_c = base + 5;
        }
    }
    return c;
}

// the pointer-array entries of lookup `start + nl` (nl-th of its chunk); rows[t*chunk + nl] = tbl*p_t + i_t
__host__ __device__ inline void tt_embedding_backward_fbtt_setup_lookup(const TtEmbeddingBackwardShape& s, int64_t start, int nl,
                                                                        int chunk, const int64_t* offsets,
                                                                        const int64_t* indices, const float* cores,
                                                                        const float* dY, const TtEmbeddingBackwardFbttBufs& bufs,
                                                                        float** ptrs, int* rows) {
    const int T = s.T;
    const int64_t j = start + nl;
    const int bag = tt_embedding_backward_bag_of(offsets, s.num_bags, j);
    const int tbl = bag / s.B;
    int idx[TT_BWD_MAX_T];
    tt_embedding_backward_decode_row(s, indices[j], idx);
    float* sl[TT_BWD_MAX_T] = {};
    float* P[TT_BWD_MAX_T] = {};
    float* dM[TT_BWD_MAX_T] = {};
    for (int t = 0; t < T; t++) {
        const int row = tbl * s.p[t] + idx[t];
        rows[t * chunk + nl] = row;
        sl[t] = const_cast<float*>(cores) + s.core_off[t] + (int64_t)row * s.S[t];
    }
    P[0] = sl[0];
    for (int t = 1; t <= T - 2; t++) P[t] = bufs.P[t] + (int64_t)nl * s.m[t] * s.R[t + 1];
    dM[T - 1] = const_cast<float*>(dY) + (int64_t)bag * s.D;
    for (int t = 1; t <= T - 2; t++) dM[t] = P[t];
    dM[0] = bufs.trG[0] + (int64_t)nl * s.S[0];
    for (int t = 0; t <= T - 3; t++) {
        ptrs[(3 * t + 0) * chunk + nl] = sl[t + 1];
        ptrs[(3 * t + 1) * chunk + nl] = P[t];
        ptrs[(3 * t + 2) * chunk + nl] = P[t + 1];
    }
    for (int t = 1; t <= T - 1; t++) {
        const int base = 3 * (T - 2) + 6 * (t - 1);
        ptrs[(base + 0) * chunk + nl] = dM[t];
        ptrs[(base + 1) * chunk + nl] = P[t - 1];
        ptrs[(base + 2) * chunk + nl] = bufs.trG[t] + (int64_t)nl * s.S[t];
        ptrs[(base + 3) * chunk + nl] = sl[t];
        ptrs[(base + 4) * chunk + nl] = dM[t];
        ptrs[(base + 5) * chunk + nl] = dM[t - 1];
    }
}

__global__ void tt_embedding_backward_kernel2_setup(const __grid_constant__ TtEmbeddingBackwardShape s, int64_t start, int N, int chunk,
                                                    const int64_t* offsets, const int64_t* indices, const float* cores,
                                                    const float* dY, const __grid_constant__ TtEmbeddingBackwardFbttBufs bufs,
                                                    float** ptrs, int* rows) {
    const int nl = blockIdx.x * blockDim.x + threadIdx.x;
    if (nl < N) tt_embedding_backward_fbtt_setup_lookup(s, start, nl, chunk, offsets, indices, cores, dY, bufs, ptrs, rows);
}

// the scatter: dG_t[row of lookup nl] += trG_t[nl], one atomicAdd per element (as FBTT)
__host__ __device__ inline void tt_embedding_backward_fbtt_scatter_element(const TtEmbeddingBackwardShape& s, int t, int64_t i,
                                                                           const int* rows_t, const float* trG_t,
                                                                           float* dG) {
    const int64_t nl = i / s.S[t], e = i - nl * s.S[t];
    tt_embedding_backward_atomic_add(dG + s.core_off[t] + (int64_t)rows_t[nl] * s.S[t] + e, trG_t[i]);
}

__global__ void tt_embedding_backward_kernel2_scatter(const __grid_constant__ TtEmbeddingBackwardShape s, int t, int N, const int* rows_t,
                                                      const float* trG_t, float* dG) {
    const int64_t total = (int64_t)N * s.S[t];
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x)
        tt_embedding_backward_fbtt_scatter_element(s, t, i, rows_t, trG_t, dG);
}

// ---- versions 3-5: the chain in shared memory ----------------------------------------------------

// Shared-memory layout of a fused block (host-built; in floats, every region 16-byte aligned):
//   [pivot slice R_c x PS_c][pivot accumulator S_c]     (versions 4-5; none in version 3)
//   nb x per-lookup: [slices of the other cores, row pitch PS_t][g: D][P_t, dM_t for t = 1..T-2]
//   nb x 8 ints: lookup id, bag, slice row tbl*p_t + i_t of each core
// A slice row's pitch PS_t is n_t rounded up to odd: dM_{t-1} = dM_t . G_t^T reads G_t down its
// columns, and an odd pitch puts 32 consecutive rows in 32 different banks.
struct TtEmbeddingBackwardLayout {
    int nb, pivot, tiled;                  // lookups per batch; pivot core or -1; register tiles (version 5)
    int PS[TT_BWD_MAX_T];                  // slice row pitch in shared memory
    int sl_off[TT_BWD_MAX_T];              // slice offset: in the shared region (pivot) or in a lookup's region
    int g_off, P_off[TT_BWD_MAX_T], dM_off[TT_BWD_MAX_T];   // in a lookup's region
    int acc_off, shared_floats, lookup_floats, int_off, total_floats;
};
#define TT_BWD_INTS 8

inline int tt_embedding_backward_round4(int64_t x) { return (int)((x + 3) / 4 * 4); }

inline TtEmbeddingBackwardLayout tt_embedding_backward_make_layout(const TtEmbeddingBackwardShape& s, int pivot, int nb, int tiled) {
    TtEmbeddingBackwardLayout L;
    memset(&L, 0, sizeof L);
    L.nb = nb; L.pivot = pivot; L.tiled = tiled;
    for (int t = 0; t < s.T; t++) L.PS[t] = s.R[t] == 1 ? s.n[t] : (s.n[t] | 1);
    int cur = 0;
    if (pivot >= 0) {
        L.sl_off[pivot] = cur;
        cur += tt_embedding_backward_round4((int64_t)s.R[pivot] * L.PS[pivot]);
        L.acc_off = cur;
        cur += tt_embedding_backward_round4(s.S[pivot]);
    }
    L.shared_floats = cur;
    cur = 0;
    for (int t = 0; t < s.T; t++) {
        if (t == pivot) continue;
        L.sl_off[t] = cur;
        cur += tt_embedding_backward_round4((int64_t)s.R[t] * L.PS[t]);
    }
    L.g_off = cur;
    cur += tt_embedding_backward_round4(s.D);
    for (int t = 1; t <= s.T - 2; t++) {
        L.P_off[t] = cur;
        cur += tt_embedding_backward_round4((int64_t)s.m[t] * s.R[t + 1]);
        L.dM_off[t] = cur;
        cur += tt_embedding_backward_round4((int64_t)s.m[t] * s.R[t + 1]);
    }
    L.lookup_floats = cur;
    L.int_off = L.shared_floats + nb * L.lookup_floats;
    L.total_floats = L.int_off + tt_embedding_backward_round4(nb * TT_BWD_INTS);
    return L;
}
inline size_t tt_embedding_backward_smem_bytes(const TtEmbeddingBackwardLayout& L) { return (size_t)L.total_floats * sizeof(float); }

// One small GEMM of a batch of lookups, all operands in shared memory except a global destination:
//   C(b, i, j) (mode)= sum_k A(b, i, k) B(b, k, j),  i < M, j < N, k < K, b < nb
//   A(b, i, k) = A[b*a_bs + i*a_rs + k*a_cs], B(b, k, j) = B[b*b_bs + k*b_rs + j*b_cs]
//   C(b, i, j) = C[cb*c_bs + i*c_rs + j*c_cs], cb = c_bidx ? c_bidx[b*TT_BWD_INTS] : b
// sum_batches: one C for the whole batch, C(i, j) (mode)= sum_b sum_k A(b,i,k) B(b,k,j).
enum { TT_BWD_STORE = 0, TT_BWD_ACCUM = 1, TT_BWD_ATOMIC = 2 };
struct TtEmbeddingBackwardGemm {
    int M, N, K;
    const float* A; int a_bs, a_rs, a_cs;
    const float* B; int b_bs, b_rs, b_cs;
    float* C; int64_t c_bs; int c_rs, c_cs; const int* c_bidx;
    int mode, sum_batches, tile;
};

// The largest square register tile (4, 2 or 1) whose tile count still gives every thread one
// (version 5); versions 3-4 compute one output per unit.
__host__ __device__ inline int tt_embedding_backward_pick_tile(int M, int N, int mult, int nt, int tiled) {
    if (!tiled) return 1;
    for (int tl = 4; tl >= 2; tl /= 2)
        if ((int64_t)mult * ((M + tl - 1) / tl) * ((N + tl - 1) / tl) >= nt) return tl;
    return 1;
}

__host__ __device__ inline int tt_embedding_backward_units(const TtEmbeddingBackwardGemm& g, int nb) {
    return (g.sum_batches ? 1 : nb) * ((g.M + g.tile - 1) / g.tile) * ((g.N + g.tile - 1) / g.tile);
}

// One unit: a TM x TN tile of outputs. Rows are consecutive (i = TM*rt + r); columns are strided
// (j = ct + c*tiles_n), so the lanes of a warp, which take consecutive ct, read consecutive columns
// of B (bank-conflict free) and share their A rows (broadcast). Out-of-range rows and columns are
// clamped for the loads and skipped for the stores.
template <int TM, int TN>
__host__ __device__ __forceinline__ void tt_embedding_backward_tile(const TtEmbeddingBackwardGemm& g, int nb, int unit) {
    const int tiles_n = (g.N + TN - 1) / TN, tiles_m = (g.M + TM - 1) / TM, per = tiles_m * tiles_n;
    const int b = g.sum_batches ? 0 : unit / per;
    const int tl = unit - b * per, rt = tl / tiles_n, ct = tl - rt * tiles_n;
    int arow[TM], bcol[TN];
TT_BWD_UNROLL
    for (int r = 0; r < TM; r++) arow[r] = min(rt * TM + r, g.M - 1) * g.a_rs;
TT_BWD_UNROLL
    for (int c = 0; c < TN; c++) bcol[c] = min(ct + c * tiles_n, g.N - 1) * g.b_cs;
    float acc[TM][TN];
TT_BWD_UNROLL
    for (int r = 0; r < TM; r++)
TT_BWD_UNROLL
        for (int c = 0; c < TN; c++) acc[r][c] = 0.0f;
    const int b_lo = g.sum_batches ? 0 : b, b_hi = g.sum_batches ? nb : b + 1;
    for (int bb = b_lo; bb < b_hi; bb++) {
        const float* A = g.A + bb * g.a_bs;
        const float* B = g.B + bb * g.b_bs;
TT_BWD_UNROLL4
        for (int k = 0; k < g.K; k++) {
            float av[TM], bv[TN];
TT_BWD_UNROLL
            for (int r = 0; r < TM; r++) av[r] = A[arow[r] + k * g.a_cs];
TT_BWD_UNROLL
            for (int c = 0; c < TN; c++) bv[c] = B[k * g.b_rs + bcol[c]];
TT_BWD_UNROLL
            for (int r = 0; r < TM; r++)
TT_BWD_UNROLL
                for (int c = 0; c < TN; c++) acc[r][c] = fmaf(av[r], bv[c], acc[r][c]);
        }
    }
    float* C = g.C + (g.c_bidx ? (int64_t)g.c_bidx[b * TT_BWD_INTS] : (int64_t)b) * g.c_bs;
TT_BWD_UNROLL
    for (int r = 0; r < TM; r++) {
        const int i = rt * TM + r;
        if (i >= g.M) break;
TT_BWD_UNROLL
        for (int c = 0; c < TN; c++) {
            const int j = ct + c * tiles_n;
            if (j >= g.N) break;
            float* dst = C + (int64_t)i * g.c_rs + (int64_t)j * g.c_cs;
            if (g.mode == TT_BWD_STORE) *dst = acc[r][c];
            else if (g.mode == TT_BWD_ACCUM) *dst += acc[r][c];
            else tt_embedding_backward_atomic_add(dst, acc[r][c]);
        }
    }
}

// TILED = 0 compiles only the one-output unit (versions 3-4: fewer registers), 1 all three tiles
template <int TILED>
__host__ __device__ __forceinline__ void tt_embedding_backward_run_unit(const TtEmbeddingBackwardGemm& g, int nb, int unit) {
    if (TILED && g.tile == 4) tt_embedding_backward_tile<4, 4>(g, nb, unit);
    else if (TILED && g.tile == 2) tt_embedding_backward_tile<2, 2>(g, nb, unit);
    else tt_embedding_backward_tile<1, 1>(g, nb, unit);
}

// Where the slice gradients of the non-pivot cores go: version 3 atomically adds them into the dense
// dG (base = dG, off = core_off, per lookup its slice row); versions 4-5 store them into the workspace
// W (base = W, off = W_off, per lookup its id).
struct TtEmbeddingBackwardDest {
    float* base;
    const int64_t* off;      // [T]: points at the block's shared copy of core_off or W_off
    int use_rows, atomic;
};

// One phase of the chain for the batch's nb lookups, thread tid of nt. Phases:
//   ph < T-2:   forward t = ph:   P_{t+1} = P_t . G_{t+1}
//   otherwise:  backward t = T-1 - (ph - (T-2)), two independent GEMMs sharing the phase's units:
//               dG_t = P_{t-1}^T . dM_t   and   dM_{t-1} = dM_t . G_t^T  (dM_0 is core 0's gradient)
// The pivot core's gradient is summed over the batch into the shared accumulator (sum_batches: the
// thread that owns an element adds every lookup's term in order).
template <int TILED>
__host__ __device__ inline void tt_embedding_backward_chain_phase(const TtEmbeddingBackwardShape& s, const TtEmbeddingBackwardLayout& L, float* sm,
                                                                  int ph, int nb, int tid, int nt, const TtEmbeddingBackwardDest& dst) {
    const int T = s.T, LB = L.lookup_floats;
    float* lk = sm + L.shared_floats;                      // lookup 0's region; lookup b at + b*LB
    const int* ints = (const int*)(sm + L.int_off);
    auto slice = [&](int t, const float*& p, int& bs) {
        if (t == L.pivot) { p = sm + L.sl_off[t]; bs = 0; }
        else { p = lk + L.sl_off[t]; bs = LB; }
    };
    // the destination of core u's slice gradient, a dense R_u x n_u (for u = 0: q_0 x R_1) block
    auto grad_dest = [&](TtEmbeddingBackwardGemm& g, int u, int row_len) {
        g.c_rs = row_len; g.c_cs = 1;
        if (u == L.pivot) {
            g.C = sm + L.acc_off; g.c_bs = 0; g.c_bidx = nullptr; g.mode = TT_BWD_ACCUM; g.sum_batches = 1;
        } else {
            g.C = dst.base + dst.off[u]; g.c_bs = s.S[u]; g.c_bidx = ints + (dst.use_rows ? 2 + u : 0);
            g.mode = dst.atomic ? TT_BWD_ATOMIC : TT_BWD_STORE; g.sum_batches = 0;
        }
    };
    TtEmbeddingBackwardGemm g0 = {}, g1 = {};
    int ng;
    if (ph < T - 2) {
        const int t = ph;
        TtEmbeddingBackwardGemm& f = g0;
        f.M = s.m[t]; f.N = s.n[t + 1]; f.K = s.R[t + 1];
        if (t == 0) slice(0, f.A, f.a_bs);
        else { f.A = lk + L.P_off[t]; f.a_bs = LB; }
        f.a_rs = s.R[t + 1]; f.a_cs = 1;
        slice(t + 1, f.B, f.b_bs);
        f.b_rs = L.PS[t + 1]; f.b_cs = 1;
        f.C = lk + L.P_off[t + 1]; f.c_bs = LB; f.c_rs = s.n[t + 1]; f.c_cs = 1; f.c_bidx = nullptr;
        f.mode = TT_BWD_STORE; f.sum_batches = 0;
        ng = 1;
    } else {
        const int t = T - 1 - (ph - (T - 2));
        const float* dMt = lk + (t == T - 1 ? L.g_off : L.dM_off[t]);   // m_{t-1} x n_t, dense
        TtEmbeddingBackwardGemm& a = g0;                                               // dG_t = P_{t-1}^T . dM_t
        a.M = s.R[t]; a.N = s.n[t]; a.K = s.m[t - 1];
        if (t - 1 == 0) slice(0, a.A, a.a_bs);
        else { a.A = lk + L.P_off[t - 1]; a.a_bs = LB; }
        a.a_rs = 1; a.a_cs = s.R[t];
        a.B = dMt; a.b_bs = LB; a.b_rs = s.n[t]; a.b_cs = 1;
        grad_dest(a, t, s.n[t]);
        TtEmbeddingBackwardGemm& d = g1;                                               // dM_{t-1} = dM_t . G_t^T
        d.M = s.m[t - 1]; d.N = s.R[t]; d.K = s.n[t];
        d.A = dMt; d.a_bs = LB; d.a_rs = s.n[t]; d.a_cs = 1;
        slice(t, d.B, d.b_bs);
        d.b_rs = 1; d.b_cs = L.PS[t];
        if (t - 1 >= 1) {
            d.C = lk + L.dM_off[t - 1]; d.c_bs = LB; d.c_rs = s.R[t]; d.c_cs = 1; d.c_bidx = nullptr;
            d.mode = TT_BWD_STORE; d.sum_batches = 0;
        } else {
            grad_dest(d, 0, s.R[1]);
        }
        ng = 2;
    }
    // the phase's units: g0's, then g1's, dealt round-robin to the nt threads
    g0.tile = tt_embedding_backward_pick_tile(g0.M, g0.N, g0.sum_batches ? 1 : nb, nt, TILED);
    const int u0 = tt_embedding_backward_units(g0, nb);
    int u1 = 0;
    if (ng == 2) {
        g1.tile = tt_embedding_backward_pick_tile(g1.M, g1.N, g1.sum_batches ? 1 : nb, nt, TILED);
        u1 = tt_embedding_backward_units(g1, nb);
    }
    int u = tid;
    for (; u < u0; u += nt) tt_embedding_backward_run_unit<TILED>(g0, nb, u);
    for (; u < u0 + u1; u += nt) tt_embedding_backward_run_unit<TILED>(g1, nb, u - u0);
}

// The batch's ints: thread b < nbb decodes lookup ids[b] (or first + b when ids is null)
__host__ __device__ inline void tt_embedding_backward_decode_batch(const TtEmbeddingBackwardShape& s, const TtEmbeddingBackwardLayout& L, float* sm,
                                                                   int nbb, int tid, const int* ids, int first,
                                                                   const int64_t* indices, const int* bag_of) {
    if (tid >= nbb) return;
    const int lid = ids ? ids[tid] : first + tid;
    const int bag = bag_of[lid], tbl = bag / s.B;
    int idx[TT_BWD_MAX_T];
    tt_embedding_backward_decode_row(s, indices[lid], idx);
    int* si = (int*)(sm + L.int_off) + tid * TT_BWD_INTS;
    si[0] = lid;
    si[1] = bag;
TT_BWD_UNROLL
    for (int t = 0; t < TT_BWD_MAX_T; t++) {
        if (t >= s.T) break;
        si[2 + t] = tbl * s.p[t] + idx[t];
    }
}

// The batch's slices (all but the pivot's) and dY rows into shared memory
__host__ __device__ inline void tt_embedding_backward_load_batch(const TtEmbeddingBackwardShape& s, const TtEmbeddingBackwardLayout& L, float* sm,
                                                                 int nbb, int tid, int nt, const float* cores,
                                                                 const float* dY) {
    const int* ints = (const int*)(sm + L.int_off);
    for (int b = 0; b < nbb; b++) {
        float* lk = sm + L.shared_floats + b * L.lookup_floats;
        for (int t = 0; t < s.T; t++) {
            if (t == L.pivot) continue;
            const float* src = cores + s.core_off[t] + (int64_t)ints[b * TT_BWD_INTS + 2 + t] * s.S[t];
            float* d = lk + L.sl_off[t];
            const int nr = s.n[t], ps = L.PS[t];
            for (int e = tid; e < s.S[t]; e += nt) {
                const int k = e / nr;
                d[k * ps + (e - k * nr)] = src[e];
            }
        }
        const float* g = dY + (int64_t)ints[b * TT_BWD_INTS + 1] * s.D;
        for (int e = tid; e < s.D; e += nt) lk[L.g_off + e] = g[e];
    }
}

// Block executors: a block program calls ex.phase(f) for each step between barriers. On the GPU each
// thread runs f(threadIdx.x) and meets the others at __syncthreads(); the CPU test's executor runs f
// for every thread id in turn, which is the same computation when no phase reads what another thread
// writes in that phase (the rule the programs below keep).
struct TtEmbeddingBackwardDeviceExec {
    int tid, nt;
    template <class F>
    __host__ __device__ void phase(F&& f) {
        f(tid);
#ifdef __CUDA_ARCH__
        __syncthreads();
#endif
    }
};

// Version 3's block program: lookups first, first + nb*nblocks, ...; each phase's GEMMs atomically add
// the slice gradients into the dense dG.
template <class Exec>
__host__ __device__ void tt_embedding_backward_fused_block(Exec& ex, const TtEmbeddingBackwardShape& s, const TtEmbeddingBackwardLayout& L,
                                                           float* sm, int block, int nblocks, const int64_t* indices,
                                                           const int* bag_of, const float* cores, const float* dY,
                                                           float* dG) {
    TtEmbeddingBackwardDest dst;
    dst.base = dG;
    dst.off = s.core_off;
    dst.use_rows = 1;
    dst.atomic = 1;
    for (int64_t first = (int64_t)block * L.nb; first < s.nnz; first += (int64_t)nblocks * L.nb) {
        const int nbb = (int)min((int64_t)L.nb, (int64_t)s.nnz - first);
        ex.phase([&](int tid) { tt_embedding_backward_decode_batch(s, L, sm, nbb, tid, nullptr, (int)first, indices, bag_of); });
        ex.phase([&](int tid) { tt_embedding_backward_load_batch(s, L, sm, nbb, tid, ex.nt, cores, dY); });
        for (int ph = 0; ph < 2 * s.T - 3; ph++)
            ex.phase([&](int tid) { tt_embedding_backward_chain_phase<0>(s, L, sm, ph, nbb, tid, ex.nt, dst); });
    }
}

extern __shared__ float4 tt_embedding_backward_smem[];

__global__ void __launch_bounds__(TT_BWD_MAX_FUSED_BLOCK)
tt_embedding_backward_kernel3(const TtEmbeddingBackwardShape shape, const TtEmbeddingBackwardLayout lay, const int64_t* indices, const int* bag_of,
                              const float* cores, const float* dY, float* dG) {
    __shared__ TtEmbeddingBackwardShape s;
    __shared__ TtEmbeddingBackwardLayout L;
    if (threadIdx.x == 0) { s = shape; L = lay; }
    __syncthreads();
    TtEmbeddingBackwardDeviceExec ex{(int)threadIdx.x, (int)blockDim.x};
    tt_embedding_backward_fused_block(ex, s, L, (float*)tt_embedding_backward_smem, blockIdx.x, gridDim.x, indices,
                                      bag_of, cores, dY, dG);
}

// ---- versions 4-5: sorted segments, pivot chunks, fused optimizer -------------------------------

// Lookup j of bag `bag`: its bag id and, for the sort, one (key, j) pair per core (core t's pairs at t*nnz + j)
__host__ __device__ inline void tt_embedding_backward_decode_lookup(const TtEmbeddingBackwardShape& s, int bag, int j,
                                                                    const int64_t* indices, int* bag_of, int* keys,
                                                                    int* vals) {
    bag_of[j] = bag;
    if (!keys) return;
    const int tbl = bag / s.B;
    int idx[TT_BWD_MAX_T];
    tt_embedding_backward_decode_row(s, indices[j], idx);
TT_BWD_UNROLL
    for (int t = 0; t < TT_BWD_MAX_T; t++) {
        if (t >= s.T) break;
        keys[(int64_t)t * s.nnz + j] = s.key_base[t] + tbl * s.p[t] + idx[t];
        vals[(int64_t)t * s.nnz + j] = j;
    }
}

// one warp per bag, its lanes over the bag's lookups (versions 3-5; keys only for 4-5)
__global__ void tt_embedding_backward_bags_kernel(const __grid_constant__ TtEmbeddingBackwardShape s, const int64_t* offsets,
                                                  const int64_t* indices, int* bag_of, int* keys, int* vals) {
    const int lane = threadIdx.x & 31;
    const int64_t nwarps = ((int64_t)gridDim.x * blockDim.x) >> 5;
    for (int64_t bag = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; bag < s.num_bags; bag += nwarps)
        for (int64_t j = offsets[bag] + lane; j < offsets[bag + 1]; j += 32)
            tt_embedding_backward_decode_lookup(s, (int)bag, (int)j, indices, bag_of, keys, vals);
}

// what the pivot scheme needs besides the shape
struct TtEmbeddingBackwardPivot {
    int pivot, chunk;                 // pivot core, lookups per pivot block
    int64_t W_off[TT_BWD_MAX_T];      // core t's [nnz, S_t] block in the workspace W (t != pivot)
};

// Slice key `key` (0..K_total; K_total writes the scan's sentinel): its run [lo, hi) in the sorted
// keys, and for a pivot slice its number of chunks of `chunk` lookups.
__host__ __device__ inline void tt_embedding_backward_segment_key(const TtEmbeddingBackwardShape& s, const TtEmbeddingBackwardPivot& pv, int key,
                                                                  const int* sorted_keys, int* seg_lo, int* seg_hi,
                                                                  int* chunk_count) {
    const int Kc = s.tables * s.p[pv.pivot];
    if (key == s.key_base[s.T]) { chunk_count[Kc] = 0; return; }
    const int N = s.T * s.nnz;
    const int lo = tt_embedding_backward_lower_bound(sorted_keys, N, key);
    const int hi = tt_embedding_backward_lower_bound(sorted_keys, N, key + 1);
    seg_lo[key] = lo;
    seg_hi[key] = hi;
    const int local = key - s.key_base[pv.pivot];
    if (local >= 0 && local < Kc) chunk_count[local] = (hi - lo + pv.chunk - 1) / pv.chunk;
}

__global__ void tt_embedding_backward_segments_kernel(const __grid_constant__ TtEmbeddingBackwardShape s,
                                                      const __grid_constant__ TtEmbeddingBackwardPivot pv, const int* sorted_keys,
                                                      int* seg_lo, int* seg_hi, int* chunk_count) {
    const int key = blockIdx.x * blockDim.x + threadIdx.x;
    if (key <= s.key_base[s.T]) tt_embedding_backward_segment_key(s, pv, key, sorted_keys, seg_lo, seg_hi, chunk_count);
}

// Version 4-5's block program: block `block` takes chunk j of pivot slice `key` (found by a binary
// search of the chunk offsets), loads the pivot slice once, zeroes the accumulator, runs the chains of
// its lookups nb at a time in sorted order, and writes its partial sum of the pivot gradient to
// partial[block]. The other cores' per-lookup gradients go to W. Blocks past the last chunk return.
template <int TILED, class Exec>
__host__ __device__ void tt_embedding_backward_pivot_block(Exec& ex, const TtEmbeddingBackwardShape& s, const TtEmbeddingBackwardLayout& L,
                                                           const TtEmbeddingBackwardPivot& pv, float* sm, int block,
                                                           const int* chunk_off, const int* seg_lo, const int* seg_hi,
                                                           const int* sorted_vals, const int64_t* indices,
                                                           const int* bag_of, const float* cores, const float* dY,
                                                           float* W, float* partial) {
    const int c = pv.pivot, Kc = s.tables * s.p[c];
    if (block >= chunk_off[Kc]) return;
    const int key = tt_embedding_backward_lower_bound(chunk_off, Kc + 1, block + 1) - 1;
    const int gkey = s.key_base[c] + key;
    const int lo = seg_lo[gkey] + (block - chunk_off[key]) * pv.chunk;
    const int hi = min(lo + pv.chunk, seg_hi[gkey]);
    TtEmbeddingBackwardDest dst;
    dst.base = W;
    dst.off = pv.W_off;
    dst.use_rows = 0;
    dst.atomic = 0;
    const int Sc = s.S[c], nr = s.n[c], ps = L.PS[c];
    ex.phase([&](int tid) {
        const float* src = cores + s.core_off[c] + (int64_t)key * Sc;
        for (int e = tid; e < Sc; e += ex.nt) {
            const int k = e / nr;
            sm[L.sl_off[c] + k * ps + (e - k * nr)] = src[e];
            sm[L.acc_off + e] = 0.0f;
        }
    });
    for (int first = lo; first < hi; first += L.nb) {
        const int nbb = min(L.nb, hi - first);
        ex.phase([&](int tid) { tt_embedding_backward_decode_batch(s, L, sm, nbb, tid, sorted_vals + first, 0, indices, bag_of); });
        ex.phase([&](int tid) { tt_embedding_backward_load_batch(s, L, sm, nbb, tid, ex.nt, cores, dY); });
        for (int ph = 0; ph < 2 * s.T - 3; ph++)
            ex.phase([&](int tid) { tt_embedding_backward_chain_phase<TILED>(s, L, sm, ph, nbb, tid, ex.nt, dst); });
    }
    ex.phase([&](int tid) {
        for (int e = tid; e < Sc; e += ex.nt) partial[(int64_t)block * Sc + e] = sm[L.acc_off + e];
    });
}

template <int TILED>
__global__ void __launch_bounds__(TT_BWD_MAX_FUSED_BLOCK)
tt_embedding_backward_kernel4_pivot(const TtEmbeddingBackwardShape shape, const TtEmbeddingBackwardLayout lay, const TtEmbeddingBackwardPivot piv,
                                    const int* chunk_off, const int* seg_lo, const int* seg_hi, const int* sorted_vals,
                                    const int64_t* indices, const int* bag_of, const float* cores, const float* dY,
                                    float* W, float* partial) {
    __shared__ TtEmbeddingBackwardShape s;
    __shared__ TtEmbeddingBackwardLayout L;
    __shared__ TtEmbeddingBackwardPivot pv;
    if (threadIdx.x == 0) { s = shape; L = lay; pv = piv; }
    __syncthreads();
    TtEmbeddingBackwardDeviceExec ex{(int)threadIdx.x, (int)blockDim.x};
    tt_embedding_backward_pivot_block<TILED>(ex, s, L, pv, (float*)tt_embedding_backward_smem, blockIdx.x, chunk_off, seg_lo,
                                      seg_hi, sorted_vals, indices, bag_of, cores, dY, W, partial);
}

// The fused reduction of slice `key` (one block per slice of every core), thread tid of nt: sum the
// slice's gradients in a fixed order (pivot: its chunks' partial sums in chunk order; other cores:
// its lookups' W rows in sorted order, that is by lookup id) and apply the optimizer. A slice with no
// lookup is left alone (dense: its dG is written zero).
__host__ __device__ inline void tt_embedding_backward_final_slice(const TtEmbeddingBackwardShape& s, const TtEmbeddingBackwardPivot& pv, int key,
                                                                  int tid, int nt, int opt, float lr, float eps,
                                                                  float* cores, float* state, float* dG, const float* W,
                                                                  const float* partial, const int* chunk_off,
                                                                  const int* seg_lo, const int* seg_hi,
                                                                  const int* sorted_vals) {
    int t = 0;
    while (key >= s.key_base[t + 1]) t++;
    const int local = key - s.key_base[t], S = s.S[t];
    const int64_t off = s.core_off[t] + (int64_t)local * S;
    const bool piv = t == pv.pivot;
    const int first = piv ? chunk_off[local] : seg_lo[key];
    const int count = (piv ? chunk_off[local + 1] : seg_hi[key]) - first;
    if (count == 0) {
        if (opt == TT_BWD_DENSE)
            for (int e = tid; e < S; e += nt) dG[off + e] = 0.0f;
        return;
    }
    const float* Wt = W + pv.W_off[t];
    for (int e = tid; e < S; e += nt) {
        float sum = 0.0f;
        for (int i = 0; i < count; i++) {
            const float* src = piv ? partial + (int64_t)(first + i) * S : Wt + (int64_t)sorted_vals[first + i] * S;
            sum += src[e];
        }
        tt_embedding_backward_apply(opt, lr, eps, cores, state, dG, off + e, sum);
    }
}

__global__ void tt_embedding_backward_kernel4_final(const __grid_constant__ TtEmbeddingBackwardShape s,
                                                    const __grid_constant__ TtEmbeddingBackwardPivot pv, int opt, float lr, float eps,
                                                    float* cores, float* state, float* dG, const float* W,
                                                    const float* partial, const int* chunk_off, const int* seg_lo,
                                                    const int* seg_hi, const int* sorted_vals) {
    tt_embedding_backward_final_slice(s, pv, blockIdx.x, threadIdx.x, blockDim.x, opt, lr, eps, cores, state, dG, W,
                                      partial, chunk_off, seg_lo, seg_hi, sorted_vals);
}

// the pivot core: the largest slice (the first of equals)
inline int tt_embedding_backward_pick_pivot(const TtEmbeddingBackwardShape& s) {
    int c = 0;
    for (int t = 1; t < s.T; t++) if (s.S[t] > s.S[c]) c = t;
    return c;
}

// largest NB (8, 4, 2, 1) whose shared memory stays under the target (1 if none does)
inline int tt_embedding_backward_pick_nb(const TtEmbeddingBackwardShape& s, int pivot) {
    for (int nb = TT_BWD_MAX_NB; nb > 1; nb /= 2)
        if (nb <= TT_BWD_CHUNK &&
            tt_embedding_backward_smem_bytes(tt_embedding_backward_make_layout(s, pivot, nb, 0)) <= (size_t)TT_BWD_SMEM_TARGET)
            return nb;
    return 1;
}

inline int64_t tt_embedding_backward_max_chunks(const TtEmbeddingBackwardShape& s, const TtEmbeddingBackwardPivot& pv) {
    return ceil_div<int64_t>(s.nnz, pv.chunk) + (int64_t)s.tables * s.p[pv.pivot];
}

// ----------------------------------------------------------------------------------------------
// launchers and dispatcher

struct TtEmbeddingBackwardArgs {
    TtEmbeddingBackwardShape s;
    int opt;
    float lr, eps;
    const int64_t *offsets, *indices;
    const float* dY;
    float *cores, *state, *dG;           // dG: version 1-3's dense gradient, and the output of `dense`
    // version 2
    cublasHandle_t blas;
    int* fb_rows;
    float** fb_ptrs;
    TtEmbeddingBackwardFbttBufs fb;
    // versions 3-5
    int *bag_of, *keys, *vals, *keys_sorted, *vals_sorted, *seg_lo, *seg_hi, *chunk_count, *chunk_off;
    float *W, *partial;
    void* cub_temp;
    size_t cub_temp_bytes;
    int sort_bits;
    TtEmbeddingBackwardPivot pv;
    TtEmbeddingBackwardLayout lay3, lay4, lay5;
};

// versions 1-3 end with this: the optimizer over the whole summed gradient (nothing for dense)
void tt_embedding_backward_optimizer_pass(const TtEmbeddingBackwardArgs& a) {
    if (a.opt == TT_BWD_DENSE) return;
    const int64_t total = a.s.core_off[a.s.T];
    tt_embedding_backward_optimizer_kernel<<<tt_embedding_backward_optimizer_grid(total, 256), 256>>>(
        total, a.opt, a.lr, a.eps, a.cores, a.state, a.dG);
}

void tt_embedding_backward1(const TtEmbeddingBackwardArgs& a, int block_size) {
    const TtEmbeddingBackwardShape& s = a.s;
    cudaCheck(cudaMemsetAsync(a.dG, 0, s.core_off[s.T] * sizeof(float)));
    int Ssum = 0;
    for (int t = 0; t < s.T; t++) Ssum += s.S[t];
    const int64_t total = (int64_t)s.nnz * Ssum;
    if (total > 0) {
        const unsigned grid = (unsigned)std::min<int64_t>(ceil_div<int64_t>(total, block_size), 1 << 20);
        tt_embedding_backward_kernel1<<<grid, block_size>>>(s, Ssum, a.offsets, a.indices, a.cores, a.dY, a.dG);
    }
    tt_embedding_backward_optimizer_pass(a);
}

void tt_embedding_backward2(const TtEmbeddingBackwardArgs& a, int block_size) {
    const TtEmbeddingBackwardShape& s = a.s;
    const int T = s.T, chunk = TT_BWD_FBTT_CHUNK;
    cudaCheck(cudaMemsetAsync(a.dG, 0, s.core_off[T] * sizeof(float)));
    const float one = 1.0f, zero = 0.0f;
    auto gemm = [&](int kind, int t, int N) {
        const TtEmbeddingBackwardBlasCall c = tt_embedding_backward_fbtt_call(s, kind, t);
        cublasCheck(cublasGemmBatchedEx(a.blas, c.ta, c.tb, c.m, c.n, c.k, &one,
                                        (const void* const*)(a.fb_ptrs + (int64_t)c.slot_a * chunk), CUDA_R_32F, c.lda,
                                        (const void* const*)(a.fb_ptrs + (int64_t)c.slot_b * chunk), CUDA_R_32F, c.ldb,
                                        &zero, (void* const*)(a.fb_ptrs + (int64_t)c.slot_c * chunk), CUDA_R_32F, c.ldc,
                                        N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    };
    auto scatter = [&](int t, int N) {
        const int64_t total = (int64_t)N * s.S[t];
        const unsigned grid = (unsigned)std::min<int64_t>(ceil_div<int64_t>(total, block_size), 1 << 16);
        tt_embedding_backward_kernel2_scatter<<<grid, block_size>>>(s, t, N, a.fb_rows + (int64_t)t * chunk, a.fb.trG[t], a.dG);
    };
    for (int64_t start = 0; start < s.nnz; start += chunk) {
        const int N = (int)std::min<int64_t>(chunk, s.nnz - start);
        tt_embedding_backward_kernel2_setup<<<ceil_div(N, block_size), block_size>>>(
            s, start, N, chunk, a.offsets, a.indices, a.cores, a.dY, a.fb, a.fb_ptrs, a.fb_rows);
        for (int t = 0; t <= T - 3; t++) gemm(0, t, N);      // recompute the forward chain
        for (int t = T - 1; t >= 1; t--) {
            gemm(1, t, N);                                   // dG_t = P_{t-1}^T . dM_t
            scatter(t, N);
            gemm(2, t, N);                                   // dM_{t-1} = dM_t . G_t^T (overwrites P_{t-1})
        }
        scatter(0, N);                                       // dM_0 is core 0's gradient
    }
    tt_embedding_backward_optimizer_pass(a);
}

void tt_embedding_backward3(const TtEmbeddingBackwardArgs& a, int block_size) {
    const TtEmbeddingBackwardShape& s = a.s;
    cudaCheck(cudaMemsetAsync(a.dG, 0, s.core_off[s.T] * sizeof(float)));
    if (s.nnz > 0) {
        tt_embedding_backward_bags_kernel<<<ceil_div(s.num_bags, 8), 256>>>(s, a.offsets, a.indices, a.bag_of, nullptr, nullptr);
        const unsigned grid = (unsigned)std::min<int64_t>(ceil_div<int64_t>(s.nnz, a.lay3.nb), 1 << 20);
        tt_embedding_backward_kernel3<<<grid, block_size, tt_embedding_backward_smem_bytes(a.lay3)>>>(
            s, a.lay3, a.indices, a.bag_of, a.cores, a.dY, a.dG);
    }
    tt_embedding_backward_optimizer_pass(a);
}

// versions 4 (one output per thread) and 5 (register tiles): same pipeline, different layout.tiled
void tt_embedding_backward45(const TtEmbeddingBackwardArgs& a, const TtEmbeddingBackwardLayout& lay, int block_size) {
    const TtEmbeddingBackwardShape& s = a.s;
    if (s.nnz == 0) {
        if (a.opt == TT_BWD_DENSE) cudaCheck(cudaMemsetAsync(a.dG, 0, s.core_off[s.T] * sizeof(float)));
        return;
    }
    const int K_total = s.key_base[s.T], Kc = s.tables * s.p[a.pv.pivot], N = s.T * s.nnz;
    tt_embedding_backward_bags_kernel<<<ceil_div(s.num_bags, 8), 256>>>(s, a.offsets, a.indices, a.bag_of, a.keys, a.vals);
    size_t bytes = a.cub_temp_bytes;
    cudaCheck(cub::DeviceRadixSort::SortPairs(a.cub_temp, bytes, a.keys, a.keys_sorted, a.vals, a.vals_sorted, N, 0, a.sort_bits));
    tt_embedding_backward_segments_kernel<<<ceil_div(K_total + 1, 256), 256>>>(s, a.pv, a.keys_sorted, a.seg_lo, a.seg_hi,
                                                                             a.chunk_count);
    bytes = a.cub_temp_bytes;
    cudaCheck(cub::DeviceScan::ExclusiveSum(a.cub_temp, bytes, a.chunk_count, a.chunk_off, Kc + 1));
    auto kernel = lay.tiled ? tt_embedding_backward_kernel4_pivot<1> : tt_embedding_backward_kernel4_pivot<0>;
    kernel<<<(unsigned)tt_embedding_backward_max_chunks(s, a.pv), block_size, tt_embedding_backward_smem_bytes(lay)>>>(
        s, lay, a.pv, a.chunk_off, a.seg_lo, a.seg_hi, a.vals_sorted, a.indices, a.bag_of, a.cores, a.dY, a.W, a.partial);
    tt_embedding_backward_kernel4_final<<<K_total, 128>>>(s, a.pv, a.opt, a.lr, a.eps, a.cores, a.state, a.dG, a.W,
                                                          a.partial, a.chunk_off, a.seg_lo, a.seg_hi, a.vals_sorted);
}

void tt_embedding_backward4(const TtEmbeddingBackwardArgs& a, int block_size) { tt_embedding_backward45(a, a.lay4, block_size); }
void tt_embedding_backward5(const TtEmbeddingBackwardArgs& a, int block_size) { tt_embedding_backward45(a, a.lay5, block_size); }

void tt_embedding_backward(int kernel_num, const TtEmbeddingBackwardArgs& a, int block_size) {
    switch (kernel_num) {
        case 1: tt_embedding_backward1(a, block_size); break;
        case 2: tt_embedding_backward2(a, block_size); break;
        case 3: tt_embedding_backward3(a, block_size); break;
        case 4: tt_embedding_backward4(a, block_size); break;
        case 5: tt_embedding_backward5(a, block_size); break;
        default: fail_args("tt_embedding_backward has no version %d", kernel_num);
    }
}

// the precondition of each version on a shape, "" when it can run (smem_limit: the device's opt-in
// shared memory per block, less the kernels' static shared memory)
std::string tt_embedding_backward_skip_reason(int k, const TtEmbeddingBackwardShape& s, const TtEmbeddingBackwardArgs& a, size_t smem_limit, int block) {
    char buf[256];
    if (k == 1) {
        const double terms = tt_embedding_backward_naive_terms(s) * s.nnz;
        if (terms > TT_BWD_NAIVE_MAX_TERMS) {
            snprintf(buf, sizeof buf, "its explicit sums need %.3g terms at this shape (limit %.0e): try a smaller shape", terms,
                     TT_BWD_NAIVE_MAX_TERMS);
            return buf;
        }
    }
    if (k >= 3 && block > TT_BWD_MAX_FUSED_BLOCK) {
        snprintf(buf, sizeof buf, "it is compiled for at most %d threads per block (--block %d)", TT_BWD_MAX_FUSED_BLOCK, block);
        return buf;
    }
    if (k >= 3) {
        const TtEmbeddingBackwardLayout& L = k == 3 ? a.lay3 : k == 4 ? a.lay4 : a.lay5;
        if (tt_embedding_backward_smem_bytes(L) > smem_limit) {
            snprintf(buf, sizeof buf, "its block needs %zu bytes of shared memory (NB = %d), more than the %zu a block can have",
                     tt_embedding_backward_smem_bytes(L), L.nb, smem_limit);
            return buf;
        }
    }
    return "";
}

// FLOPs per lookup, FBTT's count (header)
inline double tt_embedding_backward_flops_per_lookup(const TtEmbeddingBackwardShape& s) {
    double f = 0.0;
    for (int t = 0; t <= s.T - 3; t++) f += 2.0 * s.m[t] * s.R[t + 1] * s.n[t + 1];
    for (int t = 1; t <= s.T - 1; t++) f += 4.0 * s.m[t - 1] * s.R[t] * s.n[t];
    return f;
}

// ----------------------------------------------------------------------------------------------

#ifndef NO_MAIN
int main(int argc, char** argv) {
    std::vector<int> p = {200, 220, 250}, q = {4, 4, 4}, ranks = {32, 32};
    int tables = 1, B = 512, L = 20;
    int64_t E = 0;
    double alpha = 0.0, lr = 0.05, eps = 1e-8;
    bool ragged = false;
    std::string optimizer = "sgd";
    Cli cli("tt_embedding_backward",
            "Backward of a tensor-train embedding bag with the optimizer step: core gradients from the pooled\n"
            "gradient dY, then dense (write dG), SGD or elementwise Adagrad on the cores (FBTT-Embedding's layout).",
            5, 5);
    cli.add_int_list("p", &p, "rows of each core (T = number of entries, 2..6)");
    cli.add_int_list("q", &q, "embedding factor of each core (D = prod q)");
    cli.add_int_list("ranks", &ranks, "inner TT ranks R_1..R_{T-1}");
    cli.add_int("tables", &tables, "embedding tables");
    cli.add_int("B", &B, "bags per table");
    cli.add_int("L", &L, "lookups per bag");
    cli.add_int64("E", &E, "logical rows per table (0: prod p)");
    cli.add_double("alpha", &alpha, "Zipf exponent of the indices (<= 1: uniform)");
    cli.add_flag("ragged", &ragged, "bags of random sizes (bag 0 of every table empty), same total lookups");
    cli.add_choice("optimizer", &optimizer, {"dense", "sgd", "adagrad"}, "what to do with the summed gradient");
    cli.add_double("lr", &lr, "learning rate (sgd, adagrad)");
    cli.add_double("eps", &eps, "Adagrad epsilon");
    cli.constraints =
        "  T = len(p) in 2..6; len(q) = T; len(ranks) = T-1; entries >= 1; E <= prod p; D = prod q <= 2^20;\n"
        "  tables * sum(p) < 2^31; T * tables * B * L < 2^31; Zipf (alpha > 1) needs E >= L; eps > 0.\n"
        "  version 1 runs only while its explicit sums stay under 4e9 terms; versions 3-5 need their block's\n"
        "  shared memory (printed when skipped) and at most 512 threads per block.";
    cli.parse(argc, argv);
#ifdef ENABLE_BF16
    fail_args("tt_embedding_backward has no bf16 mode: FBTT's cores and optimizer state are fp32; run ./tt_embedding_backward");
#endif
    {
        std::string err = tt_embedding_backward_check_shape(p, q, ranks, E, tables, B, L, alpha, lr, eps);
        if (!err.empty()) fail_args("%s", err.c_str());
    }
    const int opt = optimizer == "dense" ? TT_BWD_DENSE : optimizer == "sgd" ? TT_BWD_SGD : TT_BWD_ADAGRAD;
    TtEmbeddingBackwardShape s = tt_embedding_backward_make_shape(p, q, ranks, E, tables, B);

    // inputs (host, before any CUDA call): cores, bags (both as tt_embedding_forward makes them), dY, state
    Rng rng(cli.seed);
    std::vector<float> cores = tt_embedding_backward_make_cores(s, rng);
    std::vector<int64_t> offsets, indices;
    tt_embedding_backward_make_bags(s, L, alpha, ragged, rng, offsets, indices);
    {
        std::string err = tt_embedding_backward_check_bags(offsets, indices, s.num_bags, s.E);
        if (!err.empty()) fail_args("%s", err.c_str());
    }
    s.nnz = (int)indices.size();
    std::vector<float> dY = make_random_floats((size_t)s.num_bags * s.D, rng);
    std::vector<float> state((size_t)s.core_off[s.T], 0.0f);
    for (int t = 0; t < s.T; t++)
        for (int64_t e = 0; e < tt_embedding_backward_core_elems(s, t); e++) state[s.core_off[t] + e] = rng.uniform(0.1f, 1.0f);

    cudaDeviceProp prop = cuda_init();
    printf("TT shape: T=%d D=%d E=%lld tables=%d B=%d nnz=%d, core floats %lld (dense table %.3g floats, %.0fx), optimizer %s "
           "(lr %g, eps %g)\n",
           s.T, s.D, (long long)s.E, s.tables, s.B, s.nnz, (long long)s.core_off[s.T], (double)s.E * s.D * s.tables,
           (double)s.E * s.D * s.tables / (double)s.core_off[s.T], TT_BWD_OPT_NAMES[opt], lr, eps);
    printf("computing the CPU reference (double)...\n");
    TtEmbeddingBackwardReference ref = tt_embedding_backward_reference(s, cores, offsets, indices, dY);
    const int64_t U = tt_embedding_backward_touched_elems(s, ref);

    // device buffers
    const int64_t C = s.core_off[s.T];
    TtEmbeddingBackwardArgs a;
    memset(&a, 0, sizeof a);
    a.s = s; a.opt = opt; a.lr = (float)lr; a.eps = (float)eps;
    int64_t* d_offsets = device_upload(offsets);
    int64_t* d_indices = device_upload(indices);
    float* d_dY = device_upload(dY);
    float* d_cores0 = device_upload(cores);
    float* d_state0 = device_upload(state);
    a.offsets = d_offsets; a.indices = d_indices; a.dY = d_dY;
    a.cores = device_alloc<float>(C);
    a.state = device_alloc<float>(C);
    a.dG = device_alloc<float>(C);
    // version 2 workspace
    cublasCheck(cublasCreate(&a.blas));
    cublasCheck(cublasSetMathMode(a.blas, CUBLAS_DEFAULT_MATH));   // fp32 FMA, no TF32
    const int chunk = TT_BWD_FBTT_CHUNK;
    a.fb_rows = device_alloc<int>((size_t)s.T * chunk);
    a.fb_ptrs = device_alloc<float*>((size_t)tt_embedding_backward_fbtt_slots(s.T) * chunk);
    for (int t = 1; t <= s.T - 2; t++) a.fb.P[t] = device_alloc<float>((size_t)chunk * s.m[t] * s.R[t + 1]);
    for (int t = 0; t < s.T; t++) a.fb.trG[t] = device_alloc<float>((size_t)chunk * s.S[t]);
    // versions 3-5 workspace
    const int K_total = s.key_base[s.T];
    a.pv.pivot = tt_embedding_backward_pick_pivot(s);
    a.pv.chunk = TT_BWD_CHUNK;
    int64_t W_total = 0;
    for (int t = 0; t < s.T; t++) {
        a.pv.W_off[t] = W_total;
        if (t != a.pv.pivot) W_total += (int64_t)s.nnz * s.S[t];
    }
    const int Kc = s.tables * s.p[a.pv.pivot];
    const int64_t N_sort = (int64_t)s.T * s.nnz;
    a.bag_of = device_alloc<int>(s.nnz);
    a.keys = device_alloc<int>(N_sort);
    a.vals = device_alloc<int>(N_sort);
    a.keys_sorted = device_alloc<int>(N_sort);
    a.vals_sorted = device_alloc<int>(N_sort);
    a.seg_lo = device_alloc<int>(K_total);
    a.seg_hi = device_alloc<int>(K_total);
    a.chunk_count = device_alloc<int>(Kc + 1);
    a.chunk_off = device_alloc<int>(Kc + 1);
    a.W = device_alloc<float>(W_total);
    const int64_t partial_n = tt_embedding_backward_max_chunks(s, a.pv) * s.S[a.pv.pivot];
    a.partial = device_alloc<float>(partial_n);
    a.sort_bits = 1;
    while ((1ll << a.sort_bits) < K_total) a.sort_bits++;
    {
        size_t b1 = 0, b2 = 0;
        cudaCheck(cub::DeviceRadixSort::SortPairs(nullptr, b1, a.keys, a.keys_sorted, a.vals, a.vals_sorted, (int)N_sort, 0,
                                                  a.sort_bits));
        cudaCheck(cub::DeviceScan::ExclusiveSum(nullptr, b2, a.chunk_count, a.chunk_off, Kc + 1));
        a.cub_temp_bytes = std::max<size_t>(std::max(b1, b2), 1);
        a.cub_temp = device_alloc<char>(a.cub_temp_bytes);
    }
    a.lay3 = tt_embedding_backward_make_layout(s, -1, 1, 0);
    const int nb = tt_embedding_backward_pick_nb(s, a.pv.pivot);
    a.lay4 = tt_embedding_backward_make_layout(s, a.pv.pivot, nb, 0);
    a.lay5 = tt_embedding_backward_make_layout(s, a.pv.pivot, nb, 1);
    const size_t smem_limit = prop.sharedMemPerBlockOptin - 1024;   // less the kernels' static TtEmbeddingBackwardShape/Layout copies
    for (auto [kern, L] : {std::make_pair((const void*)tt_embedding_backward_kernel3, a.lay3),
                           std::make_pair((const void*)tt_embedding_backward_kernel4_pivot<0>, a.lay4),
                           std::make_pair((const void*)tt_embedding_backward_kernel4_pivot<1>, a.lay5)}) {
        const size_t bytes = tt_embedding_backward_smem_bytes(L);
        if (bytes <= smem_limit) cudaCheck(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    }
    printf("versions 4-5: pivot core %d (slice %d floats), %d lookups per pivot block in batches of %d, %zu bytes of shared "
           "memory per block; version 3: %zu bytes\n",
           a.pv.pivot, s.S[a.pv.pivot], a.pv.chunk, nb, tt_embedding_backward_smem_bytes(a.lay4),
           tt_embedding_backward_smem_bytes(a.lay3));

    // what one check needs, and the workspace a version might read before writing
    auto restore = [&] {
        cudaCheck(cudaMemcpy(a.cores, d_cores0, C * sizeof(float), cudaMemcpyDeviceToDevice));
        cudaCheck(cudaMemcpy(a.state, d_state0, C * sizeof(float), cudaMemcpyDeviceToDevice));
    };
    auto poison_all = [&] {
        poison(a.dG, C * sizeof(float));
        poison(a.fb_rows, (size_t)s.T * chunk * sizeof(int));
        poison(a.fb_ptrs, (size_t)tt_embedding_backward_fbtt_slots(s.T) * chunk * sizeof(float*));
        for (int t = 0; t < s.T; t++) {
            if (t >= 1 && t <= s.T - 2) poison(a.fb.P[t], (size_t)chunk * s.m[t] * s.R[t + 1] * sizeof(float));
            poison(a.fb.trG[t], (size_t)chunk * s.S[t] * sizeof(float));
        }
        poison(a.bag_of, std::max(s.nnz, 1) * sizeof(int));
        poison(a.keys, std::max<int64_t>(N_sort, 1) * sizeof(int));
        poison(a.vals, std::max<int64_t>(N_sort, 1) * sizeof(int));
        poison(a.keys_sorted, std::max<int64_t>(N_sort, 1) * sizeof(int));
        poison(a.vals_sorted, std::max<int64_t>(N_sort, 1) * sizeof(int));
        poison(a.seg_lo, K_total * sizeof(int));
        poison(a.seg_hi, K_total * sizeof(int));
        poison(a.chunk_count, (Kc + 1) * sizeof(int));
        poison(a.chunk_off, (Kc + 1) * sizeof(int));
        poison(a.W, std::max<int64_t>(W_total, 1) * sizeof(float));
        poison(a.partial, std::max<int64_t>(partial_n, 1) * sizeof(float));
    };
    auto download = [&](std::vector<float>& c, std::vector<float>& st, std::vector<float>& g) {
        c = device_download(a.cores, C);
        st = device_download(a.state, C);
        g = device_download(a.dG, C);
    };

    // tt_embedding_forward's shape string (the PyTorch peer files its fwd+bwd+SGD lines under it), with the
    // optimizer appended when it is not SGD
    std::string shape;
    {
        auto join = [](const std::vector<int>& v) {
            std::string r;
            for (size_t i = 0; i < v.size(); i++) r += (i ? "x" : "") + std::to_string(v[i]);
            return r;
        };
        char buf[320];
        snprintf(buf, sizeof buf, "T%d,p%s,q%s,r%s,nt%d,B%d,L%d", s.T, join(p).c_str(), join(q).c_str(),
                 join(ranks).c_str(), tables, B, L);
        shape = buf;
        if (s.E != s.Lrad[0] * s.p[0]) shape += ",E" + std::to_string(s.E);
        snprintf(buf, sizeof buf, ",alpha%g", alpha);
        shape += buf;
        if (ragged) shape += ",ragged";
        if (opt != TT_BWD_SGD) shape += std::string(",") + TT_BWD_OPT_NAMES[opt];
    }
    OpRunner r;
    r.op = "tt_embedding_backward";
    r.shape = shape;
    r.flops = tt_embedding_backward_flops_per_lookup(s) * s.nnz;
    r.bytes = 8.0 * s.nnz + 8.0 * (s.num_bags + 1) + 4.0 * s.num_bags * s.D +
              4.0 * U * (1 + (opt == TT_BWD_SGD ? 1 : opt == TT_BWD_ADAGRAD ? 3 : 0)) +
              (opt == TT_BWD_DENSE ? 4.0 * (C) : 0.0);
    r.blocks_for = [&](int k) -> std::vector<int> {
        if (k == 1) return {64, 128, 256, 512};
        if (k == 2) return {256};
        return {128, 256, 512};
    };
    r.skip_reason = [&](int k) { return tt_embedding_backward_skip_reason(k, s, a, smem_limit, cli.block); };
    r.prepare_check = [&] { restore(); poison_all(); };
    r.prepare_timing = [&] { restore(); };
    r.launch = [&](int k, int block) { tt_embedding_backward(k, a, block); };
    r.check = [&](int k, int block) {
        std::vector<float> c, st, g;
        download(c, st, g);
        bool pass = tt_embedding_backward_check(s, opt, a.lr, a.eps, ref, cores.data(), state.data(), c.data(), st.data(), g.data());
        if (k >= 4) {   // deterministic versions: a second run must give the same bits
            r.prepare_check();
            r.launch(k, block);
            cudaCheck(cudaGetLastError());
            cudaCheck(cudaDeviceSynchronize());
            std::vector<float> c2, st2, g2;
            download(c2, st2, g2);
            bool same = true;
            for (int t = 0; t < s.T; t++) {
                const size_t off = s.core_off[t], bytes = tt_embedding_backward_core_elems(s, t) * sizeof(float);
                same = same && memcmp(c.data() + off, c2.data() + off, bytes) == 0 &&
                       memcmp(st.data() + off, st2.data() + off, bytes) == 0 &&
                       (opt != TT_BWD_DENSE || memcmp(g.data() + off, g2.data() + off, bytes) == 0);
            }
            printf("  rerun            %s\n", same ? "ok    (bitwise identical to the first run)" : "FAIL  (bits differ from the first run)");
            pass = pass && same;
        }
        return pass;
    };
    r.extra = [&](int, int, double ms) {
        char buf[64];
        snprintf(buf, sizeof buf, "us_per_lookup=%.5f", s.nnz ? ms * 1e3 / s.nnz : 0.0);
        return std::string(buf);
    };
    int rc = run_versions(cli, r);

    if (!cli.dump_dir.empty()) {
        std::vector<float> c, st, g;
        download(c, st, g);
        for (int t = 0; t < s.T; t++) {
            const int64_t off = s.core_off[t];
            const std::vector<int64_t> sh = {s.tables, s.p[t], s.S[t]};
            std::vector<float> rg(ref.dG.begin() + off, ref.dG.begin() + off + tt_embedding_backward_core_elems(s, t));
            const std::string ts = std::to_string(t);
            write_npy(cli.dump_dir, "tt_embedding_backward_core" + ts, cores.data() + off, sh);
            write_npy(cli.dump_dir, "tt_embedding_backward_state" + ts, state.data() + off, sh);
            write_npy(cli.dump_dir, "tt_embedding_backward_dG_ref" + ts, rg.data(), sh);
            write_npy(cli.dump_dir, "tt_embedding_backward_out_core" + ts, c.data() + off, sh);
            write_npy(cli.dump_dir, "tt_embedding_backward_out_state" + ts, st.data() + off, sh);
            write_npy(cli.dump_dir, "tt_embedding_backward_out_dG" + ts, g.data() + off, sh);
        }
        write_npy(cli.dump_dir, "tt_embedding_backward_dY", dY.data(), {s.tables, s.B, s.D});
        write_npy(cli.dump_dir, "tt_embedding_backward_offsets", offsets.data(), {(int64_t)offsets.size()});
        write_npy(cli.dump_dir, "tt_embedding_backward_indices", indices.data(), {(int64_t)indices.size()});
        printf("dumped tt_embedding_backward_{core,state,dG_ref,out_core,out_state,out_dG}<t>, _dY, _offsets, _indices "
               ".npy to %s (out_*: the last version run, optimizer %s, lr %g, eps %g)\n",
               cli.dump_dir.c_str(), TT_BWD_OPT_NAMES[opt], lr, eps);
    }
    cublasCheck(cublasDestroy(a.blas));
    for (void* ptr : std::initializer_list<void*>{d_offsets, d_indices, d_dY, d_cores0, d_state0, a.cores, a.state, a.dG,
                                                  a.fb_rows, a.fb_ptrs, a.bag_of, a.keys, a.vals, a.keys_sorted,
                                                  a.vals_sorted, a.seg_lo, a.seg_hi, a.chunk_count, a.chunk_off, a.W,
                                                  a.partial, a.cub_temp})
        cudaCheck(cudaFree(ptr));
    for (int t = 0; t < s.T; t++) {
        if (t >= 1 && t <= s.T - 2) cudaCheck(cudaFree(a.fb.P[t]));
        cudaCheck(cudaFree(a.fb.trG[t]));
    }
    return rc;
}
#endif
