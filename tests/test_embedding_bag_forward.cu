// CPU tests of embedding_bag_forward (no GPU): the reference against a dense one-hot formulation, the
// fp32 summation orders of the GPU versions against the file's tolerances, FBGEMM's Zipf recipe against
// the spec's unique-row counts, the input validator's messages, the bytes formulas, and the
// thread-to-(bag, column) maps of versions 1, 3, 4 and 5 (every bag and column covered exactly once).
#define NO_MAIN
#include "test_util.h"
#include "../dev/cuda/embedding_bag_forward.cu"

#include <set>

static EmbeddingBagConfig small_config(int T, std::vector<int> Ds, std::vector<int> Es, int B, int L) {
    EmbeddingBagConfig c;
    c.T = T; c.Ds = Ds; c.Es = Es; c.B = B; c.L = L; c.alpha = 0.0;
    return c;
}

// the configurations the reference tests run: odd sizes, mixed dims, every flag, adversarial inputs
static std::vector<std::pair<std::string, EmbeddingBagConfig>> reference_configs() {
    std::vector<std::pair<std::string, EmbeddingBagConfig>> v;
    auto c = small_config(3, {4, 12, 132}, {50, 7, 33}, 9, 5);
    v.push_back({"uniform sum mixed dims", c});
    c.mean = true;
    v.push_back({"uniform mean", c});
    c.weighted = true;
    v.push_back({"weighted mean", c});
    c.mean = false;
    v.push_back({"weighted sum", c});
    c = small_config(4, {4, 12, 132, 260}, {40, 90, 13, 61}, 37, 13);
    c.alpha = 1.15;
    v.push_back({"zipf sum D=4,12,132,260 B=37 L=13", c});
    c.empty_frac = 0.3; c.weighted = true; c.mean = true;
    v.push_back({"zipf weighted mean with empty bags", c});
    c = small_config(2, {36, 8}, {20, 30}, 11, 7);
    c.empty_frac = 1.0; c.mean = true;
    v.push_back({"all bags empty (mean)", c});
    c = small_config(2, {36, 8}, {20, 30}, 11, 0);
    v.push_back({"L = 0", c});
    c = small_config(2, {64, 20}, {25, 9}, 13, 17);
    c.one_row = true;
    v.push_back({"one row", c});
    c = small_config(3, {}, {}, 5, 6);
    c.mixed_dims = true; c.E = 40;
    v.push_back({"--mixed-dims", c});
    c = small_config(1, {1028}, {11}, 3, 70);
    v.push_back({"D=1028 L=70", c});
    return v;
}

// Independent forward: per table, the bag-by-row count matrix A (A[b][r] = sum of the weights of r's
// occurrences in bag b, times 1/L for MEAN) times the table W (E x D), in double. No loop over a bag.
static std::vector<float> forward_by_one_hot(const EmbeddingBagInputs& in, const std::vector<floatX>& w) {
    std::vector<float> out((size_t)in.B * in.total_D());
    for (int t = 0; t < in.T; t++) {
        const int D = in.D(t);
        const int64_t E = in.E[t];
        std::vector<double> A((size_t)in.B * E, 0.0);
        for (int b = 0; b < in.B; b++) {
            const int64_t s = in.offsets[(int64_t)t * in.B + b], e = in.offsets[(int64_t)t * in.B + b + 1];
            for (int64_t l = s; l < e; l++) {
                double wl = in.per_sample_weights.empty() ? 1.0 : in.per_sample_weights[l];
                if (in.mean) wl /= (double)(e - s);
                A[(size_t)b * E + in.indices[l]] += wl;
            }
        }
        for (int b = 0; b < in.B; b++)
            for (int d = 0; d < D; d++) {
                double sum = 0.0;
                for (int64_t r = 0; r < E; r++) sum += A[(size_t)b * E + r] * to_float(w[in.weights_offsets[t] + r * D + d]);
                out[(size_t)b * in.total_D() + in.D_offsets[t] + d] = (float)sum;
            }
    }
    return out;
}

static void test_reference_against_one_hot() {
    for (auto& [name, c] : reference_configs()) {
        for (uint64_t seed : {1, 2, 3}) {
            EmbeddingBagInputs in = embedding_bag_make_inputs(c, seed);
            std::string bad = embedding_bag_forward_validate(in);
            if (!bad.empty()) { report(false, "reference vs one-hot: " + name, "generated input invalid: " + bad); continue; }
            std::vector<floatX> w = embedding_bag_forward_make_weights(in, seed);
            std::vector<float> ref((size_t)in.B * in.total_D());
            embedding_bag_forward_cpu(ref.data(), in, w.data());
            std::vector<float> alt = forward_by_one_hot(in, w);
            ValidateStats s = compare_arrays(ref.data(), alt.data(), ref.size(), 1e-6f, 1e-6f);
            report(s.failures == 0, fmt("reference vs one-hot: %s, seed %d", name.c_str(), (int)seed),
                   fmt("%zu of %zu differ, max abs %.3g", s.failures, s.n, s.max_abs));
        }
    }
}

