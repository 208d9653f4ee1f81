// CPU tests of tt_embedding_forward (no GPU): the chain-product reference against the spec's explicit sum
// formula (an independent implementation, here), the spec's worked example computed by hand, T = 2..6,
// the shape and bag validators' messages, the FLOP/byte formulas at FBTT's default, and the host-callable
// pieces of the GPU versions run on the CPU: version 1's odometer sum, the warp step engine of versions 3
// and 4 (a warp emulated lane by lane), version 2's pointer arrays through a column-major reference GEMM
// with the launcher's exact cuBLAS arguments, and version 4's sort key / slice decode; version 6 end to end
// (its planning kernel's and chain kernel's phases thread by thread, rows bitwise against version 3's engine);
// version 7's lane split and shuffle tree on whole bags, and its shape filter; version 10's tensor-core tile
// (fragment layouts, 3xTF32 split, step 2 on the accumulators, the quad's writes) lane by lane, and its filter;
// version 11's scan mask.
#define NO_MAIN
#include "../dev/cuda/tt_embedding_forward.cu"

static int failures = 0;
static void report(bool ok, const std::string& name, const std::string& why = "") {
    printf("%s %s%s%s\n", ok ? "PASS" : "FAIL", name.c_str(), ok ? "" : ": ", ok ? "" : why.c_str());
    if (!ok) failures++;
}

// a problem: shape and host cores
struct Problem {
    TtEmbeddingForwardShape s;
    std::vector<std::vector<float>> cores;
    std::vector<const float*> ptrs;
    TtEmbeddingForwardCores c = {};
    std::string name;
};

static bool make_problem(Problem& P, const std::vector<int>& p, const std::vector<int>& q, const std::vector<int>& ranks,
                         int tables, int B, int L, Rng& rng) {
    std::string why = tt_embedding_forward_make_shape(P.s, p, q, ranks, 0, 0, tables, B, L, 0.0);
    if (!why.empty()) { report(false, "make_shape", why); return false; }
    P.cores.assign(P.s.T, {});
    P.ptrs.assign(P.s.T, nullptr);
    for (int t = 0; t < P.s.T; t++) {
        const float a = sqrtf(3.0f / (float)P.s.R[t + 1]);
        P.cores[t] = make_random_floats((size_t)tables * p[t] * P.s.slice[t], rng, -a, a);
        P.ptrs[t] = P.cores[t].data();
        P.c.c[t] = P.cores[t].data();
    }
    char buf[64];
    P.name = "T" + std::to_string(P.s.T) + ",p";
    for (int t = 0; t < P.s.T; t++) P.name += (t ? "x" : "") + std::to_string(p[t]);
    P.name += ",q";
    for (int t = 0; t < P.s.T; t++) P.name += (t ? "x" : "") + std::to_string(q[t]);
    P.name += ",r";
    for (int t = 0; t + 1 < P.s.T; t++) P.name += (t ? "x" : "") + std::to_string(ranks[t]);
    snprintf(buf, sizeof buf, ",nt%d", tables);
    P.name += buf;
    return true;
}

// ---- the independent formulation: the spec's explicit sum, written from the spec's formulas only

// element (k, a, k') of slice i of core t of table tbl: [tables, p_t, R_t q_t R_{t+1}], (k * q_t + a) * R_{t+1} + k'
static double core_elem(const Problem& P, int t, int tbl, int64_t i, int k, int a, int k2) {
    const TtEmbeddingForwardShape& s = P.s;
    const int64_t per_row = (int64_t)s.R[t] * s.q[t] * s.R[t + 1];
    return P.cores[t][(size_t)(((int64_t)tbl * s.p[t] + i) * per_row + ((int64_t)k * s.q[t] + a) * s.R[t + 1] + k2)];
}

// Emb[idx][d] = sum_{k_1..k_{T-1}} G_0[i_0][0,a_0,k_1] G_1[i_1][k_1,a_1,k_2] ... G_{T-1}[i_{T-1}][k_{T-1},a_{T-1},0]
// (digits by repeated division from the least significant end, not through the op's strides)
static double explicit_element(const Problem& P, int tbl, int64_t idx, int d) {
    const TtEmbeddingForwardShape& s = P.s;
    const int T = s.T;
    int64_t i[6];
    int a[6];
    int64_t rem = idx;
    for (int t = T - 1; t >= 0; t--) { i[t] = rem % s.p[t]; rem /= s.p[t]; }
    int remd = d;
    for (int t = T - 1; t >= 0; t--) { a[t] = remd % s.q[t]; remd /= s.q[t]; }
    // recursion over the rank tuple
    std::function<double(int, int)> rec = [&](int t, int k_in) -> double {
        if (t == T - 1) return core_elem(P, t, tbl, i[t], k_in, a[t], 0);
        double sum = 0.0;
        for (int k = 0; k < s.R[t + 1]; k++) sum += core_elem(P, t, tbl, i[t], k_in, a[t], k) * rec(t + 1, k);
        return sum;
    };
    return rec(0, 0);
}

static bool close(double got, double want, double atol, double rtol) {
    return std::isfinite(got) && fabs(got - want) <= atol + rtol * fabs(want);
}

// ---- the GPU versions' host-callable pieces, run on the CPU

// versions 3/4: a warp's chain emulated lane by lane (lanes share nothing within a step), with the same
// ping-pong between two buffers as tt_embedding_forward_warp_chain; `g` = the T slice pointers
// Each buffer is exactly buf_pad[.] floats followed by a guard of NaNs; returns false when a step wrote past it.
static bool emulate_warp_chain(const TtEmbeddingForwardShape& s, const float* const* g, float* last, bool accumulate) {
    const int guard = 64;
    std::vector<float> buf0((size_t)s.buf_pad[0] + guard, NAN), buf1((size_t)s.buf_pad[1] + guard, NAN);
    const float* in = g[0];
    for (int t = 1; t < s.T; t++) {
        const bool is_last = t == s.T - 1;
        float* out = is_last ? last : ((t & 1) ? buf0.data() : buf1.data());
        for (int lane = 0; lane < 32; lane++) tt_embedding_forward_chain_step(s, t, out, in, g[t], is_last && accumulate, lane);
        in = out;
    }
    bool ok = true;
    for (int e = 0; e < guard; e++) ok = ok && std::isnan(buf0[s.buf_pad[0] + e]) && std::isnan(buf1[s.buf_pad[1] + e]);
    return ok;
}

// version 2: column-major C (rows x cols, ldc) = A (rows x inner, lda) . B (inner x cols, ldb), as cuBLAS N, N
static void colmajor_gemm(const TtEmbeddingForwardGemmArgs& g, const float* A, const float* B, float* C) {
    for (int j = 0; j < g.cols; j++)
        for (int i = 0; i < g.rows; i++) {
            float sum = 0.0f;
            for (int l = 0; l < g.inner; l++) sum += A[i + (int64_t)l * g.lda] * B[l + (int64_t)j * g.ldb];
            C[i + (int64_t)j * g.ldc] = sum;
        }
}

// version 2 on a chunk of lookups (tbl_of[n], idx_of[n]): pointer arrays from the op's fill function, then
// every step's batched GEMM with the launcher's arguments; returns the last buffer ([N][D])
static std::vector<float> emulate_pipeline(const Problem& P, const std::vector<int>& tbl_of, const std::vector<int64_t>& idx_of) {
    const TtEmbeddingForwardShape& s = P.s;
    const int N = (int)idx_of.size();
    std::vector<std::vector<float>> tr(s.T - 1);
    TtEmbeddingForwardCores bufs = {};
    for (int t = 0; t + 1 < s.T; t++) {
        tr[t].assign((size_t)N * s.Q[t + 1] * s.R[t + 2], NAN);
        bufs.c[t] = tr[t].data();
    }
    std::vector<const void*> a((size_t)(s.T - 1) * N), b((size_t)(s.T - 1) * N);
    std::vector<void*> c((size_t)(s.T - 1) * N);
    for (int n = 0; n < N; n++) tt_embedding_forward_fill_pointers(a.data(), b.data(), c.data(), n, N, tbl_of[n], idx_of[n], P.c, s, bufs);
    for (int t = 0; t + 1 < s.T; t++) {
        const TtEmbeddingForwardGemmArgs g = tt_embedding_forward_gemm_args(s, t);
        for (int n = 0; n < N; n++)
            colmajor_gemm(g, (const float*)a[(size_t)t * N + n], (const float*)b[(size_t)t * N + n], (float*)c[(size_t)t * N + n]);
    }
    return tr[s.T - 2];
}

// version 1's per-element sum for (tbl, idx, d)
static float naive_element(const Problem& P, int tbl, int64_t idx, int d) {
    const TtEmbeddingForwardShape& s = P.s;
    int a[6];
    for (int t = s.T - 1, rem = d; t >= 0; t--) { a[t] = rem % s.q[t]; rem /= s.q[t]; }
    const float* g[6];
    int row_len[6];
    for (int t = 0; t < s.T; t++) {
        g[t] = tt_embedding_forward_slice_ptr(P.c, s, tbl, idx, t) + a[t] * s.R[t + 1];
        row_len[t] = s.q[t] * s.R[t + 1];
    }
    return tt_embedding_forward_explicit_sum(g, row_len, s.R, s.T);
}

// ---- tests

