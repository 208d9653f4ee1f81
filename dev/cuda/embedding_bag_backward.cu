/*
Embedding bags, backward with the optimizer fused in (FBGEMM's split table-batched embedding
backward, "exact" optimizers): the pooled gradient becomes one gradient per looked-up row, summed over
the row's occurrences in the batch, and the optimizer updates that row once. Rows nobody looked up are
not touched (weights and optimizer state stay bit-identical).

Layout: embedding_bag_forward.cu's inputs (weights, D_offsets, weights_offsets, indices, table-major
offsets, optional per-sample weights), plus hash_offsets[T+1] (int64 running sum of E_t: row r of table t
has the linear id hash_offsets[t] + r) and grad_output[B][total_D] (fp32 always). With
s_l = w_l (1 unweighted, divided by the bag's length for MEAN):
  g_{t,r} = sum over occurrences l of row r in a bag (t, b) of s_l * grad_output[b][D_offsets[t] + :]
--pooling none (FBGEMM's nobag; one D, no per-sample weights): grad_output[N][D], lookup l adds grad_output[l];
every version runs it: the sort carries the lookup's position instead of its bag, the rest is shared.
--weights fp16|bf16: half tables, updated in fp32 and rounded back (--rounding stochastic, the default as in
FBGEMM: 16 Philox4x32-10 bits of (seed, step, row, column), a call per 8 weights). Every version, every optimizer.
Optimizers (lr 0.1, eps 0.1 as in FBGEMM's benchmark), once per looked-up row; state is fp32:
  dense  grad[t][r] = g  |  sgd  W -= lr * g  |  adagrad  m[t,r,d] += g^2; W -= lr * g / (sqrt(m) + eps)
  rowwise_adagrad  m[t,r] += mean_d(g^2); W -= lr * g / (sqrt(m[t,r]) + eps)       (FBGEMM's default)

Fewest bytes (inputs read once; each looked-up row's weights and state read and written once):
  bytes = 8 * N + 8 * (T*B + 1) + 4 * N (weighted) + 4 * B * total_D + sum over unique rows u of
            dense: 4 D_u | sgd: 2 D_u w | rowwise_adagrad: 2 D_u w + 8 | adagrad: 2 D_u (w + 4)   (w: 4 or 2 bytes)
  FBGEMM's default size (T=32 E=1e5 D=128 B=512 L=20, rowwise Adagrad, fp32): 332.7 MB at uniform (311,574
  unique rows of 327,680 lookups), 29.7 MB at Zipf 1.15. FBGEMM's own figure, 2 * rw / time with
  rw = 4 * B * total_D + w * B * total_D * L (176.2 MB), is printed as `fbgemm_gbps=`.
  nobag: 4 * N * D in place of 4 * B * total_D, and the first term of rw L times larger (335.5 MB).

Versions. H200, 2026-11-30, default size, rowwise Adagrad, best block, median ms (% of the copy bandwidth
measured in the same process, by the fewest bytes); every number, the sgd and large sizes: results/h200.md.
                                                                    uniform          Zipf 1.15  one row
  1  atomicAdd into a dense buffer, a flag list, then the optimizer  1.4702 (5.3%)    0.1323     0.2999
  2  CUB radix sort of linear ids, run-length encode, warp per row  0.3926 (19.9%)   0.1543     0.6674
  3  FBGEMM's hybrid: runs of 32 or more get a block per row         0.4295 (18.2%)   0.1858     0.1689
  4  fixed chunks of 32 sorted lookups per warp, ordered combines    0.2289 (34.2%)   0.1114     0.0906
  5  version 4 with the next row loaded while this one is summed     0.2521 (31.0%)   0.1221     0.0925
  6  version 5 with sub-warp rows for max D <= 64 (not run at D=128; 0.0735 on the 11M x 64 table)
  7  version 4 with 4 short pieces in flight a warp (8 at D <= 64)   0.1843 (42.5%)   0.1164     0.0971
  8  version 7 with one CUB block radix sort per table (default)     0.1546 (50.6%)   0.0902     0.0809
PyTorch (nn.EmbeddingBag sparse=True + elementwise Adagrad; no rowwise), 2026-11-30: fwd + bwd + step 2.0954 /
1.0496 ms at uniform / Zipf, its forward 0.1085 / 0.0818. Version 8 nobag (2026-12-01) 0.1896 / 0.1395; fp16 0.1833.

Lessons (profiles, launches, timing, what was tried and dropped: results/notes/embedding_bag_backward.md):
- Sorting instead of atomics (2) wins 3.7x at uniform, but a warp per unique row serialises hot rows;
  fixed chunks (4) give every warp the same work whatever the distribution, with one sort and no scan.
- More rows in flight per warp beats prefetching the next one (5: registers cost more than the overlap);
  at D <= 64, groups of 4 lanes keep 8 rows a warp (H100, D 64: fp32 0.1233 -> 0.1088 ms, fp16 0.1408 -> 0.1164).
- FBGEMM's layout is table-major, so sorting each table in one block (8) sorts them all: one ~24 us
  kernel instead of ~48 us of latency-bound device-wide passes (one large table: 8 runs as 7).
- The uniform bound: the chunks' random 512-byte row read-modify-writes (108 of 155 us, 72% of copy; bare, 87%:
  scripts/row_roof.cu); the 24 us sort is a latency chain per block (8x the blocks took as long: 6ff9214).
- Without the sort (a list per row, built with atomics: cc6632e) the same row updates ran 34% slower in lookup order
  than sorted, and every size lost (H100 uniform 0.182 -> 0.229 ms): likely the sorted order's locality.

Compile and run:
  make embedding_bag_backward       && ./embedding_bag_backward all
  ./embedding_bag_backward all --weights bf16 --T 4 --Ds 4,12,132,260 --B 37 --L 13   (_bf16 build: bf16, nearest)
  ./embedding_bag_backward all --one-row                       (every lookup of a table on one row)
  ./embedding_bag_backward --pooling none                      (one gradient row per lookup)
  ./embedding_bag_backward all --T 1 --E 1000000 --B 65536 --L 32 --alpha 0    (the large size)
*/
#include "embedding_bag.h"
#include <cub/cub.cuh>
#include <curand_kernel.h>

// ----------------------------------------------------------------------------------------------
// Tolerances. The GPU sums a row's n gradient terms in fp32 (versions 2-8 in a fixed order, version 1 in
// atomic order); the reference sums in double. A sum of n fp32 terms is off by at most (n-1) u sum|t_i|
// (u = 2^-24) and in practice by about sqrt(n) u sum|t_i| or less (independent roundings; Higham's rule
// of thumb). The check allows, per element,
//   err(g) <= (2 sqrt(n) + 4) u sum_i |t_i|        (+4: the scale w_l / L_bag and the product round too)
// and carries that bound through the optimizer's formula to the weights and the state (first-order terms,
// plus a few u for each fp32 operation the kernel does after the sum, plus the fp32 output rounding), then
// doubles it. See embedding_bag_backward_apply_row; half weights: embedding_bag_backward_round_row. A dropped lookup in a run of
// 10,240 (the one-row input) still moves a weight by several times this bound (tests/ checks it).
static const double EMBEDDING_BAG_BACKWARD_U = 0x1.0p-24;
static const double EMBEDDING_BAG_BACKWARD_OUT_RTOL = 0x1.0p-23;  // the reference's and the GPU's fp32 rounding
static const double EMBEDDING_BAG_BACKWARD_ATOL = 1e-7;            // a floor for values near 0

enum class EmbeddingBagBackwardOpt { dense = 0, sgd = 1, rowwise_adagrad = 2, adagrad = 3 };
static const char* const EMBEDDING_BAG_BACKWARD_OPT_NAMES[] = {"dense", "sgd", "rowwise_adagrad", "adagrad"};

static const int EMBEDDING_BAG_BACKWARD_LONG_RUN = 32;   // version 3: FBGEMM's max_segment_length_per_warp
static const int EMBEDDING_BAG_BACKWARD_MAX_D = 1024;     // versions 2-8 hold a row in registers: D <= 1024

// ----------------------------------------------------------------------------------------------
// inputs: the bags, layout and flags of embedding_bag.h (shared with the forward, so a seed gives both
// ops the same bags), plus grad_output; the optimizer's parameters

// weights, stochastic: the tables' type and how updated half weights round (embedding_bag.h); seed, step: the
// Philox key and the counter's step word (a training loop would count its steps; the bench runs step 1)
struct EmbeddingBagBackwardParams {
    EmbeddingBagBackwardOpt opt = EmbeddingBagBackwardOpt::rowwise_adagrad;
    double lr = 0.1, eps = 0.1;
    EmbeddingBagWeights weights = EmbeddingBagWeights::fp32;
    bool stochastic = true;
    uint64_t seed = 0;
    uint32_t step = 1;
};

struct EmbeddingBagBackwardInputs : EmbeddingBagInputs {
    std::vector<float> grad_output;         // B * total_D; nobag: N * D
};

// grad_output from a stream of its own (the tables and the optimizer state are not made here: they are a
// function of (seed, position), filled on the GPU by embedding_bag_backward_hash01)
inline void embedding_bag_backward_make_grad(EmbeddingBagBackwardInputs& in, uint64_t seed) {
    Rng grad_rng(seed ^ 0x6BAD6BAD0DDBA11ull);
    in.grad_output = make_random_floats((size_t)(in.out_rows() * in.out_cols()), grad_rng, -1.f, 1.f);
}

inline EmbeddingBagBackwardInputs embedding_bag_backward_make_inputs(const EmbeddingBagConfig& c, uint64_t seed) {
    EmbeddingBagBackwardInputs in;
    static_cast<EmbeddingBagInputs&>(in) = embedding_bag_make_inputs(c, seed);
    embedding_bag_backward_make_grad(in, seed);
    return in;
}

// embedding_bag_validate, and: positions in the sorted lookups are 32-bit; one grad_output row per bag
// (nobag: per lookup)
inline std::string embedding_bag_backward_validate(const EmbeddingBagBackwardInputs& in) {
    std::string bad = embedding_bag_validate(in);
    if (!bad.empty()) return bad;
    if ((int64_t)in.indices.size() >= INT32_MAX)
        return std::to_string(in.indices.size()) + " lookups: at most 2^31 - 1 (positions in the sorted lookups are 32-bit)";
    if (in.grad_output.size() != (size_t)(in.out_rows() * in.out_cols()))
        return "grad_output has " + std::to_string(in.grad_output.size()) + " entries, expected " + (in.nobag ? "N*D" : "B*total_D") +
               " = " + std::to_string(in.out_rows() * in.out_cols());
    return "";
}

// The initial tables and optimizer state: uniform from (seed, stream, position) with a counter-based
// hash, the same on the host and the GPU, so that tables of 10^9 elements are filled on the GPU and the
// reference computes only the rows it needs. 24 random bits: exact in fp32. Streams: 1 weights in
// [-1, 1), 2 the optimizer state in [0, 1).
__host__ __device__ inline uint64_t embedding_bag_backward_mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
__host__ __device__ inline float embedding_bag_backward_hash01(uint64_t seed, uint64_t stream, uint64_t i) {
    uint64_t z = embedding_bag_backward_mix(seed + 0x9E3779B97F4A7C15ull * (stream + 1));
    z = embedding_bag_backward_mix(z + 0x9E3779B97F4A7C15ull * (i + 1));
    return (float)(z >> 40) * 0x1.0p-24f;
}
__host__ __device__ inline float embedding_bag_backward_initial_weight(uint64_t seed, int64_t e) {
    return 2.0f * embedding_bag_backward_hash01(seed, 1, (uint64_t)e) - 1.0f;
}
__host__ __device__ inline float embedding_bag_backward_initial_state(uint64_t seed, int64_t i) {
    return embedding_bag_backward_hash01(seed, 2, (uint64_t)i);
}

// ----------------------------------------------------------------------------------------------
// the touched rows: every (table, row) looked up at least once, in linear-id order (what the sort gives),
// with its occurrences; the compact layout the check gathers them into

struct EmbeddingBagBackwardRows {
    std::vector<int64_t> linear, row, count, first;  // U each; first: into occ
    std::vector<int> table;
    std::vector<int64_t> col;                        // U+1: the compact offset of row u (running sum of D)
    std::vector<int64_t> occ;                        // lookup positions grouped by row (ascending within a row)
    std::vector<int32_t> bag_of;                     // N: the bag t*B + b of each lookup
    int64_t max_count = 0;
    int64_t U() const { return (int64_t)linear.size(); }
};

inline EmbeddingBagBackwardRows embedding_bag_backward_touched_rows(const EmbeddingBagBackwardInputs& in) {
    EmbeddingBagBackwardRows r;
    const int64_t N = in.N();
    r.bag_of.resize((size_t)N);
    std::vector<std::pair<int64_t, int64_t>> lin_pos((size_t)N);
    for (int64_t bag = 0; bag < (int64_t)in.T * in.B; bag++) {
        const int t = (int)(bag / in.B);
        for (int64_t l = in.offsets[bag]; l < in.offsets[bag + 1]; l++) {
            r.bag_of[l] = (int32_t)bag;
            lin_pos[l] = {in.hash_offsets[t] + in.indices[l], l};
        }
    }
    std::sort(lin_pos.begin(), lin_pos.end());
    r.col.push_back(0);
    for (int64_t i = 0; i < N; i++) {
        r.occ.push_back(lin_pos[i].second);
        if (i == 0 || lin_pos[i].first != lin_pos[i - 1].first) {
            const int64_t lin = lin_pos[i].first;
            const int t = (int)(std::upper_bound(in.hash_offsets.begin(), in.hash_offsets.end(), lin) - in.hash_offsets.begin()) - 1;
            r.linear.push_back(lin);
            r.table.push_back(t);
            r.row.push_back(lin - in.hash_offsets[t]);
            r.first.push_back(i);
            r.count.push_back(0);
            r.col.push_back(r.col.back() + in.D(t));
        }
        r.count.back()++;
        r.max_count = std::max(r.max_count, r.count.back());
    }
    return r;
}

// the scale of lookup l in bag `bag`: its per-sample weight, divided by the bag's length for MEAN
inline double embedding_bag_backward_scale(const EmbeddingBagBackwardInputs& in, int64_t bag, int64_t l) {
    double s = in.per_sample_weights.empty() ? 1.0 : (double)in.per_sample_weights[l];
    if (in.mean) s /= (double)(in.offsets[bag + 1] - in.offsets[bag]);
    return s;
}

// ----------------------------------------------------------------------------------------------
// CPU reference: the row gradients in double, then one optimizer step per row in double, each output
// with its tolerance (the bound of the header's tolerance note, per element)

// One row's step. g, A: the row gradient and sum_i |t_i| per column (double); n: the row's lookups;
// w: its weights, m_row (rowwise) or m (adagrad, D values) its state. Writes the new weights / state /
// dense gradient and their tolerances (only those the optimizer has).
inline void embedding_bag_backward_round_row(const EmbeddingBagBackwardParams& p, int D, int64_t lin, float* w_out, float* w_tol);

inline void embedding_bag_backward_apply_row(const EmbeddingBagBackwardParams& p, int D, int64_t n, const double* g,
                                             const double* A, const float* w, float m_row, const float* m,
                                             float* w_out, float* w_tol, float* m_out, float* m_tol,
                                             float* g_out, float* g_tol, int64_t lin = 0) {
    const double u = EMBEDDING_BAG_BACKWARD_U, r_out = EMBEDDING_BAG_BACKWARD_OUT_RTOL, tiny = EMBEDDING_BAG_BACKWARD_ATOL;
    const double lr = p.lr, eps = p.eps;
    auto eg = [&](int d) { return (2.0 * std::sqrt((double)n) + 4.0) * u * A[d]; };   // bound on |g_gpu - g|
    // bound on |sqrt(m_gpu) - sqrt(m)| given |m_gpu - m| <= dm (no singularity at m = 0)
    auto dsqrt = [](double m_, double dm) { return m_ > 0.0 ? std::min(dm / (2.0 * std::sqrt(m_)), std::sqrt(dm)) : std::sqrt(dm); };
    switch (p.opt) {
        case EmbeddingBagBackwardOpt::dense:
            for (int d = 0; d < D; d++) {
                g_out[d] = (float)g[d];
                g_tol[d] = (float)(2.0 * eg(d) + 0x1.0p-23 * std::fabs(g[d]) + tiny);
            }
            break;
        case EmbeddingBagBackwardOpt::sgd:
            for (int d = 0; d < D; d++) {
                const double wn = (double)w[d] - lr * g[d];
                w_out[d] = (float)wn;
                w_tol[d] = (float)(2.0 * (lr * eg(d) + 2.0 * u * (std::fabs(w[d]) + lr * std::fabs(g[d]))) + r_out * std::fabs(wn) + tiny);
            }
            break;
        case EmbeddingBagBackwardOpt::adagrad:
            for (int d = 0; d < D; d++) {
                const double e = eg(d), gd = g[d];
                const double mn = (double)m[d] + gd * gd;
                const double dm = 2.0 * std::fabs(gd) * e + e * e + 2.0 * u * ((double)m[d] + gd * gd);
                const double den = std::sqrt(mn) + eps, f = gd / den;
                const double df = e / den + std::fabs(gd) * dsqrt(mn, dm) / (den * den) + 4.0 * u * std::fabs(f);
                const double wn = (double)w[d] - lr * f;
                w_out[d] = (float)wn;
                w_tol[d] = (float)(2.0 * (lr * df + 2.0 * u * (std::fabs(w[d]) + lr * std::fabs(f))) + r_out * std::fabs(wn) + tiny);
                m_out[d] = (float)mn;
                m_tol[d] = (float)(2.0 * dm + 0x1.0p-23 * mn + tiny);
            }
            break;
        case EmbeddingBagBackwardOpt::rowwise_adagrad: {
            double S = 0.0, dS = 0.0;
            for (int d = 0; d < D; d++) {
                const double e = eg(d);
                S += g[d] * g[d];
                dS += 2.0 * std::fabs(g[d]) * e + e * e;
            }
            dS += (D + 1) * u * S;                                    // the fp32 sum of D squares
            const double mn = (double)m_row + S / D;
            const double dm = dS / D + 3.0 * u * ((double)m_row + S / D);
            const double den = std::sqrt(mn) + eps, mult = lr / den;
            const double dmult = lr * dsqrt(mn, dm) / (den * den) + 4.0 * u * mult;
            for (int d = 0; d < D; d++) {
                const double wn = (double)w[d] - mult * g[d];
                w_out[d] = (float)wn;
                w_tol[d] = (float)(2.0 * (mult * eg(d) + std::fabs(g[d]) * dmult + 2.0 * u * (std::fabs(w[d]) + mult * std::fabs(g[d]))) +
                                   r_out * std::fabs(wn) + tiny);
            }
            m_out[0] = (float)mn;
            m_tol[0] = (float)(2.0 * dm + 0x1.0p-23 * mn + tiny);
            break;
        }
    }
    if (p.opt != EmbeddingBagBackwardOpt::dense && p.weights != EmbeddingBagWeights::fp32) embedding_bag_backward_round_row(p, D, lin, w_out, w_tol);
}

// The rounding's random bits (--rounding stochastic): Philox4x32-10 (embedding_bag.h) with key = the seed and
// counter = (p, lin as 64 bits, step) gives the 8 columns 8p .. 8p+7 of linear row lin 16 bits each: column
// d takes the high (d odd) or low (d even) half of word (d % 8) / 2, placed in the top bits of the 32-bit
// word the rounding reads (bf16's decision uses 16 of them, fp16's 13; off their integer paths, P(up) is q
// to within 2^-16). One call per 8 weights: the call is 20 multiplies, about what the update costs.
inline void embedding_bag_backward_philox8_host(uint64_t seed, uint32_t step, int64_t lin, int p, uint32_t out[4]) {
    const uint32_t ctr[4] = {(uint32_t)p, (uint32_t)lin, (uint32_t)((uint64_t)lin >> 32), step};
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    embedding_bag_philox_host(ctr, key, out);
}
// the 32-bit word the rounding reads for column i (0..3) of a vector whose two Philox words are rw
__host__ __device__ inline uint32_t embedding_bag_backward_word16(uint2 rw, int i) {
    const uint32_t w = i < 2 ? rw.x : rw.y;
    return (i & 1) ? (w & 0xFFFF0000u) : (w << 16);
}
// the word of column d of row lin
inline uint32_t embedding_bag_backward_round_word_host(uint64_t seed, uint32_t step, int64_t lin, int d) {
    uint32_t out[4];
    embedding_bag_backward_philox8_host(seed, step, lin, d / 8, out);
    return embedding_bag_backward_word16(make_uint2(out[(d & 4) / 2], out[(d & 4) / 2 + 1]), d & 3);
}