// Output columns of empty bags are 0, in every table, for SUM and MEAN.
static void test_empty_bags() {
    auto c = small_config(3, {4, 36, 132}, {10, 20, 30}, 200, 6);
    c.empty_frac = 0.25;
    for (bool mean : {false, true}) {
        c.mean = mean;
        EmbeddingBagInputs in = embedding_bag_make_inputs(c, 7);
        std::vector<floatX> w = embedding_bag_forward_make_weights(in, 7);
        std::vector<float> ref((size_t)in.B * in.total_D());
        embedding_bag_forward_cpu(ref.data(), in, w.data());
        int empty = 0, nonzero_empty = 0;
        for (int t = 0; t < in.T; t++)
            for (int b = 0; b < in.B; b++) {
                if (in.offsets[(int64_t)t * in.B + b + 1] != in.offsets[(int64_t)t * in.B + b]) continue;
                empty++;
                for (int d = 0; d < in.D(t); d++) nonzero_empty += ref[(size_t)b * in.total_D() + in.D_offsets[t] + d] != 0.0f;
            }
        const double frac = (double)empty / (in.T * in.B);
        report(nonzero_empty == 0 && fabs(frac - 0.25) < 0.06, fmt("empty bags give 0 (%s), %.3f of bags empty for --empty-frac 0.25", mean ? "mean" : "sum", frac),
               fmt("%d nonzero outputs in empty bags, empty fraction %.3f", nonzero_empty, frac));
    }
}

// The fp32 orders of the GPU versions, on the CPU: versions 1-4 add a bag's rows in order per column
// (fmaf), version 5 splits the rows over S = 32/G slots (row j to slot j % S) and combines the slots with
// the xor-shuffle tree. Both must pass the file's tolerances against the double reference at the sizes
// of the GPU cases, with a margin (the check is what the GPU run applies).
static std::vector<float> forward_fp32_order(const EmbeddingBagInputs& in, const std::vector<floatX>& w, bool slotted) {
    std::vector<float> out((size_t)in.B * in.total_D());
    for (int t = 0; t < in.T; t++) {
        const int D = in.D(t), G = embedding_bag_forward_lanes_per_row(D), S = slotted ? 32 / G : 1;
        for (int b = 0; b < in.B; b++) {
            const int64_t s = in.offsets[(int64_t)t * in.B + b], e = in.offsets[(int64_t)t * in.B + b + 1];
            const float scale = (in.mean && e > s) ? 1.0f / (float)(e - s) : 1.0f;
            for (int d = 0; d < D; d++) {
                std::vector<float> slot(S, 0.0f);
                for (int64_t l = s; l < e; l++) {
                    const float wl = in.per_sample_weights.empty() ? 1.0f : in.per_sample_weights[l];
                    float& acc = slot[(l - s) % S];
                    acc = fmaf(wl, to_float(w[in.weights_offsets[t] + in.indices[l] * D + d]), acc);
                }
                for (int off = 1; off < S; off *= 2) {
                    std::vector<float> next(S);
                    for (int q = 0; q < S; q++) next[q] = slot[q] + slot[q ^ off];
                    slot = next;
                }
                out[(size_t)b * in.total_D() + in.D_offsets[t] + d] = slot[0] * scale;
            }
        }
    }
    return out;
}

static void test_fp32_orders_within_tolerance() {
    struct Case { const char* name; EmbeddingBagConfig c; };
    std::vector<Case> cases;
    auto c = small_config(4, {4, 12, 132, 260}, {1000, 77, 5000, 300}, 37, 13);
    cases.push_back({"D=4,12,132,260 L=13 uniform", c});
    c.weighted = true; c.mean = true; c.alpha = 1.15;
    cases.push_back({"weighted mean Zipf", c});
    c = small_config(2, {128, 36}, {1000, 1000}, 300, 50);
    c.one_row = true;
    cases.push_back({"one row L=50", c});
    c = small_config(3, {128}, {2000}, 2, 300);
    c.alpha = 1.15;
    cases.push_back({"long bags L=300", c});
    c = small_config(1, {128}, {100000}, 256, 32);
    cases.push_back({"large-size bags L=32", c});
    c = small_config(1, {1028}, {100}, 5, 70);
    cases.push_back({"D=1028 L=70", c});
    for (auto& k : cases) {
        EmbeddingBagInputs in = embedding_bag_make_inputs(k.c, 11);
        std::vector<floatX> w = embedding_bag_forward_make_weights(in, 11);
        std::vector<float> ref((size_t)in.B * in.total_D());
        embedding_bag_forward_cpu(ref.data(), in, w.data());
        for (bool slotted : {false, true}) {
            std::vector<float> got = forward_fp32_order(in, w, slotted);
            // pass at a quarter of the tolerances: the GPU check has 4x headroom over these orders
            ValidateStats s = compare_arrays(got.data(), ref.data(), got.size(), EMBEDDING_BAG_FORWARD_ATOL / 4, EMBEDDING_BAG_FORWARD_RTOL / 4);
            report(s.failures == 0, fmt("fp32 %s order within tolerance/4: %s (max abs %.2g, max rel %.2g)", slotted ? "slotted (v5)" : "in-order (v1-4)",
                                        k.name, s.max_abs, s.max_rel),
                   fmt("%zu of %zu fail", s.failures, s.n));
        }
    }
}

