/*
tt_embedding backward: the gradients of the tensor-train (TT) cores of a pooled embedding bag, and the optimizer
step on them (dense gradient, SGD, or elementwise Adagrad): the backward of FBTT-Embedding (TT-Rec, Yin et al.,
MLSys 2021) for T = 2..6 cores.

Layout. Core t: fp32 [tables, p_t, R_t q_t R_{t+1}] (R_0 = R_T = 1); slice G_t[tbl][i] is R_t x q_t x R_{t+1}, element
  (k, a, k') at (k q_t + a) R_{t+1} + k'. Row -> (i_0 .. i_{T-1}), d -> (a_0 .. a_{T-1}) in mixed radix (0 most
  significant); Emb[row][d] = G_0[i_0][0,a_0,:] G_1[i_1][:,a_1,:] ... G_{T-1}[i_{T-1}][:,a_{T-1},0].
  Bags: offsets [tables*B + 1], indices [nnz] (int64); dY, the pooled (SUM) gradient: fp32 [tables, B, D].
Math. Per lookup of bag (tbl, b), g = dY[tbl][b], prefix P_t = G_0 .. G_t (m_t x R_{t+1}, m_t = q_0 .. q_t):
  dM_{T-1} = g,  dM_{t-1} = dM_t G_t^T,  dG_t[tbl][i_t] += P_{t-1}^T dM_t, summed over lookups; then once per
  touched slice: dense writes dG (zeros elsewhere); sgd G -= lr dG; adagrad s += dG^2, G -= lr dG / (sqrt(s) + eps).
  Untouched slices stay bit-identical. lr 0.05, eps 1e-8; the Adagrad state starts uniform in [0.1, 1).
FLOPs per lookup (FBTT's count): F = sum_{t=0}^{T-3} 2 m_t R_{t+1} n_{t+1} + sum_{t=1}^{T-1} 4 m_{t-1} R_t n_t (n_t = q_t
  R_{t+1}); 106,496 at FBTT's default (p 200,220,250, q 4,4,4, ranks 32,32; B 512, L 20: 1.09 GFLOP a step).
Bytes (fewest): 8 nnz + 8 (tables B + 1) + 4 tables B D + 4 U (1 + w) + (dense) 4 C; U = elements of touched slices,
  w = 1 (sgd), 3 (adagrad), 0 (dense); C = all core elements. ~4-12 MB at the default: bound by arithmetic.

Versions (H200, FBTT's default, SGD, results/h200.md, 2026-12-01: ms, % of the FP32 FMA peak):
  1  the explicit sum: a thread per (lookup, slice element), atomics into dG, optimizer pass   11.29   0.2%
  2  FBTT's pipeline: per 1000 lookups pointer arrays, cublasGemmBatchedEx per chain step,
     atomic scatter of per-lookup slice gradients, optimizer pass (the baseline)                  0.858   2.2%
  3  fused: one block per lookup, slices and chain in shared memory, one launch              0.425   4.5%
  4  retired: sort by slice, pivot slice shared by a chunk of lookups (0.442, 4.3%); 5 retired: version 4 on
     register tiles (0.280, 6.9%); both lost to 6 everywhere (code: git show 33f44ba:<this file>)
  6  grouping: lookups grouped by their pivot slice without a sort, the pivot slice loaded
     once per chunk, the "sandwich" products on float4 register tiles, deterministic         0.159  12.1%
     (its rank-128 mode, the pivot slice read from global memory, retired: git show 55765c2:<this file>)
  7  the default: version 6's grouping with the three pivot products on tensor cores (3xTF32)
     where compiled (T = 3, q 4,4,4, ranks 32,32), and the routes below elsewhere              0.0656 29.2%
  8  retired: per-slice GEMMs on 64 x 64 fp32 tiles, slower than 9 everywhere (0.333, 5.8%; git show 39c3510:<this file>)
  9  per-slice GEMMs: each chain product one GEMM over the lookups of one slice, its K-steps
     copied by cp.async into shared stages and multiplied on tensor cores (mma.sync m16n8k8,
     3xTF32), P_t and dM_t in global memory, parts summed in order; any shape (timed before
     the last core's D became a direct sum)                                                   0.256   7.5%
Version 7 at every shape (its dispatcher, in this order; history and times: results/notes/tt_embedding_backward.md):
  - T >= 4 with small p: adjacent cores merged into three (or two), the default on those, back by two GEMMs a merge;
  - T = 2 (q_t <= 16, or 32 at ranks <= 32): the (slice, lookup) pairs sorted with CUB, a warp sums each run;
  - T = 3, q 4k,4,4, ranks 32,32: the tensor-core kernels, a lookup of q_0 = 4k rows as k lookups of four; at ranks
    below 32 (q_0 = 4) the same on cores padded with zeros to 32,32, where the lookups are at most 200 an SM;
  - version 6 where its block fits 110 KB and it wins (ranks below 32; 32 at T = 3 and D < 256);
  - else version 9, which reads the forward's --stash (P_t) where given: EL-Rec's ranks 128, ranks 64, D 256.
  The grid (q 8,4,4, ranks 16 and 64, T 4 and 6, D 256, EL-Rec's rank 128) and PyTorch beside it: results/h200.md.

Run:  make tt_embedding_backward && ./tt_embedding_backward all --check-only   (./tt_embedding_backward -h: flags)
      ./tt_embedding_backward --q 2,2,4 --ranks 128,128 --B 4096 --alpha 1.15 --stash   (7 reads it where it routes to 9)
Checks: every version at every block size against a double CPU reference, dG and every workspace poisoned (NaN)
  first, cores and state restored (the step updates them in place); per element |got - ref| <= atol + ROUND |ref|
  + RTOL_MAG x the element's sum of |terms|; untouched slices bit-identical; versions 6, 7, 9 run twice, same bits.

Lessons (history, counters, dropped steps: results/notes/tt_embedding_backward.md):
  - Grouping lookups by slice pays: the slice loaded once per 64 lookups, its gradient summed in registers.
  - The sandwich form (Y = g x suffix, L = prefix^T x g) makes the pivot core's work three GEMMs per slice; in 3xTF32
    the fp32 tolerance holds (split x = hi + lo by masking: 2 integer instructions; cvt.rna costs more).
  - Registers decide residency: float4 operand loads kept version 9 at <= 64 registers (4 blocks an SM, 7-13% faster).
  - Rank 128: a pivot slice (64-256 KB) crowds shared memory out; version 9 needs none (EL-Rec q 2,2,4: 18.8 -> 1.99 ms).
  - A TT is also a TT of fewer, larger cores: at small p T 6 merged reaches the tensor cores (3x), T 4 two cores (1.7x).
  - mma.sync needs a converged warp: without a __syncwarp() after a branch, version 9 summed wrong and reruns differed.
  - PDL: let the next launch in at the end of a kernel whose last blocks still work, not its start (0.374 -> 0.342 ms).
*/
#include "tt_embedding.h"

#include <cub/device/device_radix_sort.cuh>

#define TT_EMBEDDING_BACKWARD_MAX_T TT_EMBEDDING_MAX_CORES
// #pragma unroll inside __host__ __device__ code, for the device pass only (the host compiler warns); DEV_HOST(d, h):
// expression d in the device pass, h in the host pass (the CPU test's)
#ifdef __CUDA_ARCH__
#define TT_EMBEDDING_BACKWARD_UNROLL _Pragma("unroll")
#define TT_EMBEDDING_BACKWARD_UNROLL4 _Pragma("unroll 4")
#define TT_EMBEDDING_BACKWARD_UNROLL2 _Pragma("unroll 2")
#define TT_EMBEDDING_BACKWARD_DEV_HOST(d, h) (d)
#else
#define TT_EMBEDDING_BACKWARD_UNROLL
#define TT_EMBEDDING_BACKWARD_UNROLL4
#define TT_EMBEDDING_BACKWARD_UNROLL2
#define TT_EMBEDDING_BACKWARD_DEV_HOST(d, h) (h)
#endif
enum { TT_EMBEDDING_BACKWARD_DENSE = 0, TT_EMBEDDING_BACKWARD_SGD = 1, TT_EMBEDDING_BACKWARD_ADAGRAD = 2 };
static const char* TT_EMBEDDING_BACKWARD_OPT_NAMES[3] = {"dense", "sgd", "adagrad"};
static const int TT_EMBEDDING_BACKWARD_FBTT_CHUNK = 1000;      // version 2: lookups per batched-GEMM call (FBTT's batch_count)
static const int TT_EMBEDDING_BACKWARD_MAX_FUSED_BLOCK = 512;  // versions 3 and 6 are compiled for at most 512 threads
static const double TT_EMBEDDING_BACKWARD_NAIVE_MAX_TERMS = 4e9;  // version 1 is skipped above this many explicit-sum terms

// Tolerances. Every GPU version computes in fp32, and sums many products of T factors: the error of
// an element is bounded by a multiple of u * mag, where mag is the same sum over |factors| (the CPU
// reference computes it in double next to dG). A random-sign sum of N terms in fp32 errs by about
// u * mag whatever N; a same-sign one by about sqrt(N/3) u * mag. 2e-5 (about 170 u) leaves room for
// atomics in any order and long segments, and still fails a dropped lookup in a slice summed over
// 10,000 lookups (an error near 1e-4 mag). The stored fp32 result adds its own rounding (ROUND * |ref|).
static const double TT_EMBEDDING_BACKWARD_ATOL = 1e-7, TT_EMBEDDING_BACKWARD_RTOL_MAG = 2e-5, TT_EMBEDDING_BACKWARD_ROUND = 4.8e-7;  // ROUND = 4 ulp

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
    const int64_t* nnz_dev; // optional (make_shape: nullptr): the lookups' count on the device (<= nnz, e.g. offsets[num_bags]);
                            // versions 6, 7, 9 then treat positions past it as padding (nnz: the buffers' size)
};

// the lookups a kernel works on: *nnz_dev where given, else nnz
__host__ __device__ inline int tt_embedding_backward_count(const TtEmbeddingBackwardShape& s) { return s.nnz_dev ? (int)*s.nnz_dev : s.nnz; }

inline int64_t tt_embedding_backward_core_elems(const TtEmbeddingBackwardShape& s, int t) { return (int64_t)s.tables * s.p[t] * s.S[t]; }
// the core of slice key g (keys: core after core, key_base[t] + tbl p_t + i_t)
__host__ __device__ inline int tt_embedding_backward_key_core(const TtEmbeddingBackwardShape& s, int g) {
    int t = 0;
    while (g >= s.key_base[t + 1]) t++;
    return t;
}

// The backward's own limits on a config that tt_embedding_check_config accepted: 32-bit sort keys over all slices
// and all (core, lookup) pairs, eps > 0 (Adagrad divides by sqrt(s) + eps). "" when fine, else the broken one.
std::string tt_embedding_backward_check_config(const TtEmbeddingConfig& c, double lr, double eps) {
    char buf[256];
    double sum_p = 0.0;
    for (int x : c.p) sum_p += x;
    if ((double)c.tables * sum_p >= 2147483647.0)
        snprintf(buf, sizeof buf, "tables * sum(p) (%.0f slices) must be < 2^31 (int32 sort keys)", (double)c.tables * sum_p);
    else if ((double)c.T() * (double)c.nnz() >= 2147483647.0)
        snprintf(buf, sizeof buf, "T * lookups (%.0f sort items) must be < 2^31", (double)c.T() * (double)c.nnz());
    else if (!(eps > 0.0))
        snprintf(buf, sizeof buf, "--eps (%g) must be > 0", eps);
    else if (!std::isfinite(lr))
        snprintf(buf, sizeof buf, "--lr must be finite");
    else
        return "";
    return buf;
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

// per-core arrays (tt_embedding.h's cores or Adagrad state) packed into the one buffer of all cores (core_off;
// the padding between cores zero)
std::vector<float> tt_embedding_backward_pack(const TtEmbeddingBackwardShape& s, const std::vector<std::vector<float>>& per_core) {
    std::vector<float> flat((size_t)s.core_off[s.T], 0.0f);
    for (int t = 0; t < s.T; t++) std::copy(per_core[t].begin(), per_core[t].end(), flat.begin() + s.core_off[t]);
    return flat;
}

// ----------------------------------------------------------------------------------------------
// CPU reference, in double

// row -> core indices (mixed radix, i_0 most significant)
__host__ __device__ inline void tt_embedding_backward_decode_row(const TtEmbeddingBackwardShape& s, int64_t row, int* idx) {
TT_EMBEDDING_BACKWARD_UNROLL
    for (int t = 0; t < TT_EMBEDDING_BACKWARD_MAX_T; t++) {
        if (t >= s.T) break;
        idx[t] = (int)(row / s.Lrad[t]);
        row -= (int64_t)idx[t] * s.Lrad[t];
    }
}

// one lookup's prefixes P_t = G_0 .. G_t (m_t x R_{t+1}), t = 0 .. T-2, from its slices sl
void tt_embedding_backward_prefixes_cpu(const TtEmbeddingBackwardShape& s, const std::vector<double>* sl, std::vector<double>* P) {
    P[0] = sl[0];
    for (int t = 1; t <= s.T - 2; t++) {
        const int Rt = s.R[t], Rn = s.R[t + 1], qt = s.q[t];
        P[t].assign((size_t)s.m[t] * Rn, 0.0);
        for (int al = 0; al < s.m[t - 1]; al++)
            for (int k = 0; k < Rt; k++) {
                const double pv = P[t - 1][(size_t)al * Rt + k];
                for (int a = 0; a < qt; a++)
                    for (int kn = 0; kn < Rn; kn++) P[t][((size_t)al * qt + a) * Rn + kn] += pv * sl[t][((size_t)k * qt + a) * Rn + kn];
            }
    }
}

// --stash: what the forward keeps, every lookup's P_t (t = 1..T-2) rounded to float at tt_embedding.h's offsets
void tt_embedding_backward_stash_cpu(const TtEmbeddingBackwardShape& s, const float* cores, const int64_t* offsets, const int64_t* indices,
                                     const int64_t* off, float* stash) {
    std::vector<double> P[TT_EMBEDDING_BACKWARD_MAX_T], sl[TT_EMBEDDING_BACKWARD_MAX_T];
    for (int bag = 0; bag < s.num_bags; bag++)
        for (int64_t j = offsets[bag]; j < offsets[bag + 1]; j++) {
            int idx[TT_EMBEDDING_BACKWARD_MAX_T];
            tt_embedding_backward_decode_row(s, indices[j], idx);
            for (int t = 0; t < s.T - 1; t++) {
                const float* src = cores + s.core_off[t] + ((int64_t)(bag / s.B) * s.p[t] + idx[t]) * s.S[t];
                sl[t].assign(src, src + s.S[t]);
            }
            tt_embedding_backward_prefixes_cpu(s, sl, P);
            for (int t = 1; t <= s.T - 2; t++) std::copy(P[t].begin(), P[t].end(), stash + off[t] + j * (int64_t)P[t].size());
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
    std::vector<double> P[TT_EMBEDDING_BACKWARD_MAX_T], Suf[TT_EMBEDDING_BACKWARD_MAX_T + 1], H, sl[TT_EMBEDDING_BACKWARD_MAX_T], g(s.D);
    for (int bag = 0; bag < s.num_bags; bag++) {
        const int tbl = bag / s.B;
        for (int d = 0; d < s.D; d++) g[d] = val(dY_f[(int64_t)bag * s.D + d]);
        for (int64_t j = offsets[bag]; j < offsets[bag + 1]; j++) {
            int idx[TT_EMBEDDING_BACKWARD_MAX_T];
            tt_embedding_backward_decode_row(s, indices[j], idx);
            int64_t off[TT_EMBEDDING_BACKWARD_MAX_T];
            for (int t = 0; t < T; t++) {
                off[t] = s.core_off[t] + ((int64_t)tbl * s.p[t] + idx[t]) * s.S[t];
                sl[t].resize(s.S[t]);
                for (int e = 0; e < s.S[t]; e++) sl[t][e] = val(cores_f[off[t] + e]);
            }
            tt_embedding_backward_prefixes_cpu(s, sl, P);
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

// The pooled forward Y [num_bags, D] by the explicit sum over rank indices (the definition),
// in double from double cores: the tests differentiate <Y(G), dY> with it.
void tt_embedding_backward_forward_cpu(const TtEmbeddingBackwardShape& s, const double* cores, const int64_t* offsets,
                                       const int64_t* indices, double* Y) {
    const int T = s.T;
    std::fill(Y, Y + (int64_t)s.num_bags * s.D, 0.0);
    for (int bag = 0; bag < s.num_bags; bag++) {
        const int tbl = bag / s.B;
        for (int64_t j = offsets[bag]; j < offsets[bag + 1]; j++) {
            int idx[TT_EMBEDDING_BACKWARD_MAX_T];
            tt_embedding_backward_decode_row(s, indices[j], idx);
            const double* sl[TT_EMBEDDING_BACKWARD_MAX_T];
            for (int t = 0; t < T; t++) sl[t] = cores + s.core_off[t] + ((int64_t)tbl * s.p[t] + idx[t]) * s.S[t];
            for (int d = 0; d < s.D; d++) {
                int a[TT_EMBEDDING_BACKWARD_MAX_T];
                int rest = d;
                for (int t = T - 1; t >= 0; t--) { a[t] = rest % s.q[t]; rest /= s.q[t]; }
                int k[TT_EMBEDDING_BACKWARD_MAX_T + 1] = {0};
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
                                               const std::vector<float>& dY, bool values = true) {
    TtEmbeddingBackwardReference ref;   // values = false (--no-check): only which slices are touched
    ref.dG.resize(values ? (size_t)s.core_off[s.T] : 0);
    ref.mag.resize(values ? (size_t)s.core_off[s.T] : 0);
    if (values) {
        tt_embedding_backward_cpu(s, cores.data(), offsets.data(), indices.data(), dY.data(), ref.dG.data(), false);
        tt_embedding_backward_cpu(s, cores.data(), offsets.data(), indices.data(), dY.data(), ref.mag.data(), true);
    }
    ref.touched.assign((size_t)s.key_base[s.T], 0);
    for (int bag = 0; bag < s.num_bags; bag++)
        for (int64_t j = offsets[bag]; j < offsets[bag + 1]; j++) {
            int idx[TT_EMBEDDING_BACKWARD_MAX_T];
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
            if (fabs(r) > TT_EMBEDDING_BACKWARD_ATOL) st.max_rel = std::max(st.max_rel, abs_err / fabs(r));
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
        if (opt == TT_EMBEDDING_BACKWARD_ADAGRAD) { rS.resize(n); tS.resize(n); }
        for (int64_t e = 0; e < n; e++) {
            const double g = ref.dG[off + e], del = TT_EMBEDDING_BACKWARD_RTOL_MAG * ref.mag[off + e], G0 = cores0[off + e];
            if (opt == TT_EMBEDDING_BACKWARD_DENSE) {
                rG[e] = g;
                tG[e] = TT_EMBEDDING_BACKWARD_ATOL + TT_EMBEDDING_BACKWARD_ROUND * fabs(g) + del;
            } else if (opt == TT_EMBEDDING_BACKWARD_SGD) {
                rG[e] = G0 - (double)lr * g;
                tG[e] = TT_EMBEDDING_BACKWARD_ATOL + TT_EMBEDDING_BACKWARD_ROUND * fabs(rG[e]) + fabs((double)lr) * del;
            } else {
                const double s0 = state0[off + e], s1 = s0 + g * g, u = g / (sqrt(s1) + eps);
                rS[e] = s1;
                tS[e] = TT_EMBEDDING_BACKWARD_ATOL + TT_EMBEDDING_BACKWARD_ROUND * s1 + 2.0 * fabs(g) * del + del * del;
                rG[e] = G0 - (double)lr * u;
                // |du/dg| <= 1/sqrt(s0); an fp32 sqrt and divide add a few ulps of u
                const double du = std::min(2.0, del / sqrt(std::max(s0, 1e-30)));
                tG[e] = TT_EMBEDDING_BACKWARD_ATOL + TT_EMBEDDING_BACKWARD_ROUND * fabs(rG[e]) +
                        fabs((double)lr) * (du + 4.0 * TT_EMBEDDING_BACKWARD_ROUND * fabs(u));
            }
        }
        const float* got = (opt == TT_EMBEDDING_BACKWARD_DENSE ? dG : cores) + off;
        std::vector<float> rG_f(rG.begin(), rG.end());
        char name[32];
        snprintf(name, sizeof name, "%s%d", opt == TT_EMBEDDING_BACKWARD_DENSE ? "dG" : "G", t);
        ValidateStats st = tt_embedding_backward_compare(got, rG.data(), tG.data(), (size_t)n);
        bool ok = report_validation(name, st, got, rG_f.data(), (float)TT_EMBEDDING_BACKWARD_ATOL, (float)TT_EMBEDDING_BACKWARD_RTOL_MAG);
        if (opt == TT_EMBEDDING_BACKWARD_ADAGRAD) {
            std::vector<float> rS_f(rS.begin(), rS.end());
            snprintf(name, sizeof name, "state%d", t);
            ValidateStats ss = tt_embedding_backward_compare(state + off, rS.data(), tS.data(), (size_t)n);
            ok = report_validation(name, ss, state + off, rS_f.data(), (float)TT_EMBEDDING_BACKWARD_ATOL, (float)TT_EMBEDDING_BACKWARD_RTOL_MAG) && ok;
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
            if (opt == TT_EMBEDDING_BACKWARD_DENSE || !ref.touched[k]) same = memcmp(cores + off, cores0 + off, bytes) == 0;
            if (!ref.touched[k]) {
                untouched++;
                if (opt == TT_EMBEDDING_BACKWARD_ADAGRAD) same = same && memcmp(state + off, state0 + off, bytes) == 0;
                if (opt == TT_EMBEDDING_BACKWARD_DENSE)
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
               s.key_base[s.T], opt == TT_EMBEDDING_BACKWARD_DENSE ? "; cores unchanged, dG zero there" : "");
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

// The optimizer on one element, given its summed gradient (used by the optimizer pass of versions 1-3
// and the reductions of versions 6-7, so all apply the same fp32 arithmetic).
__host__ __device__ inline void tt_embedding_backward_apply(int opt, float lr, float eps, float* G, float* st, float* dG,
                                                            int64_t i, float grad) {
    if (opt == TT_EMBEDDING_BACKWARD_DENSE) {
        dG[i] = grad;
    } else if (opt == TT_EMBEDDING_BACKWARD_SGD) {
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
    int idx[TT_EMBEDDING_BACKWARD_MAX_T];
    tt_embedding_backward_decode_row(s, indices[n], idx);
    int64_t off[TT_EMBEDDING_BACKWARD_MAX_T];
    for (int j = 0; j < T; j++) off[j] = s.core_off[j] + ((int64_t)tbl * s.p[j] + idx[j]) * s.S[j];
    int a[TT_EMBEDDING_BACKWARD_MAX_T] = {0}, k[TT_EMBEDDING_BACKWARD_MAX_T + 1] = {0};
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

__global__ void tt_embedding_backward1_kernel(const __grid_constant__ TtEmbeddingBackwardShape s, int Ssum, const int64_t* offsets,
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
    float* P[TT_EMBEDDING_BACKWARD_MAX_T];     // t = 1..T-2: [chunk, m_t R_{t+1}]
    float* trG[TT_EMBEDDING_BACKWARD_MAX_T];   // t = 0..T-1: [chunk, S_t] per-lookup slice gradients
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
    int idx[TT_EMBEDDING_BACKWARD_MAX_T];
    tt_embedding_backward_decode_row(s, indices[j], idx);
    float* sl[TT_EMBEDDING_BACKWARD_MAX_T] = {};
    float* P[TT_EMBEDDING_BACKWARD_MAX_T] = {};
    float* dM[TT_EMBEDDING_BACKWARD_MAX_T] = {};
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

__global__ void tt_embedding_backward2_setup_kernel(const __grid_constant__ TtEmbeddingBackwardShape s, int64_t start, int N, int chunk,
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

__global__ void tt_embedding_backward2_scatter_kernel(const __grid_constant__ TtEmbeddingBackwardShape s, int t, int N, const int* rows_t,
                                                      const float* trG_t, float* dG) {
    const int64_t total = (int64_t)N * s.S[t];
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x)
        tt_embedding_backward_fbtt_scatter_element(s, t, i, rows_t, trG_t, dG);
}

// ---- version 3: the chain in shared memory, one lookup per block ------------------------------------

// Shared-memory layout of a fused block (host-built; in floats, every region 16-byte aligned):
//   nb x per-lookup: [slices of the other cores, row pitch PS_t][g: D][P_t, dM_t for t = 1..T-2]
//   nb x 8 ints: lookup id, bag, slice row tbl*p_t + i_t of each core
// A slice row's pitch PS_t is n_t rounded up to odd: dM_{t-1} = dM_t . G_t^T reads G_t down its
// columns, and an odd pitch puts 32 consecutive rows in 32 different banks.
struct TtEmbeddingBackwardLayout {
    int nb;                                // lookups per batch
    int PS[TT_EMBEDDING_BACKWARD_MAX_T];                  // slice row pitch in shared memory
    int sl_off[TT_EMBEDDING_BACKWARD_MAX_T], g_off, P_off[TT_EMBEDDING_BACKWARD_MAX_T], dM_off[TT_EMBEDDING_BACKWARD_MAX_T];   // in a lookup's region
    int lookup_floats, int_off, total_floats;
};
#define TT_EMBEDDING_BACKWARD_INTS 8

inline int tt_embedding_backward_round4(int64_t x) { return (int)((x + 3) / 4 * 4); }

inline TtEmbeddingBackwardLayout tt_embedding_backward_make_layout(const TtEmbeddingBackwardShape& s, int nb) {
    TtEmbeddingBackwardLayout L;
    memset(&L, 0, sizeof L);
    L.nb = nb;
    for (int t = 0; t < s.T; t++) L.PS[t] = s.R[t] == 1 ? s.n[t] : (s.n[t] | 1);
    int cur = 0;
    for (int t = 0; t < s.T; t++) {
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
    L.int_off = nb * L.lookup_floats;
    L.total_floats = L.int_off + tt_embedding_backward_round4(nb * TT_EMBEDDING_BACKWARD_INTS);
    return L;
}
inline size_t tt_embedding_backward_smem_bytes(const TtEmbeddingBackwardLayout& L) { return (size_t)L.total_floats * sizeof(float); }

// One small GEMM of a batch of lookups, all operands in shared memory except a global destination:
//   C(b, i, j) (mode)= sum_k A(b, i, k) B(b, k, j),  i < M, j < N, k < K, b < nb
//   A(b, i, k) = A[b*a_bs + i*a_rs + k*a_cs], B(b, k, j) = B[b*b_bs + k*b_rs + j*b_cs]
//   C(b, i, j) = C[cb*c_bs + i*c_rs + j*c_cs], cb = c_bidx ? c_bidx[b*TT_EMBEDDING_BACKWARD_INTS] : b
// sum_batches: one C for the whole batch, C(i, j) (mode)= sum_b sum_k A(b,i,k) B(b,k,j).
enum { TT_EMBEDDING_BACKWARD_STORE = 0, TT_EMBEDDING_BACKWARD_ACCUM = 1, TT_EMBEDDING_BACKWARD_ATOMIC = 2 };
struct TtEmbeddingBackwardGemm {
    int M, N, K;
    const float* A; int a_bs, a_rs, a_cs;
    const float* B; int b_bs, b_rs, b_cs;
    float* C; int64_t c_bs; int c_rs, c_cs; const int* c_bidx;
    int mode, sum_batches, tile;
};

// The largest square register tile (4, 2 or 1) whose tile count still gives every thread one (version 6's
// generic GEMMs); version 3 computes one output per unit.
__host__ __device__ inline int tt_embedding_backward_pick_tile(int M, int N, int mult, int nt) {
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
TT_EMBEDDING_BACKWARD_UNROLL
    for (int r = 0; r < TM; r++) arow[r] = min(rt * TM + r, g.M - 1) * g.a_rs;
TT_EMBEDDING_BACKWARD_UNROLL
    for (int c = 0; c < TN; c++) bcol[c] = min(ct + c * tiles_n, g.N - 1) * g.b_cs;
    float acc[TM][TN];
TT_EMBEDDING_BACKWARD_UNROLL
    for (int r = 0; r < TM; r++)
TT_EMBEDDING_BACKWARD_UNROLL
        for (int c = 0; c < TN; c++) acc[r][c] = 0.0f;
    const int b_lo = g.sum_batches ? 0 : b, b_hi = g.sum_batches ? nb : b + 1;
    for (int bb = b_lo; bb < b_hi; bb++) {
        const float* A = g.A + bb * g.a_bs;
        const float* B = g.B + bb * g.b_bs;
TT_EMBEDDING_BACKWARD_UNROLL4
        for (int k = 0; k < g.K; k++) {
            float av[TM], bv[TN];
TT_EMBEDDING_BACKWARD_UNROLL
            for (int r = 0; r < TM; r++) av[r] = A[arow[r] + k * g.a_cs];
TT_EMBEDDING_BACKWARD_UNROLL
            for (int c = 0; c < TN; c++) bv[c] = B[k * g.b_rs + bcol[c]];
TT_EMBEDDING_BACKWARD_UNROLL
            for (int r = 0; r < TM; r++)
TT_EMBEDDING_BACKWARD_UNROLL
                for (int c = 0; c < TN; c++) acc[r][c] = fmaf(av[r], bv[c], acc[r][c]);
        }
    }
    float* C = g.C + (g.c_bidx ? (int64_t)g.c_bidx[b * TT_EMBEDDING_BACKWARD_INTS] : (int64_t)b) * g.c_bs;
TT_EMBEDDING_BACKWARD_UNROLL
    for (int r = 0; r < TM; r++) {
        const int i = rt * TM + r;
        if (i >= g.M) break;
TT_EMBEDDING_BACKWARD_UNROLL
        for (int c = 0; c < TN; c++) {
            const int j = ct + c * tiles_n;
            if (j >= g.N) break;
            float* dst = C + (int64_t)i * g.c_rs + (int64_t)j * g.c_cs;
            if (g.mode == TT_EMBEDDING_BACKWARD_STORE) *dst = acc[r][c];
            else if (g.mode == TT_EMBEDDING_BACKWARD_ACCUM) *dst += acc[r][c];
            else tt_embedding_backward_atomic_add(dst, acc[r][c]);
        }
    }
}

// TILED = 0 compiles only the one-output unit (version 3: fewer registers), 1 all three tiles
template <int TILED>
__host__ __device__ __forceinline__ void tt_embedding_backward_run_unit(const TtEmbeddingBackwardGemm& g, int nb, int unit) {
    if (TILED && g.tile == 4) tt_embedding_backward_tile<4, 4>(g, nb, unit);
    else if (TILED && g.tile == 2) tt_embedding_backward_tile<2, 2>(g, nb, unit);
    else tt_embedding_backward_tile<1, 1>(g, nb, unit);
}

// One phase of the chain for the batch's nb lookups, thread tid of nt. Phases:
//   ph < T-2:   forward t = ph:   P_{t+1} = P_t . G_{t+1}
//   otherwise:  backward t = T-1 - (ph - (T-2)), two independent GEMMs sharing the phase's units:
//               dG_t = P_{t-1}^T . dM_t   and   dM_{t-1} = dM_t . G_t^T  (dM_0 is core 0's gradient)
// Every slice gradient is atomically added into the dense dG at the lookup's slice row.
__host__ __device__ inline void tt_embedding_backward_chain_phase(const TtEmbeddingBackwardShape& s, const TtEmbeddingBackwardLayout& L, float* sm,
                                                                  int ph, int nb, int tid, int nt, float* dG) {
    const int T = s.T, LB = L.lookup_floats;
    float* lk = sm;                                        // lookup 0's region; lookup b at + b*LB
    const int* ints = (const int*)(sm + L.int_off);
    auto slice = [&](int t, const float*& p, int& bs) { p = lk + L.sl_off[t]; bs = LB; };
    // the destination of core u's slice gradient, a dense R_u x n_u (for u = 0: q_0 x R_1) block
    auto grad_dest = [&](TtEmbeddingBackwardGemm& g, int u, int row_len) {
        g.c_rs = row_len; g.c_cs = 1;
        g.C = dG + s.core_off[u]; g.c_bs = s.S[u]; g.c_bidx = ints + 2 + u;
        g.mode = TT_EMBEDDING_BACKWARD_ATOMIC; g.sum_batches = 0;
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
        f.mode = TT_EMBEDDING_BACKWARD_STORE; f.sum_batches = 0;
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
            d.mode = TT_EMBEDDING_BACKWARD_STORE; d.sum_batches = 0;
        } else {
            grad_dest(d, 0, s.R[1]);
        }
        ng = 2;
    }
    // the phase's units: g0's, then g1's, dealt round-robin to the nt threads
    g0.tile = 1;
    const int u0 = tt_embedding_backward_units(g0, nb);
    int u1 = 0;
    if (ng == 2) {
        g1.tile = 1;
        u1 = tt_embedding_backward_units(g1, nb);
    }
    int u = tid;
    for (; u < u0; u += nt) tt_embedding_backward_run_unit<0>(g0, nb, u);
    for (; u < u0 + u1; u += nt) tt_embedding_backward_run_unit<0>(g1, nb, u - u0);
}

// The batch's ints: thread b < nbb decodes lookup ids[b] (or first + b when ids is null)
__host__ __device__ inline void tt_embedding_backward_decode_batch(const TtEmbeddingBackwardShape& s, const TtEmbeddingBackwardLayout& L, float* sm,
                                                                   int nbb, int tid, const int* ids, int first,
                                                                   const int64_t* indices, const int* bag_of) {
    if (tid >= nbb) return;
    const int lid = ids ? ids[tid] : first + tid;
    const int bag = bag_of[lid], tbl = bag / s.B;
    int idx[TT_EMBEDDING_BACKWARD_MAX_T];
    tt_embedding_backward_decode_row(s, indices[lid], idx);
    int* si = (int*)(sm + L.int_off) + tid * TT_EMBEDDING_BACKWARD_INTS;
    si[0] = lid;
    si[1] = bag;
TT_EMBEDDING_BACKWARD_UNROLL
    for (int t = 0; t < TT_EMBEDDING_BACKWARD_MAX_T; t++) {
        if (t >= s.T) break;
        si[2 + t] = tbl * s.p[t] + idx[t];
    }
}

// The batch's slices and dY rows into shared memory
__host__ __device__ inline void tt_embedding_backward_load_batch(const TtEmbeddingBackwardShape& s, const TtEmbeddingBackwardLayout& L, float* sm,
                                                                 int nbb, int tid, int nt, const float* cores,
                                                                 const float* dY) {
    const int* ints = (const int*)(sm + L.int_off);
    for (int b = 0; b < nbb; b++) {
        float* lk = sm + b * L.lookup_floats;
        for (int t = 0; t < s.T; t++) {
            const float* src = cores + s.core_off[t] + (int64_t)ints[b * TT_EMBEDDING_BACKWARD_INTS + 2 + t] * s.S[t];
            float* d = lk + L.sl_off[t];
            const int nr = s.n[t], ps = L.PS[t];
            for (int e = tid; e < s.S[t]; e += nt) {
                const int k = e / nr;
                d[k * ps + (e - k * nr)] = src[e];
            }
        }
        const float* g = dY + (int64_t)ints[b * TT_EMBEDDING_BACKWARD_INTS + 1] * s.D;
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
    for (int64_t first = (int64_t)block * L.nb; first < s.nnz; first += (int64_t)nblocks * L.nb) {
        const int nbb = (int)min((int64_t)L.nb, (int64_t)s.nnz - first);
        ex.phase([&](int tid) { tt_embedding_backward_decode_batch(s, L, sm, nbb, tid, nullptr, (int)first, indices, bag_of); });
        ex.phase([&](int tid) { tt_embedding_backward_load_batch(s, L, sm, nbb, tid, ex.nt, cores, dY); });
        for (int ph = 0; ph < 2 * s.T - 3; ph++)
            ex.phase([&](int tid) { tt_embedding_backward_chain_phase(s, L, sm, ph, nbb, tid, ex.nt, dG); });
    }
}

extern __shared__ float4 tt_embedding_backward_smem[];

__global__ void __launch_bounds__(TT_EMBEDDING_BACKWARD_MAX_FUSED_BLOCK)
tt_embedding_backward3_kernel(const TtEmbeddingBackwardShape shape, const TtEmbeddingBackwardLayout lay, const int64_t* indices, const int* bag_of,
                              const float* cores, const float* dY, float* dG) {
    __shared__ TtEmbeddingBackwardShape s;
    __shared__ TtEmbeddingBackwardLayout L;
    if (threadIdx.x == 0) { s = shape; L = lay; }
    __syncthreads();
    TtEmbeddingBackwardDeviceExec ex{(int)threadIdx.x, (int)blockDim.x};
    tt_embedding_backward_fused_block(ex, s, L, (float*)tt_embedding_backward_smem, blockIdx.x, gridDim.x, indices,
                                      bag_of, cores, dY, dG);
}

// one warp per bag, its lanes over the bag's lookups: the bag of every lookup (version 3's kernels read it)
__global__ void tt_embedding_backward_bags_kernel(const __grid_constant__ TtEmbeddingBackwardShape s, const int64_t* offsets, int* bag_of) {
    const int lane = threadIdx.x & 31;
    const int64_t nwarps = ((int64_t)gridDim.x * blockDim.x) >> 5;
    for (int64_t bag = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; bag < s.num_bags; bag += nwarps)
        for (int64_t j = offsets[bag] + lane; j < offsets[bag + 1]; j += 32) bag_of[j] = (int)bag;
}

// the pivot core of versions 6-7: the largest slice (the first of equals)
inline int tt_embedding_backward_pick_pivot(const TtEmbeddingBackwardShape& s) {
    int c = 0;
    for (int t = 1; t < s.T; t++) if (s.S[t] > s.S[c]) c = t;
    return c;
}

// ---- version 6: grouped by the pivot slice, sandwich form, float4 register tiles, deterministic ----

// Version 6 in one paragraph. Per lookup with pivot core h, let P = G_0 ... G_{h-1} (the prefix, m_{h-1} x R_h),
// Suf = G_{h+1} ... G_{T-1} (the suffix, R_{h+1} x w_{h+1}, w_t = q_t ... q_{T-1}) and g the dY row seen as
// m_{h-1} x q_h x w_{h+1}. Then
//   Y   = g x_beta Suf          (m_{h-1} x n_h: the gradient of P_h = P G_h, FBTT's dM_h)
//   L_h = P^T x_alpha g         (R_h q_h x w_{h+1})
//   (I)   dG_h    += P^T Y         summed over every lookup of the pivot slice (R_h x n_h, one GEMM)
//   (II)  dM_{h-1} = Y G_h^T       (m_{h-1} x R_h: what flows into the cores left of h)
//   (III) L_{h+1}  = G_h^T L_h     (R_{h+1} x w_{h+1}: what flows into the cores right of h)
// and the side cores get theirs by short chains (left: FBTT's dG_t = P_{t-1}^T dM_t, dM_{t-1} = dM_t G_t^T;
// right, its mirror: dG_t = L_t x_beta Suf_{t+1}^T, L_{t+1} = G_t^T L_t). The three products with G_h are the
// FLOPs (3 x 32,768 of the 106,496 per lookup at the default); they run on a G_h slice held once per block.
// Launches: a memset of the counters; (1) prep: one thread per lookup decodes its row and bag, writes its
// slice row per core and counts the lookups of every slice (int atomics: exact), and the last block to
// finish turns the counts into the work lists (chunks of <= 64 lookups per pivot slice; items of the final
// kernel; each slice's place in the list); (2) lists: one block per slice writes its lookups in lookup
// order (an ordered scan of its core's keys, no sort); (3) one block per chunk: the chunk's lookups from
// the list, G_h into shared memory once, batches of NB lookups through 3 + 2F phases (F = the longer side
// chain; F = 0 at T = 3), the pivot gradient in registers across the chunk, the side cores' per-lookup
// gradients to W (1 KB per lookup at the default); a pivot slice with one chunk is updated right there;
// (4) one block per (slice, columns, part) of everything else: the rows of a slice in a fixed order (lookup
// order for W, chunk order for pivot partials), the parts of a long slice combined by the last block to
// finish (a counter), then the optimizer. No float atomics anywhere: the bits do not depend on timing.
static const int TT_EMBEDDING_BACKWARD_GROUP_CHUNK = 64;                    // lookups of one pivot slice per block (longer slices split evenly)
static const int TT_EMBEDDING_BACKWARD_GROUP_MAX_NB = 16;                   // lookups per batch
static const int TT_EMBEDDING_BACKWARD_GROUP_SMEM_TARGET = 110 * 1024;      // largest NB whose block fits this (two blocks per SM)
static const int TT_EMBEDDING_BACKWARD_GROUP_SMEM_MAX = 227 * 1024 - 1024;  // else the most an sm_90 block can have (less the static copies)
static const int TT_EMBEDDING_BACKWARD_GROUP_CW = 512;                      // final kernel: columns of a slice per item
static const int TT_EMBEDDING_BACKWARD_GROUP_RC = 64;                       // final kernel: rows (lookups or chunk partials) per item
static const int TT_EMBEDDING_BACKWARD_GROUP_PREP_BLOCK = 256;              // prep kernel (and its last block's planning)
static const int TT_EMBEDDING_BACKWARD_GROUP_FINAL_BLOCK = 512;             // final kernel
static const int TT_EMBEDDING_BACKWARD_GROUP_FINAL_GRID = 8192;             // final kernel: grid-stride over the items
static const int TT_EMBEDDING_BACKWARD_GROUP_MAX_ACC2_BLOCK = 256;          // two or four register tiles per thread only in blocks up to this
static const int TT_EMBEDDING_BACKWARD_GROUP_LIST_BLOCK = 512;              // list kernel
static const int TT_EMBEDDING_BACKWARD_GROUP_LIST_STAGE = 10240;            // list kernel: keys staged per tile (dynamic shared memory)
static const int TT_EMBEDDING_BACKWARD_GROUP_LIST_GRID = 8192;              // list kernel: grid-stride over the slices
static const int TT_EMBEDDING_BACKWARD_BUCKET = 128;  // versions 7 and 9: a slice's prep slots; slices of at most this many lookups skip the scan

// what every kernel of version 6 needs to know besides the shape (host-built per block size)
struct TtEmbeddingBackwardGroupPlan {
    int h, nt, nb, chunk;   // pivot core, threads per block, lookups per batch, lookups per chunk
    int acc;                // 1, 2: 4x4 register tiles of dG_h per thread; 0: dG_h accumulated in shared memory
    int fastI, fastII, fastIII;   // float4 register-tile paths of the three pivot products (else generic tiles)
    int fastY, fastL;             // ... and of Y and L_h
    int tiles_I, PH, F;     // 4x4 tiles of dG_h; row pitch of G_h in shared memory; side-chain phases
    int acc_global;         // dG_h (acc == 0) accumulated in the chunk's row of `partial`, not in shared memory
    int roomy;              // the block fits the 110 KB target (two per SM); else only the largest block, at NB = 1
    int w[TT_EMBEDDING_BACKWARD_MAX_T + 1];       // w[t] = q_t ... q_{T-1}, w[T] = 1
    // shared memory, in floats: [G_h: R_h x PH][dG_h (acc == 0)][1.0f][NB lookup regions of LB][chunk ints]
    int gh_off, acc_off, one_off, lk_off, LB, ints_off, total_floats;
    int key_stride;         // row stride of the key array (nnz rounded up to 4; the pad holds -1)
    // a lookup's region: other cores' slices (unpadded), g, left prefixes P_t, right suffixes Suf_t, Y, L_h,
    // left gradients dM_t, right L_t (Y and L_h alias g where they are g itself)
    int sl_off[TT_EMBEDDING_BACKWARD_MAX_T], g_off, P_off[TT_EMBEDDING_BACKWARD_MAX_T], Suf_off[TT_EMBEDDING_BACKWARD_MAX_T], Y_off, Lh_off;
    int dM_off[TT_EMBEDDING_BACKWARD_MAX_T], L_off[TT_EMBEDDING_BACKWARD_MAX_T];
    int64_t W_off[TT_EMBEDDING_BACKWARD_MAX_T];   // core t's [nnz, S_t] per-lookup gradients in W (t != h)
    int ncol[TT_EMBEDDING_BACKWARD_MAX_T];        // final kernel: column items per slice of core t
    int max_chunks, max_items;     // grid bounds (the real counts come from the prep kernel)
};

inline TtEmbeddingBackwardGroupPlan tt_embedding_backward_group_make_plan(const TtEmbeddingBackwardShape& s, const int64_t* W_off, int nt) {
    TtEmbeddingBackwardGroupPlan P;
    memset(&P, 0, sizeof P);
    const int T = s.T;
    const int h = tt_embedding_backward_pick_pivot(s);
    P.h = h;
    P.nt = nt;
    P.chunk = TT_EMBEDDING_BACKWARD_GROUP_CHUNK;
    P.w[T] = 1;
    for (int t = T - 1; t >= 0; t--) P.w[t] = P.w[t + 1] * s.q[t];
    for (int t = 0; t < T; t++) P.W_off[t] = W_off[t];
    const int Rh = s.R[h], nh = s.n[h], mprev = h ? s.m[h - 1] : 1, Rn = s.R[h + 1], wn = P.w[h + 1];
    P.F = std::max(std::max(h - 1, T - 2 - h), 0);
    P.fastI = h >= 1 && Rh % 4 == 0 && nh % 4 == 0;
    if (P.fastI) {
        P.tiles_I = (Rh / 4) * (nh / 4);
        const int need = (P.tiles_I + nt - 1) / nt;
        P.acc = need <= 1 ? 1 : nt > TT_EMBEDDING_BACKWARD_GROUP_MAX_ACC2_BLOCK ? 0 : need <= 2 ? 2 : need <= 4 ? 4 : 0;   // (4: rank 64)
        if (P.acc == 0) { P.fastI = 0; P.tiles_I = 0; }
    }
    P.fastII = h >= 1 && mprev % 4 == 0 && Rh % 4 == 0 && nh % 4 == 0;
    P.fastIII = h <= T - 2 && Rn % 4 == 0 && wn % 4 == 0;
    P.fastY = h <= T - 2 && s.m[h] % 4 == 0 && Rn % 4 == 0 && wn % 4 == 0;
    P.fastL = h >= 1 && Rh % 4 == 0 && P.w[h] % 4 == 0;
    // a lookup's region first (offsets from lk_off)
    auto r4 = [](int64_t x) -> int64_t { return (x + 3) / 4 * 4; };   // (64-bit: huge shapes must not wrap into a fit)
    int64_t cur = 0;
    for (int t = 0; t < T; t++) {
        if (t == h) continue;
        P.sl_off[t] = (int)cur;
        cur += r4(s.S[t]);
    }
    P.g_off = (int)cur;
    cur += r4(s.D);
    for (int t = 1; t <= h - 1; t++) { P.P_off[t] = (int)cur; cur += r4((int64_t)s.m[t] * s.R[t + 1]); }
    for (int t = h + 1; t <= T - 2; t++) { P.Suf_off[t] = (int)cur; cur += r4((int64_t)s.R[t] * P.w[t]); }
    if (h <= T - 2) { P.Y_off = (int)cur; cur += r4((int64_t)s.m[h] * s.R[h + 1]); }
    else P.Y_off = P.g_off;     // h = T-1: Y = dM_{T-1} = g
    if (h >= 1) { P.Lh_off = (int)cur; cur += r4((int64_t)s.R[h] * P.w[h]); }
    else P.Lh_off = P.g_off;    // h = 0: L_0 = g
    for (int t = 1; t <= h - 1; t++) { P.dM_off[t] = (int)cur; cur += r4((int64_t)s.m[t] * s.R[t + 1]); }
    for (int t = h + 1; t <= T - 2; t++) { P.L_off[t] = (int)cur; cur += r4((int64_t)s.R[t] * P.w[t]); }
    if (cur % 8 == 0) cur += 4;   // LB/4 odd: the same row of 8 consecutive lookups falls in 8 different bank groups
    P.LB = (int)std::min<int64_t>(cur, INT32_MAX / 64);
    P.key_stride = (int)tt_embedding_backward_round4(std::max(s.nnz, 1));
    // The block's part: [G_h: R_h x PH][dG_h (acc == 0)][1.0f]. mode 0 keeps G_h and dG_h in shared memory; mode 1
    // accumulates dG_h in the chunk's row of `partial` instead. The first mode whose block fits the target with some
    // NB wins (NB as large as fits); failing that, the first that fits the largest block the device allows, at NB = 1.
    // (A mode 2 read G_h from the cores where it does not fit, at rank 128; version 9 runs those shapes 6x faster;
    // its code: git show 55765c2:dev/cuda/tt_embedding_backward.cu.)
    auto layout = [&](int mode, int nb) {
        P.acc_global = mode >= 1 && P.acc == 0;
        // Pad G_h's rows (PH/4 odd) so that (II)'s lanes, which read 8 consecutive rows at one column, hit 8
        // different bank groups; (III)'s generic tiles index G_h with one flat (k, a) index, so only pad when
        // (III) is absent or runs its own float4 tiles.
        P.PH = nh;
        if ((h == T - 1 || P.fastIII) && nh % 8 == 0) P.PH = nh + 4;
        int64_t c = 0;
        P.gh_off = 0;
        c += tt_embedding_backward_round4((int64_t)Rh * P.PH);
        P.acc_off = (int)c;
        if (P.acc == 0 && !P.acc_global) c += tt_embedding_backward_round4((int64_t)Rh * nh);
        P.one_off = (int)c;
        c += 4;
        P.lk_off = (int)c;
        P.nb = nb;
        c += tt_embedding_backward_round4((int64_t)nb * P.LB);
        P.ints_off = (int)std::min<int64_t>(c, INT32_MAX / 2);
        c += tt_embedding_backward_round4((int64_t)P.chunk * TT_EMBEDDING_BACKWARD_INTS);
        P.total_floats = (int)std::min<int64_t>(c, INT32_MAX / 2);
        return (size_t)P.total_floats * sizeof(float);
    };
    bool placed = false;
    for (int mode = 0; mode < 2 && !placed; mode++)
        for (int nb = TT_EMBEDDING_BACKWARD_GROUP_MAX_NB; nb >= 1 && !placed; nb--) placed = layout(mode, nb) <= (size_t)TT_EMBEDDING_BACKWARD_GROUP_SMEM_TARGET;
    P.roomy = placed;
    for (int mode = 0; mode < 2 && !placed; mode++) placed = layout(mode, 1) <= (size_t)TT_EMBEDDING_BACKWARD_GROUP_SMEM_MAX;
    if (!placed) layout(1, 1);   // too large for any block: the skip reason reports it
    const int Kc = s.tables * s.p[h];
    P.max_chunks = (int)(ceil_div<int64_t>(s.nnz, P.chunk) + Kc);
    int64_t items = 0;
    for (int t = 0; t < T; t++) {
        P.ncol[t] = (int)ceil_div<int64_t>(s.S[t], TT_EMBEDDING_BACKWARD_GROUP_CW);
        const int64_t rows = t == h ? ceil_div<int64_t>(P.max_chunks, TT_EMBEDDING_BACKWARD_GROUP_RC) + Kc
                                    : ceil_div<int64_t>(s.nnz, TT_EMBEDDING_BACKWARD_GROUP_RC) + (int64_t)s.tables * s.p[t];
        items += P.ncol[t] * rows;
    }
    P.max_items = (int)std::min<int64_t>(items, INT32_MAX);
    return P;
}
inline size_t tt_embedding_backward_group_smem_bytes(const TtEmbeddingBackwardGroupPlan& P) { return (size_t)P.total_floats * sizeof(float); }
// the list kernel's staged keys per tile (its dynamic shared memory, in ints)
__host__ __device__ inline int tt_embedding_backward_group_list_stage(const TtEmbeddingBackwardGroupPlan& P) {
    return P.key_stride < TT_EMBEDDING_BACKWARD_GROUP_LIST_STAGE ? P.key_stride : TT_EMBEDDING_BACKWARD_GROUP_LIST_STAGE;
}
// version 9's list blocks: 128 threads where a core has at most 4,096 lookups (EL-Rec's L 1: a 16 KB stage, every
// slice's block resident at once, 7 scan phases instead of 9), else the 512 of version 6 (at 10,240 lookups a 40 KB
// stage leaves 5 blocks per SM: 128 threads lost there)
inline int tt_embedding_backward_group_list_threads(const TtEmbeddingBackwardGroupPlan& P) {
    return P.key_stride <= 4096 ? 128 : TT_EMBEDDING_BACKWARD_GROUP_LIST_BLOCK;
}
// kernels 2 and 3 copy the shape and the plan into static shared memory; main reserves 1024 bytes for them
static_assert(sizeof(TtEmbeddingBackwardShape) + sizeof(TtEmbeddingBackwardGroupPlan) <= 1024, "static shared copies exceed the reserve");

// device workspace of version 6 (allocated once, outside timing)
struct TtEmbeddingBackwardWorkspace {
    int* keys;         // [T][key_stride]: slice row (tbl * p_t + i_t) of every lookup in every core, -1 past nnz
    int* bag_of;       // [nnz]
    int* zeroed;       // one memset per call: counts [K_total] | done [1] | item counters [max_items]
    int *counts, *done, *ctr;
    int* chunk_desc;   // [max_chunks][4]: pivot slice, first and last rank (exclusive) of the chunk's lookups
    int* choff;        // [Kc + 1]: first chunk of every pivot slice
    int* totals;       // [2]: chunks, items
    int* item_desc;    // [max_items][4]: slice key, column item, part, parts
    int* start;        // [K_total + 1]: first entry of every slice's lookups in `list` (exclusive prefix of the counts)
    int* list;         // [T nnz]: every slice's lookups in lookup order, slice after slice
    float* W;          // per-lookup gradients of the other cores (plan.W_off)
    float* partial;    // [max_chunks][S_h]: pivot gradients of chunks of slices with more than one chunk
    float* final_parts;  // [max_items][CW]: parts of long slices in the final kernel
    float* side;       // version 7's side kernel: [items][S_0] sums of the parts of long slices of cores 0 and 2
    size_t zeroed_bytes;
};

// small helpers that the CPU test runs too
__host__ __device__ inline int tt_embedding_backward_group_atomic_inc(int* p, int v) { return TT_EMBEDDING_BACKWARD_DEV_HOST(atomicAdd(p, v), (*p += v) - v); }
__host__ __device__ inline void tt_embedding_backward_group_fence() {
#ifdef __CUDA_ARCH__
    __threadfence();
#endif
}
// loads of what other blocks of the same kernel wrote (atomics, parts): from L2, never a stale L1 line
template <class V>
__host__ __device__ inline V tt_embedding_backward_group_ldcg(const V* p) { return TT_EMBEDDING_BACKWARD_DEV_HOST(__ldcg(p), *p); }
__host__ __device__ __forceinline__ float4 tt_embedding_backward_group_ld4(const float* p) {
    return TT_EMBEDDING_BACKWARD_DEV_HOST(*reinterpret_cast<const float4*>(p), make_float4(p[0], p[1], p[2], p[3]));
}
// c[r][q] += a[r] b[q] (a 4x4 outer product), c[r][q] += a_r . b_q (four 4-long dot products)
__host__ __device__ __forceinline__ void tt_embedding_backward_group_outer(float (&c)[16], float4 a, float4 b) {
    const float av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {b.x, b.y, b.z, b.w};
TT_EMBEDDING_BACKWARD_UNROLL
    for (int r = 0; r < 4; r++)
TT_EMBEDDING_BACKWARD_UNROLL
        for (int q = 0; q < 4; q++) c[r * 4 + q] = fmaf(av[r], bv[q], c[r * 4 + q]);
}
__host__ __device__ __forceinline__ void tt_embedding_backward_group_dot(float& c, float4 a, float4 b) {
    c = fmaf(a.x, b.x, c);
    c = fmaf(a.y, b.y, c);
    c = fmaf(a.z, b.z, c);
    c = fmaf(a.w, b.w, c);
}

// A block-wide inclusive scan (Hillis-Steele, ping-pong): buf[0 .. nt) and buf[nt .. 2nt) hold each thread's
// count on entry; returns where the inclusive sums are. log2(nt) phases, no thread reads what another
// writes in the same phase.
template <class Exec>
__host__ __device__ inline const int* tt_embedding_backward_group_scan(Exec& ex, int* buf) {
    const int nt = ex.nt;
    int src = 1;
    for (int d = 1; d < nt; d <<= 1) {
        ex.phase([&](int tid) {
            const int* in = buf + src * nt;
            int* out = buf + (3 - src) * nt;
            out[tid] = in[tid] + (tid >= d ? in[tid - d] : 0);
        });
        src = 3 - src;
    }
    return buf + src * nt;
}

// Threads own contiguous ranges of the keys 0 .. K-1; n(g) is key g's number of entries in an ordered output. A block
// scan gives the offsets: put(g, off, n(g)) runs for every key with the place of its first entry (by the thread that
// owns the key), then done(total) once.
template <class Exec, class Count, class Put, class Done>
__host__ __device__ inline void tt_embedding_backward_group_place(Exec& ex, int K, int* scan, Count&& n, Put&& put, Done&& done) {
    const int nt = ex.nt, per = (K + nt - 1) / nt;
    ex.phase([&](int tid) {
        const int g0 = min(tid * per, K), g1 = min(g0 + per, K);
        int c = 0;
        for (int g = g0; g < g1; g++) c += n(g);
        scan[tid] = c;
        scan[nt + tid] = c;
    });
    const int* incl = tt_embedding_backward_group_scan(ex, scan);
    ex.phase([&](int tid) {
        const int g0 = min(tid * per, K), g1 = min(g0 + per, K);
        int off = incl[tid] - scan[tid];
        for (int g = g0; g < g1; g++) {
            const int c = n(g);
            put(g, off, c);
            off += c;
        }
        if (tid == nt - 1) done(incl[tid]);
    });
}

// The lookups j (in increasing order) with keys[j] == key whose rank among them is in [lo, hi): found(rank -
// lo, j) for each, by the thread that finds it. This is the grouping of version 6: no sort, and the order is
// the lookup order whatever the timing. Per tile of `cap` keys (keys: 16-byte aligned, `len` a multiple of 4, -1 past the
// lookups): the block copies the tile into shared memory with coalesced int4 loads (first() runs in that
// phase too: work that need not wait), every thread counts the matches in its contiguous range (an odd
// number of keys, so the lanes of a warp read 32 different banks), a block scan gives every thread its
// first rank, and the threads whose ranks meet [lo, hi) write their matches.
template <class Exec, class First, class Found>
__host__ __device__ inline void tt_embedding_backward_group_collect(Exec& ex, const int* keys, int len, int key, int lo, int hi, int* scan,
                                                              int* stage, int cap, First&& first, Found&& found) {
    const int nt = ex.nt;
    int base = 0;                                          // matches in the tiles before (the same in every thread)
    for (int t0 = 0; t0 < len && base < hi; t0 += cap) {
        const int n = min(cap, len - t0), per = (n + nt - 1) / nt | 1;
        ex.phase([&](int tid) {
            for (int i = 4 * tid; i < n; i += 4 * nt) {
#ifdef __CUDA_ARCH__
                *reinterpret_cast<int4*>(stage + i) = __ldg(reinterpret_cast<const int4*>(keys + t0 + i));
#else
                for (int c = 0; c < 4; c++) stage[i + c] = keys[t0 + i + c];
#endif
            }
            if (t0 == 0) first(tid);
        });
        ex.phase([&](int tid) {
            const int j0 = min(tid * per, n), j1 = min(j0 + per, n);
            int c = 0;
            for (int j = j0; j < j1; j++) c += stage[j] == key;
            scan[tid] = c;
            scan[nt + tid] = c;
        });
        const int* incl = tt_embedding_backward_group_scan(ex, scan);
        ex.phase([&](int tid) {
            const int c = scan[tid];
            int r = base + incl[tid] - c;
            if (c == 0 || r >= hi || r + c <= lo) return;
            const int j0 = min(tid * per, n), j1 = min(j0 + per, n);
            for (int j = j0; j < j1 && r < hi; j++) {
                if (stage[j] != key) continue;
                if (r >= lo) found(r - lo, t0 + j);
                r++;
            }
        });
        base += incl[nt - 1];
    }
}

// A slice's n <= BUCKET lookups in lookup order (versions 7 and 9): the prep kernel wrote each into the slice's bucket
// at the slot its atomic count returned (arrival order, which depends on timing); an entry's rank is the number of
// entries smaller than it (O(n^2) compares over the block). found(rank, lookup) for each: the ordered scan's list.
template <class Exec, class Found>
__host__ __device__ inline void tt_embedding_backward_bucket_order(Exec& ex, const int* bucket, int n, int* stage, Found&& found) {
    ex.phase([&](int tid) {
        for (int i = tid; i < n; i += ex.nt) stage[i] = tt_embedding_backward_group_ldcg(bucket + i);
    });
    ex.phase([&](int tid) {
        for (int i = tid; i < n; i += ex.nt) {
            const int v = stage[i];
            int r = 0;
            for (int m = 0; m < n; m++) r += stage[m] < v;
            found(r, v);
        }
    });
}

// ---- version 6, kernel 1: per lookup, its bag, slice rows and the slice counts ----

__host__ __device__ inline void tt_embedding_backward_group_prep_lookup(const TtEmbeddingBackwardShape& s, int key_stride, int j,
                                                                  const int64_t* offsets, const int64_t* indices, int* keys,
                                                                  int* bag_of, int* counts, int* bucket = nullptr) {
    if (j >= tt_embedding_backward_count(s)) {             // the pad of every key row
        if (j < key_stride)
            for (int t = 0; t < s.T; t++) keys[(int64_t)t * key_stride + j] = -1;
        return;
    }
    const int bag = tt_embedding_backward_bag_of(offsets, s.num_bags, j), tbl = bag / s.B;
    int idx[TT_EMBEDDING_BACKWARD_MAX_T];
    tt_embedding_backward_decode_row(s, indices[j], idx);
    bag_of[j] = bag;
TT_EMBEDDING_BACKWARD_UNROLL
    for (int t = 0; t < TT_EMBEDDING_BACKWARD_MAX_T; t++) {
        if (t >= s.T) break;
        const int row = tbl * s.p[t] + idx[t];
        keys[(int64_t)t * key_stride + j] = row;
        const int key = s.key_base[t] + row, slot = tt_embedding_backward_group_atomic_inc(counts + key, 1);
        if (bucket && slot < TT_EMBEDDING_BACKWARD_BUCKET) bucket[(int64_t)key * TT_EMBEDDING_BACKWARD_BUCKET + slot] = j;
    }
}

// chunks of pivot slice k (n lookups): ceil(n / chunk), split evenly
__host__ __device__ inline int tt_embedding_backward_group_nchunks(int n, int chunk) { return (n + chunk - 1) / chunk; }

// final-kernel rows of slice key g: its lookups (other cores) or its chunk partials (pivot, only when it has
// more than one chunk: a one-chunk slice is finished by its chunk's block)
__host__ __device__ inline int tt_embedding_backward_group_final_rows(const TtEmbeddingBackwardShape& s, const TtEmbeddingBackwardGroupPlan& P,
                                                                int g, int cnt) {
    if (g >= s.key_base[P.h] && g < s.key_base[P.h + 1]) {
        const int nch = tt_embedding_backward_group_nchunks(cnt, P.chunk);
        return nch > 1 ? nch : 0;
    }
    return cnt;
}

// The last block of the prep kernel: from the counts, where every slice's lookups go in the list, the chunk
// list of kernel 2 and the item list of kernel 3 (each written by the thread that owns the slice) and their
// totals. Threads own contiguous ranges of slices; block scans give the offsets.
template <class Exec>
__host__ __device__ inline void tt_embedding_backward_group_plan_block(Exec& ex, const TtEmbeddingBackwardShape& s, const TtEmbeddingBackwardGroupPlan& P,
                                                                 const int* counts, int* scan, int* chunk_desc, int* choff,
                                                                 int* item_desc, int* start, int* totals) {
    const int h = P.h, Kc = s.tables * s.p[h], kb = s.key_base[h], K_total = s.key_base[s.T];
    // where every slice's lookups start in the list
    tt_embedding_backward_group_place(ex, K_total, scan, [&](int g) { return tt_embedding_backward_group_ldcg(counts + g); },
                                 [&](int g, int off, int) { start[g] = off; }, [&](int total) { start[K_total] = total; });
    // chunks of every pivot slice
    auto chunks_of = [&](int k) { return tt_embedding_backward_group_nchunks(tt_embedding_backward_group_ldcg(counts + kb + k), P.chunk); };
    tt_embedding_backward_group_place(ex, Kc, scan, chunks_of, [&](int k, int off, int nch) {
        const int n = tt_embedding_backward_group_ldcg(counts + kb + k);
        choff[k] = off;
        for (int c = 0; c < nch; c++) {
            int* d = chunk_desc + (int64_t)(off + c) * 4;
            d[0] = k;
            d[1] = (int)((int64_t)c * n / nch);
            d[2] = (int)((int64_t)(c + 1) * n / nch);
            d[3] = nch;
        }
    }, [&](int total) { choff[Kc] = total; totals[0] = total; });
    // items of the final kernel: every slice with rows, ncol column items x ceil(rows / RC) parts
    auto parts_of = [&](int g) {
        const int rows = tt_embedding_backward_group_final_rows(s, P, g, tt_embedding_backward_group_ldcg(counts + g));
        return (rows + TT_EMBEDDING_BACKWARD_GROUP_RC - 1) / TT_EMBEDDING_BACKWARD_GROUP_RC;
    };
    auto ncol_of = [&](int g) { return P.ncol[tt_embedding_backward_key_core(s, g)]; };
    tt_embedding_backward_group_place(ex, K_total, scan, [&](int g) { return parts_of(g) * ncol_of(g); }, [&](int g, int off, int) {
        const int parts = parts_of(g), ncol = ncol_of(g);
        for (int cc = 0; cc < ncol; cc++)
            for (int p = 0; p < parts; p++) {
                int* d = item_desc + (int64_t)(off + cc * parts + p) * 4;
                d[0] = g;
                d[1] = cc;
                d[2] = p;
                d[3] = parts;
            }
    }, [&](int total) { totals[1] = total; });
}

// The prep kernel's per-lookup part (a thread per lookup); true in the block that arrives last, which then sees every count
__device__ inline bool tt_embedding_backward_group_prep_then_last(const TtEmbeddingBackwardShape& s, int key_stride, const int64_t* offsets,
                                                            const int64_t* indices, const TtEmbeddingBackwardWorkspace& ws, int* bucket = nullptr) {
    __shared__ int last;
    tt_embedding_backward_group_prep_lookup(s, key_stride, blockIdx.x * blockDim.x + threadIdx.x, offsets, indices, ws.keys, ws.bag_of, ws.counts,
                                            bucket);
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(ws.done, 1) == (int)gridDim.x - 1;
    __syncthreads();
    if (!last) return false;
    __threadfence();
    return true;
}

__global__ void __launch_bounds__(TT_EMBEDDING_BACKWARD_GROUP_PREP_BLOCK)
tt_embedding_backward_group_prep_kernel(const __grid_constant__ TtEmbeddingBackwardShape s, const __grid_constant__ TtEmbeddingBackwardGroupPlan P,
                                   const int64_t* offsets, const int64_t* indices, const __grid_constant__ TtEmbeddingBackwardWorkspace ws) {
    __shared__ int scan[3 * TT_EMBEDDING_BACKWARD_GROUP_PREP_BLOCK];
    if (!tt_embedding_backward_group_prep_then_last(s, P.key_stride, offsets, indices, ws)) return;
    TtEmbeddingBackwardDeviceExec ex{(int)threadIdx.x, (int)blockDim.x};
    tt_embedding_backward_group_plan_block(ex, s, P, ws.counts, scan, ws.chunk_desc, ws.choff, ws.item_desc, ws.start, ws.totals);
}

// ---- version 6, list kernel: every slice's lookups, in lookup order ----

// Slice key g's lookups in lookup order to list[start[g] ..): one ordered scan of its core's keys. One
// block per slice (O(slices x nnz) work in all, done once; kernels 2 and 3 read their rows from the list).
template <class Exec>
__host__ __device__ inline void tt_embedding_backward_group_list_block(Exec& ex, const TtEmbeddingBackwardShape& s, const TtEmbeddingBackwardGroupPlan& P,
                                                                 int g, const TtEmbeddingBackwardWorkspace& ws, int* scan, int* stage, int cap) {
    const int n = ws.counts[g];
    if (n == 0) return;
    const int t = tt_embedding_backward_key_core(s, g);
    int* dst = ws.list + ws.start[g];
    tt_embedding_backward_group_collect(ex, ws.keys + (int64_t)t * P.key_stride, P.key_stride, g - s.key_base[t], 0, n, scan, stage, cap,
                                   [](int) {}, [&](int i, int id) { dst[i] = id; });
}

__global__ void __launch_bounds__(TT_EMBEDDING_BACKWARD_GROUP_LIST_BLOCK, 2)
tt_embedding_backward_group_lists_kernel(const TtEmbeddingBackwardShape shape, const TtEmbeddingBackwardGroupPlan plan,
                                    const __grid_constant__ TtEmbeddingBackwardWorkspace ws) {
    __shared__ TtEmbeddingBackwardShape s;
    __shared__ TtEmbeddingBackwardGroupPlan P;
    __shared__ int scan[3 * TT_EMBEDDING_BACKWARD_GROUP_LIST_BLOCK];
    if (threadIdx.x == 0) { s = shape; P = plan; }
    __syncthreads();
    TtEmbeddingBackwardDeviceExec ex{(int)threadIdx.x, (int)blockDim.x};
    for (int g = blockIdx.x; g < s.key_base[s.T]; g += gridDim.x)
        tt_embedding_backward_group_list_block(ex, s, P, g, ws, scan, (int*)tt_embedding_backward_smem, tt_embedding_backward_group_list_stage(P));
}

// ---- version 6, kernel 2: one block per chunk of a pivot slice ----

// Lane orders of the float4 tiles. A warp's 128-bit shared-memory load costs 4 requests (the return path
// carries 128 bytes a clock), 2 when lanes n and n^1, or n and n^2, read the same address. Each tile loads
// one float4 of an A operand (one per row tile) and one of a B operand (one per column tile) per step, so
// the units are ordered so that lanes n, n^1 share one operand and n, n^2 the other: 2 + 2 requests per
// 16 FMAs, what the FMA pipes take in the same time, instead of 2 + 4 or 4 + 4.
// Pairing rows: unit u of a grid of nr x nc tiles per lookup -> lookup b, row tile rt, column tile ct, with
// lanes n, n^1 in the same column tile (rows 2i, 2i+1) and n, n^2 in the same row tile (nr even).
__host__ __device__ inline void tt_embedding_backward_group_rc_rows(int u, int nr, int nc, int& b, int& rt, int& ct) {
    const int per = nr * nc;
    b = u / per;
    const int rem = u - b * per;
    if (nr % 2 == 0) {
        const int v = rem >> 1, r2 = v / nc;
        rt = 2 * r2 + (rem & 1);
        ct = v - r2 * nc;
    } else {
        rt = rem / nc;
        ct = rem - rt * nc;
    }
}
// Pairing lookups: unit u -> lookup b = 2 (u/2 / per) + u%2 (possibly >= nbb: no unit), row and column tile
// from the rest, so lanes n, n^1 have the same tiles of two lookups (an operand shared by the lookups, G_h,
// is the same) and n, n^2 the same lookup. Units: ceil(nbb / 2) * 2 * per.
__host__ __device__ inline void tt_embedding_backward_group_rc_lookups(int u, int nr, int nc, int& b, int& rt, int& ct) {
    const int per = nr * nc, v = u >> 1, b2 = v / per, rem = v - b2 * per;
    b = 2 * b2 + (u & 1);
    rt = rem / nc;
    ct = rem - rt * nc;
    (void)nr;
}
__host__ __device__ inline int tt_embedding_backward_group_units_lookups(int nbb, int per) { return (nbb + 1) / 2 * 2 * per; }

// (I)'s tile of thread-owned tile index `tile` (rows 4 rt .., columns 4 ct .. of dG_h)
__host__ __device__ inline void tt_embedding_backward_group_tile_I_rc(const TtEmbeddingBackwardShape& s, const TtEmbeddingBackwardGroupPlan& P, int tile,
                                                                int& rt, int& ct) {
    int b;
    tt_embedding_backward_group_rc_rows(tile, s.R[P.h] / 4, s.n[P.h] / 4, b, rt, ct);
}

// f(i, rt, ct) for each of a thread's (I) tiles: slot i of its ACC register accumulators holds tile tid + i nt
template <int ACC, typename F>
__host__ __device__ __forceinline__ void tt_embedding_backward_group_each_tile_I(const TtEmbeddingBackwardShape& s, const TtEmbeddingBackwardGroupPlan& P,
                                                                            int tid, int nt, F&& f) {
TT_EMBEDDING_BACKWARD_UNROLL
    for (int i = 0; i < ACC; i++) {
        const int tile = tid + i * nt;
        if (tile < P.tiles_I) {
            int rt, ct;
            tt_embedding_backward_group_tile_I_rc(s, P, tile, rt, ct);
            f(i, rt, ct);
        }
    }
}

// (I) for one 4x4 tile over the batch: c += sum_b sum_alpha P_b[alpha, 4rt..] (x) Y_b[alpha, 4ct..]
__host__ __device__ inline void tt_embedding_backward_group_tile_I(float (&c)[16], const float* Pb, const float* Yb, int LB, int Rh, int nh,
                                                             int mprev, int nbb, int rt, int ct) {
    for (int b = 0; b < nbb; b++) {
        const float* Pr = Pb + (int64_t)b * LB + 4 * rt;
        const float* Yr = Yb + (int64_t)b * LB + 4 * ct;
TT_EMBEDDING_BACKWARD_UNROLL4
        for (int al = 0; al < mprev; al++)
            tt_embedding_backward_group_outer(c, tt_embedding_backward_group_ld4(Pr + al * Rh), tt_embedding_backward_group_ld4(Yr + al * nh));
    }
}

// A 4x4 tile of dot products along K in float4 steps: c[r][q] = sum_k A[r*a_rs + k] B[q*b_rs + k]
__host__ __device__ inline void tt_embedding_backward_group_dot_tile(float (&c)[16], const float* A, int a_rs, const float* B, int b_rs, int K) {
TT_EMBEDDING_BACKWARD_UNROLL
    for (int i = 0; i < 16; i++) c[i] = 0.0f;
TT_EMBEDDING_BACKWARD_UNROLL2
    for (int kk = 0; kk < K; kk += 4) {
        float4 x[4], y[4];
TT_EMBEDDING_BACKWARD_UNROLL
        for (int r = 0; r < 4; r++) x[r] = tt_embedding_backward_group_ld4(A + (int64_t)r * a_rs + kk);
TT_EMBEDDING_BACKWARD_UNROLL
        for (int q = 0; q < 4; q++) y[q] = tt_embedding_backward_group_ld4(B + (int64_t)q * b_rs + kk);
TT_EMBEDDING_BACKWARD_UNROLL
        for (int r = 0; r < 4; r++)
TT_EMBEDDING_BACKWARD_UNROLL
            for (int q = 0; q < 4; q++) tt_embedding_backward_group_dot(c[r * 4 + q], x[r], y[q]);
    }
}

// (II) unit u (lookup pairs): lookup b, rows alpha = 4 rt .. 4 rt + 3, columns k = ct + (R_h/4) q, q < 4
// (strided: lanes with consecutive ct read consecutive rows of G_h, PH/4 odd, so 8 bank groups):
//   dM_{h-1}[alpha, k] = sum_c Y_b[alpha, c] G_h[k, c]
__host__ __device__ inline void tt_embedding_backward_group_unit_II(const TtEmbeddingBackwardShape& s, const TtEmbeddingBackwardGroupPlan& P,
                                                              const float* sm, const float* gh, const int* bints, int nbb, int u, float* W) {
    const int h = P.h, Rh = s.R[h], nh = s.n[h], tn = Rh / 4;
    int b, rt, ct;
    tt_embedding_backward_group_rc_lookups(u, s.m[h - 1] / 4, tn, b, rt, ct);
    if (b >= nbb) return;
    float c[16];
    tt_embedding_backward_group_dot_tile(c, sm + P.lk_off + (int64_t)b * P.LB + P.Y_off + (int64_t)4 * rt * nh, nh,
                                    gh + (int64_t)ct * P.PH, tn * P.PH, nh);
    // to the lookup's dM_{h-1} (m_{h-1} x R_h), or for h = 1 straight to its core-0 gradient row in W (q_0 x R_1)
    float* dst = h - 1 == 0 ? W + P.W_off[0] + (int64_t)bints[b * TT_EMBEDDING_BACKWARD_INTS] * s.S[0]
                            : (float*)sm + P.lk_off + (int64_t)b * P.LB + P.dM_off[h - 1];
TT_EMBEDDING_BACKWARD_UNROLL
    for (int r = 0; r < 4; r++)
TT_EMBEDDING_BACKWARD_UNROLL
        for (int q = 0; q < 4; q++) dst[(int64_t)(4 * rt + r) * Rh + ct + tn * q] = c[r * 4 + q];
}

// (III) unit u (lookup pairs): lookup b, rows k' = 4 rt .., columns beta = 4 ct ..:
//   L_{h+1}[k', beta] = sum_{k, a} G_h[k, a, k'] L_h[(k, a), beta]  (float4 of G_h along k', of L_h along beta)
__host__ __device__ inline void tt_embedding_backward_group_unit_III(const TtEmbeddingBackwardShape& s, const TtEmbeddingBackwardGroupPlan& P,
                                                               const float* sm, const float* gh, const int* bints, int nbb, int u, float* W) {
    const int h = P.h, Rh = s.R[h], qh = s.q[h], Rn = s.R[h + 1], wn = P.w[h + 1], tn = wn / 4;
    int b, rt, ct;
    tt_embedding_backward_group_rc_lookups(u, Rn / 4, tn, b, rt, ct);
    if (b >= nbb) return;
    const float* G = gh + 4 * rt;
    const float* Lh = sm + P.lk_off + (int64_t)b * P.LB + P.Lh_off + 4 * ct;
    float c[16];
TT_EMBEDDING_BACKWARD_UNROLL
    for (int i = 0; i < 16; i++) c[i] = 0.0f;
    for (int k = 0; k < Rh; k++) {
TT_EMBEDDING_BACKWARD_UNROLL4
        for (int a = 0; a < qh; a++)
            tt_embedding_backward_group_outer(c, tt_embedding_backward_group_ld4(G + (int64_t)k * P.PH + a * Rn),
                                         tt_embedding_backward_group_ld4(Lh + (int64_t)(k * qh + a) * wn));
    }
    // to the lookup's L_{h+1} (R_{h+1} x w_{h+1}), or for h = T-2 straight to its core-(T-1) gradient row in W
    const int T = s.T;
    float* dst = h + 1 == T - 1 ? W + P.W_off[T - 1] + (int64_t)bints[b * TT_EMBEDDING_BACKWARD_INTS] * s.S[T - 1]
                                : (float*)sm + P.lk_off + (int64_t)b * P.LB + P.L_off[h + 1];
TT_EMBEDDING_BACKWARD_UNROLL
    for (int r = 0; r < 4; r++)
TT_EMBEDDING_BACKWARD_UNROLL
        for (int q = 0; q < 4; q++) dst[(int64_t)(4 * rt + r) * wn + 4 * ct + q] = c[r * 4 + q];
}

// Y unit u (pairing rows): lookup b, rows (alpha, a) = 4 rt .., columns k' = ct + (R_{h+1}/4) q:
//   Y[(alpha,a), k'] = sum_beta g[(alpha,a), beta] Suf_{h+1}[k', beta]   (float4 along beta)
__host__ __device__ inline void tt_embedding_backward_group_unit_Y(const TtEmbeddingBackwardShape& s, const TtEmbeddingBackwardGroupPlan& P,
                                                             float* sm, int u) {
    const int h = P.h, T = s.T, Rn = s.R[h + 1], wn = P.w[h + 1], tn = Rn / 4;
    int b, rt, ct;
    tt_embedding_backward_group_rc_rows(u, s.m[h] / 4, tn, b, rt, ct);
    float* lk = sm + P.lk_off + (int64_t)b * P.LB;
    const float* Suf = lk + (h + 1 == T - 1 ? P.sl_off[T - 1] : P.Suf_off[h + 1]);
    float c[16];
    tt_embedding_backward_group_dot_tile(c, lk + P.g_off + (int64_t)4 * rt * wn, wn, Suf + (int64_t)ct * wn, tn * wn, wn);
    float* dst = lk + P.Y_off;
TT_EMBEDDING_BACKWARD_UNROLL
    for (int r = 0; r < 4; r++)
TT_EMBEDDING_BACKWARD_UNROLL
        for (int q = 0; q < 4; q++) dst[(int64_t)(4 * rt + r) * Rn + ct + tn * q] = c[r * 4 + q];
}

// L_h unit u (pairing rows): lookup b, rows k = 4 rt .., columns (a, beta) = 4 ct ..:
//   L_h[k, (a,beta)] = sum_alpha P_{h-1}[alpha, k] g[alpha, (a,beta)]   (outer products of float4s)
__host__ __device__ inline void tt_embedding_backward_group_unit_L(const TtEmbeddingBackwardShape& s, const TtEmbeddingBackwardGroupPlan& P,
                                                             float* sm, int u) {
    const int h = P.h, Rh = s.R[h], wh = P.w[h];
    int b, rt, ct;
    tt_embedding_backward_group_rc_rows(u, Rh / 4, wh / 4, b, rt, ct);
    float* lk = sm + P.lk_off + (int64_t)b * P.LB;
    const float* Pr = lk + (h - 1 == 0 ? P.sl_off[0] : P.P_off[h - 1]) + 4 * rt;
    const float* gr = lk + P.g_off + 4 * ct;
    float c[16];
TT_EMBEDDING_BACKWARD_UNROLL
    for (int i = 0; i < 16; i++) c[i] = 0.0f;
TT_EMBEDDING_BACKWARD_UNROLL4
    for (int al = 0; al < s.m[h - 1]; al++)
        tt_embedding_backward_group_outer(c, tt_embedding_backward_group_ld4(Pr + (int64_t)al * Rh), tt_embedding_backward_group_ld4(gr + (int64_t)al * wh));
    float* dst = lk + P.Lh_off;
TT_EMBEDDING_BACKWARD_UNROLL
    for (int r = 0; r < 4; r++)
TT_EMBEDDING_BACKWARD_UNROLL
        for (int q = 0; q < 4; q++) dst[(int64_t)(4 * rt + r) * wh + 4 * ct + q] = c[r * 4 + q];
}

// Generic GEMMs of a phase (the side chains, and the pivot products where the float4 paths do not apply),
// built on version 3's strided tile (TtEmbeddingBackwardGemm). Per-lookup operands have batch stride LB.
__host__ __device__ inline TtEmbeddingBackwardGemm tt_embedding_backward_group_gemm(int M, int N, int K, const float* A, int a_bs, int a_rs,
                                                                               int a_cs, const float* B, int b_bs, int b_rs, int b_cs) {
    TtEmbeddingBackwardGemm g = {};
    g.M = M; g.N = N; g.K = K;
    g.A = A; g.a_bs = a_bs; g.a_rs = a_rs; g.a_cs = a_cs;
    g.B = B; g.b_bs = b_bs; g.b_rs = b_rs; g.b_cs = b_cs;
    g.mode = TT_EMBEDDING_BACKWARD_STORE;
    return g;
}
// destination: a per-lookup buffer (row stride c_rs) or core u's W row of the lookup
__host__ __device__ inline void tt_embedding_backward_group_to_buf(TtEmbeddingBackwardGemm& g, float* C, int LB, int c_rs) {
    g.C = C; g.c_bs = LB; g.c_rs = c_rs; g.c_cs = 1; g.c_bidx = nullptr;
}
__host__ __device__ inline void tt_embedding_backward_group_to_W(TtEmbeddingBackwardGemm& g, const TtEmbeddingBackwardShape& s,
                                                           const TtEmbeddingBackwardGroupPlan& P, float* W, int u, const int* bints, int c_rs) {
    g.C = W + P.W_off[u]; g.c_bs = s.S[u]; g.c_rs = c_rs; g.c_cs = 1; g.c_bidx = bints;
}

// Generic GEMM number `which` (0..3) of phase `ph` of a batch (phases: 0 load, 1..F side forward steps,
// F+1 Y and L_h, F+2 the pivot products, F+3..2F+2 side backward steps); false when the phase has fewer.
// (Built by index rather than into an array, so that the kernel keeps the descriptor in registers.)
__host__ __device__ inline bool tt_embedding_backward_group_phase_gemm(const TtEmbeddingBackwardShape& s, const TtEmbeddingBackwardGroupPlan& P,
                                                                 float* sm, const float* gh, float* accp, const int* bints, int ph,
                                                                 int which, float* W, TtEmbeddingBackwardGemm& out) {
    const int T = s.T, h = P.h, F = P.F, LB = P.LB;
    float* lk = sm + P.lk_off;
    int n = 0;
    // left prefix P_t (t < h) and right suffix Suf_t (t > h) of a lookup
    auto Pbuf = [&](int t) -> float* { return lk + (t == 0 ? P.sl_off[0] : P.P_off[t]); };
    auto Sufbuf = [&](int t) -> float* { return lk + (t == T - 1 ? P.sl_off[T - 1] : P.Suf_off[t]); };
    auto take = [&](bool exists) { return exists && n++ == which; };
    if (ph >= 1 && ph <= F) {                       // forward steps
        const int tl = ph, tr = T - 1 - ph;
        if (take(tl <= h - 1)) {                    // P_t = P_{t-1} G_t: m_{t-1} x n_t (= m_t x R_{t+1})
            out = tt_embedding_backward_group_gemm(s.m[tl - 1], s.n[tl], s.R[tl], Pbuf(tl - 1), LB, s.R[tl], 1, lk + P.sl_off[tl], LB, s.n[tl], 1);
            tt_embedding_backward_group_to_buf(out, lk + P.P_off[tl], LB, s.n[tl]);
            return true;
        }
        if (take(tr >= h + 1)) {                    // Suf_t[(k,a), beta] = sum_k' G_t[(k,a), k'] Suf_{t+1}[k', beta]
            out = tt_embedding_backward_group_gemm(s.R[tr] * s.q[tr], P.w[tr + 1], s.R[tr + 1], lk + P.sl_off[tr], LB, s.R[tr + 1], 1,
                                              Sufbuf(tr + 1), LB, P.w[tr + 1], 1);
            tt_embedding_backward_group_to_buf(out, lk + P.Suf_off[tr], LB, P.w[tr + 1]);
            return true;
        }
    } else if (ph == F + 1) {                       // Y and L_h
        if (take(h <= T - 2 && !P.fastY)) {         // Y[(alpha,a), k'] = sum_beta g[(alpha,a), beta] Suf_{h+1}[k', beta]
            const int wn = P.w[h + 1];
            out = tt_embedding_backward_group_gemm(s.m[h], s.R[h + 1], wn, lk + P.g_off, LB, wn, 1, Sufbuf(h + 1), LB, 1, wn);
            tt_embedding_backward_group_to_buf(out, lk + P.Y_off, LB, s.R[h + 1]);
            return true;
        }
        if (take(h >= 1 && !P.fastL)) {             // L_h[k, (a,beta)] = sum_alpha P_{h-1}[alpha, k] g[alpha, (a,beta)]
            out = tt_embedding_backward_group_gemm(s.R[h], P.w[h], s.m[h - 1], Pbuf(h - 1), LB, 1, s.R[h], lk + P.g_off, LB, P.w[h], 1);
            tt_embedding_backward_group_to_buf(out, lk + P.Lh_off, LB, P.w[h]);
            return true;
        }
    } else if (ph == F + 2) {                       // the pivot products without a float4 path
        if (take(!P.fastI)) {                       // (I) dG_h += sum_b P^T Y (h = 0: P = [1])
            out = h >= 1 ? tt_embedding_backward_group_gemm(s.R[h], s.n[h], s.m[h - 1], Pbuf(h - 1), LB, 1, s.R[h], lk + P.Y_off, LB, s.n[h], 1)
                         : tt_embedding_backward_group_gemm(1, s.n[0], 1, sm + P.one_off, 0, 0, 0, lk + P.Y_off, LB, s.n[0], 1);
            out.C = accp; out.c_bs = 0; out.c_rs = s.n[h]; out.c_cs = 1; out.c_bidx = nullptr;
            out.mode = TT_EMBEDDING_BACKWARD_ACCUM; out.sum_batches = 1;
            return true;
        }
        if (take(h >= 1 && !P.fastII)) {            // (II) dM_{h-1} = Y G_h^T
            out = tt_embedding_backward_group_gemm(s.m[h - 1], s.R[h], s.n[h], lk + P.Y_off, LB, s.n[h], 1, gh, 0, 1, P.PH);
            if (h - 1 == 0) tt_embedding_backward_group_to_W(out, s, P, W, 0, bints, s.R[1]);
            else tt_embedding_backward_group_to_buf(out, lk + P.dM_off[h - 1], LB, s.R[h]);
            return true;
        }
        if (take(h <= T - 2 && !P.fastIII)) {       // (III) L_{h+1} = G_h^T L_h (PH = n_h here: one flat (k, a) index)
            const int wn = P.w[h + 1];
            out = tt_embedding_backward_group_gemm(s.R[h + 1], wn, s.R[h] * s.q[h], gh, 0, 1, s.R[h + 1], lk + P.Lh_off, LB, wn, 1);
            if (h + 1 == T - 1) tt_embedding_backward_group_to_W(out, s, P, W, T - 1, bints, s.q[T - 1]);
            else tt_embedding_backward_group_to_buf(out, lk + P.L_off[h + 1], LB, wn);
            return true;
        }
    } else if (ph >= F + 3) {                       // backward steps
        const int st = ph - (F + 2), tl = h - st, tr = h + st;
        if (take(tl >= 1)) {                        // dG_t = P_{t-1}^T dM_t -> W
            const int t = tl;
            out = tt_embedding_backward_group_gemm(s.R[t], s.n[t], s.m[t - 1], Pbuf(t - 1), LB, 1, s.R[t], lk + P.dM_off[t], LB, s.n[t], 1);
            tt_embedding_backward_group_to_W(out, s, P, W, t, bints, s.n[t]);
            return true;
        }
        if (take(tl >= 1)) {                        // dM_{t-1} = dM_t G_t^T -> dM buffer, or W for t - 1 = 0
            const int t = tl;
            out = tt_embedding_backward_group_gemm(s.m[t - 1], s.R[t], s.n[t], lk + P.dM_off[t], LB, s.n[t], 1, lk + P.sl_off[t], LB, 1, s.n[t]);
            if (t - 1 == 0) tt_embedding_backward_group_to_W(out, s, P, W, 0, bints, s.R[1]);
            else tt_embedding_backward_group_to_buf(out, lk + P.dM_off[t - 1], LB, s.R[t]);
            return true;
        }
        if (take(tr <= T - 2)) {                    // dG_t[(k,a), k'] = sum_beta L_t[(k,a), beta] Suf_{t+1}[k', beta] -> W
            const int t = tr, w1 = P.w[t + 1];
            out = tt_embedding_backward_group_gemm(s.R[t] * s.q[t], s.R[t + 1], w1, lk + P.L_off[t], LB, w1, 1, Sufbuf(t + 1), LB, 1, w1);
            tt_embedding_backward_group_to_W(out, s, P, W, t, bints, s.R[t + 1]);
            return true;
        }
        if (take(tr <= T - 2)) {                    // L_{t+1} = G_t^T L_t -> L buffer, or W for t + 1 = T - 1
            const int t = tr, w1 = P.w[t + 1];
            out = tt_embedding_backward_group_gemm(s.R[t + 1], w1, s.R[t] * s.q[t], lk + P.sl_off[t], LB, 1, s.R[t + 1], lk + P.L_off[t], LB, w1, 1);
            if (t + 1 == T - 1) tt_embedding_backward_group_to_W(out, s, P, W, T - 1, bints, s.q[T - 1]);
            else tt_embedding_backward_group_to_buf(out, lk + P.L_off[t + 1], LB, w1);
            return true;
        }
    }
    return false;
}

// One thread's share of phase `ph` of a batch of nbb lookups: its own (I) tiles (register accumulator,
// pivot phase only), then units dealt round-robin over the float4 (II) and (III) units and the generic
// GEMMs' units in turn, starting at thread tiles_I % nt so that threads with fewer (I) tiles get units first.
template <int ACC>
__host__ __device__ inline void tt_embedding_backward_group_phase(const TtEmbeddingBackwardShape& s, const TtEmbeddingBackwardGroupPlan& P,
                                                            float* sm, const float* gh, float* accp, const int* bints, int nbb, int ph,
                                                            int tid, int nt, float (&acc)[ACC > 0 ? ACC : 1][16], float* W) {
    const int h = P.h;
    int U2 = 0, U3 = 0, off = 0;
    if (ph == P.F + 2) {
        if (ACC > 0 && P.fastI) {
            const float* Pb = sm + P.lk_off + (h - 1 == 0 ? P.sl_off[0] : P.P_off[h - 1]);
            const float* Yb = sm + P.lk_off + P.Y_off;
            tt_embedding_backward_group_each_tile_I<(ACC > 0 ? ACC : 1)>(s, P, tid, nt, [&](int i, int rt, int ct) {
                tt_embedding_backward_group_tile_I(acc[i], Pb, Yb, P.LB, s.R[h], s.n[h], s.m[h - 1], nbb, rt, ct);
            });
            off = P.tiles_I % nt;
        }
        if (P.fastII) U2 = tt_embedding_backward_group_units_lookups(nbb, (s.m[h - 1] / 4) * (s.R[h] / 4));
        if (P.fastIII) U3 = tt_embedding_backward_group_units_lookups(nbb, (s.R[h + 1] / 4) * (P.w[h + 1] / 4));
    } else if (ph == P.F + 1) {                            // Y and L_h, as U2 and U3
        if (P.fastY) U2 = nbb * (s.m[h] / 4) * (s.R[h + 1] / 4);
        if (P.fastL) U3 = nbb * (s.R[h] / 4) * (P.w[h] / 4);
    }
    int u = (tid - off + nt) % nt;
    if (ph == P.F + 2) {
        for (; u < U2; u += nt) tt_embedding_backward_group_unit_II(s, P, sm, gh, bints, nbb, u, W);
        for (; u < U2 + U3; u += nt) tt_embedding_backward_group_unit_III(s, P, sm, gh, bints, nbb, u - U2, W);
    } else {
        for (; u < U2; u += nt) tt_embedding_backward_group_unit_Y(s, P, sm, u);
        for (; u < U2 + U3; u += nt) tt_embedding_backward_group_unit_L(s, P, sm, u - U2);
    }
    int base = U2 + U3;
TT_EMBEDDING_BACKWARD_UNROLL
    for (int which = 0; which < 4; which++) {
        TtEmbeddingBackwardGemm g;
        if (!tt_embedding_backward_group_phase_gemm(s, P, sm, gh, accp, bints, ph, which, W, g)) break;
        g.tile = tt_embedding_backward_pick_tile(g.M, g.N, g.sum_batches ? 1 : nbb, nt);
        const int units = tt_embedding_backward_units(g, nbb);
        for (; u < base + units; u += nt) tt_embedding_backward_run_unit<1>(g, nbb, u - base);
        base += units;
    }
}

// The batch's slices of the other cores (unpadded) and dY rows: per segment (a core's slice, or g), the
// threads stride over (lookup, element), in float4 where the segment length is a multiple of 4 (every
// source row and destination is then 16-byte aligned: cores 128-byte aligned, regions multiples of 4).
__host__ __device__ inline void tt_embedding_backward_group_load_batch(const TtEmbeddingBackwardShape& s, const TtEmbeddingBackwardGroupPlan& P,
                                                                 float* sm, const int* bints, int nbb, int tid, int nt,
                                                                 const float* cores, const float* dY) {
    float* lk = sm + P.lk_off;
    for (int t = 0; t <= s.T; t++) {                       // t = T: the dY rows
        if (t == P.h) continue;
        const int len = t < s.T ? s.S[t] : s.D, dst_off = t < s.T ? P.sl_off[t] : P.g_off;
        auto src = [&](int b) -> const float* {
            const int* bi = bints + b * TT_EMBEDDING_BACKWARD_INTS;
            return t < s.T ? cores + s.core_off[t] + (int64_t)bi[2 + t] * len : dY + (int64_t)bi[1] * len;
        };
        if (len % 4 == 0) {
            const int l4 = len / 4;
            for (int e = tid; e < nbb * l4; e += nt) {
                const int b = e / l4, i = 4 * (e - b * l4);
                float* d = lk + (int64_t)b * P.LB + dst_off + i;
#ifdef __CUDA_ARCH__
                *reinterpret_cast<float4*>(d) = __ldg(reinterpret_cast<const float4*>(src(b) + i));
#else
                for (int c = 0; c < 4; c++) d[c] = src(b)[i + c];
#endif
            }
        } else {
            for (int e = tid; e < nbb * len; e += nt) {
                const int b = e / len, i = e - b * len;
                lk[(int64_t)b * P.LB + dst_off + i] = src(b)[i];
            }
        }
    }
}

// where version 6 finds its inputs and puts its outputs
struct TtEmbeddingBackwardIo {
    const float* dY;
    float *cores, *state, *dG;
    int opt;
    float lr, eps;
};

// Kernel 2's block program for chunk `block`. acc(tid) is the thread's register accumulator (ACC 4x4 tiles).
template <int ACC, class Exec, class Acc>
__host__ __device__ void tt_embedding_backward_group_chunk_block(Exec& ex, Acc& acc, const TtEmbeddingBackwardShape& s,
                                                           const TtEmbeddingBackwardGroupPlan& P, float* sm, int block,
                                                           const TtEmbeddingBackwardWorkspace& ws, const TtEmbeddingBackwardIo& io) {
    if (block >= ws.totals[0]) return;
    const int* d = ws.chunk_desc + (int64_t)block * 4;
    const int k = d[0], lo = d[1], hi = d[2], nch = d[3], n = hi - lo;
    const int h = P.h, nt = ex.nt, nh = s.n[h], Sh = s.S[h];
    const int64_t slice_off = s.core_off[h] + (int64_t)k * Sh;
    int* ints = (int*)(sm + P.ints_off);
    // G_h in shared memory; dG_h's accumulator there too, or (P.acc_global) in the chunk's row of `partial` (only
    // this block writes it)
    const float* gh = sm + P.gh_off;
    float* accp = P.acc_global ? ws.partial + (int64_t)block * Sh : sm + P.acc_off;
    // the chunk's lookups (ranks lo .. hi of the slice's list) with their bags and slice rows; G_h's slice
    // (rows padded to PH); the accumulator's zeros
    const int* ids = ws.list + ws.start[s.key_base[h] + k] + lo;
    ex.phase([&](int tid) {
        for (int i = tid; i < n; i += nt) {
            int* si = ints + i * TT_EMBEDDING_BACKWARD_INTS;
            const int id = ids[i];
            si[0] = id;
            si[1] = ws.bag_of[id];
            for (int t = 0; t < s.T; t++) si[2 + t] = ws.keys[(int64_t)t * P.key_stride + id];
        }
        for (int e = tid; e < Sh; e += nt) {
            const int r = e / nh;
            sm[P.gh_off + r * P.PH + (e - r * nh)] = io.cores[slice_off + e];
            if (ACC == 0) accp[e] = 0.0f;
        }
        if (tid == 0) sm[P.one_off] = 1.0f;
        if (ACC > 0) {
            auto& a = acc(tid);
TT_EMBEDDING_BACKWARD_UNROLL
            for (int i = 0; i < (ACC > 0 ? ACC : 1); i++)
TT_EMBEDDING_BACKWARD_UNROLL
                for (int j = 0; j < 16; j++) a[i][j] = 0.0f;
        }
    });
    for (int start = 0; start < n; start += P.nb) {
        const int nbb = min(P.nb, n - start);
        const int* bints = ints + start * TT_EMBEDDING_BACKWARD_INTS;
        ex.phase([&](int tid) { tt_embedding_backward_group_load_batch(s, P, sm, bints, nbb, tid, nt, io.cores, io.dY); });
        for (int ph = 1; ph <= 2 * P.F + 2; ph++)
            ex.phase([&](int tid) { tt_embedding_backward_group_phase<ACC>(s, P, sm, gh, accp, bints, nbb, ph, tid, nt, acc(tid), ws.W); });
    }
    // the chunk's pivot gradient: the slice's update when it is the only chunk, else a partial for kernel 3
    float* part = ws.partial + (int64_t)block * Sh;
    ex.phase([&](int tid) {
        auto put = [&](int e, float v) {
            if (nch == 1) tt_embedding_backward_apply(io.opt, io.lr, io.eps, io.cores, io.state, io.dG, slice_off + e, v);
            else part[e] = v;
        };
        if (ACC > 0) {
            auto& a = acc(tid);
            tt_embedding_backward_group_each_tile_I<(ACC > 0 ? ACC : 1)>(s, P, tid, nt, [&](int i, int rt, int ct) {
TT_EMBEDDING_BACKWARD_UNROLL
                for (int r = 0; r < 4; r++)
TT_EMBEDDING_BACKWARD_UNROLL
                    for (int q = 0; q < 4; q++) put((4 * rt + r) * nh + 4 * ct + q, a[i][r * 4 + q]);
            });
        } else {
            for (int e = tid; e < Sh; e += nt) put(e, accp[e]);
        }
    });
}

// register accumulators: on the GPU the thread's own array; the CPU test gives every emulated thread one
template <int ACC>
struct TtEmbeddingBackwardGroupAccRegs {
    float v[ACC > 0 ? ACC : 1][16];
    __host__ __device__ float (&operator()(int))[ACC > 0 ? ACC : 1][16] { return v; }
};

// (two register tiles need more than the 128 registers a 512-thread block leaves: that instantiation is
// compiled for 256 threads, and the plan uses it only up to 256)
template <int ACC>
__global__ void __launch_bounds__(ACC >= 2 ? TT_EMBEDDING_BACKWARD_GROUP_MAX_ACC2_BLOCK : TT_EMBEDDING_BACKWARD_MAX_FUSED_BLOCK)
tt_embedding_backward_group_chunk_kernel(const TtEmbeddingBackwardShape shape, const TtEmbeddingBackwardGroupPlan plan,
                              const __grid_constant__ TtEmbeddingBackwardWorkspace ws, const __grid_constant__ TtEmbeddingBackwardIo io) {
    __shared__ TtEmbeddingBackwardShape s;
    __shared__ TtEmbeddingBackwardGroupPlan P;
    if (threadIdx.x == 0) { s = shape; P = plan; }
    __syncthreads();
    TtEmbeddingBackwardDeviceExec ex{(int)threadIdx.x, (int)blockDim.x};
    TtEmbeddingBackwardGroupAccRegs<ACC> acc;
    tt_embedding_backward_group_chunk_block<ACC>(ex, acc, s, P, (float*)tt_embedding_backward_smem, blockIdx.x, ws, io);
}

// ---- version 6, kernel 3: every other slice, and the pivot slices of several chunks ----

// Item `item` (slice key g, column item cc, part p of parts): the sum, in a fixed order, of its rows'
// columns [cc CW, ..): rows p RC .. of the slice's lookups' W rows (in lookup order) or of its chunks'
// partials (in chunk order). `groups` row groups of threads take rows i = group (mod groups); the group
// sums are added in group order. One part: the optimizer on the result. Several: each part writes its sum,
// and the last part to finish (a counter per (slice, column item)) adds the parts in part order and applies
// the optimizer. Shared memory: ids [RC] ints, sums [max(nt, CW)] floats, flag.
template <class Exec>
__host__ __device__ void tt_embedding_backward_group_final_item(Exec& ex, const TtEmbeddingBackwardShape& s, const TtEmbeddingBackwardGroupPlan& P,
                                                          int item, const TtEmbeddingBackwardWorkspace& ws, const TtEmbeddingBackwardIo& io,
                                                          int* ids, float* sums, int* flag) {
    const int nt = ex.nt;
    const int* d = ws.item_desc + (int64_t)item * 4;
    const int g = d[0], cc = d[1], p = d[2], parts = d[3];
    const int t = tt_embedding_backward_key_core(s, g);
    const int k = g - s.key_base[t], S = s.S[t], c0 = cc * TT_EMBEDDING_BACKWARD_GROUP_CW, cw = min(TT_EMBEDDING_BACKWARD_GROUP_CW, S - c0);
    const bool piv = t == P.h;
    const int n = piv ? ws.choff[k + 1] - ws.choff[k] : ws.counts[g];
    const int r0 = p * TT_EMBEDDING_BACKWARD_GROUP_RC, r1 = min(n, r0 + TT_EMBEDDING_BACKWARD_GROUP_RC), nr = r1 - r0;
    if (!piv)
        ex.phase([&](int tid) {
            for (int i = tid; i < nr; i += nt) ids[i] = ws.list[ws.start[g] + r0 + i];
        });
    const int groups = max(1, min(nt / cw, nr)), tpc = nt / groups;
    ex.phase([&](int tid) {
        const int gi = tid / tpc;
        if (gi >= groups) return;
        for (int col = tid - gi * tpc; col < cw; col += tpc) {
            float sum = 0.0f;
TT_EMBEDDING_BACKWARD_UNROLL4
            for (int i = gi; i < nr; i += groups) {
                const float* row = piv ? ws.partial + (int64_t)(ws.choff[k] + r0 + i) * S : ws.W + P.W_off[t] + (int64_t)ids[i] * S;
                sum += row[c0 + col];
            }
            sums[gi * cw + col] = sum;
        }
    });
    const int64_t off = s.core_off[t] + (int64_t)k * S + c0;
    if (parts == 1) {
        ex.phase([&](int tid) {
            for (int col = tid; col < cw; col += nt) {
                float v = 0.0f;
                for (int gi = 0; gi < groups; gi++) v += sums[gi * cw + col];
                tt_embedding_backward_apply(io.opt, io.lr, io.eps, io.cores, io.state, io.dG, off + col, v);
            }
        });
        return;
    }
    const int first = item - p;
    ex.phase([&](int tid) {
        for (int col = tid; col < cw; col += nt) {
            float v = 0.0f;
            for (int gi = 0; gi < groups; gi++) v += sums[gi * cw + col];
            ws.final_parts[(int64_t)item * TT_EMBEDDING_BACKWARD_GROUP_CW + col] = v;
        }
        tt_embedding_backward_group_fence();
    });
    ex.phase([&](int tid) {
        if (tid == 0) *flag = tt_embedding_backward_group_atomic_inc(ws.ctr + first, 1) == parts - 1;
    });
    if (!*flag) return;
    tt_embedding_backward_group_fence();
    ex.phase([&](int tid) {
        for (int col = tid; col < cw; col += nt) {
            float v = 0.0f;
            for (int q = 0; q < parts; q++) v += tt_embedding_backward_group_ldcg(ws.final_parts + (int64_t)(first + q) * TT_EMBEDDING_BACKWARD_GROUP_CW + col);
            tt_embedding_backward_apply(io.opt, io.lr, io.eps, io.cores, io.state, io.dG, off + col, v);
        }
    });
}

__global__ void __launch_bounds__(TT_EMBEDDING_BACKWARD_GROUP_FINAL_BLOCK, 2)
tt_embedding_backward_group_final_kernel(const TtEmbeddingBackwardShape shape, const TtEmbeddingBackwardGroupPlan plan,
                                    const __grid_constant__ TtEmbeddingBackwardWorkspace ws, const __grid_constant__ TtEmbeddingBackwardIo io) {
    __shared__ TtEmbeddingBackwardShape s;
    __shared__ TtEmbeddingBackwardGroupPlan P;
    __shared__ int ids[TT_EMBEDDING_BACKWARD_GROUP_RC], flag;
    __shared__ float sums[TT_EMBEDDING_BACKWARD_GROUP_FINAL_BLOCK > TT_EMBEDDING_BACKWARD_GROUP_CW ? TT_EMBEDDING_BACKWARD_GROUP_FINAL_BLOCK : TT_EMBEDDING_BACKWARD_GROUP_CW];
    if (threadIdx.x == 0) { s = shape; P = plan; }
    __syncthreads();
    TtEmbeddingBackwardDeviceExec ex{(int)threadIdx.x, (int)blockDim.x};
    const int nitems = ws.totals[1];
    for (int item = blockIdx.x; item < nitems; item += gridDim.x)
        tt_embedding_backward_group_final_item(ex, s, P, item, ws, io, ids, sums, &flag);
}

// ---- version 7: FBTT's default shape on tensor cores, grouped by core 1 without a sort, in one wave ----

// Version 7 keeps version 6's sandwich form at the pivot core 1 (T = 3) and changes how it is run (why: the notes):
//   - the three products with G_1 are GEMMs over the lookups of a slice, on tensor cores in 3xTF32
//     (x = hi + lo split by masking, tf32_split_fast in common.h; hi.hi + hi.lo + lo.hi, FP32-accurate like
//     tt_embedding_forward's version 10), per segment of NB = 16 lookups:
//       (II)  dG_0 rows: [16 (lookup, a_0) rows per m-tile] Y (4 x 128 per lookup) . G_1^T (128 x 32)
//       (III) dG_2 rows: [16 (lookup, a_2) rows] L^T (4 x 128 per lookup) . G_1 viewed (k_1 a_1) x k_2
//       (I)   dG_1 += G_0^T (32 x (lookup, a_0)) . Y ((lookup, a_0) x 128), in registers across the item
//     Y = g x G_2 and L = G_0^T x g (the small steps) run in FP32 on the CUDA cores. Per lookup: 144 mma
//     instead of version 6's 1,660 FFMA warp instructions. Warps 0-3 run (II), 4-7 (III), each an m-tile
//     over all four n-tiles; all eight share (I), 2 x 2 tiles each;
//   - kernel 1 (one warp per bag) writes every lookup's slice keys and bag, counts the lookups of every
//     slice (int atomics) and drops the lookup into its slice's bucket at the slot the count returned;
//   - kernel 2: an item is a slice of core 1 or an even part of one (<= PART = 64 lookups: 220 items at the
//     default, every block resident at once at two per SM); each block finds its item from the counts by a
//     block scan (no planning block), and its lookups in lookup order from the bucket by rank counting (an
//     ordered scan of the keys past BUCKET lookups); inputs loaded a segment ahead; the parts of a long
//     slice add their dG_1 partials in part order (the last to finish, by an int counter); a one-part slice
//     applies the optimizer from its registers;
//   - core 0's and core 2's per-lookup gradients go to W (1 KB per lookup); kernel 3, one block per slice or
//     part of one (<= SIDE_PART lookups: a Zipf-hot slice is spread), lists its lookups the same way (under
//     kernel 2's tail: before its griddepcontrol.wait), adds their W rows in lookup order (groups of RG rows,
//     groups in order, parts in order: the bits do not depend on the block size) and applies the optimizer;
//   - kernel 0 zeroes the counters, and kernels 1-3 are launched with programmatic dependent launch
//     (kernel 1 decodes its lookups under kernel 0; kernels 2 and 3 start under their predecessors' tails).
// No float atomics: bitwise the same run after run. Compiled for T = 3, q = (4, 4, 4), ranks (32, 32) (FBTT's
// default family: any p, tables, bags) and, with each lookup cut in k, q = (4k, 4, 4) (the end of this section); the
// dispatcher (version 7's launcher) runs every other shape elsewhere.
// How it got here, step by step with the time of each: results/notes/tt_embedding_backward.md.
// The per-lookup segment region (floats): Y [4][YS] | L^T [4][YS] | G_0 [4][G0S] | g [64] | G_2 [128], LS apart.
// Strides are chosen so that every fragment load of every mma is free of bank conflicts: YS = G0S = 8 (mod 32)
// puts a fragment's 4 k values (tig) 8 banks apart, LS = 4 (mod 32) the two lookups of its 8 rows (group)
// 4 banks apart. G_1 is read along rows by (II) (8 rows k_1 = group, 4 columns tig) and down columns by (III)
// (4 rows k_1 = tig, 8 columns group): no padding serves both, so its copy is swizzled (tt_embedding_backward_tc_g1). (III)
// takes K in the order (k_1 block of 8 per 4 k-steps, a_1 = ks % 4), and L^T is stored (a_2, a_1, k_1) to match.
static const int TT_EMBEDDING_BACKWARD_TC_BLOCK = 256;        // 8 warps: the warp tiling below assumes it
static const int TT_EMBEDDING_BACKWARD_TC_PART = 64;          // lookups per item at most (longer slices split evenly into parts)
static const int TT_EMBEDDING_BACKWARD_TC_PART_SHORT = 48;    // lookups per item at most where the slices exceed a wave (below)
#ifdef TT_EMBEDDING_BACKWARD_TC_PART_FIXED                   // a sweep's build: every launch at this part size
static_assert(TT_EMBEDDING_BACKWARD_TC_PART_FIXED >= 1 && TT_EMBEDDING_BACKWARD_TC_PART_FIXED <= TT_EMBEDDING_BACKWARD_TC_PART, "1 .. PART lookups");
static const int TT_EMBEDDING_BACKWARD_TC_PART_MIN = TT_EMBEDDING_BACKWARD_TC_PART_FIXED;
#else
static const int TT_EMBEDDING_BACKWARD_TC_PART_MIN = TT_EMBEDDING_BACKWARD_TC_PART_SHORT;   // (the partial buffers' size)
#endif
static const int TT_EMBEDDING_BACKWARD_TC_NB = 16;            // lookups per segment: 4 m-tiles of 4 lookups
static const int TT_EMBEDDING_BACKWARD_TC_SIDE_BLOCK = 256;   // side kernel
static const int TT_EMBEDDING_BACKWARD_TC_SIDE_RG = 32;       // side kernel: rows per group (summed in lookup order)
static const int TT_EMBEDDING_BACKWARD_TC_SIDE_PART = 128;    // side kernel: lookups per item (longer slices split evenly into parts)
enum : int {
    TT_EMBEDDING_BACKWARD_TC_R = 32,
    TT_EMBEDDING_BACKWARD_TC_Q = 4,
    TT_EMBEDDING_BACKWARD_TC_S1 = 4096,
    TT_EMBEDDING_BACKWARD_TC_S0 = 128,  // the compiled shape: slices of cores 1 and 0, 2
    TT_EMBEDDING_BACKWARD_TC_YS = 136,
    TT_EMBEDDING_BACKWARD_TC_G0S = 40,  // row strides of Y / L^T, G_0
    TT_EMBEDDING_BACKWARD_TC_Y = 0,
    TT_EMBEDDING_BACKWARD_TC_LT = 544,
    TT_EMBEDDING_BACKWARD_TC_G0 = 1088,
    TT_EMBEDDING_BACKWARD_TC_G = 1248,
    TT_EMBEDDING_BACKWARD_TC_G2 = 1312,
    TT_EMBEDDING_BACKWARD_TC_LS = 1444,
    TT_EMBEDDING_BACKWARD_TC_SEG = TT_EMBEDDING_BACKWARD_TC_NB * TT_EMBEDDING_BACKWARD_TC_LS,  // floats of a segment
    TT_EMBEDDING_BACKWARD_TC_G1F = TT_EMBEDDING_BACKWARD_TC_S1,                              // floats of the G_1 copy (swizzled, unpadded)
};
static_assert(TT_EMBEDDING_BACKWARD_TC_LS % 32 == 4 && TT_EMBEDDING_BACKWARD_TC_YS % 32 == 8 && TT_EMBEDDING_BACKWARD_TC_G0S % 32 == 8, "conflict-free strides");
static_assert(TT_EMBEDDING_BACKWARD_TC_LT >= 4 * TT_EMBEDDING_BACKWARD_TC_YS &&
                  TT_EMBEDDING_BACKWARD_TC_G0 >= TT_EMBEDDING_BACKWARD_TC_LT + 4 * TT_EMBEDDING_BACKWARD_TC_YS &&
                  TT_EMBEDDING_BACKWARD_TC_G >= TT_EMBEDDING_BACKWARD_TC_G0 + 4 * TT_EMBEDDING_BACKWARD_TC_G0S &&
                  TT_EMBEDDING_BACKWARD_TC_G2 >= TT_EMBEDDING_BACKWARD_TC_G + 64 && TT_EMBEDDING_BACKWARD_TC_LS >= TT_EMBEDDING_BACKWARD_TC_G2 + 128,
              "segment regions overlap");
static_assert(TT_EMBEDDING_BACKWARD_TC_SIDE_BLOCK == 2 * TT_EMBEDDING_BACKWARD_TC_S0, "side kernel: two row groups at a time, a thread per column");
// chain kernel's dynamic shared memory: G_1 copy, segment, list [PART], meta [PART][3], scan [8], item [4], stage [BUCKET]
inline size_t tt_embedding_backward_tc_smem_bytes() {
    return sizeof(float) * (TT_EMBEDDING_BACKWARD_TC_G1F + TT_EMBEDDING_BACKWARD_TC_SEG) +
           sizeof(int) * (TT_EMBEDDING_BACKWARD_TC_PART * 4 + 8 + 4 + TT_EMBEDDING_BACKWARD_BUCKET);
}

// the shapes version 7 runs: its compiled one, and q_0 = 4k (k <= 4) with each lookup cut in k (below); "" when it runs
inline std::string tt_embedding_backward_tc_reason(const TtEmbeddingBackwardShape& s) {
    char buf[320];
    if (s.T != 3 || s.q[0] % 4 != 0 || s.q[0] > 16 || s.q[1] != 4 || s.q[2] != 4 || s.R[1] != 32 || s.R[2] != 32) {
        snprintf(buf, sizeof buf, "version 7 is compiled for T = 3, q = 4,4,4 and ranks 32,32 (FBTT's default family; also q_0 = 8, 12, "
                 "16); this shape has T = %d", s.T);
        std::string r = buf;
        if (s.T == 3) {
            snprintf(buf, sizeof buf, ", q = %d,%d,%d, ranks %d,%d", s.q[0], s.q[1], s.q[2], s.R[1], s.R[2]);
            r += buf;
        }
        return r;
    }
    const int64_t k = s.q[0] / 4;
    if (k > 1 && ((double)k * s.nnz * s.T >= 2147483647.0 || (double)k * s.num_bags >= 2147483647.0 ||
                  (double)s.tables * ((double)k * s.p[0] + s.p[1] + s.p[2]) >= 2147483647.0)) {
        snprintf(buf, sizeof buf, "version 7 cuts each lookup in q_0 / 4 = %d: T q_0/4 nnz, q_0/4 bags and tables (q_0/4 p_0 + p_1 + p_2) "
                 "must stay below 2^31", (int)k);
        return buf;
    }
    return "";
}

// The fragment layout of common.h's mma_tf32_m16n8k8, as functions of the lane and the register.
__host__ __device__ __forceinline__ int tt_embedding_backward_tc_arow(int lane, int r) { return (lane >> 2) + 8 * (r & 1); }
__host__ __device__ __forceinline__ int tt_embedding_backward_tc_acol(int lane, int r) { return (lane & 3) + 4 * (r >> 1); }
__host__ __device__ __forceinline__ int tt_embedding_backward_tc_bk(int lane, int r) { return (lane & 3) + 4 * r; }
__host__ __device__ __forceinline__ int tt_embedding_backward_tc_crow(int lane, int r) { return (lane >> 2) + 8 * (r >> 1); }
__host__ __device__ __forceinline__ int tt_embedding_backward_tc_ccol(int lane, int r) { return 2 * (lane & 3) + (r & 1); }

// Where each fragment value lives (floats). (II) and (III): relative to the m-tile's first lookup region;
// row m of the tile is lookup m / 4, row a = m % 4 (a_0 for (II), a_2 for (III)). (I): relative to the
// segment; k-column c of k-step kp is lookup 2 kp + c / 4, a_0 = c % 4.
//   (II)  A(m, c; ks) = Y[a_0][kappa], kappa = a_1 R + k_2 = 8 ks + c;   B(c, n; ks, nt) = G_1[k_1 = 8 nt + n][kappa]
//   (III) A(m, c; ks) = L^T[a_2][a_1 R + k_1];  B(c, n; ks, nt) = G_1[k_1][a_1][k_2 = 8 nt + n], with
//         a_1 = ks % 4, k_1 = 8 (ks / 4) + c
//   (I)   A(m, c; kp, mi) = G_0[a_0][k_1 = 16 mi + m];   B(c, n; kp, w, ni) = Y[a_0][kappa = 16 w + 8 ni + n]
__host__ __device__ __forceinline__ int tt_embedding_backward_tc_II_a(int m, int c, int ks) {
    return (m >> 2) * TT_EMBEDDING_BACKWARD_TC_LS + TT_EMBEDDING_BACKWARD_TC_Y + (m & 3) * TT_EMBEDDING_BACKWARD_TC_YS + 8 * ks + c;
}
// G_1's copy: element (k_1, col = a_1 R + k_2) at k_1 (q_1 R) + (col ^ 4 pi(k_1 % 8)), pi(j) = 2j (j < 4), 2(j-4)+1
// (j >= 4). The XOR moves whole float4s (bits 2-4 of the column), so the copy stays 16-byte stores; (II)'s loads
// (rows group, columns 8 ks + tig) and (III)'s (rows 8 b + tig, columns 8 nt + group) then hit 32 banks each.
__host__ __device__ __forceinline__ int tt_embedding_backward_tc_g1(int k1, int col) {
    const int j = k1 & 7, pi = j < 4 ? 2 * j : 2 * (j - 4) + 1;
    return k1 * (TT_EMBEDDING_BACKWARD_TC_Q * TT_EMBEDDING_BACKWARD_TC_R) + (col ^ (4 * pi));
}
__host__ __device__ __forceinline__ int tt_embedding_backward_tc_II_b(int c, int n, int ks, int nt) { return tt_embedding_backward_tc_g1(8 * nt + n, 8 * ks + c); }
__host__ __device__ __forceinline__ int tt_embedding_backward_tc_III_a(int m, int c, int ks) {
    return (m >> 2) * TT_EMBEDDING_BACKWARD_TC_LS + TT_EMBEDDING_BACKWARD_TC_LT + (m & 3) * TT_EMBEDDING_BACKWARD_TC_YS +
           (ks & 3) * TT_EMBEDDING_BACKWARD_TC_R + 8 * (ks >> 2) + c;
}
__host__ __device__ __forceinline__ int tt_embedding_backward_tc_III_b(int c, int n, int ks, int nt) {
    return tt_embedding_backward_tc_g1(8 * (ks >> 2) + c, (ks & 3) * TT_EMBEDDING_BACKWARD_TC_R + 8 * nt + n);
}
__host__ __device__ __forceinline__ int tt_embedding_backward_tc_I_a(int m, int c, int kp, int mi) {
    return (2 * kp + (c >> 2)) * TT_EMBEDDING_BACKWARD_TC_LS + TT_EMBEDDING_BACKWARD_TC_G0 + (c & 3) * TT_EMBEDDING_BACKWARD_TC_G0S + 16 * mi + m;
}
__host__ __device__ __forceinline__ int tt_embedding_backward_tc_I_b(int c, int n, int kp, int w, int ni) {
    return (2 * kp + (c >> 2)) * TT_EMBEDDING_BACKWARD_TC_LS + TT_EMBEDDING_BACKWARD_TC_Y + (c & 3) * TT_EMBEDDING_BACKWARD_TC_YS + 16 * w + 8 * ni + n;
}
// where the C values go: (II) row m, column n of n-tile nt -> lookup m / 4 of the tile, element a_0 R + k_1 of
// its core-0 gradient; (III) -> element k_2 q_2 + a_2 of its core-2 gradient; (I) -> element k_1 (q_1 R) + kappa
// of the slice's gradient
__host__ __device__ __forceinline__ int tt_embedding_backward_tc_II_c(int m, int n, int nt) { return (m & 3) * TT_EMBEDDING_BACKWARD_TC_R + 8 * nt + n; }
__host__ __device__ __forceinline__ int tt_embedding_backward_tc_III_c(int m, int n, int nt) { return (8 * nt + n) * TT_EMBEDDING_BACKWARD_TC_Q + (m & 3); }
__host__ __device__ __forceinline__ int tt_embedding_backward_tc_I_c(int m, int n, int w, int mi, int ni) {
    return (16 * mi + m) * (TT_EMBEDDING_BACKWARD_TC_Q * TT_EMBEDDING_BACKWARD_TC_R) + 16 * w + 8 * ni + n;
}

__host__ __device__ __forceinline__ void tt_embedding_backward_tc_st4(float* p, float4 v) {
#ifdef __CUDA_ARCH__
    *reinterpret_cast<float4*>(p) = v;
#else
    p[0] = v.x; p[1] = v.y; p[2] = v.z; p[3] = v.w;
#endif
}

// The small steps of one lookup, thread u of its 16 (the segment's 256 threads: 16 per lookup), FP32 in a
// fixed order: Y[a_0][a_1 R + k_2] = sum_a2 g[a_0, a_1, a_2] G_2[k_2][a_2] for (a_0, a_1) = (u / 4, u % 4),
// and L^T[a_2][a_1 R + k_1] = sum_a0 G_0[a_0][k_1] g[a_0, a_1, a_2] for (a_1, a_2) = (u / 4, u % 4).
__host__ __device__ inline void tt_embedding_backward_tc_small_steps(float* region, int u) {
    const float* g = region + TT_EMBEDDING_BACKWARD_TC_G;
    const float* g2 = region + TT_EMBEDDING_BACKWARD_TC_G2;
    const float* g0 = region + TT_EMBEDDING_BACKWARD_TC_G0;
    {
        const int a0 = u >> 2, a1 = u & 3;
        const float4 gv = tt_embedding_backward_group_ld4(g + a0 * 16 + a1 * 4);
        float* y = region + TT_EMBEDDING_BACKWARD_TC_Y + a0 * TT_EMBEDDING_BACKWARD_TC_YS + a1 * TT_EMBEDDING_BACKWARD_TC_R;
TT_EMBEDDING_BACKWARD_UNROLL
        for (int k2 = 0; k2 < TT_EMBEDDING_BACKWARD_TC_R; k2 += 4) {
            float r[4];
TT_EMBEDDING_BACKWARD_UNROLL
            for (int e = 0; e < 4; e++) {
                const float4 w = tt_embedding_backward_group_ld4(g2 + (k2 + e) * 4);
                r[e] = fmaf(gv.w, w.w, fmaf(gv.z, w.z, fmaf(gv.y, w.y, gv.x * w.x)));
            }
            tt_embedding_backward_tc_st4(y + k2, make_float4(r[0], r[1], r[2], r[3]));
        }
    }
    {
        const int a1 = u >> 2, a2 = u & 3;
        float gs[4];
TT_EMBEDDING_BACKWARD_UNROLL
        for (int a0 = 0; a0 < 4; a0++) gs[a0] = g[a0 * 16 + a1 * 4 + a2];
        float* lt = region + TT_EMBEDDING_BACKWARD_TC_LT + a2 * TT_EMBEDDING_BACKWARD_TC_YS + a1 * TT_EMBEDDING_BACKWARD_TC_R;
TT_EMBEDDING_BACKWARD_UNROLL
        for (int k1 = 0; k1 < TT_EMBEDDING_BACKWARD_TC_R; k1 += 4) {
            float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
TT_EMBEDDING_BACKWARD_UNROLL
            for (int a0 = 0; a0 < 4; a0++) {
                const float4 v = tt_embedding_backward_group_ld4(g0 + a0 * TT_EMBEDDING_BACKWARD_TC_G0S + k1);
                acc.x = fmaf(gs[a0], v.x, acc.x); acc.y = fmaf(gs[a0], v.y, acc.y);
                acc.z = fmaf(gs[a0], v.z, acc.z); acc.w = fmaf(gs[a0], v.w, acc.w);
            }
            tt_embedding_backward_tc_st4(lt + k1, acc);
        }
    }
}

// float4 f (0 .. 79) of a lookup's inputs -> its place in the region: g (16), G_0's 4 rows (32), G_2 (32)
__host__ __device__ inline int tt_embedding_backward_tc_input_dst(int f) {
    if (f < 16) return TT_EMBEDDING_BACKWARD_TC_G + 4 * f;
    if (f < 48) return TT_EMBEDDING_BACKWARD_TC_G0 + ((f - 16) >> 3) * TT_EMBEDDING_BACKWARD_TC_G0S + 4 * ((f - 16) & 7);
    return TT_EMBEDDING_BACKWARD_TC_G2 + 4 * (f - 48);
}

// the chain kernel's item `item`: which slice and part; items are numbered slice by slice, a slice with n
// lookups taking ceil(n / part) of them (host-callable: the test checks it against a direct enumeration)
__host__ __device__ inline int tt_embedding_backward_tc_parts(int n, int part) { return (n + part - 1) / part; }

// Lookups per item, at most (the host's choice). Items are the chain kernel's blocks, two resident per SM (a wave:
// 264 on 132 SMs), and the kernel ends when its last item does. Where parts of 64 fit one wave (FBTT's default: 220
// slices of ~47 lookups), 64 keeps one item per slice and no partial sums. Where they spill into a second wave
// (q 8,4,4 cut in 2: 440 parts of ~47), parts of at most 48 make two full waves of shorter items instead of a full and
// a ragged one (5-8% faster at q 8,4,4). Past two waves (q 16,4,4: 660 parts of ~62) shorter parts only add a wave
// (3% slower), and at the default 48 costs 6%, so 64 stays (the times: results/notes/tt_embedding_backward.md).
// -DTT_EMBEDDING_BACKWARD_TC_PART_FIXED=n builds a fixed choice.
inline int tt_embedding_backward_tc_part_size(const TtEmbeddingBackwardShape& s, int sms) {
#ifdef TT_EMBEDDING_BACKWARD_TC_PART_FIXED
    (void)s; (void)sms; (void)TT_EMBEDDING_BACKWARD_TC_PART_SHORT;
    return TT_EMBEDDING_BACKWARD_TC_PART_FIXED;
#else
    const int64_t slices = (int64_t)s.tables * s.p[1], per = ceil_div<int64_t>(std::max(s.nnz, 1), slices);
    const int64_t items = slices * ceil_div<int64_t>(per, TT_EMBEDDING_BACKWARD_TC_PART), wave = 2 * (int64_t)sms;
    return items > wave && items <= 2 * wave ? TT_EMBEDDING_BACKWARD_TC_PART_SHORT : TT_EMBEDDING_BACKWARD_TC_PART;
#endif
}
// the SMs of the current device (the part size's wave), asked once
inline int tt_embedding_backward_num_sms() {
    static int sms = 0;
    if (!sms) {
        int dev = 0;
        cudaCheck(cudaGetDevice(&dev));
        cudaCheck(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    }
    return sms;
}

#ifdef __CUDA_ARCH__
// inclusive sum of v over the block (8 warps); total = the block's sum. Two barriers.
__device__ __forceinline__ int tt_embedding_backward_tc_block_scan(int v, int* warp_sums, int& total) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    int x = v;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
        const int y = __shfl_up_sync(0xffffffffu, x, d);
        if (lane >= d) x += y;
    }
    if (lane == 31) warp_sums[warp] = x;
    __syncthreads();
    int before = 0;
    total = 0;
    for (int w = 0; w < nw; w++) {
        const int c = warp_sums[w];
        before += w < warp ? c : 0;
        total += c;
    }
    __syncthreads();
    return before + x;
}

// This block's item, items numbered slice by slice, a slice of n lookups taking ceil(n / part) (count(k): slice k's n,
// k < nk): a block scan of the parts per slice. info = {slice, part, parts, n}; slice -1 past the last item.
template <class Count>
__device__ __forceinline__ void tt_embedding_backward_tc_find_item(int nk, int part, Count&& count, int* warp_sums, int* info) {
    const int item = blockIdx.x, tid = threadIdx.x;
    if (tid == 0) info[0] = -1;
    int base = 0;
    for (int k0 = 0; k0 < nk; k0 += blockDim.x) {
        const int k = k0 + tid, n = k < nk ? count(k) : 0, np = (n + part - 1) / part;
        int total;
        const int incl = base + tt_embedding_backward_tc_block_scan(np, warp_sums, total);
        if (np && item >= incl - np && item < incl) { info[0] = k; info[1] = item - (incl - np); info[2] = np; info[3] = n; }
        base += total;
        if (item < base) break;                 // the same in every thread
    }
    __syncthreads();
}

// The positions j (increasing) with keys[j] == key whose rank among them is in [lo, hi), to list[rank - lo]:
// per tile, every thread counts the matches among its 16 contiguous keys (four 16-byte loads in flight), a
// block scan gives its first rank. Stops once hi matches are behind. keys: len ints, len % 4 == 0, -1 pads;
// read from L2 (ld.cg): they come from kernel 1, and the side kernel reads them before its griddepcontrol.wait.
__device__ void tt_embedding_backward_tc_collect(const int* __restrict__ keys, int len, int key, int lo, int hi, int* list, int* warp_sums) {
    int base = 0;
    for (int t0 = 0; t0 < len && base < hi; t0 += 16 * (int)blockDim.x) {
        const int j0 = t0 + 16 * threadIdx.x;
        int v[16];
#pragma unroll
        for (int q = 0; q < 4; q++) {
            const int4 x = j0 + 4 * q < len ? __ldcg(reinterpret_cast<const int4*>(keys + j0) + q) : make_int4(-1, -1, -1, -1);
            v[4 * q] = x.x; v[4 * q + 1] = x.y; v[4 * q + 2] = x.z; v[4 * q + 3] = x.w;
        }
        int c = 0;
#pragma unroll
        for (int e = 0; e < 16; e++) c += v[e] == key;
        int total;
        int r = base + tt_embedding_backward_tc_block_scan(c, warp_sums, total) - c;
        if (c)
#pragma unroll
            for (int e = 0; e < 16; e++)
                if (v[e] == key) {
                    if (r >= lo && r < hi) list[r - lo] = j0 + e;
                    r++;
                }
        base += total;
    }
    __syncthreads();
}

// The lookups of a slice with n lookups whose rank (place in lookup order) is in [lo, hi), to list[rank - lo].
// Kernel 1 wrote each lookup into its slice's bucket at the slot its atomic count returned (arrival order,
// which depends on timing); a slice with at most BUCKET lookups is put in lookup order by rank counting
// (tt_embedding_backward_bucket_order), a longer one by the ordered scan of its core's keys. Either way the list is the same.
__device__ void tt_embedding_backward_tc_lookups(const int* __restrict__ bucket, int n, const int* __restrict__ keys, int key_stride, int row, int lo, int hi,
                                int* list, int* stage, int* warp_sums) {
    if (n > TT_EMBEDDING_BACKWARD_BUCKET) {
        tt_embedding_backward_tc_collect(keys, key_stride, row, lo, hi, list, warp_sums);
        return;
    }
    TtEmbeddingBackwardDeviceExec ex{(int)threadIdx.x, (int)blockDim.x};
    tt_embedding_backward_bucket_order(ex, bucket, n, stage, [&](int r, int v) {
        if (r >= lo && r < hi) list[r - lo] = v;
    });
}


// (II) (warps 0-3) or (III) (warps 4-7) for a segment of ns lookups: m-tile w % 4 (4 lookups), all four n-tiles
// (each A value split once per warp), 16 k-steps; in 3xTF32 the small products of every tile first, then the
// big ones, into the same accumulator. Rows of absent lookups are not written. Out: W rows of core 0 (II) or 2 (III).
template <bool III>
__device__ __forceinline__ void tt_embedding_backward_tc_side_products(const float* seg, const float* g1s, const int* ids, int ns, float* __restrict__ out,
                                                      int mt, int lane) {
    if (4 * mt >= ns) return;
    const float* base = seg + 4 * mt * TT_EMBEDDING_BACKWARD_TC_LS;
    float acc[4][4] = {};
#pragma unroll 2
    for (int ks = 0; ks < 16; ks++) {
        uint32_t ah[4], al[4], bh[4][2], bl[4][2];
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const int m = tt_embedding_backward_tc_arow(lane, r), c = tt_embedding_backward_tc_acol(lane, r);
            tf32_split_fast(base[III ? tt_embedding_backward_tc_III_a(m, c, ks) : tt_embedding_backward_tc_II_a(m, c, ks)], ah[r], al[r]);
        }
#pragma unroll
        for (int nt = 0; nt < 4; nt++)
#pragma unroll
            for (int r = 0; r < 2; r++) {
                const int c = tt_embedding_backward_tc_bk(lane, r), n = lane >> 2;
                tf32_split_fast(g1s[III ? tt_embedding_backward_tc_III_b(c, n, ks, nt) : tt_embedding_backward_tc_II_b(c, n, ks, nt)],
                                             bh[nt][r], bl[nt][r]);
            }
#pragma unroll
        for (int nt = 0; nt < 4; nt++) mma_tf32_m16n8k8(acc[nt], al, bh[nt][0], bh[nt][1]);
#pragma unroll
        for (int nt = 0; nt < 4; nt++) mma_tf32_m16n8k8(acc[nt], ah, bl[nt][0], bl[nt][1]);
#pragma unroll
        for (int nt = 0; nt < 4; nt++) mma_tf32_m16n8k8(acc[nt], ah, bh[nt][0], bh[nt][1]);
    }
#pragma unroll
    for (int nt = 0; nt < 4; nt++)
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const int m = tt_embedding_backward_tc_crow(lane, r), n = tt_embedding_backward_tc_ccol(lane, r), l = 4 * mt + (m >> 2);
            if (l < ns)
                out[(int64_t)ids[l] * TT_EMBEDDING_BACKWARD_TC_S0 +
                    (III ? tt_embedding_backward_tc_III_c(m, n, nt) : tt_embedding_backward_tc_II_c(m, n, nt))] = acc[nt][r];
        }
}

// (I) for warp w: dG_1 columns 16 w .. 16 w + 15, all 32 rows, over the segment's lookup pairs
__device__ __forceinline__ void tt_embedding_backward_tc_pivot_product(float (&acc)[2][2][4], const float* seg, int ns, int warp, int lane) {
    for (int kp = 0; 2 * kp < ns; kp++) {
        uint32_t ah[2][4], al[2][4], bh[2][2], bl[2][2];
#pragma unroll
        for (int mi = 0; mi < 2; mi++)
#pragma unroll
            for (int r = 0; r < 4; r++)
                tf32_split_fast(
                    seg[tt_embedding_backward_tc_I_a(tt_embedding_backward_tc_arow(lane, r), tt_embedding_backward_tc_acol(lane, r), kp, mi)], ah[mi][r],
                    al[mi][r]);
#pragma unroll
        for (int ni = 0; ni < 2; ni++)
#pragma unroll
            for (int r = 0; r < 2; r++)
                tf32_split_fast(seg[tt_embedding_backward_tc_I_b(tt_embedding_backward_tc_bk(lane, r), lane >> 2, kp, warp, ni)], bh[ni][r],
                                             bl[ni][r]);
#pragma unroll
        for (int mi = 0; mi < 2; mi++)
#pragma unroll
            for (int ni = 0; ni < 2; ni++) mma_tf32_m16n8k8(acc[mi][ni], al[mi], bh[ni][0], bh[ni][1]);
#pragma unroll
        for (int mi = 0; mi < 2; mi++)
#pragma unroll
            for (int ni = 0; ni < 2; ni++) mma_tf32_m16n8k8(acc[mi][ni], ah[mi], bl[ni][0], bl[ni][1]);
#pragma unroll
        for (int mi = 0; mi < 2; mi++)
#pragma unroll
            for (int ni = 0; ni < 2; ni++) mma_tf32_m16n8k8(acc[mi][ni], ah[mi], bh[ni][0], bh[ni][1]);
    }
}
#endif


// Kernel 1: one warp per bag, its lookups over the lanes (no search for the bag: version 6's per-lookup binary
// search over the offsets was most of its 16 us), each written as version 6's prep does: the slice key of every
// core, the bag, and the slice counts (int atomics: exact); and into its slice's bucket at the slot the count
// returned. Warp 0 also writes the key rows' pad (-1).
// Kernel 0: zeroes the counters (counts, part counters) that kernel 1 and 2 count in. A kernel rather than a
// memset so that kernel 1 can be launched with PDL behind it: kernel 1 decodes its lookups while this runs.
__global__ void tt_embedding_backward_tc_zero_kernel(int* __restrict__ p, int n) {
    pdl_allow_next();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) p[i] = 0;
}

__global__ void __launch_bounds__(TT_EMBEDDING_BACKWARD_GROUP_PREP_BLOCK)
tt_embedding_backward_tc_prep_kernel(const __grid_constant__ TtEmbeddingBackwardShape s, int key_stride, const int64_t* __restrict__ offsets,
                                   const int64_t* __restrict__ indices, int* __restrict__ keys, int* __restrict__ bag_of,
                                   int* __restrict__ counts, int* __restrict__ bucket) {
    pdl_allow_next();
    const int64_t bag = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;   // 64-bit: num_bags * 32 threads
    const int lane = threadIdx.x & 31;
    const int nnz = tt_embedding_backward_count(s);   // past it (up to 32 keys) the pad; the scans stop at a slice's last lookup
    if (bag == 0 && nnz + lane < key_stride)
        for (int t = 0; t < s.T; t++) keys[(int64_t)t * key_stride + nnz + lane] = -1;
    if (bag >= s.num_bags) return;             // (no wait needed: this thread counts nothing)
    const int tbl = (int)(bag / s.B);
    const int64_t j0 = offsets[bag], j1 = offsets[bag + 1];
    bool waited = false;
    for (int64_t j = j0 + lane; j < j1 || !waited; j += 32) {
        int row[TT_EMBEDDING_BACKWARD_MAX_T];
        const bool mine = j < j1;
        if (mine) {
            tt_embedding_backward_decode_row(s, indices[j], row);
            bag_of[j] = (int)bag;
            for (int t = 0; t < s.T; t++) {
                row[t] += tbl * s.p[t];
                keys[(int64_t)t * key_stride + j] = row[t];
            }
        }
        if (!waited) pdl_wait_prior();      // kernel 0's zeros (launched with PDL, this ran under it so far)
        waited = true;
        if (mine)
            for (int t = 0; t < s.T; t++) {
                const int key = s.key_base[t] + row[t], slot = atomicAdd(counts + key, 1);
                if (slot < TT_EMBEDDING_BACKWARD_BUCKET) bucket[(int64_t)key * TT_EMBEDDING_BACKWARD_BUCKET + slot] = (int)j;
            }
    }
}

// Kernel 2, one block per item (a slice of core 1, or an even part of one): the item from the counts; the
// slice of G_1 copied (swizzled: tt_embedding_backward_tc_g1) while the item's lookups are listed (tt_embedding_backward_tc_lookups); their bags and
// side keys; then segments of NB lookups: inputs, small steps, (II) and (III) to W, (I) into registers.
// Finally the optimizer on dG_1 (one part), or the part's partial and, for the last part to finish, the sum
// of the parts in part order and the optimizer.
__global__ void __launch_bounds__(TT_EMBEDDING_BACKWARD_TC_BLOCK, 2)
tt_embedding_backward_tc_chain_kernel(const __grid_constant__ TtEmbeddingBackwardShape s, int key_stride, const int* __restrict__ keys,
                                    const int* __restrict__ bag_of, const int* __restrict__ counts, const int* __restrict__ bucket, int* __restrict__ ctr,
                                    float* __restrict__ partial, float* __restrict__ W0, float* __restrict__ W2, int part_size,
                                    const __grid_constant__ TtEmbeddingBackwardIo io) {
#ifdef __CUDA_ARCH__
    float* g1s = reinterpret_cast<float*>(tt_embedding_backward_smem);
    float* seg = g1s + TT_EMBEDDING_BACKWARD_TC_G1F;
    int* list = reinterpret_cast<int*>(seg + TT_EMBEDDING_BACKWARD_TC_SEG);
    int* meta = list + TT_EMBEDDING_BACKWARD_TC_PART;            // [PART][3]: bag, core-0 key, core-2 key
    int* warp_sums = meta + 3 * TT_EMBEDDING_BACKWARD_TC_PART;
    int* info = warp_sums + 8;                  // slice, part, parts, lookups
    int* stage = info + 4;                      // [BUCKET]
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    pdl_wait_prior();                       // kernel 1's keys and counts
    pdl_allow_next();
    // the item: a block scan of the parts per slice
    const int item = blockIdx.x;
    tt_embedding_backward_tc_find_item(s.tables * s.p[1], part_size, [&](int k) { return counts[s.key_base[1] + k]; },
                                       warp_sums, info);
    const int k = info[0];
    if (k < 0) return;                          // past the last item
    const int part = info[1], np = info[2], n = info[3];
    const int lo = (int)((int64_t)part * n / np), hi = (int)((int64_t)(part + 1) * n / np), cnt = hi - lo;
    // G_1's slice (read-only until this item's last part has finished: the optimizer runs after every part's reads)
    // (loaded now, stored once the list is made: the loads' latency under the list's)
    const float* g1 = io.cores + s.core_off[1] + (int64_t)k * TT_EMBEDDING_BACKWARD_TC_S1;
    constexpr int G1PER = TT_EMBEDDING_BACKWARD_TC_S1 / 4 / TT_EMBEDDING_BACKWARD_TC_BLOCK;
    float4 g1v[G1PER];
#pragma unroll
    for (int q = 0; q < G1PER; q++) g1v[q] = __ldg(reinterpret_cast<const float4*>(g1) + tid + q * TT_EMBEDDING_BACKWARD_TC_BLOCK);
    tt_embedding_backward_tc_lookups(bucket + (int64_t)(s.key_base[1] + k) * TT_EMBEDDING_BACKWARD_BUCKET, n, keys + key_stride, key_stride, k, lo, hi,
                                   list, stage, warp_sums);
    for (int e = tid; e < cnt; e += blockDim.x) {
        const int j = list[e];
        meta[3 * e] = __ldcg(bag_of + j);
        meta[3 * e + 1] = __ldcg(keys + j);
        meta[3 * e + 2] = __ldcg(keys + 2 * key_stride + j);
    }
    __syncthreads();
    float acc[2][2][4] = {};
    const float* core0 = io.cores + s.core_off[0];
    const float* core2 = io.cores + s.core_off[2];
    // a segment's inputs: g, G_0 and G_2 of each lookup, 80 float4 per lookup, 5 per thread; absent lookups
    // (the last segment) get zeros, so (I) adds nothing for them. Loaded into registers one segment ahead:
    // the loads of the next segment fly under this segment's products.
    constexpr int PER = TT_EMBEDDING_BACKWARD_TC_NB * 80 / TT_EMBEDDING_BACKWARD_TC_BLOCK;
    static_assert(TT_EMBEDDING_BACKWARD_TC_NB * 80 % TT_EMBEDDING_BACKWARD_TC_BLOCK == 0, "whole float4s per thread");
    float4 in[PER];
    auto load_inputs = [&](int e0) {
        const int ns = min(TT_EMBEDDING_BACKWARD_TC_NB, cnt - e0);
#pragma unroll
        for (int q = 0; q < PER; q++) {
            const int i = tid + q * TT_EMBEDDING_BACKWARD_TC_BLOCK, l = i / 80, f = i - 80 * l;
            in[q] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (l < ns) {
                const int* m = meta + 3 * (e0 + l);
                const float* src = f < 16 ? io.dY + (int64_t)m[0] * 64 + 4 * f
                                 : f < 48 ? core0 + (int64_t)m[1] * TT_EMBEDDING_BACKWARD_TC_S0 + 4 * (f - 16)
                                          : core2 + (int64_t)m[2] * TT_EMBEDDING_BACKWARD_TC_S0 + 4 * (f - 48);
                in[q] = __ldg(reinterpret_cast<const float4*>(src));
            }
        }
    };
    if (cnt > 0) load_inputs(0);
#pragma unroll
    for (int q = 0; q < G1PER; q++) {           // read only after the segment loop's first barrier
        const int i = tid + q * TT_EMBEDDING_BACKWARD_TC_BLOCK;
        *reinterpret_cast<float4*>(g1s + tt_embedding_backward_tc_g1(i >> 5, 4 * (i & 31))) = g1v[q];
    }
    for (int e0 = 0; e0 < cnt; e0 += TT_EMBEDDING_BACKWARD_TC_NB) {
        const int ns = min(TT_EMBEDDING_BACKWARD_TC_NB, cnt - e0);
#pragma unroll
        for (int q = 0; q < PER; q++) {
            const int i = tid + q * TT_EMBEDDING_BACKWARD_TC_BLOCK, l = i / 80, f = i - 80 * l;
            *reinterpret_cast<float4*>(seg + l * TT_EMBEDDING_BACKWARD_TC_LS + tt_embedding_backward_tc_input_dst(f)) = in[q];
        }
        __syncthreads();
        tt_embedding_backward_tc_small_steps(seg + (tid >> 4) * TT_EMBEDDING_BACKWARD_TC_LS, tid & 15);
        __syncthreads();
        if (e0 + TT_EMBEDDING_BACKWARD_TC_NB < cnt) load_inputs(e0 + TT_EMBEDDING_BACKWARD_TC_NB);
        const int* ids = list + e0;
        if (warp < 4) tt_embedding_backward_tc_side_products<false>(seg, g1s, ids, ns, W0, warp, lane);
        else tt_embedding_backward_tc_side_products<true>(seg, g1s, ids, ns, W2, warp - 4, lane);
        tt_embedding_backward_tc_pivot_product(acc, seg, ns, warp, lane);
        __syncthreads();                        // the segment is refilled
    }
    const int64_t off = s.core_off[1] + (int64_t)k * TT_EMBEDDING_BACKWARD_TC_S1;
    // the optimizer on the thread's 16 elements, every load before any store (ncu: applied one element at a time,
    // as tt_embedding_backward_apply does, the compiler kept each load behind the previous store, 16 round trips
    // to L2, a tenth of the kernel's stall samples); the same arithmetic as tt_embedding_backward_apply
    auto apply_all = [&](const float (&v)[2][2][4]) {
        int64_t at[16];
        float G[16], st[16];
#pragma unroll
        for (int e = 0; e < 16; e++) {
            const int mi = e >> 3, ni = (e >> 2) & 1, r = e & 3;
            at[e] = off + tt_embedding_backward_tc_I_c(tt_embedding_backward_tc_crow(lane, r), tt_embedding_backward_tc_ccol(lane, r), warp, mi, ni);
        }
        if (io.opt == TT_EMBEDDING_BACKWARD_DENSE) {
#pragma unroll
            for (int e = 0; e < 16; e++) io.dG[at[e]] = v[e >> 3][(e >> 2) & 1][e & 3];
            return;
        }
#pragma unroll
        for (int e = 0; e < 16; e++) {
            G[e] = io.cores[at[e]];
            st[e] = io.opt == TT_EMBEDDING_BACKWARD_ADAGRAD ? io.state[at[e]] : 0.0f;
        }
#pragma unroll
        for (int e = 0; e < 16; e++) {
            const float grad = v[e >> 3][(e >> 2) & 1][e & 3];
            if (io.opt == TT_EMBEDDING_BACKWARD_SGD) {
                io.cores[at[e]] = G[e] - io.lr * grad;
            } else {
                const float sn = st[e] + grad * grad;
                io.state[at[e]] = sn;
                io.cores[at[e]] = G[e] - io.lr * grad / (sqrtf(sn) + io.eps);
            }
        }
    };
    if (np == 1) {
        apply_all(acc);
        return;
    }
    float4* mine = reinterpret_cast<float4*>(partial + (int64_t)item * TT_EMBEDDING_BACKWARD_TC_S1) + 4 * tid;
#pragma unroll
    for (int q = 0; q < 4; q++) mine[q] = make_float4(acc[q >> 1][q & 1][0], acc[q >> 1][q & 1][1], acc[q >> 1][q & 1][2], acc[q >> 1][q & 1][3]);
    __threadfence();
    __syncthreads();
    if (tid == 0) info[0] = atomicAdd(ctr + k, 1) == np - 1;
    __syncthreads();
    if (!info[0]) return;
    __threadfence();
    float sum[2][2][4] = {};
    for (int q0 = 0; q0 < np; q0 += 4) {        // part order: the same bits whichever part finishes last
        float4 v[4][4];                         // (four parts' loads in flight before their adds: a hot slice has dozens)
#pragma unroll
        for (int q = 0; q < 4; q++) {
            const float4* src = reinterpret_cast<const float4*>(partial + (int64_t)(item - part + q0 + q) * TT_EMBEDDING_BACKWARD_TC_S1) + 4 * tid;
#pragma unroll
            for (int c = 0; c < 4; c++) v[q][c] = q0 + q < np ? __ldcg(src + c) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
#pragma unroll
        for (int q = 0; q < 4; q++)
#pragma unroll
            for (int c = 0; c < 4; c++)
                if (q0 + q < np) {
                    float* d = sum[c >> 1][c & 1];
                    d[0] += v[q][c].x; d[1] += v[q][c].y; d[2] += v[q][c].z; d[3] += v[q][c].w;
                }
    }
    apply_all(sum);
#endif
}

// the side kernel's items: a slice of core 0 or 2 with n lookups takes ceil(n / SIDE_PART) of them
__host__ __device__ inline int tt_embedding_backward_tc_side_parts(int n) { return (n + TT_EMBEDDING_BACKWARD_TC_SIDE_PART - 1) / TT_EMBEDDING_BACKWARD_TC_SIDE_PART; }
// the grid: at most this many (every lookup is in one slice of core 0 and one of core 2: 2 nnz in all)
inline int64_t tt_embedding_backward_tc_side_items(const TtEmbeddingBackwardShape& s) {
    return ceil_div<int64_t>(2 * (int64_t)s.nnz, TT_EMBEDDING_BACKWARD_TC_SIDE_PART) + (int64_t)s.tables * (s.p[0] + s.p[2]);
}

// Kernel 3, one block per item: a slice of core 0 or 2, or an even part of one (<= SIDE_PART lookups; a Zipf-hot
// slice of thousands of lookups would otherwise be one block's serial work). The item from the counts by a block
// scan, as kernel 2 finds its own; the part's lookups in lookup order (tt_embedding_backward_tc_lookups); their
// W rows added per column in groups of RG rows (two groups at a time, the groups in order). A one-part slice applies
// the optimizer; the parts of a longer one write their sums, and the last to finish (an int counter per slice) adds
// them in part order and applies it. The bits depend on neither the block size nor the timing. Untouched slices are
// left alone.
__global__ void __launch_bounds__(TT_EMBEDDING_BACKWARD_TC_SIDE_BLOCK)
tt_embedding_backward_tc_side_kernel(const __grid_constant__ TtEmbeddingBackwardShape s, int key_stride, const int* __restrict__ keys,
                                   const int* __restrict__ counts, const int* __restrict__ bucket, const float* __restrict__ W0,
                                   const float* __restrict__ W2, int* __restrict__ ctr, float* __restrict__ partial,
                                   const __grid_constant__ TtEmbeddingBackwardIo io) {
#ifdef __CUDA_ARCH__
    __shared__ int list[TT_EMBEDDING_BACKWARD_TC_SIDE_PART], stage[TT_EMBEDDING_BACKWARD_BUCKET];
    __shared__ int warp_sums[8], info[4];
    __shared__ float part[TT_EMBEDDING_BACKWARD_TC_SIDE_BLOCK];
    // Kernel 1's keys and counts are complete before any block of this kernel starts (kernel 2's blocks allow
    // it only after their own griddepcontrol.wait), so the item and the list are made under kernel 2's tail; the
    // W rows are read only after this kernel's wait.
    const int K0 = s.tables * s.p[0], item = blockIdx.x, tid = threadIdx.x;
    tt_embedding_backward_tc_find_item(K0 + s.tables * s.p[2], TT_EMBEDDING_BACKWARD_TC_SIDE_PART,
                                       [&](int k) { return __ldcg(counts + (k < K0 ? s.key_base[0] + k : s.key_base[2] + k - K0)); }, warp_sums, info);
    const int ks = info[0];
    if (ks < 0) return;                         // past the last item
    const int pi = info[1], np = info[2], n = info[3], t = ks < K0 ? 0 : 2, k = t == 0 ? ks : ks - K0;
    const int lo = (int)((int64_t)pi * n / np), rows = (int)((int64_t)(pi + 1) * n / np) - lo;
    tt_embedding_backward_tc_lookups(bucket + (int64_t)(s.key_base[t] + k) * TT_EMBEDDING_BACKWARD_BUCKET, n, keys + (int64_t)t * key_stride,
                                   key_stride, k, lo, lo + rows, list, stage, warp_sums);
    pdl_wait_prior();                           // kernel 2's W rows
    const float* W = t == 0 ? W0 : W2;
    const int S = TT_EMBEDDING_BACKWARD_TC_S0, c = tid % S, slot = tid / S, RG = TT_EMBEDDING_BACKWARD_TC_SIDE_RG;
    float total = 0.0f;
    for (int g0 = 0; g0 * RG < rows; g0 += 2) {
        const int gi = g0 + slot, r1 = min(rows, (gi + 1) * RG);
        float sum = 0.0f;
#pragma unroll 8
        for (int r = gi * RG; r < r1; r++) sum += __ldcg(W + (int64_t)list[r] * S + c);
        part[tid] = sum;
        __syncthreads();
        if (slot == 0) { total += part[c]; total += part[S + c]; }
        __syncthreads();
    }
    const int64_t at = s.core_off[t] + (int64_t)k * S + c;
    if (np == 1) {
        if (slot == 0) tt_embedding_backward_apply(io.opt, io.lr, io.eps, io.cores, io.state, io.dG, at, total);
        return;
    }
    if (slot == 0) partial[(int64_t)item * S + c] = total;
    __threadfence();
    __syncthreads();
    if (tid == 0) info[0] = atomicAdd(ctr + ks, 1) == np - 1;
    __syncthreads();
    if (!info[0] || slot) return;
    __threadfence();
    float sum = 0.0f;
#pragma unroll 8
    for (int q = 0; q < np; q++) sum += __ldcg(partial + (int64_t)(item - pi + q) * S + c);   // part order
    tt_embedding_backward_apply(io.opt, io.lr, io.eps, io.cores, io.state, io.dG, at, sum);
#endif
}

// ---- version 7 at q_0 = 4k: one lookup as k lookups of a four-row core 0 ----

// The kernels above are compiled for q_0 = 4. A shape with q_0 = 4k (q 8,4,4: D = 128; 12,4,4; 16,4,4), the rest as
// compiled, runs on them unchanged once each lookup is cut in k. Row a_0 = 4h + a (h < k) of G_0[i_0] is row a of
// a four-row slice k i_0 + h: core 0 viewed as [tables, k p_0, 4 R_1] is the same memory. And a_0 is the row's most
// significant digit, so the elements d of half h are the contiguous D / k floats at h D / k of the dY row: dY viewed
// as [tables, k B, D / k] is the same memory. So lookup (bag b, row i_0, i_1, i_2) becomes k lookups, one per
// h, of bag k b + h, row (k i_0 + h, i_1, i_2), and the step is version 7's on that shape. The gradients sum right:
// core 0's slice k i_0 + h gets exactly half h's rows, G_1 and G_2 the sum over h. The cost is one small kernel and
// (III) run on each part's L instead of their sum (a third more pivot products); what it saves: version 6 at q 8,4,4.
inline int tt_embedding_backward_tc_split(const TtEmbeddingBackwardShape& s) { return s.q[0] % TT_EMBEDDING_BACKWARD_TC_Q == 0 ? s.q[0] / TT_EMBEDDING_BACKWARD_TC_Q : 0; }

// the shape version 7's kernels run for a shape of split k (nnz, bags, core 0's slices: k times; the same core floats)
TtEmbeddingBackwardShape tt_embedding_backward_tc_split_shape(const TtEmbeddingBackwardShape& s, int k) {
    TtEmbeddingBackwardShape v = tt_embedding_backward_make_shape({s.p[0] * k, s.p[1], s.p[2]}, {TT_EMBEDDING_BACKWARD_TC_Q, s.q[1], s.q[2]},
                                                                  {s.R[1], s.R[2]}, 0, s.tables, s.B * k);
    v.nnz = s.nnz * k;
    return v;
}

// the new row of part h of a lookup of row `row`
__host__ __device__ inline int64_t tt_embedding_backward_tc_split_row(const TtEmbeddingBackwardShape& s, int k, int64_t row, int h) {
    const int64_t i0 = row / s.Lrad[0];
    return (i0 * k + h) * s.Lrad[0] + (row - i0 * s.Lrad[0]);
}

// bag b's lane `lane` of 32: the offsets of bags k b .. k b + k - 1 (part h of a bag of n lookups at k j0 + h n) and
// their rows; bag num_bags writes the end (k offsets[num_bags]: the cut shape's device-side count, if any)
__host__ __device__ inline void tt_embedding_backward_tc_split_bag(const TtEmbeddingBackwardShape& s, int k, int64_t bag, int lane,
                                                                   const int64_t* offsets, const int64_t* indices, int64_t* split_offsets,
                                                                   int64_t* split_indices) {
    const int64_t j0 = offsets[bag];
    if (bag == s.num_bags) {
        if (lane == 0) split_offsets[(int64_t)k * bag] = (int64_t)k * j0;
        return;
    }
    const int64_t n = offsets[bag + 1] - j0;
    if (lane < k) split_offsets[(int64_t)k * bag + lane] = (int64_t)k * j0 + lane * n;
    for (int64_t r = lane; r < n; r += 32) {
        const int64_t row = indices[j0 + r];
        for (int h = 0; h < k; h++) split_indices[(int64_t)k * j0 + h * n + r] = tt_embedding_backward_tc_split_row(s, k, row, h);
    }
}
__global__ void tt_embedding_backward_tc_split_kernel(const __grid_constant__ TtEmbeddingBackwardShape s, int k, const int64_t* __restrict__ offsets,
                                                      const int64_t* __restrict__ indices, int64_t* __restrict__ split_offsets,
                                                      int64_t* __restrict__ split_indices) {
    const int64_t bag = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;   // one warp per bag
    if (bag <= s.num_bags) tt_embedding_backward_tc_split_bag(s, k, bag, threadIdx.x & 31, offsets, indices, split_offsets, split_indices);
}

// ---- version 9: every product as a GEMM over the lookups of one slice, on tensor cores (any T, q and rank) ----

// Version 9 in one paragraph. Versions 6-7 hold one pivot slice in shared memory and pay for it at rank 64-128 (a
// 128 x 4 x 128 slice is 256 KB). Here each product of FBTT's chain is one GEMM over the lookups of ONE slice:
// for core t, mp = m_{t-1} rows per lookup (1 at t = 0), and the lookups n of slice G_t[g] stacked,
//   F (t = 1..T-2):  P_t[n]      = P_{t-1}[n] . G_t[g]             (mp x R_t) . (R_t x n_t), a row block per lookup
//   D (t = T-1..1):  dM_{t-1}[n] = dM_t[n] . G_t[g]^T             (mp x n_t) . (n_t x R_t)
//   G (t = T-1..0):  dG_t[g]     = sum_n P_{t-1}[n]^T . dM_t[n]    (R_t x mp) . (mp x n_t), K = mp x lookups
// with P_0 = G_0[i_0], dM_{T-1} = the dY row and P_{-1} = 1. One tiled kernel runs all three (64 x 64 outputs per
// block, K in steps of 32 copied by cp.async into a ring of shared stages, mma.sync in 3xTF32 below): F and D tile the stacked
// rows (a slice's lookups times mp) and read the slice once per 64 rows; G tiles R_t x n_t (64 x 16 for the last
// core, whose rows are q <= 16 long; core 0's one row is a plain sum) and splits a slice's K into parts of S_t / 4 or
// S_t rows (64 to 1024; the plan), each part written once (no float atomics). P_t and dM_t stay in global memory
// between the launches ([nnz, m_t R_{t+1}] each). A slice of one part gets the optimizer in G's epilogue; a last kernel sums the
// parts of the others in order and applies it. The grouping is version 6's (its prep kernel, and a list of every slice's
// lookups in lookup order, no sort: from the prep's buckets, or version 6's ordered scan); the list kernel also lists the
// products' row tiles and parts, whose places the prep's last block plans.
static const int TT_EMBEDDING_BACKWARD_SLICE_BM = 64, TT_EMBEDDING_BACKWARD_SLICE_BN = 64, TT_EMBEDDING_BACKWARD_SLICE_BK = 32;
static const int TT_EMBEDDING_BACKWARD_SLICE_BLOCK = 256;          // 8 warps, each a 32 x 16 piece of the tile (the tiling assumes it)
static const int TT_EMBEDDING_BACKWARD_SLICE_KPART = 1024;         // G: stacked rows (lookups x mp) per part, at most
static const int TT_EMBEDDING_BACKWARD_SLICE_MIN_BLOCKS = 256;      // G: long parts only where they leave this many blocks (the plan)
static const int TT_EMBEDDING_BACKWARD_SLICE_FILL_BLOCKS = 512;     // G: shorter parts where a launch would have fewer blocks
static const int TT_EMBEDDING_BACKWARD_SLICE_RED_BLOCK = 256;      // reduce kernel
static const int TT_EMBEDDING_BACKWARD_SLICE_RED_CW = 1024;        // reduce kernel: slice elements per block (4 a thread)
static const double TT_EMBEDDING_BACKWARD_SLICE_MAX_GB = 32.0;     // P_t, dM_t and the parts: else version 9 skips (version 7: version 2)
// G_NARROW: G where the gradient's rows are at most 16 long (the last core: n = q): a 64 x 16 tile, each warp a
// 16 x 8 piece (4x fewer products per step than a 64 x 64 tile that is 3/4 padding)
enum { TT_EMBEDDING_BACKWARD_SLICE_F = 0, TT_EMBEDDING_BACKWARD_SLICE_D = 1, TT_EMBEDDING_BACKWARD_SLICE_G = 2, TT_EMBEDDING_BACKWARD_SLICE_G_NARROW = 3 };

struct TtEmbeddingBackwardSlicePlan {
    int mp[TT_EMBEDDING_BACKWARD_MAX_T];                  // m_{t-1} (1 at t = 0): rows per lookup in core t's products
    int lpp[TT_EMBEDDING_BACKWARD_MAX_T];                 // G: lookups per part of core t
    int64_t P_off[TT_EMBEDDING_BACKWARD_MAX_T];           // in io.P (X, or the stash): P_t (t = 1..T-2), [nnz][m_t R_{t+1}]
    int64_t dM_off[TT_EMBEDDING_BACKWARD_MAX_T];          // in X: dM_t (t = 0..T-2), [nnz][m_t R_{t+1}]; X[0] = 1.0f
    int64_t X_floats;
    int64_t part_off[TT_EMBEDDING_BACKWARD_MAX_T];        // in partial: core t's parts, [max_pt[t]][S_t]
    int64_t partial_floats;
    int max_rt[TT_EMBEDDING_BACKWARD_MAX_T], max_pt[TT_EMBEDDING_BACKWARD_MAX_T];   // core t's F/D row tiles and G parts, at most (grids)
    int rt_total, pt_total, max_red_y;
};

// "" when the plan fits 32-bit grids, else why not. stash: P_t are the forward's (P_off into the stash, not X)
inline std::string tt_embedding_backward_slice_make_plan(const TtEmbeddingBackwardShape& s, TtEmbeddingBackwardSlicePlan& P, bool stash = false) {
    memset(&P, 0, sizeof P);
    const int64_t nnz = std::max(s.nnz, 1);
    int64_t X = 4, part = 0, rt = 0, pt = 0, maxS = 1;
    for (int t = 0; t < s.T; t++) {
        P.mp[t] = t ? s.m[t - 1] : 1;
        // A part's K rows (lookups x mp), within [64, KPART]: short parts of S_t / 4 rows, or long ones of S_t where
        // short parts would split a slice of the average count (nnz / slices) anyway: fewer parts to write and sum, and
        // at EL-Rec's L 1 one part per slice (the optimizer then in G's epilogue). Short parts stay where the average
        // slice fits one (Zipf's hot slices then run as more, shorter parts) or long parts would leave fewer than
        // MIN_BLOCKS blocks (a few slices of many lookups: T 6's p 10).
        const int64_t per = (int64_t)s.m[t] * s.R[t + 1], slices = std::min<int64_t>((int64_t)s.tables * s.p[t], nnz);
        const int64_t tiles = ceil_div(s.R[t], TT_EMBEDDING_BACKWARD_SLICE_BM) * ceil_div(s.n[t], TT_EMBEDDING_BACKWARD_SLICE_BN);
        auto kpart_of = [&](int64_t k) { return (int)std::min<int64_t>(TT_EMBEDDING_BACKWARD_SLICE_KPART, std::max<int64_t>(64, k)); };
        const int kshort = kpart_of(s.S[t] / 4), klong = kpart_of(s.S[t]);
        const bool split = nnz / slices > std::max(1, kshort / P.mp[t]);
        const bool wide = (nnz * P.mp[t] / klong + slices) * tiles >= TT_EMBEDDING_BACKWARD_SLICE_MIN_BLOCKS;
        P.lpp[t] = std::max(1, (split && wide ? klong : kshort) / P.mp[t]);
        // Few slices of many lookups (the grid's T 4, core 1: 50 slices, 180 blocks): parts halved until G's launch has
        // FILL_BLOCKS blocks, down to 64 rows (T 4 3% faster; at 1,024 blocks 3% slower: the parts' sums cost more)
        // (lpp >= 2: where one lookup already has 128 rows, m_{t-1} >= 128, there is nothing left to halve)
        while ((ceil_div<int64_t>(nnz, P.lpp[t]) + slices) * tiles < TT_EMBEDDING_BACKWARD_SLICE_FILL_BLOCKS && P.lpp[t] >= 2 &&
               P.lpp[t] * P.mp[t] >= 128)
            P.lpp[t] = std::max(1, P.lpp[t] / 2);
        if (t >= 1 && t <= s.T - 2 && !stash) { P.P_off[t] = X; X += nnz * per; }
        if (t <= s.T - 2) { P.dM_off[t] = X; X += nnz * per; }
        const int64_t mrt = t ? ceil_div<int64_t>(nnz * P.mp[t], TT_EMBEDDING_BACKWARD_SLICE_BM) + slices : 0;
        const int64_t mpt = ceil_div<int64_t>(nnz, P.lpp[t]) + slices;
        if (mrt >= INT32_MAX / 4 || mpt >= INT32_MAX / 4 || nnz * P.mp[t] >= INT32_MAX) return "its work lists would pass 2^29 items";
        P.max_rt[t] = (int)mrt; rt += mrt;
        P.max_pt[t] = (int)mpt; pt += mpt;
        P.part_off[t] = part; part += mpt * s.S[t];
        maxS = std::max<int64_t>(maxS, s.S[t]);
    }
    if (rt >= INT32_MAX / 4 || pt >= INT32_MAX / 4) return "its work lists would pass 2^29 items";
    if (stash) tt_embedding_stash_layout(s.T, s.q, s.R, s.nnz, P.P_off);
    const double gb = 4.0 * (double)(X + part) / 1e9;
    if (gb > TT_EMBEDDING_BACKWARD_SLICE_MAX_GB) {
        char buf[160];
        snprintf(buf, sizeof buf, "its per-lookup products and gradient parts would take %.3g GB (it allocates at most %.0f)", gb,
                 TT_EMBEDDING_BACKWARD_SLICE_MAX_GB);
        return buf;
    }
    P.X_floats = X; P.partial_floats = part; P.rt_total = (int)rt; P.pt_total = (int)pt;
    P.max_red_y = (int)ceil_div<int64_t>(maxS, TT_EMBEDDING_BACKWARD_SLICE_RED_CW);
    return "";
}

// what the kernels of version 9 read and write (keys, bag_of, start, list: version 6's workspace)
struct TtEmbeddingBackwardSliceIo {
    const float *cores, *dY;
    float *X, *P, *partial;                 // P: where P_t live, X or the forward's stash (then F does not run)
    const int *keys, *bag_of, *start, *list;
    int key_stride;
    int *rt_items, *pt_items;               // (key, tile) and (key, part) in key order
    int *first_part, *first_rt;             // slice g's first part and first row tile in them
    int* totals;                            // [T+1]: core t's first row tile, then [T+1]: its first part (entry T: all),
                                            // then the number of slices of several parts
    int* multi;                             // those slices' keys (in no particular order: each is reduced on its own)
    TtEmbeddingBackwardIo o;                // the optimizer, applied by G where a slice's gradient is one part
};

// The block scan of tt_embedding_backward_group_place for three counts per key at once (one set of barriers):
// n(g, c) for c < 3; put(g, off, n) with the three offsets and counts; done(total). buf: 9 nt ints.
template <class Exec, class Count, class Put, class Done>
__host__ __device__ inline void tt_embedding_backward_slice_place3(Exec& ex, int K, int* buf, Count&& n, Put&& put, Done&& done) {
    const int nt = ex.nt, per = (K + nt - 1) / nt;
    ex.phase([&](int tid) {
        const int g0 = min(tid * per, K), g1 = min(g0 + per, K);
        int c[3] = {0, 0, 0};
        for (int g = g0; g < g1; g++)
            for (int j = 0; j < 3; j++) c[j] += n(g, j);
        for (int j = 0; j < 3; j++) buf[3 * j * nt + tid] = buf[3 * j * nt + nt + tid] = c[j];
    });
    int src = 1;
    for (int d = 1; d < nt; d <<= 1) {
        ex.phase([&](int tid) {
            for (int j = 0; j < 3; j++) {
                const int* in = buf + 3 * j * nt + src * nt;
                buf[3 * j * nt + (3 - src) * nt + tid] = in[tid] + (tid >= d ? in[tid - d] : 0);
            }
        });
        src = 3 - src;
    }
    ex.phase([&](int tid) {
        const int g0 = min(tid * per, K), g1 = min(g0 + per, K);
        int off[3], c[3];
        for (int j = 0; j < 3; j++) off[j] = buf[3 * j * nt + src * nt + tid] - buf[3 * j * nt + tid];
        for (int g = g0; g < g1; g++) {
            for (int j = 0; j < 3; j++) c[j] = n(g, j);
            put(g, off, c);
            for (int j = 0; j < 3; j++) off[j] += c[j];
        }
        if (tid == nt - 1) done(off);   // (the last thread's offsets past its range: the totals)
    });
}

// core t's F/D row tiles (none at t = 0: core 0 has no D) and G parts of a slice of c lookups, in 32 bits (the plan
// keeps nnz m_{t-1} below 2^31): the reduce kernel counts a slice's parts per element, and divided in 64 bits it ran
// 3x slower at T 6
__host__ __device__ inline int tt_embedding_backward_slice_tiles(const TtEmbeddingBackwardSlicePlan& P, int t, int c) {
    const int rows = c * P.mp[t];
    return t == 0 ? 0 : rows / TT_EMBEDDING_BACKWARD_SLICE_BM + (rows % TT_EMBEDDING_BACKWARD_SLICE_BM != 0);
}
__host__ __device__ inline int tt_embedding_backward_slice_parts(const TtEmbeddingBackwardSlicePlan& P, int t, int c) {
    return c / P.lpp[t] + (c % P.lpp[t] != 0);
}

// The prep kernel's last block: from the counts, in one block scan over every slice key g (all cores, key order), where
// each slice's lookups start in the list (start) and where its F/D row tiles and G parts start in the work lists
// (first_rt, first_part; core t's are contiguous from totals[t] and totals[T+1+t] on). The slices of several parts (the
// reduce kernel's work) are listed in multi. The items themselves are written by the list kernel, a block per slice:
// written here, by the thread that owns the slice, they took this one block 10-33 us at T 4 and 6 (3 us per 1,000 items).
template <class Exec>
__host__ __device__ inline void tt_embedding_backward_slice_plan_block(Exec& ex, const TtEmbeddingBackwardShape& s, const TtEmbeddingBackwardSlicePlan& P,
                                                                  const int* counts, const TtEmbeddingBackwardSliceIo& io, int* start, int* buf) {
    const int K = s.key_base[s.T];
    auto n_of = [&](int g, int j) {   // lookups, row tiles, parts
        const int t = tt_embedding_backward_key_core(s, g);
        const int c = tt_embedding_backward_group_ldcg(counts + g);   // (in the prep kernel: other blocks' atomics)
        return j == 0 ? c : j == 1 ? tt_embedding_backward_slice_tiles(P, t, c) : tt_embedding_backward_slice_parts(P, t, c);
    };
    int* nmulti = io.totals + 2 * (s.T + 1);
    ex.phase([&](int tid) { if (tid == 0) *nmulti = 0; });
    tt_embedding_backward_slice_place3(ex, K, buf, n_of, [&](int g, const int* off, const int* n) {
        const int t = tt_embedding_backward_key_core(s, g);
        start[g] = off[0];
        if (g == s.key_base[t]) { io.totals[t] = off[1]; io.totals[s.T + 1 + t] = off[2]; }
        io.first_rt[g] = off[1];
        io.first_part[g] = off[2];
        if (n[2] > 1) io.multi[tt_embedding_backward_group_atomic_inc(nmulti, 1)] = g;
    }, [&](const int* total) {
        start[K] = total[0];
        io.totals[s.T] = total[1];
        io.totals[2 * s.T + 1] = total[2];
        io.X[0] = 1.0f;   // P_{-1}
    });
}

// The list kernel's block for slice key g: g's row tiles and parts into the work lists, then its lookups into the list
// in lookup order, from its bucket where it has at most BUCKET of them (EL-Rec's and FBTT's p: every slice), else by
// version 6's ordered scan of its core's keys (O(nnz) a slice: T 4 and 6, whose p are small).
template <class Exec>
__host__ __device__ inline void tt_embedding_backward_slice_list_block(Exec& ex, const TtEmbeddingBackwardShape& s, const TtEmbeddingBackwardGroupPlan& P6,
                                                                  const TtEmbeddingBackwardSlicePlan& P, const TtEmbeddingBackwardSliceIo& io,
                                                                  const TtEmbeddingBackwardWorkspace& ws, const int* bucket, int g, int* scan,
                                                                  int* stage, int cap) {
    const int n = ws.counts[g], t = tt_embedding_backward_key_core(s, g);
    const int tiles = tt_embedding_backward_slice_tiles(P, t, n), parts = tt_embedding_backward_slice_parts(P, t, n);
    ex.phase([&](int tid) {
        for (int i = tid; i < tiles + parts; i += ex.nt) {
            const bool tile = i < tiles;
            int* d = tile ? io.rt_items + 2 * ((int64_t)io.first_rt[g] + i) : io.pt_items + 2 * ((int64_t)io.first_part[g] + i - tiles);
            d[0] = g;
            d[1] = tile ? i : i - tiles;
        }
    });
    if (n > TT_EMBEDDING_BACKWARD_BUCKET) {
        tt_embedding_backward_group_list_block(ex, s, P6, g, ws, scan, stage, cap);
        return;
    }
    int* dst = ws.list + ws.start[g];
    tt_embedding_backward_bucket_order(ex, bucket + (int64_t)g * TT_EMBEDDING_BACKWARD_BUCKET, n, stage, [&](int r, int v) { dst[r] = v; });
}

// A block's shared memory: a ring of STAGES K-steps, each an A and a B tile stored as global memory holds them, so
// that cp.async copies them unchanged: a tile whose rows run along K (F and D's A: a lookup's row; D's B: a row of
// G_t, read as G_t^T) is row-major [64][32 + 4], one whose rows run along M or N (G's A and B, F's B) is K-major
// [32][64 + 8]. Both pitches put a warp's fragment reads (rows lane / 4, columns lane % 4, or the transpose) in 32
// banks. Beside the ring: the pointer tables of the tile's rows (F, D) or of the K rows of STAGES + 1 K-steps (G).
#ifndef TT_EMBEDDING_BACKWARD_SLICE_STAGES
#define TT_EMBEDDING_BACKWARD_SLICE_STAGES 2
#endif
static const int TT_EMBEDDING_BACKWARD_SLICE_S = TT_EMBEDDING_BACKWARD_SLICE_STAGES;
static const int TT_EMBEDDING_BACKWARD_SLICE_RLD = TT_EMBEDDING_BACKWARD_SLICE_BK + 4;    // row-major pitch
static const int TT_EMBEDDING_BACKWARD_SLICE_KLD = TT_EMBEDDING_BACKWARD_SLICE_BM + 8;    // K-major pitch
static const int TT_EMBEDDING_BACKWARD_SLICE_TILE = TT_EMBEDDING_BACKWARD_SLICE_BM * TT_EMBEDDING_BACKWARD_SLICE_RLD;   // = BK x KLD at BK 32
static_assert(TT_EMBEDDING_BACKWARD_SLICE_TILE >= TT_EMBEDDING_BACKWARD_SLICE_BK * TT_EMBEDDING_BACKWARD_SLICE_KLD && TT_EMBEDDING_BACKWARD_SLICE_BK % 16 == 0,
              "a stage holds either layout; K-steps of whole 16s");
// element (m, k) of A and (k, c) of B in their tiles; AK: A is K-major (G), BR: B is row-major along K (D)
template <bool AK>
__host__ __device__ __forceinline__ int tt_embedding_backward_slice_a_at(int m, int k) {
    return AK ? k * TT_EMBEDDING_BACKWARD_SLICE_KLD + m : m * TT_EMBEDDING_BACKWARD_SLICE_RLD + k;
}
template <bool BR>
__host__ __device__ __forceinline__ int tt_embedding_backward_slice_b_at(int k, int c) {
    return BR ? c * TT_EMBEDDING_BACKWARD_SLICE_RLD + k : k * TT_EMBEDDING_BACKWARD_SLICE_KLD + c;
}
struct __align__(16) TtEmbeddingBackwardSliceSmem {
    union {
        float ab[TT_EMBEDDING_BACKWARD_SLICE_S][2][TT_EMBEDDING_BACKWARD_SLICE_TILE];   // [stage][A, B]
        float red[4][TT_EMBEDDING_BACKWARD_SLICE_BM];       // G of core 0: the 4 thread groups' sums, added in group order
        float tile[TT_EMBEDDING_BACKWARD_SLICE_BM][TT_EMBEDDING_BACKWARD_SLICE_BN + 1];   // G: the finished tile (odd pitch: no bank conflicts)
    };
    const float* rowA[TT_EMBEDDING_BACKWARD_SLICE_BM];    // F, D: row r's A row (null past the slice's rows)
    float* rowC[TT_EMBEDDING_BACKWARD_SLICE_BM];          // F, D: row r's output row
    const float* kA[TT_EMBEDDING_BACKWARD_SLICE_S + 1][TT_EMBEDDING_BACKWARD_SLICE_BK];   // G: K row k's A row (a P_{t-1} row; null past the part)
    const float* kB[TT_EMBEDDING_BACKWARD_SLICE_S + 1][TT_EMBEDDING_BACKWARD_SLICE_BK];   // G: K row k's B row (a dM_t row)
};

// lookup n's P_{t-1} (mp x R_t) and dM_t (mp x n_t)
__host__ __device__ inline const float* tt_embedding_backward_slice_prefix(const TtEmbeddingBackwardShape& s, const TtEmbeddingBackwardSlicePlan& P,
                                                                      const TtEmbeddingBackwardSliceIo& io, int t, int n) {
    if (t == 0) return io.X;
    if (t == 1) return io.cores + s.core_off[0] + (int64_t)io.keys[n] * s.S[0];
    return io.P + P.P_off[t - 1] + (int64_t)n * s.m[t - 1] * s.R[t];
}
__host__ __device__ inline const float* tt_embedding_backward_slice_grad(const TtEmbeddingBackwardShape& s, const TtEmbeddingBackwardSlicePlan& P,
                                                                    const TtEmbeddingBackwardSliceIo& io, int t, int n) {
    if (t == s.T - 1) return io.dY + (int64_t)io.bag_of[n] * s.D;
    return io.X + P.dM_off[t] + (int64_t)n * s.m[t] * s.R[t + 1];
}

// The K-steps on tensor cores. The same tiles on FP32 FMAs (version 8, retired) ran 13-17 TFLOP/s at rank 128: the
// products were the time. Each K-step's products are mma.sync m16n8k8 in 3xTF32 (x = hi + lo, hi x's bits with the 13
// low mantissa bits cleared; ahi bhi + ahi blo + alo bhi: FP32's accuracy). Warp w of 8 owns a 32 x 16 piece of the
// 64 x 64 tile (2 x 2 mma tiles; rows 32 (w / 4), columns 16 (w % 4)), or at G_NARROW a 16 x 8 piece of the 64 x 16
// tile (rows 16 (w / 2), columns 8 (w % 2)).

// thread tid's accumulator e (16 of them): its row m and column c in the tile; false where unused (narrow)
template <bool NARROW>
__host__ __device__ inline bool tt_embedding_backward_slice_cpos(int tid, int e, int& m, int& c) {
    const int w = tid / 32, lane = tid % 32;
    m = (NARROW ? 16 * (w / 2) : 32 * (w / 4) + 16 * (e / 8)) + tt_embedding_backward_tc_crow(lane, e % 4);
    c = (NARROW ? 8 * (w % 2) : 16 * (w % 4) + 8 * (e / 4 % 2)) + tt_embedding_backward_tc_ccol(lane, e % 4);
    return !NARROW || e < 4;
}

// One K-step: thread tid's accumulators a += A B over the step's BK k (A(m, k), B(k, c) in the layouts above). On the
// host (the CPU test) each accumulator is formed from the same TF32 halves, in one order; the device's mma sums in its own.
// rows: the tile's rows that hold data (F and D: a slice's last row tile is often mostly padding, 11 of 64 rows at
// EL-Rec's L 1); a warp skips its 16-row mma tiles past them (their outputs are never written).
template <bool NARROW, bool AK, bool BR>
__host__ __device__ __forceinline__ void tt_embedding_backward_slice_step(float* a, const float* As, const float* Bs, int tid, int rows) {
    const int BK = TT_EMBEDDING_BACKWARD_SLICE_BK;
    auto A = [&](int m, int k) { return As[tt_embedding_backward_slice_a_at<AK>(m, k)]; };
    auto B = [&](int k, int c) { return Bs[tt_embedding_backward_slice_b_at<BR>(k, c)]; };
#ifdef __CUDA_ARCH__
    // mma.sync.aligned needs the warp converged; a barrier does not promise that after the K-table threads' branch
    // (without this, measured 2026-12-01: wrong sums, NaN and reruns that differ)
    __syncwarp();
    const int w = tid / 32, lane = tid % 32, MI = NARROW ? 1 : 2, NI = NARROW ? 1 : 2;
    const int mb = NARROW ? 16 * (w / 2) : 32 * (w / 4), nb = NARROW ? 8 * (w % 2) : 16 * (w % 4);
    if (mb >= rows) return;                                  // (warp-uniform, as below)
    const bool m1 = NARROW || mb + 16 < rows;               // the warp's second 16-row tile holds data
TT_EMBEDDING_BACKWARD_UNROLL
    for (int k8 = 0; k8 < BK; k8 += 8) {
        uint32_t ah[2][4], al[2][4], bh[2][2], bl[2][2];
TT_EMBEDDING_BACKWARD_UNROLL
        for (int mi = 0; mi < MI; mi++)
TT_EMBEDDING_BACKWARD_UNROLL
            for (int r = 0; r < 4; r++)
                if (mi == 0 || m1)
                    tf32_split_fast(A(mb + 16 * mi + tt_embedding_backward_tc_arow(lane, r), k8 + tt_embedding_backward_tc_acol(lane, r)), ah[mi][r], al[mi][r]);
TT_EMBEDDING_BACKWARD_UNROLL
        for (int ni = 0; ni < NI; ni++)
TT_EMBEDDING_BACKWARD_UNROLL
            for (int r = 0; r < 2; r++) tf32_split_fast(B(k8 + tt_embedding_backward_tc_bk(lane, r), nb + 8 * ni + lane / 4), bh[ni][r], bl[ni][r]);
TT_EMBEDDING_BACKWARD_UNROLL
        for (int mi = 0; mi < MI; mi++)
TT_EMBEDDING_BACKWARD_UNROLL
            for (int ni = 0; ni < NI; ni++) {
                if (mi == 1 && !m1) continue;
                float (&d)[4] = *reinterpret_cast<float (*)[4]>(a + 4 * (mi * NI + ni));
                mma_tf32_m16n8k8(d, al[mi], bh[ni][0], bh[ni][1]);
                mma_tf32_m16n8k8(d, ah[mi], bl[ni][0], bl[ni][1]);
                mma_tf32_m16n8k8(d, ah[mi], bh[ni][0], bh[ni][1]);
            }
    }
#else
    (void)rows;
    auto split = [](float x, float& hi, float& lo) {   // tf32_split_fast, and the mma's reading of lo (its top 10 mantissa bits)
        auto tf32 = [](float v) { uint32_t u; memcpy(&u, &v, 4); u &= 0xffffe000u; memcpy(&v, &u, 4); return v; };
        hi = tf32(x);
        lo = tf32(x - hi);
    };
    for (int e = 0; e < 16; e++) {
        int m, c;
        if (!tt_embedding_backward_slice_cpos<NARROW>(tid, e, m, c)) continue;
        for (int k8 = 0; k8 < BK; k8 += 8) {
            float s1 = 0.0f, s2 = 0.0f, s3 = 0.0f, xh, xl, yh, yl;
            for (int k = k8; k < k8 + 8; k++) {
                split(A(m, k), xh, xl);
                split(B(k, c), yh, yl);
                s1 = fmaf(xl, yh, s1);
                s2 = fmaf(xh, yl, s2);
                s3 = fmaf(xh, yh, s3);
            }
            a[e] = ((a[e] + s1) + s2) + s3;
        }
    }
#endif
}

// One block of a product launch: item bx of core t (a row tile for F and D, a part for G), output tile by.
// acc(tid) is the thread's 16 accumulators, its mma fragments (their places in the tile: cpos above).
// One barrier per K-step (the ring below).
template <int KIND, bool VEC, class Exec, class Acc, class Smem>
__host__ __device__ inline void tt_embedding_backward_slice_gemm_block(Exec& ex, Acc& acc, const TtEmbeddingBackwardShape& s,
                                                                 const TtEmbeddingBackwardSlicePlan& P, const TtEmbeddingBackwardSliceIo& io, int t,
                                                                 int bx, int by, Smem& sm) {
    const int BM = TT_EMBEDDING_BACKWARD_SLICE_BM, BN = TT_EMBEDDING_BACKWARD_SLICE_BN, BK = TT_EMBEDDING_BACKWARD_SLICE_BK;
    const bool G_ = KIND >= TT_EMBEDDING_BACKWARD_SLICE_G, NARROW = KIND == TT_EMBEDDING_BACKWARD_SLICE_G_NARROW;
    constexpr bool V4 = VEC;
    const int* begin = io.totals + (G_ ? s.T + 1 : 0);
    const int it = begin[t] + bx;
    if (it >= begin[t + 1]) return;
    const int* item = (G_ ? io.pt_items : io.rt_items) + 2 * (int64_t)it;
    const int g = item[0], sub = item[1], k_sl = g - s.key_base[t];
    const int* lst = io.list + io.start[g];
    const int cnt = io.start[g + 1] - io.start[g], mp = P.mp[t], Rt = s.R[t], nt_ = s.n[t];
    const float* Gs = io.cores + s.core_off[t] + (int64_t)k_sl * s.S[t];
    // G: where the slice is one part (L 1, or few lookups per slice) the part is its whole gradient: the optimizer runs
    // here (this core's products have all read G_t by now) and the reduce kernel skips the slice.
    const bool whole = G_ && cnt <= P.lpp[t];
    const int64_t prow = G_ ? P.part_off[t] + (int64_t)(it - begin[t]) * s.S[t] : 0;
    auto put = [&](int64_t e, float v) {   // (core 0's sums, below)
        if (whole) tt_embedding_backward_apply(io.o.opt, io.o.lr, io.o.eps, io.o.cores, io.o.state, io.o.dG, s.core_off[t] + (int64_t)k_sl * s.S[t] + e, v);
        else io.partial[prow + e] = v;
    };
    int M, N, K, m0, n0, j0 = 0;
    if (G_) {
        const int ntn = (nt_ + BN - 1) / BN;
        m0 = by / ntn * BM; n0 = by % ntn * BN;
        if (m0 >= Rt) return;
        j0 = sub * P.lpp[t];
        M = Rt; N = nt_; K = min(P.lpp[t], cnt - j0) * mp;
    } else {
        m0 = sub * BM; n0 = by * BN;
        M = cnt * mp;
        N = KIND == TT_EMBEDDING_BACKWARD_SLICE_F ? nt_ : Rt;
        K = KIND == TT_EMBEDDING_BACKWARD_SLICE_F ? Rt : nt_;
        if (n0 >= N) return;
    }
    if (G_ && t == 0) {   // core 0 (M = R_0 = 1): the part's dM_0 rows summed, 4 groups of 64 threads over its lookups
        const int nl = K;     // (mp = 1)
        ex.phase([&](int tid) {
            const int grp = tid / 64, col = n0 + tid % 64;
            float v = 0.0f;
            if (col < N)
                for (int j = grp; j < nl; j += 4) v += io.X[P.dM_off[0] + (int64_t)lst[j0 + j] * nt_ + col];
            sm.red[grp][tid % 64] = v;
        });
        ex.phase([&](int tid) {
            const int col = n0 + tid;
            if (tid < 64 && col < N) put(col, ((sm.red[0][tid] + sm.red[1][tid]) + sm.red[2][tid]) + sm.red[3][tid]);
        });
        return;
    }
    // The K-steps run through a ring of S stages: K-step j is copied (cp.async, no registers) into stage j % S while
    // the S - 1 before it are in flight or in use. Against loads staged through registers (16 k a step) this took
    // version 9's steps 3-6% faster at 4 stages of 16 k, and 5-11% at 2 stages of 32 k (half the barriers per
    // product; 4 stages of 16 matched 3; results/notes/tt_embedding_backward.md).
    constexpr int S = TT_EMBEDDING_BACKWARD_SLICE_S;
    constexpr bool AK = KIND >= TT_EMBEDDING_BACKWARD_SLICE_G, BR = KIND == TT_EMBEDDING_BACKWARD_SLICE_D;
    const int steps = (K + BK - 1) / BK;
    // G: the rows of K-step `step` into table step % (S + 1) (threads < BK)
    auto ktable = [&](int tid, int step) {
        if (tid >= BK || step >= steps) return;
        const int kk = step * BK + tid, b = step % (S + 1);
        if (kk >= K) { sm.kA[b][tid] = nullptr; sm.kB[b][tid] = nullptr; return; }
        const int j = kk / mp, i = kk - j * mp, n = lst[j0 + j];
        sm.kA[b][tid] = tt_embedding_backward_slice_prefix(s, P, io, t, n) + (int64_t)i * Rt;
        sm.kB[b][tid] = tt_embedding_backward_slice_grad(s, P, io, t, n) + (int64_t)i * nt_;
    };
    // V4 (tt_embedding_backward_slice_vec): each thread copies one float4 of A and one of B per 16 k of a K-step, 4
    // consecutive elements along the contiguous index, with cp.async (zeros stored where the float4 lies outside the operand).
    auto copy4 = [](bool ok, const float* src, float* dst) {
        if (ok) async_copy(dst, src, true, true);   // (through L1: with L2 only, Zipf's hot rows took 1.5x longer)
        else for (int j = 0; j < 4; j++) dst[j] = 0.0f;
    };
    auto issue = [&](int tid, int step) {
        if (step >= steps) return;
        const int k0 = step * BK, kt = step % (S + 1);
        float* As = sm.ab[step % S][0];
        float* Bs = sm.ab[step % S][1];
TT_EMBEDDING_BACKWARD_UNROLL
        for (int h = 0; h < BK / 16; h++) {               // 16 k per round
            if (G_) {                                 // A(m, k) = kA[k][m], B(k, c) = kB[k][c]: thread (k, 4 m or c)
                const int k = 16 * h + tid / 16, x4 = 4 * (tid % 16);
                copy4(sm.kA[kt][k] && m0 + x4 < M, sm.kA[kt][k] + m0 + x4, As + tt_embedding_backward_slice_a_at<AK>(x4, k));
                copy4(sm.kB[kt][k] && n0 + x4 < N, sm.kB[kt][k] + n0 + x4, Bs + tt_embedding_backward_slice_b_at<BR>(k, x4));
                continue;
            }
            const int r = tid / 4, k4 = 16 * h + 4 * (tid % 4);   // A(r, k) = rowA[r][k]: thread (r, 4 k)
            copy4(sm.rowA[r] && k0 + k4 < K, sm.rowA[r] + k0 + k4, As + tt_embedding_backward_slice_a_at<AK>(r, k4));
            if (KIND == TT_EMBEDDING_BACKWARD_SLICE_F) {   // B(k, c) = G[k][c]: thread (k, 4 c)
                const int kk = 16 * h + tid / 16, c4 = 4 * (tid % 16);
                copy4(k0 + kk < K && n0 + c4 < N, Gs + (int64_t)(k0 + kk) * nt_ + n0 + c4, Bs + tt_embedding_backward_slice_b_at<BR>(kk, c4));
            } else {                                       // B(k, c) = G[c][k]: thread (c, 4 k)
                copy4(n0 + r < N && k0 + k4 < K, Gs + (int64_t)(n0 + r) * nt_ + k0 + k4, Bs + tt_embedding_backward_slice_b_at<BR>(k4, r));
            }
        }
    };
    // Scalar loads (a rank not a multiple of 4): the thread's VPT A and VPT B elements of K-step `step`, coalesced along
    // the contiguous index, into registers; stored into the stage after the step before is multiplied.
    constexpr int VPT = BM * BK / TT_EMBEDDING_BACKWARD_SLICE_BLOCK;   // elements of A (and of B) per thread and K-step
    auto fetch = [&](int tid, int step, float (&va)[VPT], float (&vb)[VPT]) {
        const int k0 = step * BK, kt = step % (S + 1);
TT_EMBEDDING_BACKWARD_UNROLL
        for (int q = 0; q < VPT; q++) {
            const int e = tid + 256 * q;
            if (G_) {                                 // A(m, k) = kA[k][m], B(k, c) = kB[k][c]
                const int m = e % BM, k = e / BM;
                const float* pa = sm.kA[kt][k];
                va[q] = pa && m0 + m < M ? pa[m0 + m] : 0.0f;
                const float* pb = sm.kB[kt][k];
                vb[q] = pb && n0 + m < N ? pb[n0 + m] : 0.0f;
            } else {
                const int r = e / BK, k = e % BK;      // A(r, k) = rowA[r][k]
                const float* pa = sm.rowA[r];
                va[q] = pa && k0 + k < K ? pa[k0 + k] : 0.0f;
                if (KIND == TT_EMBEDDING_BACKWARD_SLICE_F) {   // B(k, c) = G[k][c]
                    const int c = e % BN, kk = e / BN;
                    vb[q] = k0 + kk < K && n0 + c < N ? Gs[(int64_t)(k0 + kk) * nt_ + n0 + c] : 0.0f;
                } else {                                  // B(k, c) = G[c][k] (G^T)
                    vb[q] = k0 + k < K && n0 + r < N ? Gs[(int64_t)(n0 + r) * nt_ + k0 + k] : 0.0f;
                }
            }
        }
    };
    auto store = [&](int tid, int step, const float (&va)[VPT], const float (&vb)[VPT]) {
        if (step >= steps) return;
        float* As = sm.ab[step % S][0];
        float* Bs = sm.ab[step % S][1];
TT_EMBEDDING_BACKWARD_UNROLL
        for (int q = 0; q < VPT; q++) {
            const int e = tid + 256 * q;
            if (G_) {
                As[tt_embedding_backward_slice_a_at<AK>(e % BM, e / BM)] = va[q];
                Bs[tt_embedding_backward_slice_b_at<BR>(e / BM, e % BM)] = vb[q];
            } else {
                As[tt_embedding_backward_slice_a_at<AK>(e / BK, e % BK)] = va[q];
                if (KIND == TT_EMBEDDING_BACKWARD_SLICE_F) Bs[tt_embedding_backward_slice_b_at<BR>(e / BN, e % BN)] = vb[q];
                else Bs[tt_embedding_backward_slice_b_at<BR>(e % BK, e / BK)] = vb[q];
            }
        }
    };
    // row tables (F, D) or the first S K-steps' (G); accumulators to 0
    ex.phase([&](int tid) {
        float* a = acc(tid);
TT_EMBEDDING_BACKWARD_UNROLL
        for (int e = 0; e < 16; e++) a[e] = 0.0f;
        if (G_) {
            for (int j = 0; j < S; j++) ktable(tid, j);
            return;
        }
        if (tid >= BM) return;
        const int r = m0 + tid;
        if (r >= M) { sm.rowA[tid] = nullptr; sm.rowC[tid] = nullptr; return; }
        const int j = r / mp, i = r - j * mp, n = lst[j];
        if (KIND == TT_EMBEDDING_BACKWARD_SLICE_F) {
            sm.rowA[tid] = tt_embedding_backward_slice_prefix(s, P, io, t, n) + (int64_t)i * Rt;
            sm.rowC[tid] = io.P + P.P_off[t] + (int64_t)n * s.m[t] * s.R[t + 1] + (int64_t)i * nt_;
        } else {
            sm.rowA[tid] = tt_embedding_backward_slice_grad(s, P, io, t, n) + (int64_t)i * nt_;
            sm.rowC[tid] = io.X + P.dM_off[t - 1] + (int64_t)n * s.m[t - 1] * Rt + (int64_t)i * Rt;
        }
    });
    // K-steps 0 .. S-2 into their stages (a commit group per K-step, empty past the last: the wait below counts groups)
    ex.phase([&](int tid) {
        for (int j = 0; j < S - 1; j++) {
            if constexpr (V4) {
                issue(tid, j);
                async_commit();
            } else {
                float va[VPT], vb[VPT];
                if (j < steps) fetch(tid, j, va, vb);
                store(tid, j, va, vb);
            }
        }
        async_wait_group<S - 2>();                // K-step 0 landed (this thread's copies; the barrier: everyone's)
    });
    // Step j: K-step j + S - 1 into the stage K-step j - 1 used (every thread is past it: the barrier before), G's
    // table for K-step j + S, the products of K-step j, then wait for K-step j + 1.
    for (int step = 0; step < steps; step++) {
        ex.phase([&](int tid) {
            const int b = step % S;
            if constexpr (V4) {
                issue(tid, step + S - 1);
                async_commit();
                if (G_) ktable(tid, step + S);
                tt_embedding_backward_slice_step<NARROW, AK, BR>(acc(tid), sm.ab[b][0], sm.ab[b][1], tid, M - m0);
                async_wait_group<S - 2>();
            } else {
                float va[VPT], vb[VPT];
                if (step + S - 1 < steps) fetch(tid, step + S - 1, va, vb);
                if (G_) ktable(tid, step + S);
                tt_embedding_backward_slice_step<NARROW, AK, BR>(acc(tid), sm.ab[b][0], sm.ab[b][1], tid, M - m0);
                store(tid, step + S - 1, va, vb);
            }
        });
    }
    if (!G_) {   // F, D: each thread's pairs of adjacent columns (e, e + 1) as one float2 where rows are 8-byte aligned (V4)
        ex.phase([&](int tid) {
            const float* a = acc(tid);
TT_EMBEDDING_BACKWARD_UNROLL
            for (int e = 0; e < 16; e += 2) {
                int m, c;
                if (!tt_embedding_backward_slice_cpos<NARROW>(tid, e, m, c) || !sm.rowC[m]) continue;
                float* dst = sm.rowC[m] + n0 + c;
                if (V4 && n0 + c + 1 < N) *reinterpret_cast<float2*>(dst) = make_float2(a[e], a[e + 1]);
                else {
                    if (n0 + c < N) dst[0] = a[e];
                    if (n0 + c + 1 < N) dst[1] = a[e + 1];
                }
            }
        });
        return;
    }
    // G: the tile leaves through shared memory, each row segment by consecutive threads, and where the optimizer runs
    // here every load (G_t, its state) is issued before the first store. (Element by element from the fragments, each
    // read-modify-write was a dependent round trip: G's launch took 1.7x longer.)
    ex.phase([&](int tid) {
        const float* a = acc(tid);
TT_EMBEDDING_BACKWARD_UNROLL
        for (int e = 0; e < 16; e++) {
            int m, c;
            if (tt_embedding_backward_slice_cpos<NARROW>(tid, e, m, c)) sm.tile[m][c] = a[e];
        }
    });
    ex.phase([&](int tid) {
        constexpr int W = NARROW ? 16 : BN, PER = BM * W / TT_EMBEDDING_BACKWARD_SLICE_BLOCK, GROUP = 4;   // (groups: registers)
        float* Gc = io.o.cores + s.core_off[t] + (int64_t)k_sl * s.S[t];
        float* St = io.o.state + s.core_off[t] + (int64_t)k_sl * s.S[t];
        const int opt = io.o.opt;
TT_EMBEDDING_BACKWARD_UNROLL
        for (int q0 = 0; q0 < PER; q0 += GROUP) {
            float v[GROUP], gv[GROUP], sv[GROUP];
            int at[GROUP];   // the element's place in the slice, -1 outside it
TT_EMBEDDING_BACKWARD_UNROLL
            for (int q = 0; q < GROUP; q++) {
                const int o = tid + TT_EMBEDDING_BACKWARD_SLICE_BLOCK * (q0 + q), m = o / W, c = o % W;
                at[q] = m0 + m < M && n0 + c < N ? (m0 + m) * nt_ + n0 + c : -1;
                v[q] = sm.tile[m][c];
                gv[q] = at[q] >= 0 && whole && opt != TT_EMBEDDING_BACKWARD_DENSE ? Gc[at[q]] : 0.0f;
                sv[q] = at[q] >= 0 && whole && opt == TT_EMBEDDING_BACKWARD_ADAGRAD ? St[at[q]] : 0.0f;
            }
TT_EMBEDDING_BACKWARD_UNROLL
            for (int q = 0; q < GROUP; q++) {
                if (at[q] < 0) continue;
                if (!whole) { io.partial[prow + at[q]] = v[q]; continue; }
                float d;
                tt_embedding_backward_apply(opt, io.o.lr, io.o.eps, &gv[q], &sv[q], &d, 0, v[q]);
                if (opt == TT_EMBEDDING_BACKWARD_DENSE) io.o.dG[s.core_off[t] + (int64_t)k_sl * s.S[t] + at[q]] = d;
                else Gc[at[q]] = gv[q];
                if (opt == TT_EMBEDDING_BACKWARD_ADAGRAD) St[at[q]] = sv[q];
            }
        }
    });
}

// D of the last core (t = T-1, K = q_t) as a direct sum where q_t <= 4: element r = (i, k) of lookup n's dM_{T-2}
// (m_{T-2} x R_{T-1}) = sum_a dY[bag][i q_t + a] G_t[slice][k q_t + a]. The GEMM padded K to 16 for one K-step per 64 x 64
// tile (at q_t = 8 it still wins; the times: the notes).
static const int TT_EMBEDDING_BACKWARD_SLICE_LAST_D_MAX_Q = 4;
inline bool tt_embedding_backward_slice_direct_last_d(const TtEmbeddingBackwardShape& s) { return s.q[s.T - 1] <= TT_EMBEDDING_BACKWARD_SLICE_LAST_D_MAX_Q; }

// Core t's products load float4s (one of A and one of B per thread and K-step, 4 elements along the contiguous index)
// where every row they read starts 16-byte aligned: with every inner rank a multiple of 4 every slice, core offset,
// P_t and dM_t row is; the last core's D and G also read dY rows of q_{T-1} values.
inline bool tt_embedding_backward_slice_vec(const TtEmbeddingBackwardShape& s, int t) {
    for (int u = 1; u < s.T; u++)
        if (s.R[u] % 4) return false;
    return t < s.T - 1 || s.q[s.T - 1] % 4 == 0;
}
// lookup n's dY row g, last-core slice G and dM_{T-2} row block out
__host__ __device__ inline void tt_embedding_backward_slice_last_d_rows(const TtEmbeddingBackwardShape& s, const TtEmbeddingBackwardSlicePlan& P,
                                                                   const TtEmbeddingBackwardSliceIo& io, int n, const float*& g,
                                                                   const float*& G, float*& out) {
    const int t = s.T - 1;
    g = io.dY + (int64_t)io.bag_of[n] * s.D;
    G = io.cores + s.core_off[t] + (int64_t)io.keys[(int64_t)t * io.key_stride + n] * s.S[t];
    out = io.X + P.dM_off[t - 1] + (int64_t)n * s.m[t - 1] * s.R[t];
}
// element r = (i, k): the q_t terms in order (v4, q_t = 4 with aligned rows: two float4 loads, the same sum)
__host__ __device__ __forceinline__ float tt_embedding_backward_slice_dot4(float4 x, float4 y) {
    return fmaf(x.w, y.w, fmaf(x.z, y.z, fmaf(x.y, y.y, fmaf(x.x, y.x, 0.0f))));
}
__host__ __device__ inline float tt_embedding_backward_slice_last_d(const TtEmbeddingBackwardShape& s, const float* g, const float* G, int r, bool v4) {
    const int t = s.T - 1, q = s.q[t], i = r / s.R[t], k = r - i * s.R[t];
    g += (int64_t)i * q;
    G += (int64_t)k * q;
    if (v4) return tt_embedding_backward_slice_dot4(tt_embedding_backward_group_ld4(g), tt_embedding_backward_group_ld4(G));
    float v = 0.0f;
    for (int a = 0; a < q; a++) v = fmaf(g[a], G[a], v);
    return v;
}
inline bool tt_embedding_backward_slice_last_d_v4(const TtEmbeddingBackwardShape& s) {
    return s.q[s.T - 1] == 4 && tt_embedding_backward_slice_vec(s, s.T - 1);
}

// The reduce kernel's work on element e of slice key g (counts_g lookups) of more than one part: its parts summed in
// order, then the optimizer.
__host__ __device__ inline void tt_embedding_backward_slice_reduce(const TtEmbeddingBackwardShape& s, const TtEmbeddingBackwardSlicePlan& P,
                                                              const TtEmbeddingBackwardSliceIo& io, const TtEmbeddingBackwardIo& o, int g,
                                                              int e, int counts_g) {
    const int t = tt_embedding_backward_key_core(s, g);
    if (counts_g == 0 || e >= s.S[t]) return;
    const int np = tt_embedding_backward_slice_parts(P, t, counts_g), fp = io.first_part[g] - io.totals[s.T + 1 + t];
    if (np == 1) return;   // G applied the optimizer
    const float* src = io.partial + P.part_off[t] + (int64_t)fp * s.S[t] + e;
    const int64_t S = s.S[t];
    float sum = src[0];
    int p = 1;
    for (; p + 4 <= np; p += 4) {   // four parts' loads in flight, added in the same order
        const float a = src[p * S], b = src[(p + 1) * S], c = src[(p + 2) * S], d = src[(p + 3) * S];
        sum += a; sum += b; sum += c; sum += d;
    }
    for (; p < np; p++) sum += src[p * S];
    tt_embedding_backward_apply(o.opt, o.lr, o.eps, o.cores, o.state, o.dG, s.core_off[t] + (int64_t)(g - s.key_base[t]) * s.S[t] + e, sum);
}

// Version 6's prep kernel, each lookup also into its slices' buckets, with version 9's last block (the places of the
// list starts, row tiles and parts in one block scan).
__global__ void __launch_bounds__(TT_EMBEDDING_BACKWARD_GROUP_PREP_BLOCK)
tt_embedding_backward_slice_prep_kernel(const __grid_constant__ TtEmbeddingBackwardShape s, const __grid_constant__ TtEmbeddingBackwardGroupPlan P6,
                                   const __grid_constant__ TtEmbeddingBackwardSlicePlan P, const int64_t* offsets, const int64_t* indices,
                                   const __grid_constant__ TtEmbeddingBackwardWorkspace ws, const __grid_constant__ TtEmbeddingBackwardSliceIo io,
                                   int* bucket) {
    __shared__ int scan[9 * TT_EMBEDDING_BACKWARD_GROUP_PREP_BLOCK];
    pdl_allow_next();   // the list kernel may start its blocks (it waits for this grid)
    if (!tt_embedding_backward_group_prep_then_last(s, P6.key_stride, offsets, indices, ws, bucket)) return;
    TtEmbeddingBackwardDeviceExec ex{(int)threadIdx.x, (int)blockDim.x};
    tt_embedding_backward_slice_plan_block(ex, s, P, ws.counts, io, ws.start, scan);
}

// Version 9's list kernel: a block per slice (grid-stride), tt_embedding_backward_slice_list_block.
__global__ void __launch_bounds__(TT_EMBEDDING_BACKWARD_GROUP_LIST_BLOCK, 2)
tt_embedding_backward_slice_lists_kernel(const __grid_constant__ TtEmbeddingBackwardShape s, const __grid_constant__ TtEmbeddingBackwardGroupPlan P6,
                                    const __grid_constant__ TtEmbeddingBackwardSlicePlan P, const __grid_constant__ TtEmbeddingBackwardWorkspace ws,
                                    const __grid_constant__ TtEmbeddingBackwardSliceIo io, const int* bucket) {
    pdl_wait_prior();
    __shared__ int scan[3 * TT_EMBEDDING_BACKWARD_GROUP_LIST_BLOCK];
    TtEmbeddingBackwardDeviceExec ex{(int)threadIdx.x, (int)blockDim.x};
    for (int g = blockIdx.x; g < s.key_base[s.T]; g += gridDim.x)
        tt_embedding_backward_slice_list_block(ex, s, P6, P, io, ws, bucket, g, scan, (int*)tt_embedding_backward_smem,
                                               tt_embedding_backward_group_list_stage(P6));
    // the next launch is let in only now: started early, its blocks waited on SMs this kernel's last blocks needed
    // (9% of the step at EL-Rec's q 4,4,4, ranks 128, L 1)
    pdl_allow_next();
}

// VEC: the 16-byte cp.async copies, in at most 64 registers (4 blocks per SM; with register staging the kernels took
// 63-68 without the bound). The scalar loads' kernels keep ptxas's own choice (76-80 registers for F and G with the
// register staging of 2026-12-02's first half; bounded to 64 they lost 3-9% at T 4 and L 20, the notes).
template <int KIND, bool VEC>
__global__ void __launch_bounds__(TT_EMBEDDING_BACKWARD_SLICE_BLOCK, VEC ? 4 : 0)
tt_embedding_backward_slice_gemm_kernel(const __grid_constant__ TtEmbeddingBackwardShape s, const __grid_constant__ TtEmbeddingBackwardSlicePlan P,
                                   const __grid_constant__ TtEmbeddingBackwardSliceIo io, int t) {
    __shared__ TtEmbeddingBackwardSliceSmem sm;
    pdl_wait_prior();
    pdl_allow_next();
    float regs[16];
    TtEmbeddingBackwardDeviceExec ex{(int)threadIdx.x, (int)blockDim.x};
    auto acc = [&](int) -> float* { return regs; };
    tt_embedding_backward_slice_gemm_block<KIND, VEC>(ex, acc, s, P, io, t, blockIdx.x, blockIdx.y, sm);
}

// A warp per lookup (grid-stride over warps), its rows read once. v4: a lane makes 4 consecutive elements at a time
// (one i, k .. k+3: R_{T-1} is a multiple of 4 there) from one float4 of dY and 4 rows of G_t, stored as one float4;
// the loads of U such groups are issued before their stores (no aliasing: __restrict__), so a lookup costs about two
// round trips to memory, not one per group. (A block per lookup, 256 threads, a round trip per 1,024 elements: 26-28
// us at EL-Rec's q 4,4,4 L 1, 1.3 TB/s of dM written.) Each element the same sum as tt_embedding_backward_slice_last_d's.
static const int TT_EMBEDDING_BACKWARD_SLICE_LAST_D_BLOCK = 256, TT_EMBEDDING_BACKWARD_SLICE_LAST_D_GRID = 4096;
__global__ void __launch_bounds__(TT_EMBEDDING_BACKWARD_SLICE_LAST_D_BLOCK) tt_embedding_backward_slice_last_d_kernel(
    const __grid_constant__ TtEmbeddingBackwardShape s, const __grid_constant__ TtEmbeddingBackwardSlicePlan P, const __grid_constant__ TtEmbeddingBackwardSliceIo io,
    bool v4) {
    pdl_wait_prior();
    pdl_allow_next();
    constexpr int U = 4;
    const int R = s.R[s.T - 1], per = s.m[s.T - 2] * R, cnt = tt_embedding_backward_count(s), lane = threadIdx.x % 32;
    const int nw = gridDim.x * (blockDim.x / 32);
    for (int n = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; n < cnt; n += nw) {
        const float *g, *G;
        float* out;
        tt_embedding_backward_slice_last_d_rows(s, P, io, n, g, G, out);
        if (!v4) {
            for (int r = lane; r < per; r += 32) out[r] = tt_embedding_backward_slice_last_d(s, g, G, r, false);
            continue;
        }
        const float* __restrict__ gr = g;
        const float* __restrict__ Gr = G;
        float* __restrict__ o = out;
        for (int r0 = 4 * lane; r0 < per; r0 += 4 * 32 * U) {
            float4 x[U], y[U][4];
TT_EMBEDDING_BACKWARD_UNROLL
            for (int u = 0; u < U; u++) {
                const int r = r0 + 4 * 32 * u, i = r / R, k = r - i * R;
                if (r >= per) continue;
                x[u] = tt_embedding_backward_group_ld4(gr + 4 * (int64_t)i);
TT_EMBEDDING_BACKWARD_UNROLL
                for (int j = 0; j < 4; j++) y[u][j] = tt_embedding_backward_group_ld4(Gr + 4 * (int64_t)(k + j));
            }
TT_EMBEDDING_BACKWARD_UNROLL
            for (int u = 0; u < U; u++) {
                const int r = r0 + 4 * 32 * u;
                if (r >= per) continue;
                *reinterpret_cast<float4*>(o + r) =
                    make_float4(tt_embedding_backward_slice_dot4(x[u], y[u][0]), tt_embedding_backward_slice_dot4(x[u], y[u][1]),
                                tt_embedding_backward_slice_dot4(x[u], y[u][2]), tt_embedding_backward_slice_dot4(x[u], y[u][3]));
            }
        }
    }
}

// Grid-stride over (column block y, slice of several parts), y major.
static const int TT_EMBEDDING_BACKWARD_SLICE_RED_GRID = 2048;
__global__ void tt_embedding_backward_slice_reduce_kernel(const __grid_constant__ TtEmbeddingBackwardShape s, const __grid_constant__ TtEmbeddingBackwardSlicePlan P,
                                                     const __grid_constant__ TtEmbeddingBackwardSliceIo io, const int* counts,
                                                     const __grid_constant__ TtEmbeddingBackwardIo o) {
    pdl_wait_prior();
    const int nm = io.totals[2 * (s.T + 1)], CW = TT_EMBEDDING_BACKWARD_SLICE_RED_CW;   // (none: every block returns here)
    for (int64_t b = blockIdx.x; b < (int64_t)nm * P.max_red_y; b += gridDim.x) {
        const int g = io.multi[b % nm], y = (int)(b / nm);
        const int t = tt_embedding_backward_key_core(s, g);
        if ((int64_t)y * CW >= s.S[t]) continue;
        const int cg = counts[g];
        for (int e = y * CW + threadIdx.x; e < (y + 1) * CW; e += blockDim.x) tt_embedding_backward_slice_reduce(s, P, io, o, g, e, cg);
    }
}

// FLOPs per lookup, FBTT's count (header)
inline double tt_embedding_backward_flops_per_lookup(const TtEmbeddingBackwardShape& s, bool stash = false) {   // (stash: no F)
    double f = 0.0;
    for (int t = 0; t <= s.T - 3 && !stash; t++) f += 2.0 * s.m[t] * s.R[t + 1] * s.n[t + 1];
    for (int t = 1; t <= s.T - 1; t++) f += 4.0 * s.m[t - 1] * s.R[t] * s.n[t];
    return f;
}

// ---- version 7 at T = 2 (and on two groups of merged cores): one product per lookup and core
//
// With two cores a row is G_0[i_0] (q_0 x R_1) . G_1[i_1] (R_1 x q_1) and, with g = dY[bag] seen as q_0 x q_1,
//   dG_0[i_0][a][k] += sum_b g[a][b] G_1[i_1][k][b]        dG_1[i_1][k][b] += sum_a G_0[i_0][a][k] g[a][b]
// per lookup: D R_1 multiply-adds a core and no chain. The routes above plan chunks around a pivot core that two
// cores do not have (the merged grid's T 4 spent 300 of its 430 us there, the products a few us). So: a (slice key,
// lookup) pair per lookup and core, sorted by key with CUB (stable: a slice's lookups stay in lookup order), and a
// warp per SPAN consecutive sorted pairs that sums each run of equal keys in it, lookup after lookup. Lane k holds
// rank index k (and k + 32) of the run's slice: q_t sums each, their factors read from shared memory where the
// lookups' g and other slice were copied (cp.async, a span's lookups at once). A run cut by a span's edge leaves
// a piece in `parts`, and a combine kernel adds a cut slice's pieces in span order: the bits do not depend on timing,
// and a hot slice (Zipf) spreads over many warps. The output is the dense gradient;
// the optimizer pass follows (a core's slices are read by the other core's warps while they run).
static const int TT_EMBEDDING_BACKWARD_TWO_SPAN = 4;    // sorted pairs per warp (all staged at once)
static const int TT_EMBEDDING_BACKWARD_TWO_WARPS = 4;   // warps per block

// what the warps read and write besides the shape
struct TtEmbeddingBackwardTwo {
    const int *key, *lookup;        // the sorted pairs [N]: slice key (K past the lookups), lookup
    const int *rows, *bag_of;       // per lookup: its slice row in core 0 and core 1 ([2][key_stride]), its bag
    int *first, *last;              // per slice key: its pairs [first, last) in sorted order (-1: untouched)
    float* parts;                   // [spans][2][max S]: a span's first and last runs where cut
    int N, K, key_stride, po;       // po: pitch of a staged G_1 slice's rows (q_1, odd)
    int slot, stage_floats, max_S;  // floats per staged lookup (g, then the other slice), per warp, per piece
};

// a staged lookup: g as q_other rows of round4(q_t) (x, the lane's sums, contiguous), then the other core's slice
__host__ __device__ inline int tt_embedding_backward_two_gfloats(const TtEmbeddingBackwardShape& s) {
    return (s.q[0] + 3) / 4 * 4 * ((s.q[1] + 3) / 4 * 4);
}
__host__ __device__ inline int tt_embedding_backward_two_slot(const TtEmbeddingBackwardShape& s) {
    const int po = s.q[1] | 1, other = s.R[1] * (po > s.q[0] ? po : s.q[0]);
    return tt_embedding_backward_two_gfloats(s) + (other + 3) / 4 * 4;
}
// a warp's shared floats: its SPAN lookups' g and other slice, SPAN + 4 ints and 2 SPAN int64
__host__ __device__ inline int tt_embedding_backward_two_warp_floats(const TtEmbeddingBackwardShape& s) {
    return TT_EMBEDDING_BACKWARD_TWO_SPAN * tt_embedding_backward_two_slot(s) + TT_EMBEDDING_BACKWARD_TWO_SPAN + 4 + 4 * TT_EMBEDDING_BACKWARD_TWO_SPAN;
}

// One lookup's products for the lane's rank indices k (a: its sums, QX of them used): a[kq][x] += sum_y g[y][x] o(k, y),
// g staged as rows of gp (x contiguous: float4 loads with fixed offsets), o(k, y) = os[k ok + y oy]
template <int QX, int KQ, int Q>
__host__ __device__ __forceinline__ void tt_embedding_backward_two_lookup(float (&a)[KQ][Q], bool first, const float* gs, int gp, const float* os,
                                                                         int ok, int oy, int qy, int R, int lane) {
TT_EMBEDDING_BACKWARD_UNROLL
    for (int kq = 0; kq < KQ; kq++) {
        const int k = lane + 32 * kq;
        if (k >= R) break;
        if (first)
TT_EMBEDDING_BACKWARD_UNROLL
            for (int x = 0; x < QX; x++) a[kq][x] = 0.0f;
        for (int y = 0; y < qy; y++) {
            const float o = os[k * ok + y * oy];
            const float* gr = gs + y * gp;
TT_EMBEDDING_BACKWARD_UNROLL
            for (int x = 0; x < QX; x += 4) {
                const float4 g4 = tt_embedding_backward_group_ld4(gr + x);
                a[kq][x] = fmaf(g4.x, o, a[kq][x]);
                a[kq][x + 1] = fmaf(g4.y, o, a[kq][x + 1]);
                a[kq][x + 2] = fmaf(g4.z, o, a[kq][x + 2]);
                a[kq][x + 3] = fmaf(g4.w, o, a[kq][x + 3]);
            }
        }
    }
}

// the pair (core t, lookup j): sort key and lookup, the lookup's slice rows and bag (a thread per lookup); positions
// past the lookups' count get key K, which sorts last
__host__ __device__ inline void tt_embedding_backward_two_prep(const TtEmbeddingBackwardShape& s, int key_stride, int j, const int64_t* offsets,
                                                               const int64_t* indices, int* key, int* lookup, int* rows, int* bag_of) {
    const int K = s.key_base[2];
    if (j >= tt_embedding_backward_count(s)) {
        key[j] = key[s.nnz + j] = K;
        lookup[j] = lookup[s.nnz + j] = j;
        return;
    }
    const int bag = tt_embedding_backward_bag_of(offsets, s.num_bags, j), tbl = bag / s.B;
    int idx[TT_EMBEDDING_BACKWARD_MAX_T];
    tt_embedding_backward_decode_row(s, indices[j], idx);
    bag_of[j] = bag;
    for (int t = 0; t < 2; t++) {
        const int row = tbl * s.p[t] + idx[t];
        rows[t * key_stride + j] = row;
        key[t * s.nnz + j] = s.key_base[t] + row;
        lookup[t * s.nnz + j] = j;
    }
}

// sorted position i: where its slice's pairs begin and end
__host__ __device__ inline void tt_embedding_backward_two_bounds(const int* key, int N, int K, int i, int* first, int* last) {
    const int g = key[i];
    if (g >= K) return;
    if (i == 0 || key[i - 1] != g) first[g] = i;
    if (i == N - 1 || key[i + 1] != g) last[g] = i + 1;
}

// A warp's span of sorted pairs [span SPAN, + SPAN): its runs summed and written (Exec: the warp's lanes, phase by
// phase). sm: the warp's shared floats (warp_floats above). Short spans and one stage for all of a span's lookups keep
// a warp's chain short (its keys, then their bags and rows, then the copies, then the sums): at 32 pairs in stages of
// 4 a warp waited on 8 such chains, and the merged grid's T 4 took 250 us in its 640 warps.
template <int Q, int KQ, int LANES, class Exec>
__host__ __device__ inline void tt_embedding_backward_two_span(Exec& ex, const TtEmbeddingBackwardShape& s, const TtEmbeddingBackwardTwo& w,
                                                               const TtEmbeddingBackwardIo& io, int span, float* sm) {
    const int SPAN = TT_EMBEDDING_BACKWARD_TWO_SPAN, K = w.K, R = s.R[1], dpad = tt_embedding_backward_two_gfloats(s);
    const int S0 = span * SPAN, n = min(SPAN, w.N - S0);
    float acc[LANES][KQ][Q];                                           // a lane's sums (LANES: 1 on the GPU, 32 in the CPU test)
    int* kk = reinterpret_cast<int*>(sm + SPAN * w.slot);              // the span's keys, then its neighbours' keys
    int* misc = kk + SPAN;                                             // [0] key before, [1] key after
    auto core_of = [&](int g) { return g >= s.key_base[1] ? 1 : 0; };
    int64_t* src = reinterpret_cast<int64_t*>(misc + 4);              // per pair: offsets of its g in dY, its other slice in cores
    ex.phase([&](int lane) {                                           // the span's keys, and where its lookups' operands are
        if (lane < SPAN) {
            const int g = lane < n ? w.key[S0 + lane] : K;
            kk[lane] = g;
            if (g < K) {
                const int o = 1 - core_of(g), j = w.lookup[S0 + lane];
                src[2 * lane] = (int64_t)w.bag_of[j] * s.D;
                src[2 * lane + 1] = s.core_off[o] + (int64_t)w.rows[o * w.key_stride + j] * s.S[o];
            }
        }
        if (lane == 0) misc[0] = S0 > 0 ? w.key[S0 - 1] : -1;
        if (lane == 1) misc[1] = S0 + n < w.N ? w.key[S0 + n] : -1;
    });
    ex.phase([&](int lane) {                                           // every lookup's copies in flight at once
        for (int u = 0; u < n && kk[u] < K; u++) {
            const int o = 1 - core_of(kk[u]);
            float* dst = sm + u * w.slot;
            const float *gsrc = io.dY + src[2 * u], *osrc = io.cores + src[2 * u + 1];
            const int q1 = s.q[1], gp = (s.q[1 - o] + 3) / 4 * 4;   // g[a][b] to row y, column x of the lookup's sums
            if (o == 0 && q1 == gp)
                for (int e = 4 * lane; e < s.D; e += 128) async_copy(dst + e, gsrc + e, true);
            else
                for (int e = lane; e < s.D; e += 32) {
                    const int a = e / q1, b = e % q1;
                    async_copy(dst + (o == 1 ? b * gp + a : a * gp + b), gsrc + e, false);
                }
            if (o == 1)   // G_1's rows padded to po (lanes read a column); G_0's slice as it is
                for (int k = lane; k < R; k += 32)
                    for (int b = 0; b < s.q[1]; b++) async_copy(dst + dpad + k * w.po + b, osrc + k * s.q[1] + b, false);
            else if (s.S[0] % 4 == 0)
                for (int e = 4 * lane; e < s.S[0]; e += 128) async_copy(dst + dpad + e, osrc + e, true);
            else
                for (int e = lane; e < s.S[0]; e += 32) async_copy(dst + dpad + e, osrc + e, false);
        }
        async_commit();
        async_wait_group<0>();
    });
    int run0 = 0;                                                      // the current run's first position
    for (int pos = 0; pos < n && kk[pos] < K; pos++) {
        const int g = kk[pos], t = core_of(g);
        if (pos > 0 && kk[pos - 1] != g) run0 = pos;
        const float* gs = sm + pos * w.slot;
        const float* os = gs + dpad;
        // this lookup's products: t = 0 sums over b (x = a), t = 1 over a (x = b)
        const int qx = s.q[t], qy = s.q[1 - t], gp = (qx + 3) / 4 * 4, ok = t == 0 ? w.po : 1, oy = t == 0 ? 1 : R;
        const bool first = pos == run0;
        ex.phase([&](int lane) {
            float (&a)[KQ][Q] = acc[LANES == 1 ? 0 : lane];
            if (qx <= 4) tt_embedding_backward_two_lookup<4, KQ, Q>(a, first, gs, gp, os, ok, oy, qy, R, lane);
            else if (qx <= 8) tt_embedding_backward_two_lookup<8, KQ, Q>(a, first, gs, gp, os, ok, oy, qy, R, lane);
            else if (qx <= 16) tt_embedding_backward_two_lookup<(Q < 16 ? Q : 16), KQ, Q>(a, first, gs, gp, os, ok, oy, qy, R, lane);
            else tt_embedding_backward_two_lookup<Q, KQ, Q>(a, first, gs, gp, os, ok, oy, qy, R, lane);
        });
        if (pos + 1 < n && kk[pos + 1] == g) continue;                // the run goes on
        // the run [run0, pos] ends: complete, or a piece of a slice cut by the span's edge
        const int row = g - s.key_base[t], St = s.S[t];
        const bool cut = (run0 == 0 && misc[0] == g) || (pos == n - 1 && misc[1] == g);
        float* dst = cut ? w.parts + ((int64_t)span * 2 + (run0 == 0 ? 0 : 1)) * w.max_S : io.dG + s.core_off[t] + (int64_t)row * St;
        const int ex_ = t == 0 ? R : 1, ek = t == 0 ? 1 : s.q[1];        // element (x, k) of the slice
        ex.phase([&](int lane) {
            float (&a)[KQ][Q] = acc[LANES == 1 ? 0 : lane];
TT_EMBEDDING_BACKWARD_UNROLL
            for (int kq = 0; kq < KQ; kq++)
TT_EMBEDDING_BACKWARD_UNROLL
                for (int x = 0; x < Q; x++)
                    if (x < qx && lane + 32 * kq < R) dst[x * ex_ + (lane + 32 * kq) * ek] = a[kq][x];
        });
    }
}

// version 7 at T = 2: the instantiation (Q sums a rank index, KQ rank indices a lane) that runs s, 0 where none does
inline int tt_embedding_backward_two_q(const TtEmbeddingBackwardShape& s, int* KQ) {
    const int q = std::max(s.q[0], s.q[1]), R = s.R[1];
    *KQ = R <= 32 ? 1 : 2;
    return s.T != 2 || R > 64 ? 0 : q <= 8 ? 8 : q <= 16 ? 16 : q <= 32 && R <= 32 ? 32 : 0;
}
inline size_t tt_embedding_backward_two_smem_bytes(const TtEmbeddingBackwardShape& s) {
    int KQ;
    const int Q = tt_embedding_backward_two_q(s, &KQ);
    return Q ? (size_t)TT_EMBEDDING_BACKWARD_TWO_WARPS * tt_embedding_backward_two_warp_floats(s) * sizeof(float) : 0;
}
// why the two-core kernels cannot run s ("" when they can)
inline std::string tt_embedding_backward_two_reason(const TtEmbeddingBackwardShape& s, size_t smem_limit) {
    int KQ;
    if (s.T != 2) return "they are for two cores";
    if (!tt_embedding_backward_two_q(s, &KQ)) return "they are compiled for q_t <= 16 at ranks <= 64 and q_t <= 32 at ranks <= 32";
    if (tt_embedding_backward_two_smem_bytes(s) > smem_limit) return "their staged lookups exceed shared memory";
    return "";
}

// Slice key g's pieces (a slice cut by span edges), added in span order into its gradient: a block per slice, a thread
// per element (the hot slices of a Zipf input have hundreds of pieces: eight loads in flight, added in order)
__host__ __device__ inline void tt_embedding_backward_two_combine(const TtEmbeddingBackwardShape& s, const TtEmbeddingBackwardTwo& w, float* dG,
                                                                  int g, int e) {
    const int SPAN = TT_EMBEDDING_BACKWARD_TWO_SPAN, f = w.first[g];
    if (f < 0) return;                                                 // untouched (the bounds start at -1)
    const int c0 = f / SPAN, c1 = (w.last[g] - 1) / SPAN, t = g >= s.key_base[1] ? 1 : 0;
    if (c0 == c1 || e >= s.S[t]) return;                               // one span wrote the slice itself
    auto piece = [&](int c) {   // span c's piece: its last run in the first span, else its first
        return w.parts[((int64_t)c * 2 + (c == c0 && f != c0 * SPAN ? 1 : 0)) * w.max_S + e];
    };
    float sum = 0.0f;
    int c = c0;
    for (; c + 8 <= c1 + 1; c += 8) {
        float v[8];
TT_EMBEDDING_BACKWARD_UNROLL
        for (int u = 0; u < 8; u++) v[u] = piece(c + u);
TT_EMBEDDING_BACKWARD_UNROLL
        for (int u = 0; u < 8; u++) sum += v[u];
    }
    for (; c <= c1; c++) sum += piece(c);
    dG[s.core_off[t] + (int64_t)(g - s.key_base[t]) * s.S[t] + e] = sum;
}

__global__ void tt_embedding_backward_two_prep_kernel(const __grid_constant__ TtEmbeddingBackwardShape s, int key_stride, const int64_t* offsets,
                                                      const int64_t* indices, int* key, int* lookup, int* rows, int* bag_of) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j < s.nnz) tt_embedding_backward_two_prep(s, key_stride, j, offsets, indices, key, lookup, rows, bag_of);
}
__global__ void tt_embedding_backward_two_bounds_kernel(const int* key, int N, int K, int* first, int* last) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) tt_embedding_backward_two_bounds(key, N, K, i, first, last);
}
__global__ void tt_embedding_backward_two_combine_kernel(const __grid_constant__ TtEmbeddingBackwardShape s, const __grid_constant__ TtEmbeddingBackwardTwo w,
                                                         float* dG) {
    for (int e = threadIdx.x; e < max(s.S[0], s.S[1]); e += blockDim.x) tt_embedding_backward_two_combine(s, w, dG, blockIdx.x, e);
}
// a warp's phases: its own lanes, synchronized by the warp only
struct TtEmbeddingBackwardWarpExec {
    int lane, nt;
    template <class F>
    __device__ void phase(F&& f) {
        f(lane);
        __syncwarp();
    }
};
template <int Q, int KQ>
__global__ void __launch_bounds__(32 * TT_EMBEDDING_BACKWARD_TWO_WARPS)
tt_embedding_backward_two_span_kernel(const __grid_constant__ TtEmbeddingBackwardShape s, const __grid_constant__ TtEmbeddingBackwardTwo w,
                                      const __grid_constant__ TtEmbeddingBackwardIo io) {
    const int warp = threadIdx.x / 32, span = blockIdx.x * TT_EMBEDDING_BACKWARD_TWO_WARPS + warp;
    if (span * TT_EMBEDDING_BACKWARD_TWO_SPAN >= w.N) return;
    TtEmbeddingBackwardWarpExec ex{(int)threadIdx.x % 32, 32};
    tt_embedding_backward_two_span<Q, KQ, 1>(ex, s, w, io, span, (float*)tt_embedding_backward_smem + warp * w.stage_floats);
}

// ---- version 7 at T >= 4: adjacent cores merged into two or three
//
// A TT of T cores is also a TT of fewer, larger cores: merge cores t-1 and t by multiplying every pair of slices,
// A[j] (m x R_t) . G_t[i] (R_t x q_t R_{t+1}) = slice j p_t + i of a core with p_{t-1} p_t slices and q_{t-1} q_t
// columns (the row's digits and d's digits stay in mixed radix). Where the p_t are small (the grid's T 6, T 5)
// the merged cores are small too, and the default on 2 or 3 cores (T 6: tensor cores at q 4,4,4) runs the lookups.
// Its dense gradient dC of a merged core goes back through each merge as two GEMMs: with dC's slices permuted to
// X[j][r][i][c] (one matrix of rows (j, r), columns (i, c)), dA = X . G_t^T-stacked and dG_t = A^T . X.
// Nothing is atomic, so the step stays deterministic; untouched slices get an exact 0 and stay bit-identical.
static const int64_t TT_EMBEDDING_BACKWARD_MERGE_MAX_FLOATS = 1 << 24;   // per merged core and per product
static const double TT_EMBEDDING_BACKWARD_MERGE_MAX_FMA = 1 << 28;       // the merges' multiply-adds, forward and back

// folding core t into the product A of cores a0..t-1: A has tables pA slices of m x k, core t tables pt of k x n,
// the result tables pA pt slices of m x n (slice (tbl, j, i) at (tbl pA + j) pt + i)
struct TtEmbeddingBackwardMergeStep { int64_t tables, pA, pt, m, k, n; };
inline TtEmbeddingBackwardMergeStep tt_embedding_backward_merge_step(const TtEmbeddingBackwardShape& s, int a0, int t) {
    TtEmbeddingBackwardMergeStep st = {s.tables, 1, s.p[t], s.R[a0], s.R[t], s.n[t]};
    for (int u = a0; u < t; u++) { st.pA *= s.p[u]; st.m *= s.q[u]; }
    return st;
}

// a cut: G = 2 or 3 groups of cores (group g: cores first[g] .. first[g+1] - 1; first[G] = T, first[3] = T if G = 2),
// and the G-core shape they make
inline int tt_embedding_backward_merge_groups(const TtEmbeddingBackwardShape& s, const int* first) {
    int G = 0;
    while (G < 3 && first[G] < s.T) G++;
    return G;
}
inline TtEmbeddingBackwardShape tt_embedding_backward_merged_shape(const TtEmbeddingBackwardShape& s, const int* first) {
    const int G = tt_embedding_backward_merge_groups(s, first);
    std::vector<int> p(G, 1), q(G, 1), r;
    for (int g = 1; g < G; g++) r.push_back(s.R[first[g]]);
    for (int g = 0; g < G; g++)
        for (int t = first[g]; t < first[g + 1]; t++) { p[g] *= s.p[t]; q[g] *= s.q[t]; }
    TtEmbeddingBackwardShape v = tt_embedding_backward_make_shape(p, q, r, s.E, s.tables, s.B);
    v.nnz = s.nnz;
    v.nnz_dev = s.nnz_dev;
    return v;
}

// The cut, at T >= 4, among those whose merged cores and products stay under MAX_FLOATS, whose merged p fit the
// kernels' keys and whose merges cost under MAX_FMA: the cheapest (lookup FLOPs + merge FMAs) of the three-group cuts
// the tensor-core kernels take; else of the two-group cuts the two-core kernels take; else, at T >= 5, of any cut;
// else none (large p). The grid's T 6 merged into q 4,4,4 on tensor cores runs 3x faster than unmerged, 1.4x faster
// than in two groups; T 4 in two groups 1.3x (the times: the notes).
bool tt_embedding_backward_merge_plan(const TtEmbeddingBackwardShape& s, int* first) {
    if (s.T < 4) return false;
    double best = 0.0;
    int rank = 0, kq;   // of the best cut: 2 where the tensor-core kernels take it, 1 where the two-core kernels do
    for (int c1 = 1; c1 < s.T - 1; c1++)
        for (int c2 = c1 + 1; c2 <= s.T; c2++) {   // (c2 = T: two groups)
            const int f[4] = {0, c1, c2, s.T};
            const int G = tt_embedding_backward_merge_groups(s, f);
#ifdef TT_EMBEDDING_BACKWARD_MERGE_GROUPS   // (-D...=2 or 3: only such cuts, merged wherever they fit: the notes' builds)
            if (G != TT_EMBEDDING_BACKWARD_MERGE_GROUPS) continue;
#endif
            double fma = 0.0, sum_p = 0.0;
            bool fits = true;
            for (int g = 0; g < G; g++) {
                double pg = 1.0;
                for (int t = f[g]; t < f[g + 1]; t++) pg *= s.p[t];
                sum_p += pg;
                for (int t = f[g] + 1; t < f[g + 1]; t++) {
                    const TtEmbeddingBackwardMergeStep st = tt_embedding_backward_merge_step(s, f[g], t);
                    const double out = (double)st.tables * st.pA * st.pt * st.m * st.n;
                    fits = fits && out <= (double)TT_EMBEDDING_BACKWARD_MERGE_MAX_FLOATS;
                    fma += 3.0 * out * st.k;
                }
            }
            if (!fits || fma > TT_EMBEDDING_BACKWARD_MERGE_MAX_FMA || (double)s.tables * sum_p >= 2147483647.0) continue;
            const TtEmbeddingBackwardShape v = tt_embedding_backward_merged_shape(s, f);
            const int v_rank = tt_embedding_backward_tc_reason(v).empty() ? 2 : tt_embedding_backward_two_q(v, &kq) ? 1 : 0;
            const double cost = tt_embedding_backward_flops_per_lookup(v) * s.nnz + fma;
            if (v_rank < rank) continue;
            if (best == 0.0 || cost < best || v_rank > rank) {
                best = cost;
                rank = v_rank;
                std::copy(f, f + 4, first);
            }
        }
#ifdef TT_EMBEDDING_BACKWARD_MERGE_GROUPS
    return best > 0.0;
#endif
    return best > 0.0 && (s.T >= 5 || rank > 0);   // (at T = 4 version 9 beat the cuts that reach neither)
}

// Item e of a merge's output C (slices (tbl pA + j) pt + i, each m x n row-major): rows 4 rb .. 4 rb + 3 of column c,
// A[tbl pA + j] rows . G_t column c (each G_t element loaded once for four rows). 32-bit indices: C has at most
// MAX_FLOATS elements; a thread per item, consecutive threads along c (the loads of G_t and the stores coalesce).
__host__ __device__ inline int tt_embedding_backward_merge_items(const TtEmbeddingBackwardMergeStep& st) {
    return (int)(st.tables * st.pA * st.pt * ((st.m + 3) / 4) * st.n);
}
// (the item (j, i, rb, c) with Aj: slice j of A, its rows lda apart)
__host__ __device__ inline void tt_embedding_backward_merge_item(float* C, const float* Aj, int lda, const float* G, const TtEmbeddingBackwardMergeStep& st,
                                                                 int j, int i, int rb, int c) {
    const int n = (int)st.n, m = (int)st.m, k = (int)st.k, pt = (int)st.pt, r0 = 4 * rb, rows = min(4, m - r0);
    const float* a = Aj + r0 * lda;
    const float* g = G + ((int64_t)(j / (int)st.pA) * pt + i) * k * n + c;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int kk = 0; kk < k; kk++) {
        const float gv = g[(int64_t)kk * n];
TT_EMBEDDING_BACKWARD_UNROLL
        for (int r = 0; r < 4; r++)
            if (r < rows) acc[r] = fmaf(a[r * lda + kk], gv, acc[r]);
    }
    float* out = C + (((int64_t)j * pt + i) * m + r0) * n + c;
    for (int r = 0; r < rows; r++) out[(int64_t)r * n] = acc[r];
}
__host__ __device__ inline void tt_embedding_backward_merge_rows(float* C, const float* A, const float* G, const TtEmbeddingBackwardMergeStep& st, int e) {
    const int n = (int)st.n, m = (int)st.m, pt = (int)st.pt, mb = (m + 3) / 4;
    const int c = e % n, rb = e / n % mb, i = e / (n * mb) % pt, j = e / (n * mb * pt);
    tt_embedding_backward_merge_item(C, A + (int64_t)j * m * st.k, (int)st.k, G, st, j, i, rb, c);
}
// Where A's slice fits 48 KB and the grid has 264 blocks or more: a block per (slice j, IC of the i), A's slice staged in
// shared memory with rows k | 1 apart (a warp's threads span several row blocks where n < 32: different banks). Read
// from global memory, a warp's A loads at n = 4 touched 32 rows each (the grid's T 4's second merge took 35 us); but
// the grid's T 6 (p 10: 20 blocks) lost 28% staged, so it keeps the kernel above.
static const int TT_EMBEDDING_BACKWARD_MERGE_IC = 8;
inline bool tt_embedding_backward_merge_staged(const TtEmbeddingBackwardMergeStep& st) {
    return st.m * (st.k | 1) <= 12288 && st.tables * st.pA * ceil_div<int64_t>(st.pt, TT_EMBEDDING_BACKWARD_MERGE_IC) >= 264;
}
template <class Exec>
__host__ __device__ inline void tt_embedding_backward_merge_staged_block(Exec& ex, float* C, const float* A, const float* G,
                                                                         const TtEmbeddingBackwardMergeStep& st, int ic, int j, int by, float* As) {
    const int m = (int)st.m, k = (int)st.k, lda = k | 1, n = (int)st.n, mb = (m + 3) / 4, i0 = by * ic, ni = min(ic, (int)st.pt - i0);
    ex.phase([&](int tid) {
        for (int x = tid; x < m * k; x += ex.nt) As[x / k * lda + x % k] = A[(int64_t)j * m * k + x];
    });
    ex.phase([&](int tid) {
        for (int e = tid; e < ni * mb * n; e += ex.nt) tt_embedding_backward_merge_item(C, As, lda, G, st, j, i0 + e / (mb * n), e / n % mb, e % n);
    });
}
__global__ void tt_embedding_backward_merge_staged_kernel(float* __restrict__ C, const float* __restrict__ A, const float* __restrict__ G,
                                                          const TtEmbeddingBackwardMergeStep st, int ic) {
    TtEmbeddingBackwardDeviceExec ex{(int)threadIdx.x, (int)blockDim.x};
    tt_embedding_backward_merge_staged_block(ex, C, A, G, st, ic, blockIdx.x, blockIdx.y, reinterpret_cast<float*>(tt_embedding_backward_smem));
}
__global__ void tt_embedding_backward_merge_kernel(float* __restrict__ C, const float* __restrict__ A, const float* __restrict__ G,
                                                   const TtEmbeddingBackwardMergeStep st) {
    const int total = tt_embedding_backward_merge_items(st);
    for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < total; e += gridDim.x * blockDim.x) tt_embedding_backward_merge_rows(C, A, G, st, e);
}

// out[x0][x2][x1][x3] = in[x0][x1][x2][x3] (element e of out): the merges' permutes, in 32-bit arithmetic where the
// tensor allows (a third of the instructions of 64-bit divisions)
template <class I>
__host__ __device__ inline I tt_embedding_backward_swap_src(I d1, I d2, I d3, I e) {
    const I x3 = e % d3, x1 = e / d3 % d1, x2 = e / (d3 * d1) % d2, x0 = e / (d3 * d1 * d2);
    return ((x0 * d1 + x1) * d2 + x2) * d3 + x3;
}
__global__ void tt_embedding_backward_swap_kernel(float* __restrict__ out, const float* __restrict__ in, int64_t total, int64_t d1, int64_t d2, int64_t d3) {
    if (total < INT32_MAX) {
        for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < (int)total; e += gridDim.x * blockDim.x)
            out[e] = in[tt_embedding_backward_swap_src<int>((int)d1, (int)d2, (int)d3, e)];
        return;
    }
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x)
        out[e] = in[tt_embedding_backward_swap_src<int64_t>(d1, d2, d3, e)];
}

// A merge's two backward GEMMs, row-major C = op(A) . B per table (strided batches); A, B, C as named in the launch:
//   dA  (pA m x k)    = X (pA m x pt n) . Gt (pt n x k),  Gt[i][c][kk] = G_t[i][kk][c]
//   dGx (k x pt n)    = A^T (k x pA m) . X,               then dG_t[i][kk][c] = dGx[kk][i][c]
struct TtEmbeddingBackwardRowGemm { bool ta; int M, N, K, lda, ldb, ldc; int64_t sa, sb, sc; };
inline TtEmbeddingBackwardRowGemm tt_embedding_backward_merge_gemm(const TtEmbeddingBackwardMergeStep& st, bool dG) {
    const int rows = (int)(st.pA * st.m), cols = (int)(st.pt * st.n), k = (int)st.k;
    const int64_t X = (int64_t)rows * cols;
    if (!dG) return {false, rows, k, cols, cols, k, k, X, (int64_t)cols * k, (int64_t)rows * k};
    return {true, k, cols, rows, k, cols, cols, (int64_t)rows * k, X, (int64_t)k * cols};
}

// ---- version 7 at ranks below 32: the same TT with its ranks padded by zeros
//
// A TT of ranks R_1, R_2 <= 32 is also a TT of ranks 32, 32: each slice sits in the corner of a rank-32 slice whose
// other elements are 0. A product through a padded rank index is 0, so the rows are the same, and so is the gradient
// of every real element (the padded elements' gradient is dropped). At T = 3 with q 4k,4,4 the padded shape is the
// tensor-core kernels' own. One kernel writes the padded cores (zeros included), the default runs them in dense mode,
// and one kernel reads each real element's gradient and applies the optimizer (untouched slices: an exact 0).
// The padded products are up to 64x the real ones (ranks 4), and still the short step is latency, not FLOPs: at q 4,4,4
// padding won every run up to 194 lookups an SM (4,4 to 32,16 at 78: 5-34% less time; ranks 8, 16, 24 at 97-194: 14-42%)
// and lost 9% at 620; with q_0 cut (q 8,4,4) it lost already at 97 and 136 lookups an SM (5%, 12%). So it pads uncut
// shapes (q_0 = 4) of at most PAD_PER_SM lookups per SM (the times: the notes).
static const int TT_EMBEDDING_BACKWARD_PAD_PER_SM = 200;
inline TtEmbeddingBackwardShape tt_embedding_backward_padded_shape(const TtEmbeddingBackwardShape& s) {
    TtEmbeddingBackwardShape v = tt_embedding_backward_make_shape({s.p[0], s.p[1], s.p[2]}, {s.q[0], s.q[1], s.q[2]},
                                                                  {TT_EMBEDDING_BACKWARD_TC_R, TT_EMBEDDING_BACKWARD_TC_R}, s.E, s.tables, s.B);
    v.nnz = s.nnz;
    v.nnz_dev = s.nnz_dev;
    return v;
}
// whether version 7 pads this shape's ranks on a device of `sms` SMs (decided once, at allocation)
inline bool tt_embedding_backward_pad_plan(const TtEmbeddingBackwardShape& s, int sms) {
    const int R = TT_EMBEDDING_BACKWARD_TC_R;
    return s.T == 3 && s.R[1] <= R && s.R[2] <= R && (s.R[1] < R || s.R[2] < R) &&
           tt_embedding_backward_tc_reason(tt_embedding_backward_padded_shape(s)).empty() &&
           s.q[0] == TT_EMBEDDING_BACKWARD_TC_Q && (double)s.nnz <= (double)TT_EMBEDDING_BACKWARD_PAD_PER_SM * sms;
}
// element e of a packed cores buffer of shape `from` (the padding between cores included): where the same (core,
// table, slice, k, a, k') is in the buffer of shape `to`, or -1 where it is not there (from's padding, or a rank
// index past to's ranks)
__host__ __device__ inline int64_t tt_embedding_backward_pad_map(const TtEmbeddingBackwardShape& from, const TtEmbeddingBackwardShape& to, int64_t e) {
    int t = 0;
    while (t + 1 < from.T && e >= from.core_off[t + 1]) t++;
    const int64_t x = e - from.core_off[t], slice = x / from.S[t];
    if (slice >= (int64_t)from.tables * from.p[t]) return -1;
    const int r = (int)(x - slice * from.S[t]), k2 = r % from.R[t + 1], a = r / from.R[t + 1] % from.q[t], k = r / from.n[t];
    if (k >= to.R[t] || k2 >= to.R[t + 1]) return -1;
    return to.core_off[t] + slice * to.S[t] + ((int64_t)k * to.q[t] + a) * to.R[t + 1] + k2;
}
// every element of the padded cores (zeros included: no element keeps an earlier value)
__global__ void tt_embedding_backward_pad_kernel(const __grid_constant__ TtEmbeddingBackwardShape s, const __grid_constant__ TtEmbeddingBackwardShape v,
                                                 const float* __restrict__ cores, float* __restrict__ padded) {
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < v.core_off[v.T]; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t j = tt_embedding_backward_pad_map(v, s, e);
        padded[e] = j < 0 ? 0.0f : cores[j];
    }
}
// every element of the real cores: its gradient from the padded one (0 in the padding between cores), the optimizer
__global__ void tt_embedding_backward_unpad_kernel(const __grid_constant__ TtEmbeddingBackwardShape s, const __grid_constant__ TtEmbeddingBackwardShape v,
                                                   const float* __restrict__ dG_padded, int opt, float lr, float eps, float* cores, float* state, float* dG) {
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < s.core_off[s.T]; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t j = tt_embedding_backward_pad_map(s, v, e);
        tt_embedding_backward_apply(opt, lr, eps, cores, state, dG, e, j < 0 ? 0.0f : dG_padded[j]);
    }
}

// ----------------------------------------------------------------------------------------------
// launchers and dispatcher

// version 7 at q_0 = 4k (k > 1): the cut lookups' bags and rows, and the workspace of the shape they make
struct TtEmbeddingBackwardTcSplit {
    TtEmbeddingBackwardShape s;        // the cut shape (made once, at allocation: no host work in the step)
    int64_t *offsets, *indices;
    TtEmbeddingBackwardWorkspace ws;   // keys, bag_of, zeroed (counts | done | the slice counters), partial, side
    float* W;
    int* bucket;
};

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
    // version 3 (its bag_of is ws.bag_of)
    TtEmbeddingBackwardLayout lay;
    // versions 6-7: per-lookup gradients of the non-pivot cores (core t's block at W + W_off[t]), the lists and
    // counters, and version 7's slice buckets
    float* W;
    int64_t W_off[TT_EMBEDDING_BACKWARD_MAX_T];
    TtEmbeddingBackwardWorkspace ws;
    int* bucket;
    // version 9: per-lookup P_t and dM_t (and 1.0f at X[0]), the parts of the slice gradients, the work lists (the
    // last: the slices of several parts)
    float *slice_X, *slice_partial;
    int *slice_items, *slice_first, *slice_totals, *slice_multi;
    // --stash: the forward's P_t of every lookup (tt_embedding.h's layout), which version 9 reads instead of running F
    float* stash;
    int64_t stash_floats;
    TtEmbeddingBackwardTcSplit split;    // version 7 where q_0 = 4k, k > 1
    // version 7 at T = 2: the sort's pairs (keys in, out; lookups in, out: [4][2 nnz]), each slice's first and last
    // pair ([2][slices]), the pieces of cut runs, CUB's scratch
    int *two_pairs, *two_bounds;
    float* two_parts;
    void* two_temp;
    size_t two_temp_bytes;
    struct TtEmbeddingBackwardMerge* merge;   // version 7 at T >= 4 where it merges cores (else nullptr)
    size_t smem_limit;                   // the device's opt-in shared memory per block, less the static copies
};

// a step's inputs on the device (the buffers list below makes them)
struct TtEmbeddingBackwardInputs {
    int64_t *offsets, *indices;
    float *dY, *cores0, *state0;
};

// version 7's merged cores (or padded ranks): the 2- or 3-core problem (dense: inner.cores are the merged or padded
// cores, inner.dG their gradient, its own workspace; its bags are the outer's, set at launch), each group's partial
// products (prod[t]: cores first..t of t's group, t neither first nor last) and their gradients, and the backward's
// permute buffers
struct TtEmbeddingBackwardMerge {
    bool padded;                          // the ranks padded to 32 (no merge: first = 0,1,2,3), else cores merged
    int first[4];
    TtEmbeddingBackwardArgs inner;
    TtEmbeddingBackwardInputs inner_in;   // (copies the inner problem never reads: the buffers list makes them)
    TtEmbeddingBackwardGroupPlan inner_plan;
    float *prod[TT_EMBEDDING_BACKWARD_MAX_T], *dprod[TT_EMBEDDING_BACKWARD_MAX_T];
    float *X[3], *Gt[3], *dGx[3];         // each group's permute buffers (the groups run on two streams)
    cudaStream_t side;                    // groups 1 and 2 (group 0 on the default stream)
    cublasHandle_t side_blas;             // their GEMMs: a handle of its own (a handle's workspace serves one stream at a time)
    cudaEvent_t fork, join;
};

// why version 6's kernels cannot run this shape at `block` threads (0: at 128, 256 and 512), "" when they can
std::string tt_embedding_backward_group_reason(const TtEmbeddingBackwardShape& s, const int64_t* W_off, size_t smem_limit, int block) {
    char buf[256];
    if (block > TT_EMBEDDING_BACKWARD_MAX_FUSED_BLOCK) {
        snprintf(buf, sizeof buf, "it is compiled for at most %d threads per block (--block %d)", TT_EMBEDDING_BACKWARD_MAX_FUSED_BLOCK, block);
        return buf;
    }
    for (int nt : block ? std::vector<int>{block} : std::vector<int>{128, 256, 512}) {
        const TtEmbeddingBackwardGroupPlan P = tt_embedding_backward_group_make_plan(s, W_off, nt);
        if (tt_embedding_backward_group_smem_bytes(P) > smem_limit) {
            snprintf(buf, sizeof buf, "its block of %d threads needs %zu bytes of shared memory (the pivot slice and NB = 1 lookup), "
                     "more than the %zu a block can have; version 9 runs this shape", nt, tt_embedding_backward_group_smem_bytes(P), smem_limit);
            return buf;
        }
    }
    return "";
}

// The default version's dispatcher: which kernels run this shape at `block` threads. At T >= 4 where the merged
// cores stay small (merge_plan), the merged 3-core problem (its own route, below). The tensor-core kernels
// where they are compiled (T = 3, q = 4,4,4, ranks 32,32, 256 threads), and at lower ranks where the allocation
// padded them (pad_plan: small batches); else version 6's grouped kernels where
// their block with the pivot slice G_h fits in 110 KB, every rank is below 64, and, at ranks 32 and up, T = 3 and
// D < 256; else version 9's per-slice GEMMs on tensor cores, which run any shape whose per-lookup buffers fit 32 GB;
// else version 2's pipeline (the times behind each choice: the notes). At another block size than 256 version 6 runs
// wherever its block fits (version 9 runs at its own 256 threads).
enum { TT_EMBEDDING_BACKWARD_ROUTE_CUBLAS = 2, TT_EMBEDDING_BACKWARD_ROUTE_GROUPED = 6, TT_EMBEDDING_BACKWARD_ROUTE_TENSOR = 7,
       TT_EMBEDDING_BACKWARD_ROUTE_SLICE_MMA = 9, TT_EMBEDDING_BACKWARD_ROUTE_MERGED = 10 /* not a version: merged cores */,
       TT_EMBEDDING_BACKWARD_ROUTE_TWO = 11 /* not a version: two cores */, TT_EMBEDDING_BACKWARD_ROUTE_PADDED = 12 /* ranks padded */ };


// padded: whether the allocation chose to pad this problem's ranks (tt_embedding_backward_pad_plan)
int tt_embedding_backward_route(const TtEmbeddingBackwardShape& s, const int64_t* W_off, size_t smem_limit, int block, bool padded = false) {
    int first[4];
    if (tt_embedding_backward_merge_plan(s, first)) return TT_EMBEDDING_BACKWARD_ROUTE_MERGED;
    if (block == TT_EMBEDDING_BACKWARD_TC_BLOCK && tt_embedding_backward_two_reason(s, smem_limit).empty()) return TT_EMBEDDING_BACKWARD_ROUTE_TWO;
    if (block == TT_EMBEDDING_BACKWARD_TC_BLOCK && tt_embedding_backward_tc_smem_bytes() <= smem_limit) {
        if (tt_embedding_backward_tc_reason(s).empty()) return TT_EMBEDDING_BACKWARD_ROUTE_TENSOR;
        if (padded) return TT_EMBEDDING_BACKWARD_ROUTE_PADDED;
    }
    int max_rank = 1;
    for (int t = 1; t < s.T; t++) max_rank = std::max(max_rank, s.R[t]);
    const bool v6_loses = max_rank >= 64 || (max_rank >= 32 && (s.T >= 4 || s.D >= 256));
    if (tt_embedding_backward_group_reason(s, W_off, smem_limit, block).empty() &&
        (block != TT_EMBEDDING_BACKWARD_SLICE_BLOCK || (!v6_loses && tt_embedding_backward_group_make_plan(s, W_off, block).roomy)))
        return TT_EMBEDDING_BACKWARD_ROUTE_GROUPED;
    TtEmbeddingBackwardSlicePlan P8;
    if (tt_embedding_backward_slice_make_plan(s, P8).empty()) return TT_EMBEDDING_BACKWARD_ROUTE_SLICE_MMA;
    return TT_EMBEDDING_BACKWARD_ROUTE_CUBLAS;
}
inline const char* tt_embedding_backward_route_name(int route) {
    return route == TT_EMBEDDING_BACKWARD_ROUTE_TENSOR ? "tensor cores (3xTF32), FBTT's default family"
           : route == TT_EMBEDDING_BACKWARD_ROUTE_GROUPED    ? "version 6's grouped kernels (the pivot slice in shared memory)"
           : route == TT_EMBEDDING_BACKWARD_ROUTE_SLICE_MMA  ? "version 9's per-slice GEMMs on tensor cores (the general path)"
           : route == TT_EMBEDDING_BACKWARD_ROUTE_MERGED     ? "adjacent cores merged into two or three, then the default there"
           : route == TT_EMBEDDING_BACKWARD_ROUTE_TWO        ? "two cores: a product per lookup and core, the lookups sorted by slice (CUB)"
           : route == TT_EMBEDDING_BACKWARD_ROUTE_PADDED     ? "ranks padded with zeros to 32,32, then the tensor cores (3xTF32)"
                                                             : "version 2's cuBLAS pipeline (version 9's buffers would be too large)";
}

// versions 1-3 end with this: the optimizer over the whole summed gradient (nothing for dense)
void tt_embedding_backward_optimizer_pass(const TtEmbeddingBackwardArgs& a) {
    if (a.opt == TT_EMBEDDING_BACKWARD_DENSE) return;
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
        tt_embedding_backward1_kernel<<<grid, block_size>>>(s, Ssum, a.offsets, a.indices, a.cores, a.dY, a.dG);
    }
    tt_embedding_backward_optimizer_pass(a);
}

void tt_embedding_backward2(const TtEmbeddingBackwardArgs& a, int block_size) {
    const TtEmbeddingBackwardShape& s = a.s;
    const int T = s.T, chunk = TT_EMBEDDING_BACKWARD_FBTT_CHUNK;
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
        tt_embedding_backward2_scatter_kernel<<<grid, block_size>>>(s, t, N, a.fb_rows + (int64_t)t * chunk, a.fb.trG[t], a.dG);
    };
    for (int64_t start = 0; start < s.nnz; start += chunk) {
        const int N = (int)std::min<int64_t>(chunk, s.nnz - start);
        tt_embedding_backward2_setup_kernel<<<ceil_div(N, block_size), block_size>>>(
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
        tt_embedding_backward_bags_kernel<<<(unsigned)std::min<int64_t>(ceil_div<int64_t>(s.num_bags, 8), 1 << 20), 256>>>(s, a.offsets, a.ws.bag_of);
        const unsigned grid = (unsigned)std::min<int64_t>(ceil_div<int64_t>(s.nnz, a.lay.nb), 1 << 20);
        tt_embedding_backward3_kernel<<<grid, block_size, tt_embedding_backward_smem_bytes(a.lay)>>>(
            s, a.lay, a.indices, a.ws.bag_of, a.cores, a.dY, a.dG);
    }
    tt_embedding_backward_optimizer_pass(a);
}

// version 6: memset of the counters (and of dG in dense mode), then four kernels
void tt_embedding_backward6(const TtEmbeddingBackwardArgs& a, int block_size) {
    const TtEmbeddingBackwardShape& s = a.s;
    if (a.opt == TT_EMBEDDING_BACKWARD_DENSE) cudaCheck(cudaMemsetAsync(a.dG, 0, s.core_off[s.T] * sizeof(float)));
    if (s.nnz == 0) return;
    const TtEmbeddingBackwardGroupPlan P = tt_embedding_backward_group_make_plan(s, a.W_off, block_size);
    cudaCheck(cudaMemsetAsync(a.ws.zeroed, 0, a.ws.zeroed_bytes));
    const TtEmbeddingBackwardIo io = {a.dY, a.cores, a.state, a.dG, a.opt, a.lr, a.eps};
    tt_embedding_backward_group_prep_kernel<<<ceil_div(s.nnz, TT_EMBEDDING_BACKWARD_GROUP_PREP_BLOCK), TT_EMBEDDING_BACKWARD_GROUP_PREP_BLOCK>>>(s, P, a.offsets,
                                                                                                                                  a.indices, a.ws);
    tt_embedding_backward_group_lists_kernel<<<std::min(s.key_base[s.T], TT_EMBEDDING_BACKWARD_GROUP_LIST_GRID), TT_EMBEDDING_BACKWARD_GROUP_LIST_BLOCK,
                                          tt_embedding_backward_group_list_stage(P) * sizeof(int)>>>(s, P, a.ws);
    const size_t smem = tt_embedding_backward_group_smem_bytes(P);
    if (P.acc == 1) tt_embedding_backward_group_chunk_kernel<1><<<P.max_chunks, block_size, smem>>>(s, P, a.ws, io);
    else if (P.acc == 2) tt_embedding_backward_group_chunk_kernel<2><<<P.max_chunks, block_size, smem>>>(s, P, a.ws, io);
    else if (P.acc == 4) tt_embedding_backward_group_chunk_kernel<4><<<P.max_chunks, block_size, smem>>>(s, P, a.ws, io);
    else tt_embedding_backward_group_chunk_kernel<0><<<P.max_chunks, block_size, smem>>>(s, P, a.ws, io);
    tt_embedding_backward_group_final_kernel<<<std::min(P.max_items, TT_EMBEDDING_BACKWARD_GROUP_FINAL_GRID), TT_EMBEDDING_BACKWARD_GROUP_FINAL_BLOCK>>>(s, P, a.ws, io);
}

// version 7 on its compiled shapes: (dense: a memset of dG) four kernels, the last three launched with PDL
void tt_embedding_backward_tc_tensor(const TtEmbeddingBackwardArgs& a) {
    const TtEmbeddingBackwardShape& s = a.s;
    const int k = tt_embedding_backward_tc_split(s);
    if (k > 1) {   // q_0 = 4k: the lookups cut in k, then the step on the shape they make (same cores, dY, state, dG)
        TtEmbeddingBackwardArgs v = a;
        v.s = a.split.s;
        v.offsets = a.split.offsets;
        v.indices = a.split.indices;
        v.s.nnz_dev = s.nnz_dev ? a.split.offsets + v.s.num_bags : nullptr;
        v.ws = a.split.ws;
        v.W = a.split.W;
        v.bucket = a.split.bucket;
        v.W_off[0] = 0;
        v.W_off[2] = (int64_t)v.s.nnz * v.s.S[0];
        tt_embedding_backward_tc_split_kernel<<<(unsigned)ceil_div<int64_t>(((int64_t)s.num_bags + 1) * 32, 256), 256>>>(
            s, k, a.offsets, a.indices, a.split.offsets, a.split.indices);
        tt_embedding_backward_tc_tensor(v);
        return;
    }
    if (a.opt == TT_EMBEDDING_BACKWARD_DENSE) cudaCheck(cudaMemsetAsync(a.dG, 0, s.core_off[s.T] * sizeof(float)));
    if (s.nnz == 0) return;
    const TtEmbeddingBackwardWorkspace& w = a.ws;
    const int key_stride = (int)tt_embedding_backward_round4(s.nnz);
    const TtEmbeddingBackwardIo io = {a.dY, a.cores, a.state, a.dG, a.opt, a.lr, a.eps};
    float* W0 = a.W + a.W_off[0];
    float* W2 = a.W + a.W_off[2];
    const int nzero = (int)(w.zeroed_bytes / sizeof(int));
    tt_embedding_backward_tc_zero_kernel<<<(unsigned)std::min(ceil_div(nzero, 256), 1024), 256>>>(w.zeroed, nzero);
    launch_pdl(
        tt_embedding_backward_tc_prep_kernel, (unsigned)ceil_div<int64_t>((int64_t)s.num_bags * 32, TT_EMBEDDING_BACKWARD_GROUP_PREP_BLOCK),
        (unsigned)TT_EMBEDDING_BACKWARD_GROUP_PREP_BLOCK, (size_t)0, s, key_stride, a.offsets, a.indices, w.keys, w.bag_of, w.counts, a.bucket);
    const int part = tt_embedding_backward_tc_part_size(s, tt_embedding_backward_num_sms());
    const unsigned items = (unsigned)(ceil_div<int64_t>(s.nnz, part) + (int64_t)s.tables * s.p[1]);
    launch_pdl(tt_embedding_backward_tc_chain_kernel, items, (unsigned)TT_EMBEDDING_BACKWARD_TC_BLOCK, tt_embedding_backward_tc_smem_bytes(), s,
                                     key_stride, (const int*)w.keys, (const int*)w.bag_of, (const int*)w.counts, (const int*)a.bucket, w.ctr, w.partial,
                                     W0, W2, part, io);
    launch_pdl(tt_embedding_backward_tc_side_kernel, (unsigned)tt_embedding_backward_tc_side_items(s), (unsigned)TT_EMBEDDING_BACKWARD_TC_SIDE_BLOCK,
                                     (size_t)0, s, key_stride, (const int*)w.keys, (const int*)w.counts, (const int*)a.bucket, (const float*)W0,
                                     (const float*)W2, w.ctr + s.tables * s.p[1], w.side, io);
}
// version 9: (dense: a memset of dG) version 6's memset, the prep and list kernels (the grouping, and the work lists
// of the products), the F launches (none with a stash), a D (the last core: direct where q <= 4) and a G launch per core from the last, G of core 0, reduce
void tt_embedding_backward9(const TtEmbeddingBackwardArgs& a, int) {
    const TtEmbeddingBackwardShape& s = a.s;
    if (a.opt == TT_EMBEDDING_BACKWARD_DENSE) cudaCheck(cudaMemsetAsync(a.dG, 0, s.core_off[s.T] * sizeof(float)));
    if (s.nnz == 0) return;
    const TtEmbeddingBackwardGroupPlan P6 = tt_embedding_backward_group_make_plan(s, a.W_off, TT_EMBEDDING_BACKWARD_TC_BLOCK);
    TtEmbeddingBackwardSlicePlan P;
    tt_embedding_backward_slice_make_plan(s, P, a.stash);
    cudaCheck(cudaMemsetAsync(a.ws.zeroed, 0, a.ws.zeroed_bytes));
    const TtEmbeddingBackwardIo o = {a.dY, a.cores, a.state, a.dG, a.opt, a.lr, a.eps};
    const TtEmbeddingBackwardSliceIo io = {a.cores, a.dY, a.slice_X, a.stash ? a.stash : a.slice_X, a.slice_partial, a.ws.keys, a.ws.bag_of, a.ws.start, a.ws.list, P6.key_stride,
                                       a.slice_items, a.slice_items + 2 * (int64_t)P.rt_total, a.slice_first, a.slice_first + s.key_base[s.T],
                                       a.slice_totals, a.slice_multi, o};
    tt_embedding_backward_slice_prep_kernel<<<ceil_div(s.nnz, TT_EMBEDDING_BACKWARD_GROUP_PREP_BLOCK), TT_EMBEDDING_BACKWARD_GROUP_PREP_BLOCK>>>(
        s, P6, P, a.offsets, a.indices, a.ws, io, a.bucket);
    // every launch after the first with PDL: its blocks start under the tail of the one before (each waits for it)
    launch_pdl(tt_embedding_backward_slice_lists_kernel, (unsigned)std::min(s.key_base[s.T], TT_EMBEDDING_BACKWARD_GROUP_LIST_GRID),
               (unsigned)tt_embedding_backward_group_list_threads(P6), tt_embedding_backward_group_list_stage(P6) * sizeof(int), s, P6, P, a.ws, io,
               (const int*)a.bucket);
    const int BM = TT_EMBEDDING_BACKWARD_SLICE_BM, BN = TT_EMBEDDING_BACKWARD_SLICE_BN, nb = TT_EMBEDDING_BACKWARD_SLICE_BLOCK;
    auto gemm = [&](auto kind, dim3 grid, int t) {   // float4 loads where the rows are aligned
        constexpr int K = decltype(kind)::value;
        if (tt_embedding_backward_slice_vec(s, t)) launch_pdl(tt_embedding_backward_slice_gemm_kernel<K, true>, grid, nb, 0, s, P, io, t);
        else launch_pdl(tt_embedding_backward_slice_gemm_kernel<K, false>, grid, nb, 0, s, P, io, t);
    };
    using F = std::integral_constant<int, TT_EMBEDDING_BACKWARD_SLICE_F>;
    using Dk = std::integral_constant<int, TT_EMBEDDING_BACKWARD_SLICE_D>;
    using Gk = std::integral_constant<int, TT_EMBEDDING_BACKWARD_SLICE_G>;
    using Gn = std::integral_constant<int, TT_EMBEDDING_BACKWARD_SLICE_G_NARROW>;
    for (int t = 1; !a.stash && t <= s.T - 2; t++) gemm(F{}, dim3(P.max_rt[t], ceil_div(s.n[t], BN)), t);   // (the stash: done)
    for (int t = s.T - 1; t >= 0; t--) {
        if (t == s.T - 1 && tt_embedding_backward_slice_direct_last_d(s))
            launch_pdl(tt_embedding_backward_slice_last_d_kernel,
                       (unsigned)std::min(ceil_div(s.nnz, TT_EMBEDDING_BACKWARD_SLICE_LAST_D_BLOCK / 32), TT_EMBEDDING_BACKWARD_SLICE_LAST_D_GRID),
                       TT_EMBEDDING_BACKWARD_SLICE_LAST_D_BLOCK, 0, s, P, io, tt_embedding_backward_slice_last_d_v4(s));
        else if (t >= 1) gemm(Dk{}, dim3(P.max_rt[t], ceil_div(s.R[t], BN)), t);
        const dim3 grid(P.max_pt[t], ceil_div(s.R[t], BM) * ceil_div(s.n[t], BN));
        if (s.n[t] <= 16) gemm(Gn{}, grid, t);
        else gemm(Gk{}, grid, t);
    }
    launch_pdl(tt_embedding_backward_slice_reduce_kernel, (unsigned)std::min<int64_t>((int64_t)s.key_base[s.T] * P.max_red_y, TT_EMBEDDING_BACKWARD_SLICE_RED_GRID),
               TT_EMBEDDING_BACKWARD_SLICE_RED_BLOCK, 0, s, P, io, (const int*)a.ws.counts, o);
}

// version 7 at T = 2: (dG zeroed: the dense output) the pairs, CUB's sort, the bounds, a warp per span, the pieces of cut
// slices added, the optimizer pass
inline int tt_embedding_backward_two_bits(int K) {   // sort key bits: K (the pad's key) included
    int bits = 1;
    while (bits < 31 && (1 << bits) <= K) bits++;
    return bits;
}
void tt_embedding_backward_two_step(const TtEmbeddingBackwardArgs& a) {
    const TtEmbeddingBackwardShape& s = a.s;
    cudaCheck(cudaMemsetAsync(a.dG, 0, s.core_off[s.T] * sizeof(float)));
    if (s.nnz == 0) return;
    int KQ;
    const int Q = tt_embedding_backward_two_q(s, &KQ), N = 2 * s.nnz, K = s.key_base[2];
    int *key_in = a.two_pairs, *key_out = key_in + N, *lk_in = key_out + N, *lk_out = lk_in + N;
    const int key_stride = (int)tt_embedding_backward_round4(s.nnz);
    const TtEmbeddingBackwardTwo w = {key_out, lk_out, a.ws.keys, a.ws.bag_of, a.two_bounds, a.two_bounds + K, a.two_parts, N, K, key_stride,
                                      s.q[1] | 1, tt_embedding_backward_two_slot(s), tt_embedding_backward_two_warp_floats(s), std::max(s.S[0], s.S[1])};
    cudaCheck(cudaMemsetAsync(a.two_bounds, 0xFF, 2 * (size_t)K * sizeof(int)));   // -1: untouched
    tt_embedding_backward_two_prep_kernel<<<ceil_div(s.nnz, 256), 256>>>(s, key_stride, a.offsets, a.indices, key_in, lk_in, a.ws.keys, a.ws.bag_of);
    size_t temp = a.two_temp_bytes;
    cudaCheck(cub::DeviceRadixSort::SortPairs(a.two_temp, temp, key_in, key_out, lk_in, lk_out, N, 0, tt_embedding_backward_two_bits(K)));
    tt_embedding_backward_two_bounds_kernel<<<ceil_div(N, 256), 256>>>(key_out, N, K, w.first, w.last);
    const TtEmbeddingBackwardIo io = {a.dY, a.cores, a.state, a.dG, a.opt, a.lr, a.eps};
    const unsigned grid = (unsigned)ceil_div(ceil_div(N, TT_EMBEDDING_BACKWARD_TWO_SPAN), TT_EMBEDDING_BACKWARD_TWO_WARPS);
    const size_t smem = tt_embedding_backward_two_smem_bytes(s);
    auto kern = Q == 32 ? tt_embedding_backward_two_span_kernel<32, 1>
                : Q == 16   ? (KQ == 2 ? tt_embedding_backward_two_span_kernel<16, 2> : tt_embedding_backward_two_span_kernel<16, 1>)
                            : (KQ == 2 ? tt_embedding_backward_two_span_kernel<8, 2> : tt_embedding_backward_two_span_kernel<8, 1>);
    kern<<<grid, 32 * TT_EMBEDDING_BACKWARD_TWO_WARPS, smem>>>(s, w, io);
    tt_embedding_backward_two_combine_kernel<<<K, 256>>>(s, w, a.dG);
    tt_embedding_backward_optimizer_pass(a);
}

void tt_embedding_backward7(const TtEmbeddingBackwardArgs& a, int block_size);

// the inner problem of merged cores or padded ranks, on the outer problem's bags
inline TtEmbeddingBackwardArgs tt_embedding_backward_inner(const TtEmbeddingBackwardArgs& a) {
    TtEmbeddingBackwardArgs v = a.merge->inner;
    v.offsets = a.offsets;
    v.indices = a.indices;
    v.dY = a.dY;
    v.s.nnz_dev = a.s.nnz_dev;
    return v;
}

// version 7 at T >= 4, merged: each group's cores folded into its merged core, the default's dense gradient
// of those, then back through each merge from the group's last core (two permutes, two GEMMs, one permute into
// dG_t), and the optimizer over every core (untouched slices: dG exactly 0). The groups are independent before and
// after the dense gradient: group 0 runs on the default stream, the others on a second one (events fork and join).
void tt_embedding_backward_merged(const TtEmbeddingBackwardArgs& a, int block_size) {
    const TtEmbeddingBackwardShape& s = a.s;
    const TtEmbeddingBackwardMerge& M = *a.merge;
    const TtEmbeddingBackwardArgs v = tt_embedding_backward_inner(a);
    auto grid = [](int64_t n) { return (unsigned)std::max<int64_t>(1, std::min<int64_t>(ceil_div<int64_t>(n, 256), 8192)); };
    auto core = [&](int t) { return a.cores + s.core_off[t]; };
    cudaStream_t stream = 0;                   // the group's stream
    auto copy = [&](float* dst, const float* src, int64_t n) { cudaCheck(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, stream)); };
    auto swap = [&](float* out, const float* in, int64_t total, int64_t d1, int64_t d2, int64_t d3) {
        tt_embedding_backward_swap_kernel<<<grid(total), 256, 0, stream>>>(out, in, total, d1, d2, d3);
    };
    const float one = 1.0f, zero = 0.0f;
    auto gemm = [&](const TtEmbeddingBackwardRowGemm& g, const float* A, const float* B, float* C, int batch) {   // row-major, cuBLAS's view
        cublasCheck(cublasGemmStridedBatchedEx(stream == 0 ? a.blas : M.side_blas, CUBLAS_OP_N, g.ta ? CUBLAS_OP_T : CUBLAS_OP_N, g.N, g.M, g.K, &one, B, CUDA_R_32F, g.ldb, g.sb,
                                               A, CUDA_R_32F, g.lda, g.sa, &zero, C, CUDA_R_32F, g.ldc, g.sc, batch, CUBLAS_COMPUTE_32F,
                                               CUBLAS_GEMM_DEFAULT));
    };
    auto fork = [&] {   // the side stream waits for the default stream's work so far
        cudaCheck(cudaEventRecord(M.fork, 0));
        cudaCheck(cudaStreamWaitEvent(M.side, M.fork, 0));
    };
    auto join = [&] {   // and the default stream for the side stream's
        cudaCheck(cudaEventRecord(M.join, M.side));
        cudaCheck(cudaStreamWaitEvent(0, M.join, 0));
    };
    const int G = tt_embedding_backward_merge_groups(s, M.first);
    fork();
    for (int g = 0; g < G; g++) {   // the merged cores
        const int a0 = M.first[g], b0 = M.first[g + 1] - 1;
        stream = g == 0 ? 0 : M.side;
        const float* A = core(a0);
        for (int t = a0 + 1; t <= b0; t++) {
            const TtEmbeddingBackwardMergeStep st = tt_embedding_backward_merge_step(s, a0, t);
            float* C = t == b0 ? v.cores + v.s.core_off[g] : M.prod[t];
            const int ic = TT_EMBEDDING_BACKWARD_MERGE_IC;
            if (tt_embedding_backward_merge_staged(st))
                tt_embedding_backward_merge_staged_kernel<<<dim3((unsigned)(st.tables * st.pA), (unsigned)ceil_div<int64_t>(st.pt, ic)), 256,
                                                            st.m * (st.k | 1) * sizeof(float), stream>>>(C, A, core(t), st, ic);
            else
                tt_embedding_backward_merge_kernel<<<grid(tt_embedding_backward_merge_items(st)), 256, 0, stream>>>(C, A, core(t), st);
            A = C;
        }
        if (a0 == b0) copy(v.cores + v.s.core_off[g], A, tt_embedding_backward_core_elems(s, a0));
    }
    join();
    tt_embedding_backward7(v, block_size);   // their dense gradient
    cudaCheck(cudaMemsetAsync(a.dG, 0, s.core_off[s.T] * sizeof(float)));   // (the padding between cores)
    fork();
    for (int g = 0; g < G; g++) {
        const int a0 = M.first[g], b0 = M.first[g + 1] - 1;
        stream = g == 0 ? 0 : M.side;
        const float* dC = v.dG + v.s.core_off[g];
        if (a0 == b0) copy(a.dG + s.core_off[a0], dC, tt_embedding_backward_core_elems(s, a0));
        for (int t = b0; t > a0; t--) {
            const TtEmbeddingBackwardMergeStep st = tt_embedding_backward_merge_step(s, a0, t);
            const float* A = t - 1 == a0 ? core(a0) : M.prod[t - 1];
            float* dA = t - 1 == a0 ? a.dG + s.core_off[a0] : M.dprod[t - 1];
            const int64_t nx = st.tables * st.pA * st.pt * st.m * st.n, ng = st.tables * st.pt * st.k * st.n;
            swap(M.X[g], dC, nx, st.pt, st.m, st.n);       // dC[j][i][r][c] -> X[j][r][i][c]
            swap(M.Gt[g], core(t), ng, st.k, st.n, 1);     // G_t[i][kk][c] -> Gt[i][c][kk]
            gemm(tt_embedding_backward_merge_gemm(st, false), M.X[g], M.Gt[g], dA, s.tables);
            gemm(tt_embedding_backward_merge_gemm(st, true), A, M.X[g], M.dGx[g], s.tables);
            swap(a.dG + s.core_off[t], M.dGx[g], ng, st.k, st.pt, st.n);   // dGx[kk][i][c] -> dG_t[i][kk][c]
            dC = dA;
        }
    }
    join();
    tt_embedding_backward_optimizer_pass(a);
}

// version 7 at padded ranks: the padded cores, the default's dense gradient of them, the real elements' step
void tt_embedding_backward_padded(const TtEmbeddingBackwardArgs& a, int block_size) {
    const TtEmbeddingBackwardArgs v = tt_embedding_backward_inner(a);
    tt_embedding_backward_pad_kernel<<<tt_embedding_backward_optimizer_grid(v.s.core_off[v.s.T], 256), 256>>>(a.s, v.s, a.cores, v.cores);
    tt_embedding_backward7(v, block_size);
    tt_embedding_backward_unpad_kernel<<<tt_embedding_backward_optimizer_grid(a.s.core_off[a.s.T], 256), 256>>>(
        a.s, v.s, v.dG, a.opt, a.lr, a.eps, a.cores, a.state, a.dG);
}

// version 7, the default: the dispatcher above picks the kernels (the tensor-core path, or a general one)
void tt_embedding_backward7(const TtEmbeddingBackwardArgs& a, int block_size) {
    // (made at allocation where merge_plan cuts or pad_plan pads: no plan on the host per step; padded ranks at 256
    // threads only, the tensor cores' block)
    if (a.merge && (!a.merge->padded || block_size == TT_EMBEDDING_BACKWARD_TC_BLOCK)) {
        a.merge->padded ? tt_embedding_backward_padded(a, block_size) : tt_embedding_backward_merged(a, block_size);
        return;
    }
    switch (tt_embedding_backward_route(a.s, a.W_off, a.smem_limit, block_size)) {   // (padded above, or not at all)
        case TT_EMBEDDING_BACKWARD_ROUTE_MERGED:
            fail_args("tt_embedding_backward: version 7 merges this shape's cores, but its buffers were not made for it");
        case TT_EMBEDDING_BACKWARD_ROUTE_TENSOR: tt_embedding_backward_tc_tensor(a); break;
        case TT_EMBEDDING_BACKWARD_ROUTE_TWO: tt_embedding_backward_two_step(a); break;
        case TT_EMBEDDING_BACKWARD_ROUTE_GROUPED: tt_embedding_backward6(a, block_size); break;
        case TT_EMBEDDING_BACKWARD_ROUTE_SLICE_MMA: tt_embedding_backward9(a, block_size); break;
        default:
            if (a.s.nnz_dev) fail_args("tt_embedding_backward: version 2's pipeline (the route at this shape) has no device-side lookup count");
            tt_embedding_backward2(a, block_size);
            break;
    }
}

void tt_embedding_backward(int kernel_num, const TtEmbeddingBackwardArgs& a, int block_size) {
    if (a.s.nnz_dev && kernel_num < 6) fail_args("tt_embedding_backward: version %d has no device-side lookup count (versions 6, 7 and 9 have)", kernel_num);
    switch (kernel_num) {
        case 1: tt_embedding_backward1(a, block_size); break;
        case 2: tt_embedding_backward2(a, block_size); break;
        case 3: tt_embedding_backward3(a, block_size); break;
        case 6: tt_embedding_backward6(a, block_size); break;
        case 7: tt_embedding_backward7(a, block_size); break;
        case 9: tt_embedding_backward9(a, block_size); break;
        default: fail_args("tt_embedding_backward has no version %d", kernel_num);
    }
}

// the precondition of each version on a shape, "" when it can run (smem_limit: the device's opt-in
// shared memory per block, less the kernels' static shared memory)
std::string tt_embedding_backward_skip_reason(int k, const TtEmbeddingBackwardShape& s, const TtEmbeddingBackwardArgs& a, size_t smem_limit, int block) {
    char buf[256];
    if (k == 1) {
        const double terms = tt_embedding_backward_naive_terms(s) * s.nnz;
        if (terms > TT_EMBEDDING_BACKWARD_NAIVE_MAX_TERMS) {
            snprintf(buf, sizeof buf, "its explicit sums need %.3g terms at this shape (limit %.0e): try a smaller shape", terms,
                     TT_EMBEDDING_BACKWARD_NAIVE_MAX_TERMS);
            return buf;
        }
    }
    if (a.stash && k != 7 && k != 9) return "--stash (the forward's prefixes) is read by version 9, and by the default where it routes there, only";
    if (k == 7) return "";   // the default runs every shape (its dispatcher falls back to the general kernels; with
                             // --stash, where it does not route to version 9, it computes the prefixes itself)
    if (k == 9) {
        if (block && block != TT_EMBEDDING_BACKWARD_SLICE_BLOCK) {
            snprintf(buf, sizeof buf, "it is compiled for %d threads per block (--block %d)", TT_EMBEDDING_BACKWARD_SLICE_BLOCK, block);
            return buf;
        }
        TtEmbeddingBackwardSlicePlan P8;
        return tt_embedding_backward_slice_make_plan(s, P8);
    }
    if (k >= 3 && block > TT_EMBEDDING_BACKWARD_MAX_FUSED_BLOCK) {
        snprintf(buf, sizeof buf, "it is compiled for at most %d threads per block (--block %d)", TT_EMBEDDING_BACKWARD_MAX_FUSED_BLOCK, block);
        return buf;
    }
    if (k == 6) return tt_embedding_backward_group_reason(s, a.W_off, smem_limit, block);
    if (k == 3) {
        const TtEmbeddingBackwardLayout& L = a.lay;
        if (tt_embedding_backward_smem_bytes(L) > smem_limit) {
            snprintf(buf, sizeof buf, "its block needs %zu bytes of shared memory (NB = %d), more than the %zu a block can have",
                     tt_embedding_backward_smem_bytes(L), L.nb, smem_limit);
            return buf;
        }
    }
    return "";
}

// whether version k reads the stash (the default: where it routes to version 9; elsewhere it makes the prefixes itself)
inline bool tt_embedding_backward_reads_stash(int k, const TtEmbeddingBackwardArgs& a, int block) {
    return a.stash && (k == 9 || (k == 7 && tt_embedding_backward_route(a.s, a.W_off, a.smem_limit, block) == TT_EMBEDDING_BACKWARD_ROUTE_SLICE_MMA));
}

// ----------------------------------------------------------------------------------------------

// Every device buffer of a step with its size in bytes, in one place: f(&pointer, bytes, input) allocates, poisons,
// frees or counts them. Inputs first (offsets, indices, dY, the cores and state as made, the working copies that
// the step updates in place), then what the versions write.
template <class F>
void tt_embedding_backward_buffers(TtEmbeddingBackwardArgs& a, TtEmbeddingBackwardInputs& in, const TtEmbeddingBackwardGroupPlan& P, F&& f) {
    const TtEmbeddingBackwardShape& s = a.s;
    const size_t C = (size_t)s.core_off[s.T], K = (size_t)s.key_base[s.T], nnz1 = (size_t)std::max(s.nnz, 1), chunk = TT_EMBEDDING_BACKWARD_FBTT_CHUNK;
    auto buf = [&](auto** ptr, size_t bytes, bool input = false) { f((void**)ptr, std::max<size_t>(bytes, 4), input); };
    buf(&in.offsets, 8 * ((size_t)s.num_bags + 1), true);
    buf(&in.indices, 8 * nnz1, true);
    buf(&in.dY, 4 * (size_t)s.num_bags * s.D, true);
    if (a.stash_floats) buf(&a.stash, 4 * (size_t)a.stash_floats, true);
    for (float** c : {&in.cores0, &in.state0, &a.cores, &a.state}) buf(c, 4 * C, true);
    buf(&a.dG, 4 * C);
    buf(&a.fb_rows, 4 * (size_t)s.T * chunk);                                    // version 2
    buf(&a.fb_ptrs, sizeof(float*) * tt_embedding_backward_fbtt_slots(s.T) * chunk);
    for (int t = 0; t < s.T; t++) {
        if (t >= 1 && t <= s.T - 2) buf(&a.fb.P[t], 4 * chunk * s.m[t] * s.R[t + 1]);
        buf(&a.fb.trG[t], 4 * chunk * s.S[t]);
    }
    int64_t W_total = 0;                                                         // versions 3, 6, 7
    for (int t = 0; t < s.T; t++) W_total += t == P.h ? 0 : (int64_t)s.nnz * s.S[t];
    buf(&a.W, 4 * (size_t)W_total);
    TtEmbeddingBackwardWorkspace& w = a.ws;
    buf(&w.keys, 4 * (size_t)s.T * P.key_stride);
    buf(&w.bag_of, 4 * nnz1);
    buf(&w.zeroed, w.zeroed_bytes = 4 * (K + 1 + std::max<size_t>(P.max_items, K)));   // (version 7: a counter per slice)
    buf(&w.chunk_desc, 16 * (size_t)P.max_chunks);
    buf(&w.choff, 4 * ((size_t)s.tables * s.p[P.h] + 1));
    buf(&w.totals, 8);
    buf(&w.item_desc, 16 * (size_t)P.max_items);
    buf(&w.start, 4 * (K + 1));
    buf(&w.list, 4 * (size_t)s.T * nnz1);
    const bool tc = tt_embedding_backward_tc_reason(s).empty();                  // version 7 (below: its cut shape's)
    // version 6's chunk partials, or version 7's parts (at the smallest part size its host may choose)
    const size_t tc_items = tc && s.T == 3 ? (size_t)ceil_div<int64_t>(s.nnz, TT_EMBEDDING_BACKWARD_TC_PART_MIN) + (size_t)s.tables * s.p[1] : 0;
    buf(&w.partial, 4 * std::max((size_t)P.max_chunks * s.S[P.h], tc_items * TT_EMBEDDING_BACKWARD_TC_S1));
    buf(&w.final_parts, 4 * (size_t)P.max_items * TT_EMBEDDING_BACKWARD_GROUP_CW);
    buf(&w.side, tc && tt_embedding_backward_tc_split(s) == 1 ? 4 * (size_t)tt_embedding_backward_tc_side_items(s) * TT_EMBEDDING_BACKWARD_TC_S0 : 4);
    buf(&a.bucket, 4 * K * TT_EMBEDDING_BACKWARD_BUCKET);
    TtEmbeddingBackwardSlicePlan P8;                                                 // version 9 (none where it skips)
    if (!tt_embedding_backward_slice_make_plan(s, P8).empty()) memset(&P8, 0, sizeof P8);
    buf(&a.slice_X, 4 * (size_t)P8.X_floats);
    buf(&a.slice_partial, 4 * (size_t)P8.partial_floats);
    buf(&a.slice_items, 8 * ((size_t)P8.rt_total + P8.pt_total));
    buf(&a.slice_first, 8 * K);
    buf(&a.slice_totals, 8 * (TT_EMBEDDING_BACKWARD_MAX_T + 1) + 4);
    buf(&a.slice_multi, 4 * K);
    const int k = tt_embedding_backward_tc_split(s);                             // version 7 at q_0 = 4k
    if (k > 1 && tc) {
        const TtEmbeddingBackwardShape v = tt_embedding_backward_tc_split_shape(s, k);
        TtEmbeddingBackwardTcSplit& x = a.split;
        const size_t Kv = (size_t)v.key_base[v.T], nv = (size_t)std::max(v.nnz, 1), Kc = (size_t)v.tables * v.p[1];
        const size_t items = (size_t)ceil_div<int64_t>(v.nnz, TT_EMBEDDING_BACKWARD_TC_PART_MIN) + Kc;
        buf(&x.offsets, 8 * ((size_t)v.num_bags + 1));
        buf(&x.indices, 8 * nv);
        buf(&x.ws.keys, 4 * (size_t)v.T * tt_embedding_backward_round4((int64_t)nv));
        buf(&x.ws.bag_of, 4 * nv);
        buf(&x.ws.zeroed, x.ws.zeroed_bytes = 4 * (Kv + 1 + Kv));                   // counts | done | a counter per slice
        buf(&x.ws.partial, 4 * items * TT_EMBEDDING_BACKWARD_TC_S1);
        buf(&x.ws.side, 4 * (size_t)tt_embedding_backward_tc_side_items(v) * TT_EMBEDDING_BACKWARD_TC_S0);
        buf(&x.W, 4 * nv * (size_t)(v.S[0] + v.S[2]));
        buf(&x.bucket, 4 * Kv * TT_EMBEDDING_BACKWARD_BUCKET);
    }
    if (s.T == 2) {                                                              // version 7 at T = 2
        const size_t N = 2 * nnz1, spans = (size_t)ceil_div<int64_t>((int64_t)N, TT_EMBEDDING_BACKWARD_TWO_SPAN);
        a.two_temp_bytes = 0;
        cudaCheck(cub::DeviceRadixSort::SortPairs(nullptr, a.two_temp_bytes, (int*)nullptr, (int*)nullptr, (int*)nullptr, (int*)nullptr, (int)N, 0, 31));
        buf(&a.two_pairs, 4 * 4 * N);
        buf(&a.two_bounds, 4 * 2 * K);
        buf(&a.two_parts, 4 * spans * 2 * (size_t)std::max(s.S[0], s.S[1]));
        buf(&a.two_temp, a.two_temp_bytes);
    }
    if (a.merge) {                                                               // version 7's merged cores
        TtEmbeddingBackwardMerge& M = *a.merge;
        tt_embedding_backward_buffers(M.inner, M.inner_in, M.inner_plan, f);
        for (int grp = 0; grp < 3; grp++) {
            size_t x = 0, g = 0;
            for (int t = M.first[grp] + 1; grp < tt_embedding_backward_merge_groups(s, M.first) && t < M.first[grp + 1]; t++) {
                const TtEmbeddingBackwardMergeStep st = tt_embedding_backward_merge_step(s, M.first[grp], t);
                const size_t out = (size_t)(st.tables * st.pA * st.pt * st.m * st.n);
                x = std::max(x, out);
                g = std::max(g, (size_t)tt_embedding_backward_core_elems(s, t));
                if (t + 1 < M.first[grp + 1]) {
                    buf(&M.prod[t], 4 * out);
                    buf(&M.dprod[t], 4 * out);
                }
            }
            buf(&M.X[grp], 4 * x);
            buf(&M.Gt[grp], 4 * g);
            buf(&M.dGx[grp], 4 * g);
        }
    }
}

// the device memory the buffers take, refused (exit 2) when more than is free
void tt_embedding_backward_after_alloc(TtEmbeddingBackwardArgs& a, const TtEmbeddingBackwardGroupPlan& P);
void tt_embedding_backward_alloc(TtEmbeddingBackwardArgs& a, TtEmbeddingBackwardInputs& in, const TtEmbeddingBackwardGroupPlan& P) {
    int first[4] = {0, 1, 2, 3};
    const bool merged = !a.merge && tt_embedding_backward_merge_plan(a.s, first),
               padded = !a.merge && !merged && tt_embedding_backward_pad_plan(a.s, tt_embedding_backward_num_sms());
    if (merged || padded) {   // version 7's 2- or 3-core problem (dense)
        a.merge = new TtEmbeddingBackwardMerge();
        TtEmbeddingBackwardMerge& M = *a.merge;
        M.padded = padded;
        std::copy(first, first + 4, M.first);
        M.inner.s = padded ? tt_embedding_backward_padded_shape(a.s) : tt_embedding_backward_merged_shape(a.s, first);
        M.inner.opt = TT_EMBEDDING_BACKWARD_DENSE;
        M.inner.smem_limit = a.smem_limit;
        M.inner_plan = tt_embedding_backward_group_make_plan(M.inner.s, M.inner.W_off, TT_EMBEDDING_BACKWARD_TC_BLOCK);
    }
    double need = 0.0;
    tt_embedding_backward_buffers(a, in, P, [&](void**, size_t bytes, bool) { need += (double)bytes; });
    size_t free_b = 0, total_b = 0;
    cudaCheck(cudaMemGetInfo(&free_b, &total_b));
    if (need > 0.95 * (double)free_b)
        fail_args("this shape needs %.3g GB of device memory (inputs, cores, every version's workspace); %.3g GB are free",
                  need / 1e9, (double)free_b / 1e9);
    tt_embedding_backward_buffers(a, in, P, [](void** p, size_t bytes, bool) { cudaCheck(cudaMalloc(p, bytes)); });
    tt_embedding_backward_after_alloc(a, P);
    if (a.merge) {
        tt_embedding_backward_after_alloc(a.merge->inner, a.merge->inner_plan);
        cudaCheck(cudaStreamCreateWithFlags(&a.merge->side, cudaStreamNonBlocking));   // (a blocking stream would wait on the default one)
        cudaCheck(cudaEventCreateWithFlags(&a.merge->fork, cudaEventDisableTiming));
        cudaCheck(cudaEventCreateWithFlags(&a.merge->join, cudaEventDisableTiming));
        cublasCheck(cublasCreate(&a.merge->side_blas));
        cublasCheck(cublasSetMathMode(a.merge->side_blas, CUBLAS_DEFAULT_MATH));   // fp32 FMA, no TF32
        cublasCheck(cublasSetStream(a.merge->side_blas, a.merge->side));
    }
}

// everything alloc made: the buffers, the cuBLAS handles, the merged path's stream and events
void tt_embedding_backward_free(TtEmbeddingBackwardArgs& a, TtEmbeddingBackwardInputs& in, const TtEmbeddingBackwardGroupPlan& P) {
    cublasCheck(cublasDestroy(a.blas));
    if (a.merge) {
        cublasCheck(cublasDestroy(a.merge->inner.blas));
        cublasCheck(cublasDestroy(a.merge->side_blas));
        cudaCheck(cudaStreamDestroy(a.merge->side));
        cudaCheck(cudaEventDestroy(a.merge->fork));
        cudaCheck(cudaEventDestroy(a.merge->join));
    }
    tt_embedding_backward_buffers(a, in, P, [](void** ptr, size_t, bool) { cudaCheck(cudaFree(*ptr)); });
    delete a.merge;
    a.merge = nullptr;
}

// what the buffers need once made: the workspace's views, the cuBLAS handle, the kernels' shared memory limits
void tt_embedding_backward_after_alloc(TtEmbeddingBackwardArgs& a, const TtEmbeddingBackwardGroupPlan& P) {
    a.ws.counts = a.ws.zeroed;
    a.ws.done = a.ws.zeroed + a.s.key_base[a.s.T];
    a.ws.ctr = a.ws.done + 1;
    int64_t W_total = 0;
    for (int t = 0; t < a.s.T; t++) {
        a.W_off[t] = W_total;
        if (t != P.h) W_total += (int64_t)a.s.nnz * a.s.S[t];
    }
    a.ws.W = a.W;
    a.split.ws.counts = a.split.ws.zeroed;
    if (a.split.ws.zeroed) {
        a.split.s = tt_embedding_backward_tc_split_shape(a.s, tt_embedding_backward_tc_split(a.s));
        a.split.ws.done = a.split.ws.zeroed + a.split.s.key_base[a.s.T];
        a.split.ws.ctr = a.split.ws.done + 1;
    }
    cublasCheck(cublasCreate(&a.blas));
    cublasCheck(cublasSetMathMode(a.blas, CUBLAS_DEFAULT_MATH));   // fp32 FMA, no TF32
    // kernels whose shared memory may pass 48 KB: up to what the block can have
    // (the limit, not this shape's need: version 7's merged 3-core problem sets them too, and must not lower them)
    a.lay = tt_embedding_backward_make_layout(a.s, 1);
    cudaCheck(cudaFuncSetAttribute(tt_embedding_backward3_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)a.smem_limit));
    for (const void* kern : {(const void*)tt_embedding_backward_group_chunk_kernel<0>, (const void*)tt_embedding_backward_group_chunk_kernel<1>,
                             (const void*)tt_embedding_backward_group_chunk_kernel<2>, (const void*)tt_embedding_backward_group_chunk_kernel<4>})
        cudaCheck(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)a.smem_limit));
    if (tt_embedding_backward_tc_smem_bytes() <= a.smem_limit)
        cudaCheck(cudaFuncSetAttribute(tt_embedding_backward_tc_chain_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       (int)tt_embedding_backward_tc_smem_bytes()));
    cudaCheck(cudaFuncSetAttribute(tt_embedding_backward_group_lists_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   (int)(TT_EMBEDDING_BACKWARD_GROUP_LIST_STAGE * sizeof(int))));
    for (const void* kern : {(const void*)tt_embedding_backward_two_span_kernel<8, 1>, (const void*)tt_embedding_backward_two_span_kernel<8, 2>,
                             (const void*)tt_embedding_backward_two_span_kernel<16, 1>, (const void*)tt_embedding_backward_two_span_kernel<16, 2>,
                             (const void*)tt_embedding_backward_two_span_kernel<32, 1>})
        cudaCheck(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)a.smem_limit));
}

// The host memory a run takes beyond tt_embedding.h's inputs (the packed cores and state, the double reference and
// its magnitudes, the downloads of a check and its rerun), checked with the inputs before they are made
inline double tt_embedding_backward_host_bytes(const TtEmbeddingBackwardShape& s) { return (8.0 + 17.0 + 24.0 + 32.0) * (double)s.core_off[s.T]; }

// the shape field: tt_embedding_forward's (the PyTorch peer files its fwd+bwd+SGD lines under it), with the
// optimizer appended when it is not SGD
std::string tt_embedding_backward_shape_string(const TtEmbeddingConfig& c, int opt) {
    return tt_embedding_shape_name(c) + (opt != TT_EMBEDDING_BACKWARD_SGD ? std::string(",") + TT_EMBEDDING_BACKWARD_OPT_NAMES[opt] : "");
}

// --dump: the inputs (tt_embedding.h: cores, state, dY, bags, meta), the reference gradient, and the last version's
// cores, state and dG
void tt_embedding_backward_dump(const std::string& dir, const TtEmbeddingConfig& cfg, const TtEmbeddingInputs& in,
                                const TtEmbeddingBackwardShape& s, const TtEmbeddingBackwardReference& ref, const std::vector<float>& c,
                                const std::vector<float>& st, const std::vector<float>& g) {
    tt_embedding_dump_inputs(dir, "tt_embedding_backward", cfg, in);
    for (int t = 0; t < s.T; t++) {
        const int64_t off = s.core_off[t], n = tt_embedding_backward_core_elems(s, t);
        const std::vector<int64_t> sh = {s.tables, s.p[t], s.S[t]};
        const std::string ts = std::to_string(t);
        if (!ref.dG.empty()) {   // (none under --no-check)
            std::vector<float> rg(ref.dG.begin() + off, ref.dG.begin() + off + n);
            write_npy(dir, "tt_embedding_backward_dG_ref" + ts, rg.data(), sh);
        }
        write_npy(dir, "tt_embedding_backward_out_core" + ts, c.data() + off, sh);
        write_npy(dir, "tt_embedding_backward_out_state" + ts, st.data() + off, sh);
        write_npy(dir, "tt_embedding_backward_out_dG" + ts, g.data() + off, sh);
    }
    printf("dumped tt_embedding_backward_{meta,core,state,dG_ref,out_core,out_state,out_dG}<t>, _dY, _offsets, _indices .npy to %s "
           "(out_*: the last version run)\n", dir.c_str());
}

// Versions 4, 5 and 8 are retired: asked for by number, exit 2 naming where their code is; `all` skips them.
void tt_embedding_backward_drop_retired(Cli& cli) {
    auto retired = [](int k) { return k == 4 || k == 5 || k == 8; };
    for (int k : cli.kernels)
        if (!cli.all && retired(k))
            fail_args("version %d is retired (%s; its code: git show %s:dev/cuda/tt_embedding_backward.cu); versions 1, 2, 3, 6, 7 "
                      "and 9 run", k, k == 8 ? "slower than version 9 at every shape" : "slower than version 6 at every shape",
                      k == 8 ? "39c3510" : "33f44ba");
    cli.kernels.erase(std::remove_if(cli.kernels.begin(), cli.kernels.end(), retired), cli.kernels.end());
}

// Versions 6 and 7 use no float atomics: a second run from the same inputs must give the same bits.
bool tt_embedding_backward_rerun_same(OpRunner& r, int k, int block, const std::function<void(std::vector<float>&, std::vector<float>&,
                                      std::vector<float>&)>& download, const std::vector<float>& c, const std::vector<float>& st,
                                      const std::vector<float>& g) {
    r.prepare_check();
    r.launch(k, block);
    cudaCheck(cudaGetLastError());
    cudaCheck(cudaDeviceSynchronize());
    std::vector<float> c2, st2, g2;
    download(c2, st2, g2);
    auto same_bits = [](const std::vector<float>& x, const std::vector<float>& y) { return memcmp(x.data(), y.data(), x.size() * 4) == 0; };
    const bool same = same_bits(c, c2) && same_bits(st, st2) && same_bits(g, g2);
    printf("  rerun            %s\n", same ? "ok    (bitwise identical to the first run)" : "FAIL  (bits differ from the first run)");
    return same;
}

// ----------------------------------------------------------------------------------------------
// a run: the launchers' arguments and buffers, the packed inputs a check compares with, the reference

struct TtEmbeddingBackwardBench {
    TtEmbeddingBackwardArgs a;
    TtEmbeddingBackwardInputs in;
    TtEmbeddingBackwardGroupPlan plan;
    std::vector<float> cores, state;        // the inputs packed (core_off), as before any step
    TtEmbeddingBackwardReference ref;
    std::vector<float> c, st, g;            // the last download: cores, state and dG after a step
};

// the buffers (the device memory checked first, exit 2), the uploads, the default's route, the versions asked for
// (one that cannot run this shape is an error, not a pass), then the reference
void tt_embedding_backward_setup_bench(TtEmbeddingBackwardBench& b, const Cli& cli, const TtEmbeddingInputs& in, const TtEmbeddingBackwardShape& s,
                                       int opt, double lr, double eps, bool stash, const cudaDeviceProp& prop) {
    printf("TT shape: T=%d D=%d E=%lld tables=%d B=%d nnz=%d, core floats %lld (dense table %.3g floats, %.0fx), optimizer %s (lr %g, eps %g)\n",
           s.T, s.D, (long long)s.E, s.tables, s.B, s.nnz, (long long)s.core_off[s.T], (double)s.E * s.D * s.tables,
           (double)s.E * s.D * s.tables / (double)s.core_off[s.T], TT_EMBEDDING_BACKWARD_OPT_NAMES[opt], lr, eps);
    TtEmbeddingBackwardArgs& a = b.a;
    memset(&a, 0, sizeof a);
    a.s = s; a.opt = opt; a.lr = (float)lr; a.eps = (float)eps;
    a.smem_limit = prop.sharedMemPerBlockOptin - 1024;   // less the kernels' static shape and plan copies
    b.plan = tt_embedding_backward_group_make_plan(s, a.W_off, TT_EMBEDDING_BACKWARD_TC_BLOCK);   // (sizes: W_off unused)
    int64_t stash_off[TT_EMBEDDING_BACKWARD_MAX_T] = {};
    a.stash_floats = stash ? tt_embedding_stash_layout(s.T, s.q, s.R, s.nnz, stash_off) : 0;
    tt_embedding_backward_alloc(a, b.in, b.plan);
    b.cores = tt_embedding_backward_pack(s, in.cores);
    b.state = tt_embedding_backward_pack(s, in.state);
    auto upload = [](auto* d, const auto& v) { cudaCheck(cudaMemcpy(d, v.data(), v.size() * sizeof(v[0]), cudaMemcpyHostToDevice)); };
    upload(b.in.offsets, in.offsets); upload(b.in.indices, in.indices); upload(b.in.dY, in.dY); upload(b.in.cores0, b.cores);
    upload(b.in.state0, b.state);
    a.offsets = b.in.offsets; a.indices = b.in.indices; a.dY = b.in.dY;
    if (a.stash_floats) {                    // what the forward would have kept: the CPU's prefixes (double, rounded)
        std::vector<float> st((size_t)a.stash_floats);
        tt_embedding_backward_stash_cpu(s, b.cores.data(), in.offsets.data(), in.indices.data(), stash_off, st.data());
        upload(a.stash, st);
    }
    const int route = tt_embedding_backward_route(s, a.W_off, a.smem_limit, cli.block ? cli.block : TT_EMBEDDING_BACKWARD_TC_BLOCK, a.merge && a.merge->padded);
    printf("version 7 (the default) at this shape%s: %s%s\n", cli.block ? " and block" : "", tt_embedding_backward_route_name(route),
           (route == TT_EMBEDDING_BACKWARD_ROUTE_TENSOR || route == TT_EMBEDDING_BACKWARD_ROUTE_PADDED) && s.q[0] > TT_EMBEDDING_BACKWARD_TC_Q
               ? ", each lookup cut in q_0 / 4" : "");
    if (route == TT_EMBEDDING_BACKWARD_ROUTE_MERGED) {
        const TtEmbeddingBackwardMerge& M = *a.merge;
        const TtEmbeddingBackwardShape& v = M.inner.s;
        const int r3 = tt_embedding_backward_route(v, M.inner.W_off, a.smem_limit, cli.block ? cli.block : TT_EMBEDDING_BACKWARD_TC_BLOCK);
        std::string cut, p, q, r;
        for (int g = 0; g < v.T; g++) {
            cut += (g ? " | " : "") + std::to_string(M.first[g]) + "-" + std::to_string(M.first[g + 1] - 1);
            p += (g ? "," : "") + std::to_string(v.p[g]);
            q += (g ? "," : "") + std::to_string(v.q[g]);
            if (g) r += (g > 1 ? "," : "") + std::to_string(v.R[g]);
        }
        printf("  cores %s merged: p %s, q %s, ranks %s; there: %s\n", cut.c_str(), p.c_str(), q.c_str(), r.c_str(), tt_embedding_backward_route_name(r3));
    }
    for (int k : cli.kernels) {
        const std::string why = cli.all ? "" : tt_embedding_backward_skip_reason(k, s, a, a.smem_limit, cli.block);
        if (!why.empty()) fail_args("version %d cannot run this shape: %s (version 7, the default, runs every shape)", k, why.c_str());
    }
    printf(cli.no_check ? "no check: the reference's touched slices only\n" : "computing the CPU reference (double)...\n");
    b.ref = tt_embedding_backward_reference(s, b.cores, in.offsets, in.indices, in.dY, !cli.no_check);
}

// The step updates the cores and the Adagrad state in place, so before every run they are restored from the inputs
// (else each run would start from the last one's result); before a check, everything a version must write (dG and
// every workspace) is also poisoned with NaN bytes, so that a gradient or buffer it forgot to write fails.
void tt_embedding_backward_restore(TtEmbeddingBackwardBench& b) {
    const size_t bytes = (size_t)b.a.s.core_off[b.a.s.T] * sizeof(float);
    cudaCheck(cudaMemcpy(b.a.cores, b.in.cores0, bytes, cudaMemcpyDeviceToDevice));
    cudaCheck(cudaMemcpy(b.a.state, b.in.state0, bytes, cudaMemcpyDeviceToDevice));
}
void tt_embedding_backward_poison_outputs(TtEmbeddingBackwardBench& b) {
    tt_embedding_backward_buffers(b.a, b.in, b.plan, [](void** ptr, size_t bytes, bool input) { if (!input) poison(*ptr, bytes); });
}
void tt_embedding_backward_download(const TtEmbeddingBackwardBench& b, std::vector<float>& c, std::vector<float>& st, std::vector<float>& g) {
    const size_t C = (size_t)b.a.s.core_off[b.a.s.T];
    c = device_download(b.a.cores, C); st = device_download(b.a.state, C); g = device_download(b.a.dG, C);
}

// the step against the reference; versions 6, 7 and 9 (but not 7's cuBLAS route) also a second run, same bits
bool tt_embedding_backward_check_run(OpRunner& r, TtEmbeddingBackwardBench& b, int k, int block) {
    const TtEmbeddingBackwardArgs& a = b.a;
    tt_embedding_backward_download(b, b.c, b.st, b.g);
    bool pass = tt_embedding_backward_check(a.s, a.opt, a.lr, a.eps, b.ref, b.cores.data(), b.state.data(), b.c.data(), b.st.data(), b.g.data());
    if (k >= 6 && (k != 7 || tt_embedding_backward_route(a.s, a.W_off, a.smem_limit, block) != TT_EMBEDDING_BACKWARD_ROUTE_CUBLAS))
        pass = tt_embedding_backward_rerun_same(r, k, block, [&](std::vector<float>& c, std::vector<float>& st, std::vector<float>& g) {
                   tt_embedding_backward_download(b, c, st, g); }, b.c, b.st, b.g) && pass;
    return pass;
}

// each version's block sizes
std::vector<int> tt_embedding_backward_blocks(int k) {
    if (k == 1) return {64, 128, 256, 512};
    if (k == 2 || k == 9) return {256};
    if (k == 7) return {TT_EMBEDDING_BACKWARD_TC_BLOCK};
    return {128, 256, 512};
}

// the fewest bytes of one step (header)
inline double tt_embedding_backward_bytes(const TtEmbeddingBackwardBench& b) {
    const TtEmbeddingBackwardShape& s = b.a.s;
    const double U = (double)tt_embedding_backward_touched_elems(s, b.ref), w = b.a.opt == TT_EMBEDDING_BACKWARD_SGD ? 1 : b.a.opt == TT_EMBEDDING_BACKWARD_ADAGRAD ? 3 : 0;
    return 8.0 * s.nnz + 8.0 * (s.num_bags + 1) + 4.0 * s.num_bags * s.D + 4.0 * U * (1 + w) + 4.0 * (double)b.a.stash_floats +
           (b.a.opt == TT_EMBEDDING_BACKWARD_DENSE ? 4.0 * s.core_off[s.T] : 0.0);
}
// and of version k's step: the stash is read only where the version reads it
inline double tt_embedding_backward_bytes(const TtEmbeddingBackwardBench& b, int k, int block) {
    return tt_embedding_backward_bytes(b) - (tt_embedding_backward_reads_stash(k, b.a, block) ? 0.0 : 4.0 * (double)b.a.stash_floats);
}

// ----------------------------------------------------------------------------------------------

#ifndef NO_MAIN
// the op's own flags (the shape's are in TtEmbeddingConfig)
struct TtEmbeddingBackwardFlags {
    std::string distinct = "on", optimizer = "sgd";
    double lr = 0.05, eps = 1e-8;
    int opt = TT_EMBEDDING_BACKWARD_SGD;   // the optimizer's TT_EMBEDDING_BACKWARD_* constant
};

// the flags and their constraints; exits 2 naming a broken one
void tt_embedding_backward_parse(Cli& cli, TtEmbeddingConfig& c, TtEmbeddingBackwardFlags& f, int argc, char** argv) {
    tt_embedding_add_flags(cli, c, f.distinct);
    tt_embedding_add_stash_flag(cli, c);
    cli.add_choice("optimizer", &f.optimizer, {"dense", "sgd", "adagrad"}, "what to do with the summed gradient");
    cli.add_double("lr", &f.lr, "learning rate (sgd, adagrad)");
    cli.add_double("eps", &f.eps, "Adagrad epsilon");
    cli.constraints = std::string(TT_EMBEDDING_CONSTRAINTS) +
        ";\n  tables * sum(p) < 2^31; T * tables * B * L < 2^31; eps > 0.\n"
        "  Versions 4, 5 and 8 are retired (see the header). Version 7 (the default) runs every shape; version 9\n"
        "  every shape whose per-lookup buffers fit 32 GB, at 256 threads per block; version 1 only while its explicit sums\n"
        "  stay under 4e9 terms; versions 3 and 6 need their block's shared memory and at most 512 threads per block\n"
        "  (asked for by number where it cannot run: exit 2; `all` skips it with the reason).";
    cli.parse(argc, argv);
#ifdef ENABLE_BF16
    fail_args("tt_embedding_backward has no bf16 mode: FBTT's cores and optimizer state are fp32; run ./tt_embedding_backward");
#endif
    tt_embedding_backward_drop_retired(cli);
    f.opt = f.optimizer == "dense" ? TT_EMBEDDING_BACKWARD_DENSE : f.optimizer == "sgd" ? TT_EMBEDDING_BACKWARD_SGD : TT_EMBEDDING_BACKWARD_ADAGRAD;
}

int main(int argc, char** argv) {
    TtEmbeddingConfig c;
    TtEmbeddingBackwardFlags f;
    Cli cli("tt_embedding_backward",
            "Backward of a tensor-train embedding bag with the optimizer step: core gradients from the pooled\n"
            "gradient dY, then dense (write dG), SGD or elementwise Adagrad on the cores (FBTT-Embedding's layout).",
            9, 7);
    tt_embedding_backward_parse(cli, c, f, argc, argv);
    TtEmbeddingBackwardShape s;
    const TtEmbeddingInputs in = tt_embedding_inputs(cli, "tt_embedding_backward", c, f.distinct, true, [&](const TtEmbeddingConfig& cc) {
        const std::string err = tt_embedding_backward_check_config(cc, f.lr, f.eps);
        if (!err.empty()) fail_args("%s", err.c_str());
        s = tt_embedding_backward_make_shape(cc.p, cc.q, cc.ranks, cc.E, cc.tables, cc.B);
        s.nnz = (int)cc.nnz();   // (below 2^31: checked)
        int64_t off[TT_EMBEDDING_BACKWARD_MAX_T];
        return tt_embedding_backward_host_bytes(s) + (cc.stash ? 4.0 * (double)tt_embedding_stash_layout(s.T, s.q, s.R, s.nnz, off) : 0.0);
    });
    TtEmbeddingBackwardBench b;
    tt_embedding_backward_setup_bench(b, cli, in, s, f.opt, f.lr, f.eps, c.stash, cuda_init());
    OpRunner r;
    r.op = "tt_embedding_backward";
    r.shape = tt_embedding_backward_shape_string(c, f.opt);
    r.flops_for = [&](int k, int block) { return tt_embedding_backward_flops_per_lookup(s, tt_embedding_backward_reads_stash(k, b.a, block)) * s.nnz; };
    r.bytes_for = [&](int k, int block) { return tt_embedding_backward_bytes(b, k, block); };
    r.blocks_for = tt_embedding_backward_blocks;
    r.skip_reason = [&](int k) { return tt_embedding_backward_skip_reason(k, s, b.a, b.a.smem_limit, cli.block); };
    r.prepare_check = [&] { tt_embedding_backward_restore(b); tt_embedding_backward_poison_outputs(b); };
    r.prepare_timing = [&] { tt_embedding_backward_restore(b); };
    r.launch = [&](int k, int block) { tt_embedding_backward(k, b.a, block); };
    r.check = [&](int k, int block) { return tt_embedding_backward_check_run(r, b, k, block); };
    r.extra = tt_embedding_per_lookup(s.nnz);
    const int rc = run_versions(cli, r);
    if (!cli.dump_dir.empty()) {
        tt_embedding_backward_download(b, b.c, b.st, b.g);
        tt_embedding_backward_dump(cli.dump_dir, c, in, s, b.ref, b.c, b.st, b.g);
    }
    tt_embedding_backward_free(b.a, b.in, b.plan);
    return rc;
}
#endif
