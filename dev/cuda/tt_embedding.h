// tt_embedding.h: the inputs of the two tensor-train embedding ops (tt_embedding_forward.cu,
// tt_embedding_backward.cu), written once so that a seed gives both ops the same cores and bags by construction:
// the configuration and its flags, the checks every kernel relies on, the generated inputs, the host memory they
// take, and the .npy dump and --load of the inputs.
//
// Replaying one's own inputs, with numpy (OP = "tt_embedding_forward" or "tt_embedding_backward"):
//   p = "dir/" + OP + "_"
//   np.save(p + "meta.npy", np.array([T, tables, B, E, D] + P + Q + [1] + ranks + [1], np.int64))  # P, Q: T factors
//   np.save(p + "indices.npy", ids.astype(np.int64))      # row ids in [0, E), table by table, bag by bag
//   np.save(p + "offsets.npy", offs.astype(np.int64))     # tables*B+1 entries, offs[0] = 0, non-decreasing
//   np.save(p + f"core{t}.npy", G[t].astype(np.float32))  # optional, all or none: [tables, P[t], R_t*Q[t]*R_{t+1}]
//   backward, optional: p + "dY.npy" (float32 [tables, B, D]), p + f"state{t}.npy" (Adagrad state, core t's shape)
// then `./tt_embedding_forward all --load dir`. The optional arrays that are missing are generated from --seed.
// Wrong dtypes, shapes, ids, offsets or non-finite values are refused (exit 2) with the file and position.
#pragma once
#include "common.h"

#define TT_EMBEDDING_MAX_CORES 6

struct TtEmbeddingConfig {
    std::vector<int> p = {200, 220, 250}, q = {4, 4, 4}, ranks = {32, 32};   // FBTT's benchmark default
    int tables = 1, B = 512, L = 20;
    int64_t E = 0;              // rows per table (0: prod p)
    int D = 0;                  // prod q (0: prod q)
    double alpha = 0.0;         // <= 1: uniform row ids; > 1: FBGEMM's Zipf recipe (common.h)
    bool ragged = false;        // bags of random sizes (the first bag of every table empty), same total lookups
    bool distinct = true;       // Zipf bags of L distinct rows where E >= L; off: rows drawn with repeats
    bool stash = false;         // training mode: the forward keeps each lookup's chain prefixes for the backward
    std::string loaded;         // the --load directory the inputs came from ("" = generated)
    int64_t loaded_nnz = -1;    // the lookups a --load read (else tables * B * L)
    int T() const { return (int)p.size(); }
    int R(int t) const { return t == 0 || t == T() ? 1 : ranks[t - 1]; }
    int64_t slice(int t) const { return (int64_t)R(t) * q[t] * R(t + 1); }
    int64_t core_floats(int t) const { return (int64_t)tables * p[t] * slice(t); }
    int64_t num_bags() const { return (int64_t)tables * B; }
    int64_t nnz() const { return loaded_nnz >= 0 ? loaded_nnz : num_bags() * L; }
};

struct TtEmbeddingInputs {
    std::vector<std::vector<float>> cores;   // core t: [tables, p_t, R_t q_t R_{t+1}]
    std::vector<int64_t> indices, offsets;   // nnz; tables * B + 1 (table-major bags)
    std::vector<float> dY;                   // backward: the pooled gradient [tables, B, D]
    std::vector<std::vector<float>> state;   // backward: the Adagrad state, the cores' shapes
};