// The spec's worked example: p=[3,4,5], q=[2,2,2], inner ranks [2,3]; row 37 -> (1,3,2). The three slices
// it reads are set to small integers, every other core value to NaN (reading a wrong slice poisons the
// result). By hand:
//   G_0[1] (q_0 x R_1 = 2x2)       = [[1,2],[3,4]]
//   G_1[3] (R_1 x q_1 R_2 = 2x6)   = [[1,0,2, 0,1,1],[0,1,1, 2,0,-1]]   (columns (a_1, k_2), k_2 fastest)
//   tr0 = G_0[1] . G_1[3] (2x6)    = [[1,2,4, 4,1,-1],[3,4,10, 8,3,-1]]
//   as 4x3 (rows (a_0,a_1))        = [[1,2,4],[4,1,-1],[3,4,10],[8,3,-1]]
//   G_2[2] (R_2 x q_2 = 3x2)       = [[1,-1],[2,0],[0,3]]
//   out = tr0 (4x3) . G_2[2]       = [[5,11],[6,-7],[11,27],[14,-11]]  -> d = a_0*4 + a_1*2 + a_2
static void test_worked_example() {
    Problem P;
    Rng rng(1);
    if (!make_problem(P, {3, 4, 5}, {2, 2, 2}, {2, 3}, 1, 1, 1, rng)) return;
    const TtEmbeddingForwardShape& s = P.s;
    bool ok = s.stride[0] == 20 && s.stride[1] == 5 && s.stride[2] == 1 && s.slice[0] == 4 && s.slice[1] == 12 &&
              s.slice[2] == 6 && s.D == 8 && s.E == 60;
    report(ok, "worked example: strides [20,5,1], core shapes [1,3,4] [1,4,12] [1,5,6], D 8, E 60");
    const int i0 = tt_embedding_forward_digit(37, s.stride[0], s.p[0]), i1 = tt_embedding_forward_digit(37, s.stride[1], s.p[1]),
              i2 = tt_embedding_forward_digit(37, s.stride[2], s.p[2]);
    report(i0 == 1 && i1 == 3 && i2 == 2, "worked example: row 37 -> core indices (1,3,2)",
           std::to_string(i0) + "," + std::to_string(i1) + "," + std::to_string(i2));
    report(tt_embedding_forward_flops_per_lookup(s) == 2.0 * 2 * 2 * 6 + 2.0 * 4 * 3 * 2,
           "worked example: FLOPs per lookup = 2*2*2*6 + 2*4*3*2 (m=2,k=2,n=6 then m=4,k=3,n=2)");
    for (auto& c : P.cores) std::fill(c.begin(), c.end(), NAN);
    const float g0[4] = {1, 2, 3, 4}, g1[12] = {1, 0, 2, 0, 1, 1, 0, 1, 1, 2, 0, -1}, g2[6] = {1, -1, 2, 0, 0, 3};
    std::copy(g0, g0 + 4, P.cores[0].begin() + 1 * 4);
    std::copy(g1, g1 + 12, P.cores[1].begin() + 3 * 12);
    std::copy(g2, g2 + 6, P.cores[2].begin() + 2 * 6);
    const double want[8] = {5, 11, 6, -7, 11, 27, 14, -11};
    double row[8];
    tt_embedding_forward_row_cpu(row, P.ptrs.data(), s, 0, 37);
    std::string why;
    for (int d = 0; d < 8; d++)
        if (row[d] != want[d]) why += " d" + std::to_string(d) + ": " + std::to_string(row[d]) + " != " + std::to_string(want[d]);
    report(why.empty(), "worked example: chain reference = the hand-computed row [5,11,6,-7,11,27,14,-11]", why);
    why.clear();
    for (int d = 0; d < 8; d++)
        if (explicit_element(P, 0, 37, d) != want[d]) why += " d" + std::to_string(d);
    report(why.empty(), "worked example: explicit sum formula = the hand-computed row", why);
    why.clear();
    for (int d = 0; d < 8; d++)
        if (naive_element(P, 0, 37, d) != (float)want[d]) why += " d" + std::to_string(d);
    report(why.empty(), "worked example: version 1's odometer sum = the hand-computed row", why);
    float last[8];
    const float* g[3];
    for (int t = 0; t < 3; t++) g[t] = tt_embedding_forward_slice_ptr(P.c, s, 0, 37, t);
    emulate_warp_chain(s, g, last, false);
    why.clear();
    for (int d = 0; d < 8; d++)
        if (last[d] != (float)want[d]) why += " d" + std::to_string(d) + ": " + std::to_string(last[d]);
    report(why.empty(), "worked example: versions 3/4's warp chain (emulated) = the hand-computed row", why);
    std::vector<float> tr = emulate_pipeline(P, {0}, {37});
    why.clear();
    for (int d = 0; d < 8; d++)
        if (tr[d] != (float)want[d]) why += " d" + std::to_string(d) + ": " + std::to_string(tr[d]);
    report(why.empty(), "worked example: version 2's pointer arrays + column-major GEMM arguments = the hand-computed row", why);
}

// T = 2..6 with odd factors, rank 1, several tables: the chain reference against the explicit sum (double,
// 1e-12), and the GPU versions' host-callable pieces against the reference (fp32, 1e-5 of the row scale)
static void test_random_shapes() {
    struct Case { std::vector<int> p, q, r; int tables; };
    std::vector<Case> cases = {
        {{7, 5}, {3, 4}, {5}, 2},
        {{13, 11}, {8, 8}, {16}, 1},
        {{2, 3}, {1, 5}, {1}, 3},
        {{3, 4, 5}, {2, 3, 2}, {3, 4}, 2},
        {{5, 7, 3}, {4, 4, 4}, {32, 32}, 1},
        {{6, 5, 4}, {5, 1, 3}, {7, 2}, 1},
        {{4, 3, 5, 2}, {2, 3, 2, 2}, {3, 5, 4}, 2},
        {{3, 4, 5, 2}, {4, 2, 2, 4}, {8, 8, 8}, 1},
        {{2, 3, 2, 3, 2}, {2, 2, 3, 1, 2}, {2, 3, 4, 2}, 2},
        {{3, 3, 2, 2, 3}, {2, 2, 2, 2, 4}, {2, 4, 6, 8}, 1},
        {{2, 2, 3, 2, 2, 3}, {2, 1, 2, 3, 2, 2}, {2, 3, 2, 3, 2}, 2},
        {{2, 3, 2, 2, 3, 2}, {2, 2, 2, 2, 2, 2}, {4, 1, 3, 2, 5}, 1},
        // ranks 128 (EL-Rec), D = 4 .. 256, and one warp's buffers past a block's shared memory (T = 4 below)
        {{5, 7, 3}, {4, 8, 8}, {128, 128}, 1},
        {{3, 5, 4}, {2, 2, 4}, {128, 128}, 2},
        {{3, 4}, {16, 16}, {128}, 1},
        {{3, 2, 5}, {1, 2, 2}, {3, 128}, 1},
        {{3, 4, 2, 3}, {16, 16, 1, 1}, {128, 128, 128}, 1},
        {{2, 3, 2, 2, 3, 2}, {2, 2, 2, 2, 2, 8}, {2, 3, 2, 3, 128}, 1},
    };
    Rng rng(7);
    int T_seen[7] = {0};
    for (const Case& c : cases) {
        Problem P;
        if (!make_problem(P, c.p, c.q, c.r, c.tables, 1, 1, rng)) continue;
        const TtEmbeddingForwardShape& s = P.s;
        T_seen[s.T]++;
        std::string why_ref, why_v1, why_v34, why_acc, why_v2, why_tile, why_guard;
        // the explicit sums (prod R terms per element) are checked where they are cheap enough
        double terms = (double)s.D;
        for (int t = 1; t < s.T; t++) terms *= s.R[t];
        const bool explicit_ok = terms <= 2e6;
        // the tile choice: rt | m and cw | n, and float4 operands 16-byte aligned where cw = 4
        for (int t = 1; t < s.T; t++) {
            if (s.step_m[t] % s.step_rt[t] || s.step_n[t] % s.step_cw[t] || (s.step_cw[t] == 4 && s.slice[t] % 4))
                why_tile += " step " + std::to_string(t);
        }
        const int nrows = 12;
        std::vector<int> tbls;
        std::vector<int64_t> idxs;
        for (int i = 0; i < nrows; i++) {
            tbls.push_back((int)rng.randint(0, c.tables));
            idxs.push_back(i == 0 ? 0 : (i == 1 ? s.E - 1 : rng.randint(0, s.E)));   // the first and last rows too
        }
        std::vector<float> tr = emulate_pipeline(P, tbls, idxs);
        std::vector<double> row(s.D);
        std::vector<float> last(s.D_pad), acc(s.D_pad);
        for (int i = 0; i < nrows; i++) {
            const int tbl = tbls[i];
            const int64_t idx = idxs[i];
            tt_embedding_forward_row_cpu(row.data(), P.ptrs.data(), s, tbl, idx);
            const float* g[6];
            for (int t = 0; t < s.T; t++) {
                g[t] = tt_embedding_forward_slice_ptr(P.c, s, tbl, idx, t);
                if (s.step_cw[t] == 4 && ((uintptr_t)g[t] % 16) != 0 && t > 0) why_tile += " misaligned slice";
            }
            std::fill(last.begin(), last.end(), NAN);
            if (!emulate_warp_chain(s, g, last.data(), false)) why_guard += " row " + std::to_string(idx);
            for (int d = 0; d < s.D; d++) acc[d] = 0.5f * d;
            if (!emulate_warp_chain(s, g, acc.data(), true)) why_guard += " row " + std::to_string(idx);
            double scale = 0.0;
            for (int d = 0; d < s.D; d++) scale = std::max(scale, fabs(row[d]));
            const double tol = 1e-5 * std::max(scale, 1.0);
            for (int d = 0; d < s.D; d++) {
                if (explicit_ok && !close(row[d], explicit_element(P, tbl, idx, d), 1e-12, 1e-12))
                    why_ref += " row " + std::to_string(idx) + " d" + std::to_string(d);
                if (explicit_ok && !close(naive_element(P, tbl, idx, d), row[d], tol, 0))
                    why_v1 += " row " + std::to_string(idx) + " d" + std::to_string(d);
                if (!close(last[d], row[d], tol, 0)) why_v34 += " row " + std::to_string(idx) + " d" + std::to_string(d);
                if (!close(acc[d], 0.5 * d + row[d], tol, 0)) why_acc += " row " + std::to_string(idx) + " d" + std::to_string(d);
                if (!close(tr[(size_t)i * s.D + d], row[d], tol, 0)) why_v2 += " row " + std::to_string(idx) + " d" + std::to_string(d);
            }
        }
        auto cut = [](const std::string& w) { return w.substr(0, 200); };
        if (explicit_ok) report(why_ref.empty(), P.name + ": chain reference = explicit sum formula (double)", cut(why_ref));
        report(why_guard.empty(), P.name + ": the warp chain stays inside buffers of buf_pad floats", cut(why_guard));
        report(why_tile.empty(), P.name + ": lane tiles divide every step, float4 operands aligned", cut(why_tile));
        if (explicit_ok) report(why_v1.empty(), P.name + ": version 1's odometer sum = reference (fp32)", cut(why_v1));
        report(why_v34.empty(), P.name + ": versions 3/4's warp chain (emulated) = reference (fp32)", cut(why_v34));
        report(why_acc.empty(), P.name + ": warp chain accumulating into a pooled row = old + reference", cut(why_acc));
        report(why_v2.empty(), P.name + ": version 2's pointers + cuBLAS arguments (column-major emulation) = reference", cut(why_v2));
    }
    bool all_T = true;
    for (int T = 2; T <= 6; T++) all_T = all_T && T_seen[T] > 0;
    report(all_T, "shapes cover T = 2, 3, 4, 5, 6");
}

// the pooled reference: ragged bags over several tables, empty bags exactly zero, sums of explicit rows
static void test_pooled() {
    Problem P;
    Rng rng(11);
    const int tables = 3, B = 5, L = 3;
    if (!make_problem(P, {4, 3, 5}, {2, 3, 2}, {3, 2}, tables, B, L, rng)) return;
    const TtEmbeddingForwardShape& s = P.s;
    std::vector<int64_t> indices = make_bag_indices((int64_t)tables * B, L, s.E, 0.0, rng);
    std::vector<int64_t> offsets = tt_embedding_forward_make_offsets(s, true, rng);
    const int64_t nbags = (int64_t)tables * B;
    report(tt_embedding_forward_validate_bags(indices, offsets, nbags, s.E).empty(), "ragged offsets pass the bag validator");
    bool first_empty = true;
    for (int tbl = 0; tbl < tables; tbl++) first_empty = first_empty && offsets[(size_t)tbl * B] == offsets[(size_t)tbl * B + 1];
    report(first_empty && offsets[nbags] == s.nnz, "ragged offsets: the first bag of every table is empty, the total is nnz");
    std::vector<float> out((size_t)nbags * s.D);
    tt_embedding_forward_cpu(out.data(), P.ptrs.data(), indices.data(), offsets.data(), s);
    std::string why;
    int empties = 0;
    for (int64_t bag = 0; bag < nbags; bag++) {
        const int tbl = (int)(bag / B);
        if (offsets[bag] == offsets[bag + 1]) empties++;
        for (int d = 0; d < s.D; d++) {
            double want = 0.0;
            for (int64_t n = offsets[bag]; n < offsets[bag + 1]; n++) want += explicit_element(P, tbl, indices[n], d);
            const bool ok = offsets[bag] == offsets[bag + 1] ? out[bag * s.D + d] == 0.0f : close(out[bag * s.D + d], want, 1e-6, 1e-6);
            if (!ok) why += " bag " + std::to_string(bag) + " d" + std::to_string(d);
        }
    }
    report(why.empty() && empties >= tables, "pooled reference over 3 tables of ragged bags = sums of explicit rows, empty bags 0 (" +
           std::to_string(empties) + " empty)", why.substr(0, 200));
}

