// CPU tests of embedding_bag_backward.cu (no GPU): the reference against an independent dense
// per-lookup scatter, the optimizer formulas on hand-computed rows, the validator's messages, the chunk /
// run plan that versions 4-6 build on (with the helpers the kernels use), the fp32 summation orders of
// every version against the check's tolerance, a dropped lookup caught by that tolerance, the bytes
// formulas, and forward/backward consistency <fwd(W), G> = <W, dense-grad(G)>.
//
// Build (scripts/test.sh): nvcc -O2 -std=c++17 -arch=sm_90 -Werror all-warnings -I dev/cuda tests/test_embedding_bag_backward.cu -lcublas
#define NO_MAIN
#include "test_util.h"
#include "../dev/cuda/embedding_bag_backward.cu"
#if __has_include("../dev/cuda/embedding_bag_forward.cu")
#include "../dev/cuda/embedding_bag_forward.cu"
#define HAVE_FORWARD_OP 1
#else
#define HAVE_FORWARD_OP 0
#endif

#include <array>
#include <map>
#include <numeric>
#include <random>

using Opt = EmbeddingBagBackwardOpt;
static const Opt kOpts[] = {Opt::dense, Opt::sgd, Opt::rowwise_adagrad, Opt::adagrad};

// initial tables and state as the bench makes them (the hash; weights rounded to nearest in their type)
struct Tables {
    uint64_t seed;
    EmbeddingBagWeights wt = EmbeddingBagWeights::fp32;
    float w(int64_t e) const { return embedding_bag_backward_initial_weight_as(seed, e, wt); }
    float m(int64_t i) const { return embedding_bag_backward_initial_state(seed, i); }
};

static EmbeddingBagBackwardReference run_reference(const EmbeddingBagBackwardInputs& in, Opt opt, const Tables& tb) {
    EmbeddingBagBackwardParams p;
    p.opt = opt;
    return embedding_bag_backward_cpu(in, p, [&](int64_t e) { return tb.w(e); }, [&](int64_t i) { return tb.m(i); });
}

// a small configuration
static EmbeddingBagConfig small_config(int T, int64_t E, int D, int B, int L, double alpha) {
    EmbeddingBagConfig c;
    c.T = T; c.E = E; c.D = D; c.B = B; c.L = L; c.alpha = alpha;
    return c;
}

// ---------------------------------------------------------------------------------------------
// 1. the reference against a dense per-lookup scatter (an independent formulation: every lookup adds
// its scaled gradient into a full-size double gradient; then the optimizer, written again here, on every
// row whose lookup count is not zero)

static bool close_f(double got, double want, double rtol = 2e-6, double atol = 1e-6) {
    return std::fabs(got - want) <= atol + rtol * std::fabs(want);
}

static void test_against_dense_scatter(const std::string& name, const EmbeddingBagConfig& cfg, uint64_t seed, Opt opt) {
    EmbeddingBagBackwardInputs in = embedding_bag_backward_make_inputs(cfg, seed);
    std::string err = embedding_bag_backward_validate(in);
    if (!err.empty()) { report(false, name, "generated input invalid: " + err); return; }
    Tables tb{seed * 7 + 1};
    EmbeddingBagBackwardReference ref = run_reference(in, opt, tb);
    const auto& R = ref.rows;

    std::vector<double> G((size_t)in.num_weights, 0.0);
    std::vector<int64_t> cnt((size_t)in.num_rows(), 0);
    for (int t = 0; t < in.T; t++)
        for (int b = 0; b < in.B; b++) {
            const int64_t bag = (int64_t)t * in.B + b, s0 = in.offsets[bag], s1 = in.offsets[bag + 1];
            for (int64_t l = s0; l < s1; l++) {
                const double s = embedding_bag_backward_scale(in, bag, l);
                const int D = in.D(t);
                for (int d = 0; d < D; d++)
                    G[in.weights_offsets[t] + in.indices[l] * D + d] += s * in.grad_output[(size_t)b * in.total_D() + in.D_offsets[t] + d];
                cnt[in.hash_offsets[t] + in.indices[l]]++;
            }
        }
    // the rows the reference updates are exactly the rows with lookups
    int64_t looked_up = 0;
    for (int64_t r = 0; r < in.num_rows(); r++) looked_up += cnt[r] > 0;
    if (looked_up != R.U()) { report(false, name, fmt("reference has %lld rows, the scatter %lld", (long long)R.U(), (long long)looked_up)); return; }
    int64_t bad = 0;
    std::string first;
    auto note = [&](const std::string& s) { if (bad++ == 0) first = s; };
    for (int64_t u = 0; u < R.U(); u++) {
        const int t = R.table[u], D = in.D(t);
        if (cnt[R.linear[u]] != R.count[u]) note(fmt("row %lld count %lld vs %lld", (long long)u, (long long)R.count[u], (long long)cnt[R.linear[u]]));
        const int64_t wrow = in.weights_offsets[t] + R.row[u] * D, c = R.col[u];
        double sumsq = 0.0;
        for (int d = 0; d < D; d++) sumsq += G[wrow + d] * G[wrow + d];
        const double mrow = opt == Opt::rowwise_adagrad ? tb.m(R.linear[u]) + sumsq / D : 0.0;
        for (int d = 0; d < D; d++) {
            const double g = G[wrow + d], w = tb.w(wrow + d);
            switch (opt) {
                case Opt::dense:
                    if (!close_f(ref.grad[c + d], g)) note(fmt("dense row %lld col %d: %.9g vs %.9g", (long long)u, d, ref.grad[c + d], g));
                    break;
                case Opt::sgd:
                    if (!close_f(ref.w[c + d], w - 0.1 * g)) note(fmt("sgd row %lld col %d", (long long)u, d));
                    break;
                case Opt::rowwise_adagrad:
                    if (!close_f(ref.w[c + d], w - 0.1 * g / (std::sqrt(mrow) + 0.1))) note(fmt("rowwise row %lld col %d", (long long)u, d));
                    break;
                case Opt::adagrad: {
                    const double m = tb.m(wrow + d) + g * g;
                    if (!close_f(ref.w[c + d], w - 0.1 * g / (std::sqrt(m) + 0.1)) || !close_f(ref.m[c + d], m))
                        note(fmt("adagrad row %lld col %d", (long long)u, d));
                    break;
                }
            }
        }
        if (opt == Opt::rowwise_adagrad && !close_f(ref.m[u], mrow)) note(fmt("rowwise state row %lld: %.9g vs %.9g", (long long)u, ref.m[u], mrow));
    }
    report(bad == 0, name, fmt("%lld mismatches, first: %s", (long long)bad, first.c_str()));
}

// ---------------------------------------------------------------------------------------------
// 2. the optimizer formulas on hand-computed rows. One table, E = 3, D = 4, B = 2:
// bag 0 = {row 1}, bag 1 = {row 1, row 2}; grad_output rows b0 = (1, 2, 0, -2), b1 = (3, -2, 0, 2).
// SUM: g(row 1) = b0 + b1 = (4, 0, 0, 0); g(row 2) = b1 = (3, -2, 0, 2); row 0 is not looked up.

static EmbeddingBagBackwardInputs hand_inputs(bool mean, bool weighted) {
    EmbeddingBagBackwardInputs in;
    in.T = 1; in.B = 2; in.mean = mean;
    in.D_offsets = {0, 4};
    in.E = {3};
    in.weights_offsets = {0};
    in.hash_offsets = {0, 3};
    in.num_weights = 12;
    in.indices = {1, 1, 2};
    in.offsets = {0, 1, 3};
    if (weighted) in.per_sample_weights = {0.5f, 2.0f, -1.0f};
    in.grad_output = {1, 2, 0, -2, 3, -2, 0, 2};
    return in;
}