// Half weights: the GPU rounds its fp32 value v, which lies within w_tol of the reference's w_out, with the
// random word of its row and column (above). Rounding with a fixed word is monotone in v,
// so every result the GPU may give lies between the roundings of the interval's ends: where they agree,
// w_out becomes that half value with tolerance 0 (bit-exact); where they differ (v near a rounding boundary:
// the order of the fp32 sums decides), the tolerance spans both, one ulp of the half type.
inline void embedding_bag_backward_round_row(const EmbeddingBagBackwardParams& p, int D, int64_t lin, float* w_out, float* w_tol) {
    uint32_t words[4] = {0u, 0u, 0u, 0u};
    for (int d = 0; d < D; d++) {
        if (p.stochastic && d % 8 == 0) embedding_bag_backward_philox8_host(p.seed, p.step, lin, d / 8, words);
        const uint32_t r = p.stochastic ? embedding_bag_backward_word16(make_uint2(words[(d & 4) / 2], words[(d & 4) / 2 + 1]), d & 3) : 0u;
        const double c = w_out[d], t = (double)w_tol[d] + 0x1.0p-23 * std::fabs(c);   // + the reference's own fp32 rounding
        float lo = (float)(c - t), hi = (float)(c + t);
        if ((double)lo > c - t) lo = std::nextafter(lo, -INFINITY);
        if ((double)hi < c + t) hi = std::nextafter(hi, INFINITY);
        const float rc = embedding_bag_half_to_float(embedding_bag_round_half(w_out[d], p.weights, p.stochastic, r), p.weights);
        const float rl = embedding_bag_half_to_float(embedding_bag_round_half(lo, p.weights, p.stochastic, r), p.weights);
        const float rh = embedding_bag_half_to_float(embedding_bag_round_half(hi, p.weights, p.stochastic, r), p.weights);
        w_out[d] = rc;
        w_tol[d] = std::max(rh - rc, rc - rl);
    }
}

// The reference step: for every touched row, g and sum|t| in double over its lookups (in position order),
// then the optimizer. w0(e): the initial weight at flat position e (as the GPU sees it, rounded to the weights' type);
// m0(i): the initial state at i (linear row id for rowwise, flat position for adagrad). Results are compact:
// row u's D_u values start at rows.col[u] (the rowwise state: one value at u).
struct EmbeddingBagBackwardReference {
    EmbeddingBagBackwardRows rows;
    std::vector<float> w, w_tol, m, m_tol, grad, grad_tol;
};

template <class W0, class M0>
EmbeddingBagBackwardReference embedding_bag_backward_cpu(const EmbeddingBagBackwardInputs& in, const EmbeddingBagBackwardParams& p,
                                                         W0 w0, M0 m0) {
    EmbeddingBagBackwardReference ref;
    ref.rows = embedding_bag_backward_touched_rows(in);
    const EmbeddingBagBackwardRows& R = ref.rows;
    const int64_t U = R.U(), C = R.col.back();
    const bool dense = p.opt == EmbeddingBagBackwardOpt::dense;
    const bool rowwise = p.opt == EmbeddingBagBackwardOpt::rowwise_adagrad, adagrad = p.opt == EmbeddingBagBackwardOpt::adagrad;
    if (dense) { ref.grad.resize(C); ref.grad_tol.resize(C); }
    else { ref.w.resize(C); ref.w_tol.resize(C); }
    if (rowwise) { ref.m.resize(U); ref.m_tol.resize(U); }
    if (adagrad) { ref.m.resize(C); ref.m_tol.resize(C); }
    const int total_D = in.total_D();
    std::vector<double> g, A;
    std::vector<float> w, m;
    for (int64_t u = 0; u < U; u++) {
        const int t = R.table[u], D = in.D(t);
        g.assign(D, 0.0);
        A.assign(D, 0.0);
        for (int64_t i = R.first[u]; i < R.first[u] + R.count[u]; i++) {
            const int64_t l = R.occ[i], bag = R.bag_of[l], b = bag % in.B;
            const double s = embedding_bag_backward_scale(in, bag, l);
            const float* go = in.nobag ? in.grad_output.data() + l * D : in.grad_output.data() + b * total_D + in.D_offsets[t];
            for (int d = 0; d < D; d++) {
                const double term = s * (double)go[d];
                g[d] += term;
                A[d] += std::fabs(term);
            }
        }
        const int64_t wrow = in.weights_offsets[t] + R.row[u] * D, c = R.col[u];
        w.resize(D);
        m.resize(D);
        if (!dense) for (int d = 0; d < D; d++) w[d] = w0(wrow + d);
        if (adagrad) for (int d = 0; d < D; d++) m[d] = m0(wrow + d);
        const float m_row = rowwise ? m0(R.linear[u]) : 0.0f;
        float* m_out = rowwise ? &ref.m[u] : (adagrad ? &ref.m[c] : nullptr);
        float* m_tol = rowwise ? &ref.m_tol[u] : (adagrad ? &ref.m_tol[c] : nullptr);
        embedding_bag_backward_apply_row(p, D, R.count[u], g.data(), A.data(), w.data(), m_row, m.data(),
                                         dense ? nullptr : &ref.w[c], dense ? nullptr : &ref.w_tol[c], m_out, m_tol,
                                         dense ? &ref.grad[c] : nullptr, dense ? &ref.grad_tol[c] : nullptr, R.linear[u]);
    }
    return ref;
}

// ----------------------------------------------------------------------------------------------
// bytes: ours (the header's formula) and FBGEMM's benchmark figure

inline double embedding_bag_backward_bytes(const EmbeddingBagBackwardInputs& in, const EmbeddingBagBackwardRows& rows,
                                           EmbeddingBagBackwardOpt opt, int wbytes = 4) {
    const double N = (double)in.N();
    double bytes = 8.0 * N + 8.0 * ((double)in.T * in.B + 1) + 4.0 * (double)in.out_rows() * in.out_cols();
    if (!in.per_sample_weights.empty()) bytes += 4.0 * N;
    for (int64_t u = 0; u < rows.U(); u++) {
        const double D = in.D(rows.table[u]);
        switch (opt) {
            case EmbeddingBagBackwardOpt::dense: bytes += 4.0 * D; break;
            case EmbeddingBagBackwardOpt::sgd: bytes += 2.0 * D * wbytes; break;
            case EmbeddingBagBackwardOpt::rowwise_adagrad: bytes += 2.0 * D * wbytes + 8.0; break;
            case EmbeddingBagBackwardOpt::adagrad: bytes += 2.0 * D * (wbytes + 4.0); break;
        }
    }
    return bytes;
}

// FBGEMM's rw at the nominal bag length L (the backward's figure is 2 * rw / time; nobag: the gradient is
// L times larger too)
inline double embedding_bag_backward_fbgemm_rw(const EmbeddingBagBackwardInputs& in, int L, int wbytes = 4) {
    return 4.0 * in.B * in.total_D() * (in.nobag ? L : 1) + (double)wbytes * in.B * in.total_D() * L;
}

// ----------------------------------------------------------------------------------------------
// helpers shared by the host (tests) and the GPU kernels of versions 4-8: how the sorted lookups are cut
// into chunks, pieces and runs

// the number of bits the largest linear row id needs (at least 1): the sorts look at no others
__host__ __device__ inline int embedding_bag_backward_key_bits(int64_t num_rows) {
    int bits = 1;
    while (bits < 63 && ((num_rows - 1) >> bits) != 0) bits++;
    return bits;
}
__host__ __device__ inline int64_t embedding_bag_backward_min64(int64_t a, int64_t b) { return a < b ? a : b; }
__host__ __device__ inline int embedding_bag_backward_ctz(unsigned x) {   // x != 0
#ifdef __CUDA_ARCH__
    return __ffs((int)x) - 1;
#else
    return __builtin_ctz(x);
#endif
}
__host__ __device__ inline int embedding_bag_backward_popc(unsigned x) {
#ifdef __CUDA_ARCH__
    return __popc(x);
#else
    return __builtin_popcount(x);
#endif
}

// A chunk holds lookups [c*C, min(c*C + C, N)) of the sorted order, cnt of them; bit i of `starts` /
// `ends` is set when its lookup i is the first / last of its run (its row's lookups) in the whole order.
// A piece is a maximal stretch of one run inside the chunk. The piece that begins at `begin` (< cnt)
// ends at the first run end at or after it, or at the chunk's last lookup.
__host__ __device__ inline int embedding_bag_backward_piece_end(unsigned ends, int cnt, int begin) {
    const unsigned bits = (ends | (1u << (cnt - 1))) & (0xFFFFFFFFu << begin);
    return embedding_bag_backward_ctz(bits);
}
// A piece is the whole run (the chunk finishes the row) when it begins at a run start and ends at a run
// end. Otherwise it is a partial: the HEAD of the chunk (slot 0, begin == 0, its run began in an earlier
// chunk) or its TAIL (slot 1, it begins its run and the run goes on past the chunk).
__host__ __device__ inline bool embedding_bag_backward_piece_complete(unsigned starts, unsigned ends, int begin, int end) {
    return ((starts >> begin) & 1u) && ((ends >> end) & 1u);
}
__host__ __device__ inline int embedding_bag_backward_piece_slot(unsigned starts, int begin) { return (int)((starts >> begin) & 1u); }

// does the run of `key` go on past chunk x (is the first lookup of chunk x+1 also `key`)?
template <class K>
__host__ __device__ inline bool embedding_bag_backward_continues(const K* keys, int64_t N, int64_t C, int64_t x, K key) {
    const int64_t next = (x + 1) * C;
    return next < N && keys[next] == key;
}
// chunk c owns a run that crosses chunks when its last lookup's run begins inside c and goes on past it
// (c then holds that run's TAIL partial; the following chunks up to the run's last hold HEAD partials)
template <class K>
__host__ __device__ inline bool embedding_bag_backward_is_owner(const K* keys, int64_t N, int64_t C, int64_t c) {
    const int64_t first = c * C;
    if (first >= N) return false;
    const int64_t last = embedding_bag_backward_min64(first + C, N) - 1;
    const K key = keys[last];
    return last + 1 < N && keys[last + 1] == key && (first == 0 || keys[first - 1] != key);
}

// One round of probes of embedding_bag_backward_last_chunk: lane l probes x = base + 2^l (gallop) or
// x = base + (l + 1) * step, and answers f(x) for x < limit (false past it)
template <class Probe>
struct EmbeddingBagBackwardProbes {
    const Probe& f;
    int64_t base, step, limit;
    bool gallop;
#pragma nv_exec_check_disable
    __host__ __device__ bool operator()(int l) const {
        if (gallop && l >= 31) return false;
        const int64_t x = gallop ? base + ((int64_t)1 << l) : base + (int64_t)(l + 1) * step;
        return x < limit && f(x);
    }
};

// The last chunk of a run owned by chunk oc: the first x > oc where f(x) = "the run goes on past chunk x"
// is false (f(oc) is true, f is true then false, f(num_chunks-1) is false). 32 probes at a time: first at
// oc + 1, 2, 4, ..., 2^30, then 32 evenly spaced probes that cut the bracket 32-fold per round, so a run
// over S chunks costs about 1 + log32(S) rounds of loads instead of S. `ballot(probes)` returns the 32-bit
// mask of probes(lane) over the lanes 0..31: a warp ballot on the GPU, a loop on the host.
#pragma nv_exec_check_disable
template <class Probe, class Ballot>
__host__ __device__ inline int64_t embedding_bag_backward_last_chunk(int64_t oc, int64_t num_chunks, const Probe& f, Ballot ballot) {
    const unsigned m = ballot(EmbeddingBagBackwardProbes<Probe>{f, oc, 0, num_chunks, true});
    const int l0 = embedding_bag_backward_ctz(~m);                       // the first false probe (<= 31)
    int64_t lo = l0 == 0 ? oc : oc + ((int64_t)1 << (l0 - 1));          // f(lo) true
    int64_t hi = embedding_bag_backward_min64(oc + ((int64_t)1 << l0), num_chunks - 1);   // f(hi) false
    while (hi - lo > 1) {
        const int64_t step = (hi - lo + 31) / 32;
        const unsigned m2 = ballot(EmbeddingBagBackwardProbes<Probe>{f, lo, step, hi, false});
        const int k = embedding_bag_backward_popc(m2);                   // probes 0..k-1 are true
        const int64_t base = lo;
        lo = base + (int64_t)k * step;
        hi = embedding_bag_backward_min64(base + (int64_t)(k + 1) * step, hi);
    }
    return hi;
}

// ----------------------------------------------------------------------------------------------
// GPU: what every version gets (device pointers; sizes from the host)

struct EmbeddingBagBackwardArgs {
    void* weights;                   // wtype elements, updated in place (not read for dense)
    float* state;                    // rowwise: num_rows; adagrad: num_weights; else nullptr
    float* grad_weights;             // dense: num_weights fp32, arrives zeroed; else nullptr
    const int64_t* weights_offsets;  // T
    const int* D_offsets;            // T+1
    const int64_t* hash_offsets;     // T+1
    const int64_t* indices;          // N
    const int64_t* offsets;          // T*B+1
    const float* per_sample_weights; // N or nullptr
    const float* grad_output;        // B * total_D; nobag: N * D
    int T, B, total_D, max_D, key_bits;
    int64_t N, num_rows, num_weights;
    bool mean;
    bool nobag;                      // grad_output row per lookup; the sorted values are lookup positions, not bags
    EmbeddingBagBackwardOpt opt;
    float lr, eps;
    EmbeddingBagWeights wtype;       // the weights' type; half weights round stochastically or to nearest
    bool stochastic;
    uint64_t round_seed;             // Philox key
    uint32_t step;                   // Philox counter word 2
};

// four consecutive fp32 elements (16-byte access)
__device__ __forceinline__ float4 embedding_bag_backward_load4(const float* p) { return *reinterpret_cast<const float4*>(p); }
__device__ __forceinline__ float4 embedding_bag_backward_ldg4(const float* p) { return __ldg(reinterpret_cast<const float4*>(p)); }
__device__ __forceinline__ void embedding_bag_backward_store4(float* p, float4 v) { *reinterpret_cast<float4*>(p) = v; }

// The weights at flat position e (a multiple of 4 for the vector forms) as fp32, by their C++ type WT
// (float, __half, __nv_bfloat16): every kernel that touches weights is instantiated per type and the launch
// picks one (embedding_bag_backward), so the fp32 instantiation is the code before half weights existed and
// the half ones carry no branch on the type. Half weights load 8 bytes per 4 and convert exactly; stores
// round (embedding_bag_round_half: integer arithmetic on the fp32 bits) with 16 random bits per weight
// (embedding_bag_backward_row_bits: one Philox call per 8 weights) and write 8 bytes.
// four half weights as loaded (element 0 in the low half of r.x), widened to fp32
template <class WT>
__device__ __forceinline__ float4 embedding_bag_backward_widen4(uint2 r) {
    if constexpr (std::is_same_v<WT, __nv_bfloat16>)
        return make_float4(__uint_as_float(r.x << 16), __uint_as_float(r.x & 0xFFFF0000u), __uint_as_float(r.y << 16),
                           __uint_as_float(r.y & 0xFFFF0000u));
    const float2 lo = __half22float2(*reinterpret_cast<const __half2*>(&r.x)), hi = __half22float2(*reinterpret_cast<const __half2*>(&r.y));
    return make_float4(lo.x, lo.y, hi.x, hi.y);
}
__device__ __forceinline__ uint2 embedding_bag_backward_load_h4(const EmbeddingBagBackwardArgs& a, int64_t e) {
    return *reinterpret_cast<const uint2*>((const uint16_t*)a.weights + e);
}
template <class WT>
__host__ __device__ constexpr EmbeddingBagWeights embedding_bag_backward_wtype() {
    return std::is_same_v<WT, float> ? EmbeddingBagWeights::fp32
                                     : (std::is_same_v<WT, __half> ? EmbeddingBagWeights::fp16 : EmbeddingBagWeights::bf16);
}
// the Philox words of columns 8p .. 8p+7 of linear row lin (embedding_bag_backward_round_word_host's map)
__device__ __forceinline__ uint4 embedding_bag_backward_philox8(const EmbeddingBagBackwardArgs& a, int64_t lin, int p) {
    return curand_Philox4x32_10(make_uint4((uint32_t)p, (uint32_t)lin, (uint32_t)((uint64_t)lin >> 32), a.step),
                                make_uint2((uint32_t)a.round_seed, (uint32_t)(a.round_seed >> 32)));
}
// The random words of a lane's VPL vectors (vector v: columns 4*c4 .. 4*c4+3, c4 = l + G*v) of row lin:
// rw[v].x holds columns 0, 1 of the vector, .y columns 2, 3 (16 bits each). A Philox call serves the
// vectors 2k and 2k+1 of the row, held by lanes l and l^1 (G is even): for each pair (v, v+1) of a lane's
// vectors the even lane computes v's call and the odd lane v+1's, and one exchange of two words gives each
// lane its halves (an unpaired last v: both lanes make the call). Every lane of the warp must call it.
template <int VPL, int G>
__device__ __forceinline__ void embedding_bag_backward_row_bits(const EmbeddingBagBackwardArgs& a, int64_t lin, int l, uint2 (&rw)[VPL]) {
    static_assert(G % 2 == 0, "the pair of a vector is in the neighbouring lane");
    const bool odd = l & 1;
#pragma unroll
    for (int v = 0; v < VPL; v += 2) {
        if (!a.stochastic) {
            rw[v] = make_uint2(0u, 0u);
            if (v + 1 < VPL) rw[v + 1] = rw[v];
        } else if (v + 1 < VPL) {
            const uint4 R = embedding_bag_backward_philox8(a, lin, (l + G * (v + (odd ? 1 : 0))) >> 1);
            uint2 send = odd ? make_uint2(R.x, R.y) : make_uint2(R.z, R.w);
            send.x = __shfl_xor_sync(0xFFFFFFFFu, send.x, 1);
            send.y = __shfl_xor_sync(0xFFFFFFFFu, send.y, 1);
            rw[v] = odd ? send : make_uint2(R.x, R.y);
            rw[v + 1] = odd ? make_uint2(R.z, R.w) : send;
        } else {
            const uint4 R = embedding_bag_backward_philox8(a, lin, (l + G * v) >> 1);
            rw[v] = odd ? make_uint2(R.z, R.w) : make_uint2(R.x, R.y);
        }
    }
}
template <class WT>
__device__ __forceinline__ void embedding_bag_backward_store_w4(const EmbeddingBagBackwardArgs& a, int64_t e, float4 v, uint2 rw) {
    if constexpr (std::is_same_v<WT, float>) {
        embedding_bag_backward_store4((float*)a.weights + e, v);
    } else {
        constexpr EmbeddingBagWeights wt = embedding_bag_backward_wtype<WT>();
        auto rnd = [&](float x, int i) { return (unsigned)embedding_bag_round_half(x, wt, a.stochastic, embedding_bag_backward_word16(rw, i)); };
        *reinterpret_cast<uint2*>((uint16_t*)a.weights + e) = make_uint2(rnd(v.x, 0) | (rnd(v.y, 1) << 16), rnd(v.z, 2) | (rnd(v.w, 3) << 16));
    }
}
// one element (version 1): column d of row lin at flat position e, its own Philox call
template <class WT>
__device__ __forceinline__ float embedding_bag_backward_load_w(const EmbeddingBagBackwardArgs& a, int64_t e) {
    if constexpr (std::is_same_v<WT, float>) return ((const float*)a.weights)[e];
    else return embedding_bag_half_to_float(((const uint16_t*)a.weights)[e], embedding_bag_backward_wtype<WT>());
}
template <class WT>
__device__ __forceinline__ void embedding_bag_backward_store_w(const EmbeddingBagBackwardArgs& a, int64_t e, int64_t lin, int d, float v) {
    if constexpr (std::is_same_v<WT, float>) {
        ((float*)a.weights)[e] = v;
    } else {
        uint32_t w = 0u;
        if (a.stochastic) {
            const uint4 R = embedding_bag_backward_philox8(a, lin, d >> 3);
            w = embedding_bag_backward_word16((d & 4) ? make_uint2(R.z, R.w) : make_uint2(R.x, R.y), d & 3);
        }
        ((uint16_t*)a.weights)[e] = embedding_bag_round_half(v, embedding_bag_backward_wtype<WT>(), a.stochastic, w);
    }
}
__device__ __forceinline__ void embedding_bag_backward_prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }
__device__ __forceinline__ float4 embedding_bag_backward_zero4() { return make_float4(0.f, 0.f, 0.f, 0.f); }
__device__ __forceinline__ void embedding_bag_backward_fma4(float4& acc, float s, const float4& x) {
    acc.x = fmaf(s, x.x, acc.x); acc.y = fmaf(s, x.y, acc.y); acc.z = fmaf(s, x.z, acc.z); acc.w = fmaf(s, x.w, acc.w);
}
__device__ __forceinline__ void embedding_bag_backward_add4(float4& acc, const float4& x) {
    acc.x += x.x; acc.y += x.y; acc.z += x.z; acc.w += x.w;
}