// The constraints every version relies on; resolves E = 0 and D = 0. "" when fine, else the broken one. Sizes are
// formed in 64 bits and bounded before use: a slice and D below 2^24 and 2^20 floats, a core below 2^40 floats,
// bags and lookups below 2^31 (32-bit bag and lookup ids).
inline std::string tt_embedding_check_config(TtEmbeddingConfig& c) {
    char buf[256];
    auto fail = [&](const char* fmt, auto... args) { snprintf(buf, sizeof buf, fmt, args...); return std::string(buf); };
    const int T = c.T();
    if (T < 2 || T > TT_EMBEDDING_MAX_CORES) return fail("the number of cores T = len(p) (%d) must be 2..%d", T, TT_EMBEDDING_MAX_CORES);
    if (c.q.size() != c.p.size()) return fail("len(q) (%zu) must equal len(p) = T (%d)", c.q.size(), T);
    if ((int)c.ranks.size() != T - 1)
        return fail("ranks has %zu entries; T - 1 = %d inner ranks are needed (len(p) = %d)", c.ranks.size(), T - 1, T);
    for (int t = 0; t < T; t++)
        if (c.p[t] < 1 || c.q[t] < 1) return fail("p and q entries must be >= 1 (p[%d] = %d, q[%d] = %d)", t, c.p[t], t, c.q[t]);
    for (int t = 0; t < T - 1; t++)
        if (c.ranks[t] < 1) return fail("ranks entries must be >= 1 (ranks[%d] = %d)", t, c.ranks[t]);
    if (c.tables < 1 || c.B < 1 || c.L < 0) return fail("tables (%d) and B (%d) must be >= 1 and L (%d) >= 0", c.tables, c.B, c.L);
    int64_t prod_p = 1, prod_q = 1;
    for (int t = 0; t < T; t++) {
        if (prod_p > ((int64_t)1 << 62) / c.p[t]) return fail("prod p overflows 2^62 (p[0..%d])", t);
        prod_p *= c.p[t];
        prod_q *= c.q[t];
        if (prod_q > (1 << 20)) return fail("D = prod q must be <= 2^20 (q[0..%d] multiply to %lld)", t, (long long)prod_q);
    }
    if (c.E == 0) c.E = prod_p;
    if (c.D == 0) c.D = (int)prod_q;
    if (c.E < 1) return fail("E (%lld) must be >= 1 (0: prod p)", (long long)c.E);
    if (prod_p < c.E) return fail("prod p (%lld) must be >= E (%lld): every row needs core indices", (long long)prod_p, (long long)c.E);
    if (prod_q != c.D) return fail("prod q (%lld) must equal D (%d)", (long long)prod_q, c.D);
    for (int t = 0; t < T; t++) {
        if (c.slice(t) > (1 << 24)) return fail("core %d slice R_%d*q_%d*R_%d (%lld) must be <= 2^24", t, t, t, t + 1, (long long)c.slice(t));
        if ((double)c.tables * c.p[t] * (double)c.slice(t) >= (double)((int64_t)1 << 40))
            return fail("core %d holds tables*p_%d*slice = %.3g floats; must be < 2^40", t, t, (double)c.tables * c.p[t] * (double)c.slice(t));
    }
    if (c.num_bags() >= INT32_MAX || (double)c.num_bags() * c.L >= (double)INT32_MAX)
        return fail("tables*B (%lld) and tables*B*L (%.0f) must fit in 32 bits", (long long)c.num_bags(), (double)c.num_bags() * c.L);
    return "";
}

// Bags as every version consumes them: offsets[0] = 0, non-decreasing, offsets[num_bags] = nnz, every index in [0, E)
inline std::string tt_embedding_validate_bags(const std::vector<int64_t>& indices, const std::vector<int64_t>& offsets, int64_t num_bags,
                                              int64_t E) {
    char buf[256];
    auto fail = [&](const char* fmt, auto... args) { snprintf(buf, sizeof buf, fmt, args...); return std::string(buf); };
    if ((int64_t)offsets.size() != num_bags + 1)
        return fail("offsets has %zu entries; tables*B + 1 = %lld needed", offsets.size(), (long long)(num_bags + 1));
    if (offsets[0] != 0) return fail("offsets[0] (%lld) must be 0", (long long)offsets[0]);
    for (int64_t b = 0; b < num_bags; b++)
        if (offsets[b + 1] < offsets[b])
            return fail("offsets must be non-decreasing (offsets[%lld] = %lld > offsets[%lld] = %lld)", (long long)b, (long long)offsets[b],
                        (long long)(b + 1), (long long)offsets[b + 1]);
    if (offsets[num_bags] != (int64_t)indices.size())
        return fail("offsets[tables*B] (%lld) must equal the number of indices (%zu)", (long long)offsets[num_bags], indices.size());
    for (size_t i = 0; i < indices.size(); i++)
        if (indices[i] < 0 || indices[i] >= E)
            return fail("index %lld at lookup %zu is out of range: every index must be >= 0 and < E (%lld)", (long long)indices[i], i,
                        (long long)E);
    return "";
}