static void test_hand_rows() {
    // initial weights: w[e] = 1 + e / 16 (exact); state: rowwise m = {7, 5, 3}; adagrad m[e] = 9
    auto w0 = [](int64_t e) { return 1.0f + (float)e / 16.0f; };
    auto m_row = [](int64_t i) { return i == 0 ? 7.0f : (i == 1 ? 5.0f : 3.0f); };
    auto m_el = [](int64_t) { return 9.0f; };
    bool ok = true;
    std::string why;
    auto expect = [&](const char* what, double got, double want) {
        if (std::fabs(got - want) > 1e-6 * std::max(1.0, std::fabs(want))) {
            ok = false;
            if (why.empty()) why = fmt("%s: got %.9g expected %.9g", what, got, want);
        }
    };
    EmbeddingBagBackwardInputs in = hand_inputs(false, false);
    if (!embedding_bag_backward_validate(in).empty()) { report(false, "optimizer formulas on hand-computed rows", embedding_bag_backward_validate(in)); return; }
    EmbeddingBagBackwardParams p;
    // rows: u = 0 is row 1 (weights 4..7), u = 1 is row 2 (weights 8..11)
    p.opt = Opt::dense;
    auto r = embedding_bag_backward_cpu(in, p, w0, m_row);
    expect("rows looked up", (double)r.rows.U(), 2);
    expect("dense row 1 col 0", r.grad[0], 4); expect("dense row 1 col 1", r.grad[1], 0);
    expect("dense row 2", r.grad[4], 3); expect("dense row 2 col 1", r.grad[5], -2); expect("dense row 2 col 3", r.grad[7], 2);
    p.opt = Opt::sgd;
    r = embedding_bag_backward_cpu(in, p, w0, m_row);
    expect("sgd row 1 col 0", r.w[0], 1.25 - 0.4);          // w[4] = 1.25, g = 4
    expect("sgd row 1 col 1", r.w[1], 1.3125);              // g = 0: unchanged
    expect("sgd row 2 col 1", r.w[5], 1.5625 + 0.2);        // w[9] = 1.5625, g = -2
    p.opt = Opt::rowwise_adagrad;
    r = embedding_bag_backward_cpu(in, p, w0, m_row);
    // row 1: mean(g^2) = 16/4 = 4, m = 5 + 4 = 9, sqrt = 3, multiplier 0.1 / 3.1
    expect("rowwise state row 1", r.m[0], 9.0);
    expect("rowwise row 1 col 0", r.w[0], 1.25 - 0.1 / 3.1 * 4);
    // row 2: mean(g^2) = (9 + 4 + 0 + 4)/4 = 4.25, m = 3 + 4.25 = 7.25
    expect("rowwise state row 2", r.m[1], 7.25);
    expect("rowwise row 2 col 0", r.w[4], 1.5 - 0.1 / (std::sqrt(7.25) + 0.1) * 3);
    expect("rowwise row 2 col 3", r.w[7], 1.6875 - 0.1 / (std::sqrt(7.25) + 0.1) * 2);
    p.opt = Opt::adagrad;
    r = embedding_bag_backward_cpu(in, p, w0, m_el);
    // row 1 col 0: m = 9 + 16 = 25, w -= 0.1 * 4 / 5.1; col 1: g = 0, m = 9, w unchanged
    expect("adagrad state row 1 col 0", r.m[0], 25.0);
    expect("adagrad row 1 col 0", r.w[0], 1.25 - 0.4 / 5.1);
    expect("adagrad state row 1 col 1", r.m[1], 9.0);
    expect("adagrad row 1 col 1", r.w[1], 1.3125);
    // row 2 col 1: g = -2, m = 13
    expect("adagrad row 2 col 1", r.w[5], 1.5625 + 0.2 / (std::sqrt(13.0) + 0.1));
    // MEAN: bag 1 has two lookups, so its gradient is halved: g(row 1) = b0 + b1/2 = (2.5, 1, 0, -1)
    p.opt = Opt::dense;
    r = embedding_bag_backward_cpu(hand_inputs(true, false), p, w0, m_row);
    expect("mean row 1 col 0", r.grad[0], 2.5); expect("mean row 1 col 3", r.grad[3], -1); expect("mean row 2 col 0", r.grad[4], 1.5);
    // weighted: g(row 1) = 0.5 b0 + 2 b1 = (6.5, -3, 0, 3); g(row 2) = -b1
    r = embedding_bag_backward_cpu(hand_inputs(false, true), p, w0, m_row);
    expect("weighted row 1 col 0", r.grad[0], 6.5); expect("weighted row 1 col 1", r.grad[1], -3); expect("weighted row 2 col 0", r.grad[4], -3);
    // weighted MEAN: g(row 1) = 0.5 b0 + 2 b1 / 2
    r = embedding_bag_backward_cpu(hand_inputs(true, true), p, w0, m_row);
    expect("weighted mean row 1 col 0", r.grad[0], 3.5); expect("weighted mean row 2 col 3", r.grad[7], -1);
    report(ok, "optimizer formulas on hand-computed rows (dense, sgd, rowwise and elementwise Adagrad, mean, weighted)", why);
}

// rows nobody looked up are not in the reference, and applying the reference to full tables changes
// exactly the looked-up rows (sgd: each of them moves)
static void test_untouched_rows() {
    EmbeddingBagConfig c = small_config(3, 40, 8, 5, 3, 0.0);
    c.Es = {40, 7, 1000};
    EmbeddingBagBackwardInputs in = embedding_bag_backward_make_inputs(c, 5);
    Tables tb{11};
    auto ref = run_reference(in, Opt::sgd, tb);
    std::vector<float> full((size_t)in.num_weights), before;
    for (int64_t e = 0; e < in.num_weights; e++) full[e] = tb.w(e);
    before = full;
    const auto& R = ref.rows;
    for (int64_t u = 0; u < R.U(); u++) {
        const int D = in.D(R.table[u]);
        for (int d = 0; d < D; d++) full[in.weights_offsets[R.table[u]] + R.row[u] * D + d] = ref.w[R.col[u] + d];
    }
    std::vector<char> hit((size_t)in.num_rows(), 0);
    for (int t = 0; t < in.T; t++)
        for (int64_t l = in.offsets[(int64_t)t * in.B]; l < in.offsets[(int64_t)(t + 1) * in.B]; l++) hit[in.hash_offsets[t] + in.indices[l]] = 1;
    int64_t wrong = 0, untouched = 0;
    for (int t = 0; t < in.T; t++)
        for (int64_t row = 0; row < in.E[t]; row++) {
            const int D = in.D(t);
            bool changed = false;
            for (int d = 0; d < D; d++) {
                const int64_t e = in.weights_offsets[t] + row * D + d;
                changed |= memcmp(&full[e], &before[e], 4) != 0;
            }
            const bool h = hit[in.hash_offsets[t] + row];
            untouched += !h;
            wrong += h != changed;
        }
    report(wrong == 0 && untouched > 0, "untouched rows: the reference changes exactly the looked-up rows",
           fmt("%lld rows disagree (%lld untouched)", (long long)wrong, (long long)untouched));
}

// ---------------------------------------------------------------------------------------------
// 3. the validator's messages

static void test_validator() {
    EmbeddingBagConfig c = small_config(2, 50, 8, 4, 3, 0.0);
    const EmbeddingBagBackwardInputs good = embedding_bag_backward_make_inputs(c, 3);
    report(embedding_bag_backward_validate(good).empty(), "validator accepts a generated input", embedding_bag_backward_validate(good));
    struct Case { const char* name; std::function<void(EmbeddingBagBackwardInputs&)> brk; const char* expect; };
    std::vector<Case> cases = {
        {"index >= E", [](EmbeddingBagBackwardInputs& in) { in.indices[2] = in.E[0]; }, "is out of range: table 0 has E = 50 rows"},
        {"index < 0", [](EmbeddingBagBackwardInputs& in) { in.indices[0] = -1; }, "indices[0] = -1 (table 0) is out of range"},
        {"index >= E in table 1", [](EmbeddingBagBackwardInputs& in) { in.indices[in.offsets[4]] = 50; }, "(table 1) is out of range"},
        {"offsets not non-decreasing", [](EmbeddingBagBackwardInputs& in) { in.offsets[2] = in.offsets[1] - 1; },
         "offsets must be non-decreasing: offsets[2]"},
        {"offsets count != T*B+1", [](EmbeddingBagBackwardInputs& in) { in.offsets.pop_back(); }, "offsets has 8 entries, expected T*B+1 = 9"},
        {"offsets[0] != 0", [](EmbeddingBagBackwardInputs& in) { in.offsets[0] = 1; }, "offsets[0] (1) must be 0"},
        {"last offset != number of indices", [](EmbeddingBagBackwardInputs& in) { in.indices.push_back(0); },
         "offsets[T*B] (24) must equal the number of indices (25)"},
        {"D % 4 != 0", [](EmbeddingBagBackwardInputs& in) { in.D_offsets[1] = 6; in.D_offsets[2] = 14; }, "D of table 0 (6) must be a positive multiple of 4"},
        {"per-sample weights count", [](EmbeddingBagBackwardInputs& in) { in.per_sample_weights.assign(3, 1.0f); },
         "per_sample_weights has 3 entries, expected one per index (24)"},
        {"grad_output size", [](EmbeddingBagBackwardInputs& in) { in.grad_output.pop_back(); }, "grad_output has 63 entries, expected B*total_D = 64"},
        {"nobag grad_output size", [](EmbeddingBagBackwardInputs& in) { in.nobag = true; }, "grad_output has 64 entries, expected N*D = 192"},
        {"hash offsets", [](EmbeddingBagBackwardInputs& in) { in.hash_offsets[2] = 99; }, "hash_offsets[2] (99) must be hash_offsets[1] + E = 100"},
        {"weights offset alignment", [](EmbeddingBagBackwardInputs& in) { in.weights_offsets[1] = 402; }, "must be a non-negative multiple of 4"},
        {"table past the weights", [](EmbeddingBagBackwardInputs& in) { in.num_weights -= 4; }, "table 1 (offset 400, 50 rows of 8) runs past the 796 weights"},
    };
    for (auto& k : cases) {
        EmbeddingBagBackwardInputs in = good;
        k.brk(in);
        const std::string msg = embedding_bag_backward_validate(in);
        report(msg.find(k.expect) != std::string::npos, std::string("validator: ") + k.name, "got '" + msg + "', expected '" + k.expect + "'");
    }
}