// the table of linear row id `lin`: the last t with hash_offsets[t] <= lin
__host__ __device__ inline int embedding_bag_backward_table_of(const int64_t* hash_offsets, int T, int64_t lin) {
    int lo = 0, hi = T;
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (hash_offsets[mid] <= lin) lo = mid; else hi = mid;
    }
    return lo;
}

// the table of a sorted lookup from its value and linear row id: pooled, the value is the bag t*B + b; nobag,
// a lookup position, so the table comes from the row id (a search over T+1 offsets that stay in L1)
__device__ __forceinline__ int embedding_bag_backward_table_of_value(const EmbeddingBagBackwardArgs& a, uint32_t val, int64_t lin) {
    return a.nobag ? embedding_bag_backward_table_of(a.hash_offsets, a.T, lin) : (int)(val / (uint32_t)a.B);
}

// ----------------------------------------------------------------------------------------------
// the optimizer, shared by versions 2-8: a row is held by G lanes, lane l owning the 4-column vectors
// l, l+G, l+2G, ... (VPL of them). Every lane of the warp calls update_row (rowwise Adagrad reduces over
// the G lanes with shuffles); `on` says whether this group really updates a row.

// Half weights stay as loaded (two registers a vector instead of four) until the update widens them.
template <int VPL>
struct EmbeddingBagBackwardRow {
    float4 w[VPL], m[VPL];
    uint2 h[VPL];
    float mrow;
    template <class WT>
    __device__ __forceinline__ float4 weights(int v) const {
        if constexpr (std::is_same_v<WT, float>) return w[v];
        else return embedding_bag_backward_widen4<WT>(h[v]);
    }
};

// LAZY_STATE (versions 7, 8): Adagrad's per-element state is loaded in update_row, when it is needed, instead of
// being held in registers (VPL more float4s) while the gradient rows are summed
template <class WT, int VPL, int G, bool LAZY_STATE = false>
__device__ __forceinline__ void embedding_bag_backward_load_row(const EmbeddingBagBackwardArgs& a, bool on, int D, int64_t wrow,
                                                                int64_t lin, int l, EmbeddingBagBackwardRow<VPL>& r) {
#pragma unroll
    for (int v = 0; v < VPL; v++) {
        const int c4 = l + G * v;
        const bool in = on && 4 * c4 < D;
        const bool wl = in && a.opt != EmbeddingBagBackwardOpt::dense;
        if constexpr (std::is_same_v<WT, float>)
            r.w[v] = wl ? embedding_bag_backward_load4((const float*)a.weights + wrow + 4 * c4) : embedding_bag_backward_zero4();
        else
            r.h[v] = wl ? embedding_bag_backward_load_h4(a, wrow + 4 * c4) : make_uint2(0u, 0u);
        if (!LAZY_STATE)
            r.m[v] = (in && a.opt == EmbeddingBagBackwardOpt::adagrad) ? embedding_bag_backward_load4(a.state + wrow + 4 * c4)
                                                                        : embedding_bag_backward_zero4();
        else if (in && a.opt == EmbeddingBagBackwardOpt::adagrad)
            embedding_bag_backward_prefetch_l2(a.state + wrow + 4 * c4);   // from L2 when update_row loads it
    }
    r.mrow = (on && a.opt == EmbeddingBagBackwardOpt::rowwise_adagrad) ? a.state[lin] : 0.0f;
}

template <class WT, int VPL, int G, bool LAZY_STATE = false>
__device__ __forceinline__ void embedding_bag_backward_update_row(const EmbeddingBagBackwardArgs& a, bool on, int D, int64_t wrow,
                                                                  int64_t lin, int l, const float4 (&g)[VPL],
                                                                  const EmbeddingBagBackwardRow<VPL>& r, const uint2* bits = nullptr) {
    const unsigned full = 0xFFFFFFFFu;
    uint2 rw[VPL] = {};                                      // half weights: the rounding's random bits (bits: made by the caller)
    if (bits != nullptr) {
#pragma unroll
        for (int v = 0; v < VPL; v++) rw[v] = bits[v];
    } else if constexpr (!std::is_same_v<WT, float>) {
        if (a.opt != EmbeddingBagBackwardOpt::dense) embedding_bag_backward_row_bits<VPL, G>(a, lin, l, rw);
    }
    if (a.opt == EmbeddingBagBackwardOpt::rowwise_adagrad) {
        float ss = 0.0f;
#pragma unroll
        for (int v = 0; v < VPL; v++)
            if (4 * (l + G * v) < D) ss += g[v].x * g[v].x + g[v].y * g[v].y + g[v].z * g[v].z + g[v].w * g[v].w;
#pragma unroll
        for (int o = G / 2; o > 0; o >>= 1) ss += __shfl_xor_sync(full, ss, o, G);   // the same bits in every lane
        const float mn = r.mrow + ss / (float)D;
        const float mult = a.lr / (sqrtf(mn) + a.eps);
#pragma unroll
        for (int v = 0; v < VPL; v++) {
            const int c4 = l + G * v;
            if (on && 4 * c4 < D) {
                const float4 w = r.template weights<WT>(v);
                embedding_bag_backward_store_w4<WT>(
                    a, wrow + 4 * c4, make_float4(w.x - mult * g[v].x, w.y - mult * g[v].y, w.z - mult * g[v].z, w.w - mult * g[v].w), rw[v]);
            }
        }
        if (on && l == 0) a.state[lin] = mn;
    } else if (a.opt == EmbeddingBagBackwardOpt::adagrad) {
#pragma unroll
        for (int v = 0; v < VPL; v++) {
            const int c4 = l + G * v;
            if (!(on && 4 * c4 < D)) continue;
            float4 m = LAZY_STATE ? embedding_bag_backward_load4(a.state + wrow + 4 * c4) : r.m[v], w = r.template weights<WT>(v);
            m.x += g[v].x * g[v].x; m.y += g[v].y * g[v].y; m.z += g[v].z * g[v].z; m.w += g[v].w * g[v].w;
            w.x -= a.lr * g[v].x / (sqrtf(m.x) + a.eps);
            w.y -= a.lr * g[v].y / (sqrtf(m.y) + a.eps);
            w.z -= a.lr * g[v].z / (sqrtf(m.z) + a.eps);
            w.w -= a.lr * g[v].w / (sqrtf(m.w) + a.eps);
            embedding_bag_backward_store4(a.state + wrow + 4 * c4, m);
            embedding_bag_backward_store_w4<WT>(a, wrow + 4 * c4, w, rw[v]);
        }
    } else if (a.opt == EmbeddingBagBackwardOpt::sgd) {
#pragma unroll
        for (int v = 0; v < VPL; v++) {
            const int c4 = l + G * v;
            if (on && 4 * c4 < D) {
                const float4 w = r.template weights<WT>(v);
                embedding_bag_backward_store_w4<WT>(
                    a, wrow + 4 * c4, make_float4(w.x - a.lr * g[v].x, w.y - a.lr * g[v].y, w.z - a.lr * g[v].z, w.w - a.lr * g[v].w), rw[v]);
            }
        }
    } else {
#pragma unroll
        for (int v = 0; v < VPL; v++) {
            const int c4 = l + G * v;
            if (on && 4 * c4 < D) embedding_bag_backward_store4(a.grad_weights + wrow + 4 * c4, g[v]);
        }
    }
}

// ----------------------------------------------------------------------------------------------
// Version 1: atomics. One warp per bag: for each lookup, lane 0 claims the row (flag 0 -> 1; the first
// claimant appends the linear id to the list) and the lanes atomicAdd s * grad_output into the row of a
// dense fp32 accumulator of the tables' shape. Then one warp per listed row applies the optimizer and
// zeroes the accumulator row and the flag, so both are zero again for the next step (the accumulator is
// zeroed once, at allocation; the list count is reset by a memset). The adds to a hot row serialize in
// L2, and their order changes from run to run: the result is not bit-reproducible.
__global__ void __launch_bounds__(512) embedding_bag_backward_kernel1_scatter(EmbeddingBagBackwardArgs a, float* acc, unsigned* flags,
                                                                              int64_t* list, unsigned* count) {
    const int64_t bag = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (bag >= (int64_t)a.T * a.B) return;                   // the whole warp
    const int t = (int)(bag / a.B), b = (int)(bag - (int64_t)t * a.B);
    const int64_t start = a.offsets[bag], end = a.offsets[bag + 1];
    const int D = a.D_offsets[t + 1] - a.D_offsets[t];
    const float* go = a.grad_output + (int64_t)b * a.total_D + a.D_offsets[t];
    const float bag_scale = (a.mean && end > start) ? 1.0f / (float)(end - start) : 1.0f;
    for (int64_t l = start; l < end; l++) {
        const int64_t row = a.indices[l];
        const float s = a.per_sample_weights != nullptr ? a.per_sample_weights[l] * bag_scale : bag_scale;
        if (lane == 0) {
            const int64_t lin = a.hash_offsets[t] + row;
            if (atomicExch(&flags[lin], 1u) == 0u) list[atomicAdd(count, 1u)] = lin;
        }
        float* dst = acc + a.weights_offsets[t] + row * D;
        const float* g = a.nobag ? a.grad_output + l * D : go;   // nobag: lookup l's own gradient row
        for (int d = lane; d < D; d += 32) atomicAdd(dst + d, s * g[d]);
    }
}

template <class WT>
__global__ void __launch_bounds__(512) embedding_bag_backward_kernel1_apply(EmbeddingBagBackwardArgs a, float* acc, unsigned* flags,
                                                                            const int64_t* list, const unsigned* count) {
    const int64_t i = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (i >= (int64_t)*count) return;                        // the whole warp
    const int64_t lin = list[i];
    const int t = embedding_bag_backward_table_of(a.hash_offsets, a.T, lin);
    const int D = a.D_offsets[t + 1] - a.D_offsets[t];
    const int64_t wrow = a.weights_offsets[t] + (lin - a.hash_offsets[t]) * D;
    float* g = acc + wrow;
    float mult = a.lr;
    if (a.opt == EmbeddingBagBackwardOpt::rowwise_adagrad) {
        float ss = 0.0f;
        for (int d = lane; d < D; d += 32) ss += g[d] * g[d];
        for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xFFFFFFFFu, ss, o);
        const float mn = a.state[lin] + ss / (float)D;
        mult = a.lr / (sqrtf(mn) + a.eps);
        __syncwarp();
        if (lane == 0) a.state[lin] = mn;
    }
    for (int d = lane; d < D; d += 32) {
        const float gd = g[d];
        g[d] = 0.0f;
        if (a.opt == EmbeddingBagBackwardOpt::dense) {
            a.grad_weights[wrow + d] = gd;
        } else if (a.opt == EmbeddingBagBackwardOpt::adagrad) {
            const float m = a.state[wrow + d] + gd * gd;
            a.state[wrow + d] = m;
            embedding_bag_backward_store_w<WT>(a, wrow + d, lin, d, embedding_bag_backward_load_w<WT>(a, wrow + d) - a.lr * gd / (sqrtf(m) + a.eps));
        } else {
            embedding_bag_backward_store_w<WT>(a, wrow + d, lin, d, embedding_bag_backward_load_w<WT>(a, wrow + d) - mult * gd);
        }
    }
    if (lane == 0) flags[lin] = 0u;
}

// ----------------------------------------------------------------------------------------------
// Versions 2 and 3 (FBGEMM's pipeline): linearize, sort, run-length encode, scan.

// one warp per bag: the warp of bag t*B + b calls f(l, bag, linear row id) for each lookup l of the bag
template <class F>
__device__ __forceinline__ void embedding_bag_backward_bag_lookups(const EmbeddingBagBackwardArgs& a, F&& f) {
    const int64_t bag = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    if (bag >= (int64_t)a.T * a.B) return;
    const int64_t hoff = a.hash_offsets[bag / a.B];
    for (int64_t l = a.offsets[bag] + (threadIdx.x & 31); l < a.offsets[bag + 1]; l += 32) f(l, bag, hoff + a.indices[l]);
}
// key = the lookup's linear row id (64-bit, as FBGEMM), value = its bag t*B + b (nobag: its position l,
// where its gradient row is)
__global__ void embedding_bag_backward_linearize64(EmbeddingBagBackwardArgs a, uint64_t* keys, uint32_t* bags) {
    embedding_bag_backward_bag_lookups(a, [&](int64_t l, int64_t bag, int64_t lin) {
        keys[l] = (uint64_t)lin;
        bags[l] = (uint32_t)(a.nobag ? l : bag);
    });
}

// MEAN, FBGEMM's way: a copy of grad_output with each bag's slice divided by the bag's length (an empty
// bag's slice passes through unscaled; nothing reads it)
__global__ void embedding_bag_backward_grad_mean(EmbeddingBagBackwardArgs a, float* go_mean) {
    const int64_t bag = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    if (bag >= (int64_t)a.T * a.B) return;
    const int t = (int)(bag / a.B), b = (int)(bag - (int64_t)t * a.B);
    const int64_t L = a.offsets[bag + 1] - a.offsets[bag];
    const float s = L > 0 ? 1.0f / (float)L : 1.0f;
    const int D = a.D_offsets[t + 1] - a.D_offsets[t];
    const int64_t off = (int64_t)b * a.total_D + a.D_offsets[t];
    for (int c4 = threadIdx.x & 31; 4 * c4 < D; c4 += 32) {
        const float4 x = embedding_bag_backward_ldg4(a.grad_output + off + 4 * c4);
        embedding_bag_backward_store4(go_mean + off + 4 * c4, make_float4(x.x * s, x.y * s, x.z * s, x.w * s));
    }
}

// acc += the sum, in order, of s_j * (lookup j's row of go, the gradient) over this lane's n lookups
// j = b .. b+n-1, the lanes of a row holding columns 4 * (l + G * v). Lookup j's bag and scale are read from
// lane j of the WIDTH-lane segment (shuffles); UNR rows are loaded before the first is added; every lane of
// the warp runs maxn, the warp's longest n.
template <int VPL, int G, int UNR, int WIDTH>
__device__ __forceinline__ void embedding_bag_backward_sum_rows(const EmbeddingBagBackwardArgs& a, const float* go, float4 (&acc)[VPL],
                                                                int n, int maxn, int b, uint32_t bt, float s, int t, int D, int l) {
    // pooled: bag b's slice of row b (the value is t*B + b); nobag: row l of the N x D gradient (the value is l)
    const float* gbase = a.nobag ? go : go + a.D_offsets[t];
    const uint32_t bt0 = a.nobag ? 0u : (uint32_t)t * (uint32_t)a.B;
    const int64_t stride = a.nobag ? D : a.total_D;
    for (int j0 = 0; j0 < maxn; j0 += UNR) {
        float4 x[UNR][VPL];
        float sc[UNR];
#pragma unroll
        for (int u = 0; u < UNR; u++) {
            const bool on = j0 + u < n;
            const int src = on ? b + j0 + u : 0;
            const uint32_t btu = __shfl_sync(0xFFFFFFFFu, bt, src, WIDTH);
            sc[u] = __shfl_sync(0xFFFFFFFFu, s, src, WIDTH);
            const float* gr = gbase + (int64_t)(on ? btu - bt0 : 0u) * stride;
#pragma unroll
            for (int v = 0; v < VPL; v++) {
                const int c4 = l + G * v;
                x[u][v] = (on && 4 * c4 < D) ? embedding_bag_backward_ldg4(gr + 4 * c4) : embedding_bag_backward_zero4();
            }
        }
#pragma unroll
        for (int u = 0; u < UNR; u++)
            if (j0 + u < n)
#pragma unroll
                for (int v = 0; v < VPL; v++) embedding_bag_backward_fma4(acc[v], sc[u], x[u][v]);
    }
}

template <int VPL>
__device__ __forceinline__ void embedding_bag_backward_zero_row(float4 (&acc)[VPL]) {
#pragma unroll
    for (int v = 0; v < VPL; v++) acc[v] = embedding_bag_backward_zero4();
}

// The sum of one run's lookups [j_begin, j_end) (positions in the sorted order) into a lane's VPL vectors:
// the lanes load 32 (bag, weight) pairs at once and broadcast them with shuffles, UNR at a time: UNR
// gradient rows are loaded before the first is added (in lookup order). Every lane of the warp runs the
// same trip counts. psw: the sorted per-sample weights, or nullptr.
template <int VPL>
__device__ __forceinline__ void embedding_bag_backward_sum_run(const EmbeddingBagBackwardArgs& a, const uint32_t* bags, const float* psw,
                                                               const float* go, int t, int D, int j_begin, int j_end, int lane,
                                                               float4 (&acc)[VPL]) {
    constexpr int UNR = VPL >= 8 ? 1 : 8 / VPL;
    for (int j0 = j_begin; j0 < j_end; j0 += 32) {
        const int j = j0 + lane;
        uint32_t bt = (uint32_t)t * (uint32_t)a.B;
        float w = 1.0f;
        if (j < j_end) {
            bt = bags[j];
            if (psw != nullptr) w = psw[j];
        }
        const int n = min(32, j_end - j0);
        embedding_bag_backward_sum_rows<VPL, 32, UNR, 32>(a, go, acc, n, n, 0, bt, w, t, D, lane);
    }
}

// Version 2: one warp per unique row (run r of the sorted keys): sum its lookups, then the optimizer.
// The grid covers N warps (the most runs there can be); warps past num_runs (on the device) return.
// SKIP_LONG (version 3's short-run kernel): runs of 32 or more are left to the block-per-row kernel.
template <class WT, int VPL, bool SKIP_LONG>
__global__ void __launch_bounds__(512) embedding_bag_backward_kernel2(EmbeddingBagBackwardArgs a, const uint64_t* run_keys,
                                                                      const int* run_starts, const int* run_lengths,
                                                                      const int* num_runs, const uint32_t* bags,
                                                                      const float* psw, const float* go) {
    const int64_t r = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (r >= *num_runs) return;                              // the whole warp
    const int start = run_starts[r], len = run_lengths[r];
    if (SKIP_LONG && len >= EMBEDDING_BAG_BACKWARD_LONG_RUN) return;
    const int64_t lin = (int64_t)run_keys[r];
    const int t = embedding_bag_backward_table_of_value(a, bags[start], lin);
    const int D = a.D_offsets[t + 1] - a.D_offsets[t];
    const int64_t wrow = a.weights_offsets[t] + (lin - a.hash_offsets[t]) * D;
    float4 acc[VPL];
#pragma unroll
    for (int v = 0; v < VPL; v++) acc[v] = embedding_bag_backward_zero4();
    embedding_bag_backward_sum_run<VPL>(a, bags, psw, go, t, D, start, start + len, lane, acc);
    EmbeddingBagBackwardRow<VPL> row;
    embedding_bag_backward_load_row<WT, VPL, 32>(a, true, D, wrow, lin, lane, row);
    embedding_bag_backward_update_row<WT, VPL, 32>(a, true, D, wrow, lin, lane, acc, row);
}

// version 3: the runs of 32 or more, listed (in any order: each is then handled by one block, so the
// result does not depend on the order)
__global__ void embedding_bag_backward_find_long(const int* run_lengths, const int* num_runs, int* long_ids, int* num_long) {
    const int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (r < *num_runs && run_lengths[r] >= EMBEDDING_BAG_BACKWARD_LONG_RUN) long_ids[atomicAdd(num_long, 1)] = (int)r;
}

