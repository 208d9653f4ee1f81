// CPU tests of tt_embedding_forward (no GPU): the chain-product reference against the spec's explicit sum
// formula (an independent implementation, here), the spec's worked example computed by hand, T = 2..6 and
// ranks up to 128, the shape and bag validators' messages, the FLOP/byte formulas at FBTT's default, and the
// host-callable pieces of the GPU versions run on the CPU: version 1's odometer sum, version 3's warp step engine
// (a warp emulated lane by lane, inside buffers of the sizes the kernel allocates), version 2's pointer arrays
// through a column-major reference GEMM with the launcher's exact cuBLAS arguments, version 4's lane split and
// shuffle tree on whole bags and its shape filter, the tensor-core tile of versions 5 and 6 (fragment layouts,
// 3xTF32 split, step 2 on the accumulators, the quad's writes) lane by lane and its filter, version 6's scan
// mask, its column tiles (copy, staging, lane step, store) row by row and their filter, and version 6's dispatch:
// at every shape of the grid it runs (never skips) with some block size, the column-tile kernel at rank 128.
#define NO_MAIN
#include "test_util.h"
#include "../dev/cuda/tt_embedding_forward.cu"

// the op's two checks in its order (tt_embedding.h's config check, then the forward's own limits) -> the shape
static std::string shape_of(TtEmbeddingForwardShape& s, const std::vector<int>& p, const std::vector<int>& q, const std::vector<int>& r,
                            int64_t E, int D, int tables, int B, int L) {
    TtEmbeddingConfig c;
    c.p = p; c.q = q; c.ranks = r; c.E = E; c.D = D; c.tables = tables; c.B = B; c.L = L;
    const std::string why = tt_embedding_check_config(c);
    return why.empty() ? tt_embedding_forward_make_shape(s, c) : why;
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
    std::string why = shape_of(P.s, p, q, ranks, 0, 0, tables, B, L);
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
        report(why_v34.empty(), P.name + ": version 3's warp chain (emulated) = reference (fp32)", cut(why_v34));
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
    TtEmbeddingConfig c;
    c.p = {4, 3, 5}; c.q = {2, 3, 2}; c.ranks = {3, 2}; c.tables = tables; c.B = B; c.L = L; c.ragged = true;
    report(tt_embedding_check_config(c).empty(), "the pooled test's config passes the check");
    std::vector<int64_t> indices, offsets;
    tt_embedding_make_bags(c, rng, indices, offsets);
    const int64_t nbags = (int64_t)tables * B;
    report(tt_embedding_validate_bags(indices, offsets, nbags, s.E).empty(), "ragged offsets pass the bag validator");
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
    struct Case { std::vector<int> p, q, r; int64_t E; int D; int tables, B, L; const char* want; };
    const std::vector<int> P3 = {200, 220, 250}, Q3 = {4, 4, 4}, R3 = {32, 32};
    std::vector<Case> cases = {
        {P3, Q3, R3, 0, 32, 1, 512, 20, "prod q (64) must equal D (32)"},
        {P3, {4, 4, 8}, R3, 0, 64, 1, 512, 20, "prod q (128) must equal D (64)"},
        {P3, Q3, R3, 20000000, 0, 1, 512, 20, "prod p (11000000) must be >= E (20000000)"},
        {P3, Q3, {32}, 0, 0, 1, 512, 20, "ranks has 1 entries; T - 1 = 2 inner ranks are needed"},
        {P3, Q3, {32, 32, 32}, 0, 0, 1, 512, 20, "ranks has 3 entries; T - 1 = 2"},
        {P3, {4, 16}, R3, 0, 0, 1, 512, 20, "len(q) (2) must equal len(p) = T (3)"},
        {{11000000}, {64}, {}, 0, 0, 1, 512, 20, "the number of cores T = len(p) (1) must be 2..6"},
        {{2, 2, 2, 2, 2, 2, 2}, {1, 1, 1, 1, 1, 1, 64}, {1, 1, 1, 1, 1, 1}, 0, 0, 1, 512, 20, "the number of cores T = len(p) (7) must be 2..6"},
        {P3, Q3, {32, 0}, 0, 0, 1, 512, 20, "ranks entries must be >= 1"},
        {{200, 0, 250}, Q3, R3, 0, 0, 1, 512, 20, "p and q entries must be >= 1"},
        {P3, Q3, R3, 0, 0, 0, 512, 20, "tables (0) and B (512) must be >= 1"},
        {P3, Q3, R3, 0, 0, 1, 512, -1, "L (-1) >= 0"},
        {{64, 64}, {1024, 2048}, {1}, 0, 0, 1, 512, 20, "D = prod q must be <= 2^20"},
        {P3, Q3, R3, 0, 0, 65536, 65536, 20, "must fit in 32 bits"},
        {P3, Q3, {5000, 5000}, 0, 0, 1, 512, 20, "must be <= 2^24"},
        // 64-bit products that would wrap or exceed what any device holds: a core's floats, output and row values
        {{1048576, 2}, {16, 16}, {128}, 0, 0, 1024, 1, 1, "core 0 holds tables*p_0*slice"},
        {{2, 2}, {16, 128}, {1}, 0, 0, 1, 1073741824, 1, "must be < 2^38"},
        {{2, 2}, {16, 128}, {1}, 0, 0, 1, 16777216, 100, "row values) < 2^40"},
    };
    for (const Case& c : cases) {
        std::string got = shape_of(s, c.p, c.q, c.r, c.E, c.D, c.tables, c.B, c.L);
        report(got.find(c.want) != std::string::npos, std::string("validator names '") + c.want + "'", "got '" + got + "'");
    }
    struct Fine { std::vector<int> p, q, r; int64_t E; int D; };
    std::vector<Fine> fine = {{P3, Q3, R3, 0, 0}, {P3, Q3, R3, 11000000, 64}, {P3, Q3, R3, 5, 0},
                              {{20, 22, 25, 20}, {4, 2, 2, 4}, {32, 32, 32}, 0, 64},
                              {{20, 20, 25, 25, 40}, {2, 2, 2, 2, 4}, {8, 16, 32, 64}, 0, 64},
                              {{2, 3, 2, 3, 2, 3}, {2, 2, 2, 2, 2, 2}, {3, 3, 3, 3, 3}, 0, 0}};
    for (const Fine& f : fine) {
        std::string got = shape_of(s, f.p, f.q, f.r, f.E, f.D, 1, 512, 20);
        report(got.empty(), "validator accepts T=" + std::to_string(f.p.size()) + " E=" + std::to_string(f.E), got);
    }
}

// the bag validator: an index >= E (or < 0), broken offsets
static void test_bag_validator() {
    std::vector<int64_t> idx = {0, 5, 9, 3}, off = {0, 2, 2, 4};
    report(tt_embedding_validate_bags(idx, off, 3, 10).empty(), "bag validator accepts valid bags (an empty one included)");
    std::string got = tt_embedding_validate_bags({0, 5, 10, 3}, off, 3, 10);
    report(got.find("index 10 at lookup 2") != std::string::npos && got.find("< E (10)") != std::string::npos,
           "bag validator: an index >= E is named with its position", got);
    got = tt_embedding_validate_bags({0, -1, 9, 3}, off, 3, 10);
    report(got.find("index -1 at lookup 1") != std::string::npos, "bag validator: a negative index", got);
    got = tt_embedding_validate_bags(idx, {0, 3, 2, 4}, 3, 10);
    report(got.find("non-decreasing") != std::string::npos, "bag validator: decreasing offsets", got);
    got = tt_embedding_validate_bags(idx, {0, 2, 2, 3}, 3, 10);
    report(got.find("must equal the number of indices (4)") != std::string::npos, "bag validator: offsets end != nnz", got);
    got = tt_embedding_validate_bags(idx, {1, 2, 2, 4}, 3, 10);
    report(got.find("offsets[0] (1) must be 0") != std::string::npos, "bag validator: offsets[0] != 0", got);
    got = tt_embedding_validate_bags(idx, {0, 2, 4}, 3, 10);
    report(got.find("tables*B + 1 = 4") != std::string::npos, "bag validator: wrong number of offsets", got);
}