// ---------------------------------------------------------------------------------------------
// 4. the plan of versions 4-6: chunks of C sorted lookups, their pieces (the kernel's helpers), the owners
// of runs that cross chunks and the last chunk of each (the kernel's 32-probe search with a host ballot).
// Every lookup must land in exactly one piece, every run must be finished exactly once: by one complete
// piece, or by its owner's TAIL plus the HEAD of every later chunk up to its last.

static unsigned host_ballot_impl(const std::function<bool(int)>& probe) {
    unsigned m = 0;
    for (int l = 0; l < 32; l++) if (probe(l)) m |= 1u << l;
    return m;
}

static bool check_plan(const std::vector<uint32_t>& keys, int64_t C, std::string& why) {
    const int64_t N = (int64_t)keys.size(), nchunks = ceil_div<int64_t>(N, C);
    std::vector<int> covered((size_t)N, 0);
    std::map<int64_t, int> finished;                                  // run start -> times finished
    std::map<int64_t, std::vector<int64_t>> partial_cover;            // run start -> lookups in partials
    std::vector<std::array<int64_t, 2>> slot_used((size_t)nchunks, {-1, -1});   // run start held in HEAD / TAIL
    std::vector<int64_t> rs_of((size_t)N), re_of((size_t)N);
    for (int64_t i = 0; i < N; i++) rs_of[i] = (i > 0 && keys[i - 1] == keys[i]) ? rs_of[i - 1] : i;
    for (int64_t i = N - 1; i >= 0; i--) re_of[i] = (i + 1 < N && keys[i + 1] == keys[i]) ? re_of[i + 1] : i;
    auto run_start = [&](int64_t i) { return rs_of[i]; };
    auto run_end = [&](int64_t i) { return re_of[i]; };
    for (int64_t c = 0; c < nchunks; c++) {
        const int64_t base = c * C;
        const int cnt = (int)std::min<int64_t>(C, N - base);
        unsigned starts = 0, ends = 0;
        for (int i = 0; i < cnt; i++) {
            const int64_t o = base + i;
            if (o == 0 || keys[o - 1] != keys[o]) starts |= 1u << i;
            if (o == N - 1 || keys[o + 1] != keys[o]) ends |= 1u << i;
        }
        int begin = 0;
        while (begin < cnt) {
            const int end = embedding_bag_backward_piece_end(ends, cnt, begin);
            if (end < begin || end >= cnt) { why = fmt("chunk %lld: piece end %d for begin %d", (long long)c, end, begin); return false; }
            for (int i = begin; i <= end; i++) {
                covered[base + i]++;
                if (keys[base + i] != keys[base + begin]) { why = fmt("chunk %lld: piece mixes rows", (long long)c); return false; }
            }
            const int64_t rs = run_start(base + begin);
            if (embedding_bag_backward_piece_complete(starts, ends, begin, end)) {
                if (rs != base + begin || run_end(base + begin) != base + end) { why = "a complete piece is not its whole run"; return false; }
                finished[rs]++;
            } else {
                const int slot = embedding_bag_backward_piece_slot(starts, begin);
                if (slot == 0 && begin != 0) { why = "a HEAD piece not at the chunk start"; return false; }
                if (slot == 1 && end != cnt - 1) { why = "a TAIL piece not at the chunk end"; return false; }
                if (slot_used[c][slot] != -1) { why = fmt("chunk %lld: two pieces in slot %d", (long long)c, slot); return false; }
                slot_used[c][slot] = rs;
                for (int i = begin; i <= end; i++) partial_cover[rs].push_back(base + i);
            }
            begin = end + 1;
        }
    }
    for (int64_t i = 0; i < N; i++)
        if (covered[i] != 1) { why = fmt("lookup %lld in %d pieces", (long long)i, covered[i]); return false; }
    // the combine kernel: owners and their spans
    auto ballot = [&](const auto& probes) { return host_ballot_impl([&](int l) { return (bool)probes(l); }); };
    for (int64_t c = 0; c < nchunks; c++) {
        if (!embedding_bag_backward_is_owner(keys.data(), N, C, c)) continue;
        const int64_t last = std::min(c * C + C, N) - 1;
        const uint32_t K = keys[last];
        auto continues = [&](int64_t x) { return embedding_bag_backward_continues(keys.data(), N, C, x, K); };
        const int64_t cl = embedding_bag_backward_last_chunk(c, nchunks, continues, ballot);
        const int64_t rs = run_start(last), re = run_end(last);
        if (cl != re / C) { why = fmt("owner %lld: last chunk %lld, expected %lld", (long long)c, (long long)cl, (long long)(re / C)); return false; }
        if (slot_used[c][1] != rs) { why = fmt("owner %lld has no TAIL for its run", (long long)c); return false; }
        std::vector<int64_t> got;
        for (int64_t k = 0; k <= cl - c; k++) {
            const int slot = k == 0 ? 1 : 0;
            if (slot_used[c + k][slot] != rs) { why = fmt("owner %lld: chunk %lld slot %d holds another run", (long long)c, (long long)(c + k), slot); return false; }
        }
        got = partial_cover[rs];
        std::sort(got.begin(), got.end());
        if ((int64_t)got.size() != re - rs + 1 || got.front() != rs || got.back() != re) { why = "partials do not cover the run"; return false; }
        finished[rs]++;
    }
    // every run finished exactly once
    for (int64_t i = 0; i < N; i++)
        if (i == 0 || keys[i - 1] != keys[i])
            if (finished[i] != 1) { why = fmt("run at %lld finished %d times", (long long)i, finished[i]); return false; }
    return true;
}

static void test_plan() {
    std::mt19937_64 gen(123);
    bool ok = true;
    std::string why;
    int cases = 0;
    for (int64_t C : {8, 16, 32}) {
        std::vector<std::vector<uint32_t>> inputs;
        inputs.push_back(std::vector<uint32_t>(1, 5));                             // one lookup
        inputs.push_back(std::vector<uint32_t>(10240, 7));                         // one giant run
        inputs.push_back(std::vector<uint32_t>(100003, 3));                        // a run over 2^12+ chunks
        std::vector<uint32_t> distinct(1000);
        std::iota(distinct.begin(), distinct.end(), 0u);
        inputs.push_back(distinct);
        std::vector<uint32_t> exact(4 * C);                                        // runs ending on chunk ends
        for (size_t i = 0; i < exact.size(); i++) exact[i] = (uint32_t)(i / C);
        inputs.push_back(exact);
        for (int rep = 0; rep < 40; rep++) {                                       // random run lengths
            std::vector<uint32_t> k;
            uint32_t key = 0;
            const int64_t n = 1 + gen() % 3000;
            while ((int64_t)k.size() < n) {
                const int pick = gen() % 10;
                const int64_t len = pick < 6 ? 1 + gen() % 3 : (pick < 9 ? 1 + gen() % (3 * C) : 1 + gen() % 1500);
                for (int64_t j = 0; j < len && (int64_t)k.size() < n; j++) k.push_back(key);
                key += 1 + gen() % 3;
            }
            inputs.push_back(k);
        }
        for (auto& k : inputs) {
            cases++;
            if (!check_plan(k, C, why)) { ok = false; why = fmt("C=%lld N=%zu: ", (long long)C, k.size()) + why; break; }
        }
        if (!ok) break;
    }
    report(ok, fmt("versions 4-6 plan: pieces, owners, last chunks cover every run once (%d key arrays, C = 8, 16, 32)", cases), why);
}