// Version 3, FBGEMM's block per long row: the W warps of the block take W consecutive slices of the run,
// a shared-memory tree (fixed pairing, so deterministic) adds the W partial sums, warp 0 updates the row.
// Blocks stride over the long runs; W is a power of two.
template <class WT, int VPL>
__global__ void __launch_bounds__(512) embedding_bag_backward_kernel3_cta(EmbeddingBagBackwardArgs a, const uint64_t* run_keys,
                                                                          const int* run_starts, const int* run_lengths,
                                                                          const int* long_ids, const int* num_long,
                                                                          const uint32_t* bags, const float* psw, const float* go) {
    extern __shared__ float4 embedding_bag_backward_smem[];  // [W][VPL * 32]
    const int W = blockDim.x / 32, w = threadIdx.x / 32, lane = threadIdx.x & 31;
    const int nl = *num_long;
    for (int i = blockIdx.x; i < nl; i += gridDim.x) {
        const int r = long_ids[i];
        const int start = run_starts[r], len = run_lengths[r];
        const int64_t lin = (int64_t)run_keys[r];
        const int t = embedding_bag_backward_table_of_value(a, bags[start], lin);
        const int D = a.D_offsets[t + 1] - a.D_offsets[t];
        const int per_warp = (len + W - 1) / W;
        const int s0 = min(len, w * per_warp), s1 = min(len, s0 + per_warp);
        float4 acc[VPL];
#pragma unroll
        for (int v = 0; v < VPL; v++) acc[v] = embedding_bag_backward_zero4();
        embedding_bag_backward_sum_run<VPL>(a, bags, psw, go, t, D, start + s0, start + s1, lane, acc);
#pragma unroll
        for (int v = 0; v < VPL; v++) embedding_bag_backward_smem[(w * VPL + v) * 32 + lane] = acc[v];
        __syncthreads();
        for (int h = W / 2; h > 0; h >>= 1) {
            if (w < h)
#pragma unroll
                for (int v = 0; v < VPL; v++)
                    embedding_bag_backward_add4(embedding_bag_backward_smem[(w * VPL + v) * 32 + lane],
                                                embedding_bag_backward_smem[((w + h) * VPL + v) * 32 + lane]);
            __syncthreads();
        }
        if (w == 0) {
#pragma unroll
            for (int v = 0; v < VPL; v++) acc[v] = embedding_bag_backward_smem[v * 32 + lane];
            const int64_t wrow = a.weights_offsets[t] + (lin - a.hash_offsets[t]) * D;
            EmbeddingBagBackwardRow<VPL> row;
            embedding_bag_backward_load_row<WT, VPL, 32>(a, true, D, wrow, lin, lane, row);
            embedding_bag_backward_update_row<WT, VPL, 32>(a, true, D, wrow, lin, lane, acc, row);
        }
        __syncthreads();                                     // the shared sums are reused by the next run
    }
}

// ----------------------------------------------------------------------------------------------
// Versions 4-8: fixed chunks of the sorted lookups.

// one warp per bag: key = the linear row id in 32 bits; value = the bag t*B + b (nobag: the position l), and
// for weighted bags the per-sample weight's bits in the high half (VAL = uint64_t), so one sort carries everything
template <class VAL>
__global__ void embedding_bag_backward_linearize32(EmbeddingBagBackwardArgs a, uint32_t* keys, VAL* vals) {
    embedding_bag_backward_bag_lookups(a, [&](int64_t l, int64_t bag, int64_t lin) {
        keys[l] = (uint32_t)lin;
        if constexpr (sizeof(VAL) == 8) vals[l] = (uint64_t)bag | ((uint64_t)__float_as_uint(a.per_sample_weights[l]) << 32);
        else vals[l] = (VAL)(a.nobag ? l : bag);
    });
}

// Version 8: the sort, table by table. FBGEMM's layout is table-major (every lookup of table t comes before
// every lookup of table t+1, and table t's linear ids are below table t+1's), so sorting each table's lookups
// by row sorts them all. One block per table loads the table's lookups (up to SORT_CAPACITY), sorts (row id
// within the table, position) pairs in shared memory with CUB's block radix sort over only the bits the
// table's row ids need (17 for E = 1e5: four 5-bit passes), and writes the sorted ids with their values
// gathered by position: one kernel instead of a histogram, a scan and three passes over global memory.
// The sort is stable, as the device-wide one is, so the sorted order (and every sum's bits) is version 7's.
// A table with more lookups than a block holds is left to CUB's segmented sort, launched after this kernel:
// the kernel gives it that table's range and every other table an empty one (then it costs its launches).
// The launcher takes this path only when the tables average at most SORT_CAPACITY lookups; otherwise
// version 7's device-wide sort (one block per table over 2 million lookups would be slow).
static const int EMBEDDING_BAG_BACKWARD_SORT_THREADS = 512, EMBEDDING_BAG_BACKWARD_SORT_ITEMS = 24;   // 128 registers, no spills
static const int EMBEDDING_BAG_BACKWARD_SORT_CAPACITY = EMBEDDING_BAG_BACKWARD_SORT_THREADS * EMBEDDING_BAG_BACKWARD_SORT_ITEMS;
using EmbeddingBagBackwardTableSort =
    cub::BlockRadixSort<uint32_t, EMBEDDING_BAG_BACKWARD_SORT_THREADS, EMBEDDING_BAG_BACKWARD_SORT_ITEMS, uint32_t, 5>;

template <class VAL>
__global__ void __launch_bounds__(EMBEDDING_BAG_BACKWARD_SORT_THREADS)
    embedding_bag_backward_sort_tables(EmbeddingBagBackwardArgs a, const uint32_t* __restrict__ keys, const VAL* __restrict__ vals,
                                       uint32_t* __restrict__ keys_out, VAL* __restrict__ vals_out, int* big_begin, int* big_end) {
    constexpr int ITEMS = EMBEDDING_BAG_BACKWARD_SORT_ITEMS;
    __shared__ EmbeddingBagBackwardTableSort::TempStorage temp;
    const int t = blockIdx.x;
    const int64_t begin = a.offsets[(int64_t)t * a.B], n = a.offsets[(int64_t)(t + 1) * a.B] - begin;
    const bool fits = n <= EMBEDDING_BAG_BACKWARD_SORT_CAPACITY;
    if (threadIdx.x == 0) {                                  // the segmented sort's range for this table
        big_begin[t] = fits ? 0 : (int)begin;
        big_end[t] = fits ? 0 : (int)(begin + n);
    }
    if (!fits || n == 0) return;                             // the whole block
    const int64_t hoff = a.hash_offsets[t];
    const int bits = embedding_bag_backward_key_bits(a.hash_offsets[t + 1] - hoff);
    // blocked arrangement (thread i holds positions i*ITEMS ..): ties keep the input order, as in a stable
    // sort; past n, keys of all ones sort last
    uint32_t k[ITEMS], pos[ITEMS];
#pragma unroll
    for (int i = 0; i < ITEMS; i++) {
        const int j = threadIdx.x * ITEMS + i;
        k[i] = j < n ? (uint32_t)((int64_t)keys[begin + j] - hoff) : 0xFFFFFFFFu;
        pos[i] = (uint32_t)j;
    }
    EmbeddingBagBackwardTableSort(temp).SortBlockedToStriped(k, pos, 0, bits);
#pragma unroll
    for (int i = 0; i < ITEMS; i++) {                        // striped: coalesced stores
        const int j = i * EMBEDDING_BAG_BACKWARD_SORT_THREADS + threadIdx.x;
        if (j < n) {
            keys_out[begin + j] = (uint32_t)((int64_t)k[i] + hoff);
            vals_out[begin + j] = vals[begin + pos[i]];
        }
    }
}

// Version 8's sort of the tables its blocks could not hold. CUB's segmented sort does it in one launch (a block
// per segment, every radix pass inside) while there are at most 256 segments; above its partitioning threshold
// (300 or more, by architecture) it would copy segment counts to the host and synchronize, so more tables take
// the segmented radix sort (one launch per 5-6 key bits, never a synchronization).
static const int EMBEDDING_BAG_BACKWARD_ONE_LAUNCH_SEGMENTS = 256;

template <class VAL>
void embedding_bag_backward_sort_big_tables(const EmbeddingBagBackwardArgs& a, void* temp, size_t& bytes, const uint32_t* keys,
                                            uint32_t* keys_sorted, const VAL* vals, VAL* vals_sorted, const int* big_begin,
                                            const int* big_end, cudaStream_t stream) {   // temp == nullptr: the size query
    if (a.T <= EMBEDDING_BAG_BACKWARD_ONE_LAUNCH_SEGMENTS)
        cudaCheck(cub::DeviceSegmentedSort::StableSortPairs(temp, bytes, keys, keys_sorted, vals, vals_sorted, (int)a.N, a.T, big_begin,
                                                            big_end, stream));
    else
        cudaCheck(cub::DeviceSegmentedRadixSort::SortPairs(temp, bytes, keys, keys_sorted, vals, vals_sorted, (int)a.N, a.T, big_begin,
                                                           big_end, 0, std::min(a.key_bits, 32), stream));
}

// the partial of an unfinished piece: slot 0 (HEAD) or 1 (TAIL) of the chunk, a row of max_D floats
template <int VPL, int G>
__device__ __forceinline__ void embedding_bag_backward_store_partial(const EmbeddingBagBackwardArgs& a, float* partials, int64_t chunk,
                                                                     int slot, int D, int l, const float4 (&acc)[VPL]) {
    float* p = partials + (chunk * 2 + slot) * (int64_t)a.max_D;
#pragma unroll
    for (int v = 0; v < VPL; v++) {
        const int c4 = l + G * v;
        if (4 * c4 < D) embedding_bag_backward_store4(p + 4 * c4, acc[v]);
    }
}

// sorted lookup o as a chunk kernel's lane holds it (o >= N: an idle lane): its row's linear id, bag t*B + b,
// table, scale (per-sample weight, / bag length for MEAN), and whether it begins / ends its run
struct EmbeddingBagBackwardLookup {
    uint32_t key = 0, bt = 0;
    float s = 1.0f;
    int t = 0;
    bool st = false, en = false;
};
template <class VAL>
__device__ __forceinline__ EmbeddingBagBackwardLookup embedding_bag_backward_lookup(const EmbeddingBagBackwardArgs& a, const uint32_t* keys,
                                                                                   const VAL* vals, int64_t o) {
    EmbeddingBagBackwardLookup k;
    if (o >= a.N) return k;
    k.key = keys[o];
    const VAL val = vals[o];
    k.st = o == 0 || keys[o - 1] != k.key;
    k.en = o == a.N - 1 || keys[o + 1] != k.key;
    k.bt = (uint32_t)val;
    if constexpr (sizeof(VAL) == 8) k.s = __uint_as_float((uint32_t)(val >> 32));
    k.t = embedding_bag_backward_table_of_value(a, k.bt, k.key);
    if (a.mean) k.s *= 1.0f / (float)(a.offsets[k.bt + 1] - a.offsets[k.bt]);
    return k;
}

// one piece of a chunk as the G lanes of its group see it (every field is the same in the group)
struct EmbeddingBagBackwardPiece {
    int begin, end;          // lanes of the group, end inclusive
    bool act, complete, tail;
    int t, D, Doff;
    int64_t wrow, lin;
};

// the piece of the group that begins at lane `begin` (act = false when begin >= cnt). Every lane of the
// warp calls it (shuffles).
template <int G>
__device__ __forceinline__ EmbeddingBagBackwardPiece embedding_bag_backward_piece_at(const EmbeddingBagBackwardArgs& a, int begin, int cnt,
                                                                                     unsigned starts, unsigned ends, uint32_t key, int tt) {
    EmbeddingBagBackwardPiece p;
    p.act = begin < cnt;
    p.begin = p.act ? begin : 0;
    p.end = p.act ? embedding_bag_backward_piece_end(ends, cnt, p.begin) : 0;
    p.complete = p.act && embedding_bag_backward_piece_complete(starts, ends, p.begin, p.end);
    p.tail = embedding_bag_backward_piece_slot(starts, p.begin) == 1;
    p.t = __shfl_sync(0xFFFFFFFFu, tt, p.begin, G);
    const uint32_t k = __shfl_sync(0xFFFFFFFFu, key, p.begin, G);
    p.Doff = a.D_offsets[p.t];
    p.D = a.D_offsets[p.t + 1] - p.Doff;
    p.lin = (int64_t)k;
    p.wrow = a.weights_offsets[p.t] + (p.lin - a.hash_offsets[p.t]) * p.D;
    return p;
}

// Versions 4-6, first kernel. A group of G lanes (G = 32: the warp) owns the chunk of G sorted lookups
// [chunk*G, chunk*G + G): lane l loads lookup l's key and value, run starts and ends come from comparing
// keys with the neighbours, and two ballots give the group its start/end masks. The group then walks its
// pieces in order: sums the piece's gradient rows (UNR rows in flight per lane, in lookup order), and
// either updates the row (the piece is the whole run) or stores the sum as the chunk's HEAD or TAIL
// partial for the combine kernel. Loops run the warp's longest trip count so shuffles see every lane.
// PREFETCH (version 5): the next piece's weight/state rows are loaded before this piece's gradient rows
// are summed (two rows in flight); only for VPL <= 2, where the registers allow it.
template <class WT, int G, int VPL, bool PREFETCH, class VAL>
__global__ void __launch_bounds__(512) embedding_bag_backward_chunks(EmbeddingBagBackwardArgs a, const uint32_t* __restrict__ keys,
                                                                     const VAL* __restrict__ vals, float* __restrict__ partials) {
    constexpr int UNR = VPL >= 8 ? 1 : 8 / VPL;
    constexpr bool PF = PREFETCH && VPL <= 2;
    constexpr unsigned GMASK = G == 32 ? 0xFFFFFFFFu : ((1u << G) - 1u);
    const unsigned full = 0xFFFFFFFFu;
    const int lane = threadIdx.x & 31, l = lane % G;
    const int64_t warp = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int64_t N = a.N;
    if (warp * 32 >= N) return;                              // the whole warp
    const int64_t chunk = warp * (32 / G) + lane / G;
    const int64_t base = chunk * G, o = base + l;
    const EmbeddingBagBackwardLookup lk = embedding_bag_backward_lookup(a, keys, vals, o);
    const uint32_t key = lk.key, bt = lk.bt;
    const float s = lk.s;
    const int tt = lk.t;
    const int shift = (lane / G) * G;
    const unsigned starts = (__ballot_sync(full, lk.st) >> shift) & GMASK;
    const unsigned ends = (__ballot_sync(full, lk.en) >> shift) & GMASK;
    const int cnt = (int)embedding_bag_backward_min64(G, N - base > 0 ? N - base : 0);

    EmbeddingBagBackwardPiece cur = embedding_bag_backward_piece_at<G>(a, 0, cnt, starts, ends, key, tt);
    EmbeddingBagBackwardRow<VPL> rc;
    if constexpr (PF) embedding_bag_backward_load_row<WT, VPL, G>(a, cur.complete, cur.D, cur.wrow, cur.lin, l, rc);
    while (__any_sync(full, cur.act)) {
        EmbeddingBagBackwardPiece nxt = cur;
        EmbeddingBagBackwardRow<VPL> rn;
        if constexpr (PF) {
            nxt = embedding_bag_backward_piece_at<G>(a, cur.act ? cur.end + 1 : cnt, cnt, starts, ends, key, tt);
            embedding_bag_backward_load_row<WT, VPL, G>(a, nxt.complete, nxt.D, nxt.wrow, nxt.lin, l, rn);
        } else {
            embedding_bag_backward_load_row<WT, VPL, G>(a, cur.complete, cur.D, cur.wrow, cur.lin, l, rc);
        }
        float4 acc[VPL];
        embedding_bag_backward_zero_row(acc);
        const int plen = cur.act ? cur.end - cur.begin + 1 : 0;
        const int maxlen = (int)__reduce_max_sync(full, (unsigned)plen);
        embedding_bag_backward_sum_rows<VPL, G, UNR, G>(a, a.grad_output, acc, plen, maxlen, cur.begin, bt, s, cur.t, cur.D, l);
        embedding_bag_backward_update_row<WT, VPL, G>(a, cur.complete, cur.D, cur.wrow, cur.lin, l, acc, rc);
        if (cur.act && !cur.complete) embedding_bag_backward_store_partial<VPL, G>(a, partials, chunk, cur.tail ? 1 : 0, cur.D, l, acc);
        if constexpr (PF) {
            cur = nxt;
            rc = rn;
        } else {
            cur = embedding_bag_backward_piece_at<G>(a, cur.act ? cur.end + 1 : cnt, cnt, starts, ends, key, tt);
        }
    }
}

// Version 7's chunk kernel. The warp owns a chunk of 32 sorted lookups as in version 4 (lane i holds lookup
// i's key, bag and scale), but a short piece's row is held by a group of G lanes (lane l of group g owns the
// 4-column vectors l, l+G, ..., VPL of them), so the warp has 32 / G rows in flight instead of one:
//   short pieces (fewer than LONG_PIECE lookups: nearly all of them at uniform input) are dealt round-robin
//     to the groups, 32 / G rows at a time;
//   long pieces (the hot rows) are summed by the whole warp in version 4's layout, one after another.
// G is 4 (eight rows a warp) up to D = 64 and 8 (four rows) up to D = 256: a narrow row leaves a group of 8
// with idle vectors, and twice the rows in flight took 8-21% off at D = 16-64 (H100, 2026-12-06; at D = 128
// groups of 4 lost 5%: 8 vectors a lane spill or drop the Philox overlap below). The chunks, their partials and
// the combine kernels are version 4's (32 lookups per chunk). Adagrad's per-element state is loaded when the
// update needs it (LAZY_STATE), after an L2 prefetch at the row's load: holding it would cost VPL more float4
// registers per lane. Half weights: rows stay as loaded until the update (EmbeddingBagBackwardRow::h), and a
// short piece's Philox calls are made right after its row loads are issued, so they run in the shadow of the
// loads instead of after the update (fp16 at the default size 0.1960 -> 0.1828 ms, H200 2026-12-01); the launch
// bound of 2 blocks keeps every instantiation at 128 registers, the 16 warps per SM of the fp32 one (half rows
// spill 88 bytes at D = 256).
static const int EMBEDDING_BAG_BACKWARD_LONG_PIECE = 8;