// the shape validator: each broken constraint named; fine shapes give ""
static void test_validator() {
    TtEmbeddingForwardShape s;
    struct Case { std::vector<int> p, q, r; int64_t E; int D; int tables, B, L; double alpha; const char* want; };
    const std::vector<int> P3 = {200, 220, 250}, Q3 = {4, 4, 4}, R3 = {32, 32};
    std::vector<Case> cases = {
        {P3, Q3, R3, 0, 32, 1, 512, 20, 0, "prod q (64) must equal D (32)"},
        {P3, {4, 4, 8}, R3, 0, 64, 1, 512, 20, 0, "prod q (128) must equal D (64)"},
        {P3, Q3, R3, 20000000, 0, 1, 512, 20, 0, "prod p (11000000) must be >= E (20000000)"},
        {P3, Q3, {32}, 0, 0, 1, 512, 20, 0, "ranks has 1 entries; T - 1 = 2 inner ranks are needed"},
        {P3, Q3, {32, 32, 32}, 0, 0, 1, 512, 20, 0, "ranks has 3 entries; T - 1 = 2"},
        {P3, {4, 16}, R3, 0, 0, 1, 512, 20, 0, "len(q) (2) must equal len(p) = T (3)"},
        {{11000000}, {64}, {}, 0, 0, 1, 512, 20, 0, "the number of cores T = len(p) (1) must be 2..6"},
        {{2, 2, 2, 2, 2, 2, 2}, {1, 1, 1, 1, 1, 1, 64}, {1, 1, 1, 1, 1, 1}, 0, 0, 1, 512, 20, 0, "the number of cores T = len(p) (7) must be 2..6"},
        {P3, Q3, {32, 0}, 0, 0, 1, 512, 20, 0, "ranks entries must be >= 1"},
        {{200, 0, 250}, Q3, R3, 0, 0, 1, 512, 20, 0, "p and q entries must be >= 1"},
        {P3, Q3, R3, 0, 0, 0, 512, 20, 0, "tables and B must be >= 1"},
        {P3, Q3, R3, 0, 0, 1, 512, -1, 0, "L >= 0"},
        {{2, 2}, {8, 8}, {4}, 0, 0, 1, 512, 20, 1.15, "Zipf bags (alpha 1.15 > 1) need E (4) >= L (20)"},
        {P3, Q3, R3, 0, 0, 65536, 65536, 20, 0, "must fit in 32 bits"},
        {P3, Q3, {5000, 5000}, 0, 0, 1, 512, 20, 0, "must be <= 2^24"},
    };
    for (const Case& c : cases) {
        std::string got = tt_embedding_forward_make_shape(s, c.p, c.q, c.r, c.E, c.D, c.tables, c.B, c.L, c.alpha);
        report(got.find(c.want) != std::string::npos, std::string("validator names '") + c.want + "'", "got '" + got + "'");
    }
    struct Fine { std::vector<int> p, q, r; int64_t E; int D; };
    std::vector<Fine> fine = {{P3, Q3, R3, 0, 0}, {P3, Q3, R3, 11000000, 64}, {P3, Q3, R3, 5, 0},
                              {{20, 22, 25, 20}, {4, 2, 2, 4}, {32, 32, 32}, 0, 64},
                              {{20, 20, 25, 25, 40}, {2, 2, 2, 2, 4}, {8, 16, 32, 64}, 0, 64},
                              {{2, 3, 2, 3, 2, 3}, {2, 2, 2, 2, 2, 2}, {3, 3, 3, 3, 3}, 0, 0}};
    for (const Fine& f : fine) {
        std::string got = tt_embedding_forward_make_shape(s, f.p, f.q, f.r, f.E, f.D, 1, 512, 20, 0.0);
        report(got.empty(), "validator accepts T=" + std::to_string(f.p.size()) + " E=" + std::to_string(f.E), got);
    }
}

// the bag validator: an index >= E (or < 0), broken offsets
static void test_bag_validator() {
    std::vector<int64_t> idx = {0, 5, 9, 3}, off = {0, 2, 2, 4};
    report(tt_embedding_forward_validate_bags(idx, off, 3, 10).empty(), "bag validator accepts valid bags (an empty one included)");
    std::string got = tt_embedding_forward_validate_bags({0, 5, 10, 3}, off, 3, 10);
    report(got.find("index 10 at lookup 2") != std::string::npos && got.find("< E (10)") != std::string::npos,
           "bag validator: an index >= E is named with its position", got);
    got = tt_embedding_forward_validate_bags({0, -1, 9, 3}, off, 3, 10);
    report(got.find("index -1 at lookup 1") != std::string::npos, "bag validator: a negative index", got);
    got = tt_embedding_forward_validate_bags(idx, {0, 3, 2, 4}, 3, 10);
    report(got.find("non-decreasing") != std::string::npos, "bag validator: decreasing offsets", got);
    got = tt_embedding_forward_validate_bags(idx, {0, 2, 2, 3}, 3, 10);
    report(got.find("must equal the number of indices (4)") != std::string::npos, "bag validator: offsets end != nnz", got);
    got = tt_embedding_forward_validate_bags(idx, {1, 2, 2, 4}, 3, 10);
    report(got.find("offsets[0] (1) must be 0") != std::string::npos, "bag validator: offsets[0] != 0", got);
    got = tt_embedding_forward_validate_bags(idx, {0, 2, 4}, 3, 10);
    report(got.find("tables*B + 1 = 4") != std::string::npos, "bag validator: wrong number of offsets", got);
}

// FBTT's default: the spec's numbers
static void test_default_counts() {
    TtEmbeddingForwardShape s;
    std::string why = tt_embedding_forward_make_shape(s, {200, 220, 250}, {4, 4, 4}, {32, 32}, 0, 0, 1, 512, 20, 0.0);
    report(why.empty(), "default shape valid", why);
    report(s.E == 11000000 && s.D == 64 && s.nnz == 10240 && s.stride[0] == 55000 && s.stride[1] == 250,
           "default: E 11,000,000, D 64, 10,240 lookups, strides [55000, 250, 1]");
    report(tt_embedding_forward_flops_per_lookup(s) == 36864.0, "default: 36,864 FLOPs per lookup (spec)",
           std::to_string(tt_embedding_forward_flops_per_lookup(s)));
    report(tt_embedding_forward_core_floats(s) == 958720, "default: cores hold 958,720 floats (spec)",
           std::to_string(tt_embedding_forward_core_floats(s)));
    const double bytes = 4.0 * 958720 + 8.0 * 10240 + 8.0 * 513 + 512.0 * 64 * sizeof(floatX);
    report(tt_embedding_forward_bytes(s) == bytes, "default: bytes = cores + indices + offsets + output");
    report((int)(11000000.0 * 64 / 958720) == 734, "default: 734x smaller than the dense table (spec)");
    report(s.step_rt[1] == 4 && s.step_cw[1] == 4 && s.step_rt[2] == 2 && s.step_cw[2] == 1,
           "default lane tiles: step 1 (4x32 . 32x128) 4x4, step 2 (16x32 . 32x4) 2x1",
           std::to_string(s.step_rt[1]) + "x" + std::to_string(s.step_cw[1]) + ", " + std::to_string(s.step_rt[2]) + "x" +
               std::to_string(s.step_cw[2]));
    report(s.ld[0] == 32 && s.ld[1] == 33 && s.ld[2] == 1 && s.max_mid == 16 * 33 &&
               tt_embedding_forward_smem3_bytes(s, 8) == 8 * (528 + 64) * 4,
           "default: M_1 kept as 16 rows of stride 33 (odd: no bank conflicts); version 3 keeps 528 + 64 floats per warp");
    TtEmbeddingForwardGroup g;
    why = tt_embedding_forward_make_group(s, g);
    report(why.empty() && g.ncores == 1 && g.core[0] == 1 && g.nkeys == 220 && g.end_bit == 8,
           "default: version 4 groups by core 1 alone (220 keys, 8-bit sort)", why);
    // the 4-core and 5-core bench shapes
    tt_embedding_forward_make_shape(s, {20, 22, 25, 20}, {4, 2, 2, 4}, {32, 32, 32}, 0, 0, 1, 512, 20, 0.0);
    why = tt_embedding_forward_make_group(s, g);
    report(tt_embedding_forward_flops_per_lookup(s) == 53248.0 && g.ncores == 2 && g.core[0] == 1 && g.core[1] == 2 && g.nkeys == 550,
           "4-core bench shape: 53,248 FLOPs per lookup, version 4 groups by cores 1 and 2 (550 keys)", why);
    tt_embedding_forward_make_shape(s, {20, 20, 25, 25, 40}, {2, 2, 2, 2, 4}, {8, 16, 32, 64}, 0, 0, 1, 512, 20, 0.0);
    why = tt_embedding_forward_make_group(s, g);
    report(tt_embedding_forward_flops_per_lookup(s) == 82944.0 && g.ncores == 2 && g.core[0] == 3 && g.core[1] == 2,
           "5-core bench shape: 82,944 FLOPs per lookup, version 4 groups by cores 3 and 2", why);
    report(tt_embedding_forward_naive_terms(s) > (double)TT_EMBEDDING_FORWARD_MAX_NAIVE_TERMS,
           "5-core bench shape: version 1 skipped (explicit sum too long)");
}

// version 4's key: the table and grouped slices decoded from a key are those of the lookup; keys order by
// (table, grouped digits)
static void test_group_keys() {
    Rng rng(5);
    struct Case { std::vector<int> p, q, r; int tables, B, L; };
    std::vector<Case> cases = {{{7, 9, 5}, {2, 2, 2}, {4, 32}, 3, 40, 30},       // core 1's slice (256) alone
                               {{3, 4, 5, 6}, {2, 2, 2, 2}, {32, 32, 32}, 2, 100, 40},   // cores 1 and 2 (2048 each)
                               {{9, 4}, {8, 2}, {64}, 2, 10, 10}};               // core 0 heaviest (8 x 64)
    for (const Case& c : cases) {
        Problem P;
        if (!make_problem(P, c.p, c.q, c.r, c.tables, c.B, c.L, rng)) continue;
        TtEmbeddingForwardGroup g;
        std::string why = tt_embedding_forward_make_group(P.s, g);
        for (int i = 0; i < 200 && why.empty(); i++) {
            const int tbl = (int)rng.randint(0, c.tables);
            const int64_t idx = rng.randint(0, P.s.E);
            const uint32_t key = tt_embedding_forward_group_key(P.s, g, tbl, idx);
            if (tt_embedding_forward_group_table(P.s, g, key) != tbl) why = "table of key";
            for (int cc = 0; cc < g.ncores; cc++)
                if (tt_embedding_forward_group_slice(P.c, P.s, g, key, cc) != tt_embedding_forward_slice_ptr(P.c, P.s, tbl, idx, g.core[cc]))
                    why = "slice of grouped core " + std::to_string(g.core[cc]);
            if ((int64_t)key >= g.nkeys || (g.end_bit < 32 && (key >> g.end_bit) != 0)) why = "key out of range";
        }
        report(why.empty(), P.name + ": version 4's keys decode to the lookup's table and grouped slices (cores " +
               std::to_string(g.core[0]) + (g.ncores > 1 ? "," + std::to_string(g.core[1]) : "") + ")", why);
    }
}