// ---------------------------------------------------------------------------------------------
// 5. the fp32 orders of the versions, emulated on the host, must land within the check's tolerance;
// and a lookup dropped from a long run must not

struct Order { int version; int64_t C; int W; uint64_t seed; };

// the row gradients in the order and fp32 arithmetic of a version (compact layout)
static std::vector<float> emulate_grads(const EmbeddingBagBackwardInputs& in, const EmbeddingBagBackwardRows& R, const Order& o,
                                        int64_t drop = -1) {
    std::vector<float> g((size_t)R.col.back(), 0.0f);
    std::mt19937_64 gen(o.seed);
    const int total_D = in.total_D();
    auto bag_scale = [&](int64_t bag) { const int64_t L = in.offsets[bag + 1] - in.offsets[bag]; return 1.0f / (float)L; };
    for (int64_t u = 0; u < R.U(); u++) {
        const int t = R.table[u], D = in.D(t);
        std::vector<int64_t> occ(R.occ.begin() + R.first[u], R.occ.begin() + R.first[u] + R.count[u]);
        if (drop >= 0 && u == drop) occ.erase(occ.begin() + occ.size() / 2);
        // the scale and the gradient value of lookup l, column d, as the version forms them
        auto term = [&](int64_t l, int d, float acc) {
            const int64_t bag = R.bag_of[l], b = bag % in.B;
            const float go = in.nobag ? in.grad_output[(size_t)(l * D + d)] : in.grad_output[(size_t)b * total_D + in.D_offsets[t] + d];
            const float w = in.per_sample_weights.empty() ? 1.0f : in.per_sample_weights[l];
            if (o.version == 1) return acc + (in.mean ? w * bag_scale(bag) : w) * go;          // atomicAdd(s * go)
            if (o.version <= 3) return fmaf(w, in.mean ? go * bag_scale(bag) : go, acc);       // grad_mean pass, then w * go
            return fmaf(in.mean ? w * bag_scale(bag) : w, go, acc);                            // s = w / L, then s * go
        };
        if (o.version == 1) std::shuffle(occ.begin(), occ.end(), gen);
        const int64_t n = (int64_t)occ.size();
        for (int d = 0; d < D; d++) {
            float total = 0.0f;
            if (o.version <= 2 || (o.version == 3 && n < 32)) {
                for (int64_t l : occ) total = term(l, d, total);
            } else if (o.version == 3) {                     // W slices, then the shared-memory tree
                std::vector<float> part(o.W, 0.0f);
                const int64_t per = (n + o.W - 1) / o.W;
                for (int w = 0; w < o.W; w++)
                    for (int64_t j = std::min(n, w * per); j < std::min(n, w * per + per); j++) part[w] = term(occ[j], d, part[w]);
                for (int h = o.W / 2; h > 0; h /= 2)
                    for (int w = 0; w < h; w++) part[w] += part[w + h];
                total = part[0];
            } else {                                         // chunks of C in the sorted order, partials, 8-warp combine
                const int64_t pos0 = R.first[u];             // the run's first position in the sorted order
                std::vector<float> partials;
                float acc = 0.0f;
                for (int64_t j = 0; j < n; j++) {
                    acc = term(occ[j], d, acc);
                    const int64_t pos = pos0 + j;
                    if (j == n - 1 || (pos + 1) % o.C == 0) { partials.push_back(acc); acc = 0.0f; }
                }
                const int64_t S = (int64_t)partials.size();
                if (S == 1) total = partials[0];
                else if (S <= EMBEDDING_BAG_BACKWARD_WARP_SPAN) {     // one warp, in order
                    for (float p : partials) total += p;
                } else {                                              // 8 slices, then the slice sums in order
                    float red[8] = {};
                    const int64_t per = (S + 7) / 8;
                    for (int w = 0; w < 8; w++)
                        for (int64_t k = std::min(S, w * per); k < std::min(S, w * per + per); k++) red[w] += partials[k];
                    total = red[0];
                    for (int w = 1; w < 8; w++) total += red[w];
                }
            }
            g[R.col[u] + d] = total;
        }
    }
    return g;
}

// the optimizer in fp32 as update_row does it; returns the compact weights/state (or the gradient)
static void emulate_update(const EmbeddingBagBackwardInputs& in, const EmbeddingBagBackwardRows& R, Opt opt, const Tables& tb,
                           const std::vector<float>& g, std::vector<float>& w_out, std::vector<float>& m_out) {
    const float lr = 0.1f, eps = 0.1f;
    w_out.assign(g.size(), 0.0f);
    m_out.assign(opt == Opt::rowwise_adagrad ? R.U() : (opt == Opt::adagrad ? g.size() : 0), 0.0f);
    for (int64_t u = 0; u < R.U(); u++) {
        const int t = R.table[u], D = in.D(t);
        const int64_t wrow = in.weights_offsets[t] + R.row[u] * D, c = R.col[u];
        float mult = lr;
        if (opt == Opt::rowwise_adagrad) {
            float lanes[32] = {};
            for (int d = 0; d < D; d++) lanes[(d / 4) % 32] += g[c + d] * g[c + d];
            for (int off = 16; off > 0; off /= 2) {
                float nxt[32];
                for (int l = 0; l < 32; l++) nxt[l] = lanes[l] + lanes[l ^ off];
                memcpy(lanes, nxt, sizeof lanes);
            }
            const float mn = tb.m(R.linear[u]) + lanes[0] / (float)D;
            mult = lr / (sqrtf(mn) + eps);
            m_out[u] = mn;
        }
        for (int d = 0; d < D; d++) {
            const float gd = g[c + d], w = tb.w(wrow + d);
            switch (opt) {
                case Opt::dense: w_out[c + d] = gd; break;
                case Opt::sgd: w_out[c + d] = w - lr * gd; break;
                case Opt::rowwise_adagrad: w_out[c + d] = w - mult * gd; break;
                case Opt::adagrad: {
                    const float m = tb.m(wrow + d) + gd * gd;
                    m_out[c + d] = m;
                    w_out[c + d] = w - lr * gd / (sqrtf(m) + eps);
                    break;
                }
            }
        }
    }
}

// how many elements of the emulated result break the reference's tolerance
static int64_t count_out_of_tolerance(const EmbeddingBagBackwardReference& ref, Opt opt, const std::vector<float>& w,
                                      const std::vector<float>& m, double* worst_ratio) {
    int64_t bad = 0;
    double worst = 0.0;
    auto cmp = [&](const std::vector<float>& got, const std::vector<float>& want, const std::vector<float>& tol) {
        for (size_t i = 0; i < got.size(); i++) {
            const double e = std::fabs((double)got[i] - want[i]);
            worst = std::max(worst, e / tol[i]);
            bad += e > tol[i];
        }
    };
    if (opt == Opt::dense) cmp(w, ref.grad, ref.grad_tol);
    else cmp(w, ref.w, ref.w_tol);
    if (!m.empty()) cmp(m, ref.m, ref.m_tol);
    if (worst_ratio) *worst_ratio = worst;
    return bad;
}

static void test_orders_within_tolerance(const std::string& name, const EmbeddingBagConfig& cfg, uint64_t seed);

// ---------------------------------------------------------------------------------------------
// 8. half weights: Philox against its known answers, stochastic rounding unbiased, nearest rounding losing
// small updates, and the check's tolerance for half weights (bit-exact where the fp32 bound cannot change the
// rounding, one ulp elsewhere) holding for every version's fp32 order and catching wrong random bits

static const EmbeddingBagWeights kHalves[] = {EmbeddingBagWeights::fp16, EmbeddingBagWeights::bf16};

