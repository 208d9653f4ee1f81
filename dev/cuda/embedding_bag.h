// embedding_bag.h: the inputs of the two bag ops (embedding_bag_forward.cu, embedding_bag_backward.cu),
// written once so that a seed gives both ops the same bags by construction: the configuration and its
// flags, the generated layout (FBGEMM's split-TBE layout), the validation every kernel relies on, the
// --break-input test hook, the memory the inputs take, and the .npy dump and --load of the inputs.
//
// Replaying one's own trace (T tables, B bags each, bag-major per table as below), with numpy:
//   p = "dir/embedding_bag_forward_"            # or embedding_bag_backward_
//   np.save(p + "indices.npy", ids.astype(np.int64))            # row ids, table by table, bag by bag
//   np.save(p + "offsets.npy", offs.astype(np.int64))           # T*B+1 entries, offs[0] = 0, non-decreasing
//   np.save(p + "D_offsets.npy", np.cumsum([0] + Ds).astype(np.int32))
//   np.save(p + "E.npy", np.array(Es, np.int64))
//   np.save(p + "meta.npy", np.array([T, B, sum(Ds), pooling, weighted, L], np.int64))  # pooling 0 sum, 1 mean,
//                                                                     # 2 none; L: nominal bag length
//   (weighted: np.save(p + "per_sample_weights.npy", w.astype(np.float32)))
// then `./embedding_bag_forward all --load dir`. Wrong dtypes, shapes, ids or offsets are refused (exit 2)
// with the file and position.
#pragma once
#include "common.h"
#include <cuda_fp16.h>

// the tables' element type (--weights; the rounding of half weights: below)
enum class EmbeddingBagWeights { fp32 = 0, fp16 = 1, bf16 = 2 };
static const char* const EMBEDDING_BAG_WEIGHTS_NAMES[] = {"fp32", "fp16", "bf16"};
inline int embedding_bag_weight_bytes(EmbeddingBagWeights w) { return w == EmbeddingBagWeights::fp32 ? 4 : 2; }

struct EmbeddingBagConfig {
    int T = 32, D = 128, B = 512, L = 20;
    int64_t E = 100000;
    double alpha = 1.15;        // <= 1: uniform row ids; > 1: FBGEMM's Zipf recipe (common.h)
    bool mean = false, weighted = false, mixed_dims = false, one_row = false;
    bool nobag = false;         // --pooling none: one output row per lookup (needs one D for all tables)
    bool distinct = true;       // Zipf bags of L distinct rows where E >= L (FBGEMM's recipe); off: repeats
    std::vector<int> Ds, Es;    // per-table D and E, cycled over the tables (override D, E, mixed_dims)
    double empty_frac = 0.0;    // each bag is emptied with this probability
    std::string loaded;         // the --load directory the inputs came from ("" = generated)
    EmbeddingBagWeights weights = EmbeddingBagWeights::fp32;   // --weights, --rounding (embedding_bag_set_precision)
    bool stochastic = true;
};

// The layout: tables t = 0..T-1 of E[t] rows of D(t) columns at weights_offsets[t] in one flat array;
// bag (t, b) is indices[offsets[t*B + b] .. offsets[t*B + b + 1]); out[b] holds the T pooled rows side
// by side, table t at columns D_offsets[t] .. D_offsets[t+1]. nobag (--pooling none, FBGEMM's sequence
// embeddings): every table has the same D (FBGEMM's nobag layout; mixed dims are refused) and out[l] is
// lookup l's row, N x D; the offsets only say which table a lookup belongs to (bags mean nothing else).
struct EmbeddingBagInputs {
    int T = 0, B = 0;
    bool mean = false, nobag = false;
    std::vector<int> D_offsets;             // T+1
    std::vector<int64_t> E;                 // rows of each table
    std::vector<int64_t> weights_offsets;   // T
    std::vector<int64_t> hash_offsets;      // T+1: running sum of E (linear row ids)
    int64_t num_weights = 0;                // elements of the flat weight array
    std::vector<int64_t> indices, offsets;  // N, T*B+1
    std::vector<float> per_sample_weights;  // empty: unweighted
    int total_D() const { return D_offsets.empty() ? 0 : D_offsets.back(); }
    int D(int t) const { return D_offsets[t + 1] - D_offsets[t]; }
    int64_t num_rows() const { return hash_offsets.empty() ? 0 : hash_offsets.back(); }
    int64_t N() const { return (int64_t)indices.size(); }
    int max_D() const { int m = 0; for (int t = 0; t < T; t++) m = std::max(m, D(t)); return m; }
    // the output (forward) and grad_output (backward): B x total_D pooled, N x D nobag
    int64_t out_rows() const { return nobag ? N() : B; }
    int64_t out_cols() const { return nobag ? D(0) : total_D(); }
};