// the digit helper's 64-bit path against plain division
static void test_digits() {
    Rng rng(3);
    std::string why;
    for (int i = 0; i < 10000; i++) {
        const int64_t idx = (int64_t)(rng.next() >> (i % 2 ? 1 : 33));
        const int64_t stride = (int64_t)(rng.next() >> (i % 3 ? 40 : 20)) + 1;
        const int p = (int)rng.randint(1, 1000);
        if (tt_embedding_forward_digit(idx, stride, p) != (int)((idx / stride) % p)) { why = std::to_string(idx); break; }
    }
    report(why.empty(), "core-index digits (32- and 64-bit paths) = (idx / stride) % p", why);
}

// ---- version 5 (TF32 tensor cores) on the CPU

// one m16n8k8 mma.sync from the 32 lanes' registers, by the PTX ISA's layout (independent of the kernel's
// helpers): A (16x8) element (row, col) is in lane 4 * (row % 8) + col % 4, register (row >= 8) + 2 (col >= 4);
// B (8x8) element (k, n) in lane 4 n + k % 4, register k >= 4; D (16x8) element (row, col) in lane
// 4 (row % 8) + col / 2, register col % 2 + 2 (row >= 8)
static void emulate_mma(float (&d)[32][4], const float (&a)[32][4], const float (&b)[32][2]) {
    double A[16][8], B[8][8];
    for (int row = 0; row < 16; row++)
        for (int col = 0; col < 8; col++) A[row][col] = a[4 * (row % 8) + col % 4][(row >= 8) + 2 * (col >= 4)];
    for (int k = 0; k < 8; k++)
        for (int n = 0; n < 8; n++) B[k][n] = b[4 * n + k % 4][k >= 4];
    for (int row = 0; row < 16; row++)
        for (int col = 0; col < 8; col++) {
            double sum = 0.0;
            for (int k = 0; k < 8; k++) sum += A[row][k] * B[k][col];
            d[4 * (row % 8) + col / 2][col % 2 + 2 * (row >= 8)] += (float)sum;
        }
}

static void test_tc_plan() {
    TtEmbeddingForwardShape s;
    TtEmbeddingForwardTc tc;
    tt_embedding_forward_make_shape(s, {200, 220, 250}, {4, 4, 4}, {32, 32}, 0, 0, 1, 512, 20, 0.0);
    std::string why = tt_embedding_forward_make_tc(s, tc);
    report(why.empty() && tc.h == 1 && tc.ldg == 136 && tc.in_sz == 0 && tc.out_sz == 528 && tc.mid == 0,
           "version 5 at the default: core 1 on tensor cores (4x32 . 32x128 per lookup), slice stride 136, M_1 in 16x33", why);
    tt_embedding_forward_make_shape(s, {20, 22, 25, 20}, {4, 2, 2, 4}, {32, 32, 32}, 0, 0, 1, 512, 20, 0.0);
    why = tt_embedding_forward_make_tc(s, tc);
    report(why.empty() && tc.h == 1 && tc.ldg == 72 && tc.in_sz == 0 && tc.out_sz == 264 && tc.mid == 528,
           "version 5 on the 4-core shape: core 1, stride 72, M_1 8x33, step 2 intermediate 16x33", why);
    tt_embedding_forward_make_shape(s, {20, 20, 25, 25, 40}, {2, 2, 2, 2, 4}, {8, 16, 32, 64}, 0, 0, 1, 512, 20, 0.0);
    why = tt_embedding_forward_make_tc(s, tc);
    report(why.empty() && tc.h == 3 && tc.ldg == 136 && tc.in_sz == 264 && tc.out_sz == 1040 && tc.mid == 68,
           "version 5 on the 5-core shape: core 3, M_2 8x33 in, M_3 16x65 out, prefix intermediate 4x17", why);
    tt_embedding_forward_make_shape(s, {7, 9, 5}, {2, 3, 2}, {4, 6}, 0, 0, 1, 8, 4, 0.0);
    why = tt_embedding_forward_make_tc(s, tc);
    report(why.find("multiples of 8") != std::string::npos, "version 5 skips ranks that are not multiples of 8", why);
    bool ok = true;
    for (int n = 8; n <= 1024; n += 8) {
        const int ldg = n + ((8 - n % 32) + 32) % 32;
        ok = ok && ldg >= n && ldg % 32 == 8 && ldg - n < 32;
    }
    report(ok, "version 5's slice stride: >= n, = 8 (mod 32) (B fragments conflict-free), < n + 32");
}

// Version 5's phases on the CPU for one run of `np` lookups: A (FP32 engine), B (the stacked GEMM through the
// kernel's fragment helpers and an mma emulated from the PTX layout), C (FP32 engine); each phase-B output
// against the product of the same TF32-rounded operands, and each row against the reference (TF32 tolerance)
static void test_tc_run(const std::vector<int>& p, const std::vector<int>& q, const std::vector<int>& r, int np, Rng& rng) {
    Problem P;
    if (!make_problem(P, p, q, r, 2, 1, 1, rng)) return;
    const TtEmbeddingForwardShape& s = P.s;
    TtEmbeddingForwardTc tc;
    TtEmbeddingForwardGroup g;
    std::string why = tt_embedding_forward_make_tc(s, tc);
    if (why.empty()) why = tt_embedding_forward_make_group(s, g, tc.h);
    if (!why.empty()) { report(false, P.name + ": version 5 plan", why); return; }
    const int h = tc.h, m = s.step_m[h], k = s.step_k[h], n = s.step_n[h];
    // a run: lookups of one table sharing i_h (same key); their other digits random
    const int tbl = 1;
    const int64_t base_idx = rng.randint(0, s.E);
    const int ih = tt_embedding_forward_digit(base_idx, s.stride[h], s.p[h]);
    std::vector<int64_t> idx(np);
    for (int pi = 0; pi < np; pi++) {
        int64_t x = rng.randint(0, s.E);
        const int cur = tt_embedding_forward_digit(x, s.stride[h], s.p[h]);
        x += (int64_t)(ih - cur) * s.stride[h];                 // force digit h to ih
        if (x >= s.E || x < 0) x = base_idx;
        idx[pi] = x;
    }
    // the slice of core h, TF32-rounded, rows padded to ldg (as the kernel stores it)
    const float* src = tt_embedding_forward_slice_ptr(P.c, s, tbl, idx[0], h);
    std::vector<float> gh((size_t)k * tc.ldg, NAN);
    for (int i = 0; i < k * n; i++) gh[(size_t)(i / n) * tc.ldg + i % n] = tt_embedding_forward_tf32(src[i]);
    // phase A
    std::vector<float> inbuf((size_t)np * std::max(tc.in_sz, 4), NAN), outbuf((size_t)np * tc.out_sz, NAN);
    std::vector<const float*> a_base(np);
    for (int pi = 0; pi < np; pi++) {
        const float* gp[6];
        for (int t = 0; t < s.T; t++) gp[t] = tt_embedding_forward_slice_ptr(P.c, s, tbl, idx[pi], t);
        if (h == 1) { a_base[pi] = gp[0]; continue; }
        std::vector<float> b0((size_t)std::max(tc.mid, 4), NAN), b1((size_t)std::max(tc.mid, 4), NAN);
        const float* in = gp[0];
        for (int t = 1; t < h; t++) {
            float* out = t == h - 1 ? inbuf.data() + (size_t)pi * tc.in_sz : ((t & 1) ? b0.data() : b1.data());
            for (int lane = 0; lane < 32; lane++) tt_embedding_forward_chain_step(s, t, out, in, gp[t], false, lane);
            in = out;
        }
        a_base[pi] = inbuf.data() + (size_t)pi * tc.in_sz;
    }
    // phase B, item by item as the warps do it
    const int rows = np * m, row_tiles = (rows + 15) / 16, ntiles = n / 8, ngroups = (ntiles + 3) / 4;
    for (int item = 0; item < row_tiles * ngroups; item++) {
        const int rt = item / ngroups, ng = item - rt * ngroups, nt_count = std::min(4, ntiles - ng * 4);
        float acc[4][32][4] = {};
        for (int ks = 0; ks < k; ks += 8) {
            float a[32][4];
            for (int lane = 0; lane < 32; lane++) {
                const int group = lane >> 2, tig = lane & 3;
                const float* arow[2];
                for (int hf = 0; hf < 2; hf++) {
                    const int rr = tt_embedding_forward_tc_a_rowidx(rt, hf, group);
                    arow[hf] = rr < rows ? tt_embedding_forward_tc_a_row(s, tc, a_base.data(), np, rr) : nullptr;
                }
                tt_embedding_forward_tc_a_frag(a[lane], arow[0], arow[1], ks, tig);
            }
            for (int nt = 0; nt < nt_count; nt++) {
                float b[32][2];
                for (int lane = 0; lane < 32; lane++)
                    tt_embedding_forward_tc_b_frag(b[lane], gh.data(), tc.ldg, ks, ng * 32 + nt * 8, lane >> 2, lane & 3);
                emulate_mma(acc[nt], a, b);
            }
        }
        for (int nt = 0; nt < nt_count; nt++)
            for (int lane = 0; lane < 32; lane++)
                for (int qq = 0; qq < 4; qq++) {
                    int rr, cc;
                    tt_embedding_forward_tc_c_rc(rt, ng * 32 + nt * 8, qq, lane >> 2, lane & 3, rr, cc);
                    if (rr < rows) *tt_embedding_forward_tc_c_addr(s, tc, outbuf.data(), rr, cc) = acc[nt][lane][qq];
                }
    }
    // phase B against the direct product of the same rounded operands; address written out independently
    std::string why_b;
    const int Rn = s.R[h + 1], ldh = s.ld[h];
    for (int pi = 0; pi < np; pi++)
        for (int i = 0; i < m; i++)
            for (int c = 0; c < n; c++) {
                double want = 0.0;
                for (int kk = 0; kk < k; kk++)
                    want += (double)tt_embedding_forward_tf32(a_base[pi][i * s.ld[h - 1] + kk]) * tt_embedding_forward_tf32(src[kk * n + c]);
                const float got = outbuf[(size_t)pi * tc.out_sz + (size_t)(i * s.q[h] + c / Rn) * ldh + c % Rn];
                if (!close(got, want, 1e-5, 1e-5)) why_b += " lookup " + std::to_string(pi) + " (" + std::to_string(i) + "," + std::to_string(c) + ")";
            }
    // phase C and the rows
    std::string why_c;
    double max_err = 0.0;
    std::vector<double> ref(s.D);
    for (int pi = 0; pi < np; pi++) {
        const float* gp[6];
        for (int t = 0; t < s.T; t++) gp[t] = tt_embedding_forward_slice_ptr(P.c, s, tbl, idx[pi], t);
        std::vector<float> row(s.D_pad, NAN), b0((size_t)std::max(tc.mid, 4), NAN), b1((size_t)std::max(tc.mid, 4), NAN);
        const float* in = outbuf.data() + (size_t)pi * tc.out_sz;
        const float* got = in;
        for (int t = h + 1; t < s.T; t++) {
            float* out = t == s.T - 1 ? row.data() : ((t & 1) ? b0.data() : b1.data());
            for (int lane = 0; lane < 32; lane++) tt_embedding_forward_chain_step(s, t, out, in, gp[t], false, lane);
            in = out;
            got = out;
        }
        tt_embedding_forward_row_cpu(ref.data(), P.ptrs.data(), s, tbl, idx[pi]);
        for (int d = 0; d < s.D; d++) {
            max_err = std::max(max_err, fabs(got[d] - ref[d]));
            if (!close(got[d], ref[d], 1e-2, 1e-2)) why_c += " lookup " + std::to_string(pi) + " d" + std::to_string(d);
        }
    }
    char buf[96];
    snprintf(buf, sizeof buf, " (%d lookups, %d rows, max row error %.1e)", np, rows, max_err);
    report(why_b.empty(), P.name + ": version 5's stacked TF32 GEMM (fragments + PTX-layout mma) = product of the rounded operands" + buf,
           why_b.substr(0, 200));
    report(why_c.empty(), P.name + ": version 5's rows (phases A, B, C) = reference within TF32 error" + buf, why_c.substr(0, 200));
}