// Random123's known-answer vectors for Philox4x32-10 (counter, key -> output)
static void test_philox_kat() {
    struct Kat { uint32_t ctr[4], key[2], out[4]; };
    const Kat kats[] = {
        {{0u, 0u, 0u, 0u}, {0u, 0u}, {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}},
        {{~0u, ~0u, ~0u, ~0u}, {~0u, ~0u}, {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}},
        {{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u}, {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}},
    };
    bool ok = true;
    std::string why;
    for (const Kat& k : kats) {
        uint32_t out[4];
        embedding_bag_philox_host(k.ctr, k.key, out);
        for (int i = 0; i < 4; i++)
            if (out[i] != k.out[i] && ok) { ok = false; why = fmt("counter %08x...: word %d is %08x, expected %08x", k.ctr[0], i, out[i], k.out[i]); }
    }
    report(ok, "host Philox4x32-10 matches Random123's three known-answer vectors", why);
}

// The mean of K stochastic roundings of v (the GPU's 16-bit Philox words of K columns) must be within 5 sigma
// of v, sigma = ulp * sqrt(q (1 - q) / K) for the rounding-up probability q; also every rounding is one of
// v's two neighbours, and nearest rounding of the same v is the nearer one
static void test_rounding_unbiased() {
    const int K = 200000;
    const float values[] = {1.0f + 0x1.0p-12f, 1.0f + 0.3f * 0x1.0p-7f, -3.14159265f, 0.1f, -1e-3f, 1234.567f, 6.1e-5f, 3.0e-7f, -2.5e-6f};
    bool ok = true;
    std::string why;
    int checked = 0;
    for (EmbeddingBagWeights wt : kHalves) {
        for (float v : values) {
            const uint16_t lo = embedding_bag_half_bits(v, wt, true);
            const double flo = embedding_bag_half_to_float(lo, wt), fhi = embedding_bag_half_to_float((uint16_t)(lo + 1), wt);
            const double ulp = fhi - flo, q = ((double)v - flo) / ulp;
            double sum = 0.0;
            bool neighbours = true;
            for (int i = 0; i < K; i++) {   // the GPU's words: 16 bits of a Philox call per weight (rows of 1024 columns)
                const uint32_t r = embedding_bag_backward_round_word_host(12345, 7, i >> 10, i & 1023);
                const double x = embedding_bag_half_to_float(embedding_bag_round_half(v, wt, true, r), wt);
                neighbours = neighbours && (x == flo || x == fhi);
                sum += x;
            }
            const double mean = sum / K, sigma = std::fabs(ulp) * std::sqrt(q * (1.0 - q) / K);
            const double nearest = embedding_bag_half_to_float(embedding_bag_round_half(v, wt, false, 0u), wt);
            const bool near_ok = std::fabs(nearest - v) <= std::fabs(ulp) / 2;
            checked++;
            if ((!neighbours || std::fabs(mean - v) > 5.0 * sigma + 1e-12 * std::fabs(v) || !near_ok) && ok) {
                ok = false;
                why = fmt("%s, v = %.9g: mean %.9g (|mean - v| = %.3g, 5 sigma = %.3g), neighbours %d, nearest %.9g",
                          EMBEDDING_BAG_WEIGHTS_NAMES[(int)wt], v, mean, std::fabs(mean - v), 5.0 * sigma, neighbours, nearest);
            }
        }
    }
    report(ok, fmt("stochastic rounding is unbiased: %d values x fp16/bf16, the mean of %d roundings within 5 sigma", checked, K), why);
}

// The integer rounding (embedding_bag_round_half: the GPU's path) decides exactly as the division form for
// every value and random word: fp32 bit patterns spread over every exponent and sign (the fp16 and bf16
// normal and subnormal ranges, their largest finite values and past them, zeros, infinities, NaN), and words
// at the decision's edges (0, all ones, the top bits just below and above the dropped bits) and from Philox
static void test_rounding_integer_path() {
    std::vector<float> vs = {0.0f, -0.0f, 65504.0f, -65504.0f, 65505.0f, 65519.0f, 65520.0f, 0x1.0p-14f, 0x1.0p-14f * (1 - 0x1.0p-20f),
                             0x1.0p-24f, 0x1.0p-25f, 3.0e38f, 0x1.fep127f, 0x1.ffp127f, INFINITY, -INFINITY, NAN, 1e-40f, -1e-45f};
    Rng rng(2024);
    for (int i = 0; i < 200000; i++) {
        const uint32_t b = (uint32_t)rng.randint(0, (int64_t)1 << 32);
        float v;
        memcpy(&v, &b, 4);
        vs.push_back(v);
    }
    bool ok = true;
    std::string why;
    int64_t n = 0;
    for (EmbeddingBagWeights wt : kHalves) {
        for (size_t i = 0; i < vs.size(); i++) {
            const uint32_t b = embedding_bag_float_bits(vs[i]);
            uint32_t r[4];
            embedding_bag_round_bits_host(77, 3, (int64_t)i, r);
            const uint32_t words[] = {0u, ~0u, r[0], r[1], (b & 0xFFFFu) << 16, ((b & 0xFFFFu) << 16) - 1, (b & 0x1FFFu) << 19,
                                      ((b & 0x1FFFu) << 19) - 1, ((b & 0x1FFFu) << 19) + (1u << 18)};
            for (uint32_t w : words) {
                for (bool st : {false, true}) {
                    const uint16_t got = embedding_bag_round_half(vs[i], wt, st, w), want = embedding_bag_round_half_by_division(vs[i], wt, st, w);
                    n++;
                    if (got != want && ok) {
                        ok = false;
                        why = fmt("%s, v = %a, word %08x, %s: integer %04x, division %04x", EMBEDDING_BAG_WEIGHTS_NAMES[(int)wt], vs[i], w,
                                  st ? "stochastic" : "nearest", got, want);
                    }
                }
            }
        }
    }
    report(ok, fmt("the integer rounding decides as the division form: %lld (value, word) pairs, fp16 and bf16", (long long)n), why);
}

// SGD on bf16 weights at 1.0 (ulp 2^-7) with updates of +0.003 (below half an ulp, 0.0039), 100 steps, over
// 4096 columns: rounded to nearest every weight stays at 1.0; stochastically the mean over the columns is
// within 5 sigma of 1.3 (each step unbiased; its variance at most ulp^2 / 4 per column)
static void test_small_updates() {
    const int D = 4096, steps = 100;
    const double lr = 0.01, g = -0.3;
    double mean[2] = {0.0, 0.0};
    bool nearest_stuck = true;
    for (int st = 0; st < 2; st++) {
        EmbeddingBagBackwardParams p;
        p.opt = Opt::sgd; p.lr = lr; p.weights = EmbeddingBagWeights::bf16; p.stochastic = st == 1; p.seed = 99;
        std::vector<double> gv(D, g), A(D, std::fabs(g));
        std::vector<float> w(D, 1.0f), w_out(D), w_tol(D);
        for (int k = 0; k < steps; k++) {
            p.step = (uint32_t)k;
            embedding_bag_backward_apply_row(p, D, 1, gv.data(), A.data(), w.data(), 0.0f, nullptr, w_out.data(), w_tol.data(), nullptr, nullptr,
                                             nullptr, nullptr, 0);
            w = w_out;
        }
        for (int d = 0; d < D; d++) {
            mean[st] += w[d] / D;
            if (st == 0) nearest_stuck = nearest_stuck && w[d] == 1.0f;
        }
    }
    const double want = 1.0 + steps * lr * -g, five_sigma = 5.0 * std::sqrt(steps * 0x1.0p-14 / 4.0 / D);
    report(nearest_stuck && std::fabs(mean[1] - want) <= five_sigma,
           fmt("bf16 SGD, updates of 0.003 below half an ulp: nearest keeps 1.0, stochastic reaches %.4f (expected %.3f +- %.4f)", mean[1], want,
               five_sigma),
           fmt("nearest stuck at 1.0: %d; stochastic mean %.5f", nearest_stuck, mean[1]));
}

static EmbeddingBagBackwardReference run_reference_half(const EmbeddingBagBackwardInputs& in, Opt opt, const Tables& tb, bool stochastic,
                                                        uint64_t round_seed) {
    EmbeddingBagBackwardParams p;
    p.opt = opt; p.weights = tb.wt; p.stochastic = stochastic; p.seed = round_seed;
    return embedding_bag_backward_cpu(in, p, [&](int64_t e) { return tb.w(e); }, [&](int64_t i) { return tb.m(i); });
}