// --mixed-dims: the dims cycle through these, and E halves over every 4 tables (tables of different E and D)
static const int EMBEDDING_BAG_MIXED_D[] = {4, 12, 36, 64, 132, 260};

inline int embedding_bag_table_D(const EmbeddingBagConfig& c, int t) {
    if (!c.Ds.empty()) return c.Ds[t % c.Ds.size()];
    if (c.mixed_dims) return EMBEDDING_BAG_MIXED_D[t % 6];
    return c.D;
}
inline int64_t embedding_bag_table_E(const EmbeddingBagConfig& c, int t) {
    if (!c.Es.empty()) return c.Es[t % c.Es.size()];
    if (c.mixed_dims) return std::max<int64_t>(c.E >> (t % 4), std::max(c.L, 1));
    return c.E;
}

// the table layout (D_offsets, E, weights_offsets, hash_offsets, num_weights) from per-table D and E,
// every sum and product checked (exit 2 on overflow)
inline void embedding_bag_set_layout(EmbeddingBagInputs& in, const std::vector<int>& Ds, const std::vector<int64_t>& Es) {
    in.D_offsets.assign(1, 0);
    in.hash_offsets.assign(1, 0);
    in.E.clear();
    in.weights_offsets.clear();
    int64_t total_D = 0, wo = 0;
    for (size_t t = 0; t < Ds.size(); t++) {
        total_D += Ds[t];
        if (total_D > INT32_MAX) fail_args("total_D (sum of the tables' D) must be < 2^31");
        in.D_offsets.push_back((int)total_D);
        in.E.push_back(Es[t]);
        in.weights_offsets.push_back(wo);
        in.hash_offsets.push_back(add64(in.hash_offsets.back(), Es[t], "the rows of all tables"));
        wo = add64(wo, mul64(Es[t], Ds[t], "E*D of a table"), "the weights of all tables");
    }
    in.num_weights = wo;
}

// Row ids, bags and per-sample weights from the seed; no table weights (they can be GBs: each op makes
// its own). Three independent streams: row ids (so that the Zipf statistics do not depend on the other
// flags), per-sample weights and empty bags; the ops use further streams of their own.
inline EmbeddingBagInputs embedding_bag_make_inputs(const EmbeddingBagConfig& c, uint64_t seed) {
    EmbeddingBagInputs in;
    in.T = c.T; in.B = c.B; in.mean = c.mean; in.nobag = c.nobag;
    std::vector<int> Ds;
    std::vector<int64_t> Es;
    for (int t = 0; t < c.T; t++) { Ds.push_back(embedding_bag_table_D(c, t)); Es.push_back(embedding_bag_table_E(c, t)); }
    embedding_bag_set_layout(in, Ds, Es);
    Rng idx_rng(seed), aux_rng(seed ^ 0xA5A5A5A5F00DF00Dull);
    std::vector<std::vector<int64_t>> rows(c.T);
    for (int t = 0; t < c.T; t++) {
        if (c.one_row) rows[t].assign((size_t)c.B * c.L, idx_rng.randint(0, in.E[t]));
        else rows[t] = make_bag_indices(c.B, c.L, in.E[t], c.alpha, idx_rng, c.distinct);
    }
    in.offsets.assign(1, 0);
    for (int t = 0; t < c.T; t++) {
        for (int b = 0; b < c.B; b++) {
            bool empty = c.empty_frac > 0.0 && aux_rng.uniform01() < c.empty_frac;
            if (!empty)
                in.indices.insert(in.indices.end(), rows[t].begin() + (size_t)b * c.L, rows[t].begin() + (size_t)(b + 1) * c.L);
            in.offsets.push_back((int64_t)in.indices.size());
        }
        std::vector<int64_t>().swap(rows[t]);
    }
    if (c.weighted) in.per_sample_weights = make_random_floats(in.indices.size(), aux_rng, -1.f, 1.f);
    return in;
}