// the first non-finite (or, with nonneg, negative) value of v, as a message naming `what`; "" when none
inline std::string tt_embedding_check_values(const std::vector<float>& v, const std::string& what, bool nonneg = false) {
    for (size_t i = 0; i < v.size(); i++)
        if (!std::isfinite(v[i]) || (nonneg && v[i] < 0.0f))
            return what + "[" + std::to_string(i) + "] is " + std::to_string(v[i]) + (nonneg ? ": must be finite and >= 0" : ": must be finite");
    return "";
}

// Everything a version reads, against a checked config: the cores' and the backward arrays' sizes and values, the bags
inline std::string tt_embedding_validate_inputs(const TtEmbeddingConfig& c, const TtEmbeddingInputs& in, bool backward) {
    if ((int)in.cores.size() != c.T()) return "there are " + std::to_string(in.cores.size()) + " cores; T = " + std::to_string(c.T());
    for (int t = 0; t < c.T(); t++) {
        if ((int64_t)in.cores[t].size() != c.core_floats(t))
            return "core " + std::to_string(t) + " holds " + std::to_string(in.cores[t].size()) + " floats; tables*p*slice = " +
                   std::to_string(c.core_floats(t));
        std::string bad = tt_embedding_check_values(in.cores[t], "core" + std::to_string(t));
        if (backward && bad.empty()) {
            if ((int64_t)in.state[t].size() != c.core_floats(t)) return "state " + std::to_string(t) + " does not have core " + std::to_string(t) + "'s size";
            bad = tt_embedding_check_values(in.state[t], "state" + std::to_string(t), true);
        }
        if (!bad.empty()) return bad;
    }
    if (backward) {
        if ((int64_t)in.dY.size() != c.num_bags() * c.D)
            return "dY holds " + std::to_string(in.dY.size()) + " floats; tables*B*D = " + std::to_string(c.num_bags() * c.D);
        const std::string bad = tt_embedding_check_values(in.dY, "dY");
        if (!bad.empty()) return bad;
    }
    return tt_embedding_validate_bags(in.indices, in.offsets, c.num_bags(), c.E);
}

// ----------------------------------------------------------------------------------------------
// generated inputs: one stream, in this order: the cores (core t uniform in +-sqrt(3 / R_{t+1}), so that a row
// element has unit variance), the row ids (make_bag_indices), the ragged cuts, then (backward) dY uniform in
// [-1, 1) and the Adagrad state uniform in [0.1, 1). The forward stops after the bags: both ops see the same ones.

inline void tt_embedding_make_cores(const TtEmbeddingConfig& c, Rng& rng, std::vector<std::vector<float>>& cores) {
    cores.resize(c.T());
    for (int t = 0; t < c.T(); t++) {
        const float a = sqrtf(3.0f / (float)c.R(t + 1));
        cores[t] = make_random_floats((size_t)c.core_floats(t), rng, -a, a);
    }
}

// offsets: L per bag, or (ragged) the same lookups cut at random points with the first bag of every table empty
inline void tt_embedding_make_bags(const TtEmbeddingConfig& c, Rng& rng, std::vector<int64_t>& indices, std::vector<int64_t>& offsets) {
    const int64_t nb = c.num_bags();
    indices = make_bag_indices(nb, c.L, c.E, c.alpha, rng, c.distinct);
    const int64_t nnz = (int64_t)indices.size();
    offsets.assign((size_t)nb + 1, 0);
    if (!c.ragged) {
        for (int64_t b = 0; b <= nb; b++) offsets[b] = b * c.L;
        return;
    }
    for (int64_t b = 1; b < nb; b++) offsets[b] = rng.randint(0, nnz + 1);
    std::sort(offsets.begin() + 1, offsets.end() - 1);
    offsets[nb] = nnz;
    for (int64_t b = 0; b + 1 < nb; b += c.B) offsets[b + 1] = offsets[b];
}

inline void tt_embedding_make_grads(const TtEmbeddingConfig& c, Rng& rng, TtEmbeddingInputs& in) {
    in.dY = make_random_floats((size_t)(c.num_bags() * c.D), rng);
    in.state.resize(c.T());
    for (int t = 0; t < c.T(); t++) in.state[t] = make_random_floats((size_t)c.core_floats(t), rng, 0.1f, 1.0f);
}