// The TF32 error budget at FBTT's default: version 5's arithmetic (step 1 on TF32-rounded operands with fp32
// sums, step 2 in fp32) over 10,240 lookups in 512 bags, pooled, against the double reference: every value
// must pass the stated TF32 tolerance with a margin (the largest error under half of atol).
static void test_tf32_budget() {
    Problem P;
    Rng rng(42);
    const int B = 512, L = 20;
    if (!make_problem(P, {200, 220, 250}, {4, 4, 4}, {32, 32}, 1, B, L, rng)) return;
    const TtEmbeddingForwardShape& s = P.s;
    std::vector<int64_t> indices = make_bag_indices(B, L, s.E, 0.0, rng);
    std::vector<int64_t> offsets = tt_embedding_forward_make_offsets(s, false, rng);
    std::vector<float> ref((size_t)B * s.D);
    tt_embedding_forward_cpu(ref.data(), P.ptrs.data(), indices.data(), offsets.data(), s);
    std::vector<float> out((size_t)B * s.D, 0.0f), m1(16 * 33), row(64);
    for (int bag = 0; bag < B; bag++) {
        for (int64_t nn = offsets[bag]; nn < offsets[bag + 1]; nn++) {
            const float* g0 = tt_embedding_forward_slice_ptr(P.c, s, 0, indices[nn], 0);
            const float* g1 = tt_embedding_forward_slice_ptr(P.c, s, 0, indices[nn], 1);
            const float* g2 = tt_embedding_forward_slice_ptr(P.c, s, 0, indices[nn], 2);
            for (int i = 0; i < 4; i++)
                for (int c = 0; c < 128; c++) {
                    float sum = 0.0f;
                    for (int kk = 0; kk < 32; kk++) sum += tt_embedding_forward_tf32(g0[i * 32 + kk]) * tt_embedding_forward_tf32(g1[kk * 128 + c]);
                    m1[(i * 4 + c / 32) * 33 + c % 32] = sum;
                }
            for (int lane = 0; lane < 32; lane++) tt_embedding_forward_chain_step(s, 2, row.data(), m1.data(), g2, false, lane);
            for (int d = 0; d < 64; d++) out[(size_t)bag * 64 + d] += row[d];
        }
    }
    ValidateStats st = compare_arrays(out.data(), ref.data(), out.size(), TT_EMBEDDING_FORWARD_TF32_ATOL, TT_EMBEDDING_FORWARD_TF32_RTOL);
    char buf[160];
    snprintf(buf, sizeof buf, "TF32 error budget at FBTT's default: max abs error %.2e over %zu pooled values (atol %.0e, rtol %.0e)",
             st.max_abs, out.size(), (double)TT_EMBEDDING_FORWARD_TF32_ATOL, (double)TT_EMBEDDING_FORWARD_TF32_RTOL);
    report(st.failures == 0 && st.max_abs < 0.5 * TT_EMBEDDING_FORWARD_TF32_ATOL, buf, std::to_string(st.failures) + " failures");
    // and the fp32 tolerance would reject it (the looser one is needed)
    ValidateStats st32 = compare_arrays(out.data(), ref.data(), out.size(), 1e-4f, 1e-4f);
    report(st32.failures > 0, "TF32 results fail the fp32 tolerance (so version 5 needs its own)");
}


// ---- version 6 on the CPU: the planning kernel's phases (1024 threads, one after the other, the scatter in a
// shuffled thread order so that the positions inside a key's range differ from run to run), then every
// block's phases (threads and lanes one after the other between the kernel's barriers), then version 4's
// pooling; with the invariants of the plan, the rows bitwise against version 3's engine, and the pooled
// output against the double reference

struct V6Run {
    std::vector<float> out, rowbuf;
    int items = 0, max_items = 0, primaries = 0;
    std::string why;          // first broken invariant ("" = none)
};

static V6Run emulate_v6(const Problem& P, const std::vector<int64_t>& indices, const std::vector<int64_t>& offsets, int warps,
                        uint64_t order_seed) {
    V6Run R;
    const TtEmbeddingForwardShape& s = P.s;
    TtEmbeddingForwardPlan6 pl;
    R.why = tt_embedding_forward_make_plan6(s, pl);
    if (!R.why.empty()) return R;
    const int64_t nnz = s.nnz, nbags = (int64_t)s.tables * s.B;
    const int C = warps * TT_EMBEDDING_FORWARD_V6_P, NT = TT_EMBEDDING_FORWARD_V6_PLAN_THREADS;
    R.rowbuf.assign((size_t)std::max<int64_t>(nnz, 1) * s.D, NAN);
    if (nnz > 0) {
        // ---- planning kernel
        const int nkeys = (int)pl.g.nkeys;
        R.max_items = tt_embedding_forward_v6_max_items(s, pl, C);
        std::vector<int> smem((size_t)nkeys + 2 * NT + 65, 0x5a5a5a5a);
        int* cnt = smem.data();
        int* tot = cnt + nkeys;
        int* seg = tot + 2 * NT;
        std::vector<uint32_t> keys((size_t)nnz, 0xdeadbeefu);
        std::vector<int> perm((size_t)nnz, -1);
        std::vector<int64_t> sidx((size_t)nnz, -1);
        std::vector<int4> items((size_t)R.max_items, make_int4(-7, -7, -7, -7));
        for (int tid = 0; tid < NT; tid++)
            for (int i = tid; i < nkeys; i += NT) cnt[i] = 0;
        for (int tid = 0; tid < NT; tid++)
            tt_embedding_forward_v6_plan_count(cnt, keys.data(), indices.data(), offsets.data(), s, pl.g, tid, NT);
        for (int tid = 0; tid < NT; tid++) tt_embedding_forward_v6_plan_sums(cnt, tot, nkeys, C, tid, NT);
        for (int lane = 0; lane < 32; lane++) tt_embedding_forward_v6_plan_scan1(tot, seg, NT, lane);
        for (int lane = 0; lane < 32; lane++) tt_embedding_forward_v6_plan_scan2(tot, seg, NT, lane);
        for (int tid = 0; tid < NT; tid++)
            tt_embedding_forward_v6_plan_items(cnt, tot, seg, items.data(), nkeys, C, R.max_items, tid, NT);
        std::vector<int> order(NT);
        for (int i = 0; i < NT; i++) order[i] = i;
        Rng orng(order_seed);
        for (int i = NT - 1; i > 0; i--) std::swap(order[i], order[orng.randint(0, i + 1)]);
        for (int tid : order)
            tt_embedding_forward_v6_plan_scatter(cnt, perm.data(), sidx.data(), keys.data(), indices.data(), nnz, tid, NT);
        // ---- its invariants: keys, a permutation sorted by key, items that tile each key's range in order
        R.items = seg[64];
        auto fail = [&](const std::string& w) { if (R.why.empty()) R.why = w; };
        if (R.items > R.max_items) fail("items " + std::to_string(R.items) + " > max_items " + std::to_string(R.max_items));
        std::vector<char> seen((size_t)nnz, 0);
        for (int64_t pos = 0; pos < nnz; pos++) {
            const int n = perm[pos];
            if (n < 0 || n >= nnz || seen[n]) { fail("perm is not a permutation at position " + std::to_string(pos)); break; }
            seen[n] = 1;
            int tbl = 0;
            while (tbl + 1 < s.tables && offsets[(size_t)(tbl + 1) * s.B] <= n) tbl++;
            if (keys[n] != tt_embedding_forward_group_key(s, pl.g, tbl, indices[n])) fail("key of lookup " + std::to_string(n));
            if (sidx[pos] != indices[n]) fail("sorted index at position " + std::to_string(pos));
            if (pos > 0 && keys[perm[pos - 1]] > keys[n]) fail("keys not sorted at position " + std::to_string(pos));
        }
        int64_t next = 0;
        for (int it = 0; it < R.items && R.why.empty(); it++) {
            const int4 im = items[it];
            if (im.x != next || im.y < 1 || im.y > C) { fail("item " + std::to_string(it) + " start/count"); break; }
            for (int j = 0; j < im.y; j++)
                if (keys[perm[im.x + j]] != (uint32_t)im.z) fail("item " + std::to_string(it) + " holds another key");
            // an item is cut short only at the end of its key
            if (im.y < C && im.x + im.y < nnz && keys[perm[im.x + im.y]] == (uint32_t)im.z) fail("item " + std::to_string(it) + " cut early");
            next += im.y;
        }
        if (R.why.empty() && next != nnz) fail("items cover " + std::to_string(next) + " of " + std::to_string(nnz) + " lookups");
        for (int it = R.items; it < R.max_items; it++)
            if (items[it].y != 0) { fail("unused item " + std::to_string(it) + " not empty"); break; }
        if (!R.why.empty()) return R;

        // ---- chain kernel, block by block
        const size_t bytes = tt_embedding_forward_smem6_bytes(s, pl, warps);
        const int NB = warps * 32;
        std::vector<float4> sbuf((bytes + 64 + 15) / 16);
        for (int b = 0; b < R.max_items; b++) {
            const int4 item = items[b];
            if (item.y == 0) continue;
            memset(sbuf.data(), 0xff, sbuf.size() * 16);            // NaN / -1 everywhere: a read of unstaged data shows
            unsigned char* canary = reinterpret_cast<unsigned char*>(sbuf.data()) + bytes;
            for (int i = 0; i < 64; i++) canary[i] = (unsigned char)(0xa5 ^ i);
            const TtEmbeddingForwardV6Smem m = tt_embedding_forward_v6_carve(sbuf.data(), pl, C);
            const uint32_t key = (uint32_t)item.z;
            for (int tid = 0; tid < NB; tid++) {
                tt_embedding_forward_v6_stage_grouped(m, P.c, s, pl, key, tid, NB);
                tt_embedding_forward_v6_load_meta(m, perm.data(), sidx.data(), item.x, item.y, tid, NB);
            }
            for (int warp = 0; warp < warps; warp++)
                for (int lane = 0; lane < 32; lane++) tt_embedding_forward_v6_stage_lookups(m, P.c, s, pl, key, item.y, warp, warps, lane);
            for (int tid = 0; tid < NB; tid++) tt_embedding_forward_v6_alias(m, item.y, tid, NB);
            for (int tid = 0; tid < NB; tid++) tt_embedding_forward_v6_primaries(m, item.y, tid, NB);
            R.primaries += *m.np;
            for (int warp = 0; warp < warps; warp++) {
                TtEmbeddingForwardV6Warp w;
                if (tt_embedding_forward_v6_warp_lookups(w, m, pl, warp) == 0) continue;
                for (int t = 1; t < s.T; t++)
                    for (int lane = 0; lane < 32; lane++) tt_embedding_forward_v6_step(s, pl, m, w, t, lane);
                for (int lane = 0; lane < 32; lane++) tt_embedding_forward_v6_write_rows(R.rowbuf.data(), s, pl, m, w, item.y, lane);
            }
            for (int i = 0; i < 64; i++)
                if (canary[i] != (unsigned char)(0xa5 ^ i)) { fail("block " + std::to_string(b) + " wrote past its shared memory"); return R; }
        }
    }
    // ---- version 4's pooling kernel (fp32 sums in lookup order)
    R.out.assign((size_t)nbags * s.D, NAN);
    for (int64_t bag = 0; bag < nbags; bag++)
        for (int e = 0; e < s.D; e++) {
            float sum = 0.0f;
            for (int64_t n = offsets[bag]; n < offsets[bag + 1]; n++) sum += R.rowbuf[(size_t)n * s.D + e];
            R.out[(size_t)bag * s.D + e] = to_float(from_float<floatX>(sum));
        }
    return R;
}