// The checks a caller's inputs must pass before a kernel may touch them (every version trusts them: an
// index >= E_t would read or update a row of another table, or past the array). "" when fine, else what
// is wrong and where.
inline std::string embedding_bag_validate(const EmbeddingBagInputs& in) {
    char buf[256];
    auto err = [&](const char* fmt, auto... args) {
        if constexpr (sizeof...(args) == 0) snprintf(buf, sizeof buf, "%s", fmt);
        else snprintf(buf, sizeof buf, fmt, args...);
        return std::string(buf);
    };
    const int T = in.T, B = in.B;
    if (T < 1 || T > 65535 || B < 1) return err("T (%d) must be 1..65535 and B (%d) >= 1", T, B);
    if ((int64_t)T * B >= INT32_MAX) return err("T*B (%lld) must be < 2^31 (a bag id is 32-bit)", (long long)T * B);
    if ((int)in.D_offsets.size() != T + 1) return err("D_offsets has %zu entries, expected T+1 = %d", in.D_offsets.size(), T + 1);
    if (in.D_offsets[0] != 0) return err("D_offsets[0] (%d) must be 0", in.D_offsets[0]);
    for (int t = 0; t < T; t++) {
        int64_t D = (int64_t)in.D_offsets[t + 1] - in.D_offsets[t];
        if (D <= 0 || D % 4 != 0) return err("D of table %d (%lld) must be a positive multiple of 4", t, (long long)D);
    }
    if ((int)in.E.size() != T || (int)in.weights_offsets.size() != T || (int)in.hash_offsets.size() != T + 1)
        return err("E, weights_offsets and hash_offsets need T, T and T+1 entries (have %zu, %zu and %zu)", in.E.size(),
                   in.weights_offsets.size(), in.hash_offsets.size());
    if (in.hash_offsets[0] != 0) return err("hash_offsets[0] (%lld) must be 0", (long long)in.hash_offsets[0]);
    for (int t = 0; t < T; t++) {
        const int64_t wo = in.weights_offsets[t], E = in.E[t];
        if (E < 1 || E > ((int64_t)1 << 48)) return err("E of table %d (%lld) must be 1..2^48", t, (long long)E);
        if (in.hash_offsets[t + 1] != in.hash_offsets[t] + E)
            return err("hash_offsets[%d] (%lld) must be hash_offsets[%d] + E = %lld", t + 1, (long long)in.hash_offsets[t + 1], t,
                       (long long)(in.hash_offsets[t] + E));
        if (wo < 0 || wo % 4 != 0)
            return err("weights_offsets[%d] (%lld) must be a non-negative multiple of 4 (16-byte aligned rows)", t, (long long)wo);
        if (wo > in.num_weights || E * (int64_t)in.D(t) > in.num_weights - wo)   // E <= 2^48, D < 2^31: no overflow
            return err("table %d (offset %lld, %lld rows of %d) runs past the %lld weights", t, (long long)wo, (long long)E, in.D(t),
                       (long long)in.num_weights);
    }
    if (in.nobag) {
        if (in.mean) return err("pooling is none or mean, not both");
        for (int t = 1; t < T; t++)
            if (in.D(t) != in.D(0))
                return err("--pooling none needs one D for every table (FBGEMM's nobag layout, out N x D): table %d has D = %d, table 0 D = %d",
                           t, in.D(t), in.D(0));
        if (!in.per_sample_weights.empty()) return err("--pooling none takes no per-sample weights (FBGEMM's nobag kernels have none)");
    }
    const int64_t nbags = (int64_t)T * B;
    if ((int64_t)in.offsets.size() != nbags + 1)
        return err("offsets has %zu entries, expected T*B+1 = %lld", in.offsets.size(), (long long)(nbags + 1));
    if (in.offsets[0] != 0) return err("offsets[0] (%lld) must be 0", (long long)in.offsets[0]);
    for (int64_t i = 1; i <= nbags; i++)
        if (in.offsets[i] < in.offsets[i - 1])
            return err("offsets must be non-decreasing: offsets[%lld] = %lld < offsets[%lld] = %lld", (long long)i,
                       (long long)in.offsets[i], (long long)(i - 1), (long long)in.offsets[i - 1]);
    if (in.offsets[nbags] != (int64_t)in.indices.size())
        return err("offsets[T*B] (%lld) must equal the number of indices (%zu)", (long long)in.offsets[nbags], in.indices.size());
    if (!in.per_sample_weights.empty() && in.per_sample_weights.size() != in.indices.size())
        return err("per_sample_weights has %zu entries, expected one per index (%zu)", in.per_sample_weights.size(), in.indices.size());
    for (size_t l = 0; l < in.per_sample_weights.size(); l++)
        if (!std::isfinite(in.per_sample_weights[l]))
            return err("per_sample_weights[%zu] is %g: the weights must be finite", l, in.per_sample_weights[l]);
    for (int t = 0; t < T; t++)
        for (int64_t l = in.offsets[(int64_t)t * B]; l < in.offsets[(int64_t)(t + 1) * B]; l++)
            if (in.indices[l] < 0 || in.indices[l] >= in.E[t])
                return err("indices[%lld] = %lld (table %d) is out of range: table %d has E = %lld rows", (long long)l,
                           (long long)in.indices[l], t, t, (long long)in.E[t]);
    return "";
}