// fp16 / bf16 weights: the tables rounded to nearest (exact half values, within half an ulp of the fp32
// draw, and the bits the GPU gets decode to them), the fp32 orders within tolerance on them, half the row
// bytes in both formulas, and the shape naming the type
static void test_half_weights() {
    auto c = small_config(4, {4, 12, 132, 260}, {1000, 77, 5000, 300}, 37, 13);
    c.weighted = true; c.alpha = 1.15;
    EmbeddingBagInputs in = embedding_bag_make_inputs(c, 13);
    const std::vector<float> w32 = embedding_bag_forward_make_weights(in, 13);
    for (EmbeddingBagWeights wt : {EmbeddingBagWeights::fp16, EmbeddingBagWeights::bf16}) {
        const char* name = EMBEDDING_BAG_WEIGHTS_NAMES[(int)wt];
        const std::vector<float> w = embedding_bag_forward_make_weights(in, 13, wt);
        size_t bad = 0, changed = 0;
        for (size_t i = 0; i < w.size(); i++) {
            const uint16_t h = embedding_bag_half_bits(w[i], wt, false);
            const float lo = embedding_bag_half_to_float(embedding_bag_half_bits(w32[i], wt, true), wt);
            const float ulp = std::fabs(embedding_bag_half_to_float((uint16_t)(embedding_bag_half_bits(w32[i], wt, true) + 1), wt) - lo);
            bad += embedding_bag_half_to_float(h, wt) != w[i] || std::fabs(w[i] - w32[i]) > ulp / 2;
            changed += w[i] != w32[i];
        }
        report(bad == 0 && changed > w.size() / 2,
               fmt("%s weights: %zu values exact in %s, within half an ulp of the fp32 draw (%zu rounded)", name, w.size(), name, changed),
               fmt("%zu bad, %zu changed", bad, changed));
        std::vector<float> ref((size_t)in.B * in.total_D());
        embedding_bag_forward_cpu(ref.data(), in, w.data());
        for (bool slotted : {false, true}) {
            std::vector<float> got = forward_fp32_order(in, w, slotted);
            ValidateStats st = compare_arrays(got.data(), ref.data(), got.size(), EMBEDDING_BAG_FORWARD_ATOL / 4, EMBEDDING_BAG_FORWARD_RTOL / 4);
            report(st.failures == 0, fmt("%s weights: fp32 %s order within tolerance/4 (max abs %.2g)", name, slotted ? "slotted" : "in-order", st.max_abs),
                   fmt("%zu of %zu fail", st.failures, st.n));
        }
    }
    EmbeddingBagConfig d;
    EmbeddingBagInputs def = embedding_bag_make_inputs(d, 42);
    const double rows32 = 327680.0 * 128 * 4;
    report(embedding_bag_forward_bytes(def, 2) == embedding_bag_forward_bytes(def) - rows32 / 2 &&
               embedding_bag_forward_fbgemm_bytes(def, 20, 2) == embedding_bag_forward_fbgemm_bytes(def, 20) - rows32 / 2,
           "half weights: the rows' bytes halve in both formulas (fewest 178.9 -> 95.0 MB at FBGEMM's default)",
           fmt("fewest %.0f, fbgemm %.0f", embedding_bag_forward_bytes(def, 2), embedding_bag_forward_fbgemm_bytes(def, 20, 2)));
    EmbeddingBagConfig e;
    const std::string s32 = embedding_bag_shape(e);
    e.weights = EmbeddingBagWeights::fp16;
    const std::string s16 = embedding_bag_shape(e);
    e.weights = EmbeddingBagWeights::bf16; e.stochastic = false;
    const std::string sb = embedding_bag_shape(e);
    report(s32.find("fp") == std::string::npos && s16 == s32 + ",fp16,stochastic" && sb == s32 + ",bf16,nearest",
           "the shape names half weights and their rounding (fp32, the default, adds nothing)", s32 + " | " + s16 + " | " + sb);
}

// FBGEMM's recipe at its benchmark default (T=32 E=1e5 B=512 L=20): the spec counts 18,016 unique
// (table, row) pairs among the 327,680 lookups at alpha 1.15 and 311,574 uniform.
static void test_zipf_statistics() {
    EmbeddingBagConfig c;   // the defaults are FBGEMM's
    for (double alpha : {1.15, 0.0}) {
        c.alpha = alpha;
        EmbeddingBagInputs in = embedding_bag_make_inputs(c, 42);
        size_t unique = 0;
        bool distinct_bags = true;
        for (int t = 0; t < in.T; t++) {
            std::set<int64_t> rows(in.indices.begin() + in.offsets[(int64_t)t * in.B], in.indices.begin() + in.offsets[(int64_t)(t + 1) * in.B]);
            unique += rows.size();
            if (alpha > 1.0)
                for (int b = 0; b < in.B; b++) {
                    const int64_t s = in.offsets[(int64_t)t * in.B + b];
                    std::set<int64_t> bag(in.indices.begin() + s, in.indices.begin() + s + c.L);
                    distinct_bags = distinct_bags && (int)bag.size() == c.L;
                }
        }
        const double want = alpha > 1.0 ? 18016 : 311574, tol = alpha > 1.0 ? 0.05 : 0.01;
        report(in.indices.size() == 327680 && fabs(unique / want - 1.0) < tol,
               fmt("%s at FBGEMM's default: %zu unique rows of %zu lookups (spec %.0f, within %.0f%%)", alpha > 1.0 ? "Zipf 1.15" : "uniform",
                   unique, in.indices.size(), want, tol * 100),
               fmt("%zu unique", unique));
        if (alpha > 1.0) report(distinct_bags, "Zipf bags hold L distinct rows each");
        report(embedding_bag_forward_validate(in).empty(), fmt("generated %s input passes the validator", alpha > 1.0 ? "Zipf" : "uniform"));
    }
}