// the multi-lookup step against version 3's step, bitwise, for every lane tile, with and without float4 rows
template <int RT, int CW, bool AV>
static std::string check_multi_step(Rng& rng) {
    const int m = RT * 3, k = AV ? 12 : 7, n = CW * 10, r = CW == 4 ? 8 : 5;   // r | n; rows of the product reshaped
    const int q = n / r, ld_in = AV ? k : (k | 1), ld_out = r | 1;
    std::vector<float4> ab((size_t)2 * m * ld_in / 4 + 4), gb((size_t)k * n / 4 + 4);
    float* a = reinterpret_cast<float*>(ab.data());
    float* g = reinterpret_cast<float*>(gb.data());
    for (int i = 0; i < 2 * m * ld_in; i++) a[i] = rng.uniform(-1.0f, 1.0f);
    for (int i = 0; i < k * n; i++) g[i] = rng.uniform(-1.0f, 1.0f);
    const size_t osz = (size_t)m * q * ld_out;
    std::vector<float> o1(2 * osz, NAN), o2(2 * osz, NAN);
    float* outs[2] = {o1.data(), o1.data() + osz};
    const float* ins[2] = {a, a + (size_t)m * ld_in};
    for (int lane = 0; lane < 32; lane++) tt_embedding_forward_warp_step_multi_tiled<2, RT, CW, AV>(outs, r, ld_out, ins, ld_in, g, m, k, n, lane);
    for (int p = 0; p < 2; p++)
        for (int lane = 0; lane < 32; lane++)
            tt_embedding_forward_warp_step_tiled<RT, CW>(o2.data() + p * osz, r, ld_out, ins[p], ld_in, g, m, k, n, false, lane);
    for (size_t i = 0; i < o1.size(); i++)
        if (memcmp(&o1[i], &o2[i], 4) != 0) return "element " + std::to_string(i);
    return "";
}

static void test_v6_multi_step() {
    Rng rng(61);
    std::string why;
    why += check_multi_step<4, 4, true>(rng); why += check_multi_step<2, 4, true>(rng); why += check_multi_step<1, 4, true>(rng);
    why += check_multi_step<4, 4, false>(rng); why += check_multi_step<2, 4, false>(rng); why += check_multi_step<1, 4, false>(rng);
    why += check_multi_step<4, 1, false>(rng); why += check_multi_step<2, 1, false>(rng); why += check_multi_step<1, 1, false>(rng);
    report(why.empty(), "version 6's two-lookup step = version 3's step on each lookup, bitwise (9 tiles, float4 rows of M too)", why);
}

// version 6's plan and shared-memory layout at the bench shapes, as the header states them
static void test_v6_plan() {
    TtEmbeddingForwardShape s;
    TtEmbeddingForwardPlan6 pl;
    tt_embedding_forward_make_shape(s, {200, 220, 250}, {4, 4, 4}, {32, 32}, 0, 0, 1, 512, 20, 0.0);
    std::string why = tt_embedding_forward_make_plan6(s, pl);
    report(why.empty() && pl.g.ncores == 1 && pl.g.core[0] == 1 && pl.n_ng == 2 && pl.ng_core[0] == 0 && pl.ng_core[1] == 2 &&
               pl.stage_per_lookup == 256 && pl.stage_off[2] == 128 && pl.mid0 == 528 && pl.mid1 == 0 && pl.slot_floats == 592 &&
               pl.avec1 == 1 && tt_embedding_forward_smem6_bytes(s, pl, 8) == 70992 && tt_embedding_forward_v6_max_items(s, pl, 16) == 860,
           "version 6 at the default: buckets by core 1, stages cores 0 and 2 (256 floats per lookup), M_1 in 528 floats, "
           "70,992 bytes per 256-thread block, <= 860 items", why);
    report(tt_embedding_forward_plan6_smem_bytes(pl) == 4 * (220 + 2048 + 65), "version 6's planner at the default: 220 counters + scan space");
    tt_embedding_forward_make_shape(s, {20, 22, 25, 20}, {4, 2, 2, 4}, {32, 32, 32}, 0, 0, 1, 512, 20, 0.0);
    why = tt_embedding_forward_make_plan6(s, pl);
    report(why.empty() && pl.g.ncores == 2 && pl.grouped[1] && pl.grouped[2] && pl.n_ng == 2 && pl.stage_per_lookup == 256 &&
               pl.mid0 == 264 && pl.mid1 == 528 && pl.slot_floats == 856,
           "version 6 on the 4-core shape: cores 1 and 2 shared per item, cores 0 and 3 staged, M_1 8x33, M_2 16x33", why);
    tt_embedding_forward_make_shape(s, {20, 20, 25, 25, 40}, {2, 2, 2, 2, 4}, {8, 16, 32, 64}, 0, 0, 1, 512, 20, 0.0);
    why = tt_embedding_forward_make_plan6(s, pl);
    report(why.empty() && pl.grouped[3] && pl.grouped[2] && pl.n_ng == 3 && pl.stage_per_lookup == 16 + 256 + 256 &&
               pl.mid0 == 1040 && pl.mid1 == 264 && pl.avec1 == 1,
           "version 6 on the 5-core shape: cores 3 and 2 shared, cores 0, 1, 4 staged, odd-step buffer 1040, even 264, "
           "step 1 (per lookup) reads M_0 as float4 (R_1 = 8)", why);
    // the carved layout ends exactly at the byte count the launcher asks for, for every block size
    bool ok = true;
    for (int w = 1; w <= 32; w++) {
        std::vector<float4> buf(tt_embedding_forward_smem6_bytes(s, pl, w) / 16 + 1);
        const TtEmbeddingForwardV6Smem m = tt_embedding_forward_v6_carve(buf.data(), pl, w * TT_EMBEDDING_FORWARD_V6_P);
        const char* end = reinterpret_cast<const char*>(m.slots + (size_t)w * TT_EMBEDDING_FORWARD_V6_P * pl.slot_floats);
        ok = ok && end - reinterpret_cast<const char*>(buf.data()) == (ptrdiff_t)tt_embedding_forward_smem6_bytes(s, pl, w) &&
             reinterpret_cast<uintptr_t>(m.gs[0]) % 16 == 0 && reinterpret_cast<uintptr_t>(m.stage) % 16 == 0 &&
             reinterpret_cast<uintptr_t>(m.slots) % 16 == 0 && reinterpret_cast<const char*>(m.np + 1) <= reinterpret_cast<const char*>(m.gs[0]);
    }
    report(ok, "version 6's shared-memory carve: 16-byte aligned areas, ends at smem6_bytes for 1..32 warps");
}

// version 6 end to end on the CPU over shapes like tests/gpu_cases.txt's
static void test_v6_runs() {
    struct Case { std::vector<int> p, q, r; int tables, B, L; double alpha; bool ragged; std::vector<int> warps; const char* what; };
    std::vector<Case> cases = {
        {{200, 220, 250}, {4, 4, 4}, {32, 32}, 1, 512, 20, 0.0, false, {8, 32}, "FBTT's default"},
        {{20, 22, 25}, {4, 4, 4}, {32, 32}, 1, 37, 20, 1.15, false, {1, 8}, "Zipf 1.15 (duplicates)"},
        {{7, 9, 5}, {2, 3, 2}, {4, 6}, 1, 13, 7, 0.0, false, {1, 2, 8}, "odd ranks"},
        {{31, 17}, {8, 8}, {16}, 1, 33, 11, 0.0, false, {1, 4, 8}, "T=2, core 0 shared"},
        {{5, 6, 4, 3}, {4, 2, 2, 4}, {8, 8, 8}, 3, 17, 5, 0.0, true, {2, 8}, "T=4, 3 tables, ragged"},
        {{4, 5, 3, 6, 2}, {2, 2, 2, 2, 4}, {8, 16, 32, 64}, 2, 7, 9, 0.0, false, {1, 4}, "T=5 ranks 8,16,32,64"},
        {{2, 3, 2, 3, 2, 3}, {2, 2, 1, 3, 2, 2}, {2, 3, 4, 3, 2}, 2, 9, 6, 0.0, true, {1, 8}, "T=6, ragged"},
        {{3, 2, 3, 2, 3, 2}, {2, 2, 2, 2, 2, 2}, {8, 8, 16, 8, 8}, 1, 5, 3, 0.0, false, {2}, "T=6 ranks 8,8,16,8,8"},
        {{11, 13}, {3, 5}, {7}, 1, 9, 5, 0.0, false, {1, 8}, "T=2 rank 7"},
        {{20, 22, 25, 20}, {4, 2, 2, 4}, {32, 32, 32}, 3, 64, 7, 0.0, true, {4, 8}, "4-core bench factors, 3 tables, ragged"},
        {{5, 6, 7, 3}, {4, 2, 2, 4}, {32, 32, 32}, 1, 40, 10, 0.0, false, {4, 8}, "T=4, cores 1 and 2 both shared"},
        {{4, 5, 3, 6, 2}, {2, 2, 2, 2, 4}, {8, 16, 32, 64}, 2, 30, 9, 0.0, true, {2, 8}, "T=5, cores 3 and 2 both shared, ragged"},
        {{20, 20, 25, 25, 40}, {2, 2, 2, 2, 4}, {8, 16, 32, 64}, 1, 64, 10, 0.0, false, {8}, "5-core bench factors"},
        {{30, 40, 50}, {4, 4, 4}, {16, 16}, 1, 1, 3000, 0.0, false, {8}, "one bag of 3000"},
        {{3000, 3000, 1000}, {4, 4, 4}, {8, 8}, 1, 16, 4, 0.0, false, {8}, "64-bit row ids, 3000 keys"},
        {{2, 3}, {8, 8}, {16}, 1, 50, 20, 0.0, false, {1, 8, 32}, "2 keys of ~500 lookups"},
        {{7, 5, 3}, {2, 2, 2}, {4, 4}, 2, 5, 0, 0.0, false, {8}, "no lookups (L=0)"},
    };
    Rng rng(77);
    int two_grouped = 0, avec = 0, dups = 0, T_seen[7] = {0};
    for (const Case& c : cases) {
        Problem P;
        if (!make_problem(P, c.p, c.q, c.r, c.tables, c.B, c.L, rng)) continue;
        const TtEmbeddingForwardShape& s = P.s;
        const int64_t nbags = (int64_t)s.tables * s.B;
        {
            TtEmbeddingForwardPlan6 pl;
            if (tt_embedding_forward_make_plan6(s, pl).empty()) {
                two_grouped += pl.g.ncores == 2;
                avec += pl.avec1;
                T_seen[s.T]++;
            }
        }
        std::vector<int64_t> indices = make_bag_indices(nbags, s.L, s.E, c.alpha, rng);
        std::vector<int64_t> offsets = tt_embedding_forward_make_offsets(s, c.ragged, rng);
        std::vector<float> ref((size_t)nbags * s.D);
        tt_embedding_forward_cpu(ref.data(), P.ptrs.data(), indices.data(), offsets.data(), s);
        // version 3's engine: every lookup's row (the rows version 6 must reproduce bitwise)
        std::vector<float> rows3((size_t)std::max<int64_t>(s.nnz, 1) * s.D);
        {
            int tbl = 0;
            std::vector<float> last(s.D_pad);
            for (int64_t n = 0; n < s.nnz; n++) {
                while (tbl + 1 < s.tables && offsets[(size_t)(tbl + 1) * s.B] <= n) tbl++;
                const float* g[6];
                for (int t = 0; t < s.T; t++) g[t] = tt_embedding_forward_slice_ptr(P.c, s, tbl, indices[n], t);
                emulate_warp_chain(s, g, last.data(), false);
                std::copy(last.begin(), last.begin() + s.D, rows3.begin() + n * s.D);
            }
        }
        const std::string name = std::string("version 6 (CPU emulation), ") + c.what + " " + P.name + ",B" + std::to_string(c.B) +
                                 ",L" + std::to_string(c.L);
        std::vector<float> first;
        for (size_t wi = 0; wi < c.warps.size(); wi++) {
            for (int order = 0; order < 2; order++) {
                if (order == 1 && wi > 0) continue;               // a second atomic order at the first block size
                const int warps = c.warps[wi];
                V6Run R = emulate_v6(P, indices, offsets, warps, 1000 + order);
                char tag[96];
                snprintf(tag, sizeof tag, " [block %d, scatter order %d: %d items of <= %d, %d primaries for %lld lookups]",
                         warps * 32, order, R.items, warps * TT_EMBEDDING_FORWARD_V6_P, R.primaries, (long long)s.nnz);
                if (!R.why.empty()) { report(false, name + tag, R.why); continue; }
                std::string why_rows;
                for (int64_t n = 0; n < s.nnz && why_rows.empty(); n++)
                    if (memcmp(&R.rowbuf[n * s.D], &rows3[n * s.D], sizeof(float) * s.D) != 0) why_rows = "row of lookup " + std::to_string(n);
                ValidateStats st = compare_arrays(R.out.data(), ref.data(), R.out.size(), TT_EMBEDDING_FORWARD_ATOL, TT_EMBEDDING_FORWARD_RTOL);
                dups += R.primaries < s.nnz;
                bool same = true;
                if (first.empty()) first = R.out;
                else same = memcmp(first.data(), R.out.data(), first.size() * sizeof(float)) == 0;
                report(why_rows.empty() && st.failures == 0 && same, name + tag,
                       why_rows + (st.failures ? " " + std::to_string(st.failures) + " pooled values off" : "") +
                           (same ? "" : " output differs from the first run"));
            }
        }
    }
    bool all_T = true;
    for (int T = 2; T <= 6; T++) all_T = all_T && T_seen[T] > 0;
    report(all_T && two_grouped >= 2 && avec >= 2 && avec < (int)cases.size() && dups >= 2,
           "version 6's emulated cases cover T = 2..6, two shared cores (" + std::to_string(two_grouped) + " cases), float4 M_0 rows and "
           "scalar ones, items with duplicates (" + std::to_string(dups) + " runs)");
}