template <class WT, int G, int VPL, class VAL>
__global__ void __launch_bounds__(256, 2) embedding_bag_backward_chunks_grouped(EmbeddingBagBackwardArgs a, const uint32_t* __restrict__ keys,
                                                                             const VAL* __restrict__ vals, float* __restrict__ partials) {
    constexpr int NG = 32 / G, UNR = VPL >= 4 ? 1 : 8 / VPL;   // rows in flight per warp; gradient rows in flight per lane
    const unsigned full = 0xFFFFFFFFu;
    const int lane = threadIdx.x & 31, g = lane / G, l = lane % G;
    const int64_t chunk = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int64_t N = a.N, base = chunk * 32, o = base + lane;
    if (base >= N) return;                                   // the whole warp
    const EmbeddingBagBackwardLookup lk = embedding_bag_backward_lookup(a, keys, vals, o);
    const uint32_t key = lk.key, bt = lk.bt;
    const float s = lk.s;
    const int tt = lk.t;
    const unsigned starts = __ballot_sync(full, lk.st), ends = __ballot_sync(full, lk.en);
    const int cnt = (int)embedding_bag_backward_min64(32, N - base);
    // the last lookup of every piece; lane i (a piece's last lookup) finds its piece's first and length
    const unsigned bounds = (ends | (1u << (cnt - 1))) & (cnt == 32 ? full : ((1u << cnt) - 1u));
    auto piece_begin = [&](int e) { return 32 - __clz(bounds & ((1u << e) - 1u)); };   // 0 when no bound before e
    const bool is_bound = (bounds >> lane) & 1u;
    const unsigned long_ends = __ballot_sync(full, is_bound && lane - piece_begin(lane) + 1 >= EMBEDDING_BAG_BACKWARD_LONG_PIECE);
    const unsigned short_ends = bounds & ~long_ends;

    // long pieces: version 4's layout (lane l of the warp owns the vectors l, l+32, ...), one piece at a time
    constexpr int VPLW = G * VPL >= 32 ? G * VPL / 32 : 1, UNRW = 8 / VPLW;
    for (unsigned todo = long_ends; todo != 0; todo &= todo - 1) {      // warp-uniform
        const int e = embedding_bag_backward_ctz(todo), b = piece_begin(e), len = e - b + 1;
        const int t = __shfl_sync(full, tt, b);
        const int64_t lin = (int64_t)__shfl_sync(full, key, b);
        const int D = a.D_offsets[t + 1] - a.D_offsets[t];
        const int64_t wrow = a.weights_offsets[t] + (lin - a.hash_offsets[t]) * D;
        const bool complete = embedding_bag_backward_piece_complete(starts, ends, b, e);
        EmbeddingBagBackwardRow<VPLW> row;
        embedding_bag_backward_load_row<WT, VPLW, 32>(a, complete, D, wrow, lin, lane, row);
        float4 acc[VPLW];
        embedding_bag_backward_zero_row(acc);
        embedding_bag_backward_sum_rows<VPLW, 32, UNRW, 32>(a, a.grad_output, acc, len, len, b, bt, s, t, D, lane);
        embedding_bag_backward_update_row<WT, VPLW, 32>(a, complete, D, wrow, lin, lane, acc, row);
        if (!complete)
            embedding_bag_backward_store_partial<VPLW, 32>(a, partials, chunk, embedding_bag_backward_piece_slot(starts, b), D, lane, acc);
    }
    const int n_short = embedding_bag_backward_popc(short_ends);
    for (int k0 = 0; k0 < n_short; k0 += NG) {                          // NG short pieces at a time
        const int k = k0 + g;
        const bool act = k < n_short;
        const int e = act ? (int)__fns(short_ends, 0, k + 1) : 0, b = act ? piece_begin(e) : 0;
        const int t = __shfl_sync(full, tt, b);
        const int64_t lin = (int64_t)__shfl_sync(full, key, b);
        const int D = a.D_offsets[t + 1] - a.D_offsets[t];
        const int64_t wrow = a.weights_offsets[t] + (lin - a.hash_offsets[t]) * D;
        EmbeddingBagBackwardRow<VPL> row;
        embedding_bag_backward_load_row<WT, VPL, G, true>(a, act && embedding_bag_backward_piece_complete(starts, ends, b, e), D, wrow, lin, l,
                                                      row);
        uint2 bits[VPL] = {};                                // half weights: the Philox calls run while the rows load
        if constexpr (!std::is_same_v<WT, float>)
            if (a.opt != EmbeddingBagBackwardOpt::dense) embedding_bag_backward_row_bits<VPL, G>(a, lin, l, bits);
        float4 acc[VPL];
        embedding_bag_backward_zero_row(acc);
        const int len = act ? e - b + 1 : 0;
        const int maxlen = (int)__reduce_max_sync(full, (unsigned)len);
        embedding_bag_backward_sum_rows<VPL, G, UNR, 32>(a, a.grad_output, acc, len, maxlen, b, bt, s, t, D, l);
        const bool complete = act && embedding_bag_backward_piece_complete(starts, ends, b, e);
        embedding_bag_backward_update_row<WT, VPL, G, true>(a, complete, D, wrow, lin, l, acc, row, std::is_same_v<WT, float> ? nullptr : bits);
        if (act && !complete)
            embedding_bag_backward_store_partial<VPL, G>(a, partials, chunk, embedding_bag_backward_piece_slot(starts, b), D, l, acc);
    }
}

// The sum, in order k = k_begin, k_begin + 1, ..., k_end - 1, of the partials of the run owned by chunk oc
// (partial 0 is the owner's TAIL, partial k >= 1 the HEAD of chunk oc + k) into a full warp's row (lane
// owns the vectors lane, lane + 32, ...); UNR partial rows are loaded before the first is added. Both
// combine kernels add their partials with it.
template <int VPL>
__device__ __forceinline__ void embedding_bag_backward_sum_partials(const EmbeddingBagBackwardArgs& a, const float* __restrict__ partials,
                                                                    int64_t oc, int64_t k_begin, int64_t k_end, int D, int lane,
                                                                    float4 (&acc)[VPL]) {
    constexpr int UNR = VPL >= 8 ? 1 : 8 / VPL;
#pragma unroll
    for (int v = 0; v < VPL; v++) acc[v] = embedding_bag_backward_zero4();
    for (int64_t k0 = k_begin; k0 < k_end; k0 += UNR) {
        float4 x[UNR][VPL];
#pragma unroll
        for (int u = 0; u < UNR; u++) {
            const int64_t k = k0 + u;
            const float* p = partials + ((oc + k) * 2 + (k == 0 ? 1 : 0)) * (int64_t)a.max_D;
#pragma unroll
            for (int v = 0; v < VPL; v++) {
                const int c4 = lane + 32 * v;
                x[u][v] = (k < k_end && 4 * c4 < D) ? embedding_bag_backward_ldg4(p + 4 * c4) : embedding_bag_backward_zero4();
            }
        }
#pragma unroll
        for (int u = 0; u < UNR; u++)
            if (k0 + u < k_end)
#pragma unroll
                for (int v = 0; v < VPL; v++) embedding_bag_backward_add4(acc[v], x[u][v]);
    }
}

// Versions 4-8, second kernel: the runs that cross chunks. One warp per chunk; a warp whose chunk owns such
// a run (the run begins in it and goes on past it: embedding_bag_backward_is_owner) finds the run's last
// chunk (32 probes per round) and so its S partials: partial 0 is the owner's TAIL, partial k >= 1 the
// HEAD of chunk owner+k. Up to EMBEDDING_BAG_BACKWARD_WARP_SPAN partials the warp adds them itself, in
// order k = 0, 1, ..., S-1 (UNR rows in flight per lane) and updates the row; a longer run goes to a list
// for the block-per-run kernel below (the list's order varies, the arithmetic does not).
static const int EMBEDDING_BAG_BACKWARD_WARP_SPAN = 64;

template <class WT, int VPL, class VAL>
__global__ void __launch_bounds__(256) embedding_bag_backward_combine(EmbeddingBagBackwardArgs a, const uint32_t* __restrict__ keys,
                                                                     const VAL* __restrict__ vals, const float* __restrict__ partials,
                                                                     int C, int64_t num_chunks, int64_t* long_owners, int64_t* long_spans,
                                                                     unsigned* num_long) {
    const unsigned full = 0xFFFFFFFFu;
    const int lane = threadIdx.x & 31;
    const int64_t c = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int64_t N = a.N;
    if (c >= num_chunks || !embedding_bag_backward_is_owner(keys, N, (int64_t)C, c)) return;   // the whole warp
    const int64_t last = embedding_bag_backward_min64(c * C + C, N) - 1;                          // the owner's last lookup
    const uint32_t K = keys[last];
    auto continues = [&](int64_t x) { return embedding_bag_backward_continues(keys, N, (int64_t)C, x, K); };
    const int64_t S = embedding_bag_backward_last_chunk(c, num_chunks, continues,
                                                        [&](const auto& probes) { return __ballot_sync(full, probes(lane)); }) - c + 1;
    if (S > EMBEDDING_BAG_BACKWARD_WARP_SPAN) {
        if (lane == 0) {
            const unsigned slot = atomicAdd(num_long, 1u);
            long_owners[slot] = c;
            long_spans[slot] = S;
        }
        return;
    }
    const int t = embedding_bag_backward_table_of_value(a, (uint32_t)vals[last], K);
    const int D = a.D_offsets[t + 1] - a.D_offsets[t];
    float4 acc[VPL];
    embedding_bag_backward_sum_partials<VPL>(a, partials, c, 0, S, D, lane, acc);
    const int64_t lin = (int64_t)K;
    const int64_t wrow = a.weights_offsets[t] + (lin - a.hash_offsets[t]) * D;
    EmbeddingBagBackwardRow<VPL> row;
    embedding_bag_backward_load_row<WT, VPL, 32>(a, true, D, wrow, lin, lane, row);
    embedding_bag_backward_update_row<WT, VPL, 32>(a, true, D, wrow, lin, lane, acc, row);
}

// Versions 4-8, third kernel: the runs over more than EMBEDDING_BAG_BACKWARD_WARP_SPAN chunks (one giant
// run in the one-row input). One block of 8 warps per run (blocks stride over the list): warp w adds the
// w-th of 8 equal slices of the partials in order, then warp 0 adds the 8 slice sums in warp order and
// updates the row. Fixed order: the same bits on every run.
template <class WT, int VPL, class VAL>
__global__ void __launch_bounds__(256) embedding_bag_backward_combine_long(EmbeddingBagBackwardArgs a, const uint32_t* __restrict__ keys,
                                                                          const VAL* __restrict__ vals, const float* __restrict__ partials,
                                                                          int C, const int64_t* long_owners, const int64_t* long_spans,
                                                                          const unsigned* num_long) {
    constexpr int W = 8;
    __shared__ float4 red[W][VPL * 32];
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const unsigned n = *num_long;
    for (unsigned i = blockIdx.x; i < n; i += gridDim.x) {
        const int64_t oc = long_owners[i], S = long_spans[i];
        const int64_t last = embedding_bag_backward_min64(oc * C + C, a.N) - 1;
        const int64_t lin = (int64_t)keys[last];
        const int t = embedding_bag_backward_table_of_value(a, (uint32_t)vals[last], lin);
        const int D = a.D_offsets[t + 1] - a.D_offsets[t];
        const int64_t per = (S + W - 1) / W;
        const int64_t k_begin = embedding_bag_backward_min64(S, w * per), k_end = embedding_bag_backward_min64(S, k_begin + per);
        float4 acc[VPL];
        embedding_bag_backward_sum_partials<VPL>(a, partials, oc, k_begin, k_end, D, lane, acc);
#pragma unroll
        for (int v = 0; v < VPL; v++) red[w][v * 32 + lane] = acc[v];
        __syncthreads();
        if (w == 0) {
#pragma unroll
            for (int v = 0; v < VPL; v++) {
                acc[v] = red[0][v * 32 + lane];
                for (int ww = 1; ww < W; ww++) embedding_bag_backward_add4(acc[v], red[ww][v * 32 + lane]);
            }
            const int64_t wrow = a.weights_offsets[t] + (lin - a.hash_offsets[t]) * D;
            EmbeddingBagBackwardRow<VPL> row;
            embedding_bag_backward_load_row<WT, VPL, 32>(a, true, D, wrow, lin, lane, row);
            embedding_bag_backward_update_row<WT, VPL, 32>(a, true, D, wrow, lin, lane, acc, row);
        }
        __syncthreads();                                     // red is reused by the next run
    }
}

// ----------------------------------------------------------------------------------------------
// workspace: everything the versions need besides their inputs and outputs, allocated once (CUB's temp
// storage sized for the largest call) before anything is timed

struct EmbeddingBagBackwardWorkspace {
    void* temp = nullptr;
    size_t temp_bytes = 0;
    // version 1 (acc and flags are zero between steps: zeroed at allocation, re-zeroed by the version)
    float* acc = nullptr;
    unsigned* flags = nullptr;
    int64_t* list = nullptr;
    unsigned* count = nullptr;
    // versions 2, 3
    uint64_t *keys64 = nullptr, *keys64_sorted = nullptr, *keys64_scratch = nullptr, *run_keys = nullptr;
    uint32_t *bags = nullptr, *bags_sorted = nullptr;
    float *psw_sorted = nullptr, *go_mean = nullptr;
    int *run_lengths = nullptr, *run_starts = nullptr, *num_runs = nullptr, *long_ids = nullptr, *num_long = nullptr;
    // versions 4-8 (vals: uint32_t bags, or uint64_t bag | weight << 32 when weighted)
    uint32_t *keys32 = nullptr, *keys32_sorted = nullptr;
    void *vals = nullptr, *vals_sorted = nullptr;
    float* partials = nullptr;
    int64_t *long_owners = nullptr, *long_spans = nullptr;
    unsigned* num_long_owners = nullptr;
    // version 8: the segmented sort's ranges (a table's lookups, or empty when its block sorted them)
    int *big_begin = nullptr, *big_end = nullptr;
    // the buffers a version must write before it reads them: the check poisons them before every run
    std::vector<std::pair<void*, size_t>> scratch;
    std::vector<void*> owned;
};


// versions 4-6: rows in flight per lane / lanes per row
inline int embedding_bag_backward_vpl(int max_D) {   // 4-column vectors per lane of a full warp: 1, 2, 4, 8
    const int v = ceil_div(max_D, 128);
    return v <= 1 ? 1 : (v <= 2 ? 2 : (v <= 4 ? 4 : 8));
}
inline int embedding_bag_backward_group(int max_D) {  // version 6's lanes per row (8 or 16; 32 above D = 64)
    return max_D <= 32 ? 8 : (max_D <= 64 ? 16 : 32);
}

template <class T>
T* embedding_bag_backward_ws_alloc(EmbeddingBagBackwardWorkspace& ws, size_t n, bool scratch = true) {
    T* p = device_alloc<T>(n);
    ws.owned.push_back(p);
    if (scratch) ws.scratch.push_back({p, std::max<size_t>(n, 1) * sizeof(T)});
    return p;
}

inline EmbeddingBagBackwardWorkspace embedding_bag_backward_workspace(const EmbeddingBagBackwardArgs& a, const std::vector<int>& kernels) {
    EmbeddingBagBackwardWorkspace ws;
    const int64_t N = a.N;
    const bool weighted = a.per_sample_weights != nullptr;
    auto uses = [&](int lo, int hi) { for (int k : kernels) if (k >= lo && k <= hi) return true; return false; };
    size_t temp = 0, bytes = 0;
    if (uses(1, 1)) {
        ws.acc = embedding_bag_backward_ws_alloc<float>(ws, (size_t)a.num_weights, false);
        ws.flags = embedding_bag_backward_ws_alloc<unsigned>(ws, (size_t)a.num_rows, false);
        cudaCheck(cudaMemset(ws.acc, 0, std::max<size_t>(a.num_weights, 1) * sizeof(float)));
        cudaCheck(cudaMemset(ws.flags, 0, std::max<size_t>(a.num_rows, 1) * sizeof(unsigned)));
        ws.list = embedding_bag_backward_ws_alloc<int64_t>(ws, (size_t)N);
        ws.count = embedding_bag_backward_ws_alloc<unsigned>(ws, 1);
    }
    if (uses(2, 3)) {
        ws.keys64 = embedding_bag_backward_ws_alloc<uint64_t>(ws, (size_t)N);
        ws.keys64_sorted = embedding_bag_backward_ws_alloc<uint64_t>(ws, (size_t)N);
        ws.bags = embedding_bag_backward_ws_alloc<uint32_t>(ws, (size_t)N);
        ws.bags_sorted = embedding_bag_backward_ws_alloc<uint32_t>(ws, (size_t)N);
        ws.run_keys = embedding_bag_backward_ws_alloc<uint64_t>(ws, (size_t)N);
        ws.run_lengths = embedding_bag_backward_ws_alloc<int>(ws, (size_t)N);
        ws.run_starts = embedding_bag_backward_ws_alloc<int>(ws, (size_t)N);
        ws.num_runs = embedding_bag_backward_ws_alloc<int>(ws, 1);
        ws.long_ids = embedding_bag_backward_ws_alloc<int>(ws, (size_t)N);
        ws.num_long = embedding_bag_backward_ws_alloc<int>(ws, 1);
        if (weighted) {
            ws.keys64_scratch = embedding_bag_backward_ws_alloc<uint64_t>(ws, (size_t)N);
            ws.psw_sorted = embedding_bag_backward_ws_alloc<float>(ws, (size_t)N);
        }
        if (a.mean) ws.go_mean = embedding_bag_backward_ws_alloc<float>(ws, (size_t)a.B * a.total_D);
        cudaCheck(cub::DeviceRadixSort::SortPairs(nullptr, bytes, ws.keys64, ws.keys64_sorted, ws.bags, ws.bags_sorted, (int)N, 0, a.key_bits));
        temp = std::max(temp, bytes);
        if (weighted) {
            cudaCheck(cub::DeviceRadixSort::SortPairs(nullptr, bytes, ws.keys64, ws.keys64_scratch, a.per_sample_weights, ws.psw_sorted, (int)N, 0,
                                                      a.key_bits));
            temp = std::max(temp, bytes);
        }
        cudaCheck(cub::DeviceRunLengthEncode::Encode(nullptr, bytes, ws.keys64_sorted, ws.run_keys, ws.run_lengths, ws.num_runs, (int)N));
        temp = std::max(temp, bytes);
        cudaCheck(cub::DeviceScan::ExclusiveSum(nullptr, bytes, ws.run_lengths, ws.run_starts, (int)N));
        temp = std::max(temp, bytes);
    }
    if (uses(4, 8) && a.num_rows <= ((int64_t)1 << 32)) {
        ws.keys32 = embedding_bag_backward_ws_alloc<uint32_t>(ws, (size_t)N);
        ws.keys32_sorted = embedding_bag_backward_ws_alloc<uint32_t>(ws, (size_t)N);
        if (weighted) {
            ws.vals = embedding_bag_backward_ws_alloc<uint64_t>(ws, (size_t)N);
            ws.vals_sorted = embedding_bag_backward_ws_alloc<uint64_t>(ws, (size_t)N);
            cudaCheck(cub::DeviceRadixSort::SortPairs(nullptr, bytes, ws.keys32, ws.keys32_sorted, (const uint64_t*)ws.vals,
                                                      (uint64_t*)ws.vals_sorted, (int)N, 0, std::min(a.key_bits, 32)));
        } else {
            ws.vals = embedding_bag_backward_ws_alloc<uint32_t>(ws, (size_t)N);
            ws.vals_sorted = embedding_bag_backward_ws_alloc<uint32_t>(ws, (size_t)N);
            cudaCheck(cub::DeviceRadixSort::SortPairs(nullptr, bytes, ws.keys32, ws.keys32_sorted, (const uint32_t*)ws.vals,
                                                      (uint32_t*)ws.vals_sorted, (int)N, 0, std::min(a.key_bits, 32)));
        }
        temp = std::max(temp, bytes);
        if (uses(8, 8)) {
            ws.big_begin = embedding_bag_backward_ws_alloc<int>(ws, (size_t)a.T);
            ws.big_end = embedding_bag_backward_ws_alloc<int>(ws, (size_t)a.T);
            if (weighted)
                embedding_bag_backward_sort_big_tables(a, nullptr, bytes, ws.keys32, ws.keys32_sorted, (const uint64_t*)ws.vals,
                                                       (uint64_t*)ws.vals_sorted, ws.big_begin, ws.big_end, 0);
            else
                embedding_bag_backward_sort_big_tables(a, nullptr, bytes, ws.keys32, ws.keys32_sorted, (const uint32_t*)ws.vals,
                                                       (uint32_t*)ws.vals_sorted, ws.big_begin, ws.big_end, 0);
            temp = std::max(temp, bytes);
        }
        // two partial rows per chunk; the smallest chunk is version 6's group
        int C = 32;
        if (uses(6, 6)) C = std::min(C, embedding_bag_backward_group(a.max_D));
        const int64_t chunks = ceil_div<int64_t>(N, C);
        ws.partials = embedding_bag_backward_ws_alloc<float>(ws, (size_t)chunks * 2 * a.max_D);
        // a run over more than WARP_SPAN chunks owns all but its first and last exclusively: fewer than
        // chunks / (WARP_SPAN - 1) + 1 of them
        const size_t n_long = (size_t)(chunks / (EMBEDDING_BAG_BACKWARD_WARP_SPAN - 1) + 2);
        ws.long_owners = embedding_bag_backward_ws_alloc<int64_t>(ws, n_long);
        ws.long_spans = embedding_bag_backward_ws_alloc<int64_t>(ws, n_long);
        ws.num_long_owners = embedding_bag_backward_ws_alloc<unsigned>(ws, 1);
    }
    ws.temp_bytes = temp;
    ws.temp = embedding_bag_backward_ws_alloc<char>(ws, temp, false);
    return ws;
}

inline void embedding_bag_backward_free(EmbeddingBagBackwardWorkspace& ws) {
    for (void* p : ws.owned) cudaCheck(cudaFree(p));
    ws.owned.clear();
}