// the GPU's last step for half weights: its fp32 value rounded with the word of the element's row and column
static void emulate_round(const EmbeddingBagBackwardInputs& in, const EmbeddingBagBackwardRows& R, EmbeddingBagWeights wt, bool stochastic,
                          uint64_t round_seed, std::vector<float>& w) {
    for (int64_t u = 0; u < R.U(); u++) {
        const int t = R.table[u], D = in.D(t);
        for (int d = 0; d < D; d++) {
            const uint32_t r = embedding_bag_backward_round_word_host(round_seed, 1, R.linear[u], d);
            float& x = w[R.col[u] + d];
            x = embedding_bag_half_to_float(embedding_bag_round_half(x, wt, stochastic, r), wt);
        }
    }
}

static void test_half_orders(const std::string& name, const EmbeddingBagConfig& cfg, uint64_t seed) {
    EmbeddingBagBackwardInputs in = embedding_bag_backward_make_inputs(cfg, seed);
    const Order orders[] = {{1, 32, 1, 1}, {2, 32, 1, 0}, {3, 32, 16, 0}, {4, 32, 8, 0}, {6, 8, 8, 0}};
    bool ok = true, caught = true, deterministic = true;
    std::string why;
    int64_t exact = 0, total = 0;
    for (EmbeddingBagWeights wt : kHalves)
        for (int st = 0; st < 2; st++)
            for (Opt opt : {Opt::sgd, Opt::rowwise_adagrad, Opt::adagrad}) {
                Tables tb{seed + 31, wt};
                const auto ref = run_reference_half(in, opt, tb, st == 1, seed);
                const auto again = run_reference_half(in, opt, tb, st == 1, seed);
                deterministic = deterministic && again.w == ref.w && again.w_tol == ref.w_tol;
                for (float t : ref.w_tol) exact += t == 0.0f;
                total += (int64_t)ref.w_tol.size();
                const char* what = EMBEDDING_BAG_WEIGHTS_NAMES[(int)wt];
                for (const Order& o : orders) {
                    std::vector<float> w, m;
                    emulate_update(in, ref.rows, opt, tb, emulate_grads(in, ref.rows, o), w, m);
                    std::vector<float> w_bad = w;
                    emulate_round(in, ref.rows, wt, st == 1, seed, w);
                    const int64_t bad = count_out_of_tolerance(ref, opt, w, m, nullptr);
                    if (bad && ok) {
                        ok = false;
                        why = fmt("%s %s %s, version %d order: %lld elements out of tolerance", what, st ? "stochastic" : "nearest",
                                  EMBEDDING_BAG_BACKWARD_OPT_NAMES[(int)opt], o.version, (long long)bad);
                    }
                    if (st == 1) {   // the words of another seed must be caught
                        emulate_round(in, ref.rows, wt, true, seed + 1, w_bad);
                        if (count_out_of_tolerance(ref, opt, w_bad, m, nullptr) == 0 && caught) {
                            caught = false;
                            why += fmt("; %s %s: rounding with another seed's bits went unnoticed", what, EMBEDDING_BAG_BACKWARD_OPT_NAMES[(int)opt]);
                        }
                    }
                }
            }
    report(ok && caught && deterministic,
           fmt("%s, fp16/bf16 weights: every version's order rounded within the tolerance, %.1f%% of the elements bit-exact; another seed's "
               "bits caught; the reference deterministic",
               name.c_str(), 100.0 * exact / std::max<int64_t>(total, 1)),
           why + (deterministic ? "" : "; the reference gave different bits for one seed"));
}

static void test_orders_within_tolerance(const std::string& name, const EmbeddingBagConfig& cfg, uint64_t seed) {
    EmbeddingBagBackwardInputs in = embedding_bag_backward_make_inputs(cfg, seed);
    Tables tb{seed + 99};
    const Order orders[] = {{1, 32, 1, 1}, {1, 32, 1, 2}, {2, 32, 1, 0}, {3, 32, 2, 0}, {3, 32, 16, 0},
                            {4, 32, 8, 0}, {6, 16, 8, 0}, {6, 8, 8, 0}};
    bool ok = true;
    std::string why;
    double worst_all = 0.0;
    for (Opt opt : kOpts) {
        auto ref = run_reference(in, opt, tb);
        for (const Order& o : orders) {
            std::vector<float> w, m;
            emulate_update(in, ref.rows, opt, tb, emulate_grads(in, ref.rows, o), w, m);
            double worst = 0.0;
            const int64_t bad = count_out_of_tolerance(ref, opt, w, m, &worst);
            worst_all = std::max(worst_all, worst);
            if (bad && ok) {
                ok = false;
                why = fmt("%s, version %d order (C=%lld W=%d): %lld elements out of tolerance (worst err/tol %.2f)",
                          EMBEDDING_BAG_BACKWARD_OPT_NAMES[(int)opt], o.version, (long long)o.C, o.W, (long long)bad, worst);
            }
        }
    }
    report(ok, fmt("%s: every version's fp32 order within the tolerance (worst err/tol %.3f)", name.c_str(), worst_all), why);
}

// one lookup dropped from the longest run: the tolerance must flag it
static void test_dropped_lookup(const std::string& name, const EmbeddingBagConfig& cfg, uint64_t seed) {
    EmbeddingBagBackwardInputs in = embedding_bag_backward_make_inputs(cfg, seed);
    Tables tb{seed + 5};
    bool ok = true;
    std::string why;
    for (Opt opt : kOpts) {
        auto ref = run_reference(in, opt, tb);
        int64_t longest = 0;
        for (int64_t u = 1; u < ref.rows.U(); u++) if (ref.rows.count[u] > ref.rows.count[longest]) longest = u;
        std::vector<float> w, m;
        emulate_update(in, ref.rows, opt, tb, emulate_grads(in, ref.rows, {4, 32, 8, 0}, longest), w, m);
        const int64_t bad = count_out_of_tolerance(ref, opt, w, m, nullptr);
        if (bad == 0) {
            ok = false;
            why = fmt("%s: dropping one of %lld lookups went unnoticed", EMBEDDING_BAG_BACKWARD_OPT_NAMES[(int)opt], (long long)ref.rows.count[longest]);
        }
    }
    report(ok, name, why);
}

// ---------------------------------------------------------------------------------------------
// 6. bytes, key bits, inputs

static void test_bytes_and_bits() {
    EmbeddingBagConfig c;   // FBGEMM's default size
    EmbeddingBagBackwardInputs in;
    in.T = c.T; in.B = c.B;
    for (int t = 0; t <= c.T; t++) in.D_offsets.push_back(t * c.D);
    const double rw = embedding_bag_backward_fbgemm_rw(in, c.L);
    report(std::fabs(rw - 176160768.0) < 1.0, "FBGEMM's rw at the default size is 176.2 MB", fmt("%.0f", rw));
    // our bytes on the hand input: N = 3, 3 offsets, grad_output 8 floats, two rows of D = 4 (fp32)
    EmbeddingBagBackwardInputs h = hand_inputs(false, false);
    auto rows = embedding_bag_backward_touched_rows(h);
    const double base = 8 * 3 + 8 * 3 + 4 * 8;
    const double want[] = {base + 2 * 16, base + 2 * 32, base + 2 * (32 + 8), base + 2 * (32 + 32)};
    bool ok = true;
    for (int i = 0; i < 4; i++) ok &= embedding_bag_backward_bytes(h, rows, (Opt)i) == want[i];
    EmbeddingBagBackwardInputs hw = hand_inputs(false, true);
    ok &= embedding_bag_backward_bytes(hw, rows, Opt::sgd) == want[1] + 12;
    report(ok, "bytes formula on the hand input (every optimizer, weighted)");
    ok = embedding_bag_backward_key_bits(1) == 1 && embedding_bag_backward_key_bits(2) == 1 && embedding_bag_backward_key_bits(3) == 2 &&
         embedding_bag_backward_key_bits(3200000) == 22 && embedding_bag_backward_key_bits((int64_t)1 << 32) == 32 &&
         embedding_bag_backward_key_bits(((int64_t)1 << 32) + 1) == 33 && embedding_bag_backward_key_bits(11000000) == 24;
    report(ok, "key bits: the sort looks at exactly the bits of the largest row id");
    ok = embedding_bag_backward_vpl(4) == 1 && embedding_bag_backward_vpl(128) == 1 && embedding_bag_backward_vpl(132) == 2 &&
         embedding_bag_backward_vpl(260) == 4 && embedding_bag_backward_vpl(1024) == 8 && embedding_bag_backward_group(4) == 8 &&
         embedding_bag_backward_group(36) == 16 && embedding_bag_backward_group(64) == 16 && embedding_bag_backward_group(68) == 32;
    report(ok, "vectors per lane and version 6's lanes per row");
    ok = embedding_bag_backward_skip_reason(6, 128, 100).find("> 64") != std::string::npos &&
         embedding_bag_backward_skip_reason(5, 128, 100).empty() && embedding_bag_backward_skip_reason(1, 2048, 100).empty() &&
         embedding_bag_backward_skip_reason(2, 2048, 100).find("1024") != std::string::npos &&
         embedding_bag_backward_skip_reason(4, 128, ((int64_t)1 << 32) + 1).find("32-bit") != std::string::npos;
    report(ok, "skip reasons (D > 1024, 2^32 rows, version 6 above D = 64)");
}