// version 7 on the CPU: for a bag of several lookups, every lane's partials (tt_embedding_forward_v7_lane on
// the staged, transposed G_0) summed over the lookups, then across the R_2 / 4 lanes of each a_1 in the
// kernel's xor-shuffle order; the bag's row against the double reference. Also the shape filter.
static void test_v7() {
    struct Case { std::vector<int> p, q, r; };
    std::vector<Case> cases = {
        {{200, 220, 250}, {4, 4, 4}, {32, 32}},     // FBTT's default: 32 active lanes, 8 per a_1
        {{5, 7, 3}, {4, 2, 4}, {12, 64}},           // R_1 = 12: a padded batch; R_2 = 64: 16 lanes per a_1
        {{5, 6, 4}, {4, 4, 4}, {8, 8}},             // q_1 R_2 = 32: lanes 8..31 idle
        {{3, 5, 7}, {4, 1, 4}, {40, 128}},          // one a_1 over the whole warp
        {{4, 3, 5}, {4, 8, 4}, {3, 4}},             // R_2 = 4: no shuffle at all
    };
    Rng rng(71);
    for (const Case& c : cases) {
        Problem P;
        if (!make_problem(P, c.p, c.q, c.r, 2, 1, 1, rng)) continue;
        const TtEmbeddingForwardShape& s = P.s;
        std::string why = tt_embedding_forward_v7_reason(s);
        if (!why.empty()) { report(false, P.name + ": version 7 accepts the shape", why); continue; }
        const int R1 = s.R[1], R2 = s.R[2], ncols = s.q[1] * R2;
        std::vector<float> g0t((size_t)tt_embedding_forward_v7_r1_pad(R1) * 4, NAN);
        float part[32][4][4] = {};
        std::vector<double> want(s.D, 0.0), row(s.D);
        const int tbl = 1;
        for (int n = 0; n < 5; n++) {                              // one bag of 5 lookups
            const int64_t idx = n == 0 ? s.E - 1 : rng.randint(0, s.E);
            tt_embedding_forward_row_cpu(row.data(), P.ptrs.data(), s, tbl, idx);
            for (int d = 0; d < s.D; d++) want[d] += row[d];
            for (int lane = 0; lane < 32; lane++)
                tt_embedding_forward_v7_stage_g0<4>(g0t.data(), tt_embedding_forward_slice_ptr(P.c, s, tbl, idx, 0), R1, lane);
            for (int lane = 0; lane < 32; lane++)
                tt_embedding_forward_v7_lane<4, 4>(part[lane], g0t.data(), tt_embedding_forward_slice_ptr(P.c, s, tbl, idx, 1),
                                                   tt_embedding_forward_slice_ptr(P.c, s, tbl, idx, 2), R1, R2, ncols, lane);
        }
        for (int off = 1; off < R2 / 4; off *= 2) {                // __shfl_xor_sync: every lane reads the old value
            float next[32][4][4];
            for (int lane = 0; lane < 32; lane++)
                for (int a = 0; a < 4; a++)
                    for (int b = 0; b < 4; b++) next[lane][a][b] = part[lane][a][b] + part[lane ^ off][a][b];
            memcpy(part, next, sizeof part);
        }
        std::vector<float> got(s.D, NAN);
        for (int lane = 0; lane < 32; lane++) {
            const int col = 4 * lane, a1 = col / R2, k2 = col % R2;
            if (k2 != 0 || col >= ncols) continue;
            for (int a0 = 0; a0 < 4; a0++)
                for (int a2 = 0; a2 < 4; a2++) got[(a0 * s.q[1] + a1) * 4 + a2] = part[lane][a0][a2];
        }
        double scale = 0.0;
        for (int d = 0; d < s.D; d++) scale = std::max(scale, fabs(want[d]));
        std::string bad;
        for (int d = 0; d < s.D; d++)
            if (!close(got[d], want[d], 1e-5 * std::max(scale, 1.0), 0)) bad += " d" + std::to_string(d);
        report(bad.empty(), P.name + ": version 7's lanes + shuffle tree (emulated) = pooled reference", bad.substr(0, 200));
    }
    // the filter: shapes version 7 must refuse, each with its reason
    struct Bad { std::vector<int> p, q, r; const char* needle; };
    std::vector<Bad> bads = {
        {{20, 22, 25, 20}, {4, 2, 2, 4}, {32, 32, 32}, "three cores"},
        {{5, 6, 4}, {2, 4, 8}, {8, 8}, "q_0 = q_2 = 4"},
        {{5, 6, 4}, {4, 4, 4}, {8, 12}, "power of two"},
        {{5, 6, 4}, {4, 8, 4}, {8, 32}, "q_1 * R_2 <= 128"},
    };
    for (const Bad& b : bads) {
        Problem P;
        if (!make_problem(P, b.p, b.q, b.r, 1, 1, 1, rng)) continue;
        const std::string why = tt_embedding_forward_v7_reason(P.s);
        report(why.find(b.needle) != std::string::npos, P.name + ": version 7 refuses it naming '" + std::string(b.needle) + "'", why);
    }
}

// version 9's division-free digits against '/' and '%': every divisor shape of the op (strides and factors
// of several chains, 1 included) and x at both ends of [0, 2^32) plus random values
static void test_fast_digits() {
    struct Case { std::vector<int> p; };
    std::vector<Case> cases = {{{200, 220, 250}}, {{3, 5000, 4}}, {{1, 7, 1}}, {{65536, 65535, 1}}, {{2, 3, 715827882}}, {{4096, 4095, 256}}};
    Rng rng(91);
    for (const Case& c : cases) {
        TtEmbeddingForwardShape s;
        std::vector<int> q = {1, 1, 1}, r = {1, 1};
        std::string why = tt_embedding_forward_make_shape(s, c.p, q, r, 0, 0, 1, 1, 1, 0.0);
        if (!why.empty()) { report(false, "fast digits: make_shape", why); continue; }
        TtEmbeddingForwardFastDigits f;
        if (!tt_embedding_forward_make_fast_digits(s, f)) { report(false, "fast digits accepted for prod p < 2^32"); continue; }
        std::string bad;
        std::vector<uint64_t> xs = {0, 1, (uint64_t)s.prod_p - 1, (uint64_t)s.prod_p / 2, 0xffffffffull};
        for (int i = 0; i < 20000; i++) xs.push_back((uint64_t)rng.randint(0, (int64_t)1 << 32));
        for (uint64_t x : xs)
            for (int t = 0; t < 3; t++) {
                const uint64_t want = (x / (uint64_t)s.stride[t]) % (uint64_t)s.p[t];
                if (tt_embedding_forward_fast_digit(f, x, t) != want && bad.size() < 200)
                    bad += " x=" + std::to_string(x) + ",t=" + std::to_string(t);
            }
        report(bad.empty(), "fast digits (p " + std::to_string(c.p[0]) + "," + std::to_string(c.p[1]) + "," + std::to_string(c.p[2]) +
                                ") = '/' and '%' on 20,005 values of x < 2^32", bad);
    }
    TtEmbeddingForwardShape big;
    std::string why = tt_embedding_forward_make_shape(big, {70000, 70000, 2}, {1, 1, 1}, {1, 1}, 0, 0, 1, 1, 1, 0.0);
    TtEmbeddingForwardFastDigits f;
    report(why.empty() && !tt_embedding_forward_make_fast_digits(big, f), "fast digits refused when prod p >= 2^32 (int64 division then)");
}