// ----------------------------------------------------------------------------------------------
// Weight precision (--weights fp32|fp16|bf16) and the rounding of half weights (--rounding). Accumulation
// and optimizer state are fp32 whatever the weights; the fp32 build defaults to fp32 weights, the _bf16
// build to bf16 weights rounded to nearest (what that build did before the flag existed).
//
// Stochastic rounding (the default for half weights, as in FBGEMM) rounds a value v between two
// neighbouring half values lo (v rounded toward zero) and hi (the next one away from zero) up to hi with
// probability q = (v - lo) / (hi - lo): unbiased, so an update smaller than half an ulp survives in
// expectation where nearest rounding drops it every time. The decision is `u < q` for a uniform
// u = (r >> 8) * 2^-24 from a 32-bit random word r: q is exact in fp32 (the difference is v's dropped bits,
// the divisor a power of two), so P(up) = q exactly whenever q is a multiple of 2^-24 (every fp32 v in
// bf16's normal range, and in fp16's down to 2^-24). The same function runs on the host and the GPU.
//
// The random words: Philox4x32-10, the counter-based generator of curand (curand_Philox4x32_10 in
// curand_kernel.h on the GPU; the same rounds written out below for the reference, which the CPU test
// checks against Random123's published known-answer vectors). Key = the run's seed; the backward's counter
// map (16 bits of a call per weight, 8 weights per call) is embedding_bag_backward_round_word_host: the
// bits depend on nothing but (seed, step, row, column), not on which thread or version wrote the element.
// A counter-based generator, rather than a hash of our own, because its statistical quality is published
// and curand ships it. embedding_bag_round_bits_host: the words at one counter (e / 4, step, 0).


// Philox4x32-10 on the host: ctr (4 words), key (2 words) -> out (4 words), Random123's word order
inline void embedding_bag_philox_host(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3], k0 = key[0], k1 = key[1];
    for (int round = 0; round < 10; round++) {
        if (round > 0) { k0 += 0x9E3779B9u; k1 += 0xBB67AE85u; }
        const uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
        const uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0, hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        c0 = hi1 ^ c1 ^ k0; c1 = lo1; c2 = hi0 ^ c3 ^ k1; c3 = lo0;
    }
    out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}

// the four random words for the weights e4*4 .. e4*4+3 at `step`
inline void embedding_bag_round_bits_host(uint64_t seed, uint32_t step, int64_t e4, uint32_t out[4]) {
    const uint32_t ctr[4] = {(uint32_t)e4, (uint32_t)((uint64_t)e4 >> 32), step, 0u}, key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    embedding_bag_philox_host(ctr, key, out);
}

// raw 16-bit patterns of the two half types, and their fp32 values (exact)
__host__ __device__ inline float embedding_bag_half_to_float(uint16_t h, EmbeddingBagWeights w) {
    if (w == EmbeddingBagWeights::bf16) { __nv_bfloat16_raw r; r.x = h; return __bfloat162float(__nv_bfloat16(r)); }
    __half_raw r; r.x = h; return __half2float(__half(r));
}
__host__ __device__ inline uint16_t embedding_bag_half_bits(float v, EmbeddingBagWeights w, bool toward_zero) {
    if (w == EmbeddingBagWeights::bf16) return __nv_bfloat16_raw(toward_zero ? __float2bfloat16_rz(v) : __float2bfloat16_rn(v)).x;
    return __half_raw(toward_zero ? __float2half_rz(v) : __float2half_rn(v)).x;
}

// one weight as fp32, by its C++ type (the forward's kernels are templated on it)
__host__ __device__ inline float embedding_bag_to_float(float x) { return x; }
__host__ __device__ inline float embedding_bag_to_float(__half x) { return __half2float(x); }
__host__ __device__ inline float embedding_bag_to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

// v rounded to the half type w by the definition above: up with probability q = (v - lo) / (hi - lo) using
// the random word r, or to nearest (stochastic false). Values exactly representable, non-finite ones and
// those past the largest finite half (whose neighbour away from zero is infinite) round to nearest. Every
// value goes through here on the host; on the GPU only those off embedding_bag_round_half's integer path.
__host__ __device__ inline uint16_t embedding_bag_round_half_by_division(float v, EmbeddingBagWeights w, bool stochastic, uint32_t r) {
    if (!stochastic || !isfinite(v)) return embedding_bag_half_bits(v, w, false);
    const uint16_t lo = embedding_bag_half_bits(v, w, true), hi = (uint16_t)(lo + 1);   // sign-magnitude: +1 steps away from zero
    const float flo = embedding_bag_half_to_float(lo, w), fhi = embedding_bag_half_to_float(hi, w);
    if (flo == v || !isfinite(fhi)) return embedding_bag_half_bits(v, w, false);
    const float q = (v - flo) / (fhi - flo);
    return (float)(r >> 8) * 0x1.0p-24f < q ? hi : lo;
}