static void test_generator_flags() {
    auto c = small_config(3, {8, 16, 4}, {100, 200, 300}, 50, 9);
    c.one_row = true;
    EmbeddingBagInputs in = embedding_bag_make_inputs(c, 5);
    bool one = true;
    for (int t = 0; t < in.T; t++)
        for (int64_t l = in.offsets[(int64_t)t * in.B]; l < in.offsets[(int64_t)(t + 1) * in.B]; l++)
            one = one && in.indices[l] == in.indices[in.offsets[(int64_t)t * in.B]];
    report(one && in.indices.size() == 3u * 50 * 9, "--one-row: every lookup of a table hits one row");
    c.one_row = false; c.empty_frac = 1.0;
    in = embedding_bag_make_inputs(c, 5);
    report(in.indices.empty() && in.offsets.size() == 151 && in.offsets.back() == 0, "--empty-frac 1: every bag empty, offsets all 0");
    c.empty_frac = 0.0; c.weighted = true;
    in = embedding_bag_make_inputs(c, 5);
    report(in.per_sample_weights.size() == in.indices.size(), "--weighted: one weight per lookup");
    c = EmbeddingBagConfig();
    c.mixed_dims = true; c.T = 8;
    in = embedding_bag_make_inputs(c, 5);
    std::string Ds;
    for (int t = 0; t < in.T; t++) Ds += std::to_string(in.D(t)) + ":" + std::to_string(in.E[t]) + " ";
    report(Ds == "4:100000 12:50000 36:25000 64:12500 132:100000 260:50000 4:25000 12:12500 ", "--mixed-dims: D and E per table", Ds);
    report(embedding_bag_shape(EmbeddingBagConfig()) == "T32,E100000,D128,B512,L20,alpha1.15,sum",
           "shape string at the default size", embedding_bag_shape(EmbeddingBagConfig()));
}

static void expect_error(const char* name, const EmbeddingBagInputs& in, const char* substring) {
    std::string e = embedding_bag_forward_validate(in);
    report(e.find(substring) != std::string::npos, fmt("validator: %s -> \"%s\"", name, e.c_str()), fmt("expected '%s'", substring));
}

static void test_validator() {
    auto c = small_config(2, {8, 12}, {10, 20}, 4, 3);
    c.weighted = true;
    const EmbeddingBagInputs good = embedding_bag_make_inputs(c, 3);
    report(embedding_bag_forward_validate(good).empty(), "validator: a generated input is fine");
    EmbeddingBagInputs in = good;
    in.indices[in.offsets[4]] = 20;                       // first lookup of table 1, E = 20
    expect_error("index == E_t", in, "indices[12] = 20 (table 1) is out of range: table 1 has E = 20 rows");
    in = good; in.indices[5] = 10;                        // table 0 has E = 10
    expect_error("index == E_t of table 0", in, "out of range: table 0 has E = 10 rows");
    in = good; in.indices[0] = -1;
    expect_error("negative index", in, "indices[0] = -1 (table 0) is out of range");
    in = good; std::swap(in.offsets[2], in.offsets[3]);
    expect_error("offsets decreasing", in, "offsets must be non-decreasing: offsets[3] = 6 < offsets[2] = 9");
    in = good; in.offsets.pop_back();
    expect_error("offsets count T*B", in, "offsets has 8 entries, expected T*B+1 = 9");
    in = good; in.offsets.push_back(24);
    expect_error("offsets count T*B+2", in, "expected T*B+1 = 9");
    in = good; in.offsets.back() = 23;
    expect_error("last offset short of the indices", in, "offsets[T*B] (23) must equal the number of indices (24)");
    in = good; in.D_offsets[1] = 6; in.D_offsets[2] = 18;
    expect_error("D % 4 != 0", in, "D of table 0 (6) must be a positive multiple of 4");
    in = good; in.D_offsets[2] = in.D_offsets[1];
    expect_error("D == 0", in, "D of table 1 (0) must be a positive multiple of 4");
    in = good; in.per_sample_weights.pop_back();
    expect_error("per-sample weights count", in, "per_sample_weights has 23 entries");
    in = good; in.weights_offsets[1] += 2;
    expect_error("misaligned table", in, "weights_offsets[1] (82) must be a non-negative multiple of 4");
    in = good; in.weights_offsets[1] += 4;
    expect_error("table past the weights", in, "table 1 (offset 84, 20 rows of 12) runs past the 320 weights");
    in = good; in.E[0] = (int64_t)1 << 31;
    expect_error("E >= 2^31", in, "must be 1..2^31-1");
    in = good; in.offsets[0] = 1;
    expect_error("offsets[0] != 0", in, "offsets[0] (1) must be 0");
    in = good; in.nobag = true;
    expect_error("nobag with mixed dims", in, "--pooling none needs one D for every table (FBGEMM's nobag layout, out N x D): table 1 has D = 12");
    auto cn = small_config(2, {8}, {10, 20}, 4, 3);
    cn.nobag = true;
    in = embedding_bag_make_inputs(cn, 3);
    report(embedding_bag_forward_validate(in).empty(), "validator: a generated nobag input is fine");
    in.per_sample_weights.assign(in.indices.size(), 1.0f);
    expect_error("nobag with per-sample weights", in, "--pooling none takes no per-sample weights");
}