inline TtEmbeddingInputs tt_embedding_make_inputs(const TtEmbeddingConfig& c, uint64_t seed, bool backward) {
    TtEmbeddingInputs in;
    Rng rng(seed);
    tt_embedding_make_cores(c, rng, in.cores);
    tt_embedding_make_bags(c, rng, in.indices, in.offsets);
    if (backward) tt_embedding_make_grads(c, rng, in);
    return in;
}

// host bytes of the inputs at their largest (the row ids twice while drawn, the Zipf map, the offsets)
inline double tt_embedding_inputs_host_bytes(const TtEmbeddingConfig& c, bool backward) {
    double cores = 0.0;
    for (int t = 0; t < c.T(); t++) cores += 4.0 * (double)c.core_floats(t);
    return cores * (backward ? 2.0 : 1.0) + 16.0 * (double)c.nnz() + 8.0 * ((double)c.num_bags() + 1) +
           bag_indices_host_bytes(c.num_bags(), c.L, c.alpha) + (backward ? 4.0 * (double)c.num_bags() * c.D : 0.0);
}

// ----------------------------------------------------------------------------------------------
// the command line both ops share

inline void tt_embedding_add_flags(Cli& cli, TtEmbeddingConfig& c, std::string& distinct) {
    cli.add_int_list("p", &c.p, "row factors p_0..p_{T-1} (T = len(p) cores, 2..6)");
    cli.add_int_list("q", &c.q, "column factors q_0..q_{T-1} (D = prod q)");
    cli.add_int_list("ranks", &c.ranks, "inner TT ranks R_1..R_{T-1}");
    add_bag_recipe_flags(cli, &c.B, &c.L, &c.alpha, &distinct);
    cli.add_int("tables", &c.tables, "tables (cores batched over tables)");
    cli.add_int64("E", &c.E, "rows per table (0: prod p)");
    cli.add_int("D", &c.D, "embedding dimension, must equal prod q (0: prod q)");
    cli.add_flag("ragged", &c.ragged, "bags of random sizes (the first bag of every table empty), same total lookups");
    cli.supports_load = true;
}

static const char* const TT_EMBEDDING_CONSTRAINTS =
    "  T = len(p) in 2..6, len(q) = T, len(ranks) = T - 1, all entries >= 1; E <= prod p, D = prod q <= 2^20;\n"
    "  a slice R_t q_t R_{t+1} <= 2^24 floats, a core < 2^40; tables, B >= 1, L >= 0, tables*B*L < 2^31;\n"
    "  Zipf bags hold L distinct rows only where E >= L and --distinct on; elsewhere they may repeat rows;\n"
    "  the inputs must fit in host and device memory (checked before allocating)";

// the shape field of the RESULT lines (the PyTorch peer files its lines under the same one)
inline std::string tt_embedding_shape_name(const TtEmbeddingConfig& c) {
    auto join = [](const std::vector<int>& v) {
        std::string r;
        for (size_t i = 0; i < v.size(); i++) r += (i ? "x" : "") + std::to_string(v[i]);
        return r;
    };
    std::string name = "T" + std::to_string(c.T()) + ",p" + join(c.p) + ",q" + join(c.q) + ",r" + join(c.ranks) + ",nt" +
                       std::to_string(c.tables) + ",B" + std::to_string(c.B) + ",L" + std::to_string(c.L);
    int64_t prod_p = 1;
    for (int x : c.p) prod_p *= x;
    if (c.E != prod_p) name += ",E" + std::to_string(c.E);
    char a[32];
    snprintf(a, sizeof a, ",alpha%g", c.alpha);
    return name + a + (c.ragged ? ",ragged" : "") + (c.alpha > 1.0 && !c.distinct ? ",repeats" : "") + (c.loaded.empty() ? "" : ",loaded") +
           (c.stash ? ",stash" : "");
}