__host__ __device__ inline uint32_t embedding_bag_float_bits(float v) {
#ifdef __CUDA_ARCH__
    return __float_as_uint(v);
#else
    uint32_t b;
    memcpy(&b, &v, 4);
    return b;
#endif
}

// The same bits by integer arithmetic where the half grid is a fixed number s of fp32 mantissa bits (bf16:
// s = 16 below the largest finite bf16, subnormals included; fp16: s = 13 for 2^-14 <= |v| < 65504): q is
// the dropped bits d over 2^s, and `u < q` is (r >> (32 - s)) < d, so adding (~r) >> (32 - s) to v's bits
// carries into the kept bits exactly then; truncating the sum is the result (the usual integer form, with the
// decision kept identical to the division's: tests/ compares them). Other values take the division.
__host__ __device__ inline uint16_t embedding_bag_round_half(float v, EmbeddingBagWeights w, bool stochastic, uint32_t r) {
    if (stochastic) {
        const uint32_t b = embedding_bag_float_bits(v), mag = b & 0x7FFFFFFFu;
        if (w == EmbeddingBagWeights::bf16) {
            if (mag < 0x7F7F0000u) return (uint16_t)((b + (~r >> 16)) >> 16);                   // no carry into the sign
        } else if (mag >= 0x38800000u && mag < 0x477FE000u) {                                      // 2^-14 <= |v| < 65504
            return (uint16_t)(((b >> 16) & 0x8000u) | (((mag + (~r >> 19)) >> 13) - (112u << 10)));  // rebias 127 -> 15
        }
    }
    return embedding_bag_round_half_by_division(v, w, stochastic, r);
}

// ----------------------------------------------------------------------------------------------
// the command line both ops share

// the build's default weights: the _bf16 build keeps what it did before --weights (bf16, rounded to nearest)
#ifdef ENABLE_BF16
static const char *const EMBEDDING_BAG_DEFAULT_WEIGHTS = "bf16", *const EMBEDDING_BAG_DEFAULT_ROUNDING = "nearest";
#else
static const char *const EMBEDDING_BAG_DEFAULT_WEIGHTS = "fp32", *const EMBEDDING_BAG_DEFAULT_ROUNDING = "stochastic";
#endif

struct EmbeddingBagFlags {
    std::string pooling = "sum", break_input = "none", distinct = "on";
    std::string weights = EMBEDDING_BAG_DEFAULT_WEIGHTS, rounding = EMBEDDING_BAG_DEFAULT_ROUNDING;
};

inline void embedding_bag_add_flags(Cli& cli, EmbeddingBagConfig& c, EmbeddingBagFlags& f) {
    cli.add_int("T", &c.T, "tables");
    cli.add_int64("E", &c.E, "rows per table");
    cli.add_int("D", &c.D, "columns per table (a multiple of 4)");
    add_bag_recipe_flags(cli, &c.B, &c.L, &c.alpha, &f.distinct);
    cli.add_choice("pooling", &f.pooling, {"sum", "mean", "none"},
                   "pooling; none: one output row per lookup (FBGEMM's nobag; one D for all tables, unweighted)");
    cli.add_flag("weighted", &c.weighted, "per-sample weights");
    // tables of different sizes
    cli.add_flag("mixed-dims", &c.mixed_dims, "tables of different D (4,12,36,64,132,260 cycled) and E (E halved over every 4 tables)");
    cli.add_int_list("Ds", &c.Ds, "per-table D, cycled over the tables (overrides --D, --mixed-dims)");
    cli.add_int_list("Es", &c.Es, "per-table E, cycled over the tables (overrides --E, --mixed-dims)");
    // adversarial and broken inputs
    cli.add_choice("break-input", &f.break_input, {"none", "index", "order", "count"},
                   "test only: corrupt the generated input (an index = E, offsets decreasing, an offset missing) to see it rejected");
    cli.add_double("empty-frac", &c.empty_frac, "fraction of bags made empty (1: all bags empty)");
    cli.add_flag("one-row", &c.one_row, "adversarial input: every lookup of a table hits the same row");
    // the weights' precision
    cli.add_choice("weights", &f.weights, {"fp32", "fp16", "bf16"}, "the tables' element type (accumulation and optimizer state stay fp32)");
    cli.add_choice("rounding", &f.rounding, {"nearest", "stochastic"},
                   "how the backward rounds updated half weights (stochastic: Philox bits from --seed, as FBGEMM; fp32 weights ignore it)");
    cli.supports_load = true;
}

// the weights' type and rounding from the flags (generated and loaded inputs alike)
inline void embedding_bag_set_precision(EmbeddingBagConfig& c, const EmbeddingBagFlags& f) {
    for (int i = 0; i < 3; i++)
        if (f.weights == EMBEDDING_BAG_WEIGHTS_NAMES[i]) c.weights = (EmbeddingBagWeights)i;
    c.stochastic = f.rounding == "stochastic";
}