// bytes: a hand count on a small input, and both formulas at FBGEMM's default size (fp32 build)
static void test_bytes() {
    auto c = small_config(2, {8, 12}, {10, 20}, 4, 3);
    c.weighted = true;
    EmbeddingBagInputs in = embedding_bag_make_inputs(c, 3);
    // rows: 12 lookups of 8 floats + 12 of 12 floats; 24 indices, 9 offsets, 24 weights, 4 x 20 output,
    // D_offsets (3 ints) and weights_offsets (2 int64)
    const double want = 12.0 * 8 * 4 + 12.0 * 12 * 4 + 24 * 8 + 9 * 8 + 24 * 4 + 4 * 20 * 4 + 3 * 4 + 2 * 8;
    report(sizeof(floatX) == 4 && embedding_bag_forward_bytes(in) == want, fmt("bytes, hand count %.0f", want),
           fmt("formula gives %.0f", embedding_bag_forward_bytes(in)));
    EmbeddingBagConfig d;
    in = embedding_bag_make_inputs(d, 42);
    const double fewest = 327680.0 * 128 * 4 + 327680.0 * 8 + 16385.0 * 8 + 512.0 * 4096 * 4 + 33 * 4 + 32 * 8;
    report(embedding_bag_forward_bytes(in) == fewest && fewest == 178913676.0, fmt("fewest bytes at FBGEMM's default: %.0f", fewest),
           fmt("formula gives %.0f", embedding_bag_forward_bytes(in)));
    report(embedding_bag_forward_fbgemm_bytes(in, 20) == 176160768.0, "FBGEMM's rw at its default: 176,160,768 bytes (the issue's 176.2 MB)",
           fmt("formula gives %.0f", embedding_bag_forward_fbgemm_bytes(in, 20)));
    // nobag at FBGEMM's default: N rows read and written, the ids, the T+1 table boundaries of the offsets
    d.nobag = true;
    in = embedding_bag_make_inputs(d, 42);
    const double nobag = 327680.0 * 128 * (4 + 4) + 327680.0 * 8 + 33 * 8 + 33 * 4 + 32 * 8;
    report(embedding_bag_forward_bytes(in) == nobag && nobag == 338166412.0, fmt("fewest bytes at FBGEMM's default, nobag: %.0f", nobag),
           fmt("formula gives %.0f", embedding_bag_forward_bytes(in)));
    report(embedding_bag_forward_fbgemm_bytes(in, 20) == 335544320.0, "FBGEMM's rw at its default, nobag: 335,544,320 bytes",
           fmt("formula gives %.0f", embedding_bag_forward_fbgemm_bytes(in, 20)));
}

// Version 1: every column finds its table.
static void test_table_of_column() {
    Rng rng(9);
    bool ok = true;
    for (int trial = 0; trial < 200 && ok; trial++) {
        const int T = (int)rng.randint(1, 40);
        std::vector<int> Do(1, 0);
        for (int t = 0; t < T; t++) Do.push_back(Do.back() + 4 * (int)rng.randint(1, 70));
        for (int col = 0, t = 0; col < Do.back(); col++) {
            while (Do[t + 1] <= col) t++;
            ok = ok && embedding_bag_forward_table_of_column(Do.data(), T, col) == t;
        }
    }
    report(ok, "version 1: binary search finds the table of every column (200 random layouts)");
}