static void test_inputs() {
    EmbeddingBagConfig c = small_config(3, 30, 8, 6, 4, 0.0);
    c.one_row = true;
    auto in = embedding_bag_backward_make_inputs(c, 1);
    bool ok = (int64_t)in.indices.size() == 3 * 6 * 4;
    for (int t = 0; t < 3; t++)
        for (int64_t l = in.offsets[t * 6]; l < in.offsets[(t + 1) * 6]; l++) ok &= in.indices[l] == in.indices[in.offsets[t * 6]];
    auto rows = embedding_bag_backward_touched_rows(in);
    ok &= rows.U() == 3 && rows.max_count == 24;
    report(ok, "--one-row: every lookup of a table on one row (one run of B*L per table)");
    c.one_row = false;
    c.empty_frac = 1.0;
    in = embedding_bag_backward_make_inputs(c, 1);
    ok = in.indices.empty() && in.offsets.size() == 19 && embedding_bag_backward_validate(in).empty();
    auto ref = run_reference(in, Opt::rowwise_adagrad, Tables{1});
    ok &= ref.rows.U() == 0 && ref.w.empty();
    report(ok, "--empty-frac 1: all bags empty, nothing to update");
    c.empty_frac = 0.0;
    c.Ds = {4, 12, 132, 260};
    c.T = 5;
    in = embedding_bag_backward_make_inputs(c, 2);
    ok = in.D(0) == 4 && in.D(3) == 260 && in.D(4) == 4 && in.total_D() == 4 + 12 + 132 + 260 + 4 && in.max_D() == 260 &&
         embedding_bag_backward_validate(in).empty();
    report(ok, "--Ds cycles over the tables");
}

// ---------------------------------------------------------------------------------------------
// 7. forward/backward consistency: for SUM (and any linear pooling), <fwd(W), G> = <W, dense-grad(G)>

static void test_adjoint(const std::string& name, const EmbeddingBagConfig& cfg, uint64_t seed) {
    EmbeddingBagBackwardInputs in = embedding_bag_backward_make_inputs(cfg, seed);
    Tables tb{seed + 3};
    auto ref = run_reference(in, Opt::dense, tb);
    const int total_D = in.total_D();
    // <W, dense-grad>: the dense gradient is zero off the looked-up rows
    double rhs = 0.0, scale = 0.0;
    for (int64_t u = 0; u < ref.rows.U(); u++) {
        const int t = ref.rows.table[u], D = in.D(t);
        for (int d = 0; d < D; d++) {
            const double w = tb.w(in.weights_offsets[t] + ref.rows.row[u] * D + d);
            rhs += w * ref.grad[ref.rows.col[u] + d];
            scale += std::fabs(w * ref.grad[ref.rows.col[u] + d]);
        }
    }
    // <fwd(W), G> with a forward loop of this test
    std::vector<double> out((size_t)in.B * total_D, 0.0);
    for (int t = 0; t < in.T; t++)
        for (int b = 0; b < in.B; b++) {
            const int64_t bag = (int64_t)t * in.B + b, s0 = in.offsets[bag], s1 = in.offsets[bag + 1];
            for (int64_t l = s0; l < s1; l++) {
                const double s = embedding_bag_backward_scale(in, bag, l);
                for (int d = 0; d < in.D(t); d++)
                    out[(size_t)b * total_D + in.D_offsets[t] + d] += s * tb.w(in.weights_offsets[t] + in.indices[l] * in.D(t) + d);
            }
        }
    double lhs = 0.0;
    for (size_t i = 0; i < out.size(); i++) lhs += out[i] * in.grad_output[i];
    bool ok = std::fabs(lhs - rhs) <= 1e-6 * scale + 1e-9;
    std::string why = fmt("own forward loop: <fwd(W),G> = %.12g, <W,grad> = %.12g", lhs, rhs);
    std::string with = "own forward loop";
#if HAVE_FORWARD_OP
    {
        // the forward op file's CPU reference on the same inputs (the shared EmbeddingBagInputs part of the
        // backward's; its weights are floatX, fp32 here)
        const EmbeddingBagInputs& f = in;
        std::vector<floatX> W((size_t)in.num_weights);
        for (int64_t e = 0; e < in.num_weights; e++) W[e] = from_float<floatX>(tb.w(e));
        std::vector<float> fo((size_t)in.B * total_D);
        embedding_bag_forward_cpu(fo.data(), f, W.data());
        double lhs2 = 0.0, s2 = 0.0;
        for (size_t i = 0; i < fo.size(); i++) { lhs2 += (double)fo[i] * in.grad_output[i]; s2 += std::fabs((double)fo[i] * in.grad_output[i]); }
        const bool ok2 = std::fabs(lhs2 - rhs) <= 1e-6 * (scale + s2) + 1e-9;
        if (!ok2) why = fmt("embedding_bag_forward_cpu: <fwd(W),G> = %.12g, <W,grad> = %.12g", lhs2, rhs);
        ok = ok && ok2;
        with = "own forward loop and embedding_bag_forward_cpu";
    }
#endif
    report(ok, name + " (" + with + ")", why);
}

// replay: the backward's dump (the shared inputs and grad_output) read back by --load, bit for bit; the
// same bags as the forward's dump of the same seed (both ops share embedding_bag.h)
// the inputs of (c, seed) dumped into build/tests/fixtures/<name> and read back as --load does
static std::pair<EmbeddingBagBackwardInputs, EmbeddingBagBackwardInputs> dump_then_load(const std::string& name, const EmbeddingBagConfig& c,
                                                                                         uint64_t seed) {
    const std::string root = "build/tests/fixtures", dir = root + "/" + name;
    make_dir("build"); make_dir("build/tests"); make_dir(root); make_dir(dir);
    const EmbeddingBagBackwardInputs in = embedding_bag_backward_make_inputs(c, seed);
    embedding_bag_backward_dump(dir, c, in);
    Cli cli("embedding_bag_backward", "", 8, 8);
    cli.load_dir = dir;
    EmbeddingBagConfig c2;
    EmbeddingBagFlags flags;
    return {in, embedding_bag_backward_inputs(cli, c2, flags)};
}

static void test_replay() {
    EmbeddingBagConfig c = small_config(3, 40, 8, 9, 5, 1.15);
    c.weighted = true; c.empty_frac = 0.2; c.Ds = {4, 12, 132}; c.Es = {50, 7, 33}; c.mean = true;
    const auto [in, back] = dump_then_load("bag_ok", c, 17);
    const bool go = back.grad_output.size() == in.grad_output.size() &&
                    memcmp(back.grad_output.data(), in.grad_output.data(), in.grad_output.size() * sizeof(float)) == 0;
    report(embedding_bag_identical(in, back) && go && embedding_bag_identical(in, embedding_bag_make_inputs(c, 17)),
           "--dump then --load: the backward's inputs and grad_output come back bit for bit; the bags are the forward's");
}