static const char* const EMBEDDING_BAG_CONSTRAINTS =
    "  T 1..65535, B >= 1, L >= 0, E >= 1, every D a positive multiple of 4, 0 <= empty-frac <= 1, T*B < 2^31;\n"
    "  --pooling none: the same D for every table, no --weighted;\n"
    "  the inputs and tables must fit in host and device memory (checked before allocating);\n"
    "  Zipf bags hold L distinct rows only where E >= L and --distinct on; elsewhere they may repeat rows";

// after parse: the flags' own ranges (exit 2), before anything is allocated
inline void embedding_bag_check_config(EmbeddingBagConfig& c, const EmbeddingBagFlags& f) {
    c.mean = f.pooling == "mean";
    c.nobag = f.pooling == "none";
    require(!(c.nobag && c.weighted), "--pooling none takes no per-sample weights (--weighted): FBGEMM's nobag kernels have none");
    c.distinct = f.distinct == "on";
    require(c.T >= 1 && c.T <= 65535, "T (%d) must be 1..65535 (the table is the grid's y index)", c.T);
    require(c.B >= 1, "B (%d) must be >= 1", c.B);
    require(c.L >= 0, "L (%d) must be >= 0", c.L);
    require(c.E >= 1, "E (%lld) must be >= 1", (long long)c.E);
    for (int E : c.Es) require(E >= 1, "every --Es entry must be >= 1 (got %d)", E);
    require(c.empty_frac >= 0.0 && c.empty_frac <= 1.0, "--empty-frac (%g) must be in [0, 1]", c.empty_frac);
    require((int64_t)c.T * c.B < INT32_MAX, "T*B (%lld) must be < 2^31", (long long)c.T * c.B);
    int64_t total_D = 0, weights = 0;
    for (int t = 0; t < c.T; t++) {
        const int D = embedding_bag_table_D(c, t);
        require(D > 0 && D % 4 == 0, "D of table %d (%d) must be a positive multiple of 4", t, D);
        require(!c.nobag || D == embedding_bag_table_D(c, 0),
                "--pooling none needs one D for every table (FBGEMM's nobag layout, out N x D): table %d has D = %d, table 0 D = %d", t, D,
                embedding_bag_table_D(c, 0));
        total_D += D;
        weights = add64(weights, mul64(embedding_bag_table_E(c, t), D, "E*D of a table"), "the weights of all tables");
    }
    require(total_D <= INT32_MAX, "total_D (%lld, the sum of the tables' D) must be < 2^31", (long long)total_D);
    mul64(mul64(c.T, c.B, "T*B"), c.L, "T*B*L lookups");
    mul64(c.B, total_D, "B*total_D outputs");
    if (c.nobag) mul64(mul64(mul64(c.T, c.B, "T*B"), c.L, "T*B*L lookups"), embedding_bag_table_D(c, 0), "N*D outputs");
}

// elements of the flat weight array the configuration describes (checked by embedding_bag_check_config)
inline int64_t embedding_bag_num_weights(const EmbeddingBagConfig& c) {
    int64_t w = 0;
    for (int t = 0; t < c.T; t++) w = add64(w, mul64(embedding_bag_table_E(c, t), embedding_bag_table_D(c, t), "E*D of a table"), "the weights");
    return w;
}

// the pooling's name in the shape field and the messages
inline const char* embedding_bag_pooling_name(bool mean, bool nobag) { return nobag ? "none" : (mean ? "mean" : "sum"); }

// --pooling none picks the op's nobag version when no version is named: the flag is read before the common
// parser sets the default (a --load of a nobag dump keeps the pooled default and names the version that can)
inline int embedding_bag_default_version(int argc, char** argv, int pooled, int nobag) {
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], "--pooling") == 0 && strcmp(argv[i + 1], "none") == 0) return nobag;
    return pooled;
}

// --break-input: one corruption the validator must reject
inline void embedding_bag_break(EmbeddingBagInputs& in, const std::string& what) {
    if (what == "index") {
        for (int64_t bag = 0; bag < (int64_t)in.T * in.B; bag++)
            if (in.offsets[bag + 1] > in.offsets[bag]) { in.indices[in.offsets[bag]] = in.E[bag / in.B]; break; }
    } else if (what == "order") {
        in.offsets[1] = -1;
    } else if (what == "count") {
        in.offsets.pop_back();
    }
}