// Versions 3 and 4 (bags of G lanes, 32/G per warp) and 5 (a warp per bag): over the launchers' grids,
// every bag of every table gets exactly one group of G lanes, aligned in its warp (the shuffle mask), and
// the lanes' vectors (v0 passes of NV*G, k < NV) cover every 4-column vector of the row exactly once.
static void test_thread_maps() {
    bool ok = true;
    std::string why;
    for (int D = 4; D <= 1100 && ok; D += 4) {
        const int G = embedding_bag_forward_lanes_per_row(D), Dv = D / 4, NV = embedding_bag_forward_vecs_per_lane(Dv, G);
        const int cls = embedding_bag_forward_class(D);
        if (G < Dv && G != 32) { ok = false; why = fmt("D=%d: G=%d lanes cannot cover %d vectors in one pass", D, G, Dv); }
        if (EMBEDDING_BAG_FORWARD_CLASS_G[cls] != G || EMBEDDING_BAG_FORWARD_CLASS_NV[cls] != NV) {
            ok = false; why = fmt("D=%d: class %d instantiates G=%d NV=%d, the kernel needs G=%d NV=%d", D, cls,
                                  EMBEDDING_BAG_FORWARD_CLASS_G[cls], EMBEDDING_BAG_FORWARD_CLASS_NV[cls], G, NV);
        }
        std::vector<int> seen(Dv, 0);                          // vectors of one bag, over its G lanes
        for (int g = 0; g < G; g++)
            for (int v0 = 0; v0 < Dv; v0 += NV * G)
                for (int k = 0; k < NV; k++)
                    if (v0 + k * G + g < Dv) seen[v0 + k * G + g]++;
        for (int v = 0; v < Dv; v++) if (seen[v] != 1) { ok = false; why = fmt("D=%d: vector %d covered %d times", D, v, seen[v]); break; }
        for (int B : {1, 7, 37, 100}) {
            for (int block : {32, 64, 96, 128, 256, 512, 1024}) {
                // version 3 (grid sized for a table with max_D = 1028 >= D) and version 4 (grid of D's class)
                for (int version : {3, 4}) {
                    if (version == 4 && block > 512) continue;
                    unsigned gx = version == 3 ? embedding_bag_forward_grid_x_groups(B, 1028, block)
                                               : (unsigned)ceil_div<int64_t>(B, (int64_t)(block / 32) * (32 / G));
                    std::vector<std::vector<int>> lanes(B);
                    for (unsigned bx = 0; bx < gx; bx++)
                        for (unsigned th = 0; th < (unsigned)block; th++) {
                            int64_t b = embedding_bag_forward_bag_of_thread(bx, th, block, G);
                            if (b < B) lanes[b].push_back((int)(th % 32) + 32 * (int)(bx * (block / 32) + th / 32));
                        }
                    for (int b = 0; b < B && ok; b++) {
                        // G lanes, consecutive, in one warp, starting at a multiple of G
                        std::vector<int> l = lanes[b];
                        std::sort(l.begin(), l.end());
                        bool good = (int)l.size() == G && l[0] % G == 0 && l.back() - l[0] == G - 1 && l[0] / 32 == l.back() / 32;
                        if (!good) { ok = false; why = fmt("v%d D=%d B=%d block=%d: bag %d has %zu lanes", version, D, B, block, b, l.size()); }
                    }
                }
                // version 5: a warp per bag, grid x = ceil(B / warps per block)
                if (block <= 512) {
                    const int64_t warps = ceil_div<int64_t>(B, block / 32) * (block / 32);
                    if (warps < B || warps - B >= block / 32) { ok = false; why = fmt("v5 B=%d block=%d: %lld warps", B, block, (long long)warps); }
                }
            }
        }
    }
    report(ok, "versions 3-5: each bag gets exactly one aligned group of G lanes, each vector one lane (D = 4..1100, B = 1..100, all blocks)", why);

    // version 5's batches: slot s takes rows j0 + s + u*S (u < ROWS): each row of a 32-row chunk exactly once
    ok = true;
    for (int G : {1, 2, 4, 8, 16, 32})
        for (int NV : {1, 2, 4}) {
            const int S = 32 / G, ROWS = std::min(EMBEDDING_BAG_FORWARD_VECS_IN_FLIGHT / NV, G), BATCH = ROWS * S;
            if (32 % BATCH != 0) { ok = false; continue; }
            std::vector<int> seen(32, 0);
            for (int j0 = 0; j0 < 32; j0 += BATCH)
                for (int s = 0; s < S; s++)
                    for (int u = 0; u < ROWS; u++) seen[j0 + u * S + s]++;
            for (int j = 0; j < 32; j++) ok = ok && seen[j] == 1;
        }
    report(ok, "version 5: the row slots of the batches cover each row of a chunk once");

    // the plan: every table once, grouped by class
    ok = true;
    for (const auto& [name, c] : reference_configs()) {
        EmbeddingBagInputs in = embedding_bag_make_inputs(c, 1);
        EmbeddingBagForwardPlan p = embedding_bag_forward_plan(in.D_offsets);
        std::vector<int> count(in.T, 0);
        for (int cl = 0; cl < EMBEDDING_BAG_FORWARD_CLASSES; cl++)
            for (int i = p.class_begin[cl]; i < p.class_begin[cl + 1]; i++) {
                count[p.table_order[i]]++;
                ok = ok && embedding_bag_forward_class(in.D(p.table_order[i])) == cl;
            }
        for (int t = 0; t < in.T; t++) ok = ok && count[t] == 1;
        ok = ok && p.class_begin[0] == 0 && p.class_begin[EMBEDDING_BAG_FORWARD_CLASSES] == in.T && (int)p.table_order.size() == in.T;
    }
    report(ok, "plan: the tables ordered by class, each once");
}