// The stash (--stash): what autograd would keep. The forward writes every lookup's chain prefixes
// P_t = G_0[i_0] .. G_t[i_t] for t = 1..T-2 (Q_t x R_{t+1}, Q_t = q_0 .. q_t; row (a_0 .. a_t) in mixed radix, a_0 most
// significant; row-major), which the backward needs and would otherwise recompute. P_t of lookup n (its place in
// indices) starts at off[t] + n Q_t R_{t+1}, off[1] = 0. Returns the floats (0 at T = 2: nothing to keep).
inline int64_t tt_embedding_stash_layout(int T, const int* q, const int* R, int64_t nnz, int64_t* off) {   // R[t] = R_t, R_0 = 1
    int64_t total = 0, Q = q[0];
    for (int t = 1; t <= T - 2; t++) {
        Q *= q[t];
        off[t] = total;
        total += nnz * Q * R[t + 1];
    }
    return total;
}
inline void tt_embedding_add_stash_flag(Cli& cli, TtEmbeddingConfig& c) {
    cli.add_flag("stash", &c.stash, "training mode: the forward writes each lookup's prefixes P_1..P_{T-2} (the stash), the backward reads them");
}

// the RESULT lines' extra field: microseconds per lookup
inline std::function<std::string(int, int, double)> tt_embedding_per_lookup(int64_t nnz) {
    return [nnz](int, int, double ms) {
        char buf[64];
        snprintf(buf, sizeof buf, "us_per_lookup=%.5f", nnz > 0 ? ms * 1e3 / (double)nnz : 0.0);
        return std::string(buf);
    };
}

// ----------------------------------------------------------------------------------------------
// .npy dump and --load: <op>_meta (T, tables, B, E, D, p[T], q[T], R[0..T]), _core<t>, _indices, _offsets, and for
// the backward _dY and _state<t>

inline void tt_embedding_dump_inputs(const std::string& dir, const std::string& op, const TtEmbeddingConfig& c, const TtEmbeddingInputs& in) {
    const std::string pre = op + "_";
    std::vector<int64_t> meta = {c.T(), c.tables, c.B, c.E, c.D};
    for (int x : c.p) meta.push_back(x);
    for (int x : c.q) meta.push_back(x);
    for (int t = 0; t <= c.T(); t++) meta.push_back(c.R(t));
    write_npy(dir, pre + "meta", meta.data(), {(int64_t)meta.size()});
    for (int t = 0; t < c.T(); t++) {
        write_npy(dir, pre + "core" + std::to_string(t), in.cores[t].data(), {c.tables, c.p[t], c.slice(t)});
        if (!in.state.empty()) write_npy(dir, pre + "state" + std::to_string(t), in.state[t].data(), {c.tables, c.p[t], c.slice(t)});
    }
    write_npy(dir, pre + "indices", in.indices.data(), {(int64_t)in.indices.size()});
    write_npy(dir, pre + "offsets", in.offsets.data(), {(int64_t)in.offsets.size()});
    if (!in.dY.empty()) write_npy(dir, pre + "dY", in.dY.data(), {c.tables, c.B, c.D});
}

// a float array of exactly `shape`, or false when optional and missing
inline bool tt_embedding_read_floats(const std::string& dir, const std::string& name, std::vector<float>& v, const std::vector<int64_t>& shape,
                                     bool optional) {
    std::vector<int64_t> got;
    if (!read_npy(dir, name, v, got, (int)shape.size(), optional)) return false;
    if (got != shape) {
        std::string want;
        for (int64_t x : shape) want += (want.empty() ? "" : ", ") + std::to_string(x);
        fail_args("--load: %s/%s.npy has the wrong shape; expected (%s) from the meta file", dir.c_str(), name.c_str(), want.c_str());
    }
    return true;
}