// host bytes of the generated inputs at their largest (the indices twice while the bags are assembled,
// the Zipf map, the offsets and per-sample weights)
inline double embedding_bag_inputs_host_bytes(const EmbeddingBagConfig& c) {
    const double N = (double)c.T * c.B * c.L;
    return 16.0 * N + 8.0 * ((double)c.T * c.B + 1) + (c.weighted ? 4.0 * N : 0.0) + bag_indices_host_bytes(c.B, c.L, c.alpha);
}

// the shape field of the RESULT lines (the peer scripts read it from the dump to print the same one)
// (weights other than the build's default, or their rounding, add ",fp16,stochastic" and the like)
inline std::string embedding_bag_precision_suffix(const EmbeddingBagConfig& c) {
    const std::string w = EMBEDDING_BAG_WEIGHTS_NAMES[(int)c.weights], r = c.stochastic ? "stochastic" : "nearest";
    if (c.weights == EmbeddingBagWeights::fp32) return w == EMBEDDING_BAG_DEFAULT_WEIGHTS ? "" : ",fp32";
    return w == EMBEDDING_BAG_DEFAULT_WEIGHTS && r == EMBEDDING_BAG_DEFAULT_ROUNDING ? "" : "," + w + "," + r;
}
inline std::string embedding_bag_shape(const EmbeddingBagConfig& c) {
    if (!c.loaded.empty())
        return "T" + std::to_string(c.T) + ",B" + std::to_string(c.B) + ",loaded," + embedding_bag_pooling_name(c.mean, c.nobag) +
               embedding_bag_precision_suffix(c);
    std::string Ds, Es;
    for (int t = 0; t < std::min(c.T, 8); t++) {
        Ds += (t ? ":" : "") + std::to_string(embedding_bag_table_D(c, t));
        Es += (t ? ":" : "") + std::to_string(embedding_bag_table_E(c, t));
    }
    bool same_D = true, same_E = true;
    for (int t = 1; t < c.T; t++) {
        same_D = same_D && embedding_bag_table_D(c, t) == embedding_bag_table_D(c, 0);
        same_E = same_E && embedding_bag_table_E(c, t) == embedding_bag_table_E(c, 0);
    }
    if (same_D) Ds = std::to_string(embedding_bag_table_D(c, 0));
    else if (c.T > 8) Ds += ":...";
    if (same_E) Es = std::to_string(embedding_bag_table_E(c, 0));
    else if (c.T > 8) Es += ":...";
    char buf[512];
    snprintf(buf, sizeof buf, "T%d,E%s,D%s,B%d,L%d,alpha%g,%s%s%s%s%s", c.T, Es.c_str(), Ds.c_str(), c.B, c.L,
             c.alpha > 1.0 ? c.alpha : 0.0, embedding_bag_pooling_name(c.mean, c.nobag), c.weighted ? ",weighted" : "",
             c.one_row ? ",one_row" : "", c.empty_frac > 0 ? (",empty" + std::to_string(c.empty_frac).substr(0, 4)).c_str() : "",
             c.distinct ? "" : ",repeats");
    return buf + embedding_bag_precision_suffix(c);
}

// ----------------------------------------------------------------------------------------------
// .npy dump and --load of the inputs: <prefix>indices, offsets, D_offsets, E, weights_offsets,
// hash_offsets, per_sample_weights (when weighted) and meta (T, B, total_D, pooling 0/1/2 = sum/mean/none,
// weighted, L)

inline void embedding_bag_dump_inputs(const std::string& dir, const std::string& prefix, const EmbeddingBagInputs& in, int L) {
    write_npy(dir, prefix + "indices", in.indices.data(), {(int64_t)in.indices.size()});
    write_npy(dir, prefix + "offsets", in.offsets.data(), {(int64_t)in.offsets.size()});
    write_npy(dir, prefix + "D_offsets", in.D_offsets.data(), {(int64_t)in.D_offsets.size()});
    write_npy(dir, prefix + "E", in.E.data(), {(int64_t)in.T});
    write_npy(dir, prefix + "weights_offsets", in.weights_offsets.data(), {(int64_t)in.T});
    write_npy(dir, prefix + "hash_offsets", in.hash_offsets.data(), {(int64_t)in.hash_offsets.size()});
    if (!in.per_sample_weights.empty())
        write_npy(dir, prefix + "per_sample_weights", in.per_sample_weights.data(), {(int64_t)in.per_sample_weights.size()});
    const int64_t meta[6] = {in.T, in.B, in.total_D(), in.nobag ? 2 : (in.mean ? 1 : 0), in.per_sample_weights.empty() ? 0 : 1, L};
    write_npy(dir, prefix + "meta", meta, {6});
}