// FBTT's default: the spec's numbers
static void test_default_counts() {
    TtEmbeddingForwardShape s;
    std::string why = shape_of(s, {200, 220, 250}, {4, 4, 4}, {32, 32}, 0, 0, 1, 512, 20);
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
    report(s.ld[0] == 32 && s.ld[1] == 33 && s.ld[2] == 1 && s.buf_pad[0] == 16 * 33 && s.buf_pad[1] == 0 &&
               tt_embedding_forward_smem_bytes3(s, 8) == 8 * (528 + 64) * 4,
           "default: M_1 kept as 16 rows of stride 33 (odd: no bank conflicts); version 3 keeps 528 + 64 floats per warp");
    // the 4-core and 5-core bench shapes
    shape_of(s, {20, 22, 25, 20}, {4, 2, 2, 4}, {32, 32, 32}, 0, 0, 1, 512, 20);
    report(tt_embedding_forward_flops_per_lookup(s) == 53248.0, "4-core bench shape: 53,248 FLOPs per lookup");
    shape_of(s, {20, 20, 25, 25, 40}, {2, 2, 2, 2, 4}, {8, 16, 32, 64}, 0, 0, 1, 512, 20);
    report(tt_embedding_forward_flops_per_lookup(s) == 82944.0, "5-core bench shape: 82,944 FLOPs per lookup");
    report(tt_embedding_forward_naive_terms(s) > (double)TT_EMBEDDING_FORWARD_MAX_NAIVE_TERMS,
           "5-core bench shape: version 1 skipped (explicit sum too long)");
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

// ---- the tensor-core tile of versions 5 and 6 on the CPU

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

// shapes a version's filter must refuse, each naming its reason
struct Refusal { std::vector<int> p, q, r; const char* needle; };
static void check_refusals(const std::string& who, std::string (*reason)(const TtEmbeddingForwardShape&), const std::vector<Refusal>& cases, Rng& rng) {
    for (const Refusal& b : cases) {
        Problem P;
        if (!make_problem(P, b.p, b.q, b.r, 1, 1, 1, rng)) continue;
        const std::string why = reason(P.s);
        report(why.find(b.needle) != std::string::npos,
               P.name + ": " + who + " refuses it naming '" + std::string(b.needle) + "'", why);
    }
}

// tt_embedding_forward_g1_rows_reduce's xor shuffles over a warp's 32 lanes (every lane reads the old value)
template <int Q0>
static void emulate_g1_rows_reduce(float (&part)[32][Q0][4], int R2) {
    for (int off = 1; off < R2 / 4; off *= 2) {
        float next[32][Q0][4];
        for (int lane = 0; lane < 32; lane++)
            for (int a = 0; a < Q0; a++)
                for (int b = 0; b < 4; b++) next[lane][a][b] = part[lane][a][b] + part[lane ^ off][a][b];
        memcpy(part, next, sizeof part);
    }
}

// version 4's lanes on the CPU: for a bag of several lookups, every lane's partials
// (tt_embedding_forward_g1_rows_lane on G_0 transposed as the kernel stages it, zeros past R_1) summed over the
// lookups, then across the R_2 / 4 lanes of each a_1 in the kernel's xor-shuffle order (the kernel reduces per
// lookup; the sums are linear); the bag's row against the double reference. Also the shape filter.
static void test_v4() {
    struct Case { std::vector<int> p, q, r; };
    std::vector<Case> cases = {
        {{200, 220, 250}, {4, 4, 4}, {32, 32}},     // FBTT's default: 32 active lanes, 8 per a_1
        {{5, 7, 3}, {4, 2, 4}, {12, 64}},           // R_1 = 12: a padded batch; R_2 = 64: 16 lanes per a_1
        {{5, 6, 4}, {4, 4, 4}, {8, 8}},             // q_1 R_2 = 32: lanes 8..31 idle
        {{3, 5, 7}, {4, 1, 4}, {40, 128}},          // one a_1 over the whole warp
        {{4, 3, 5}, {4, 8, 4}, {3, 4}},             // R_2 = 4: no shuffle at all
        {{5, 3, 4}, {4, 8, 4}, {128, 16}},          // R_1 = 128 (EL-Rec's rank): 16 batches of G_1 rows
    };
    Rng rng(71);
    for (const Case& c : cases) {
        Problem P;
        if (!make_problem(P, c.p, c.q, c.r, 2, 1, 1, rng)) continue;
        const TtEmbeddingForwardShape& s = P.s;
        std::string why = tt_embedding_forward_reason4(s);
        if (!why.empty()) { report(false, P.name + ": version 4 accepts the shape", why); continue; }
        const int R1 = s.R[1], R2 = s.R[2], ncols = s.q[1] * R2;
        std::vector<float> g0t((size_t)tt_embedding_forward_r1_pad(R1) * 4, 0.0f);
        float part[32][4][4] = {};
        std::vector<double> want(s.D, 0.0), row(s.D);
        const int tbl = 1;
        for (int n = 0; n < 5; n++) {                              // one bag of 5 lookups
            const int64_t idx = n == 0 ? s.E - 1 : rng.randint(0, s.E);
            tt_embedding_forward_row_cpu(row.data(), P.ptrs.data(), s, tbl, idx);
            for (int d = 0; d < s.D; d++) want[d] += row[d];
            const float* g0 = tt_embedding_forward_slice_ptr(P.c, s, tbl, idx, 0);
            for (int k = 0; k < R1; k++)                           // as tt_embedding_forward_stage_copies stages it
                for (int a0 = 0; a0 < 4; a0++) g0t[k * 4 + a0] = g0[a0 * R1 + k];
            const float* g2[1] = {tt_embedding_forward_slice_ptr(P.c, s, tbl, idx, 2)};
            for (int lane = 0; lane < 32; lane++)
                tt_embedding_forward_g1_rows_lane<4, 4>(part[lane], g0t.data(), tt_embedding_forward_slice_ptr(P.c, s, tbl, idx, 1), g2, R1, R2, ncols, lane);
        }
        emulate_g1_rows_reduce<4>(part, R2);
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
        report(bad.empty(), P.name + ": version 4's lanes + shuffle tree (emulated) = pooled reference", bad.substr(0, 200));
    }
    // the filter: shapes version 4 must refuse, each with its reason
    check_refusals("version 4", tt_embedding_forward_reason4, {
        {{20, 22, 25, 20}, {4, 2, 2, 4}, {32, 32, 32}, "three cores"},
        {{5, 6, 4}, {2, 4, 8}, {8, 8}, "q_0 = q_2 = 4"},
        {{5, 6, 4}, {4, 4, 4}, {8, 12}, "power of two"},
        {{5, 6, 4}, {4, 8, 4}, {8, 32}, "q_1 * R_2 <= 128"},
    }, rng);
}

// version 6's column tiles (rank 128) on the CPU, lane by lane: two groups of lookups that share i_1 (the second group one
// lookup short of LPW), per group and tile the tile as tt_embedding_forward_copy_tile copies it, G_0 as
// tt_embedding_forward_stage_copies stages each slot (padding rows zero, a missing slot NaN), G_2 read from the core,
// version 4's lane step on the stacked rows, the xor-shuffle tree, and each present lookup's store into a
// NaN-poisoned row; every row against the double reference (so a tile's a_1 range, a slot's offsets, and a value no
// tile writes all fail). Ranks 128 and 64 with tiles of one and two a_1, q_1 = 1..4 (a last tile of fewer a_1),
// q_0 = 1, 2, 4, 8, odd R_1.
template <int Q0>
static void test_tiled_case(const std::vector<int>& p, const std::vector<int>& q, const std::vector<int>& r, Rng& rng) {
    constexpr int LPW = tt_embedding_forward_lpw_tiled(Q0), ROWS = Q0 * LPW;
    Problem P;
    if (!make_problem(P, p, q, r, 2, 1, 1, rng)) return;
    const TtEmbeddingForwardShape& s = P.s;
    const std::string why = tt_embedding_forward_reason_tiled(s);
    if (!why.empty()) { report(false, P.name + ": the column-tile kernel accepts the shape", why); return; }
    const int R1 = s.R[1], R2 = s.R[2], q1 = s.q[1], R1p = tt_embedding_forward_r1_pad(R1), tile_a1 = tt_embedding_forward_tile_a1(q1, R2);
    std::vector<float> tile((size_t)R1 * tile_a1 * R2), stage((size_t)R1p * ROWS), got(s.D);
    std::vector<double> want(s.D);
    std::string bad;
    int tiles = 0, rows = 0;
    const int tbl = 1, i1 = s.p[1] - 1;                        // every lookup of a group has the item's i_1
    for (int g = 0; g < 2; g++) {
        const int present = g == 0 ? LPW : LPW - 1;
        int64_t idx[LPW];
        const float* g2[LPW];
        std::fill(stage.begin(), stage.end(), NAN);
        std::fill(stage.begin() + (size_t)R1 * ROWS, stage.end(), 0.0f);   // the kernel zeroes the padding rows
        for (int l = 0; l < LPW; l++) {
            idx[l] = g + l == 0 ? s.E - 1 : rng.randint(0, s.p[0]) * s.stride[0] + (int64_t)i1 * s.stride[1] + rng.randint(0, s.p[2]);
            g2[l] = tt_embedding_forward_slice_ptr(P.c, s, tbl, l < present ? idx[l] : idx[0], 2);
            if (l >= present) continue;
            for (int lane = 0; lane < 32; lane++)
                tt_embedding_forward_stage_copies<Q0>(stage.data() + l * Q0, tt_embedding_forward_slice_ptr(P.c, s, tbl, idx[l], 0), nullptr, R1,
                                                      R2, lane, ROWS);
        }
        std::vector<std::vector<float>> out(present, std::vector<float>(s.D, NAN));
        for (int a1_base = 0; a1_base < q1; a1_base += tile_a1, tiles++) {
            const int n_a1 = std::min(tile_a1, q1 - a1_base), ncols = n_a1 * R2;
            std::fill(tile.begin(), tile.end(), NAN);
            for (int tid = 0; tid < 96; tid++)                 // three warps' threads
                tt_embedding_forward_copy_tile(tile.data(), tt_embedding_forward_slice_ptr(P.c, s, tbl, idx[0], 1), R1, q1, R2, a1_base, n_a1, tid, 96);
            float part[32][ROWS][4] = {};
            for (int lane = 0; lane < 32; lane++)
                tt_embedding_forward_g1_rows_lane<Q0, 4, LPW>(part[lane], stage.data(), tile.data(), g2, R1, R2, ncols, lane);
            emulate_g1_rows_reduce<ROWS>(part, R2);
            for (int l = 0; l < present; l++)
                for (int lane = 0; lane < 32; lane++)
                    tt_embedding_forward_g1_rows_store<Q0>(out[l].data(), part[lane] + l * Q0, q1, R2, a1_base, ncols, lane);
        }
        for (int l = 0; l < present; l++, rows++) {
            tt_embedding_forward_row_cpu(want.data(), P.ptrs.data(), s, tbl, idx[l]);
            double scale = 0.0;
            for (int d = 0; d < s.D; d++) scale = std::max(scale, fabs(want[d]));
            for (int d = 0; d < s.D; d++)
                if (!close(out[l][d], want[d], 1e-5 * std::max(scale, 1.0), 0))
                    bad += " g" + std::to_string(g) + "l" + std::to_string(l) + "d" + std::to_string(d);
        }
    }
    report(bad.empty() && tiles == 2 * ((q1 + tile_a1 - 1) / tile_a1) && rows == 2 * LPW - 1,
           P.name + ": version 6's " + std::to_string(tiles / 2) + " column tiles per row, " + std::to_string(LPW) +
               " lookups per lane step (emulated) = reference", bad.substr(0, 200));
}

static void test_tiled() {
    Rng rng(77);
    test_tiled_case<4>({11, 13, 7}, {4, 4, 4}, {128, 128}, rng);      // EL-Rec's D = 64: four tiles of one a_1
    test_tiled_case<2>({11, 13, 7}, {2, 2, 4}, {128, 128}, rng);      // EL-Rec's D = 16: two tiles
    test_tiled_case<4>({5, 7, 3}, {4, 2, 4}, {128, 128}, rng);
    test_tiled_case<8>({5, 7, 3}, {8, 4, 4}, {128, 128}, rng);
    test_tiled_case<1>({5, 7, 3}, {1, 4, 4}, {128, 128}, rng);
    test_tiled_case<4>({5, 7, 3}, {4, 4, 4}, {64, 64}, rng);          // rank 64: two tiles of two a_1
    test_tiled_case<2>({5, 7, 3}, {2, 2, 4}, {64, 64}, rng);          // one tile of two a_1
    test_tiled_case<4>({5, 7, 3}, {4, 3, 4}, {64, 64}, rng);          // a last tile of one a_1
    test_tiled_case<2>({5, 7, 3}, {2, 1, 4}, {100, 64}, rng);         // one tile, half the lanes idle; R_1 padded
    test_tiled_case<8>({5, 7, 3}, {8, 2, 4}, {37, 32}, rng);          // four a_1 per tile, two present
    test_tiled_case<4>({5, 7, 3}, {4, 4, 4}, {13, 4}, rng);           // R_2 = 4: no shuffle
    check_refusals("version 6's column-tile kernel", tt_embedding_forward_reason_tiled, {
        {{20, 22, 25, 20}, {4, 2, 2, 4}, {32, 32, 32}, "three cores"},
        {{5, 6, 4}, {3, 4, 4}, {128, 128}, "q_0 in {1, 2, 4, 8}"},
        {{5, 6, 4}, {4, 4, 2}, {128, 128}, "q_2 = 4"},
        {{5, 6, 4}, {4, 4, 8}, {64, 64}, "q_2 = 4"},
        {{5, 6, 4}, {4, 4, 8}, {64, 32}, "q_2 = 4"},
        {{5, 6, 4}, {4, 4, 4}, {128, 96}, "power of two"},
        {{5, 70000, 4}, {4, 4, 4}, {4, 4}, "uint16"},
    }, rng);
}

// The column-tile kernel's tensor-core tile (R_2 = TR = 32, 64 or 128): every (k, n) at its own 16-byte-aligned-row place
// inside the buffer, and each B-fragment read of a warp (k = KL tig + 2 s (+1), n = 8 j + group) on 32 distinct banks.
template <int TR>
static void test_tiled_tc_layout() {
    constexpr int KL = TR / 4, FLOATS = tt_embedding_forward_tiled_tc_floats(TR);
    std::vector<int> owner(FLOATS, -1);
    std::string bad;
    for (int k = 0; k < TR; k++) {
        if (tt_embedding_forward_tiled_tc_at<TR>(k, 0) % 4) bad += " row" + std::to_string(k) + "unaligned";
        for (int n = 0; n < TR; n++) {
            const int a = tt_embedding_forward_tiled_tc_at<TR>(k, n);
            if (a < 0 || a >= FLOATS || owner[a] != -1) { bad += " (" + std::to_string(k) + "," + std::to_string(n) + ")"; continue; }
            owner[a] = TR * k + n;
        }
        if (tt_embedding_forward_tiled_tc_at<TR>(k, 1) - tt_embedding_forward_tiled_tc_at<TR>(k, 0) != 1) bad += " row not contiguous";
    }
    int conflicts = 0;
    for (int st = 0; st < TR / 8; st++)
        for (int e = 0; e < 2; e++)
            for (int j = 0; j < TR / 8; j++) {
                unsigned banks = 0;
                for (int lane = 0; lane < 32; lane++)
                    banks |= 1u << (tt_embedding_forward_tiled_tc_at<TR>(KL * (lane & 3) + 2 * st + e, 8 * j + (lane >> 2)) % 32);
                conflicts += banks != 0xffffffffu;
            }
    // the kernel reads row k + 1 at pitch floats past row k (k even, both in one lane's block of KL rows)
    for (int k = 0; k + 1 < TR; k += 2)
        if (tt_embedding_forward_tiled_tc_at<TR>(k + 1, 0) - tt_embedding_forward_tiled_tc_at<TR>(k, 0) != tt_embedding_forward_tiled_tc_pitch(TR))
            bad += " pitch";
    report(bad.empty() && conflicts == 0,
           "version 6's tensor-core tile, rank " + std::to_string(TR) + ": places distinct, B reads on 32 banks",
           bad.substr(0, 200) + " conflicting reads " + std::to_string(conflicts));
}

// version 5's fragment order: each 16-byte B load of a warp (n-tile j, float4 v of the lane's KL values) and each
// store of the split (thread i: row i % R_1, float4 i / R_1, column c ^ swap) on 32 distinct banks per phase (8
// lanes for 16-byte loads, 32 for 4-byte stores)
static void test_tc_banks(int KS, int Q1, int JT) {
    const int KL = 2 * KS, R1 = 8 * KS, NCOLS = Q1 * 8 * JT;
    int conflicts = 0;
    for (int j = 0; j < NCOLS / 8; j++)
        for (int v = 0; v < KL / 4; v++)
            for (int phase = 0; phase < 4; phase++) {
                unsigned banks = 0;
                for (int lane = 8 * phase; lane < 8 * phase + 8; lane++)
                    for (int e = 0; e < 4; e++) banks |= 1u << (tt_embedding_forward_tc_b_at(KS, j, lane, 4 * v + e) % 32);
                conflicts += banks != 0xffffffffu;
            }
    for (int i0 = 0; i0 < R1 * NCOLS / 4; i0 += 32)
        for (int c = 0; c < 4; c++) {
            unsigned banks = 0;
            for (int i = i0; i < i0 + 32; i++) {
                const int k = i % R1, n4 = i / R1;
                banks |= 1u << (tt_embedding_forward_tc_b_pos(KS, k, 4 * n4 + (c ^ tt_embedding_forward_tc_split_swap(k, n4))) % 32);
            }
            conflicts += banks != 0xffffffffu;
        }
    report(conflicts == 0, "version 5's fragment order, R_1 = " + std::to_string(R1) + ", q_1 R_2 = " + std::to_string(NCOLS) +
                               ": B loads and split stores on 32 banks", "conflicting accesses " + std::to_string(conflicts));
}

// a lookup's table by binary search over the table-major offsets, against a scan: empty tables and bags included
static void test_table_of() {
    Rng rng(77);
    int bad = 0, checked = 0;
    for (int tables : {1, 2, 3, 7, 16}) {
        const int B = 1 + (int)(rng.next() % 5);
        std::vector<int64_t> off(1, 0);
        for (int b = 0; b < tables * B; b++) {
            const bool empty_table = (b / B) % 3 == 1;      // every third table has no lookups
            off.push_back(off.back() + (empty_table ? 0 : (int64_t)(rng.next() % 4)));
        }
        for (int64_t n = 0; n < off.back(); n++) {
            int want = -1;
            for (int t = 0; t < tables; t++)
                if (off[(size_t)t * B] <= n && n < off[(size_t)(t + 1) * B]) want = t;
            bad += tt_embedding_forward_table_of(off.data(), tables, B, n) != want;
            checked++;
        }
    }
    report(bad == 0 && checked > 0, "a lookup's table by binary search over the offsets (empty tables and bags)",
           std::to_string(bad) + " of " + std::to_string(checked) + " lookups in the wrong table");
}

// the division-free digits of versions 4-6 against '/' and '%': every divisor shape of the op (strides and factors
// of several chains, 1 included) and x at both ends of [0, 2^32) plus random values
static void test_fast_digits() {
    struct Case { std::vector<int> p; };
    std::vector<Case> cases = {{{200, 220, 250}}, {{3, 5000, 4}}, {{1, 7, 1}}, {{65536, 65535, 1}}, {{2, 3, 715827882}}, {{4096, 4095, 256}}};
    Rng rng(91);
    for (const Case& c : cases) {
        TtEmbeddingForwardShape s;
        std::vector<int> q = {1, 1, 1}, r = {1, 1};
        std::string why = shape_of(s, c.p, q, r, 0, 0, 1, 1, 1);
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
    std::string why = shape_of(big, {70000, 70000, 2}, {1, 1, 1}, {1, 1}, 0, 0, 1, 1, 1);
    TtEmbeddingForwardFastDigits f;
    report(why.empty() && !tt_embedding_forward_make_fast_digits(big, f), "fast digits refused when prod p >= 2^32 (int64 division then)");
}

// the tensor-core tile of versions 5 and 6, lane by lane: G_1 in fragment order (hi and lo), each lane's A values from its KL contiguous
// k of G_0's rows, the 3xTF32 mma per n-tile (emulate_mma, by the PTX layouts), step 2 on the accumulators, the
// quad sums and the writes shared out over the quad (q_2 = 8: the wide tile's reduce-scatter, a float4 a lane); every
// element of the 4 rows must be written once and match the double chain. Also: the fragment-order positions are a
// permutation, and the k mapping is one too.
static void test_tc_tile(int Q0, int KS, int nlookups, Rng& rng, int Q1 = 4, int Q2 = 4) {
    const int JT = KS, R1 = 8 * KS, R2 = 8 * JT, NCOLS = Q1 * R2, KL = 2 * KS, D = Q0 * Q1 * Q2, LPT = 16 / Q0;
    const std::string name = "tensor-core tile (q = " + std::to_string(Q0) + "," + std::to_string(Q1) + "," + std::to_string(Q2) +
                             ", R_1 = R_2 = " + std::to_string(R1) + ", " + std::to_string(nlookups) + " of " + std::to_string(LPT) + " lookups)";
    std::vector<float> g1 = make_random_floats((size_t)R1 * NCOLS, rng, -1.0f, 1.0f);
    std::vector<float> g0 = make_random_floats((size_t)LPT * Q0 * R1, rng, -1.0f, 1.0f);   // [lookup][a_0][k_1]
    std::vector<float> g2 = make_random_floats((size_t)LPT * R2 * Q2, rng, -1.0f, 1.0f);   // [lookup][k_2][a_2]
    // the fragment-order arrays (and the permutation checks)
    std::vector<float> bhi((size_t)R1 * NCOLS, NAN), blo((size_t)R1 * NCOLS, NAN);
    std::vector<int> hits((size_t)R1 * NCOLS, 0);
    for (int k = 0; k < R1; k++)
        for (int n = 0; n < NCOLS; n++) {
            const int pos = tt_embedding_forward_tc_b_pos(KS, k, n);
            if (pos < 0 || pos >= R1 * NCOLS) { report(false, name, "b_pos out of range"); return; }
            hits[pos]++;
            float hi, lo;
            tf32_split(g1[(size_t)k * NCOLS + n], hi, lo);
            bhi[pos] = hi;
            blo[pos] = lo;
        }
    for (int h : hits) if (h != 1) { report(false, name, "fragment positions are not a permutation"); return; }
    std::vector<int> khits(R1, 0);
    for (int st = 0; st < KS; st++)
        for (int c = 0; c < 8; c++) khits[tt_embedding_forward_tc_k(KS, st, c)]++;
    for (int h : khits) if (h != 1) { report(false, name, "the k of (k-step, column) is not a permutation"); return; }
    // the lanes
    static float x[32][2][16], acc[32][8][2][8];
    std::fill(&x[0][0][0], &x[0][0][0] + 32 * 2 * 16, 0.0f);
    std::fill(&acc[0][0][0][0], &acc[0][0][0][0] + 32 * 8 * 2 * 8, 0.0f);
    for (int lane = 0; lane < 32; lane++) {
        const int group = lane >> 2, tig = lane & 3;
        for (int h = 0; h < 2; h++) {
            const int slot = tt_embedding_forward_tc_slot(Q0, group, h);
            for (int e = 0; e < KL; e++) x[lane][h][e] = slot < nlookups ? g0[((size_t)slot * Q0 + group % Q0) * R1 + KL * tig + e] : 0.0f;
        }
    }
    for (int jj = 0; jj < JT; jj++)
        for (int b = 0; b < Q1; b++) {
            const int j = b * JT + jj;
            float big[32][4] = {}, small[32][4] = {};
            for (int st = 0; st < KS; st++) {
                float ahi[32][4], alo[32][4], bh[32][2], bl[32][2];
                for (int lane = 0; lane < 32; lane++) {
                    for (int r = 0; r < 4; r++) tf32_split(x[lane][r & 1][2 * st + (r >> 1)], ahi[lane][r], alo[lane][r]);
                    for (int e = 0; e < 2; e++) {
                        bh[lane][e] = bhi[tt_embedding_forward_tc_b_at(KS, j, lane, 2 * st + e)];
                        bl[lane][e] = blo[tt_embedding_forward_tc_b_at(KS, j, lane, 2 * st + e)];
                    }
                }
                emulate_mma(small, alo, bh);
                emulate_mma(small, ahi, bl);
                emulate_mma(big, ahi, bh);
            }
            for (int lane = 0; lane < 32; lane++) {
                const int group = lane >> 2, tig = lane & 3;
                for (int h = 0; h < 2; h++) {
                    const int slot = tt_embedding_forward_tc_slot(Q0, group, h);
                    for (int e = 0; e < 2; e++) {
                        const int k2 = 8 * jj + 2 * tig + e;
                        const float m1 = big[lane][2 * h + e] + small[lane][2 * h + e];
                        for (int c = 0; c < Q2; c++)
                            acc[lane][b][h][c] = fmaf(m1, slot < nlookups ? g2[((size_t)slot * R2 + k2) * Q2 + c] : 0.0f, acc[lane][b][h][c]);
                    }
                }
            }
        }
    // quad sums and the writes
    std::vector<float> rows((size_t)LPT * D, NAN);
    std::vector<int> written((size_t)LPT * D, 0);
    for (int lane = 0; lane < 32; lane++) {
        const int group = lane >> 2, tig = lane & 3, q0 = lane & ~3;
        for (int h = 0; h < 2; h++) {
            const int slot = tt_embedding_forward_tc_slot(Q0, group, h);
            if (slot >= nlookups) continue;
            for (int b = 0; b < Q1; b++) {
                if (Q2 == 4 && ((2 * b + h) & 3) != tig) continue;  // q_2 = 4: lane tig writes the (a_1, row) runs it is dealt
                if (Q2 == 8 && h != tig >> 1) continue;             // q_2 = 8 (the wide tile's reduce-scatter): row tig / 2,
                for (int c = 0; c < Q2; c++) {
                    if (Q2 == 8 && c / 4 != (tig & 1)) continue;     // half tig % 2 of its a_2
                    const float sum = (acc[q0][b][h][c] + acc[q0 + 1][b][h][c]) + (acc[q0 + 2][b][h][c] + acc[q0 + 3][b][h][c]);
                    const int d = ((group % Q0) * Q1 + b) * Q2 + c;
                    rows[(size_t)slot * D + d] = sum;
                    written[(size_t)slot * D + d]++;
                }
            }
        }
    }
    std::string bad;
    for (int slot = 0; slot < nlookups; slot++)
        for (int a0 = 0; a0 < Q0; a0++)
            for (int a1 = 0; a1 < Q1; a1++)
                for (int a2 = 0; a2 < Q2; a2++) {
                    double want = 0.0;
                    for (int k2 = 0; k2 < R2; k2++) {
                        double m1 = 0.0;
                        for (int k1 = 0; k1 < R1; k1++)
                            m1 += (double)g0[((size_t)slot * Q0 + a0) * R1 + k1] * (double)g1[(size_t)k1 * NCOLS + a1 * R2 + k2];
                        want += m1 * (double)g2[((size_t)slot * R2 + k2) * Q2 + a2];
                    }
                    const size_t i = (size_t)slot * D + (a0 * Q1 + a1) * Q2 + a2;
                    if (written[i] != 1 || !close(rows[i], want, TT_EMBEDDING_FORWARD_ATOL, TT_EMBEDDING_FORWARD_RTOL)) {
                        if (bad.size() < 200) bad += " lookup " + std::to_string(slot) + " d " + std::to_string(i % D) + " written " +
                                                     std::to_string(written[i]) + " got " + std::to_string(rows[i]) + " want " + std::to_string(want);
                    }
                }
    for (size_t i = (size_t)nlookups * D; i < rows.size(); i++)
        if (written[i] != 0 && bad.size() < 200) bad += " a padding slot was written";
    report(bad.empty(), name + ": every element written once, within the FP32 tolerance of the double chain", bad);
}

static void test_v5_filter() {
    TtEmbeddingForwardShape s;
    shape_of(s, {200, 220, 250}, {4, 4, 4}, {32, 32}, 0, 0, 1, 512, 20);
    report(tt_embedding_forward_reason5(s).empty(), "version 5 runs FBTT's default");
    shape_of(s, {30, 40, 50}, {4, 4, 4}, {16, 16}, 0, 0, 1, 1, 3);
    report(tt_embedding_forward_reason5(s).empty(), "version 5 runs ranks 16,16");
    shape_of(s, {30, 40, 50}, {4, 4, 4}, {64, 64}, 0, 0, 1, 1, 3);
    report(tt_embedding_forward_reason5(s).empty(), "version 5 runs ranks 64,64");
    shape_of(s, {30, 40, 50}, {8, 4, 4}, {32, 32}, 0, 0, 1, 1, 3);
    report(tt_embedding_forward_reason5(s).empty(), "version 5 runs q 8,4,4 ranks 32,32");
    shape_of(s, {30, 40, 50}, {4, 8, 8}, {32, 32}, 0, 0, 1, 1, 3);
    report(tt_embedding_forward_reason5(s).empty(), "version 5 runs q 4,8,8 ranks 32,32");
    const struct { std::vector<int> p, q, r; } no[] = {{{20, 22, 25}, {4, 4, 4}, {32, 16}}, {{20, 22, 25}, {4, 2, 4}, {32, 32}},
                                                      {{20, 22, 25, 20}, {4, 2, 2, 4}, {32, 32, 32}}, {{20, 22, 25}, {2, 4, 8}, {32, 32}},
                                                      {{20, 22, 25}, {4, 8, 8}, {64, 64}}, {{20, 22, 25}, {4, 8, 4}, {32, 32}}};
    for (const auto& c : no) {
        shape_of(s, c.p, c.q, c.r, 0, 0, 1, 1, 1);
        const std::string why = tt_embedding_forward_reason5(s);
        report(!why.empty() && why.find("version 5 is compiled for") != std::string::npos, "version 5 refuses an uncompiled shape: " + why);
    }
}

// version 6's digit-scan mask: 8 uint16 digits per vector, two per 32-bit compare, positions clipped to [cursor,
// seg_hi); against a per-position check on random digits (keys 0, 65535 and a middle one planted often) and
// every clipping case (cursor and seg_hi inside, before and after the vector)
static void test_digit_mask() {
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
        const unsigned got = tt_embedding_forward_digit_match_mask(w, i1, v, cursor, seg_hi);
        checked++;
        if (got != want && bad.size() < 200)
            bad += " trial " + std::to_string(trial) + ": got " + std::to_string(got) + " want " + std::to_string(want);
    }
    report(bad.empty(), "version 6's scan mask = a per-position check (" + std::to_string(checked) + " vectors)", bad);
}

// the narrow kernel's staging and row functions for a run-time n (the kernel's template argument)
template <int N>
static void narrow_stage_n(float* Ms, float* Gs, const void* const* G, const void* const* M, int64_t b0, int64_t r0, int nrows, int kk, int nd,
                           int tid, int nthreads) {
    tt_embedding_forward_narrow_stage<N>(Ms, Gs, G, M, b0, r0, nrows, kk, nd, tid, nthreads);
}
static void narrow_stage(int n, float* Ms, float* Gs, const void* const* G, const void* const* M, int64_t b0, int64_t r0, int nrows, int kk,
                         int nd, int tid, int nthreads) {
    static void (*const f[8])(float*, float*, const void* const*, const void* const*, int64_t, int64_t, int, int, int, int, int) = {
        nullptr, narrow_stage_n<1>, narrow_stage_n<2>, narrow_stage_n<3>, narrow_stage_n<4>, narrow_stage_n<5>, narrow_stage_n<6>, narrow_stage_n<7>};
    f[n](Ms, Gs, G, M, b0, r0, nrows, kk, nd, tid, nthreads);
}
static void narrow_row(int n, float* const* C, const float* Ms, const float* Gs, int kk, int nd, int64_t r, int row) {
    static void (*const f[8])(float* const*, const float*, const float*, int, int, int64_t, int) = {
        nullptr, tt_embedding_forward_narrow_row<1>, tt_embedding_forward_narrow_row<2>, tt_embedding_forward_narrow_row<3>,
        tt_embedding_forward_narrow_row<4>, tt_embedding_forward_narrow_row<5>, tt_embedding_forward_narrow_row<6>, tt_embedding_forward_narrow_row<7>};
    f[n](C, Ms, Gs, kk, nd, r, row);
}

// Version 6's prefix and suffix tables on the CPU: for every case of test_random_shapes' kind and every cut k, the
// step buffers and tables (NaN, with a NaN guard after each) are built by the launch's steps: the op's pointer
// function for every batch entry, each step's GEMM through the column-major reference with the launch's arguments (a step narrower than 8
// columns: the narrow kernel's staging and row functions, block by block and thread by thread);
// then for lookups across the index range (all of them where there are few) the row warp's staging and product
// (lanes in turn, both staging paths) must give the reference row, and no guard float may change; and the plan's
// choice: a cut at T 6 / T 4 of the bench grid, none at FBTT's default.
static void test_split() {
    struct Case { std::vector<int> p, q, r; int tables; };
    const std::vector<Case> cases = {
        {{7, 5}, {3, 4}, {5}, 2},
        {{3, 4, 5}, {2, 3, 2}, {3, 4}, 2},
        {{5, 7, 3}, {4, 4, 4}, {32, 32}, 1},
        {{3, 4, 5, 2}, {4, 2, 2, 4}, {8, 8, 8}, 1},
        {{4, 5, 3, 6}, {4, 4, 2, 4}, {32, 32, 32}, 2},
        {{2, 3, 2, 3, 2}, {2, 2, 3, 1, 2}, {2, 3, 4, 2}, 2},
        {{2, 2, 3, 2, 2, 3}, {2, 1, 2, 3, 2, 2}, {2, 3, 2, 3, 2}, 2},
        {{3, 2, 3, 2, 3, 2}, {2, 2, 2, 2, 2, 2}, {32, 32, 32, 32, 32}, 1},
        {{3, 2, 5}, {1, 2, 2}, {3, 128}, 1},
        {{3, 5, 2, 3}, {3, 1, 5, 3}, {7, 5, 3}, 3},
        {{4, 5, 3, 11}, {4, 4, 2, 4}, {32, 32, 32}, 2},   // narrow steps: row tiles of 128 and 64, digit groups of 8 and 3
        {{2, 3, 17}, {2, 3, 3}, {5, 6}, 1},
    };
    Rng rng(77);
    std::string bad;
    int checked = 0, vec_rows = 0, narrow_steps = 0, narrow_dpb = 0, terms_checked = 0;
    const int guard = 64;
    for (const Case& cs : cases) {
        Problem P;
        if (!make_problem(P, cs.p, cs.q, cs.r, cs.tables, 1, 1, rng)) continue;
        const TtEmbeddingForwardShape& s = P.s;
        for (int k = 0; k + 1 < s.T; k++) {
            const TtEmbeddingForwardSplit c = tt_embedding_forward_split_at(s, k);
            if ((int64_t)c.Qk * c.Ds != s.D || c.n_pre * c.n_suf != s.prod_p || c.n_gemms != s.T - 2) bad += " sizes " + P.name;
            std::vector<std::vector<float>> store(4);
            float* bufs[4] = {};
            for (int i = 0; i < 4; i++) {
                store[i].assign((size_t)c.floats[i] + guard, NAN);
                bufs[i] = store[i].data();
            }
            std::vector<const void*> G((size_t)c.pointers), M((size_t)c.pointers);
            std::vector<void*> C((size_t)c.pointers);
            for (int j = 0; j < c.n_gemms; j++) {
                const TtEmbeddingForwardSplitGemm& g = c.gemm[j];
                for (int64_t b = 0; b < (int64_t)s.tables * s.p[g.t]; b++) tt_embedding_forward_split_pointers(G.data(), M.data(), C.data(), c, s, P.c, bufs, j, b);
            }
            for (int j = 0; j < c.n_gemms; j++) {               // in launch order, as the launch calls cuBLAS or the narrow kernel
                const TtEmbeddingForwardSplitGemm& g = c.gemm[j];
                // its blocks in turn, threads in turn, for every step narrower than 8 columns (the launch gives cuBLAS
                // the small ones: tt_embedding_forward_narrow_pays); the plan at 132 SMs and at 1 (more rows and digits)
                const TtEmbeddingForwardNarrow w = tt_embedding_forward_narrow_plan(g, s.p[g.t], s.tables, 232448, (j + k) % 2 ? 1 : 132);
                if (w.rows) {
                    const int rows = w.rows, groups = (s.p[g.t] + w.dpb - 1) / w.dpb;
                    std::vector<float> Ms((size_t)tt_embedding_forward_narrow_g_at(rows, g.kk), NAN);
                    std::vector<float> Gs((size_t)w.dpb * g.kk * g.n, NAN);
                    for (int64_t r0 = 0; r0 < g.m; r0 += rows)
                        for (int64_t y = 0; y < (int64_t)s.tables * groups; y++) {
                            const int tbl = (int)(y / groups), i0 = (int)(y % groups) * w.dpb;
                            const int nd = std::min(w.dpb, s.p[g.t] - i0);
                            const int nrows = (int)std::min<int64_t>(rows, g.m - r0);
                            const int64_t b0 = (int64_t)tbl * s.p[g.t] + i0;
                            float* Cd[TT_EMBEDDING_FORWARD_NARROW_DPB] = {};
                            for (int d = 0; d < nd; d++) Cd[d] = (float*)C[g.at + b0 + d];
                            for (int tid = 0; tid < rows; tid++)
                                narrow_stage(g.n, Ms.data(), Gs.data(), G.data() + g.at, M.data() + g.at, b0, r0, nrows, g.kk, nd, tid, rows);
                            for (int row = 0; row < nrows; row++) narrow_row(g.n, Cd, Ms.data(), Gs.data(), g.kk, nd, r0 + row, row);
                        }
                    narrow_steps++;
                    narrow_dpb |= 1 << w.dpb;
                    continue;
                }
                const TtEmbeddingForwardGemmArgs a = tt_embedding_forward_split_gemm_args(g);
                for (int64_t b = 0; b < (int64_t)s.tables * s.p[g.t]; b++)
                    colmajor_gemm(a, (const float*)G[g.at + b], (const float*)M[g.at + b], (float*)C[g.at + b]);
            }
            for (int i = 0; i < 4; i++)
                for (int e = 0; e < guard; e++)
                    if (!std::isnan(store[i][c.floats[i] + e])) { bad += " overrun of buffer " + std::to_string(i) + " " + P.name; break; }
            const float* pre = k > 0 ? bufs[TT_EMBEDDING_FORWARD_SPLIT_PRE] : P.c.c[0];
            const float* suf = k + 2 < s.T ? bufs[TT_EMBEDDING_FORWARD_SPLIT_SUF] : P.c.c[s.T - 1];
            const int64_t lookups = s.E <= 400 ? s.E * s.tables : 60;
            for (int64_t l = 0; l < lookups; l++) {
                const int tbl = s.E <= 400 ? (int)(l / s.E) : (int)rng.randint(0, cs.tables);
                const int64_t idx = s.E <= 400 ? l % s.E : l == 0 ? 0 : l == 1 ? s.E - 1 : rng.randint(0, s.E);
                const int64_t jp = tt_embedding_forward_split_entry(s, idx, 0, k), js = tt_embedding_forward_split_entry(s, idx, k + 1, s.T - 1);
                int64_t tp = 0, ts = 0;                     // the row kernel's lane terms, summed
                for (int t = 0; t < s.T; t++) (t <= k ? tp : ts) += tt_embedding_forward_split_term(s, k, idx, t);
                if ((tp != jp || ts != js) && bad.size() < 300) bad += " " + P.name + " lane terms of row " + std::to_string(idx);
                terms_checked++;
                const float* Pe = pre + (tbl * c.n_pre + jp) * c.pre_len;
                const float* Se = suf + (tbl * c.n_suf + js) * c.suf_len;
                std::vector<double> ref(s.D);
                tt_embedding_forward_row_cpu(ref.data(), P.ptrs.data(), s, tbl, idx);
                double scale = 0.0;
                for (int d = 0; d < s.D; d++) scale = std::max(scale, fabs(ref[d]));
                for (int vec = 0; vec < 2; vec++) {
                    if (vec && (c.pre_len % 4 || c.suf_len % 4 || (uintptr_t)Pe % 16 || (uintptr_t)Se % 16)) continue;
                    std::vector<float> Ps((size_t)c.ps_len, NAN), Ss((size_t)c.ss_len, NAN), row((size_t)s.D + guard, NAN);
                    for (int lane = 0; lane < 32; lane++) tt_embedding_forward_split_stage(c, Pe, Se, Ps.data(), Ss.data(), vec, lane);
                    for (int lane = 0; lane < 32; lane++) tt_embedding_forward_split_row(c, Ps.data(), Ss.data(), row.data(), lane);
                    for (int d = 0; d < s.D; d++)
                        if (!close(row[d], ref[d], 1e-5 * std::max(scale, 1.0), 0) && bad.size() < 300)
                            bad += " " + P.name + " k" + std::to_string(k) + " vec" + std::to_string(vec) + " row " + std::to_string(idx) + " d" + std::to_string(d);
                    for (int e = 0; e < guard; e++)
                        if (!std::isnan(row[s.D + e])) { bad += " row overrun " + P.name; break; }
                    checked++;
                    vec_rows += vec;
                }
            }
        }
    }
    report(bad.empty() && checked > 1000 && vec_rows > 100 && narrow_steps > 5 && (narrow_dpb & 2) && (narrow_dpb & 256) && terms_checked > 1000,
           "version 6's tables: every cut's P and S tables (pointers, cuBLAS steps through the reference GEMM, steps narrower than 8 "
           "columns by the narrow kernel's blocks), each row's entries from the lanes' digit terms, and its staging and product = the "
           "reference row (" + std::to_string(checked) + " rows, " + std::to_string(vec_rows) + " staged by float4, " +
           std::to_string(narrow_steps) + " narrow steps, " + std::to_string(terms_checked) + " entries by terms)",
           bad.substr(0, 300));
    // the plan at the bench grid: T 6 and T 4 cut, FBTT's default and q 4,8,8 not; no lookups: no cut
    auto plan = [](const std::vector<int>& p, const std::vector<int>& q, const std::vector<int>& r, int B, int L) {
        TtEmbeddingForwardShape s;
        if (!shape_of(s, p, q, r, 0, 0, 1, B, L).empty()) return -2;
        return tt_embedding_forward_plan_split(s, 232448).k;
    };
    const int t6 = plan({10, 10, 10, 10, 10, 11}, {2, 2, 2, 2, 2, 2}, {32, 32, 32, 32, 32}, 512, 20);
    const int t4 = plan({40, 50, 55, 60}, {4, 4, 2, 4}, {32, 32, 32}, 512, 20);
    const int fbtt = plan({200, 220, 250}, {4, 4, 4}, {32, 32}, 512, 20), d256 = plan({200, 220, 250}, {4, 8, 8}, {32, 32}, 512, 20);
    const int none = plan({10, 10, 10, 10, 10, 11}, {2, 2, 2, 2, 2, 2}, {32, 32, 32, 32, 32}, 512, 0);
    report(t6 >= 0 && t4 >= 0 && fbtt < 0 && d256 < 0 && none < 0,
           "version 6 cuts T 6 (after core " + std::to_string(t6) + ") and T 4 (after " + std::to_string(t4) +
               ") of the bench grid, not FBTT's default, q 4,8,8 or a call with no lookups");
    // which steps the narrow kernel takes (the measured ones): T 4's and T 6's last, not T 5's, p 10,10,10's or 20,20,20's
    auto narrow = [](const std::vector<int>& p, const std::vector<int>& q, const std::vector<int>& r) {
        TtEmbeddingForwardShape s;
        if (!shape_of(s, p, q, r, 0, 0, 1, 512, 20).empty()) return -1;
        const TtEmbeddingForwardSplit c = tt_embedding_forward_plan_split(s, 232448);
        int n = 0;
        for (int j = 0; j < c.n_gemms; j++) n += tt_embedding_forward_narrow_pays(c.gemm[j], s.p[c.gemm[j].t], s.tables);
        return n;
    };
    const int n4 = narrow({40, 50, 55, 60}, {4, 4, 2, 4}, {32, 32, 32}), n6 = narrow({10, 10, 10, 10, 10, 11}, {2, 2, 2, 2, 2, 2}, {32, 32, 32, 32, 32});
    const int n5 = narrow({12, 11, 13, 10, 14}, {2, 4, 2, 4, 2}, {32, 32, 32, 32}), n10 = narrow({10, 10, 10}, {4, 4, 4}, {32, 32});
    const int n20 = narrow({20, 20, 20}, {4, 4, 4}, {32, 32});
    report(n4 == 1 && n6 == 1 && n5 == 0 && n10 == 0 && n20 == 0,
           "version 6's narrow kernel takes the last step of T 4 and T 6 (" + std::to_string(n4) + ", " + std::to_string(n6) +
               "), cuBLAS T 5's, p 10,10,10's and p 20,20,20's (" + std::to_string(n5 + n10 + n20) + " narrow)");
}

// Version 6 at the grid of shapes TT-Rec and EL-Rec train with (T = 2..6, q_t 1..16 with D = prod q in 4..256, ranks
// 1..128): never skipped, some block size to run, its compiled kernel exactly at FBTT's family (q 4,4,4, ranks
// 32,32 or 16,16), version 3's kernel elsewhere, in global memory only where one warp's buffers exceed a block's
// shared memory (an H200's 227 KB); versions 4 and 5 refuse other shapes naming version 6.
static void test_dispatch() {
    const size_t smem = 232448;
    TtEmbeddingForwardWorkspace ws;
    ws.max_smem = smem;
    for (int v = 3; v <= TT_EMBEDDING_FORWARD_SPLIT; v++) ws.max_threads[v] = v == 3 ? 1024 : 256;
    Rng rng(123);
    std::string bad;
    int shapes = 0, fast = 0, global = 0, tiled = 0, split = 0;
    for (int trial = 0; trial < 4000; trial++) {
        const int T = 2 + (int)rng.randint(0, 5);
        std::vector<int> p(T), q(T), r(T - 1);
        int D = 1;
        for (int t = 0; t < T; t++) {
            p[t] = 1 + (int)rng.randint(0, 300);
            q[t] = 1 + (int)rng.randint(0, 16);
            if (D * q[t] > 256) q[t] = 256 / D;
            D *= q[t];
        }
        if (D < 4) continue;
        for (int t = 0; t + 1 < T; t++) r[t] = trial % 3 == 0 ? 128 : 1 + (int)rng.randint(0, 128);
        if (trial % 50 == 0) { p = {200, 220, 250}; q = {4, 4, 4}; r = {trial % 100 ? 32 : 16, trial % 100 ? 32 : 16}; }
        TtEmbeddingForwardShape s;
        const std::string why = shape_of(s, p, q, r, 0, 0, 1 + (int)rng.randint(0, 3), 64, 20);
        if (!why.empty()) { bad += " make_shape: " + why; continue; }
        shapes++;
        const bool g = tt_embedding_forward_smem_bytes3(s, 1) > smem;
        ws.chain_scratch = g ? reinterpret_cast<float*>(16) : nullptr;    // only its presence is read here
        global += g;
        const bool family = s.T == 3 && s.q[0] == 4 && s.q[1] == 4 && s.q[2] == 4 && s.R[1] == s.R[2] && (s.R[1] == 32 || s.R[1] == 16);
        fast += tt_embedding_forward_fast6(s, smem);
        tiled += tt_embedding_forward_route_tiled(s, smem);
        split += tt_embedding_forward_runs6(s, smem) == TT_EMBEDDING_FORWARD_SPLIT;
        if (tt_embedding_forward_fast6(s, smem) && tt_embedding_forward_route_tiled(s, smem)) bad += " two kernels";
        if (tt_embedding_forward_route_tiled(s, smem) &&
            (!tt_embedding_forward_reason_tiled(s).empty() || tt_embedding_forward_blocks(TT_EMBEDDING_FORWARD_TILED, s, ws).empty()))
            bad += " column tiles cannot run";
        if (!tt_embedding_forward_skip_reason(6, s, smem).empty()) bad += " skipped";
        if (tt_embedding_forward_blocks(6, s, ws).empty()) bad += " no block";
        if (tt_embedding_forward_fast6(s, smem) != family) bad += " dispatch";
        const int k6s = tt_embedding_forward_runs6(s, smem, true);  // --stash: only kernels that write it as they go
        if (k6s == 6 || (k6s == TT_EMBEDDING_FORWARD_TILED && !tt_embedding_forward_tiled_tc(s.R[1], s.R[2]))) bad += " stash route";
        ws.stash = reinterpret_cast<float*>(16);                  // only its presence is read here
        if (tt_embedding_forward_blocks(6, s, ws).empty()) bad += " no block with the stash";
        ws.stash = nullptr;
        const std::string w5 = tt_embedding_forward_skip_reason(5, s, smem);
        if (!family && w5.find("version 6 runs every shape") == std::string::npos) bad += " version 5: " + w5;
        if (bad.size() > 200) break;
    }
    // EL-Rec's shapes (rank 128): the column tiles
    for (const auto& q : std::vector<std::vector<int>>{{2, 2, 4}, {4, 4, 4}, {4, 2, 4}}) {
        TtEmbeddingForwardShape s;
        const std::string why = shape_of(s, {200, 220, 250}, q, {128, 128}, 0, 0, 1, 4096, 20);
        if (!why.empty() || !tt_embedding_forward_route_tiled(s, smem) || tt_embedding_forward_blocks(6, s, ws).empty()) bad += " EL-Rec not tiled";
    }
    // the shapes of tests/gpu_cases.txt that check the column tiles through version 6 (FP32 tiles at R_2 = 32 and 64,
    // tensor cores at 128 with R_1 = 12 and 100)
    const std::vector<std::vector<std::vector<int>>> gpu_tiled = {
        {{7, 9, 5}, {4, 3, 4}, {117, 64}}, {{5, 7, 3}, {8, 8, 4}, {128, 32}}, {{9, 11, 13}, {2, 4, 4}, {128, 64}},
        {{7, 9, 5}, {8, 2, 4}, {96, 128}}, {{13, 11, 9}, {2, 16, 4}, {12, 128}}, {{5, 7, 3}, {1, 4, 4}, {100, 128}},
        {{17, 5, 11}, {2, 3, 4}, {100, 128}}, {{9, 11, 13}, {4, 2, 4}, {128, 128}}};
    for (const auto& c : gpu_tiled) {
        TtEmbeddingForwardShape s;
        const std::string why = shape_of(s, c[0], c[1], c[2], 0, 0, 2, 30, 6);
        if (!why.empty() || !tt_embedding_forward_route_tiled(s, smem)) bad += " gpu case q" + std::to_string(c[1][0]) + std::to_string(c[1][1]) + " not tiled";
    }
    // the routes chosen by timing (results/notes/tt_embedding_forward.md, 2026-12-07): the tensor-core tiles at rank 64,
    // at rank 32 where no kernel is compiled and for --stash; the compiled kernel at rank 32 otherwise
    struct Route { std::vector<int> q, r; int plain, stash; };
    const int TL = TT_EMBEDDING_FORWARD_TILED;
    const std::vector<Route> routes = {
        {{4, 4, 4}, {64, 64}, TL, TL}, {{8, 4, 4}, {64, 64}, TL, TL}, {{2, 2, 4}, {64, 64}, TL, TL}, {{2, 4, 4}, {32, 32}, TL, TL},
        {{8, 4, 8}, {32, 32}, TL, TL}, {{4, 4, 4}, {32, 32}, 6, TL}, {{8, 4, 4}, {32, 32}, 6, TL}, {{4, 8, 8}, {32, 32}, 6, TL},
        {{4, 4, 4}, {16, 16}, 6, 3}, {{4, 4, 8}, {64, 64}, 3, 3}, {{4, 4, 4}, {128, 128}, TL, TL}};
    for (const Route& c : routes) {
        TtEmbeddingForwardShape s;
        const std::string why = shape_of(s, {200, 220, 250}, c.q, c.r, 0, 0, 1, 512, 20);
        const int plain = tt_embedding_forward_runs6(s, smem), stash = tt_embedding_forward_runs6(s, smem, true);
        if (!why.empty() || plain != c.plain || stash != c.stash)
            bad += " route q" + std::to_string(c.q[0]) + std::to_string(c.q[1]) + std::to_string(c.q[2]) + " r" + std::to_string(c.r[0]) + ": " +
                   std::to_string(plain) + "/" + std::to_string(stash);
    }
    report(bad.empty() && shapes > 3000 && fast > 0 && global > 0 && tiled > 0 && split > 0,
           "version 6 runs each of " + std::to_string(shapes) + " grid shapes, with --stash too (" + std::to_string(fast) + " on its compiled kernel, " +
               std::to_string(tiled) + " on its column tiles, " + std::to_string(split) + " on its tables, " + std::to_string(global) +
               " with version 3's buffers in global memory)",
           bad.substr(0, 200));
}

// tt_embedding.h's replay: the inputs of both ops dumped and read back by --load bit for bit (the bags and cores the
// forward's: one seed gives both ops the same ones); one's own minimal trace (no cores: generated from the seed);
// and the fixtures of tests/cli_cases.txt's --load cases, good and broken, left in build/tests/fixtures
static bool same_floats(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && (a.empty() || memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}
static bool same_inputs(const TtEmbeddingInputs& a, const TtEmbeddingInputs& b) {
    bool same = a.indices == b.indices && a.offsets == b.offsets && a.cores.size() == b.cores.size() && same_floats(a.dY, b.dY) &&
                a.state.size() == b.state.size();
    for (size_t t = 0; same && t < a.cores.size(); t++) same = same_floats(a.cores[t], b.cores[t]);
    for (size_t t = 0; same && t < a.state.size(); t++) same = same_floats(a.state[t], b.state[t]);
    return same;
}

static void test_replay() {
    const std::string root = "build/tests/fixtures";
    make_dir("build"); make_dir("build/tests"); make_dir(root);
    TtEmbeddingConfig c;
    c.p = {5, 6, 7}; c.q = {2, 3, 2}; c.ranks = {3, 4}; c.tables = 2; c.B = 5; c.L = 4; c.E = 200; c.alpha = 1.15; c.ragged = true;
    report(tt_embedding_check_config(c).empty() && c.D == 12, "replay: the config passes the check (D resolved to prod q = 12)");
    const TtEmbeddingInputs fwd = tt_embedding_make_inputs(c, 17, false), bwd = tt_embedding_make_inputs(c, 17, true);
    TtEmbeddingInputs bags_only = bwd;
    bags_only.dY.clear();
    bags_only.state.clear();
    report(same_inputs(fwd, bags_only) && bwd.dY.size() == 2 * 5 * 12 && bwd.state.size() == 3 && tt_embedding_validate_inputs(c, bwd, true).empty(),
           "one seed gives both ops the same cores and bags; the backward's dY and state follow and validate");
    const std::string ok = root + "/tt_ok";
    make_dir(ok);
    tt_embedding_dump_inputs(ok, "tt_embedding_forward", c, fwd);
    tt_embedding_dump_inputs(ok, "tt_embedding_backward", c, bwd);
    for (bool backward : {false, true}) {
        TtEmbeddingConfig back;
        const TtEmbeddingInputs in = tt_embedding_load_inputs(ok, backward ? "tt_embedding_backward" : "tt_embedding_forward", back, 99, backward);
        report(same_inputs(in, backward ? bwd : fwd) && back.p == c.p && back.q == c.q && back.ranks == c.ranks && back.E == c.E &&
                   back.D == c.D && back.tables == c.tables && back.B == c.B && back.nnz() == (int64_t)fwd.indices.size() && back.loaded == ok,
               std::string("--dump then --load: the ") + (backward ? "backward's" : "forward's") + " inputs and config come back bit for bit");
    }
    // one's own trace: meta, indices, offsets only (int32 ids); the cores come from the seed
    const std::string own = root + "/tt_own";
    make_dir(own);
    const int64_t meta[] = {3, 2, 5, 200, 12, 5, 6, 7, 2, 3, 2, 1, 3, 4, 1};
    write_npy(own, "tt_embedding_forward_meta", meta, {15});
    std::vector<int32_t> ids(fwd.indices.begin(), fwd.indices.end());
    write_npy(own, "tt_embedding_forward_indices", ids.data(), {(int64_t)ids.size()});
    write_npy(own, "tt_embedding_forward_offsets", fwd.offsets.data(), {(int64_t)fwd.offsets.size()});
    TtEmbeddingConfig oc;
    const TtEmbeddingInputs own_in = tt_embedding_load_inputs(own, "tt_embedding_forward", oc, 17, false);
    TtEmbeddingInputs gen;
    Rng rng(17);
    tt_embedding_make_cores(oc, rng, gen.cores);
    gen.indices = fwd.indices;
    gen.offsets = fwd.offsets;
    report(same_inputs(own_in, gen), "--load of one's own trace (int32 ids, no cores): the ids as written, the cores from the seed");
    // broken copies of the good dump, each refused with its own message (tests/cli_cases.txt)
    auto broken = [&](const std::string& name, auto&& edit) {
        const std::string dir = root + "/" + name;
        make_dir(dir);
        TtEmbeddingConfig bc = c;
        TtEmbeddingInputs bi = bwd;
        edit(bc, bi);
        tt_embedding_dump_inputs(dir, "tt_embedding_forward", bc, bi);
        tt_embedding_dump_inputs(dir, "tt_embedding_backward", bc, bi);
    };
    broken("tt_bad_index", [](TtEmbeddingConfig& bc, TtEmbeddingInputs& bi) { bi.indices[bi.offsets[bc.B + 1]] = bc.E; });
    broken("tt_bad_offsets", [](TtEmbeddingConfig&, TtEmbeddingInputs& bi) { bi.offsets[3] = bi.offsets[4] + 1; });
    broken("tt_bad_meta", [](TtEmbeddingConfig& bc, TtEmbeddingInputs&) { bc.D = 13; });
    broken("tt_bad_core", [](TtEmbeddingConfig&, TtEmbeddingInputs& bi) { bi.cores[1][7] = NAN; });
    broken("tt_bad_state", [](TtEmbeddingConfig&, TtEmbeddingInputs& bi) { bi.state[2][5] = -1.0f; });
    broken("tt_bad_shape", [](TtEmbeddingConfig&, TtEmbeddingInputs&) {});
    write_npy(root + "/tt_bad_shape", "tt_embedding_backward_dY", bwd.dY.data(), {c.tables, c.D, c.B});   // D and B swapped
    const std::string bad_dtype = root + "/tt_bad_dtype";
    make_dir(bad_dtype);
    tt_embedding_dump_inputs(bad_dtype, "tt_embedding_forward", c, fwd);
    std::vector<float> fids(fwd.indices.begin(), fwd.indices.end());
    write_npy(bad_dtype, "tt_embedding_forward_indices", fids.data(), {(int64_t)fids.size()});
    // the validators on the broken inputs (the CLI cases check the exit codes and messages of the loads)
    TtEmbeddingInputs bi = bwd;
    bi.indices[bi.offsets[c.B + 1]] = c.E;
    const std::string why = tt_embedding_validate_inputs(c, bi, true);
    report(why.find("is out of range") != std::string::npos, "validate_inputs names an index >= E", why);
    bi = bwd;
    bi.state[2][5] = -1.0f;
    report(tt_embedding_validate_inputs(c, bi, true).find("state2[5] is -1") != std::string::npos, "validate_inputs names a negative state",
           tt_embedding_validate_inputs(c, bi, true));
    bi = bwd;
    bi.cores[1][7] = NAN;
    report(tt_embedding_validate_inputs(c, bi, false).find("core1[7] is nan") != std::string::npos, "validate_inputs names a NaN core",
           tt_embedding_validate_inputs(c, bi, false));
}

// --stash: the reference's prefixes (tt_embedding.h's layout, each P_1 element also by its formula from the cores), on
// ragged bags over several tables (empty bags too)
static void test_stash() {
    struct Case { std::vector<int> p, q, r; int tables, B, L; };
    const std::vector<Case> cases = {
        {{5, 7, 3}, {2, 2, 4}, {128, 128}, 2, 5, 3},
        {{4, 3, 5, 2}, {2, 3, 2, 2}, {3, 5, 4}, 3, 4, 5},
        {{2, 3, 2, 3, 2, 3}, {2, 1, 2, 3, 2, 2}, {2, 3, 4, 3, 2}, 2, 3, 4},
        {{3, 4}, {4, 4}, {8}, 2, 3, 2},                      // T = 2: nothing to keep
    };
    Rng rng(11);
    for (const Case& c : cases) {
        Problem P;
        if (!make_problem(P, c.p, c.q, c.r, c.tables, 1, 1, rng)) continue;
        TtEmbeddingForwardShape& s = P.s;
        s.B = c.B;
        s.nnz = (int64_t)c.tables * c.B * c.L;
        std::vector<int64_t> indices(s.nnz), offsets((size_t)c.tables * c.B + 1);
        for (auto& x : indices) x = rng.randint(0, s.E);
        for (int tbl = 0; tbl < c.tables; tbl++) {           // ragged: random cuts, every table's first bag empty
            const int64_t lo = (int64_t)tbl * c.B * c.L, hi = lo + (int64_t)c.B * c.L;
            std::vector<int64_t> cuts = {lo, lo};
            for (int b = 2; b < c.B; b++) cuts.push_back(lo + rng.randint(0, hi - lo + 1));
            std::sort(cuts.begin(), cuts.end());
            for (int b = 0; b < c.B; b++) offsets[(size_t)tbl * c.B + b] = cuts[b];
        }
        offsets.back() = s.nnz;
        int64_t off[TT_EMBEDDING_FORWARD_MAX_CORES] = {};
        const int64_t floats = tt_embedding_stash_layout(s.T, s.q, s.R, s.nnz, off);
        int64_t want = 0, Q = s.q[0];
        for (int t = 1; t <= s.T - 2; t++) { Q *= s.q[t]; want += s.nnz * Q * s.R[t + 1]; }
        std::vector<float> out((size_t)c.tables * c.B * s.D), ref(std::max<int64_t>(floats, 1), NAN);
        tt_embedding_forward_cpu(out.data(), P.ptrs.data(), indices.data(), offsets.data(), s, ref.data(), off);
        std::string why_formula;
        for (int tbl = 0, n = 0; s.T >= 3 && n < s.nnz; n++) {           // P_1[n][a_0 q_1 + a_1][k_2] = sum_k G_0[i_0][0, a_0, k] G_1[i_1][k, a_1, k_2]
            while (tbl + 1 < c.tables && offsets[(size_t)(tbl + 1) * c.B] <= n) tbl++;
            const int64_t i0 = indices[n] / s.stride[0] % s.p[0], i1 = indices[n] / s.stride[1] % s.p[1];
            for (int e = 0; e < 8; e++) {
                const int a0 = (int)rng.randint(0, s.q[0]), a1 = (int)rng.randint(0, s.q[1]), k2 = (int)rng.randint(0, s.R[2]);
                double v = 0.0;
                for (int k = 0; k < s.R[1]; k++) v += core_elem(P, 0, tbl, i0, 0, a0, k) * core_elem(P, 1, tbl, i1, k, a1, k2);
                if (!close(ref[off[1] + (int64_t)n * s.Q[1] * s.R[2] + (a0 * s.q[1] + a1) * s.R[2] + k2], v, 1e-6, 1e-6))
                    why_formula += " n" + std::to_string(n);
            }
        }
        report(floats == want, P.name + ": the stash holds sum_t nnz Q_t R_{t+1} floats", std::to_string(floats) + " vs " + std::to_string(want));
        if (floats == 0) continue;                           // (T = 2)
        report(why_formula.empty(), P.name + ": the reference's P_1 = its formula from the cores (layout of tt_embedding.h)", why_formula.substr(0, 200));
    }
}

int main() {
    test_worked_example();
    test_random_shapes();
    test_pooled();
    test_validator();
    test_bag_validator();
    test_default_counts();
    test_digits();
    test_v4();
    test_tiled();
    test_tiled_tc_layout<32>();
    test_tiled_tc_layout<64>();
    test_tiled_tc_layout<128>();
    test_fast_digits();
    test_table_of();
    {
        Rng rng(101);
        test_tc_banks(4, 4, 4);        // FBTT's default, q 8,4,4
        test_tc_banks(2, 4, 2);        // ranks 16
        test_tc_banks(4, 8, 4);        // q 4,8,8
        test_tc_tile(4, 4, 4, rng);
        test_tc_tile(4, 4, 3, rng);    // a partial tile: slot 3's rows are zeros and not written
        test_tc_tile(4, 2, 4, rng);
        test_tc_tile(4, 2, 1, rng);
        test_tc_tile(4, 8, 4, rng);    // ranks 64
        test_tc_tile(4, 8, 2, rng);
        test_tc_tile(8, 4, 2, rng);    // q 8,4,4: two lookups of 8 rows per tile
        test_tc_tile(8, 4, 1, rng);
        test_tc_tile(2, 4, 8, rng);    // q_0 = 2 (the mapping; no such instantiation): eight lookups of 2 rows
        test_tc_tile(4, 4, 4, rng, 8, 8);   // q 4,8,8 (D 256): 8 a_1 of 8 a_2 values each
        test_tc_tile(4, 4, 3, rng, 8, 8);
    }
    test_v5_filter();
    test_digit_mask();
    test_dispatch();
    test_split();
    test_replay();
    test_stash();
    return test_summary();
}