// --load DIR: the config from <op>_meta, checked like the flags'; the bags; the cores (all or none: generated from
// `seed` when absent); for the backward dY and the state (each generated when absent). Everything is validated
// (exit 2, naming the file and position). c describes the inputs afterwards (L = the longest-bag bound nnz / bags,
// rounded up).
inline TtEmbeddingInputs tt_embedding_load_inputs(const std::string& dir, const std::string& op, TtEmbeddingConfig& c, uint64_t seed,
                                                  bool backward) {
    const std::string pre = op + "_";
    std::vector<int64_t> meta, sh;
    read_npy_int64(dir, pre + "meta", meta, sh, 1);
    const int T = meta.empty() ? 0 : (int)std::min<int64_t>(std::max<int64_t>(meta[0], 0), 100);
    require(T >= 2 && T <= TT_EMBEDDING_MAX_CORES && (int64_t)meta.size() == 6 + 3 * T,
            "--load: %smeta.npy has %zu entries (T = %lld): expected T in 2..%d and 6 + 3T entries (T, tables, B, E, D, p[T], q[T], R[0..T])",
            pre.c_str(), meta.size(), meta.empty() ? 0ll : (long long)meta[0], TT_EMBEDDING_MAX_CORES);
    for (size_t i = 1; i < meta.size(); i++)
        require(meta[i] >= 0 && (i == 3 || meta[i] <= INT32_MAX), "--load: %smeta[%zu] = %lld must be 0..2^31-1", pre.c_str(), i, (long long)meta[i]);
    require(meta[5 + 2 * T] == 1 && meta[5 + 3 * T] == 1, "--load: %smeta: R_0 and R_T must be 1", pre.c_str());
    TtEmbeddingConfig lc;
    lc.tables = (int)meta[1]; lc.B = (int)meta[2]; lc.E = meta[3]; lc.D = (int)meta[4];
    lc.p.assign(meta.begin() + 5, meta.begin() + 5 + T);
    lc.q.assign(meta.begin() + 5 + T, meta.begin() + 5 + 2 * T);
    lc.ranks.assign(meta.begin() + 6 + 2 * T, meta.begin() + 5 + 3 * T);
    lc.L = 0;
    std::string bad = tt_embedding_check_config(lc);
    if (!bad.empty()) fail_args("--load: %smeta: %s", pre.c_str(), bad.c_str());
    TtEmbeddingInputs in;
    read_npy_int64(dir, pre + "indices", in.indices, sh, 1);
    read_npy_int64(dir, pre + "offsets", in.offsets, sh, 1);
    const int64_t nnz = (int64_t)in.indices.size();
    lc.L = (int)std::min<int64_t>((nnz + lc.num_bags() - 1) / lc.num_bags(), INT32_MAX);
    lc.loaded = dir;
    lc.loaded_nnz = nnz;
    bad = tt_embedding_check_config(lc);
    if (!bad.empty()) fail_args("--load: %s holds %lld lookups: %s", dir.c_str(), (long long)nnz, bad.c_str());
    in.cores.resize(T);
    bool have = false;
    for (int t = 0; t < T; t++) {
        const bool got = tt_embedding_read_floats(dir, pre + "core" + std::to_string(t), in.cores[t], {lc.tables, lc.p[t], lc.slice(t)}, true);
        require(t == 0 || got == have, "--load: %score%d.npy is %s but %score0.npy is %s: the cores are read all or none", pre.c_str(), t,
                got ? "there" : "missing", pre.c_str(), have ? "there" : "missing");
        have = got;
    }
    Rng rng(seed);
    if (!have) tt_embedding_make_cores(lc, rng, in.cores);
    if (backward) {
        TtEmbeddingInputs gen;
        tt_embedding_make_grads(lc, rng, gen);
        if (!tt_embedding_read_floats(dir, pre + "dY", in.dY, {lc.tables, lc.B, lc.D}, true)) in.dY.swap(gen.dY);
        in.state.resize(T);
        for (int t = 0; t < T; t++)
            if (!tt_embedding_read_floats(dir, pre + "state" + std::to_string(t), in.state[t], {lc.tables, lc.p[t], lc.slice(t)}, true))
                in.state[t].swap(gen.state[t]);
    }
    bad = tt_embedding_validate_inputs(lc, in, backward);
    if (!bad.empty()) fail_args("--load: invalid input in %s: %s", dir.c_str(), bad.c_str());
    c = lc;
    return in;
}

// The inputs of a run: read by --load, or generated after the checks. `op_check(c)` applies the op's own limits
// (exit 2) and returns the host bytes the op needs beyond the inputs; both are checked before the inputs are made.
template <class OpCheck>
TtEmbeddingInputs tt_embedding_inputs(const Cli& cli, const char* op, TtEmbeddingConfig& c, const std::string& distinct, bool backward,
                                      OpCheck&& op_check) {
    c.distinct = distinct == "on";
    if (!cli.load_dir.empty()) {
        TtEmbeddingInputs in = tt_embedding_load_inputs(cli.load_dir, op, c, cli.seed, backward);
        require_host_memory(op_check(c), op);
        return in;
    }
    const std::string bad = tt_embedding_check_config(c);
    if (!bad.empty()) fail_args("%s", bad.c_str());
    require_host_memory(op_check(c) + tt_embedding_inputs_host_bytes(c, backward), op);
    return tt_embedding_make_inputs(c, cli.seed, backward);
}