// two inputs bit for bit the same (the per-sample weights compared as bits: -0.0 and NaN count)
inline bool embedding_bag_identical(const EmbeddingBagInputs& a, const EmbeddingBagInputs& b) {
    return a.T == b.T && a.B == b.B && a.mean == b.mean && a.nobag == b.nobag && a.D_offsets == b.D_offsets && a.E == b.E &&
           a.weights_offsets == b.weights_offsets && a.hash_offsets == b.hash_offsets && a.num_weights == b.num_weights &&
           a.indices == b.indices && a.offsets == b.offsets && a.per_sample_weights.size() == b.per_sample_weights.size() &&
           (a.per_sample_weights.empty() ||
            memcmp(a.per_sample_weights.data(), b.per_sample_weights.data(), a.per_sample_weights.size() * sizeof(float)) == 0);
}

// --load DIR: the inputs a dump wrote, or one's own in the same files (indices, offsets, D_offsets, E and
// meta are needed; weights_offsets defaults to the tables packed in order, per_sample_weights to none).
// dtype and shape are checked as read; then the content by embedding_bag_validate (exit 2, with the
// position). The config is set to describe them (T, B, mean, weighted, L = the mean bag length).
inline EmbeddingBagInputs embedding_bag_load_inputs(const std::string& dir, const std::string& prefix, EmbeddingBagConfig& c) {
    std::vector<int64_t> meta = read_meta(dir, prefix + "meta", 6, 0, INT32_MAX, "T, B, total_D, pooling, weighted, L");
    require(meta[0] >= 1 && meta[0] <= 65535 && meta[1] >= 1 && meta[3] <= 2 && meta[4] <= 1,
            "--load: %smeta (T %lld, B %lld, pooling %lld, weighted %lld): T must be 1..65535, B >= 1, pooling 0, 1 or 2 (sum, mean, "
            "none), weighted 0 or 1",
            prefix.c_str(), (long long)meta[0], (long long)meta[1], (long long)meta[3], (long long)meta[4]);
    EmbeddingBagInputs in;
    in.T = (int)meta[0]; in.B = (int)meta[1]; in.mean = meta[3] == 1; in.nobag = meta[3] == 2;
    std::vector<int64_t> sh, E, d64;
    read_npy_int64(dir, prefix + "D_offsets", d64, sh, 1);
    read_npy_int64(dir, prefix + "E", E, sh, 1);
    require((int64_t)d64.size() == in.T + 1 && (int64_t)E.size() == in.T, "--load: %sD_offsets has %zu entries and %sE %zu; T = %d needs %d and %d",
            prefix.c_str(), d64.size(), prefix.c_str(), E.size(), in.T, in.T + 1, in.T);
    std::vector<int> Ds;
    for (int t = 0; t < in.T; t++) {
        const int64_t D = d64[t + 1] - d64[t];
        require(d64[0] == 0 && D > 0 && D % 4 == 0 && d64[t + 1] <= INT32_MAX, "--load: %sD_offsets: D of table %d (%lld) must be a positive multiple of 4 (D_offsets[0] 0, total_D < 2^31)",
                prefix.c_str(), t, (long long)D);
        require(E[t] >= 1 && E[t] <= ((int64_t)1 << 48), "--load: %sE[%d] (%lld) must be 1..2^48", prefix.c_str(), t, (long long)E[t]);
        Ds.push_back((int)D);
    }
    embedding_bag_set_layout(in, Ds, E);
    std::vector<int64_t> wo;
    if (read_npy_int64(dir, prefix + "weights_offsets", wo, sh, 1, true)) {
        require((int64_t)wo.size() == in.T, "--load: %sweights_offsets has %zu entries, expected T = %d", prefix.c_str(), wo.size(), in.T);
        int64_t end = 0;
        for (int t = 0; t < in.T; t++) {
            require(wo[t] >= 0, "--load: %sweights_offsets[%d] (%lld) must be >= 0", prefix.c_str(), t, (long long)wo[t]);
            end = std::max(end, add64(wo[t], mul64(E[t], Ds[t], "E*D of a table"), "a table's end"));
        }
        in.weights_offsets = wo;
        in.num_weights = end;
    }
    read_npy_int64(dir, prefix + "offsets", in.offsets, sh, 1);
    read_npy_int64(dir, prefix + "indices", in.indices, sh, 1);
    if (meta[4]) read_npy(dir, prefix + "per_sample_weights", in.per_sample_weights, sh, 1);
    const std::string bad = embedding_bag_validate(in);
    if (!bad.empty()) fail_args("--load: invalid input in %s: %s", dir.c_str(), bad.c_str());
    c = EmbeddingBagConfig();
    c.loaded = dir;
    c.T = in.T; c.B = in.B; c.mean = in.mean; c.nobag = in.nobag; c.weighted = meta[4] != 0;
    c.L = (int)std::min<int64_t>(meta[5], INT32_MAX);
    c.alpha = 0.0;
    c.D = Ds[0];
    c.E = E[0];
    return in;
}