// replay: --dump's files read back by --load give the same inputs and tables bit for bit; one's own
// trace (int32 ids, no weights_offsets) loads too; the fixtures of tests/cli_cases.txt's --load cases
// (a good dump, and four broken ones that must be refused) are left in build/tests/fixtures
static void test_replay() {
    const std::string root = "build/tests/fixtures", dir = root + "/bag_ok", P = "embedding_bag_forward_";
    make_dir("build"); make_dir("build/tests"); make_dir(root); make_dir(dir);
    auto c = small_config(3, {4, 12, 132}, {50, 7, 33}, 9, 5);
    c.weighted = true; c.mean = true; c.alpha = 1.15; c.empty_frac = 0.2;
    const EmbeddingBagInputs in = embedding_bag_make_inputs(c, 17);
    const std::vector<floatX> w = embedding_bag_forward_make_weights(in, 17);
    const std::vector<float> wf = to_float_vec(w);
    embedding_bag_dump_inputs(dir, P, in, c.L);
    write_npy(dir, P + "weights", wf.data(), {in.num_weights});
    EmbeddingBagConfig c2;
    const EmbeddingBagInputs back = embedding_bag_load_inputs(dir, P, c2);
    Cli cli("embedding_bag_forward", "", 6, 6);
    cli.load_dir = dir;
    const std::vector<floatX> w2 = embedding_bag_forward_weights(cli, back);
    report(embedding_bag_identical(in, back) && w2.size() == w.size() && memcmp(w2.data(), w.data(), w.size() * sizeof(floatX)) == 0 &&
               c2.T == 3 && c2.B == 9 && c2.mean && c2.weighted && c2.L == 5 && embedding_bag_shape(c2) == "T3,B9,loaded,mean",
           "--dump then --load: indices, offsets, layout, per-sample weights and tables come back bit for bit");

    // a nobag dump: pooling 2 in meta comes back as nobag
    const std::string dn = root + "/bag_nobag";
    make_dir(dn);
    auto cn = small_config(3, {12}, {50, 7, 33}, 9, 5);
    cn.nobag = true; cn.alpha = 1.15;
    const EmbeddingBagInputs inn = embedding_bag_make_inputs(cn, 18);
    embedding_bag_dump_inputs(dn, P, inn, cn.L);
    EmbeddingBagConfig c4;
    const EmbeddingBagInputs backn = embedding_bag_load_inputs(dn, P, c4);
    report(embedding_bag_identical(inn, backn) && backn.nobag && c4.nobag && !c4.mean && embedding_bag_shape(c4) == "T3,B9,loaded,none",
           "--dump then --load of a nobag input: it comes back nobag, bit for bit");

    // one's own trace, as numpy writes it with int32 ids: D_offsets, E, offsets, indices and meta only
    const std::string own = root + "/bag_own";
    make_dir(own);
    std::vector<int32_t> idx = {3, 0, 9, 9, 1, 2}, off = {0, 2, 4, 5, 6}, Doff = {0, 8, 12};
    std::vector<int64_t> E = {10, 3}, meta = {2, 2, 12, 0, 0, 3};
    write_npy(own, P + "indices", idx.data(), {6});
    write_npy(own, P + "offsets", off.data(), {5});
    write_npy(own, P + "D_offsets", Doff.data(), {3});
    write_npy(own, P + "E", E.data(), {2});
    write_npy(own, P + "meta", meta.data(), {6});
    EmbeddingBagConfig c3;
    const EmbeddingBagInputs mine = embedding_bag_load_inputs(own, P, c3);
    report(mine.indices == std::vector<int64_t>{3, 0, 9, 9, 1, 2} && mine.weights_offsets == std::vector<int64_t>{0, 80} &&
               mine.num_weights == 92 && mine.per_sample_weights.empty() && embedding_bag_forward_validate(mine).empty(),
           "--load of one's own int32 trace: tables packed in order, ids widened");

    // broken dumps for the command-line cases: each must be refused with its position
    auto broken = [&](const char* name, const std::function<void(EmbeddingBagInputs&)>& brk) {
        EmbeddingBagInputs b = in;
        brk(b);
        make_dir(root + "/" + name);
        embedding_bag_dump_inputs(root + "/" + name, P, b, c.L);
    };
    broken("bag_bad_offsets", [](EmbeddingBagInputs& b) { b.offsets[5] = b.offsets[4] - 1; });
    broken("bag_bad_index", [](EmbeddingBagInputs& b) { b.indices[b.offsets[9]] = 7; });     // table 1 has E = 7
    broken("bag_bad_count", [](EmbeddingBagInputs& b) { b.offsets.pop_back(); });
    broken("bag_bad_dtype", [](EmbeddingBagInputs&) {});
    std::vector<float> as_float(in.indices.begin(), in.indices.end());
    write_npy(root + "/bag_bad_dtype", P + "indices", as_float.data(), {(int64_t)as_float.size()});
}