// ----------------------------------------------------------------------------------------------
// launchers (stream-ordered only: no allocation, no host synchronization) and the dispatcher

inline unsigned embedding_bag_backward_grid(int64_t threads, int block) { return grid_x(ceil_div<int64_t>(threads, block), "embedding_bag_backward"); }

template <class WT>
void embedding_bag_backward1(const EmbeddingBagBackwardArgs& a, EmbeddingBagBackwardWorkspace& ws, int block, cudaStream_t stream) {
    if (a.N == 0) return;
    cudaCheck(cudaMemsetAsync(ws.count, 0, sizeof(unsigned), stream));
    embedding_bag_backward_kernel1_scatter<<<embedding_bag_backward_grid((int64_t)a.T * a.B * 32, block), block, 0, stream>>>(
        a, ws.acc, ws.flags, ws.list, ws.count);
    embedding_bag_backward_kernel1_apply<WT><<<embedding_bag_backward_grid(a.N * 32, block), block, 0, stream>>>(a, ws.acc, ws.flags, ws.list,
                                                                                                             ws.count);
}

// versions 2, 3: linearize, sort (and the weights in a second sort), MEAN pass, run-length encode, scan.
// Returns the grad_output the kernels read (the MEAN copy or the input).
inline const float* embedding_bag_backward_runs(const EmbeddingBagBackwardArgs& a, EmbeddingBagBackwardWorkspace& ws, cudaStream_t stream) {
    const int N = (int)a.N;
    size_t bytes = ws.temp_bytes;
    embedding_bag_backward_linearize64<<<embedding_bag_backward_grid((int64_t)a.T * a.B * 32, 256), 256, 0, stream>>>(a, ws.keys64, ws.bags);
    cudaCheck(cub::DeviceRadixSort::SortPairs(ws.temp, bytes, ws.keys64, ws.keys64_sorted, ws.bags, ws.bags_sorted, N, 0, a.key_bits, stream));
    if (a.per_sample_weights != nullptr) {
        bytes = ws.temp_bytes;
        cudaCheck(cub::DeviceRadixSort::SortPairs(ws.temp, bytes, ws.keys64, ws.keys64_scratch, a.per_sample_weights, ws.psw_sorted, N, 0,
                                                  a.key_bits, stream));
    }
    const float* go = a.grad_output;
    if (a.mean) {
        embedding_bag_backward_grad_mean<<<embedding_bag_backward_grid((int64_t)a.T * a.B * 32, 256), 256, 0, stream>>>(a, ws.go_mean);
        go = ws.go_mean;
    }
    bytes = ws.temp_bytes;
    cudaCheck(cub::DeviceRunLengthEncode::Encode(ws.temp, bytes, ws.keys64_sorted, ws.run_keys, ws.run_lengths, ws.num_runs, N, stream));
    // The encoder writes num_runs lengths; the scan runs over all N (num_runs is on the device). Entry r of
    // an exclusive sum depends on entries < r only, and no kernel reads a start past num_runs, so the
    // unwritten tail needs no zeroing (FBGEMM zeroes it: one more pass).
    bytes = ws.temp_bytes;
    cudaCheck(cub::DeviceScan::ExclusiveSum(ws.temp, bytes, ws.run_lengths, ws.run_starts, N, stream));
    return go;
}

template <class WT, int VPL>
void embedding_bag_backward2_vpl(const EmbeddingBagBackwardArgs& a, EmbeddingBagBackwardWorkspace& ws, int block, cudaStream_t stream) {
    const float* go = embedding_bag_backward_runs(a, ws, stream);
    embedding_bag_backward_kernel2<WT, VPL, false><<<embedding_bag_backward_grid(a.N * 32, block), block, 0, stream>>>(
        a, ws.run_keys, ws.run_starts, ws.run_lengths, ws.num_runs, ws.bags_sorted, ws.psw_sorted, go);
}

template <class WT, int VPL>
void embedding_bag_backward3_vpl(const EmbeddingBagBackwardArgs& a, EmbeddingBagBackwardWorkspace& ws, int block, cudaStream_t stream) {
    const float* go = embedding_bag_backward_runs(a, ws, stream);
    cudaCheck(cudaMemsetAsync(ws.num_long, 0, sizeof(int), stream));
    embedding_bag_backward_find_long<<<embedding_bag_backward_grid(a.N, 256), 256, 0, stream>>>(ws.run_lengths, ws.num_runs, ws.long_ids,
                                                                                                 ws.num_long);
    // FBGEMM's grid for the long runs: one block per 1024 lookups, striding over the long runs
    const unsigned cta_grid = grid_x(std::max<int64_t>(1, ceil_div<int64_t>(a.N, 1024)), "embedding_bag_backward version 8");
    const size_t smem = (size_t)(block / 32) * VPL * 32 * sizeof(float4);
    embedding_bag_backward_kernel3_cta<WT, VPL><<<cta_grid, block, smem, stream>>>(a, ws.run_keys, ws.run_starts, ws.run_lengths, ws.long_ids,
                                                                              ws.num_long, ws.bags_sorted, ws.psw_sorted, go);
    embedding_bag_backward_kernel2<WT, VPL, true><<<embedding_bag_backward_grid(a.N * 32, block), block, 0, stream>>>(
        a, ws.run_keys, ws.run_starts, ws.run_lengths, ws.num_runs, ws.bags_sorted, ws.psw_sorted, go);
}

// versions 4-8: linearize, sort (TABLES: version 8's, table by table), the chunk kernel (GROUPED: version 7's,
// G = 4 or 8 lanes per row in chunks of 32 lookups), the combine kernels
template <class WT, int G, int VPL, bool PREFETCH, class VAL, bool GROUPED = false, bool TABLES = false>
void embedding_bag_backward_chunked(const EmbeddingBagBackwardArgs& a, EmbeddingBagBackwardWorkspace& ws, int block, cudaStream_t stream) {
    VAL* vals = (VAL*)ws.vals;
    VAL* vals_sorted = (VAL*)ws.vals_sorted;
    size_t bytes = ws.temp_bytes;
    embedding_bag_backward_linearize32<VAL><<<embedding_bag_backward_grid((int64_t)a.T * a.B * 32, 256), 256, 0, stream>>>(a, ws.keys32, vals);
    if (TABLES && a.N <= (int64_t)a.T * EMBEDDING_BAG_BACKWARD_SORT_CAPACITY) {
        embedding_bag_backward_sort_tables<VAL><<<a.T, EMBEDDING_BAG_BACKWARD_SORT_THREADS, 0, stream>>>(
            a, ws.keys32, vals, ws.keys32_sorted, vals_sorted, ws.big_begin, ws.big_end);
        embedding_bag_backward_sort_big_tables(a, ws.temp, bytes, ws.keys32, ws.keys32_sorted, vals, vals_sorted, ws.big_begin, ws.big_end,
                                               stream);
    } else {
        cudaCheck(cub::DeviceRadixSort::SortPairs(ws.temp, bytes, ws.keys32, ws.keys32_sorted, vals, vals_sorted, (int)a.N, 0,
                                                  std::min(a.key_bits, 32), stream));
    }
    constexpr int C = GROUPED ? 32 : G;                        // lookups per chunk
    const int64_t warps = ceil_div<int64_t>(a.N, 32), chunks = ceil_div<int64_t>(a.N, C);
    constexpr int VPLB = G * VPL >= 32 ? G * VPL / 32 : 1;     // the combine kernels hold a row in a full warp
    if constexpr (GROUPED)
        embedding_bag_backward_chunks_grouped<WT, G, VPL, VAL><<<embedding_bag_backward_grid(warps * 32, block), block, 0, stream>>>(
            a, ws.keys32_sorted, vals_sorted, ws.partials);
    else
        embedding_bag_backward_chunks<WT, G, VPL, PREFETCH, VAL><<<embedding_bag_backward_grid(warps * 32, block), block, 0, stream>>>(
            a, ws.keys32_sorted, vals_sorted, ws.partials);
    cudaCheck(cudaMemsetAsync(ws.num_long_owners, 0, sizeof(unsigned), stream));
    embedding_bag_backward_combine<WT, VPLB, VAL><<<embedding_bag_backward_grid(chunks * 32, 256), 256, 0, stream>>>(
        a, ws.keys32_sorted, vals_sorted, ws.partials, C, chunks, ws.long_owners, ws.long_spans, ws.num_long_owners);
    // enough blocks for every long run there can be (one per WARP_SPAN chunks), at most 2 per SM's worth
    const unsigned long_grid = (unsigned)std::min<int64_t>(264, chunks / EMBEDDING_BAG_BACKWARD_WARP_SPAN + 1);
    embedding_bag_backward_combine_long<WT, VPLB, VAL><<<long_grid, 256, 0, stream>>>(a, ws.keys32_sorted, vals_sorted, ws.partials, C,
                                                                                  ws.long_owners, ws.long_spans, ws.num_long_owners);
}

template <class WT, int G, int VPL, bool PREFETCH, bool GROUPED = false, bool TABLES = false>
void embedding_bag_backward_chunked_vals(const EmbeddingBagBackwardArgs& a, EmbeddingBagBackwardWorkspace& ws, int block, cudaStream_t stream) {
    if (a.per_sample_weights != nullptr) embedding_bag_backward_chunked<WT, G, VPL, PREFETCH, uint64_t, GROUPED, TABLES>(a, ws, block, stream);
    else embedding_bag_backward_chunked<WT, G, VPL, PREFETCH, uint32_t, GROUPED, TABLES>(a, ws, block, stream);
}

// f(std::integral_constant<int, VPL>()) for the 4-column vectors per lane of a full warp that max_D needs
template <class F>
void embedding_bag_backward_with_vpl(int max_D, F&& f) {
    switch (embedding_bag_backward_vpl(max_D)) {
        case 1: f(std::integral_constant<int, 1>()); break;
        case 2: f(std::integral_constant<int, 2>()); break;
        case 4: f(std::integral_constant<int, 4>()); break;
        default: f(std::integral_constant<int, 8>()); break;
    }
}

template <class WT>
void embedding_bag_backward2(const EmbeddingBagBackwardArgs& a, EmbeddingBagBackwardWorkspace& ws, int block, cudaStream_t stream) {
    if (a.N == 0) return;
    embedding_bag_backward_with_vpl(a.max_D, [&](auto vpl) { embedding_bag_backward2_vpl<WT, decltype(vpl)::value>(a, ws, block, stream); });
}

template <class WT>
void embedding_bag_backward3(const EmbeddingBagBackwardArgs& a, EmbeddingBagBackwardWorkspace& ws, int block, cudaStream_t stream) {
    if (a.N == 0) return;
    embedding_bag_backward_with_vpl(a.max_D, [&](auto vpl) { embedding_bag_backward3_vpl<WT, decltype(vpl)::value>(a, ws, block, stream); });
}

template <class WT, bool PREFETCH>
void embedding_bag_backward_warp_chunks(const EmbeddingBagBackwardArgs& a, EmbeddingBagBackwardWorkspace& ws, int block, cudaStream_t stream) {
    embedding_bag_backward_with_vpl(a.max_D, [&](auto vpl) {
        embedding_bag_backward_chunked_vals<WT, 32, decltype(vpl)::value, PREFETCH>(a, ws, block, stream);
    });
}

template <class WT>
void embedding_bag_backward4(const EmbeddingBagBackwardArgs& a, EmbeddingBagBackwardWorkspace& ws, int block, cudaStream_t stream) {
    if (a.N == 0) return;
    embedding_bag_backward_warp_chunks<WT, false>(a, ws, block, stream);
}

template <class WT>
void embedding_bag_backward5(const EmbeddingBagBackwardArgs& a, EmbeddingBagBackwardWorkspace& ws, int block, cudaStream_t stream) {
    if (a.N == 0) return;
    embedding_bag_backward_warp_chunks<WT, true>(a, ws, block, stream);
}

template <class WT>
void embedding_bag_backward6(const EmbeddingBagBackwardArgs& a, EmbeddingBagBackwardWorkspace& ws, int block, cudaStream_t stream) {
    if (a.N == 0) return;
    if (embedding_bag_backward_group(a.max_D) == 8) embedding_bag_backward_chunked_vals<WT, 8, 1, true>(a, ws, block, stream);
    else embedding_bag_backward_chunked_vals<WT, 16, 1, true>(a, ws, block, stream);
}

// version 7: a row takes a group of G lanes (8 up to D = 256, 4 up to D = 64: eight rows a warp); wider rows take
// version 4's warps. Version 8 (TABLES): the same with the table-by-table sort.
template <class WT, bool TABLES>
void embedding_bag_backward_grouped(const EmbeddingBagBackwardArgs& a, EmbeddingBagBackwardWorkspace& ws, int block, cudaStream_t stream) {
    if (a.N == 0) return;
    auto run = [&](auto g, auto vpl) {
        embedding_bag_backward_chunked_vals<WT, decltype(g)::value, decltype(vpl)::value, false, true, TABLES>(a, ws, block, stream);
    };
    using I1 = std::integral_constant<int, 1>;
    using I2 = std::integral_constant<int, 2>;
    using I4 = std::integral_constant<int, 4>;
    using I8 = std::integral_constant<int, 8>;
    if (a.max_D <= 16) run(I4(), I1());
    else if (a.max_D <= 32) run(I4(), I2());
    else if (a.max_D <= 64) run(I4(), I4());
    else if (a.max_D <= 128) run(I8(), I4());
    else if (a.max_D <= 256) run(I8(), I8());
    else embedding_bag_backward_warp_chunks<WT, false>(a, ws, block, stream);
}

template <class WT>
void embedding_bag_backward_typed(int kernel_num, const EmbeddingBagBackwardArgs& a, EmbeddingBagBackwardWorkspace& ws, int block,
                            cudaStream_t stream) {
    switch (kernel_num) {
        case 1: embedding_bag_backward1<WT>(a, ws, block, stream); break;
        case 2: embedding_bag_backward2<WT>(a, ws, block, stream); break;
        case 3: embedding_bag_backward3<WT>(a, ws, block, stream); break;
        case 4: embedding_bag_backward4<WT>(a, ws, block, stream); break;
        case 5: embedding_bag_backward5<WT>(a, ws, block, stream); break;
        case 6: embedding_bag_backward6<WT>(a, ws, block, stream); break;
        case 7: embedding_bag_backward_grouped<WT, false>(a, ws, block, stream); break;
        case 8: embedding_bag_backward_grouped<WT, true>(a, ws, block, stream); break;
        default: fail_args("embedding_bag_backward has no version %d", kernel_num);
    }
}

// the one dispatch on the weights' type
void embedding_bag_backward(int kernel_num, const EmbeddingBagBackwardArgs& a, EmbeddingBagBackwardWorkspace& ws, int block,
                            cudaStream_t stream) {
    if (a.wtype == EmbeddingBagWeights::fp16) embedding_bag_backward_typed<__half>(kernel_num, a, ws, block, stream);
    else if (a.wtype == EmbeddingBagWeights::bf16) embedding_bag_backward_typed<__nv_bfloat16>(kernel_num, a, ws, block, stream);
    else embedding_bag_backward_typed<float>(kernel_num, a, ws, block, stream);
}

// version 3's block-per-row kernel takes up to 16 warps * 8 vectors * 512 B = 64 KB of shared memory:
// allow it once, outside any launcher (and outside graph capture)
template <class WT>
inline void embedding_bag_backward_setup_kernels_of(int max_smem) {
    cudaCheck(cudaFuncSetAttribute(embedding_bag_backward_kernel3_cta<WT, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize, max_smem));
    cudaCheck(cudaFuncSetAttribute(embedding_bag_backward_kernel3_cta<WT, 2>, cudaFuncAttributeMaxDynamicSharedMemorySize, max_smem));
    cudaCheck(cudaFuncSetAttribute(embedding_bag_backward_kernel3_cta<WT, 4>, cudaFuncAttributeMaxDynamicSharedMemorySize, max_smem));
    cudaCheck(cudaFuncSetAttribute(embedding_bag_backward_kernel3_cta<WT, 8>, cudaFuncAttributeMaxDynamicSharedMemorySize, max_smem));
}
inline void embedding_bag_backward_setup_kernels() {
    const int max_smem = 16 * 8 * 32 * (int)sizeof(float4);
    embedding_bag_backward_setup_kernels_of<float>(max_smem);
    embedding_bag_backward_setup_kernels_of<__half>(max_smem);
    embedding_bag_backward_setup_kernels_of<__nv_bfloat16>(max_smem);
}

// the precondition of each version on a shape, "" when it can run
inline std::string embedding_bag_backward_skip_reason(int kernel_num, int max_D, int64_t num_rows) {
    if (kernel_num >= 2 && max_D > EMBEDDING_BAG_BACKWARD_MAX_D)
        return "a table has D = " + std::to_string(max_D) + " > 1024: versions 2-8 hold a row in registers (8 vectors per lane)";
    if (kernel_num >= 4 && num_rows > ((int64_t)1 << 32))
        return "the tables have " + std::to_string(num_rows) + " rows in all: versions 4-8 sort 32-bit row ids";
    if (kernel_num == 6 && embedding_bag_backward_group(max_D) == 32)
        return "max D = " + std::to_string(max_D) + " > 64: sub-warp rows are for D <= 64 (wider rows take the whole warp, as in version 5)";
    return "";
}

// versions 7 and 8: the chunk kernel is built for blocks of up to 256 (its registers: up to 255 per thread at D = 256)
inline std::vector<int> embedding_bag_backward_blocks(int kernel_num) {
    if (kernel_num >= 7) return {64, 128, 256};
    return {64, 128, 256, 512};
}

// ----------------------------------------------------------------------------------------------
// the check's GPU helpers (never timed): fill the tables, gather / restore / poison the looked-up rows,
// compare with the reference, and prove that nothing else changed

inline unsigned embedding_bag_backward_helper_grid(int64_t threads) {
    return (unsigned)std::max<int64_t>(1, std::min<int64_t>(ceil_div<int64_t>(threads, 256), 132 * 64));
}

// the initial weights, rounded to nearest for half weights (the reference rounds them the same way)
__host__ __device__ inline float embedding_bag_backward_initial_weight_as(uint64_t seed, int64_t e, EmbeddingBagWeights wt) {
    const float x = embedding_bag_backward_initial_weight(seed, e);
    return wt == EmbeddingBagWeights::fp32 ? x : embedding_bag_half_to_float(embedding_bag_half_bits(x, wt, false), wt);
}
__global__ void embedding_bag_backward_fill_weights(void* w, EmbeddingBagWeights wt, int64_t n, uint64_t seed) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float x = embedding_bag_backward_initial_weight(seed, i);
        if (wt == EmbeddingBagWeights::fp32) ((float*)w)[i] = x;
        else ((uint16_t*)w)[i] = embedding_bag_half_bits(x, wt, false);
    }
}
__global__ void embedding_bag_backward_fill_state(float* m, int64_t n, uint64_t seed) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        m[i] = embedding_bag_backward_initial_state(seed, i);
}

// row u of a strided buffer starts at src_off[u] and has col[u+1] - col[u] elements; compact row u
// starts at col[u]. One warp per row.
// (src holds wt elements: fp32 for the state and the dense gradient)
__global__ void embedding_bag_backward_gather(float* dst, const void* src, EmbeddingBagWeights wt, const int64_t* src_off, const int64_t* col,
                                              int64_t U) {
    const int lane = threadIdx.x & 31;
    for (int64_t u = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; u < U; u += ((int64_t)gridDim.x * blockDim.x) >> 5)
        for (int64_t d = lane; d < col[u + 1] - col[u]; d += 32) {
            const int64_t e = src_off[u] + d;
            dst[col[u] + d] = wt == EmbeddingBagWeights::fp32 ? ((const float*)src)[e] : embedding_bag_half_to_float(((const uint16_t*)src)[e], wt);
        }
}
template <class T>
__global__ void embedding_bag_backward_copy_rows(T* dst, const T* src, const int64_t* src_off, const int64_t* col, int64_t U) {
    const int lane = threadIdx.x & 31;
    for (int64_t u = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; u < U; u += ((int64_t)gridDim.x * blockDim.x) >> 5)
        for (int64_t d = lane; d < col[u + 1] - col[u]; d += 32) dst[src_off[u] + d] = src[src_off[u] + d];
}
__global__ void embedding_bag_backward_poison_rows(float* dst, const int64_t* src_off, const int64_t* col, int64_t U) {
    const int lane = threadIdx.x & 31;
    for (int64_t u = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; u < U; u += ((int64_t)gridDim.x * blockDim.x) >> 5)
        for (int64_t d = lane; d < col[u + 1] - col[u]; d += 32) dst[src_off[u] + d] = __uint_as_float(0xFFFFFFFFu);
}