// version 10's tile, lane by lane: G_1 in fragment order (hi and lo), each lane's A values from its KL contiguous
// k of G_0's rows, the 3xTF32 mma per n-tile (emulate_mma, by the PTX layouts), step 2 on the accumulators, the
// quad sums and the writes shared out over the quad; every element of the 4 rows must be written once and match
// the double chain. Also: the fragment-order positions are a permutation, and the k mapping is one too.
static void test_v10(int KS, int nlookups, Rng& rng) {
    const int Q1 = 4, JT = KS, R1 = 8 * KS, R2 = 8 * JT, NCOLS = Q1 * R2, KL = 2 * KS, D = 4 * Q1 * 4;
    const std::string name = "version 10 tile (R_1 = R_2 = " + std::to_string(R1) + ", " + std::to_string(nlookups) + " lookups)";
    std::vector<float> g1 = make_random_floats((size_t)R1 * NCOLS, rng, -1.0f, 1.0f);
    std::vector<float> g0 = make_random_floats((size_t)4 * 4 * R1, rng, -1.0f, 1.0f);    // [lookup][a_0][k_1]
    std::vector<float> g2 = make_random_floats((size_t)4 * R2 * 4, rng, -1.0f, 1.0f);    // [lookup][k_2][a_2]
    // the fragment-order arrays (and the permutation checks)
    std::vector<float> bhi((size_t)R1 * NCOLS, NAN), blo((size_t)R1 * NCOLS, NAN);
    std::vector<int> hits((size_t)R1 * NCOLS, 0);
    for (int k = 0; k < R1; k++)
        for (int n = 0; n < NCOLS; n++) {
            const int pos = tt_embedding_forward_v10_b_pos(KS, k, n);
            if (pos < 0 || pos >= R1 * NCOLS) { report(false, name, "b_pos out of range"); return; }
            hits[pos]++;
            float hi, lo;
            tt_embedding_forward_v10_split(g1[(size_t)k * NCOLS + n], hi, lo);
            bhi[pos] = hi;
            blo[pos] = lo;
        }
    for (int h : hits) if (h != 1) { report(false, name, "fragment positions are not a permutation"); return; }
    std::vector<int> khits(R1, 0);
    for (int st = 0; st < KS; st++)
        for (int c = 0; c < 8; c++) khits[tt_embedding_forward_v10_k(KS, st, c)]++;
    for (int h : khits) if (h != 1) { report(false, name, "the k of (k-step, column) is not a permutation"); return; }
    // the lanes
    float x[32][2][16] = {}, acc[32][4][2][4] = {};
    for (int lane = 0; lane < 32; lane++) {
        const int group = lane >> 2, tig = lane & 3;
        for (int h = 0; h < 2; h++) {
            const int slot = (group >> 2) + 2 * h;
            for (int e = 0; e < KL; e++) x[lane][h][e] = slot < nlookups ? g0[((size_t)slot * 4 + (group & 3)) * R1 + KL * tig + e] : 0.0f;
        }
    }
    for (int jj = 0; jj < JT; jj++)
        for (int b = 0; b < Q1; b++) {
            const int j = b * JT + jj;
            float big[32][4] = {}, small[32][4] = {};
            for (int st = 0; st < KS; st++) {
                float ahi[32][4], alo[32][4], bh[32][2], bl[32][2];
                for (int lane = 0; lane < 32; lane++) {
                    for (int r = 0; r < 4; r++) tt_embedding_forward_v10_split(x[lane][r & 1][2 * st + (r >> 1)], ahi[lane][r], alo[lane][r]);
                    for (int e = 0; e < 2; e++) {
                        bh[lane][e] = bhi[(size_t)(j * 32 + lane) * KL + 2 * st + e];
                        bl[lane][e] = blo[(size_t)(j * 32 + lane) * KL + 2 * st + e];
                    }
                }
                emulate_mma(small, alo, bh);
                emulate_mma(small, ahi, bl);
                emulate_mma(big, ahi, bh);
            }
            for (int lane = 0; lane < 32; lane++) {
                const int group = lane >> 2, tig = lane & 3;
                for (int h = 0; h < 2; h++) {
                    const int slot = (group >> 2) + 2 * h;
                    for (int e = 0; e < 2; e++) {
                        const int k2 = 8 * jj + 2 * tig + e;
                        const float m1 = big[lane][2 * h + e] + small[lane][2 * h + e];
                        for (int c = 0; c < 4; c++)
                            acc[lane][b][h][c] = fmaf(m1, slot < nlookups ? g2[((size_t)slot * R2 + k2) * 4 + c] : 0.0f, acc[lane][b][h][c]);
                    }
                }
            }
        }
    // quad sums and the writes
    std::vector<float> rows((size_t)4 * D, NAN);
    std::vector<int> written((size_t)4 * D, 0);
    for (int lane = 0; lane < 32; lane++) {
        const int group = lane >> 2, tig = lane & 3, q0 = lane & ~3;
        for (int h = 0; h < 2; h++) {
            const int slot = (group >> 2) + 2 * h;
            if (slot >= nlookups) continue;
            for (int b = 0; b < Q1; b++) {
                if (((2 * b + h) & 3) != tig) continue;
                for (int c = 0; c < 4; c++) {
                    const float sum = (acc[q0][b][h][c] + acc[q0 + 1][b][h][c]) + (acc[q0 + 2][b][h][c] + acc[q0 + 3][b][h][c]);
                    const int d = ((group & 3) * Q1 + b) * 4 + c;
                    rows[(size_t)slot * D + d] = sum;
                    written[(size_t)slot * D + d]++;
                }
            }
        }
    }
    std::string bad;
    for (int slot = 0; slot < nlookups; slot++)
        for (int a0 = 0; a0 < 4; a0++)
            for (int a1 = 0; a1 < Q1; a1++)
                for (int a2 = 0; a2 < 4; a2++) {
                    double want = 0.0;
                    for (int k2 = 0; k2 < R2; k2++) {
                        double m1 = 0.0;
                        for (int k1 = 0; k1 < R1; k1++)
                            m1 += (double)g0[((size_t)slot * 4 + a0) * R1 + k1] * (double)g1[(size_t)k1 * NCOLS + a1 * R2 + k2];
                        want += m1 * (double)g2[((size_t)slot * R2 + k2) * 4 + a2];
                    }
                    const size_t i = (size_t)slot * D + (a0 * Q1 + a1) * 4 + a2;
                    if (written[i] != 1 || !close(rows[i], want, TT_EMBEDDING_FORWARD_ATOL, TT_EMBEDDING_FORWARD_RTOL)) {
                        if (bad.size() < 200) bad += " lookup " + std::to_string(slot) + " d " + std::to_string(i % D) + " written " +
                                                     std::to_string(written[i]) + " got " + std::to_string(rows[i]) + " want " + std::to_string(want);
                    }
                }
    for (size_t i = (size_t)nlookups * D; i < rows.size(); i++)
        if (written[i] != 0 && bad.size() < 200) bad += " a padding slot was written";
    report(bad.empty(), name + ": every element written once, within the FP32 tolerance of the double chain", bad);
}

static void test_v10_filter() {
    TtEmbeddingForwardShape s;
    tt_embedding_forward_make_shape(s, {200, 220, 250}, {4, 4, 4}, {32, 32}, 0, 0, 1, 512, 20, 0.0);
    report(tt_embedding_forward_v10_reason(s).empty(), "version 10 runs FBTT's default");
    tt_embedding_forward_make_shape(s, {30, 40, 50}, {4, 4, 4}, {16, 16}, 0, 0, 1, 1, 3, 0.0);
    report(tt_embedding_forward_v10_reason(s).empty(), "version 10 runs ranks 16,16");
    const struct { std::vector<int> p, q, r; } no[] = {{{20, 22, 25}, {4, 4, 4}, {32, 16}}, {{20, 22, 25}, {4, 2, 4}, {32, 32}},
                                                      {{20, 22, 25, 20}, {4, 2, 2, 4}, {32, 32, 32}}, {{20, 22, 25}, {2, 4, 8}, {32, 32}}};
    for (const auto& c : no) {
        tt_embedding_forward_make_shape(s, c.p, c.q, c.r, 0, 0, 1, 1, 1, 0.0);
        const std::string why = tt_embedding_forward_v10_reason(s);
        report(!why.empty() && why.find("version 10 is compiled for") != std::string::npos, "version 10 refuses an uncompiled shape: " + why);
    }
}

// version 11's scan mask: 8 uint16 digits per vector, two per 32-bit compare, positions clipped to [cursor,
// seg_hi); against a per-position check on random digits (keys 0, 65535 and a middle one planted often) and
// every clipping case (cursor and seg_hi inside, before and after the vector)
static void test_v11_mask() {
    Rng rng(111);
    std::string bad;
    int checked = 0;
    for (int trial = 0; trial < 20000; trial++) {
        const int keys[3] = {0, 65535, 1234};
        const int i1 = keys[trial % 3];
        uint16_t d[8];
        for (int e = 0; e < 8; e++) d[e] = rng.randint(0, 3) == 0 ? (uint16_t)i1 : (uint16_t)rng.randint(0, 65536);
        uint32_t w[4];
        for (int k = 0; k < 4; k++) w[k] = (uint32_t)d[2 * k] | ((uint32_t)d[2 * k + 1] << 16);
        const int64_t v = rng.randint(0, 1000);
        const int64_t cursor = v * 8 + rng.randint(-10, 11), seg_hi = v * 8 + rng.randint(-2, 14);
        unsigned want = 0;
        for (int e = 0; e < 8; e++) {
            const int64_t p = v * 8 + e;
            if (d[e] == i1 && p >= cursor && p < seg_hi) want |= 1u << e;
        }
        const unsigned got = tt_embedding_forward_v11_match_mask(w, i1, v, cursor, seg_hi);
        checked++;
        if (got != want && bad.size() < 200)
            bad += " trial " + std::to_string(trial) + ": got " + std::to_string(got) + " want " + std::to_string(want);
    }
    report(bad.empty(), "version 11's scan mask = a per-position check (" + std::to_string(checked) + " vectors)", bad);
}

int main() {
    test_worked_example();
    test_random_shapes();
    test_pooled();
    test_validator();
    test_bag_validator();
    test_default_counts();
    test_group_keys();
    test_digits();
    test_tc_plan();
    {
        Rng rng(21);
        test_tc_run({200, 220, 250}, {4, 4, 4}, {32, 32}, 5, rng);         // 20 rows: a full and a partial tile
        test_tc_run({200, 220, 250}, {4, 4, 4}, {32, 32}, 1, rng);
        test_tc_run({20, 22, 25, 20}, {4, 2, 2, 4}, {32, 32, 32}, 7, rng);  // n = 64: two column groups
        test_tc_run({5, 4, 5, 5, 4}, {2, 2, 2, 2, 4}, {8, 16, 32, 64}, 3, rng);   // h = 3: phase A runs
        test_tc_run({6, 5, 7}, {3, 8, 2}, {8, 8}, 4, rng);                  // m = 3 rows per lookup, n = 16 + 48
        test_tc_run({3, 7, 5, 4}, {2, 2, 3, 2}, {8, 24, 8}, 6, rng);        // h = 2, n = 24: a partial column group
        test_tc_run({9, 7}, {2, 16}, {16}, 5, rng);                         // h = T-1: the GEMM writes the rows
    }
    test_tf32_budget();
    test_v6_multi_step();
    test_v6_plan();
    test_v6_runs();
    test_v7();
    test_fast_digits();
    {
        Rng rng(101);
        test_v10(4, 4, rng);
        test_v10(4, 3, rng);        // a partial tile: slot 3's rows are zeros and not written
        test_v10(2, 4, rng);
        test_v10(2, 1, rng);
    }
    test_v10_filter();
    test_v11_mask();
    printf("%s\n", failures ? "SOME TESTS FAILED" : "all tests passed");
    return failures ? 1 : 0;
}