// --pooling none: with every lookup's gradient row set to its bag's pooled gradient slice, the nobag
// backward is the pooled SUM backward (the same terms summed in the same order: bit for bit), for every
// optimizer; and a nobag --dump comes back through --load with its N x D gradient
static void test_nobag() {
    struct Cfg { const char* name; EmbeddingBagConfig c; };
    std::vector<Cfg> cfgs;
    cfgs.push_back({"uniform, 3 tables of D 12", small_config(3, 57, 12, 9, 5, 0.0)});
    {
        EmbeddingBagConfig c = small_config(4, 300, 36, 40, 7, 1.15);
        c.empty_frac = 0.3; c.Es = {300, 7, 1000, 50};
        cfgs.push_back({"Zipf, 4 tables of D 36 and several E, empty bags", c});
    }
    {
        EmbeddingBagConfig c = small_config(2, 20, 260, 25, 9, 0.0);
        c.one_row = true;
        cfgs.push_back({"one row, D 260", c});
    }
    for (auto& k : cfgs)
        for (uint64_t seed : {1, 2, 3}) {
            EmbeddingBagConfig cn = k.c;
            cn.nobag = true;
            const EmbeddingBagBackwardInputs pooled = embedding_bag_backward_make_inputs(k.c, seed);
            EmbeddingBagBackwardInputs in = embedding_bag_backward_make_inputs(cn, seed);
            const int D = in.D(0);
            bool ok = in.grad_output.size() == (size_t)(in.N() * D) && embedding_bag_backward_validate(in).empty() && in.indices == pooled.indices;
            for (int t = 0; t < in.T; t++)                   // the broadcast: row l = its bag's slice
                for (int b = 0; b < in.B; b++)
                    for (int64_t l = in.offsets[(int64_t)t * in.B + b]; l < in.offsets[(int64_t)t * in.B + b + 1]; l++)
                        for (int d = 0; d < D; d++)
                            in.grad_output[(size_t)(l * D + d)] = pooled.grad_output[(size_t)b * pooled.total_D() + pooled.D_offsets[t] + d];
            Tables tb{seed + 31};
            for (Opt opt : kOpts) {
                const auto a = run_reference(in, opt, tb), b = run_reference(pooled, opt, tb);
                ok = ok && a.rows.linear == b.rows.linear && a.w == b.w && a.w_tol == b.w_tol && a.m == b.m && a.grad == b.grad &&
                     (opt == Opt::dense ? !a.grad.empty() : !a.w.empty());
            }
            report(ok, fmt("nobag reference = pooled SUM backward with the gradient broadcast per lookup: %s, seed %d, every optimizer", k.name,
                           (int)seed));
        }
    // the versions' fp32 orders on nobag gradients (one row per lookup, long runs)
    EmbeddingBagConfig c = small_config(2, 1000, 128, 512, 20, 0.0);
    c.one_row = true; c.nobag = true;
    test_orders_within_tolerance("nobag, one row, 2 runs of 10,240, D=128", c, 11);
    test_dropped_lookup("nobag: tolerance catches one lookup dropped from a run of 10,240", c, 11);
    EmbeddingBagConfig z = small_config(4, 2000, 64, 256, 20, 1.15);
    z.nobag = true;
    test_orders_within_tolerance("nobag, Zipf 1.15, D=64", z, 12);
    // bytes: the gradient is N x D
    EmbeddingBagConfig d;
    d.nobag = true;
    EmbeddingBagBackwardInputs dn;
    dn.T = d.T; dn.B = d.B; dn.nobag = true;
    for (int t = 0; t <= d.T; t++) dn.D_offsets.push_back(t * d.D);
    report(embedding_bag_backward_fbgemm_rw(dn, d.L) == 335544320.0, "FBGEMM's rw at the default size, nobag: 335.5 MB (the gradient L times larger)",
           fmt("%.0f", embedding_bag_backward_fbgemm_rw(dn, d.L)));
    EmbeddingBagConfig h = small_config(2, 30, 8, 3, 2, 0.0);
    h.nobag = true;
    const EmbeddingBagBackwardInputs hn = embedding_bag_backward_make_inputs(h, 4);
    const auto rows = embedding_bag_backward_touched_rows(hn);
    const double want = 8.0 * 12 + 8.0 * 7 + 4.0 * 12 * 8 + (double)rows.U() * 2 * 32;
    report(embedding_bag_backward_bytes(hn, rows, Opt::sgd) == want, fmt("bytes, nobag: 12 lookups, gradient 12 x 8, %lld rows (sgd)", (long long)rows.U()),
           fmt("formula %.0f, hand %.0f", embedding_bag_backward_bytes(hn, rows, Opt::sgd), want));
    // replay
    EmbeddingBagConfig r = small_config(3, 40, 12, 9, 5, 1.15);
    r.nobag = true; r.empty_frac = 0.2;
    const auto [in, back] = dump_then_load("bag_nobag_backward", r, 19);
    report(embedding_bag_identical(in, back) && back.nobag && back.grad_output == in.grad_output && back.grad_output.size() == (size_t)(in.N() * 12),
           "--dump then --load, nobag: the inputs and the N x D gradient come back bit for bit");
}

int main() {
    test_nobag();
    test_replay();
    // 1. reference vs dense scatter
    struct Cfg { const char* name; EmbeddingBagConfig c; uint64_t seed; };
    std::vector<Cfg> cfgs;
    cfgs.push_back({"uniform T=3 E=57 D=12 B=9 L=5", small_config(3, 57, 12, 9, 5, 0.0), 1});
    cfgs.push_back({"Zipf 1.15 T=2 E=300 D=8 B=40 L=7", small_config(2, 300, 8, 40, 7, 1.15), 2});
    {
        EmbeddingBagConfig c = small_config(6, 64, 4, 11, 3, 0.0);
        c.mixed_dims = true; c.weighted = true; c.mean = true; c.empty_frac = 0.3;
        cfgs.push_back({"mixed dims, weighted, mean, 30% empty bags", c, 3});
    }
    {
        EmbeddingBagConfig c = small_config(2, 20, 16, 25, 9, 0.0);
        c.one_row = true; c.weighted = true;
        cfgs.push_back({"one row, weighted", c, 4});
    }
    {
        EmbeddingBagConfig c = small_config(4, 13, 8, 7, 1, 0.0);
        c.Ds = {4, 12, 132, 260}; c.mean = true;
        cfgs.push_back({"bags of length 1, D 4,12,132,260, mean", c, 5});
    }
    for (auto& k : cfgs)
        for (Opt opt : kOpts)
            test_against_dense_scatter(std::string("reference vs dense scatter, ") + k.name + ", " + EMBEDDING_BAG_BACKWARD_OPT_NAMES[(int)opt], k.c,
                                       k.seed, opt);
    // 2. hand-computed rows, untouched rows
    test_hand_rows();
    test_untouched_rows();
    // 3. validator
    test_validator();
    // 4. the chunk plan
    test_plan();
    // 5. tolerance: every version's fp32 order passes, a dropped lookup fails
    {
        EmbeddingBagConfig c = small_config(2, 1000, 128, 512, 20, 0.0);
        c.one_row = true;
        test_orders_within_tolerance("one row, 2 runs of 10,240, D=128", c, 7);
        test_dropped_lookup("tolerance catches one lookup dropped from a run of 10,240", c, 7);
        EmbeddingBagConfig z = small_config(4, 2000, 64, 256, 20, 1.15);
        z.weighted = true; z.mean = true;
        test_orders_within_tolerance("Zipf 1.15, weighted, mean, D=64", z, 8);
        test_dropped_lookup("tolerance catches one lookup dropped from the hottest Zipf row", z, 8);
        EmbeddingBagConfig m = small_config(5, 97, 4, 33, 13, 0.0);
        m.mixed_dims = true; m.weighted = true;
        test_orders_within_tolerance("uniform, mixed dims, weighted", m, 9);
    }
    // 8. half weights
    test_philox_kat();
    test_rounding_unbiased();
    test_rounding_integer_path();
    test_small_updates();
    {
        EmbeddingBagConfig c = small_config(3, 500, 36, 64, 9, 1.15);
        c.weighted = true; c.mean = true;
        test_half_orders("Zipf 1.15, weighted, mean, D=36", c, 41);
        EmbeddingBagConfig o = small_config(2, 1000, 128, 128, 20, 0.0);
        o.one_row = true;
        test_half_orders("one row, 2 runs of 2,560, D=128", o, 42);
    }
    // 6. bytes, bits, inputs
    test_bytes_and_bits();
    test_inputs();
    // 7. adjoint
    test_adjoint("forward/backward consistency, uniform SUM", small_config(3, 50, 12, 10, 6, 0.0), 21);
    {
        EmbeddingBagConfig c = small_config(5, 40, 8, 12, 5, 1.15);
        c.mixed_dims = true; c.weighted = true; c.mean = true; c.empty_frac = 0.25;
        test_adjoint("forward/backward consistency, Zipf, mixed dims, weighted MEAN, empty bags", c, 22);
    }
    return test_summary();
}