struct EmbeddingBagBackwardStats {
    unsigned long long bad, nonfinite, first_bad;
    unsigned max_abs_bits, max_rel_bits;      // non-negative floats order like their bits
};

__device__ inline void embedding_bag_backward_stats_add(EmbeddingBagBackwardStats* s, unsigned long long bad, unsigned long long nonfinite,
                                                        unsigned long long first, float max_abs, float max_rel) {
    for (int o = 16; o > 0; o >>= 1) {
        bad += __shfl_xor_sync(0xFFFFFFFFu, bad, o);
        nonfinite += __shfl_xor_sync(0xFFFFFFFFu, nonfinite, o);
        const unsigned long long f = __shfl_xor_sync(0xFFFFFFFFu, first, o);
        first = f < first ? f : first;
        max_abs = fmaxf(max_abs, __shfl_xor_sync(0xFFFFFFFFu, max_abs, o));
        max_rel = fmaxf(max_rel, __shfl_xor_sync(0xFFFFFFFFu, max_rel, o));
    }
    if ((threadIdx.x & 31) == 0) {
        if (bad) atomicAdd(&s->bad, bad);
        if (nonfinite) atomicAdd(&s->nonfinite, nonfinite);
        atomicMin(&s->first_bad, first);
        atomicMax(&s->max_abs_bits, __float_as_uint(max_abs));
        atomicMax(&s->max_rel_bits, __float_as_uint(max_rel));
    }
}

// compact result against the reference: element i fails when non-finite or |got - ref| > tol[i]
__global__ void embedding_bag_backward_compare(const float* got, const float* ref, const float* tol, int64_t n, EmbeddingBagBackwardStats* s) {
    unsigned long long bad = 0, nonfinite = 0, first = ~0ull;
    float max_abs = 0.0f, max_rel = 0.0f;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float g = got[i], r = ref[i];
        bool fail;
        if (!isfinite(g)) {
            nonfinite++;
            fail = true;
        } else {
            const float e = fabsf(g - r);
            max_abs = fmaxf(max_abs, e);
            if (fabsf(r) > 1e-6f) max_rel = fmaxf(max_rel, e / fabsf(r));
            fail = e > tol[i];
        }
        if (fail) {
            bad++;
            first = (unsigned long long)i < first ? (unsigned long long)i : first;
        }
    }
    embedding_bag_backward_stats_add(s, bad, nonfinite, first, max_abs, max_rel);
}

// two word arrays bit for bit
__global__ void embedding_bag_backward_bitdiff(const unsigned* x, const unsigned* y, int64_t n, EmbeddingBagBackwardStats* s) {
    unsigned long long bad = 0, first = ~0ull;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        if (x[i] != y[i]) {
            bad++;
            first = (unsigned long long)i < first ? (unsigned long long)i : first;
        }
    embedding_bag_backward_stats_add(s, bad, 0, first, 0.0f, 0.0f);
}

// Every linear row r not looked up (touched[r] == 0; touched == nullptr: every row) must hold the same
// bits in cur as in ref (ref == nullptr: all zero bits). unit: one word per row at r (rowwise state, v1's
// flags); else the row of table t at base[t] + row * D_t. One warp per row; first_bad is a linear row.
template <class Word>
__global__ void embedding_bag_backward_untouched(const Word* cur, const Word* ref, const uint8_t* touched, const int64_t* base,
                                                 const int* D_offsets, const int64_t* hash_offsets, int T, int64_t num_rows, bool unit,
                                                 EmbeddingBagBackwardStats* s) {
    const int lane = threadIdx.x & 31;
    unsigned long long bad = 0, first = ~0ull;
    for (int64_t r = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; r < num_rows; r += ((int64_t)gridDim.x * blockDim.x) >> 5) {
        if (touched != nullptr && touched[r]) continue;
        int width = 1;
        int64_t off = r;
        if (!unit) {
            const int t = embedding_bag_backward_table_of(hash_offsets, T, r);
            width = D_offsets[t + 1] - D_offsets[t];
            off = base[t] + (r - hash_offsets[t]) * width;
        }
        for (int d = lane; d < width; d += 32) {
            const Word x = cur[off + d], y = ref != nullptr ? ref[off + d] : (Word)0;
            if (x != y) {
                bad++;
                first = (unsigned long long)r < first ? (unsigned long long)r : first;
            }
        }
    }
    embedding_bag_backward_stats_add(s, bad, 0, first, 0.0f, 0.0f);
}

inline EmbeddingBagBackwardStats embedding_bag_backward_stats(EmbeddingBagBackwardStats* d_s, const std::function<void()>& launch) {
    const EmbeddingBagBackwardStats init = {0ull, 0ull, ~0ull, 0u, 0u};
    cudaCheck(cudaMemcpy(d_s, &init, sizeof init, cudaMemcpyHostToDevice));
    launch();
    cudaCheck(cudaGetLastError());
    EmbeddingBagBackwardStats out;
    cudaCheck(cudaMemcpy(&out, d_s, sizeof out, cudaMemcpyDeviceToHost));
    return out;
}
inline float embedding_bag_backward_bits_float(unsigned b) { float f; memcpy(&f, &b, 4); return f; }

// ----------------------------------------------------------------------------------------------

// the inputs of a run: loaded (--load; grad_output from the dump when it has one, else from the seed) or
// generated from the flags (host memory checked first), broken on request, validated (exit 2)
inline EmbeddingBagBackwardInputs embedding_bag_backward_inputs(const Cli& cli, EmbeddingBagConfig& cfg, const EmbeddingBagFlags& flags) {
    EmbeddingBagBackwardInputs in;
    if (!cli.load_dir.empty()) {
        static_cast<EmbeddingBagInputs&>(in) = embedding_bag_load_inputs(cli.load_dir, "embedding_bag_backward_", cfg);
        std::vector<int64_t> sh;
        if (read_npy(cli.load_dir, "embedding_bag_backward_grad_output", in.grad_output, sh, 2, true)) {
            require(sh[0] == in.out_rows() && sh[1] == in.out_cols(), "--load: embedding_bag_backward_grad_output has shape (%lld, %lld), expected %s = (%lld, %lld)",
                    (long long)sh[0], (long long)sh[1], in.nobag ? "(N, D)" : "(B, total_D)", (long long)in.out_rows(), (long long)in.out_cols());
            for (size_t i = 0; i < in.grad_output.size(); i++)
                require(std::isfinite(in.grad_output[i]), "--load: embedding_bag_backward_grad_output[%zu] (flat) is %g: it must be finite", i,
                        in.grad_output[i]);
        } else {
            embedding_bag_backward_make_grad(in, cli.seed);
        }
    } else {
        embedding_bag_check_config(cfg, flags);
        require((int64_t)cfg.T * cfg.B * cfg.L < INT32_MAX, "T*B*L (%lld) must be < 2^31 lookups", (long long)cfg.T * cfg.B * cfg.L);
        // the inputs, grad_output, and the reference: per lookup ~64 bytes, per touched row ~6 arrays of D floats
        int64_t total_D = 0, max_D = 0, rows = 0;
        for (int t = 0; t < cfg.T; t++) {
            total_D += embedding_bag_table_D(cfg, t);
            max_D = std::max<int64_t>(max_D, embedding_bag_table_D(cfg, t));
            rows += embedding_bag_table_E(cfg, t);
        }
        const double N = (double)cfg.T * cfg.B * cfg.L;
        require_host_memory(embedding_bag_inputs_host_bytes(cfg) + 4.0 * (double)cfg.B * total_D * (cfg.nobag ? cfg.L : 1) + 64.0 * N + 24.0 * max_D * std::min(N, (double)rows),
                            "embedding_bag_backward (inputs, grad_output, reference)");
        in = embedding_bag_backward_make_inputs(cfg, cli.seed);
    }
    embedding_bag_break(in, flags.break_input);
    const std::string bad = embedding_bag_backward_validate(in);
    require(bad.empty(), "invalid input: %s", bad.c_str());
    return in;
}

// Device bytes of a run (an upper bound): tables and state twice (pristine and live), the dense
// gradient, the inputs, the check's compact copies of the touched rows (at most N rows of max_D), and the
// requested versions' workspace (embedding_bag_backward_workspace).
inline double embedding_bag_backward_device_bytes(const EmbeddingBagBackwardInputs& in, EmbeddingBagBackwardOpt opt,
                                                  const std::vector<int>& kernels, int wbytes) {
    const double N = (double)in.N(), W = (double)in.num_weights, R = (double)in.num_rows(), max_D = in.max_D();
    const double C = std::min(N * max_D, W);   // touched elements
    double b = 2.0 * W * wbytes + 9.0 * R;
    if (opt == EmbeddingBagBackwardOpt::rowwise_adagrad) b += 8.0 * R;
    if (opt == EmbeddingBagBackwardOpt::adagrad) b += 8.0 * W;
    if (opt == EmbeddingBagBackwardOpt::dense) b += 4.0 * W;
    b += 12.0 * N + 8.0 * in.offsets.size() + 4.0 * in.grad_output.size() + 40.0 * std::min(N, R) + 8.0 * 4.0 * C;
    double ws = 0.0;
    for (int k : kernels) {
        if (k == 1) ws = std::max(ws, 4.0 * W + 4.0 * R + 8.0 * N);
        if (k == 2 || k == 3) ws = std::max(ws, 120.0 * N + 4.0 * in.grad_output.size());
        if (k >= 4) ws = std::max(ws, 48.0 * N + (N / 8.0 + 1.0) * 8.0 * max_D);
    }
    return b + ws;
}

inline void embedding_bag_backward_dump(const std::string& dir, const EmbeddingBagConfig& cfg, const EmbeddingBagBackwardInputs& in) {
    embedding_bag_dump_inputs(dir, "embedding_bag_backward_", in, cfg.L);
    write_npy(dir, "embedding_bag_backward_grad_output", in.grad_output.data(), {in.out_rows(), in.out_cols()});
}

// ----------------------------------------------------------------------------------------------
// the run: the inputs on the device, the tables and state (a pristine copy filled once from the hash and
// the live one the step updates), and what the check keeps about the touched rows (where they live, the
// mask of them, the reference and its tolerances, the GPU's rows gathered compact)

struct EmbeddingBagBackwardRun {
    const EmbeddingBagBackwardInputs* in = nullptr;
    const EmbeddingBagBackwardReference* ref = nullptr;
    EmbeddingBagBackwardArgs a{};
    bool dense = false, rowwise = false, adagrad = false;
    int64_t U = 0, C = 0, n_m = 0, n_state = 0;   // touched rows, their elements, checked state values, state size
    void *W0 = nullptr, *W = nullptr;               // the tables, a.wtype elements
    float *M0 = nullptr, *M = nullptr, *Gd = nullptr;
    std::vector<int64_t> h_src;                     // the flat offset of touched row u
    int64_t *d_src = nullptr, *d_col = nullptr, *d_lin = nullptr, *d_iota = nullptr;
    uint8_t* d_mask = nullptr;
    float *d_ref_w = nullptr, *d_tol_w = nullptr, *d_ref_m = nullptr, *d_tol_m = nullptr, *d_ref_g = nullptr, *d_tol_g = nullptr;
    float *d_cw = nullptr, *d_cm = nullptr;         // the GPU's rows, gathered (weights or dense grad; state)
    float *d_fw = nullptr, *d_fm = nullptr;         // ... of the first run, for the bit comparison
    EmbeddingBagBackwardStats* d_stats = nullptr;
    unsigned row_grid = 1;
    cudaStream_t capture_stream = nullptr;
    EmbeddingBagBackwardWorkspace ws;
};

inline EmbeddingBagBackwardArgs embedding_bag_backward_upload(const EmbeddingBagBackwardInputs& in, const EmbeddingBagBackwardParams& p) {
    EmbeddingBagBackwardArgs a{};
    a.weights_offsets = device_upload(in.weights_offsets);
    a.D_offsets = device_upload(in.D_offsets);
    a.hash_offsets = device_upload(in.hash_offsets);
    a.indices = device_upload(in.indices);
    a.offsets = device_upload(in.offsets);
    a.per_sample_weights = in.per_sample_weights.empty() ? nullptr : device_upload(in.per_sample_weights);
    a.grad_output = device_upload(in.grad_output);
    a.T = in.T; a.B = in.B; a.total_D = in.total_D(); a.max_D = in.max_D();
    a.key_bits = embedding_bag_backward_key_bits(in.num_rows());
    a.N = in.N(); a.num_rows = in.num_rows(); a.num_weights = in.num_weights;
    a.mean = in.mean; a.nobag = in.nobag; a.opt = p.opt; a.lr = (float)p.lr; a.eps = (float)p.eps;
    a.wtype = p.weights; a.stochastic = p.stochastic; a.round_seed = p.seed; a.step = p.step;
    return a;
}

inline void embedding_bag_backward_setup(EmbeddingBagBackwardRun& s, const EmbeddingBagBackwardInputs& in, const EmbeddingBagBackwardReference& ref,
                                         const EmbeddingBagBackwardParams& p, uint64_t seed, const std::vector<int>& kernels) {
    s.in = &in; s.ref = &ref;
    s.dense = p.opt == EmbeddingBagBackwardOpt::dense;
    s.rowwise = p.opt == EmbeddingBagBackwardOpt::rowwise_adagrad;
    s.adagrad = p.opt == EmbeddingBagBackwardOpt::adagrad;
    const EmbeddingBagBackwardRows& R = ref.rows;
    const int64_t num_weights = in.num_weights, num_rows = in.num_rows(), U = R.U(), C = R.col.back();
    s.U = U; s.C = C;
    s.a = embedding_bag_backward_upload(in, p);
    const size_t wbytes = (size_t)embedding_bag_weight_bytes(p.weights);
    s.W0 = device_alloc<char>((size_t)num_weights * wbytes);
    s.W = device_alloc<char>((size_t)num_weights * wbytes);
    embedding_bag_backward_fill_weights<<<embedding_bag_backward_helper_grid(num_weights), 256>>>(s.W0, p.weights, num_weights, seed);
    cudaCheck(cudaGetLastError());
    s.n_state = s.rowwise ? num_rows : (s.adagrad ? num_weights : 0);
    if (s.n_state) {
        s.M0 = device_alloc<float>((size_t)s.n_state);
        s.M = device_alloc<float>((size_t)s.n_state);
        embedding_bag_backward_fill_state<<<embedding_bag_backward_helper_grid(s.n_state), 256>>>(s.M0, s.n_state, seed);
    }
    if (s.dense) s.Gd = device_alloc<float>((size_t)num_weights);
    cudaCheck(cudaGetLastError());
    s.a.weights = s.W; s.a.state = s.M; s.a.grad_weights = s.Gd;

    s.h_src.resize((size_t)U);
    std::vector<int64_t> h_iota((size_t)U + 1);
    for (int64_t u = 0; u < U; u++) s.h_src[u] = in.weights_offsets[R.table[u]] + R.row[u] * in.D(R.table[u]);
    for (int64_t u = 0; u <= U; u++) h_iota[u] = u;
    std::vector<uint8_t> h_mask((size_t)num_rows, 0);
    for (int64_t u = 0; u < U; u++) h_mask[R.linear[u]] = 1;
    s.d_src = device_upload(s.h_src);
    s.d_col = device_upload(R.col);
    s.d_lin = device_upload(R.linear);
    s.d_iota = device_upload(h_iota);
    s.d_mask = device_upload(h_mask);
    s.n_m = s.rowwise ? U : (s.adagrad ? C : 0);
    if (!s.dense) { s.d_ref_w = device_upload(ref.w); s.d_tol_w = device_upload(ref.w_tol); }
    if (s.n_m) { s.d_ref_m = device_upload(ref.m); s.d_tol_m = device_upload(ref.m_tol); }
    if (s.dense) { s.d_ref_g = device_upload(ref.grad); s.d_tol_g = device_upload(ref.grad_tol); }
    s.d_cw = device_alloc<float>((size_t)C);
    s.d_cm = device_alloc<float>((size_t)std::max<int64_t>(s.n_m, 1));
    s.d_fw = device_alloc<float>((size_t)C);
    s.d_fm = device_alloc<float>((size_t)std::max<int64_t>(s.n_m, 1));
    s.d_stats = device_alloc<EmbeddingBagBackwardStats>(1);
    s.row_grid = embedding_bag_backward_helper_grid(U * 32);

    s.ws = embedding_bag_backward_workspace(s.a, kernels);
    embedding_bag_backward_setup_kernels();
    cudaCheck(cudaStreamCreateWithFlags(&s.capture_stream, cudaStreamNonBlocking));
    cudaCheck(cudaDeviceSynchronize());
}

inline void embedding_bag_backward_release(EmbeddingBagBackwardRun& s) {
    embedding_bag_backward_free(s.ws);
    cudaCheck(cudaStreamDestroy(s.capture_stream));
    const EmbeddingBagBackwardArgs& a = s.a;
    for (const void* ptr : std::initializer_list<const void*>{a.weights_offsets, a.D_offsets, a.hash_offsets, a.indices, a.offsets,
                                                              a.per_sample_weights, a.grad_output, s.W0, s.W, s.M0, s.M, s.Gd, s.d_src, s.d_col,
                                                              s.d_lin, s.d_iota, s.d_mask, s.d_ref_w, s.d_tol_w, s.d_ref_m, s.d_tol_m, s.d_ref_g,
                                                              s.d_tol_g, s.d_cw, s.d_cm, s.d_fw, s.d_fm, s.d_stats})
        if (ptr) cudaCheck(cudaFree(const_cast<void*>(ptr)));
}

// the GPU's touched rows into the compact layout of the reference
inline void embedding_bag_backward_gather_rows(const EmbeddingBagBackwardRun& s) {
    const EmbeddingBagWeights f32 = EmbeddingBagWeights::fp32;
    if (s.dense) embedding_bag_backward_gather<<<s.row_grid, 256>>>(s.d_cw, s.Gd, f32, s.d_src, s.d_col, s.U);
    else embedding_bag_backward_gather<<<s.row_grid, 256>>>(s.d_cw, s.W, s.a.wtype, s.d_src, s.d_col, s.U);
    if (s.rowwise) embedding_bag_backward_gather<<<s.row_grid, 256>>>(s.d_cm, s.M, f32, s.d_lin, s.d_iota, s.U);
    if (s.adagrad) embedding_bag_backward_gather<<<s.row_grid, 256>>>(s.d_cm, s.M, f32, s.d_src, s.d_col, s.U);
    cudaCheck(cudaGetLastError());
}

// where compact element i lives (per_row: i is a touched row), for a failure message
inline std::string embedding_bag_backward_where(const EmbeddingBagBackwardRun& s, int64_t i, bool per_row) {
    const EmbeddingBagBackwardRows& R = s.ref->rows;
    const int64_t u = per_row ? i : (int64_t)(std::upper_bound(R.col.begin(), R.col.end(), i) - R.col.begin()) - 1;
    char buf[160];
    if (per_row) snprintf(buf, sizeof buf, "table %d row %lld", R.table[u], (long long)R.row[u]);
    else snprintf(buf, sizeof buf, "table %d row %lld column %lld (%lld lookups)", R.table[u], (long long)R.row[u], (long long)(i - R.col[u]),
                  (long long)R.count[u]);
    return buf;
}