// --pooling none: each output row is its lookup's table row (read back through hash-free indexing of the
// flat weights), and the rows summed by bag give the pooled SUM forward bit for bit (both sum in double in
// bag order); several tables of one D, uniform and Zipf, empty bags, seeds
static void test_nobag_reference() {
    struct Case { const char* name; EmbeddingBagConfig c; };
    std::vector<Case> cases;
    auto c = small_config(3, {12}, {50, 7, 33}, 9, 5);
    cases.push_back({"uniform, 3 tables of D 12", c});
    c = small_config(4, {36}, {1000, 77, 5000, 300}, 37, 13);
    c.alpha = 1.15; c.empty_frac = 0.3;
    cases.push_back({"Zipf, 4 tables of D 36, empty bags", c});
    c = small_config(2, {260}, {40, 3}, 5, 11);
    c.distinct = false;
    cases.push_back({"rows repeated, D 260", c});
    c = small_config(2, {4}, {100, 100}, 6, 3);
    c.empty_frac = 1.0;
    cases.push_back({"every bag empty (no rows)", c});
    for (auto& [name, cfg] : cases)
        for (uint64_t seed : {1, 5, 9}) {
            EmbeddingBagConfig pooled = cfg, nobag = cfg;
            nobag.nobag = true;
            const EmbeddingBagInputs in = embedding_bag_make_inputs(nobag, seed), ip = embedding_bag_make_inputs(pooled, seed);
            const std::vector<floatX> w = embedding_bag_forward_make_weights(in, seed);
            const int D = in.D(0);
            std::vector<float> rows((size_t)(in.out_rows() * in.out_cols()), NAN), sum((size_t)in.B * in.total_D(), NAN);
            embedding_bag_forward_cpu(rows.data(), in, w.data());
            embedding_bag_forward_cpu(sum.data(), ip, w.data());
            bool copy_ok = in.out_rows() == in.N() && in.out_cols() == D && embedding_bag_forward_validate(in).empty();
            bool sum_ok = in.indices == ip.indices && in.offsets == ip.offsets;
            for (int t = 0; t < in.T; t++)
                for (int b = 0; b < in.B; b++) {
                    const int64_t bag = (int64_t)t * in.B + b;
                    for (int d = 0; d < D; d++) {
                        double acc = 0.0;
                        for (int64_t l = in.offsets[bag]; l < in.offsets[bag + 1]; l++) {
                            const float x = rows[(size_t)(l * D + d)];
                            copy_ok = copy_ok && x == to_float(w[(size_t)(in.weights_offsets[t] + in.indices[l] * D + d)]);
                            acc += (double)x;
                        }
                        sum_ok = sum_ok && (float)acc == sum[(size_t)b * in.total_D() + in.D_offsets[t] + d];
                    }
                }
            report(copy_ok && sum_ok, fmt("nobag reference: %s, seed %d: row l is lookup l's table row; rows summed by bag = pooled SUM",
                                          name, (int)seed),
                   fmt("copy %d, sum %d", (int)copy_ok, (int)sum_ok));
        }
}

// Version 7's map: blocks (x, table), groups of G lanes taking ROWS lookups each and G-strided vectors,
// every (lookup, vector) of every table written exactly once, at tables of uneven lookup counts
static void test_gather_map() {
    bool ok = true;
    std::string why;
    for (int D : {4, 12, 36, 64, 128, 132, 516, 1028})
        for (int block : {64, 256, 512}) {
            const std::vector<int64_t> begin = {0, 0, 1, 38, 38, 1039};   // tables of 0, 1, 37, 0, 1001 lookups
            const int T = (int)begin.size() - 1, Dv = D / 4, G = embedding_bag_forward_lanes_per_row(D);
            int64_t max_lookups = 0;
            for (int t = 0; t < T; t++) max_lookups = std::max(max_lookups, begin[t + 1] - begin[t]);
            const int64_t gx = embedding_bag_forward_grid_x7(max_lookups, D, block);
            std::vector<int> hits((size_t)begin[T] * Dv, 0);
            for (int t = 0; t < T; t++)
                for (int64_t bx = 0; bx < gx; bx++)
                    for (int th = 0; th < block; th++) {                  // the kernel's index arithmetic
                        const int64_t n = begin[t + 1] - begin[t];
                        const int g = th % G;
                        const int64_t j0 = (bx * block + th) / G * EMBEDDING_BAG_FORWARD_GATHER_ROWS;
                        if (j0 >= n) continue;
                        for (int v = g; v - g < Dv; v += G)
                            for (int u = 0; u < EMBEDDING_BAG_FORWARD_GATHER_ROWS; u++)
                                if (j0 + u < n && v < Dv) hits[(size_t)((begin[t] + j0 + u) * Dv + v)]++;
                    }
            for (size_t i = 0; i < hits.size() && ok; i++)
                if (hits[i] != 1) { ok = false; why = fmt("D %d block %d: vector %zu written %d times", D, block, i, hits[i]); }
        }
    report(ok, "version 7 map: every (lookup, 4-column vector) written once", why);
}

// which versions run which pooling: 1-6 pool, 7 gathers; the block cap
static void test_skip_reasons() {
    bool ok = true;
    for (int k = 1; k <= 6; k++)
        ok = ok && embedding_bag_forward_skip_reason(k, false, 128).empty() &&
             embedding_bag_forward_skip_reason(k, true, 128).find("versions 1-6 pool bags") != std::string::npos;
    ok = ok && embedding_bag_forward_skip_reason(7, true, 512).empty() &&
         embedding_bag_forward_skip_reason(7, false, 128).find("gather of --pooling none") != std::string::npos &&
         embedding_bag_forward_skip_reason(7, true, 1024).find("exceeds the 512") != std::string::npos;
    const char* none[] = {"x", "--T", "3", "--pooling", "none"};
    const char* sum[] = {"x", "--pooling", "sum", "none"};
    ok = ok && embedding_bag_default_version(5, (char**)none, 6, 7) == 7 && embedding_bag_default_version(4, (char**)sum, 6, 7) == 6;
    report(ok, "skip reasons: versions 1-6 refuse --pooling none, 7 refuses pooling; --pooling none makes 7 the default");
}

int main() {
    test_nobag_reference();
    test_gather_map();
    test_skip_reasons();
    test_replay();
    test_reference_against_one_hot();
    test_empty_bags();
    test_fp32_orders_within_tolerance();
    test_half_weights();
    test_zipf_statistics();
    test_generator_flags();
    test_validator();
    test_bytes();
    test_table_of_column();
    test_thread_maps();
    return test_summary();
}