// n compact values against the reference, element by element within its tolerance
inline bool embedding_bag_backward_check_values(const EmbeddingBagBackwardRun& s, const char* name, const float* got, const float* refv,
                                                const float* tol, int64_t n, bool per_row) {
    if (n == 0) { printf("  %-16s ok    (no row was looked up)\n", name); return true; }
    EmbeddingBagBackwardStats st = embedding_bag_backward_stats(
        s.d_stats, [&] { embedding_bag_backward_compare<<<embedding_bag_backward_helper_grid(n), 256>>>(got, refv, tol, n, s.d_stats); });
    const float max_abs = embedding_bag_backward_bits_float(st.max_abs_bits), max_rel = embedding_bag_backward_bits_float(st.max_rel_bits);
    if (st.bad == 0) {
        printf("  %-16s ok    (%lld elements, max abs err %.3g, max rel err %.3g; tolerance per element: the propagated fp32 bound%s)\n", name,
               (long long)n, max_abs, max_rel, refv == s.d_ref_w && s.a.wtype != EmbeddingBagWeights::fp32 ? ", then 0 or one ulp" : "");
        return true;
    }
    float g, r, t;
    cudaCheck(cudaMemcpy(&g, got + st.first_bad, 4, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(&r, refv + st.first_bad, 4, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(&t, tol + st.first_bad, 4, cudaMemcpyDeviceToHost));
    printf("  %-16s FAIL  %llu of %lld elements (%llu non-finite), max abs err %.3g, max rel err %.3g\n", name, st.bad, (long long)n,
           st.nonfinite, max_abs, max_rel);
    printf("    first at %s: got %.9g expected %.9g (tolerance %.3g)\n", embedding_bag_backward_where(s, (int64_t)st.first_bad, per_row).c_str(),
           g, r, t);
    return false;
}

// rows not looked up (mask == nullptr: every row) hold the same bits as the pristine copy (refp == nullptr: zero)
inline bool embedding_bag_backward_check_untouched(const EmbeddingBagBackwardRun& s, const char* name, const void* cur, const void* refp,
                                                   bool half, const uint8_t* mask, bool unit) {
    const EmbeddingBagBackwardArgs& a = s.a;
    EmbeddingBagBackwardStats st = embedding_bag_backward_stats(s.d_stats, [&] {
        const unsigned grid = embedding_bag_backward_helper_grid(a.num_rows * 32);
        if (half)
            embedding_bag_backward_untouched<unsigned short><<<grid, 256>>>((const unsigned short*)cur, (const unsigned short*)refp, mask,
                                                                             a.weights_offsets, a.D_offsets, a.hash_offsets, a.T, a.num_rows, unit,
                                                                             s.d_stats);
        else
            embedding_bag_backward_untouched<unsigned><<<grid, 256>>>((const unsigned*)cur, (const unsigned*)refp, mask, a.weights_offsets,
                                                                       a.D_offsets, a.hash_offsets, a.T, a.num_rows, unit, s.d_stats);
    });
    if (st.bad == 0) {
        printf("  %-16s ok    (%s)\n", name, mask ? "every row not looked up is bit-identical" : "bit-identical everywhere");
        return true;
    }
    const std::vector<int64_t>& ho = s.in->hash_offsets;
    const int t = embedding_bag_backward_table_of(ho.data(), s.in->T, (int64_t)st.first_bad);
    printf("  %-16s FAIL  %llu elements differ; the first in table %d row %lld\n", name, st.bad, t, (long long)((int64_t)st.first_bad - ho[t]));
    return false;
}

inline bool embedding_bag_backward_check_rest(const EmbeddingBagBackwardRun& s) {
    bool ok = true;
    const bool half = s.a.wtype != EmbeddingBagWeights::fp32;
    ok = embedding_bag_backward_check_untouched(s, s.dense ? "weights (all)" : "weights (rest)", s.W, s.W0, half, s.dense ? nullptr : s.d_mask,
                                                false) && ok;
    if (s.rowwise) ok = embedding_bag_backward_check_untouched(s, "state (rest)", s.M, s.M0, false, s.d_mask, true) && ok;
    if (s.adagrad) ok = embedding_bag_backward_check_untouched(s, "state (rest)", s.M, s.M0, false, s.d_mask, false) && ok;
    if (s.dense) ok = embedding_bag_backward_check_untouched(s, "dense grad (rest)", s.Gd, nullptr, false, s.d_mask, false) && ok;
    return ok;
}

inline bool embedding_bag_backward_check_all(const EmbeddingBagBackwardRun& s) {
    bool ok = true;
    embedding_bag_backward_gather_rows(s);
    if (s.dense) ok = embedding_bag_backward_check_values(s, "dense grad", s.d_cw, s.d_ref_g, s.d_tol_g, s.C, false) && ok;
    else ok = embedding_bag_backward_check_values(s, "weights", s.d_cw, s.d_ref_w, s.d_tol_w, s.C, false) && ok;
    if (s.n_m) ok = embedding_bag_backward_check_values(s, "state", s.d_cm, s.d_ref_m, s.d_tol_m, s.n_m, s.rowwise) && ok;
    return embedding_bag_backward_check_rest(s) && ok;
}

// the graph replay's compact rows against the first run's, bit for bit
inline bool embedding_bag_backward_same_bits(const EmbeddingBagBackwardRun& s, const char* name, const float* x, const float* y, int64_t n,
                                             bool per_row) {
    EmbeddingBagBackwardStats st = embedding_bag_backward_stats(s.d_stats, [&] {
        embedding_bag_backward_bitdiff<<<embedding_bag_backward_helper_grid(n), 256>>>((const unsigned*)x, (const unsigned*)y, n, s.d_stats);
    });
    if (st.bad == 0) { printf("  %-16s ok    (a CUDA-graph replay of the step gave the same bits)\n", name); return true; }
    printf("  %-16s FAIL  the graph replay differs from the first run in %llu of %lld elements (first: %s)\n", name, st.bad, (long long)n,
           embedding_bag_backward_where(s, (int64_t)st.first_bad, per_row).c_str());
    return false;
}

// before a checked run: the tables and state from the pristine copy, the dense gradient zeroed with its
// looked-up rows poisoned (the contract: the buffer arrives zeroed, the step writes those rows), every
// scratch buffer poisoned
inline void embedding_bag_backward_prepare_check(const EmbeddingBagBackwardRun& s) {
    cudaCheck(cudaMemcpy(s.W, s.W0, (size_t)s.a.num_weights * embedding_bag_weight_bytes(s.a.wtype), cudaMemcpyDeviceToDevice));
    if (s.n_state) cudaCheck(cudaMemcpy(s.M, s.M0, (size_t)s.n_state * sizeof(float), cudaMemcpyDeviceToDevice));
    if (s.dense) {
        cudaCheck(cudaMemset(s.Gd, 0, (size_t)s.a.num_weights * sizeof(float)));
        embedding_bag_backward_poison_rows<<<s.row_grid, 256>>>(s.Gd, s.d_src, s.d_col, s.U);
        cudaCheck(cudaGetLastError());
    }
    for (auto& p : s.ws.scratch) poison(p.first, p.second);
}

// timing: every sample starts from the same tables (the looked-up rows restored, untimed)
inline void embedding_bag_backward_prepare_timing(const EmbeddingBagBackwardRun& s) {
    if (!s.dense && s.a.wtype == EmbeddingBagWeights::fp32)
        embedding_bag_backward_copy_rows<float><<<s.row_grid, 256>>>((float*)s.W, (const float*)s.W0, s.d_src, s.d_col, s.U);
    if (!s.dense && s.a.wtype != EmbeddingBagWeights::fp32)
        embedding_bag_backward_copy_rows<uint16_t><<<s.row_grid, 256>>>((uint16_t*)s.W, (const uint16_t*)s.W0, s.d_src, s.d_col, s.U);
    if (s.rowwise) embedding_bag_backward_copy_rows<float><<<s.row_grid, 256>>>(s.M, s.M0, s.d_lin, s.d_iota, s.U);
    if (s.adagrad) embedding_bag_backward_copy_rows<float><<<s.row_grid, 256>>>(s.M, s.M0, s.d_src, s.d_col, s.U);
}

// The check of version k after its step: the reference, the rest untouched, version 1's scratch zero
// again; then the same step captured in a CUDA graph (global capture mode: a host synchronization or an
// allocation inside the step would fail the capture) and replayed, its bits compared with the first run's
inline bool embedding_bag_backward_check(EmbeddingBagBackwardRun& s, int k, int block) {
    bool ok = embedding_bag_backward_check_all(s);
    if (k == 1) {   // version 1 must leave its accumulator and flags zero for the next step
        ok = embedding_bag_backward_check_untouched(s, "v1 accumulator", s.ws.acc, nullptr, false, nullptr, false) && ok;
        ok = embedding_bag_backward_check_untouched(s, "v1 flags", s.ws.flags, nullptr, false, nullptr, true) && ok;
    }
    if (s.a.N == 0) {
        printf("  %-16s skip  (no lookups: the step launches nothing)\n", "graph replay");
        return ok;
    }
    cudaCheck(cudaMemcpy(s.d_fw, s.d_cw, (size_t)s.C * sizeof(float), cudaMemcpyDeviceToDevice));
    if (s.n_m) cudaCheck(cudaMemcpy(s.d_fm, s.d_cm, (size_t)s.n_m * sizeof(float), cudaMemcpyDeviceToDevice));
    embedding_bag_backward_prepare_check(s);
    cudaCheck(cudaDeviceSynchronize());
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    cudaCheck(cudaStreamBeginCapture(s.capture_stream, cudaStreamCaptureModeGlobal));
    embedding_bag_backward(k, s.a, s.ws, block, s.capture_stream);
    cudaCheck(cudaStreamEndCapture(s.capture_stream, &graph));
    cudaCheck(cudaGraphInstantiate(&exec, graph, 0));
    cudaCheck(cudaGraphLaunch(exec, s.capture_stream));
    cudaCheck(cudaStreamSynchronize(s.capture_stream));
    cudaCheck(cudaGraphExecDestroy(exec));
    cudaCheck(cudaGraphDestroy(graph));
    if (k == 1) {
        printf("  graph replay (version 1: float atomics add in a different order each run, so its bits are not compared; "
               "the replay is checked against the reference)\n");
        return embedding_bag_backward_check_all(s) && ok;
    }
    printf("  graph replay, compared bit for bit with the first run:\n");
    embedding_bag_backward_gather_rows(s);
    ok = embedding_bag_backward_same_bits(s, s.dense ? "dense grad" : "weights", s.d_cw, s.d_fw, s.C, false) && ok;
    if (s.n_m) ok = embedding_bag_backward_same_bits(s, "state", s.d_cm, s.d_fm, s.n_m, s.rowwise) && ok;
    return embedding_bag_backward_check_rest(s) && ok;
}

// the tables as fp32 values
inline std::vector<float> embedding_bag_backward_download_weights(const EmbeddingBagBackwardRun& s, const void* W) {
    const size_t n = (size_t)s.a.num_weights;
    if (s.a.wtype == EmbeddingBagWeights::fp32) return device_download((const float*)W, n);
    std::vector<uint16_t> h = device_download((const uint16_t*)W, n);
    std::vector<float> f(n);
    for (size_t i = 0; i < n; i++) f[i] = embedding_bag_half_to_float(h[i], s.a.wtype);
    return f;
}

// --dump: the inputs, the tables (and state, or the dense gradient) before, after the last version's step,
// and the reference's (untouched rows as before)
inline void embedding_bag_backward_dump_results(const EmbeddingBagBackwardRun& s, const EmbeddingBagConfig& cfg, const std::string& dir) {
    const int64_t num_weights = s.a.num_weights;
    if (num_weights > ((int64_t)1 << 26)) {
        printf("--dump skipped: the tables hold %lld elements (the dump is for small sizes, at most 2^26)\n", (long long)num_weights);
        return;
    }
    const std::string p = "embedding_bag_backward_";
    const EmbeddingBagBackwardReference& ref = *s.ref;
    const EmbeddingBagBackwardRows& R = ref.rows;
    embedding_bag_backward_dump(dir, cfg, *s.in);
    // a compact reference (row u at R.col[u]) scattered over a full-size copy
    auto scatter = [&](std::vector<float>& full, const std::vector<float>& compact) {
        for (int64_t u = 0; u < s.U; u++)
            for (int64_t d = 0; d < R.col[u + 1] - R.col[u]; d++) full[s.h_src[u] + d] = compact[R.col[u] + d];
    };
    std::vector<float> before = embedding_bag_backward_download_weights(s, s.W0), after = embedding_bag_backward_download_weights(s, s.W);
    std::vector<float> wref = before;
    if (!s.dense) scatter(wref, ref.w);
    write_npy(dir, p + "weights_before", before.data(), {num_weights});
    write_npy(dir, p + "weights_after", after.data(), {num_weights});
    write_npy(dir, p + "weights_ref", wref.data(), {num_weights});
    if (s.n_state) {
        std::vector<float> sb = device_download(s.M0, (size_t)s.n_state), sa = device_download(s.M, (size_t)s.n_state), sr = sb;
        if (s.rowwise) for (int64_t u = 0; u < s.U; u++) sr[R.linear[u]] = ref.m[u];
        else scatter(sr, ref.m);
        write_npy(dir, p + "state_before", sb.data(), {s.n_state});
        write_npy(dir, p + "state_after", sa.data(), {s.n_state});
        write_npy(dir, p + "state_ref", sr.data(), {s.n_state});
    }
    if (s.dense) {
        std::vector<float> ga = device_download(s.Gd, (size_t)num_weights), gr((size_t)num_weights, 0.0f);
        scatter(gr, ref.grad);
        write_npy(dir, p + "grad", ga.data(), {num_weights});
        write_npy(dir, p + "grad_ref", gr.data(), {num_weights});
    }
    printf("dumped %s*.npy (inputs, weights/state before, after the last version's step, and the reference) to %s\n", p.c_str(), dir.c_str());
}

// the run's first lines: the shape of the lookups and the optimizer
inline void embedding_bag_backward_describe(const EmbeddingBagConfig& cfg, const EmbeddingBagBackwardInputs& in,
                                            const EmbeddingBagBackwardParams& p, const EmbeddingBagBackwardReference& ref) {
    const EmbeddingBagBackwardRows& R = ref.rows;
    int64_t long_runs = 0;
    for (int64_t u = 0; u < R.U(); u++) long_runs += R.count[u] >= EMBEDDING_BAG_BACKWARD_LONG_RUN;
    printf("T=%d B=%d total_D=%d max_D=%d: %lld lookups (%s, %s%s) hit %lld rows; longest run %lld, %lld runs of 32 or more;\n"
           "optimizer %s (lr %g, eps %g), tables %.2f GB\n",
           in.T, in.B, in.total_D(), in.max_D(), (long long)in.N(), cfg.one_row ? "one row" : (cfg.alpha > 1.0 ? "Zipf" : "uniform"),
           embedding_bag_pooling_name(in.mean, in.nobag), cfg.weighted ? ", weighted" : "", (long long)R.U(), (long long)R.max_count,
           (long long)long_runs, EMBEDDING_BAG_BACKWARD_OPT_NAMES[(int)p.opt], p.lr, p.eps,
           (double)in.num_weights * embedding_bag_weight_bytes(p.weights) / 1e9);
    if (p.weights != EmbeddingBagWeights::fp32 && p.opt != EmbeddingBagBackwardOpt::dense) {
        int64_t exact = 0;
        for (float t : ref.w_tol) exact += t == 0.0f;
        printf("weights %s, updates rounded %s (%s); the check wants %lld of %zu updated weights bit for bit, the rest (fp32 bound across a "
               "rounding boundary) to one ulp\n",
               EMBEDDING_BAG_WEIGHTS_NAMES[(int)p.weights], p.stochastic ? "stochastically" : "to nearest",
               p.stochastic ? "Philox4x32-10 keyed by --seed, step 1" : "an update below half an ulp is lost", (long long)exact, ref.w_tol.size());
    }
}

#ifndef NO_MAIN
// the flags and their constraints; exits 2 naming a broken one
void embedding_bag_backward_parse(Cli& cli, EmbeddingBagConfig& cfg, EmbeddingBagFlags& flags, EmbeddingBagBackwardParams& prm,
                                  int argc, char** argv) {
    std::string optimizer = "rowwise_adagrad";
    embedding_bag_add_flags(cli, cfg, flags);
    cli.add_choice("optimizer", &optimizer, {"dense", "sgd", "rowwise_adagrad", "adagrad"}, "the fused optimizer (dense: write the gradient)");
    cli.add_double("lr", &prm.lr, "learning rate");
    cli.add_double("eps", &prm.eps, "Adagrad's epsilon");
    cli.constraints = std::string(EMBEDDING_BAG_CONSTRAINTS) + ",\n"
                      "  fewer than 2^31 lookups, eps > 0;\n"
                      "  versions 2-8 need every D <= 1024, versions 4-8 fewer than 2^32 rows in all, version 6 max D <= 64;\n"
                      "  --block a power of two from 32 to 512 (at most 256 for versions 7 and 8)";
    cli.parse(argc, argv);
    for (int i = 0; i < 4; i++)
        if (optimizer == EMBEDDING_BAG_BACKWARD_OPT_NAMES[i]) prm.opt = (EmbeddingBagBackwardOpt)i;
    require(prm.eps > 0.0, "--eps (%g) must be > 0", prm.eps);
    require(cli.block == 0 || (cli.block >= 32 && cli.block <= 512 && (cli.block & (cli.block - 1)) == 0),
            "--block (%d) must be a power of two from 32 to 512", cli.block);
    for (int k : cli.kernels) require(!(k >= 7 && cli.block > 256), "--block (%d) must be at most 256 for version %d", cli.block, k);
}

int main(int argc, char** argv) {
    EmbeddingBagConfig cfg;
    EmbeddingBagFlags flags;
    EmbeddingBagBackwardParams prm;
    Cli cli("embedding_bag_backward",
            "Embedding bags, backward with the optimizer fused in (FBGEMM split TBE layout, exact optimizers):\n"
            "one update per looked-up row, rows nobody looked up untouched; --pooling none: one gradient row per lookup.", 8, 8);
    embedding_bag_backward_parse(cli, cfg, flags, prm, argc, argv);
    EmbeddingBagBackwardInputs in = embedding_bag_backward_inputs(cli, cfg, flags);
    embedding_bag_set_precision(cfg, flags);
    prm.weights = cfg.weights; prm.stochastic = cfg.stochastic; prm.seed = cli.seed;
    const int wbytes = embedding_bag_weight_bytes(prm.weights);
    select_versions(cli, [&](int k) { return embedding_bag_backward_skip_reason(k, in.max_D(), in.num_rows()); }, false);

    cuda_init();
    require_device_memory(embedding_bag_backward_device_bytes(in, prm.opt, cli.kernels, wbytes), "embedding_bag_backward", !cli.check_only);
    // the reference: the touched rows' initial values come from the same hash the GPU fills the tables with
    const uint64_t seed = cli.seed;
    auto w0 = [&](int64_t e) { return embedding_bag_backward_initial_weight_as(seed, e, prm.weights); };
    auto m0 = [&](int64_t i) { return embedding_bag_backward_initial_state(seed, i); };
    const EmbeddingBagBackwardReference ref = embedding_bag_backward_cpu(in, prm, w0, m0);
    embedding_bag_backward_describe(cfg, in, prm, ref);
    EmbeddingBagBackwardRun s;
    embedding_bag_backward_setup(s, in, ref, prm, seed, cli.kernels);

    char shape[600];
    snprintf(shape, sizeof shape, "%s,%s", embedding_bag_shape(cfg).c_str(), EMBEDDING_BAG_BACKWARD_OPT_NAMES[(int)prm.opt]);
    OpRunner r;
    r.op = "embedding_bag_backward";
    r.shape = shape;
    r.bytes = embedding_bag_backward_bytes(in, ref.rows, prm.opt, wbytes);
    r.skip_reason = [&](int k) { return embedding_bag_backward_skip_reason(k, in.max_D(), in.num_rows()); };
    r.blocks_for = [&](int k) { return embedding_bag_backward_blocks(k); };
    r.prepare_check = [&] { embedding_bag_backward_prepare_check(s); };
    r.prepare_timing = [&] { embedding_bag_backward_prepare_timing(s); };
    r.launch = [&](int k, int block) { embedding_bag_backward(k, s.a, s.ws, block, 0); };
    r.check = [&](int k, int block) { return embedding_bag_backward_check(s, k, block); };
    const double rw = embedding_bag_backward_fbgemm_rw(in, cfg.L, wbytes);
    r.extra = [&](int, int, double ms) {
        char buf[96];
        snprintf(buf, sizeof buf, "fbgemm_gbps=%.0f unique_rows=%lld", 2.0 * rw / (ms * 1e-3) / 1e9, (long long)s.U);
        return std::string(buf);
    };
    int rc = run_versions(cli, r);
    if (!cli.dump_dir.empty()) embedding_bag_backward_dump_results(s, cfg, cli.dump_dir);
    embedding_bag_backward_release(s);
    return rc;
}
#endif
