// CPU tests of dev/cuda/tt_embedding_backward.cu (no GPU is touched):
//  - the reference's row decode on a worked example, and the default shape's counts
//  - the backward reference against central finite differences of <Y(G), dY> in double, T = 2..6
//  - versions 1-3 and 6 emulated on the CPU (the kernels' __host__ __device__ bodies run thread by thread,
//    phase by phase; cuBLAS's batched GEMM by a column-major loop with the same arguments), checked against
//    the reference by the op's own check, for T = 2..6, several optimizers, empty bags, tables > 1, Zipf hot
//    slices longer than a chunk, ranks 64 and 128 (G_h and its gradient in global memory), and block sizes
//    that are not multiples of 32; version 6 also bit for bit in reverse block and thread order
//  - version 7's tensor-core fragment maps and small steps, and the default version's dispatcher
//  - version 7 at T = 2 emulated (the sort by std::stable_sort, every span's warp program, the combine), bit for bit
//    the same with the spans reversed; its merged cores (the merge kernels' block programs over their grids)
//  - the check itself catches a changed untouched slice and a gradient error
//  - FBTT's optimizer update grid at its default p: which core rows it never updates, against ours
//  - the backward's own limits (the shared validators of tt_embedding.h are tested in test_tt_embedding_forward)
//  - every host planner (the routes, the group, merge and slice plans) ends, with sane plans, at 4,000 random grid shapes
// Prints PASS <case> / FAIL <case>: <why> per case; exits 1 if any failed.
#define NO_MAIN
#include "test_util.h"
#include "../dev/cuda/tt_embedding_backward.cu"

#include <csignal>
#include <fcntl.h>
#include <random>
#include <unistd.h>

// run f with stdout silenced (the op's check prints a line per array)
template <class F>
static auto quietly(F&& f) {
    fflush(stdout);
    int saved = dup(1), devnull = open("/dev/null", O_WRONLY);
    dup2(devnull, 1);
    auto r = f();
    fflush(stdout);
    dup2(saved, 1);
    close(devnull);
    close(saved);
    return r;
}

// ------------------------------------------------------------------------------------------------
// a test problem, made in the same order as main makes it

struct Case {
    std::string name;
    std::vector<int> p, q, ranks;
    int tables, B, L;
    double alpha;
    bool ragged;
    uint64_t seed;
};

struct Problem {
    TtEmbeddingBackwardShape s;
    int L;
    std::vector<int64_t> offsets, indices;
    std::vector<float> cores, dY, state;
};

static Problem make_problem(const Case& c) {
    Problem pr;
    TtEmbeddingConfig cfg;
    cfg.p = c.p; cfg.q = c.q; cfg.ranks = c.ranks; cfg.tables = c.tables; cfg.B = c.B; cfg.L = c.L; cfg.alpha = c.alpha;
    cfg.ragged = c.ragged;
    std::string err = tt_embedding_check_config(cfg);
    if (err.empty()) err = tt_embedding_backward_check_config(cfg, 0.05, 1e-8);
    if (!err.empty()) { printf("bad test case %s: %s\n", c.name.c_str(), err.c_str()); exit(1); }
    pr.s = tt_embedding_backward_make_shape(cfg.p, cfg.q, cfg.ranks, cfg.E, cfg.tables, cfg.B);
    pr.L = c.L;
    const TtEmbeddingInputs in = tt_embedding_make_inputs(cfg, c.seed, true);
    err = tt_embedding_validate_inputs(cfg, in, true);
    if (!err.empty()) { printf("bad test inputs %s: %s\n", c.name.c_str(), err.c_str()); exit(1); }
    pr.offsets = in.offsets;
    pr.indices = in.indices;
    pr.s.nnz = (int)pr.indices.size();
    pr.cores = tt_embedding_backward_pack(pr.s, in.cores);
    pr.dY = in.dY;
    pr.state = tt_embedding_backward_pack(pr.s, in.state);
    return pr;
}

// ------------------------------------------------------------------------------------------------
// emulation of the versions

// (__host__ __device__ only because the block programs are; it runs on the CPU)
struct HostExec {
    int nt;
    template <class F>
    __host__ __device__ void phase(F&& f) {
        for (int t = 0; t < nt; t++) f(t);
    }
};

// raw memory filled with 0xFF bytes (NaN as float, -1 as int), like the GPU's poison
struct Poisoned {
    std::vector<unsigned char> bytes;
    explicit Poisoned(size_t n_floats) : bytes(std::max<size_t>(n_floats, 1) * 4 + 16, 0xFF) {}
    float* f() { return reinterpret_cast<float*>(bytes.data()); }
    int* i() { return reinterpret_cast<int*>(bytes.data()); }
};

struct StepOut {
    std::vector<float> cores, state, dG;
};

// the optimizer pass of versions 1-3, its grid-stride loop emulated block by block
static void emulate_optimizer_pass(const TtEmbeddingBackwardShape& s, int opt, float lr, float eps, StepOut& o) {
    if (opt == TT_EMBEDDING_BACKWARD_DENSE) return;
    const int64_t total = s.core_off[s.T];
    const int block = 256;
    const unsigned grid = tt_embedding_backward_optimizer_grid(total, block);
    for (unsigned b = 0; b < grid; b++)
        for (int th = 0; th < block; th++)
            for (int64_t i = (int64_t)b * block + th; i < total; i += (int64_t)grid * block)
                tt_embedding_backward_apply(opt, lr, eps, o.cores.data(), o.state.data(), nullptr, i, o.dG[i]);
}

// cublasGemmBatchedEx's semantics (column-major, C = op(A) op(B)) with the launcher's arguments
// one column-major GEMM, C = op(A) op(B) (m x n, inner k), as cuBLAS defines it
static void colmajor_gemm(bool ta, bool tb, int m, int n, int k, const float* A, int lda, const float* B, int ldb, float* C, int ldc) {
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            float acc = 0.0f;
            for (int l = 0; l < k; l++)
                acc = fmaf(ta ? A[l + (int64_t)i * lda] : A[i + (int64_t)l * lda], tb ? B[j + (int64_t)l * ldb] : B[l + (int64_t)j * ldb], acc);
            C[i + (int64_t)j * ldc] = acc;
        }
}
static void emulate_gemm_batched(const TtEmbeddingBackwardBlasCall& c, float** ptrs, int chunk, int N) {
    for (int b = 0; b < N; b++)
        colmajor_gemm(c.ta != CUBLAS_OP_N, c.tb != CUBLAS_OP_N, c.m, c.n, c.k, ptrs[(int64_t)c.slot_a * chunk + b], c.lda,
                      ptrs[(int64_t)c.slot_b * chunk + b], c.ldb, ptrs[(int64_t)c.slot_c * chunk + b], c.ldc);
}

// One step of version k (1..3) from the problem's inputs; nt = threads per block for version 3.
static StepOut emulate(int k, const Problem& pr, int opt, float lr, float eps, int nt) {
    const TtEmbeddingBackwardShape& s = pr.s;
    const int64_t C = s.core_off[s.T];
    StepOut o;
    o.cores = pr.cores;
    o.state = pr.state;
    o.dG.assign((size_t)C, std::numeric_limits<float>::quiet_NaN());   // poisoned output
    const int64_t* offsets = pr.offsets.data();
    const int64_t* indices = pr.indices.data();
    const float* dY = pr.dY.data();
    if (k <= 3) std::fill(o.dG.begin(), o.dG.end(), 0.0f);            // the launchers' memset
    if (k == 1) {
        int Ssum = 0;
        for (int t = 0; t < s.T; t++) Ssum += s.S[t];
        for (int64_t gid = 0; gid < (int64_t)s.nnz * Ssum; gid++)
            tt_embedding_backward_naive_element(s, gid, Ssum, offsets, indices, o.cores.data(), dY, o.dG.data());
        emulate_optimizer_pass(s, opt, lr, eps, o);
    } else if (k == 2) {
        const int chunk = 7;   // small, so several chunks and a ragged last one are exercised
        const int slots = tt_embedding_backward_fbtt_slots(s.T);
        Poisoned rows((size_t)s.T * chunk);
        std::vector<float*> ptrs((size_t)slots * chunk, nullptr);
        std::vector<Poisoned> P, trG;
        TtEmbeddingBackwardFbttBufs bufs;
        memset(&bufs, 0, sizeof bufs);
        P.reserve(s.T);
        trG.reserve(s.T);
        for (int t = 0; t < s.T; t++) {
            P.emplace_back(t >= 1 && t <= s.T - 2 ? (size_t)chunk * s.m[t] * s.R[t + 1] : 1);
            trG.emplace_back((size_t)chunk * s.S[t]);
            if (t >= 1 && t <= s.T - 2) bufs.P[t] = P[t].f();
            bufs.trG[t] = trG[t].f();
        }
        for (int64_t start = 0; start < s.nnz; start += chunk) {
            const int N = (int)std::min<int64_t>(chunk, s.nnz - start);
            for (int nl = 0; nl < N; nl++)
                tt_embedding_backward_fbtt_setup_lookup(s, start, nl, chunk, offsets, indices, o.cores.data(), dY, bufs,
                                                        ptrs.data(), rows.i());
            auto scatter = [&](int t) {
                for (int64_t i = 0; i < (int64_t)N * s.S[t]; i++)
                    tt_embedding_backward_fbtt_scatter_element(s, t, i, rows.i() + (int64_t)t * chunk, trG[t].f(), o.dG.data());
            };
            for (int t = 0; t <= s.T - 3; t++) emulate_gemm_batched(tt_embedding_backward_fbtt_call(s, 0, t), ptrs.data(), chunk, N);
            for (int t = s.T - 1; t >= 1; t--) {
                emulate_gemm_batched(tt_embedding_backward_fbtt_call(s, 1, t), ptrs.data(), chunk, N);
                scatter(t);
                emulate_gemm_batched(tt_embedding_backward_fbtt_call(s, 2, t), ptrs.data(), chunk, N);
            }
            scatter(0);
        }
        emulate_optimizer_pass(s, opt, lr, eps, o);
    } else if (k == 3) {
        const TtEmbeddingBackwardLayout L = tt_embedding_backward_make_layout(s, 1);
        Poisoned bag_of(s.nnz);
        for (int bag = 0; bag < s.num_bags; bag++)
            for (int64_t j = pr.offsets[bag]; j < pr.offsets[bag + 1]; j++)
                bag_of.i()[j] = bag;   // the bags kernel
        if (s.nnz > 0) {
            const int grid = (int)std::min<int64_t>(ceil_div<int64_t>(s.nnz, L.nb), 1 << 20);
            Poisoned sm(L.total_floats);
            HostExec ex{nt};
            for (int b = 0; b < grid; b++)
                tt_embedding_backward_fused_block(ex, s, L, sm.f(), b, grid, indices, bag_of.i(), o.cores.data(), dY,
                                                  o.dG.data());
        }
        emulate_optimizer_pass(s, opt, lr, eps, o);
    }
    return o;
}

static bool check_step(const Problem& pr, const TtEmbeddingBackwardReference& ref, int opt, float lr, float eps, const StepOut& o,
                       bool show_on_fail = true) {
    auto run = [&] {
        return tt_embedding_backward_check(pr.s, opt, lr, eps, ref, pr.cores.data(), pr.state.data(), o.cores.data(),
                                           o.state.data(), o.dG.data());
    };
    bool ok = quietly(run);
    if (!ok && show_on_fail) run();   // print the details
    return ok;
}

// ------------------------------------------------------------------------------------------------

static void test_decode_and_counts() {
    // the spec's worked example: p = [3,4,5], L = [20,5,1], row 37 -> (1,3,2)
    TtEmbeddingBackwardShape s = tt_embedding_backward_make_shape({3, 4, 5}, {2, 2, 2}, {2, 3}, 0, 1, 1);
    int idx[TT_EMBEDDING_BACKWARD_MAX_T];
    tt_embedding_backward_decode_row(s, 37, idx);
    report(s.Lrad[0] == 20 && s.Lrad[1] == 5 && s.Lrad[2] == 1 && idx[0] == 1 && idx[1] == 3 && idx[2] == 2 && s.E == 60 &&
               s.S[0] == 4 && s.S[1] == 12 && s.S[2] == 6,
           "decode_worked_example", "row 37 of p=[3,4,5] must decode to (1,3,2) with L = [20,5,1] and slices 4, 12, 6");
    // FBTT's default: cores hold 958,720 floats, 106,496 backward FLOPs per lookup, pivot core 1; version 3's layout aligned
    TtEmbeddingBackwardShape d = tt_embedding_backward_make_shape({200, 220, 250}, {4, 4, 4}, {32, 32}, 0, 1, 512);
    int64_t elems = 0;
    for (int t = 0; t < d.T; t++) elems += tt_embedding_backward_core_elems(d, t);
    const double flops = tt_embedding_backward_flops_per_lookup(d);
    const int pivot = tt_embedding_backward_pick_pivot(d);
    const TtEmbeddingBackwardLayout L = tt_embedding_backward_make_layout(d, 1);
    bool aligned = L.lookup_floats % 4 == 0 && L.int_off % 4 == 0 && L.g_off % 4 == 0;
    for (int t = 0; t < d.T; t++) aligned = aligned && L.sl_off[t] % 4 == 0 && L.P_off[t] % 4 == 0 && L.dM_off[t] % 4 == 0;
    char why[256];
    snprintf(why, sizeof why, "elements %lld (want 958720), E %lld, flops %.0f (want 106496), pivot %d (want 1), smem %zu, aligned %d",
             (long long)elems, (long long)d.E, flops, pivot, tt_embedding_backward_smem_bytes(L), (int)aligned);
    report(elems == 958720 && d.E == 11000000 && flops == 106496.0 && pivot == 1 && aligned && L.PS[1] == 129,
           "default_shape_counts", why);
}

// <Y(G), dY> is linear in every core element (each lookup uses one slice of each core), so the
// central difference with h = 1 is exact up to rounding in double.
static void test_finite_differences(const Case& c) {
    Problem pr = make_problem(c);
    const TtEmbeddingBackwardShape& s = pr.s;
    TtEmbeddingBackwardReference ref = tt_embedding_backward_reference(s, pr.cores, pr.offsets, pr.indices, pr.dY);
    std::vector<double> G(pr.cores.begin(), pr.cores.end()), Y((size_t)s.num_bags * s.D);
    auto f = [&]() {
        tt_embedding_backward_forward_cpu(s, G.data(), pr.offsets.data(), pr.indices.data(), Y.data());
        double v = 0.0;
        for (size_t i = 0; i < Y.size(); i++) v += Y[i] * pr.dY[i];
        return v;
    };
    // the scale of f's terms, for the rounding tolerance
    for (auto& x : G) x = fabs(x);
    tt_embedding_backward_forward_cpu(s, G.data(), pr.offsets.data(), pr.indices.data(), Y.data());
    double fscale = 0.0;
    for (size_t i = 0; i < Y.size(); i++) fscale += Y[i] * fabs(pr.dY[i]);
    G.assign(pr.cores.begin(), pr.cores.end());
    double worst = 0.0;
    int64_t bad = 0, checked = 0, mag_bad = 0;
    for (int t = 0; t < s.T; t++)
        for (int64_t e = 0; e < tt_embedding_backward_core_elems(s, t); e++) {
            const int64_t i = s.core_off[t] + e;
            const double x = G[i];
            G[i] = x + 1.0;
            const double fp = f();
            G[i] = x - 1.0;
            const double fm = f();
            G[i] = x;
            const double fd = (fp - fm) / 2.0, err = fabs(fd - ref.dG[i]);
            worst = std::max(worst, err);
            if (err > 1e-12 * (1.0 + fscale)) bad++;
            if (fabs(ref.dG[i]) > ref.mag[i] * (1 + 1e-12) + 1e-300) mag_bad++;
            checked++;
        }
    char why[256];
    snprintf(why, sizeof why, "%lld of %lld elements differ from the central difference (worst %.3g, scale %.3g); %lld with |dG| > mag",
             (long long)bad, (long long)checked, worst, fscale, (long long)mag_bad);
    report(bad == 0 && mag_bad == 0 && checked > 0, "finite_differences_" + c.name, why);
}

static const char* opt_name(int opt) { return TT_EMBEDDING_BACKWARD_OPT_NAMES[opt]; }

// ------------------------------------------------------------------------------------------------
// version 6, emulated: the prep kernel block by block (whichever block counts last plans, as on the GPU),
// kernel 2's chunks and kernel 3's items in a given order (forward, or reversed: then other blocks finish
// a long slice's parts last), every block with fresh NaN-filled shared memory.

// the register accumulators of every emulated thread
template <int ACC>
struct HostAcc6 {
    float* p;
    __host__ __device__ float (&operator()(int tid))[ACC > 0 ? ACC : 1][16] {
        return *reinterpret_cast<float (*)[ACC > 0 ? ACC : 1][16]>(p + (size_t)tid * (ACC > 0 ? ACC : 1) * 16);
    }
};

// runs a phase's threads in increasing or (rev) decreasing order: a phase in which one thread reads what
// another writes would give other bits in the two orders
struct HostExec6 {
    int nt;
    bool rev;
    template <class F>
    __host__ __device__ void phase(F&& f) {
        for (int i = 0; i < nt; i++) f(rev ? nt - 1 - i : i);
    }
};

struct Emu6Info {
    TtEmbeddingBackwardGroupPlan plan;
    int nchunks = 0, nitems = 0, multi_chunk_slices = 0, multi_part_items = 0, batches = 0;
    bool chunks_cover = false;   // the chunk list has every lookup of every pivot slice exactly once
    bool lists_ok = false;       // every slice's list holds exactly its lookups, in increasing order
};

// a step's outputs before the kernels: the cores and state as made, dG poisoned (zeros in dense mode: the launchers' memset)
static StepOut start_step(const Problem& pr, int opt) {
    StepOut o;
    o.cores = pr.cores;
    o.state = pr.state;
    o.dG.assign((size_t)pr.s.core_off[pr.s.T], opt == TT_EMBEDDING_BACKWARD_DENSE ? 0.0f : std::numeric_limits<float>::quiet_NaN());
    return o;
}

// version 6's workspace (versions 6 and 9 group by its prep and list kernels), poisoned, its counters zeroed
struct Grouping6 {
    Poisoned keys, bag_of, chunk_desc, choff, totals, item_desc, start, list;
    std::vector<int> zeroed;   // the launcher's memset
    TtEmbeddingBackwardWorkspace ws;
    Grouping6(const TtEmbeddingBackwardShape& s, const TtEmbeddingBackwardGroupPlan& P)
        : keys((size_t)s.T * P.key_stride), bag_of(s.nnz), chunk_desc((size_t)P.max_chunks * 4), choff(s.tables * s.p[P.h] + 1),
          totals(2), item_desc((size_t)P.max_items * 4), start(s.key_base[s.T] + 1), list((size_t)s.T * s.nnz),
          zeroed((size_t)s.key_base[s.T] + 1 + P.max_items, 0) {
        memset(&ws, 0, sizeof ws);
        ws.keys = keys.i(); ws.bag_of = bag_of.i();
        ws.zeroed = zeroed.data(); ws.counts = ws.zeroed; ws.done = ws.zeroed + s.key_base[s.T]; ws.ctr = ws.done + 1;
        ws.chunk_desc = chunk_desc.i(); ws.choff = choff.i(); ws.totals = totals.i(); ws.item_desc = item_desc.i();
        ws.start = start.i(); ws.list = list.i();
    }
};

// version 6's kernel 1 (prep, and the plan of its last block: version 6's, or plan(ex) where given: version 9's) and list
// kernel (version 6's block per slice, or list(ex, g, scan, stage, cap) where given: version 9's), emulated (versions 6 and 9
// group by them; list_nt: the list kernel's threads; bucket: where the prep also fills the slices' buckets, version 9)
using ListBlock = std::function<void(HostExec6&, int, int*, int*, int)>;
static void emulate6_grouping(const Problem& pr, const TtEmbeddingBackwardGroupPlan& P, const TtEmbeddingBackwardWorkspace& ws, bool reverse,
                              int tile, const std::function<void(HostExec6&)>& plan = nullptr,
                              int list_nt = TT_EMBEDDING_BACKWARD_GROUP_LIST_BLOCK, int* bucket = nullptr, const ListBlock& list = nullptr) {
    const TtEmbeddingBackwardShape& s = pr.s;
    const int K_total = s.key_base[s.T];
    const int nblk1 = ceil_div(s.nnz, TT_EMBEDDING_BACKWARD_GROUP_PREP_BLOCK);
    std::vector<int> scan1(3 * TT_EMBEDDING_BACKWARD_GROUP_PREP_BLOCK);
    for (int b = 0; b < nblk1; b++) {
        for (int th = 0; th < TT_EMBEDDING_BACKWARD_GROUP_PREP_BLOCK; th++) {
            const int j = b * TT_EMBEDDING_BACKWARD_GROUP_PREP_BLOCK + th;
            tt_embedding_backward_group_prep_lookup(s, P.key_stride, j, pr.offsets.data(), pr.indices.data(), ws.keys, ws.bag_of, ws.counts,
                                                    bucket);
        }
        if (tt_embedding_backward_group_atomic_inc(ws.done, 1) == nblk1 - 1) {
            HostExec6 ex{TT_EMBEDDING_BACKWARD_GROUP_PREP_BLOCK, reverse};
            if (plan) plan(ex);
            else tt_embedding_backward_group_plan_block(ex, s, P, ws.counts, scan1.data(), ws.chunk_desc, ws.choff, ws.item_desc, ws.start,
                                                        ws.totals);
        }
    }
    std::vector<int> scanL(3 * TT_EMBEDDING_BACKWARD_GROUP_LIST_BLOCK), stageL(tile > 0 ? std::min(tile, tt_embedding_backward_group_list_stage(P))
                                                                     : tt_embedding_backward_group_list_stage(P));
    for (int gi = 0; gi < K_total; gi++) {
        const int g = reverse ? K_total - 1 - gi : gi;
        std::fill(stageL.begin(), stageL.end(), -7);
        HostExec6 ex{list_nt, reverse};
        if (list) list(ex, g, scanL.data(), stageL.data(), (int)stageL.size());
        else tt_embedding_backward_group_list_block(ex, s, P, g, ws, scanL.data(), stageL.data(), (int)stageL.size());
    }
}

// every slice's list holds exactly its lookups, in increasing order (checked by a plain loop)
static bool lists_in_order(const TtEmbeddingBackwardShape& s, const TtEmbeddingBackwardGroupPlan& P, const TtEmbeddingBackwardWorkspace& ws) {
    const int K_total = s.key_base[s.T];
    bool lists = ws.start[0] == 0 && ws.start[K_total] == s.T * s.nnz;
    for (int g = 0; g < K_total && lists; g++) {
        const int t = tt_embedding_backward_key_core(s, g), k = g - s.key_base[t];
        int expect = 0;
        for (int j = 0, pos = ws.start[g]; j < s.nnz && lists; j++) {
            if (ws.keys[(int64_t)t * P.key_stride + j] != k) continue;
            lists = pos < ws.start[g + 1] && ws.list[pos++] == j;
            expect++;
        }
        lists = lists && ws.start[g + 1] - ws.start[g] == expect;
    }
    return lists;
}

// tile > 0: the list kernel's key scans in tiles of that many keys (a multiple of 4), so that small
// problems take the multi-tile path that only problems beyond 10,240 lookups take on the GPU
static StepOut emulate6(const Problem& pr, int opt, float lr, float eps, int nt, bool reverse, Emu6Info* info = nullptr,
                        int tile = 0) {
    const TtEmbeddingBackwardShape& s = pr.s;
    StepOut o = start_step(pr, opt);
    if (s.nnz == 0) return o;
    // W as main lays it out
    const int pivot = tt_embedding_backward_pick_pivot(s);
    int64_t W_total = 0, W_off[TT_EMBEDDING_BACKWARD_MAX_T] = {};
    for (int t = 0; t < s.T; t++) {
        W_off[t] = W_total;
        if (t != pivot) W_total += (int64_t)s.nnz * s.S[t];
    }
    const TtEmbeddingBackwardGroupPlan P = tt_embedding_backward_group_make_plan(s, W_off, nt);
    const int h = P.h, Kc = s.tables * s.p[h];
    Grouping6 gr(s, P);
    Poisoned W(W_total), partial((size_t)P.max_chunks * s.S[h]), final_parts((size_t)P.max_items * TT_EMBEDDING_BACKWARD_GROUP_CW);
    TtEmbeddingBackwardWorkspace& ws = gr.ws;
    ws.W = W.f(); ws.partial = partial.f(); ws.final_parts = final_parts.f();
    const TtEmbeddingBackwardIo io = {pr.dY.data(), o.cores.data(), o.state.data(), o.dG.data(), opt, lr, eps};
    emulate6_grouping(pr, P, ws, reverse, tile);
    // kernel 2
    std::vector<float> sm((size_t)P.total_floats + 4), accbuf((size_t)nt * 64);
    for (int bi = 0; bi < P.max_chunks; bi++) {
        const int b = reverse ? P.max_chunks - 1 - bi : bi;
        std::fill(sm.begin(), sm.end(), std::numeric_limits<float>::quiet_NaN());
        std::fill(accbuf.begin(), accbuf.end(), std::numeric_limits<float>::quiet_NaN());
        HostExec6 ex{nt, reverse};
        if (P.acc == 1) {
            HostAcc6<1> acc{accbuf.data()};
            tt_embedding_backward_group_chunk_block<1>(ex, acc, s, P, sm.data(), b, ws, io);
        } else if (P.acc == 2) {
            HostAcc6<2> acc{accbuf.data()};
            tt_embedding_backward_group_chunk_block<2>(ex, acc, s, P, sm.data(), b, ws, io);
        } else if (P.acc == 4) {
            HostAcc6<4> acc{accbuf.data()};
            tt_embedding_backward_group_chunk_block<4>(ex, acc, s, P, sm.data(), b, ws, io);
        } else {
            HostAcc6<0> acc{accbuf.data()};
            tt_embedding_backward_group_chunk_block<0>(ex, acc, s, P, sm.data(), b, ws, io);
        }
    }
    // kernel 3
    std::vector<int> ids(TT_EMBEDDING_BACKWARD_GROUP_RC);
    std::vector<float> sums(std::max(TT_EMBEDDING_BACKWARD_GROUP_FINAL_BLOCK, TT_EMBEDDING_BACKWARD_GROUP_CW));
    int flag = 0;
    const int nitems = ws.totals[1];
    for (int ii = 0; ii < nitems; ii++) {
        const int item = reverse ? nitems - 1 - ii : ii;
        std::fill(sums.begin(), sums.end(), std::numeric_limits<float>::quiet_NaN());
        HostExec6 ex{TT_EMBEDDING_BACKWARD_GROUP_FINAL_BLOCK, reverse};
        tt_embedding_backward_group_final_item(ex, s, P, item, ws, io, ids.data(), sums.data(), &flag);
    }
    if (info) {
        info->plan = P;
        info->nchunks = ws.totals[0];
        info->nitems = nitems;
        // every lookup of every pivot slice in exactly one chunk: the chunks of slice k are consecutive and
        // their rank ranges tile [0, count)
        bool cover = ws.totals[0] <= P.max_chunks && nitems <= P.max_items;
        int64_t covered = 0;
        for (int k = 0; k < Kc && cover; k++) {
            const int n = ws.counts[s.key_base[h] + k];
            int next = 0;
            for (int c = ws.choff[k]; c < ws.choff[k + 1]; c++) {
                const int* d = ws.chunk_desc + (int64_t)c * 4;
                cover = cover && d[0] == k && d[1] == next && d[2] > d[1] && d[2] - d[1] <= P.chunk;
                next = d[2];
                info->batches += ceil_div(d[2] - d[1], P.nb);
            }
            cover = cover && next == n;
            covered += n;
            if (ws.choff[k + 1] - ws.choff[k] > 1) info->multi_chunk_slices++;
        }
        info->chunks_cover = cover && covered == s.nnz;
        info->lists_ok = lists_in_order(s, P, ws);
        for (int i = 0; i < nitems; i++) info->multi_part_items += ws.item_desc[(int64_t)i * 4 + 3] > 1;
    }
    return o;
}

static bool same_bits(const StepOut& a, const StepOut& b) {
    return memcmp(a.cores.data(), b.cores.data(), a.cores.size() * 4) == 0 &&
           memcmp(a.state.data(), b.state.data(), a.state.size() * 4) == 0 &&
           memcmp(a.dG.data(), b.dG.data(), a.dG.size() * 4) == 0;
}

// Version 6 against the reference at several block sizes, and bit for bit the same with the blocks, the
// items and the threads of every phase run in the opposite order (another block finishing a long slice's
// parts last; a phase that read another thread's writes of the same phase would show).
static void test_v6(const Case& c, const std::vector<int>& opts, const std::vector<int>& nts, bool expect_fast = false, int tile = 0,
                    int want_mode = -1) {
    Problem pr = make_problem(c);
    TtEmbeddingBackwardReference ref = tt_embedding_backward_reference(pr.s, pr.cores, pr.offsets, pr.indices, pr.dY);
    const float lr = 0.05f, eps = 1e-8f;
    for (int opt : opts)
        for (int nt : nts) {
            Emu6Info info;
            StepOut o = emulate6(pr, opt, lr, eps, nt, false, &info, tile);
            const bool ok = check_step(pr, ref, opt, lr, eps, o);
            StepOut o2 = emulate6(pr, opt, lr, eps, nt, true, nullptr, tile);
            const bool same = same_bits(o, o2);
            const TtEmbeddingBackwardGroupPlan& P = info.plan;
            const int mode = P.acc_global ? 1 : 0;   // where dG_h lives (make_plan6)
            const bool fast_ok = (!expect_fast || (P.fastI && P.fastII + P.fastIII >= 1)) && (want_mode < 0 || mode == want_mode);
            char name[160], why[400];
            snprintf(name, sizeof name, "emulate_v6_%s_%s_nt%d%s", c.name.c_str(), opt_name(opt), nt,
                     tile ? ("_tile" + std::to_string(tile)).c_str() : "");
            snprintf(why, sizeof why,
                     "check %d, bitwise same in reverse block and thread order %d, chunks cover %d, lists %d (nnz %d), float4 paths %d%d%d (expected: %d), "
                     "pivot %d acc %d NB %d PH %d F %d, G_h/dG_h mode %d (expected %d), %d chunks (%d slices split), %d items (%d multi-part)",
                     (int)ok, (int)same, (int)info.chunks_cover, (int)info.lists_ok, pr.s.nnz, P.fastI, P.fastII, P.fastIII, (int)expect_fast, P.h, P.acc,
                     P.nb, P.PH, P.F, mode, want_mode, info.nchunks, info.multi_chunk_slices, info.nitems, info.multi_part_items);
            report(ok && same && ((info.chunks_cover && info.lists_ok) || pr.s.nnz == 0) && fast_ok, name, why);
            if (ok && same) printf("     (%s)\n", why);
        }
}

// ------------------------------------------------------------------------------------------------
// version 9, emulated: version 6's grouping, the items block, every product launch block by block (forward or
// reversed order, threads too) with NaN-filled shared memory and accumulators, the reduce kernel

struct EmuSliceInfo {
    TtEmbeddingBackwardSlicePlan plan;
    int tiles = 0, parts = 0, multi_part_slices = 0, one_part_slices = 0;   // (one part: the optimizer in G's epilogue)
    int bucket_slices = 0, scan_slices = 0;   // slices listed from their bucket / by the ordered scan
    bool within_bounds = false;   // the real item counts within the plan's grid bounds
    bool lists_ok = false;        // every slice's list: its lookups in increasing order
    bool items_ok = false;        // the work lists: core by core, slice by slice, (g, 0 ..) for its tiles and its parts
};

// version 9's work lists as a plain loop makes them
static bool slice_items_in_order(const TtEmbeddingBackwardShape& s, const TtEmbeddingBackwardSlicePlan& P, const TtEmbeddingBackwardSliceIo& io,
                                 const int* counts) {
    bool ok = io.totals[0] == 0 && io.totals[s.T + 1] == 0;
    int rt = 0, pt = 0;
    for (int t = 0; t < s.T && ok; t++) {
        ok = io.totals[t] == rt && io.totals[s.T + 1 + t] == pt;
        for (int g = s.key_base[t]; g < s.key_base[t + 1] && ok; g++) {
            ok = io.first_rt[g] == rt && io.first_part[g] == pt;
            for (int i = 0; i < tt_embedding_backward_slice_tiles(P, t, counts[g]) && ok; i++, rt++)
                ok = io.rt_items[2 * rt] == g && io.rt_items[2 * rt + 1] == i;
            for (int i = 0; i < tt_embedding_backward_slice_parts(P, t, counts[g]) && ok; i++, pt++)
                ok = io.pt_items[2 * pt] == g && io.pt_items[2 * pt + 1] == i;
        }
    }
    return ok && io.totals[s.T] == rt && io.totals[2 * s.T + 1] == pt;
}

// the 16 register accumulators of every emulated thread
struct HostAccSlice {
    float* p;
    __host__ __device__ float* operator()(int tid) { return p + (size_t)tid * 16; }
};

// (the K-steps' products on the tensor cores' fragments, emulated per accumulator)
// (vec: the float4 loads where the launcher takes them, tt_embedding_backward_slice_vec; else scalar loads everywhere)
// (stash: the forward's prefixes, read in place of F's products, which then do not run)
static StepOut emulate9(const Problem& pr, int opt, float lr, float eps, bool reverse, EmuSliceInfo* info = nullptr, bool vec = true,
                        float* stash = nullptr) {
    const TtEmbeddingBackwardShape& s = pr.s;
    StepOut o = start_step(pr, opt);
    if (s.nnz == 0) return o;
    int64_t W_off[TT_EMBEDDING_BACKWARD_MAX_T] = {};
    const TtEmbeddingBackwardGroupPlan P6 = tt_embedding_backward_group_make_plan(s, W_off, TT_EMBEDDING_BACKWARD_TC_BLOCK);
    TtEmbeddingBackwardSlicePlan P;
    const std::string why = tt_embedding_backward_slice_make_plan(s, P, stash);
    if (!why.empty()) { printf("version 9 plan: %s\n", why.c_str()); exit(1); }
    const int K_total = s.key_base[s.T];
    Grouping6 gr(s, P6);
    const TtEmbeddingBackwardWorkspace& ws = gr.ws;
    Poisoned X(P.X_floats), partial(P.partial_floats), items(2 * ((size_t)P.rt_total + P.pt_total)), first(2 * K_total),
        totals(2 * (TT_EMBEDDING_BACKWARD_MAX_T + 1) + 1), multi(K_total);
    const TtEmbeddingBackwardIo oi = {pr.dY.data(), o.cores.data(), o.state.data(), o.dG.data(), opt, lr, eps};
    const TtEmbeddingBackwardSliceIo io = {o.cores.data(), pr.dY.data(), X.f(), stash ? stash : X.f(), partial.f(), ws.keys, ws.bag_of, ws.start, ws.list,
                                       P6.key_stride, items.i(), items.i() + 2 * (int64_t)P.rt_total, first.i(), first.i() + K_total, totals.i(),
                                       multi.i(), oi};
    std::vector<int> scan9(9 * TT_EMBEDDING_BACKWARD_GROUP_PREP_BLOCK), bucket((size_t)K_total * TT_EMBEDDING_BACKWARD_BUCKET, -5);
    int bucket_slices = 0, scan_slices = 0;
    // the list kernel's block per slice, its bucket first shuffled (on the GPU the slots follow the atomics' order)
    auto list = [&](HostExec6& ex, int g, int* scan, int* stage, int cap) {
        const int n = ws.counts[g];
        if (n > TT_EMBEDDING_BACKWARD_BUCKET) scan_slices++;
        else if (n > 0) bucket_slices++;
        int* b = bucket.data() + (size_t)g * TT_EMBEDDING_BACKWARD_BUCKET;
        std::mt19937 rng(7 + g);
        std::shuffle(b, b + std::min(n, TT_EMBEDDING_BACKWARD_BUCKET), rng);
        tt_embedding_backward_slice_list_block(ex, s, P6, P, io, ws, bucket.data(), g, scan, stage, cap);
    };
    emulate6_grouping(pr, P6, ws, reverse, 0, [&](HostExec6& ex) {
        tt_embedding_backward_slice_plan_block(ex, s, P, ws.counts, io, ws.start, scan9.data()); }, tt_embedding_backward_group_list_threads(P6),
        bucket.data(), list);
    const int nt = TT_EMBEDDING_BACKWARD_SLICE_BLOCK, BM = TT_EMBEDDING_BACKWARD_SLICE_BM, BN = TT_EMBEDDING_BACKWARD_SLICE_BN;
    std::vector<float> accbuf((size_t)nt * 16);
    HostAccSlice acc{accbuf.data()};
    TtEmbeddingBackwardSliceSmem sm;
    auto launch = [&](auto kind, int t, int gx, int gy) {
        for (int bi = 0; bi < gx * gy; bi++) {
            const int b = reverse ? gx * gy - 1 - bi : bi;
            std::fill(accbuf.begin(), accbuf.end(), std::numeric_limits<float>::quiet_NaN());
            memset((void*)&sm, 0xFF, sizeof sm);
            HostExec6 ex{nt, reverse};
            constexpr int K = decltype(kind)::value;
            if (vec && tt_embedding_backward_slice_vec(s, t))
                tt_embedding_backward_slice_gemm_block<K, true>(ex, acc, s, P, io, t, b % gx, b / gx, sm);
            else tt_embedding_backward_slice_gemm_block<K, false>(ex, acc, s, P, io, t, b % gx, b / gx, sm);
        }
    };
    using F = std::integral_constant<int, TT_EMBEDDING_BACKWARD_SLICE_F>;
    using Dk = std::integral_constant<int, TT_EMBEDDING_BACKWARD_SLICE_D>;
    using Gk = std::integral_constant<int, TT_EMBEDDING_BACKWARD_SLICE_G>;
    using Gn = std::integral_constant<int, TT_EMBEDDING_BACKWARD_SLICE_G_NARROW>;
    for (int t = 1; !stash && t <= s.T - 2; t++) launch(F{}, t, P.max_rt[t], ceil_div(s.n[t], BN));
    for (int t = s.T - 1; t >= 0; t--) {
        if (t == s.T - 1 && tt_embedding_backward_slice_direct_last_d(s)) {   // the last core's D, element by element (lookups past the device count are padding)
            const int per = s.m[t - 1] * s.R[t], cnt = tt_embedding_backward_count(s);
            for (int ni = 0; ni < cnt; ni++)
                for (int r = 0; r < per; r++) {
                    const float *g, *G;
                    float* out;
                    tt_embedding_backward_slice_last_d_rows(s, P, io, reverse ? cnt - 1 - ni : ni, g, G, out);
                    const int rr = reverse ? per - 1 - r : r;
                    out[rr] = tt_embedding_backward_slice_last_d(s, g, G, rr, vec && tt_embedding_backward_slice_last_d_v4(s));
                }
        } else if (t >= 1) launch(Dk{}, t, P.max_rt[t], ceil_div(s.R[t], BN));
        if (s.n[t] <= 16) launch(Gn{}, t, P.max_pt[t], ceil_div(s.R[t], BM) * ceil_div(s.n[t], BN));
        else launch(Gk{}, t, P.max_pt[t], ceil_div(s.R[t], BM) * ceil_div(s.n[t], BN));
    }
    const int nm = io.totals[2 * (s.T + 1)];   // the reduce kernel's list: the slices of several parts
    for (int gi = 0; gi < nm; gi++) {
        const int g = io.multi[reverse ? nm - 1 - gi : gi];
        for (int64_t e = 0; e < (int64_t)P.max_red_y * TT_EMBEDDING_BACKWARD_SLICE_RED_CW; e++)
            tt_embedding_backward_slice_reduce(s, P, io, oi, g, (int)e, ws.counts[g]);
    }
    if (info) {
        info->plan = P;
        bool within = true;
        for (int t = 0; t < s.T; t++) {
            const int tiles = io.totals[t + 1] - io.totals[t], parts = io.totals[s.T + 2 + t] - io.totals[s.T + 1 + t];
            within = within && tiles >= 0 && tiles <= P.max_rt[t] && parts >= 0 && parts <= P.max_pt[t] && (t > 0 || tiles == 0);
            info->tiles += tiles;
            info->parts += parts;
            for (int k = 0; k < s.tables * s.p[t]; k++) {
                const int n = ws.counts[s.key_base[t] + k];
                info->multi_part_slices += n > P.lpp[t];
                info->one_part_slices += n > 0 && n <= P.lpp[t];
            }
        }
        info->within_bounds = within && nm == info->multi_part_slices;
        info->bucket_slices = bucket_slices;
        info->scan_slices = scan_slices;
        info->lists_ok = lists_in_order(s, P6, ws);
        info->items_ok = slice_items_in_order(s, P, io, ws.counts);
    }
    return o;
}

// Version 9 against the reference, and bit for bit the same with blocks and threads in the opposite order and scalar
// loads where the launcher takes float4s
static void test_v9(const Case& c, const std::vector<int>& opts, bool expect_multi_part = false) {
    Problem pr = make_problem(c);
    TtEmbeddingBackwardReference ref = tt_embedding_backward_reference(pr.s, pr.cores, pr.offsets, pr.indices, pr.dY);
    const float lr = 0.05f, eps = 1e-8f;
    for (int opt : opts) {
        EmuSliceInfo info;
        StepOut o = emulate9(pr, opt, lr, eps, false, &info);
        const bool ok = check_step(pr, ref, opt, lr, eps, o);
        StepOut o2 = emulate9(pr, opt, lr, eps, true, nullptr, false);
        const bool same = same_bits(o, o2);
        int vec_cores = 0;
        for (int t = 0; t < pr.s.T; t++) vec_cores += tt_embedding_backward_slice_vec(pr.s, t);
        // (expect_multi_part: a problem with slices of both list paths, too)
        const bool multi = !expect_multi_part || (info.multi_part_slices > 0 && info.bucket_slices > 0 && info.scan_slices > 0);
        const bool one = pr.s.nnz == 0 || expect_multi_part || info.one_part_slices > 0;
        char name[160], why[480];
        snprintf(name, sizeof name, "emulate_v9_%s_%s", c.name.c_str(), opt_name(opt));
        snprintf(why, sizeof why, "check %d, bitwise same in reverse order with scalar loads %d (float4 loads at %d of %d cores), lists "
                 "within the grid bounds %d, %d row tiles, %d parts, %d slices in several parts (expected some: %d), %d in one (expected "
                 "some unless several), slices listed from buckets %d, by the scan %d, lists in order %d, work lists %d", (int)ok, (int)same,
                 vec_cores, pr.s.T, (int)(info.within_bounds || pr.s.nnz == 0), info.tiles, info.parts, info.multi_part_slices,
                 (int)expect_multi_part, info.one_part_slices, info.bucket_slices, info.scan_slices, (int)info.lists_ok, (int)info.items_ok);
        report(ok && same && ((info.within_bounds && info.lists_ok && info.items_ok) || pr.s.nnz == 0) && multi && one, name, why);
        if (ok && same) printf("     (%s)\n", why);
    }
}

// --stash: version 9 reading the forward's prefixes (the CPU's, at tt_embedding.h's offsets) instead of running F passes the
// reference, and with every stash value NaN it fails (so the prefixes are read from the stash, not recomputed)
static void test_v9_stash(const Case& c, int opt) {
    Problem pr = make_problem(c);
    const TtEmbeddingBackwardShape& s = pr.s;
    TtEmbeddingBackwardReference ref = tt_embedding_backward_reference(s, pr.cores, pr.offsets, pr.indices, pr.dY);
    int64_t off[TT_EMBEDDING_BACKWARD_MAX_T] = {};
    const int64_t floats = tt_embedding_stash_layout(s.T, s.q, s.R, s.nnz, off);
    std::vector<float> stash((size_t)std::max<int64_t>(floats, 1), NAN);
    tt_embedding_backward_stash_cpu(s, pr.cores.data(), pr.offsets.data(), pr.indices.data(), off, stash.data());
    bool finite = true;
    for (int64_t i = 0; i < floats; i++) finite = finite && std::isfinite(stash[i]);
    const float lr = 0.05f, eps = 1e-8f;
    StepOut o = emulate9(pr, opt, lr, eps, false, nullptr, true, stash.data());
    const bool ok = check_step(pr, ref, opt, lr, eps, o);
    std::fill(stash.begin(), stash.end(), NAN);
    StepOut bad = emulate9(pr, opt, lr, eps, true, nullptr, true, stash.data());
    const bool bad_fails = !check_step(pr, ref, opt, lr, eps, bad, false);
    char why[160];
    snprintf(why, sizeof why, "%lld stash floats all set %d, check %d, a NaN stash fails %d", (long long)floats, (int)finite, (int)ok, (int)bad_fails);
    report(finite && ok && bad_fails, "emulate_v9_stash_" + c.name + "_" + opt_name(opt), why);
}

// The lane orders of the float4 tiles at FBTT's default: in every warp, lanes n and n^1 share one operand's
// address and lanes n and n^2 the other's (the condition for a 128-bit shared load in 2 requests, not 4).
// Operands: (I) P rows (row tile) and Y rows (column tile); (II) Y rows (lookup, row tile) and G_h rows
// (column tile); (III) G_h (row tile) and L_h (lookup, column tile); Y: g (lookup, row tile) and Suf
// (lookup, column tile); L_h: P (lookup, row tile) and g (lookup, column tile).
static void test_lane_pairing() {
    TtEmbeddingBackwardShape s = tt_embedding_backward_make_shape({200, 220, 250}, {4, 4, 4}, {32, 32}, 0, 1, 512);
    s.nnz = 10240;
    int64_t W_off[TT_EMBEDDING_BACKWARD_MAX_T] = {};
    const TtEmbeddingBackwardGroupPlan P = tt_embedding_backward_group_make_plan(s, W_off, 256);
    const int h = P.h, nbb = P.nb;
    struct U { int b, rt, ct; };
    // which unit each lane of warp w computes, for a decode function
    auto check = [&](const char* name, int units, auto decode, auto opA, auto opB) {
        bool ok = units % 32 == 0 && units > 0;
        int warps = 0;
        for (int w = 0; ok && w < units / 32; w++, warps++) {
            U x[32];
            for (int l = 0; l < 32; l++) x[l] = decode(32 * w + l);
            auto pairs = [&](auto op, int m) {
                for (int l = 0; l < 32; l++) if (op(x[l]) != op(x[l ^ m])) return false;
                return true;
            };
            // one operand paired across n^1 and the other across n^2, or the other way round
            ok = (pairs(opA, 1) && pairs(opB, 2)) || (pairs(opA, 2) && pairs(opB, 1));
        }
        char why[160];
        snprintf(why, sizeof why, "%d units, %d warps checked", units, warps);
        report(ok, std::string("lane_pairing_default_") + name, why);
    };
    const int Rh = s.R[h], nh = s.n[h], Rn = s.R[h + 1], wn = P.w[h + 1];
    auto key = [](int a, int b) { return a * 100000 + b; };
    check("I", P.tiles_I, [&](int t) { U x{0, 0, 0}; tt_embedding_backward_group_tile_I_rc(s, P, t, x.rt, x.ct); return x; },
          [&](U x) { return x.rt; }, [&](U x) { return x.ct; });
    check("II", tt_embedding_backward_group_units_lookups(nbb, (s.m[h - 1] / 4) * (Rh / 4)),
          [&](int u) { U x; tt_embedding_backward_group_rc_lookups(u, s.m[h - 1] / 4, Rh / 4, x.b, x.rt, x.ct); return x; },
          [&](U x) { return key(x.b, x.rt); }, [&](U x) { return x.ct; });
    check("III", tt_embedding_backward_group_units_lookups(nbb, (Rn / 4) * (wn / 4)),
          [&](int u) { U x; tt_embedding_backward_group_rc_lookups(u, Rn / 4, wn / 4, x.b, x.rt, x.ct); return x; },
          [&](U x) { return x.rt; }, [&](U x) { return key(x.b, x.ct); });
    check("Y", nbb * (s.m[h] / 4) * (Rn / 4),
          [&](int u) { U x; tt_embedding_backward_group_rc_rows(u, s.m[h] / 4, Rn / 4, x.b, x.rt, x.ct); return x; },
          [&](U x) { return key(x.b, x.rt); }, [&](U x) { return key(x.b, x.ct); });
    check("L", nbb * (Rh / 4) * (P.w[h] / 4),
          [&](int u) { U x; tt_embedding_backward_group_rc_rows(u, Rh / 4, P.w[h] / 4, x.b, x.rt, x.ct); return x; },
          [&](U x) { return key(x.b, x.rt); }, [&](U x) { return key(x.b, x.ct); });
    (void)nh;
}

// The plan at the bench shapes: FBTT's default runs every pivot product on float4 tiles with the pivot
// gradient in registers, NB = 16 lookups per batch, two blocks per SM; the 4- and 5-core shapes too.
static void test_plan6() {
    struct S6 { const char* name; std::vector<int> p, q, r; int pivot, F; };
    const S6 shapes[] = {
        {"default", {200, 220, 250}, {4, 4, 4}, {32, 32}, 1, 0},
        {"4core", {20, 22, 25, 20}, {4, 2, 2, 4}, {32, 32, 32}, 1, 1},
        {"5core", {20, 20, 25, 25, 40}, {2, 2, 2, 2, 4}, {8, 16, 32, 64}, 3, 2},
    };
    for (const S6& c : shapes) {
        TtEmbeddingBackwardShape s = tt_embedding_backward_make_shape(c.p, c.q, c.r, 0, 1, 512);
        s.nnz = 512 * 20;
        int64_t W_off[TT_EMBEDDING_BACKWARD_MAX_T] = {}, wt = 0;
        const int pivot = tt_embedding_backward_pick_pivot(s);
        for (int t = 0; t < s.T; t++) { W_off[t] = wt; if (t != pivot) wt += (int64_t)s.nnz * s.S[t]; }
        for (int nt : {128, 256, 512}) {
            const TtEmbeddingBackwardGroupPlan P = tt_embedding_backward_group_make_plan(s, W_off, nt);
            const size_t bytes = tt_embedding_backward_group_smem_bytes(P);
            bool aligned = P.LB % 8 == 4 && P.lk_off % 4 == 0 && P.ints_off % 4 == 0 && P.g_off % 4 == 0 && P.Y_off % 4 == 0 &&
                           P.Lh_off % 4 == 0 && P.PH % 4 == 0;
            for (int t = 0; t < s.T; t++) aligned = aligned && P.sl_off[t] % 4 == 0 && P.P_off[t] % 4 == 0 && P.dM_off[t] % 4 == 0 &&
                                                    P.Suf_off[t] % 4 == 0 && P.L_off[t] % 4 == 0;
            const bool fits = bytes <= (size_t)TT_EMBEDDING_BACKWARD_GROUP_SMEM_TARGET && 2 * (bytes + 1024) <= 228 * 1024;
            const int want_acc = P.tiles_I <= nt ? 1 : 2;
            char name[96], why[300];
            snprintf(name, sizeof name, "plan6_%s_nt%d", c.name, nt);
            snprintf(why, sizeof why, "pivot %d (want %d), F %d (want %d), float4 I II III Y L %d%d%d%d%d, acc %d (want %d), NB %d, PH %d, "
                     "LB %d, %zu bytes, aligned %d, %d max chunks, %d max items",
                     P.h, c.pivot, P.F, c.F, P.fastI, P.fastII, P.fastIII, P.fastY, P.fastL, P.acc, want_acc, P.nb, P.PH, P.LB, bytes,
                     (int)aligned, P.max_chunks, P.max_items);
            bool ok = P.h == c.pivot && P.F == c.F && P.fastI && P.fastII && P.fastIII && P.fastY && P.fastL && P.acc == want_acc &&
                      fits && aligned;
            if (!strcmp(c.name, "default")) ok = ok && P.nb == 16 && P.PH == 132 && P.tiles_I == 256;
            report(ok, name, why);
            if (ok && nt == 256) printf("     (%s)\n", why);
        }
    }
}

static void test_versions(const Case& c, const std::vector<int>& opts, const std::vector<int>& nts) {
    Problem pr = make_problem(c);
    TtEmbeddingBackwardReference ref = tt_embedding_backward_reference(pr.s, pr.cores, pr.offsets, pr.indices, pr.dY);
    const float lr = 0.05f, eps = 1e-8f;
    for (int opt : opts) {
        static const std::vector<int> one_block{0};   // versions 1 and 2 take no block size
        for (int k = 1; k <= 3; k++) {
            for (int nt : k >= 3 ? nts : one_block) {
                StepOut o = emulate(k, pr, opt, lr, eps, nt);
                bool ok = check_step(pr, ref, opt, lr, eps, o);
                char name[160];
                snprintf(name, sizeof name, "emulate_v%d_%s_%s%s", k, c.name.c_str(), opt_name(opt),
                         k >= 3 ? ("_nt" + std::to_string(nt)).c_str() : "");
                report(ok, name, "the emulated step disagrees with the reference (details above)");
            }
        }
    }
}

// The checker must catch a changed untouched slice and an error in one gradient element.
static void test_checker_catches() {
    Case c{"sparse", {50, 60, 70}, {2, 2, 2}, {4, 4}, 1, 3, 2, 0.0, false, 11};
    Problem pr = make_problem(c);
    TtEmbeddingBackwardReference ref = tt_embedding_backward_reference(pr.s, pr.cores, pr.offsets, pr.indices, pr.dY);
    const float lr = 0.05f, eps = 1e-8f;
    StepOut o = emulate(3, pr, TT_EMBEDDING_BACKWARD_ADAGRAD, lr, eps, 128);
    const bool base_ok = check_step(pr, ref, TT_EMBEDDING_BACKWARD_ADAGRAD, lr, eps, o);
    int untouched_key = -1, touched_key = -1;
    for (int k = 0; k < pr.s.key_base[1]; k++) {
        if (!ref.touched[k] && untouched_key < 0) untouched_key = k;
        if (ref.touched[k] && touched_key < 0) touched_key = k;
    }
    // one ulp in an untouched slice of core 0's state
    StepOut o1 = o;
    uint32_t bits;
    memcpy(&bits, &o1.state[(size_t)untouched_key * pr.s.S[0]], 4);
    bits ^= 1;
    memcpy(&o1.state[(size_t)untouched_key * pr.s.S[0]], &bits, 4);
    const bool caught_untouched = !check_step(pr, ref, TT_EMBEDDING_BACKWARD_ADAGRAD, lr, eps, o1, false);
    // a gradient 0.1% off in one touched element, as a dropped term would make it
    StepOut o2 = emulate(3, pr, TT_EMBEDDING_BACKWARD_DENSE, lr, eps, 128);
    const bool dense_ok = check_step(pr, ref, TT_EMBEDDING_BACKWARD_DENSE, lr, eps, o2);
    o2.dG[(size_t)touched_key * pr.s.S[0]] *= 1.001f;
    const bool caught_error = !check_step(pr, ref, TT_EMBEDDING_BACKWARD_DENSE, lr, eps, o2, false);
    report(base_ok && dense_ok && untouched_key >= 0 && caught_untouched && caught_error, "check_catches_changes",
           "the check must pass the emulated step and fail a flipped bit in an untouched slice and a 0.1% gradient error");
}

// FBTT's update_tt_cores_{sgd,adagrad}_kernel: launched with tx = min(1024, p_t), ty = 1024 / tx,
// ceil(S_t / ty) blocks of (tx, ty); thread (bx, x, y) updates row bx*ty + y (if < p_t), elements
// x, x + tx, ... of it. The grid counts slice elements where it should count rows.
static std::vector<char> fbtt_rows_updated(int p_t, int S_t) {
    const int tx = std::min(1024, p_t), ty = 1024 / tx, blocks = (S_t + ty - 1) / ty;
    std::vector<char> row_done(p_t, 0);
    for (int bx = 0; bx < blocks; bx++)
        for (int y = 0; y < ty; y++) {
            const int b = bx * ty + y;
            if (b >= p_t) continue;
            std::vector<char> col(S_t, 0);
            for (int x = 0; x < tx; x++)
                for (int d = x; d < S_t; d += tx) col[d] = 1;
            row_done[b] = std::all_of(col.begin(), col.end(), [](char v) { return v != 0; });
        }
    return row_done;
}

static void test_fbtt_update_grid_defect() {
    TtEmbeddingBackwardShape s = tt_embedding_backward_make_shape({200, 220, 250}, {4, 4, 4}, {32, 32}, 0, 1, 512);
    // FBTT: which rows of each core its optimizer updates
    std::string missed;
    int first_missed[3] = {-1, -1, -1}, n_missed[3] = {0, 0, 0};
    for (int t = 0; t < 3; t++) {
        std::vector<char> done = fbtt_rows_updated(s.p[t], s.S[t]);
        for (int b = 0; b < s.p[t]; b++)
            if (!done[b]) {
                if (first_missed[t] < 0) first_missed[t] = b;
                n_missed[t]++;
            }
    }
    // the spec's anchor: core 0 rows 130-199 and core 2 rows 128-249 never updated, core 1 complete
    const bool fbtt_as_spec = first_missed[0] == 130 && n_missed[0] == 70 && n_missed[1] == 0 && first_missed[2] == 128 &&
                              n_missed[2] == 122;
    // ours (versions 1-3): the optimizer pass's grid-stride loop over the whole buffer, emulated
    const int64_t total = s.core_off[s.T];
    std::vector<int> hits((size_t)total, 0);
    const int block = 256;
    const unsigned grid = tt_embedding_backward_optimizer_grid(total, block);
    for (unsigned b = 0; b < grid; b++)
        for (int th = 0; th < block; th++)
            for (int64_t i = (int64_t)b * block + th; i < total; i += (int64_t)grid * block) hits[i]++;
    bool ours_all_once = std::all_of(hits.begin(), hits.end(), [](int h) { return h == 1; });
    // ours (versions 4-5): one block per slice key of every core; the key -> (core, table, row) map is onto
    std::vector<int> slice_hits((size_t)s.key_base[s.T], 0);
    for (int key = 0; key < s.key_base[s.T]; key++) {
        int t = 0;
        while (key >= s.key_base[t + 1]) t++;
        const int local = key - s.key_base[t];
        if (local / s.p[t] < s.tables) slice_hits[s.key_base[t] + local]++;
    }
    ours_all_once = ours_all_once && std::all_of(slice_hits.begin(), slice_hits.end(), [](int h) { return h == 1; });
    // consequence: an SGD step on a gradient that is nonzero everywhere leaves FBTT's missed rows stale
    int64_t stale = 0;
    for (int t = 0; t < 3; t++) {
        std::vector<char> done = fbtt_rows_updated(s.p[t], s.S[t]);
        for (int b = 0; b < s.p[t]; b++) stale += done[b] ? 0 : s.S[t];
    }
    char why[256];
    snprintf(why, sizeof why,
             "FBTT misses core 0 rows from %d (%d rows), core 1 %d rows, core 2 rows from %d (%d rows); ours covers every element once: %d",
             first_missed[0], n_missed[0], n_missed[1], first_missed[2], n_missed[2], (int)ours_all_once);
    report(fbtt_as_spec && ours_all_once && stale == 70 * 128 + 122 * 128, "fbtt_update_grid_defect", why);
    printf("     (FBTT's optimizer grid at p=200,220,250: core 0 rows %d-%d and core 2 rows %d-%d never updated, "
           "%lld core elements stale after a step; ours updates all)\n",
           first_missed[0], s.p[0] - 1, first_missed[2], s.p[2] - 1, (long long)stale);
}

// the backward's own limits, on configs the shared check accepts (tt_embedding.h's messages: test_tt_embedding_forward)
static void test_validators() {
    struct V { std::vector<int> p, q, r; int tables, B, L; double lr, eps; const char* want; };
    const V cases[] = {
        {{200, 220, 250}, {4, 4, 4}, {32, 32}, 1, 512, 20, 0.05, 0.0, "--eps (0) must be > 0"},
        {{200, 220, 250}, {4, 4, 4}, {32, 32}, 1, 512, 20, 0.05, -1.0, "--eps (-1) must be > 0"},
        {{200, 220, 250}, {4, 4, 4}, {32, 32}, 1, 512, 20, INFINITY, 1e-8, "--lr must be finite"},
        {{1000000000, 1000000000, 2}, {1, 1, 1}, {1, 1}, 2, 1, 1, 0.05, 1e-8, "tables * sum(p) (4000000004 slices) must be < 2^31"},
        {{200, 220, 250}, {4, 4, 4}, {32, 32}, 1, 100000000, 20, 0.05, 1e-8, "T * lookups (6000000000 sort items) must be < 2^31"},
    };
    for (const V& v : cases) {
        TtEmbeddingConfig c;
        c.p = v.p; c.q = v.q; c.ranks = v.r; c.tables = v.tables; c.B = v.B; c.L = v.L;
        std::string err = tt_embedding_check_config(c);
        if (err.empty()) err = tt_embedding_backward_check_config(c, v.lr, v.eps);
        report(err.find(v.want) != std::string::npos, std::string("validator: ") + v.want, "got '" + err + "'");
    }
    TtEmbeddingConfig c;
    std::string err = tt_embedding_check_config(c);
    report(err.empty() && tt_embedding_backward_check_config(c, 0.05, 1e-8).empty(), "validator_default_ok", "the default shape must validate");
}

// ------------------------------------------------------------------------------------------------
// version 7: its tensor-core products through the fragment maps, by an emulated mma (the PTX layouts, in double),
// against the direct formulas on the same shared-memory layout; every fragment load free of bank conflicts;
// every output element written exactly once; the small steps against their formulas; its shape filter.

// d (per lane, 4 C registers) += A . B, A and B given per lane in fragment registers (PTX m16n8k8 layouts)
static void emulate_mma7(double (&d)[32][4], const double (&a)[32][4], const double (&b)[32][2]) {
    double A[16][8], B[8][8];
    for (int lane = 0; lane < 32; lane++) {
        for (int r = 0; r < 4; r++) A[tt_embedding_backward_tc_arow(lane, r)][tt_embedding_backward_tc_acol(lane, r)] = a[lane][r];
        for (int r = 0; r < 2; r++) B[tt_embedding_backward_tc_bk(lane, r)][lane >> 2] = b[lane][r];
    }
    for (int lane = 0; lane < 32; lane++)
        for (int r = 0; r < 4; r++) {
            double sum = 0.0;
            for (int k = 0; k < 8; k++) sum += A[tt_embedding_backward_tc_crow(lane, r)][k] * B[k][tt_embedding_backward_tc_ccol(lane, r)];
            d[lane][r] += sum;
        }
}

static void test_v7(int ns) {
    const int R = TT_EMBEDDING_BACKWARD_TC_R, Q = TT_EMBEDDING_BACKWARD_TC_Q, NB = TT_EMBEDDING_BACKWARD_TC_NB;
    Rng rng(700 + ns);
    std::vector<double> seg(TT_EMBEDDING_BACKWARD_TC_SEG), g1s(TT_EMBEDDING_BACKWARD_TC_G1F);
    for (auto& v : seg) v = rng.uniform(-1.0f, 1.0f);
    for (auto& v : g1s) v = rng.uniform(-1.0f, 1.0f);
    // the semantic views of the layout (what the formulas read)
    auto Y = [&](int l, int a0, int a1, int k2) { return seg[l * TT_EMBEDDING_BACKWARD_TC_LS + TT_EMBEDDING_BACKWARD_TC_Y + a0 * TT_EMBEDDING_BACKWARD_TC_YS + a1 * R + k2]; };
    auto Lt = [&](int l, int a2, int a1, int k1) { return seg[l * TT_EMBEDDING_BACKWARD_TC_LS + TT_EMBEDDING_BACKWARD_TC_LT + a2 * TT_EMBEDDING_BACKWARD_TC_YS + a1 * R + k1]; };
    auto G0 = [&](int l, int a0, int k1) { return seg[l * TT_EMBEDDING_BACKWARD_TC_LS + TT_EMBEDDING_BACKWARD_TC_G0 + a0 * TT_EMBEDDING_BACKWARD_TC_G0S + k1]; };
    std::string why;
    auto G1 = [&](int k1, int a1, int k2) { return g1s[tt_embedding_backward_tc_g1(k1, a1 * R + k2)]; };
    {   // the swizzled copy is a permutation of the slice that keeps float4s whole
        std::vector<int> hit(TT_EMBEDDING_BACKWARD_TC_S1, 0);
        for (int k1 = 0; k1 < R; k1++)
            for (int col = 0; col < Q * R; col++) {
                const int at = tt_embedding_backward_tc_g1(k1, col);
                if (at < 0 || at >= TT_EMBEDDING_BACKWARD_TC_S1 || (at & 3) != (col & 3)) why += " swizzle out of place";
                else hit[at]++;
            }
        for (int v : hit)
            if (v != 1 && why.size() < 300) why += " swizzle not a permutation";
    }
    auto conflict_free = [&](const int (&off)[32], const char* what) {
        bool seen[32] = {};
        for (int lane = 0; lane < 32; lane++) {
            const int bank = ((off[lane] % 32) + 32) % 32;
            if (seen[bank] && why.size() < 300) why += std::string(" bank conflict in ") + what;
            seen[bank] = true;
        }
    };
    // (II) and (III): per m-tile of 4 lookups, 4 n-tiles, 16 k-steps
    std::vector<double> W0((size_t)NB * TT_EMBEDDING_BACKWARD_TC_S0, 0.0), W2((size_t)NB * TT_EMBEDDING_BACKWARD_TC_S0, 0.0);
    std::vector<int> hits0((size_t)NB * TT_EMBEDDING_BACKWARD_TC_S0, 0), hits2((size_t)NB * TT_EMBEDDING_BACKWARD_TC_S0, 0);
    for (int III = 0; III < 2; III++)
        for (int mt = 0; 4 * mt < ns; mt++)
            for (int nt = 0; nt < 4; nt++) {
                double acc[32][4] = {};
                for (int ks = 0; ks < 16; ks++) {
                    double a[32][4], b[32][2];
                    int offa[4][32], offb[2][32];
                    for (int lane = 0; lane < 32; lane++) {
                        for (int r = 0; r < 4; r++) {
                            const int m = tt_embedding_backward_tc_arow(lane, r), c = tt_embedding_backward_tc_acol(lane, r);
                            offa[r][lane] = 4 * mt * TT_EMBEDDING_BACKWARD_TC_LS + (III ? tt_embedding_backward_tc_III_a(m, c, ks) : tt_embedding_backward_tc_II_a(m, c, ks));
                            a[lane][r] = seg[offa[r][lane]];
                        }
                        for (int r = 0; r < 2; r++) {
                            offb[r][lane] = III ? tt_embedding_backward_tc_III_b(tt_embedding_backward_tc_bk(lane, r), lane >> 2, ks, nt) : tt_embedding_backward_tc_II_b(tt_embedding_backward_tc_bk(lane, r), lane >> 2, ks, nt);
                            b[lane][r] = g1s[offb[r][lane]];
                        }
                    }
                    for (int r = 0; r < 4; r++) conflict_free(offa[r], III ? "(III) A" : "(II) A");
                    for (int r = 0; r < 2; r++) conflict_free(offb[r], III ? "(III) B" : "(II) B");
                    emulate_mma7(acc, a, b);
                }
                for (int lane = 0; lane < 32; lane++)
                    for (int r = 0; r < 4; r++) {
                        const int m = tt_embedding_backward_tc_crow(lane, r), n = tt_embedding_backward_tc_ccol(lane, r), l = 4 * mt + (m >> 2);
                        if (l >= ns) continue;
                        const size_t at = (size_t)l * TT_EMBEDDING_BACKWARD_TC_S0 + (III ? tt_embedding_backward_tc_III_c(m, n, nt) : tt_embedding_backward_tc_II_c(m, n, nt));
                        (III ? W2 : W0)[at] = acc[lane][r];
                        (III ? hits2 : hits0)[at]++;
                    }
            }
    // (I): warps w = 0..7, 2 x 2 tiles each, k-steps over lookup pairs
    std::vector<double> dG1(TT_EMBEDDING_BACKWARD_TC_S1, 0.0);
    std::vector<int> hits1(TT_EMBEDDING_BACKWARD_TC_S1, 0);
    for (int w = 0; w < 8; w++)
        for (int mi = 0; mi < 2; mi++)
            for (int ni = 0; ni < 2; ni++) {
                double acc[32][4] = {};
                for (int kp = 0; 2 * kp < ns; kp++) {
                    double a[32][4], b[32][2];
                    int offa[4][32], offb[2][32];
                    for (int lane = 0; lane < 32; lane++) {
                        for (int r = 0; r < 4; r++) {
                            offa[r][lane] = tt_embedding_backward_tc_I_a(tt_embedding_backward_tc_arow(lane, r), tt_embedding_backward_tc_acol(lane, r), kp, mi);
                            // the kernel zero-fills the inputs of absent lookups (so G_0 and Y are 0 there)
                            a[lane][r] = 2 * kp + (tt_embedding_backward_tc_acol(lane, r) >> 2) < ns ? seg[offa[r][lane]] : 0.0;
                        }
                        for (int r = 0; r < 2; r++) {
                            offb[r][lane] = tt_embedding_backward_tc_I_b(tt_embedding_backward_tc_bk(lane, r), lane >> 2, kp, w, ni);
                            b[lane][r] = 2 * kp + (tt_embedding_backward_tc_bk(lane, r) >> 2) < ns ? seg[offb[r][lane]] : 0.0;
                        }
                    }
                    for (int r = 0; r < 4; r++) conflict_free(offa[r], "(I) A");
                    for (int r = 0; r < 2; r++) conflict_free(offb[r], "(I) B");
                    emulate_mma7(acc, a, b);
                }
                for (int lane = 0; lane < 32; lane++)
                    for (int r = 0; r < 4; r++) {
                        const int at = tt_embedding_backward_tc_I_c(tt_embedding_backward_tc_crow(lane, r), tt_embedding_backward_tc_ccol(lane, r), w, mi, ni);
                        dG1[at] = acc[lane][r];
                        hits1[at]++;
                    }
            }
    // against the formulas
    double err = 0.0;
    for (int l = 0; l < NB; l++)
        for (int e = 0; e < TT_EMBEDDING_BACKWARD_TC_S0; e++) {
            const size_t at = (size_t)l * TT_EMBEDDING_BACKWARD_TC_S0 + e;
            const int want = l < ns ? 1 : 0;
            if ((hits0[at] != want || hits2[at] != want) && why.size() < 300)
                why += " W element (" + std::to_string(l) + "," + std::to_string(e) + ") written " + std::to_string(hits0[at]) + "/" +
                       std::to_string(hits2[at]) + " times";
            if (l >= ns) continue;
            const int a0 = e / R, k1 = e % R;         // (II): W0[a_0 R + k_1] = sum_{a1,k2} Y[a0][a1][k2] G1[k1][a1][k2]
            double r2 = 0.0;
            for (int a1 = 0; a1 < Q; a1++)
                for (int k2 = 0; k2 < R; k2++) r2 += Y(l, a0, a1, k2) * G1(k1, a1, k2);
            err = std::max(err, fabs(W0[at] - r2));
            const int k2 = e / Q, a2 = e % Q;         // (III): W2[k_2 q + a_2] = sum_{k1,a1} G1[k1][a1][k2] L^T[a2][a1][k1]
            double r3 = 0.0;
            for (int k1b = 0; k1b < R; k1b++)
                for (int a1 = 0; a1 < Q; a1++) r3 += G1(k1b, a1, k2) * Lt(l, a2, a1, k1b);
            err = std::max(err, fabs(W2[at] - r3));
        }
    for (int k1 = 0; k1 < R; k1++)
        for (int a1 = 0; a1 < Q; a1++)
            for (int k2 = 0; k2 < R; k2++) {
                const int at = k1 * Q * R + a1 * R + k2;   // (I): dG1 = sum_l sum_a0 G0[l][a0][k1] Y[l][a0][a1][k2]
                if (hits1[at] != 1 && why.size() < 300) why += " dG1 element " + std::to_string(at) + " written " + std::to_string(hits1[at]) + " times";
                double r1 = 0.0;
                for (int l = 0; l < ns; l++)
                    for (int a0 = 0; a0 < Q; a0++) r1 += G0(l, a0, k1) * Y(l, a0, a1, k2);
                err = std::max(err, fabs(dG1[at] - r1));
            }
    if (err > 1e-9) why += " max error " + std::to_string(err);
    report(why.empty(), "version 7's products (II), (III), (I) through the fragment maps = the formulas, conflict-free, each element once (" +
                            std::to_string(ns) + " lookups)", why);
}

// the small steps (16 threads per lookup) against Y = g x G_2 and L^T = G_0^T x g; the input map covers g, G_0, G_2
static void test_v7_small_steps() {
    const int R = TT_EMBEDDING_BACKWARD_TC_R;
    Rng rng(77);
    std::vector<float> region(TT_EMBEDDING_BACKWARD_TC_LS, NAN);
    std::vector<int> hit(TT_EMBEDDING_BACKWARD_TC_LS, 0);
    std::vector<float> g(64), g0(128), g2(128);
    for (auto& v : g) v = rng.uniform(-1.0f, 1.0f);
    for (auto& v : g0) v = rng.uniform(-1.0f, 1.0f);
    for (auto& v : g2) v = rng.uniform(-1.0f, 1.0f);
    std::string why;
    for (int f = 0; f < 80; f++) {                 // the kernel's input copy: float4 f of g | G_0 | G_2
        const float* src = f < 16 ? g.data() + 4 * f : f < 48 ? g0.data() + 4 * (f - 16) : g2.data() + 4 * (f - 48);
        for (int c = 0; c < 4; c++) {
            region[tt_embedding_backward_tc_input_dst(f) + c] = src[c];
            hit[tt_embedding_backward_tc_input_dst(f) + c]++;
        }
    }
    for (int i = 0; i < TT_EMBEDDING_BACKWARD_TC_LS; i++)
        if (hit[i] > 1) why += " input slot " + std::to_string(i) + " written twice";
    for (int u = 0; u < 16; u++) tt_embedding_backward_tc_small_steps(region.data(), u);
    double err = 0.0;
    for (int a0 = 0; a0 < 4; a0++)
        for (int a1 = 0; a1 < 4; a1++)
            for (int k = 0; k < R; k++) {
                double y = 0.0, lt = 0.0;
                for (int a2 = 0; a2 < 4; a2++) y += (double)g[a0 * 16 + a1 * 4 + a2] * g2[k * 4 + a2];
                err = std::max(err, fabs(region[TT_EMBEDDING_BACKWARD_TC_Y + a0 * TT_EMBEDDING_BACKWARD_TC_YS + a1 * R + k] - y));
                const int a2 = a0;                   // L^T[a_2][a_1 R + k_1] = sum_a0 G_0[a_0][k_1] g[a_0, a_1, a_2]
                for (int b0 = 0; b0 < 4; b0++) lt += (double)g0[b0 * R + k] * g[b0 * 16 + a1 * 4 + a2];
                err = std::max(err, fabs(region[TT_EMBEDDING_BACKWARD_TC_LT + a2 * TT_EMBEDDING_BACKWARD_TC_YS + a1 * R + k] - lt));
            }
    if (!(err < 1e-5)) why += " max error " + std::to_string(err);
    report(why.empty(), "version 7's input map and small steps (Y = g x G_2, L^T = G_0^T x g) match the formulas", why);
}

// Version 7 at q_0 = 4k runs its kernels on the lookups cut in k (tt_embedding_backward_tc_split_bag, emulated warp by
// warp). The cut problem must have the same cores' floats, its reference gradient must be the original's (in double, up
// to the order of the sums), and a step on it (version 6's emulation standing in for the tensor-core kernels, which
// the CPU cannot run) must pass the original's check, dense and with each optimizer.
static void test_v7_split(const Case& c, const std::vector<int>& opts) {
    const Problem pr = make_problem(c);
    const int k = tt_embedding_backward_tc_split(pr.s);
    std::string why = k > 1 && tt_embedding_backward_tc_reason(pr.s).empty() ? "" : "version 7 does not cut this shape";
    Problem cut = pr;
    cut.s = tt_embedding_backward_tc_split_shape(pr.s, k > 1 ? k : 1);
    cut.offsets.assign((size_t)cut.s.num_bags + 1, -7);
    cut.indices.assign((size_t)cut.s.nnz, -7);
    for (int64_t bag = 0; bag <= pr.s.num_bags; bag++)
        for (int lane = 0; lane < 32; lane++)
            tt_embedding_backward_tc_split_bag(pr.s, k, bag, lane, pr.offsets.data(), pr.indices.data(), cut.offsets.data(), cut.indices.data());
    if (cut.s.core_off[3] != pr.s.core_off[3] || cut.s.D * k != pr.s.D) why += " the cut shape's cores or D differ";
    for (int64_t j = 0; j < cut.s.nnz; j++)
        if (cut.indices[j] < 0 || cut.indices[j] >= cut.s.E) { why += " a row not written or out of range"; break; }
    for (int64_t b = 0; b < cut.s.num_bags; b++)
        if (cut.offsets[b] < 0 || cut.offsets[b] > cut.offsets[b + 1]) { why += " offsets not written or not ascending"; break; }
    if (cut.offsets.back() != (int64_t)k * pr.offsets.back()) why += " the end offset is not k nnz";
    if (why.empty()) {
        const TtEmbeddingBackwardReference ref = tt_embedding_backward_reference(pr.s, pr.cores, pr.offsets, pr.indices, pr.dY);
        const TtEmbeddingBackwardReference rc = tt_embedding_backward_reference(cut.s, cut.cores, cut.offsets, cut.indices, cut.dY);
        double err = 0.0, top = 0.0;
        for (size_t i = 0; i < ref.dG.size(); i++) { err = std::max(err, fabs(ref.dG[i] - rc.dG[i])); top = std::max(top, fabs(ref.dG[i])); }
        if (!(top > 0.0) || !(err <= 1e-12 * top)) why += " the cut problem's reference gradient differs by " + std::to_string(err);
        for (int opt : opts) {
            const StepOut o = emulate6(cut, opt, 0.05f, 1e-8f, 256, false);
            if (!check_step(pr, ref, opt, 0.05f, 1e-8f, o)) why += std::string(" the step on the cut lookups fails the check (") + opt_name(opt) + ")";
        }
    }
    report(why.empty(), ("version 7 at q_0 = 4k: lookups cut in k, " + c.name).c_str(), why);
}

// Version 7's grids: kernel 2 launches ceil(nnz / part) + tables p_1 blocks for the parts of core 1's slices (part: 64
// or 48 lookups, the host's choice, and the smallest a sweep may build), the
// side kernel tc_side_items for the parts of core 0's and core 2's (each lookup counts in both). A block past the
// last item exits; an item without a block would leave its slice's gradient unsummed. Counted on real bags.
static void test_v7_grids(const Case& c) {
    const Problem pr = make_problem(c);
    const TtEmbeddingBackwardShape& s = pr.s;
    std::vector<int> n((size_t)s.key_base[s.T], 0);
    for (int bag = 0; bag < s.num_bags; bag++)
        for (int64_t j = pr.offsets[bag]; j < pr.offsets[bag + 1]; j++) {
            int idx[TT_EMBEDDING_BACKWARD_MAX_T];
            tt_embedding_backward_decode_row(s, pr.indices[j], idx);
            for (int t = 0; t < s.T; t++) n[(size_t)s.key_base[t] + (bag / s.B) * s.p[t] + idx[t]]++;
        }
    int64_t side = 0;
    for (int k = 0; k < s.key_base[1]; k++) side += tt_embedding_backward_tc_side_parts(n[k]);
    for (int k = s.key_base[2]; k < s.key_base[3]; k++) side += tt_embedding_backward_tc_side_parts(n[k]);
    bool ok = side <= tt_embedding_backward_tc_side_items(s) && side > s.tables * (s.p[0] + s.p[2]);
    char why[200];
    snprintf(why, sizeof why, "side %lld of grid %lld", (long long)side, (long long)tt_embedding_backward_tc_side_items(s));
    for (int part : {TT_EMBEDDING_BACKWARD_TC_PART, TT_EMBEDDING_BACKWARD_TC_PART_SHORT, TT_EMBEDDING_BACKWARD_TC_PART_MIN}) {
        int64_t chain = 0;
        for (int k = s.key_base[1]; k < s.key_base[2]; k++) chain += tt_embedding_backward_tc_parts(n[k], part);
        const int64_t chain_grid = ceil_div<int64_t>(s.nnz, part) + (int64_t)s.tables * s.p[1];
        // the partial buffer (sized at the smallest part) holds every item's
        const int64_t buffer_items = ceil_div<int64_t>(s.nnz, TT_EMBEDDING_BACKWARD_TC_PART_MIN) + (int64_t)s.tables * s.p[1];
        if (chain > chain_grid || chain_grid > buffer_items) {
            ok = false;
            snprintf(why, sizeof why, "part %d: chain %lld items of grid %lld (buffer %lld)", part, (long long)chain, (long long)chain_grid,
                     (long long)buffer_items);
        }
    }
    report(ok, ("version 7's grids cover every part, " + c.name).c_str(), why);
}

static void test_v7_filter() {
    TtEmbeddingBackwardShape s = tt_embedding_backward_make_shape({200, 220, 250}, {4, 4, 4}, {32, 32}, 0, 1, 512);
    report(tt_embedding_backward_tc_reason(s).empty(), "version 7 runs FBTT's default");
    s = tt_embedding_backward_make_shape({7, 300, 9}, {4, 4, 4}, {32, 32}, 0, 2, 45);
    report(tt_embedding_backward_tc_reason(s).empty(), "version 7 runs other p and tables at q 4,4,4 ranks 32,32");
    s = tt_embedding_backward_make_shape({20, 22, 25, 20}, {4, 2, 2, 4}, {32, 32, 32}, 0, 1, 512);
    std::string why = tt_embedding_backward_tc_reason(s);
    report(why.find("T = 4") != std::string::npos, "version 7 refuses the 4-core shape naming T", why);
    s = tt_embedding_backward_make_shape({200, 220, 250}, {4, 4, 4}, {16, 16}, 0, 1, 512);
    why = tt_embedding_backward_tc_reason(s);
    report(why.find("ranks 16,16") != std::string::npos, "version 7 refuses ranks 16,16 naming them", why);
    s = tt_embedding_backward_make_shape({200, 220, 250}, {8, 4, 4}, {32, 32}, 0, 1, 512);
    report(tt_embedding_backward_tc_reason(s).empty(), "version 7 runs q 8,4,4 (its lookups cut in 2)");
    s = tt_embedding_backward_make_shape({200, 220, 250}, {16, 4, 4}, {32, 32}, 0, 1, 512);
    s.nnz = 200000000;   // 4 x 3 x nnz >= 2^31: the cut lookups' keys would not fit 32 bits
    why = tt_embedding_backward_tc_reason(s);
    report(why.find("2^31") != std::string::npos, "version 7 refuses q 16,4,4 where the cut lookups' keys pass 2^31", why);
    // the default version's dispatcher (H200: 232,448 bytes per block, less the 1,024 reserved)
    const size_t lim = 232448 - 1024;
    auto route = [&](std::vector<int> p, std::vector<int> q, std::vector<int> r, int block) {
        TtEmbeddingBackwardShape sh = tt_embedding_backward_make_shape(p, q, r, 0, 1, 4096);
        sh.nnz = 4096 * 20;
        int64_t W_off[TT_EMBEDDING_BACKWARD_MAX_T] = {}, wt = 0;
        const int pivot = tt_embedding_backward_pick_pivot(sh);
        for (int t = 0; t < sh.T; t++) { W_off[t] = wt; if (t != pivot) wt += (int64_t)sh.nnz * sh.S[t]; }
        return tt_embedding_backward_route(sh, W_off, lim, block);
    };
    report(route({200, 220, 250}, {4, 4, 4}, {32, 32}, 256) == TT_EMBEDDING_BACKWARD_ROUTE_TENSOR, "default version: tensor cores at FBTT's default");
    {   // --stash: the default runs at every route and reads the stash (FLOPs without F) only where it routes to version 9;
        // versions 1-6 refuse it
        auto stash_args = [&](std::vector<int> p, std::vector<int> q, std::vector<int> r) {
            TtEmbeddingBackwardArgs a{};
            a.s = tt_embedding_backward_make_shape(p, q, r, 0, 1, 4096);
            a.s.nnz = 4096 * 20;
            const int pivot = tt_embedding_backward_pick_pivot(a.s);
            for (int t = 0, wt = 0; t < a.s.T; t++) { a.W_off[t] = wt; if (t != pivot) wt += a.s.nnz * a.s.S[t]; }
            a.smem_limit = lim;
            a.stash = reinterpret_cast<float*>(16);          // only its presence is read here
            return a;
        };
        std::string bad;
        const std::vector<std::vector<std::vector<int>>> shapes = {{{200, 220, 250}, {4, 4, 4}, {32, 32}}, {{200, 220, 250}, {8, 4, 4}, {32, 32}},
                                                                   {{200, 220, 250}, {4, 4, 4}, {16, 16}}, {{200, 220, 250}, {4, 4, 4}, {64, 64}},
                                                                   {{40, 50, 55, 60}, {4, 4, 2, 4}, {32, 32, 32}}};
        for (const auto& c : shapes) {
            const TtEmbeddingBackwardArgs a = stash_args(c[0], c[1], c[2]);
            const bool nine = tt_embedding_backward_route(a.s, a.W_off, lim, TT_EMBEDDING_BACKWARD_TC_BLOCK) == TT_EMBEDDING_BACKWARD_ROUTE_SLICE_MMA;
            if (!tt_embedding_backward_skip_reason(7, a.s, a, lim, 0).empty()) bad += " 7 skips";
            if (tt_embedding_backward_reads_stash(7, a, TT_EMBEDDING_BACKWARD_TC_BLOCK) != nine) bad += " 7 reads where it does not route to 9";
            if (!tt_embedding_backward_reads_stash(9, a, TT_EMBEDDING_BACKWARD_SLICE_BLOCK)) bad += " 9 does not read";
            if (tt_embedding_backward_skip_reason(6, a.s, a, lim, 0).find("--stash") == std::string::npos) bad += " 6 runs";
            TtEmbeddingBackwardArgs plain = a;
            plain.stash = nullptr;
            if (tt_embedding_backward_reads_stash(7, plain, TT_EMBEDDING_BACKWARD_TC_BLOCK)) bad += " reads without a stash";
        }
        report(bad.empty(), "--stash: the default runs FBTT's shape, q 8,4,4, ranks 16, 64 and T = 4, reading the stash only on version 9's route",
               bad);
    }
    report(route({200, 220, 250}, {4, 4, 4}, {32, 32}, 128) == TT_EMBEDDING_BACKWARD_ROUTE_GROUPED, "default version: grouped kernels at --block 128");
    report(route({200, 220, 250}, {4, 4, 4}, {64, 64}, 256) == TT_EMBEDDING_BACKWARD_ROUTE_SLICE_MMA, "default version: version 9 at rank 64");
    report(route({200, 220, 250}, {8, 4, 4}, {32, 32}, 256) == TT_EMBEDDING_BACKWARD_ROUTE_TENSOR, "default version: tensor cores at q 8,4,4 ranks 32 (lookups cut in 2)");
    report(route({20, 22, 25}, {16, 4, 4}, {32, 32}, 256) == TT_EMBEDDING_BACKWARD_ROUTE_TENSOR, "default version: tensor cores at q 16,4,4 ranks 32 (cut in 4)");
    report(route({200, 220, 250}, {8, 4, 4}, {32, 32}, 128) == TT_EMBEDDING_BACKWARD_ROUTE_GROUPED, "default version: grouped kernels at q 8,4,4, --block 128");
    report(route({200, 220, 250}, {6, 4, 4}, {32, 32}, 256) != TT_EMBEDDING_BACKWARD_ROUTE_TENSOR, "default version: no tensor-core kernels at q 6,4,4");
    report(route({200, 220, 250}, {4, 4, 4}, {128, 128}, 256) == TT_EMBEDDING_BACKWARD_ROUTE_SLICE_MMA, "default version: version 9 at rank 128, q 4,4,4");
    report(route({200, 220, 250}, {2, 2, 4}, {128, 128}, 256) == TT_EMBEDDING_BACKWARD_ROUTE_SLICE_MMA, "default version: version 9 at rank 128, q 2,2,4");
    report(route({200, 220, 250}, {2, 2, 4}, {128, 128}, 128) == TT_EMBEDDING_BACKWARD_ROUTE_GROUPED, "default version: grouped kernels at rank 128, q 2,2,4, --block 128");
    report(route({200, 220, 250}, {4, 8, 8}, {32, 32}, 256) == TT_EMBEDDING_BACKWARD_ROUTE_SLICE_MMA, "default version: version 9 at D = 256");
    report(route({40, 50, 55, 60}, {4, 4, 2, 4}, {32, 32, 32}, 256) == TT_EMBEDDING_BACKWARD_ROUTE_MERGED,
           "default version: cores merged at the grid's T = 4 (two groups: the two-core kernels)");
    report(route({2000, 3300}, {16, 8}, {32}, 256) == TT_EMBEDDING_BACKWARD_ROUTE_TWO && route({2000, 3300}, {16, 8}, {32}, 128) ==
               TT_EMBEDDING_BACKWARD_ROUTE_GROUPED && route({20, 30}, {16, 16}, {64}, 256) == TT_EMBEDDING_BACKWARD_ROUTE_TWO &&
               route({20, 30}, {32, 4}, {64}, 256) != TT_EMBEDDING_BACKWARD_ROUTE_TWO && route({20, 30}, {4, 4}, {128}, 256) != TT_EMBEDDING_BACKWARD_ROUTE_TWO,
           "default version: the two-core kernels at T = 2 (q <= 16 at ranks <= 64), at 256 threads");
    report(route({40, 50, 60, 70}, {2, 2, 4, 4}, {32, 32, 32}, 256) == TT_EMBEDDING_BACKWARD_ROUTE_MERGED,
           "default version: cores merged at T = 4 where a cut gives q 4,4,4, ranks 32");
    report(route({10, 10, 10, 10, 10, 11}, {2, 2, 2, 2, 2, 2}, {32, 32, 32, 32, 32}, 256) == TT_EMBEDDING_BACKWARD_ROUTE_MERGED,
           "default version: cores merged at T = 6, ranks 32");
    report(route({200, 220, 250, 300}, {4, 4, 2, 4}, {32, 32, 32}, 256) == TT_EMBEDDING_BACKWARD_ROUTE_SLICE_MMA,
           "default version: version 9 at T = 4 where every merge passes its limits (p 200,220,250,300)");
    {   // padded ranks: the plan on 132 SMs (lookups: B L), and the route it gives
        auto pads = [](std::vector<int> q, std::vector<int> r, int B, int L = 20) {
            TtEmbeddingBackwardShape sh = tt_embedding_backward_make_shape({200, 220, 250}, q, r, 0, 1, B);
            sh.nnz = B * L;
            return tt_embedding_backward_pad_plan(sh, 132);
        };
        report(pads({4, 4, 4}, {16, 16}, 512) && pads({4, 4, 4}, {32, 16}, 512) && pads({4, 4, 4}, {4, 4}, 512) && pads({4, 4, 4}, {24, 24}, 1320) &&
                   pads({4, 4, 4}, {8, 8}, 1024) && pads({4, 4, 4}, {16, 16}, 4096, 1),
               "version 7 pads ranks to 32 at q 4,4,4 ranks 16,16, 32,16, 4,4 (B 512, L 20), 24,24 (B 1320), 8,8 (B 1024), B 4096 L 1");
        report(!pads({4, 4, 4}, {16, 16}, 4096) && !pads({8, 4, 4}, {16, 16}, 512) && !pads({4, 4, 4}, {24, 24}, 1321) && !pads({8, 4, 4}, {16, 24}, 64) &&
                   !pads({4, 4, 4}, {32, 32}, 512) && !pads({4, 4, 4}, {64, 16}, 512) && !pads({4, 4, 2}, {16, 16}, 512) && !pads({2, 4, 4}, {16, 16}, 512),
               "version 7 pads no ranks past 200 lookups an SM (B 4096; B 1321), with q_0 cut (q 8,4,4 at B 512 and 64), at ranks 32,32 or past 32, at q 4,4,2 or 2,4,4");
        auto route_of = [](bool padded, int block) {
            TtEmbeddingBackwardShape sh = tt_embedding_backward_make_shape({200, 220, 250}, {4, 4, 4}, {16, 16}, 0, 1, 512);
            sh.nnz = 512 * 20;
            TtEmbeddingBackwardArgs a;
            memset(&a, 0, sizeof a);
            (void)tt_embedding_backward_group_make_plan(sh, a.W_off, TT_EMBEDDING_BACKWARD_TC_BLOCK);
            return tt_embedding_backward_route(sh, a.W_off, 232448 - 1024, block, padded);
        };
        report(route_of(true, 256) == TT_EMBEDDING_BACKWARD_ROUTE_PADDED && route_of(true, 128) == TT_EMBEDDING_BACKWARD_ROUTE_GROUPED &&
                   route_of(false, 256) == TT_EMBEDDING_BACKWARD_ROUTE_GROUPED,
               "default version at ranks 16,16: padded ranks where the plan pads, at 256 threads; else version 6's grouped kernels");
    }
    report(route({40, 50, 55, 60}, {4, 4, 2, 4}, {16, 16, 16}, 256) == TT_EMBEDDING_BACKWARD_ROUTE_MERGED, "default version: cores merged at T = 4, ranks 16");
    report(route({12, 11, 13, 10, 14}, {2, 4, 2, 4, 2}, {32, 32, 32, 32}, 256) == TT_EMBEDDING_BACKWARD_ROUTE_MERGED, "default version: cores merged at T = 5");
    report(route({4, 5, 4, 5, 4, 5}, {2, 2, 2, 2, 2, 2}, {128, 128, 128, 128, 128}, 256) == TT_EMBEDDING_BACKWARD_ROUTE_MERGED,
           "default version: cores merged at T = 6, rank 128");
    {   // the cuts at the bench grid's T = 4 and T = 6 (10,240 lookups): q 4,4,8 and q 4,4,4 (the tensor-core shape)
        auto cut = [](std::vector<int> p, std::vector<int> q, std::vector<int> r) {
            TtEmbeddingBackwardShape sh = tt_embedding_backward_make_shape(p, q, r, 0, 1, 512);
            sh.nnz = 512 * 20;
            int f[4] = {};
            return tt_embedding_backward_merge_plan(sh, f) ? std::vector<int>(f, f + 4) : std::vector<int>();
        };
        report(cut({40, 50, 55, 60}, {4, 4, 2, 4}, {32, 32, 32}) == std::vector<int>{0, 2, 4, 4} &&
                   cut({12, 11, 13, 10, 14}, {2, 4, 2, 4, 2}, {32, 32, 32, 32}) == std::vector<int>{0, 3, 5, 5} &&
                   cut({10, 10, 10, 10, 10, 11}, {2, 2, 2, 2, 2, 2}, {32, 32, 32, 32, 32}) == std::vector<int>{0, 2, 4, 6} &&
                   cut({40, 50, 60, 70}, {2, 2, 4, 4}, {32, 32, 32}) == std::vector<int>{0, 2, 3, 4} &&
                   cut({200, 220, 250}, {4, 4, 4}, {32, 32}).empty(),
               "version 7's merge cuts: T 6 of the grid as 2|2|2 (q 4,4,4), q 2,2,4,4 as 2|1|1, T 5 as 3|2, the grid's T 4 as 2|2; none at T = 3");
    }
    report(route({200, 220, 250}, {4, 4, 4}, {32, 32}, 1024) == TT_EMBEDDING_BACKWARD_ROUTE_SLICE_MMA, "default version: version 9 at --block 1024");
    report(route({20, 22, 25}, {64, 64, 16}, {128, 128}, 256) == TT_EMBEDDING_BACKWARD_ROUTE_CUBLAS,
           "default version: cuBLAS pipeline where version 9's buffers pass 32 GB (D = 65536, rank 128, 81,920 lookups)");
    const int P = TT_EMBEDDING_BACKWARD_TC_PART;
    report(tt_embedding_backward_tc_parts(0, P) == 0 && tt_embedding_backward_tc_parts(1, P) == 1 && tt_embedding_backward_tc_parts(P, P) == 1 &&
               tt_embedding_backward_tc_parts(P + 1, P) == 2 && tt_embedding_backward_tc_parts(97, 48) == 3,
           "version 7's parts per slice: ceil(n / part)");
#ifndef TT_EMBEDDING_BACKWARD_TC_PART_FIXED
    // the part size: 48 where parts of 64 pass one wave of two items per SM (132 SMs) but fit two, else 64
    auto part_at = [](int q0, int sms) {
        TtEmbeddingBackwardShape x = tt_embedding_backward_make_shape({200, 220, 250}, {q0, 4, 4}, {32, 32}, 0, 1, 512);
        x.nnz = 512 * 20;
        return tt_embedding_backward_tc_part_size(q0 > 4 ? tt_embedding_backward_tc_split_shape(x, q0 / 4) : x, sms);
    };
    char msg[160];
    snprintf(msg, sizeof msg, "FBTT's default %d, q 8,4,4 %d, q 16,4,4 %d, q 8,4,4 on 512 SMs %d", part_at(4, 132), part_at(8, 132),
             part_at(16, 132), part_at(8, 512));
    report(part_at(4, 132) == 64 && part_at(8, 132) == 48 && part_at(16, 132) == 64 && part_at(8, 512) == 64,
           "version 7's part size: 48 where parts of 64 spill into a second wave, else 64", msg);
#endif
}


// Version 7 at T = 2 on the CPU: the prep per lookup, a stable sort of the pairs (CUB's is stable too), the bounds
// (poisoned first: -1, as the launcher's memset), every span's warp program (fresh NaN shared memory; spans in order,
// or reversed), the combine kernel, the optimizer pass; checked by the op's check, and bit for bit the same in both
// orders. SPAN-long spans cut the runs of hot slices (Zipf) into several pieces.
static StepOut emulate_two(const Problem& pr, int opt, float lr, float eps, bool reverse, int* cut_slices = nullptr) {
    const TtEmbeddingBackwardShape& s = pr.s;
    StepOut o = start_step(pr, opt);
    std::fill(o.dG.begin(), o.dG.end(), 0.0f);                         // the launcher's memset
    const int N = 2 * s.nnz, K = s.key_base[2], key_stride = (int)tt_embedding_backward_round4(std::max(s.nnz, 1));
    int KQ;
    const int Q = tt_embedding_backward_two_q(s, &KQ);
    Poisoned key(N), lookup(N), rows(2 * (size_t)key_stride), bag_of(s.nnz), bounds(2 * (size_t)K);
    for (int j = 0; j < s.nnz; j++)
        tt_embedding_backward_two_prep(s, key_stride, j, pr.offsets.data(), pr.indices.data(), key.i(), lookup.i(), rows.i(), bag_of.i());
    std::vector<int> order(N), skey(std::max(N, 1)), slook(std::max(N, 1));
    for (int i = 0; i < N; i++) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return key.i()[x] < key.i()[y]; });
    for (int i = 0; i < N; i++) { skey[i] = key.i()[order[i]]; slook[i] = lookup.i()[order[i]]; }
    for (int i = 0; i < N; i++) tt_embedding_backward_two_bounds(skey.data(), N, K, i, bounds.i(), bounds.i() + K);
    const int spans = (N + TT_EMBEDDING_BACKWARD_TWO_SPAN - 1) / TT_EMBEDDING_BACKWARD_TWO_SPAN, maxS = std::max(s.S[0], s.S[1]);
    Poisoned parts((size_t)spans * 2 * maxS);
    const TtEmbeddingBackwardTwo w = {skey.data(), slook.data(), rows.i(), bag_of.i(), bounds.i(), bounds.i() + K, parts.f(), N, K,
                                      key_stride, s.q[1] | 1, tt_embedding_backward_two_slot(s), tt_embedding_backward_two_warp_floats(s), maxS};
    const TtEmbeddingBackwardIo io = {pr.dY.data(), o.cores.data(), o.state.data(), o.dG.data(), opt, lr, eps};
    for (int i = 0; i < spans; i++) {
        const int span = reverse ? spans - 1 - i : i;
        Poisoned sm(w.stage_floats);
        HostExec ex{32};
        if (Q == 32) tt_embedding_backward_two_span<32, 1, 32>(ex, s, w, io, span, sm.f());
        else if (Q == 16 && KQ == 2) tt_embedding_backward_two_span<16, 2, 32>(ex, s, w, io, span, sm.f());
        else if (Q == 16) tt_embedding_backward_two_span<16, 1, 32>(ex, s, w, io, span, sm.f());
        else if (KQ == 2) tt_embedding_backward_two_span<8, 2, 32>(ex, s, w, io, span, sm.f());
        else tt_embedding_backward_two_span<8, 1, 32>(ex, s, w, io, span, sm.f());
    }
    for (int g = 0; g < K; g++)                                        // the combine kernel
        for (int e = 0; e < maxS; e++) tt_embedding_backward_two_combine(s, w, o.dG.data(), g, e);
    if (cut_slices) {
        *cut_slices = 0;
        for (int g = 0; g < K; g++)
            *cut_slices += bounds.i()[g] >= 0 && bounds.i()[g] / TT_EMBEDDING_BACKWARD_TWO_SPAN != (bounds.i()[K + g] - 1) / TT_EMBEDDING_BACKWARD_TWO_SPAN;
    }
    emulate_optimizer_pass(s, opt, lr, eps, o);
    return o;
}

static void test_two(const Case& c, const std::vector<int>& opts, bool expect_cut) {
    Problem pr = make_problem(c);
    TtEmbeddingBackwardReference ref = tt_embedding_backward_reference(pr.s, pr.cores, pr.offsets, pr.indices, pr.dY);
    const float lr = 0.05f, eps = 1e-8f;
    int KQ;
    const int Q = tt_embedding_backward_two_q(pr.s, &KQ);
    for (int opt : opts) {
        int cut = 0;
        StepOut o = emulate_two(pr, opt, lr, eps, false, &cut);
        const bool ok = check_step(pr, ref, opt, lr, eps, o);
        StepOut o2 = emulate_two(pr, opt, lr, eps, true);
        const bool same = same_bits(o, o2), cut_ok = !expect_cut || cut > 0;
        char why[200];
        snprintf(why, sizeof why, "instantiation Q %d KQ %d, check %d, bitwise same with the spans reversed %d, %d slices cut into pieces "
                 "(expected some: %d)", Q, KQ, (int)ok, (int)same, cut, (int)expect_cut);
        report(Q > 0 && ok && same && cut_ok, "emulate_v7_two_cores_" + c.name + "_" + opt_name(opt), why);
        if (ok && same) printf("     (%s)\n", why);
    }
}

// Version 7's merged cores at T >= 4, on the CPU as the launcher runs them: the merge kernel's element function
// builds the 3-core shape's cores (they must give the same pooled rows as the T cores, by the explicit sum); the
// reference gradient of the merged shape then goes back through each merge by the launcher's permutes and its
// cuBLAS calls (column-major, the launcher's arguments), into NaN-poisoned scratch: every core's gradient must
// equal the reference gradient of the T-core shape, and the padding between cores stay 0.
static void colmajor_strided(bool ta, bool tb, int m, int n, int k, const float* A, int lda, int64_t sa, const float* B, int ldb, int64_t sb,
                             float* C, int ldc, int64_t sc, int batch) {
    for (int b = 0; b < batch; b++) colmajor_gemm(ta, tb, m, n, k, A + b * sa, lda, B + b * sb, ldb, C + b * sc, ldc);
}
static void test_merge(const Case& c, const std::vector<int>& forced_cut = {}) {   // (forced: the math where the plan would not merge)
    const Problem pr = make_problem(c);
    const TtEmbeddingBackwardShape& s = pr.s;
    int first[4] = {};
    std::string why;
    if (!forced_cut.empty()) std::copy(forced_cut.begin(), forced_cut.end(), first);
    else if (!tt_embedding_backward_merge_plan(s, first)) { report(false, "merge_" + c.name, "no merge plan"); return; }
    const TtEmbeddingBackwardShape v = tt_embedding_backward_merged_shape(s, first);
    const int G = v.T;
    std::vector<float> mc((size_t)v.core_off[G], 0.0f);
    std::vector<std::vector<float>> prod(s.T);
    auto core = [&](int t) { return pr.cores.data() + s.core_off[t]; };
    for (int g = 0; g < G; g++) {
        const int a0 = first[g], b0 = first[g + 1] - 1;
        const float* A = core(a0);
        for (int t = a0 + 1; t <= b0; t++) {
            const TtEmbeddingBackwardMergeStep st = tt_embedding_backward_merge_step(s, a0, t);
            const int64_t n = st.tables * st.pA * st.pt * st.m * st.n;
            prod[t].assign((size_t)n, NAN);
            for (int e = 0; e < tt_embedding_backward_merge_items(st); e++) tt_embedding_backward_merge_rows(prod[t].data(), A, core(t), st, e);
            for (int ic : {TT_EMBEDDING_BACKWARD_MERGE_IC, 1, 3}) {   // the staged kernel's grid (the launcher's IC, and others): the same bits
                std::vector<float> staged((size_t)n, NAN), As((size_t)st.m * (st.k | 1), NAN);
                HostExec ex{96};
                for (int j = 0; j < (int)(st.tables * st.pA); j++)
                    for (int by = 0; by < (int)ceil_div<int64_t>(st.pt, ic); by++)
                        tt_embedding_backward_merge_staged_block(ex, staged.data(), A, core(t), st, ic, j, by, As.data());
                if (memcmp(staged.data(), prod[t].data(), (size_t)n * 4) != 0) why += " the staged merge differs at ic " + std::to_string(ic) + ";";
            }
            A = prod[t].data();
        }
        const int64_t n = tt_embedding_backward_core_elems(v, g);
        std::copy(A, A + n, mc.begin() + v.core_off[g]);
    }
    // the same rows
    std::vector<double> Y0((size_t)s.num_bags * s.D), Y1(Y0.size());
    tt_embedding_backward_forward_cpu(s, std::vector<double>(pr.cores.begin(), pr.cores.end()).data(), pr.offsets.data(), pr.indices.data(), Y0.data());
    tt_embedding_backward_forward_cpu(v, std::vector<double>(mc.begin(), mc.end()).data(), pr.offsets.data(), pr.indices.data(), Y1.data());
    for (size_t i = 0; i < Y0.size(); i++)
        if (!(std::fabs(Y0[i] - Y1[i]) <= 1e-5 * (1.0 + std::fabs(Y0[i])))) { why += " merged rows differ;"; break; }
    // the merged shape's gradient, back through the merges
    std::vector<double> dGm((size_t)v.core_off[G]), ref((size_t)s.core_off[s.T]), mag(ref.size());
    tt_embedding_backward_cpu(v, mc.data(), pr.offsets.data(), pr.indices.data(), pr.dY.data(), dGm.data());
    tt_embedding_backward_cpu(s, pr.cores.data(), pr.offsets.data(), pr.indices.data(), pr.dY.data(), ref.data());
    tt_embedding_backward_cpu(s, pr.cores.data(), pr.offsets.data(), pr.indices.data(), pr.dY.data(), mag.data(), true);
    const std::vector<float> dGm_f(dGm.begin(), dGm.end());
    std::vector<float> dG(ref.size(), 0.0f);   // (the launcher's memset)
    std::vector<std::vector<float>> dprod(s.T);
    int steps = 0;
    for (int g = 0; g < G; g++) {
        const int a0 = first[g], b0 = first[g + 1] - 1;
        const float* dC = dGm_f.data() + v.core_off[g];
        if (a0 == b0) std::copy(dC, dC + tt_embedding_backward_core_elems(s, a0), dG.begin() + s.core_off[a0]);
        for (int t = b0; t > a0; t--, steps++) {
            const TtEmbeddingBackwardMergeStep st = tt_embedding_backward_merge_step(s, a0, t);
            const float* A = t - 1 == a0 ? core(a0) : prod[t - 1].data();
            float* dA = dG.data() + s.core_off[a0];
            if (t - 1 != a0) { dprod[t - 1].assign(prod[t - 1].size(), NAN); dA = dprod[t - 1].data(); }
            const int64_t nx = st.tables * st.pA * st.pt * st.m * st.n, ng = st.tables * st.pt * st.k * st.n;
            std::vector<float> X((size_t)nx, NAN), Gt((size_t)ng, NAN), dGx((size_t)ng, NAN);
            for (int64_t e = 0; e < nx; e++) X[e] = dC[tt_embedding_backward_swap_src<int>((int)st.pt, (int)st.m, (int)st.n, (int)e)];
            for (int64_t e = 0; e < ng; e++) Gt[e] = core(t)[tt_embedding_backward_swap_src<int64_t>(st.k, st.n, 1, e)];
            auto gemm = [&](const TtEmbeddingBackwardRowGemm& q, const float* Am, const float* Bm, float* Cm) {   // the launcher's cuBLAS call
                colmajor_strided(false, q.ta, q.N, q.M, q.K, Bm, q.ldb, q.sb, Am, q.lda, q.sa, Cm, q.ldc, q.sc, s.tables);
            };
            gemm(tt_embedding_backward_merge_gemm(st, false), X.data(), Gt.data(), dA);
            gemm(tt_embedding_backward_merge_gemm(st, true), A, X.data(), dGx.data());
            for (int64_t e = 0; e < ng; e++) dG[s.core_off[t] + e] = dGx[tt_embedding_backward_swap_src<int>((int)st.k, (int)st.pt, (int)st.n, (int)e)];
            dC = dA;
        }
    }
    int bad = 0;
    for (int t = 0; t < s.T; t++)
        for (int64_t e = s.core_off[t]; e < s.core_off[t + 1]; e++) {
            const bool pad = e >= s.core_off[t] + tt_embedding_backward_core_elems(s, t);
            if (pad ? dG[e] != 0.0f : !(std::fabs(dG[e] - ref[e]) <= 1e-5 * mag[e] + 1e-7)) {
                if (bad++ < 3) why += " core " + std::to_string(t) + " element " + std::to_string(e - s.core_off[t]) + ": " + std::to_string(dG[e]) +
                                     " vs " + std::to_string(ref[e]) + ";";
            }
        }
    std::string desc = " (cut";
    for (int g = 0; g < G; g++) desc += (g ? "|" : " ") + std::to_string(first[g + 1] - first[g]);
    desc += ", " + std::to_string(steps) + " merge steps)";
    report(why.empty() && steps > 0, "version 7 merged cores, " + c.name + desc + ": same rows; the merged gradient back through the merges = the reference", why);
}

// Version 7 at padded ranks, on the CPU as the launcher runs it: the pad kernel's element map writes every element
// of the padded cores (a NaN-poisoned buffer: none is left), which must give the same pooled rows; the padded shape's
// reference gradient, read back by the unpad kernel's map and applied (dense) into a NaN-poisoned dG, must equal the
// reference gradient of the shape itself, the padding between cores 0; the map back and forth is the identity.
static void test_pad(const Case& c) {
    const Problem pr = make_problem(c);
    const TtEmbeddingBackwardShape& s = pr.s;
    std::string why;
    if (tt_embedding_backward_pad_plan(s, 132) != (s.q[0] == TT_EMBEDDING_BACKWARD_TC_Q)) why += " the plan pads a cut shape or not an uncut one;";
    const TtEmbeddingBackwardShape v = tt_embedding_backward_padded_shape(s);
    std::vector<float> padded((size_t)v.core_off[v.T], NAN);
    for (int64_t e = 0; e < v.core_off[v.T]; e++) {
        const int64_t j = tt_embedding_backward_pad_map(v, s, e);
        padded[e] = j < 0 ? 0.0f : pr.cores[j];
    }
    int64_t real = 0;
    for (int64_t e = 0; e < s.core_off[s.T]; e++) {
        const int64_t j = tt_embedding_backward_pad_map(s, v, e);
        real += j >= 0;
        if (j >= 0 && tt_embedding_backward_pad_map(v, s, j) != e) { why += " the map back is not the identity at " + std::to_string(e) + ";"; break; }
    }
    int64_t elems = 0;
    for (int t = 0; t < s.T; t++) elems += tt_embedding_backward_core_elems(s, t);
    if (real != elems) why += " " + std::to_string(real) + " elements mapped of " + std::to_string(elems) + ";";
    std::vector<double> Y0((size_t)s.num_bags * s.D), Y1(Y0.size());
    tt_embedding_backward_forward_cpu(s, std::vector<double>(pr.cores.begin(), pr.cores.end()).data(), pr.offsets.data(), pr.indices.data(), Y0.data());
    tt_embedding_backward_forward_cpu(v, std::vector<double>(padded.begin(), padded.end()).data(), pr.offsets.data(), pr.indices.data(), Y1.data());
    for (size_t i = 0; i < Y0.size(); i++)
        if (!(std::fabs(Y0[i] - Y1[i]) <= 1e-6 * (1.0 + std::fabs(Y0[i])))) { why += " padded rows differ;"; break; }
    std::vector<double> dGv((size_t)v.core_off[v.T]), ref((size_t)s.core_off[s.T]), mag(ref.size());
    tt_embedding_backward_cpu(v, padded.data(), pr.offsets.data(), pr.indices.data(), pr.dY.data(), dGv.data());
    tt_embedding_backward_cpu(s, pr.cores.data(), pr.offsets.data(), pr.indices.data(), pr.dY.data(), ref.data());
    tt_embedding_backward_cpu(s, pr.cores.data(), pr.offsets.data(), pr.indices.data(), pr.dY.data(), mag.data(), true);
    const std::vector<float> dGv_f(dGv.begin(), dGv.end());
    std::vector<float> dG(ref.size(), NAN);
    for (int64_t e = 0; e < s.core_off[s.T]; e++) {
        const int64_t j = tt_embedding_backward_pad_map(s, v, e);
        tt_embedding_backward_apply(TT_EMBEDDING_BACKWARD_DENSE, 0.05f, 1e-8f, nullptr, nullptr, dG.data(), e, j < 0 ? 0.0f : dGv_f[j]);
    }
    int bad = 0;
    for (int t = 0; t < s.T; t++)
        for (int64_t e = s.core_off[t]; e < s.core_off[t + 1]; e++) {
            const bool pad = e >= s.core_off[t] + tt_embedding_backward_core_elems(s, t);
            if (pad ? dG[e] != 0.0f : !(std::fabs(dG[e] - ref[e]) <= 1e-5 * mag[e] + 1e-7))
                if (bad++ < 3) why += " core " + std::to_string(t) + " element " + std::to_string(e - s.core_off[t]) + ": " + std::to_string(dG[e]) + " vs " +
                                     std::to_string(ref[e]) + ";";
        }
    report(why.empty(), "version 7 padded ranks, " + c.name + ": every padded element written, the same rows; the padded gradient read back = the reference", why);
}

// Every host planner the default's allocation and dispatch run (the route, version 6's group plan, the merge plan and
// its inner shape's plans, version 9's slice plan with and without the stash, the q_0 = 4k cut) at 4,000 random shapes
// of the TT grid (T 2..6, q_t up to 16 with D <= 256, ranks up to 128, small and large p, 1..3 tables, few and many
// lookups): each must end (an alarm turns a spin into a FAIL: version 9's plan once spun where m_{t-1} >= 128) and,
// where version 9's plan accepts the shape, give every core at least one lookup a part and one part.
static void test_plans_terminate() {
    std::mt19937 rng(2026);
    auto pick = [&](std::initializer_list<int> v) { return *(v.begin() + std::uniform_int_distribution<int>(0, (int)v.size() - 1)(rng)); };
    auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    signal(SIGALRM, [](int) {
        printf("FAIL host planners at random grid shapes: a plan did not end within 20 s\n");
        fflush(stdout);
        _exit(1);
    });
    alarm(20);
    int shapes = 0, bad = 0, routes[16] = {};
    std::string why;
    for (int it = 0; it < 4000; it++) {
        const int T = uni(2, 6);
        std::vector<int> p(T), q(T), r(T - 1);
        int D = 1;
        for (int t = 0; t < T; t++) {
            do q[t] = pick({1, 2, 3, 4, 8, 16}); while (D * q[t] > 256);
            D *= q[t];
        }
        for (int& x : r) x = pick({1, 2, 3, 5, 8, 16, 17, 32, 64, 128});
        const bool small = uni(0, 1) || T >= 4;
        for (int& x : p) x = small ? uni(2, 12) : uni(2, 300);
        double E = 1;
        for (int x : p) E *= x;
        const int tables = uni(1, 3), B = pick({1, 7, 40, 512, 4096}), L = pick({0, 1, 3, 12, 20});
        if ((double)tables * B * L * T >= 2e9 || E > 2e9) continue;
        TtEmbeddingBackwardShape sh = tt_embedding_backward_make_shape(p, q, r, (int64_t)std::max(1.0, E / 2), tables, B);
        sh.nnz = tables * B * L;
        TtEmbeddingBackwardArgs a;
        memset(&a, 0, sizeof a);
        a.s = sh;
        a.smem_limit = 232448 - 1024;
        (void)tt_embedding_backward_group_make_plan(sh, a.W_off, TT_EMBEDDING_BACKWARD_TC_BLOCK);
        int first[4];
        if (tt_embedding_backward_merge_plan(sh, first)) {
            TtEmbeddingBackwardArgs inner;
            memset(&inner, 0, sizeof inner);
            inner.s = tt_embedding_backward_merged_shape(sh, first);
            (void)tt_embedding_backward_group_make_plan(inner.s, inner.W_off, TT_EMBEDDING_BACKWARD_TC_BLOCK);
            TtEmbeddingBackwardSlicePlan Pi;
            (void)tt_embedding_backward_slice_make_plan(inner.s, Pi);
            routes[tt_embedding_backward_route(inner.s, inner.W_off, a.smem_limit, TT_EMBEDDING_BACKWARD_TC_BLOCK) & 15]++;
        }
        if (tt_embedding_backward_pad_plan(sh, 132)) {
            routes[TT_EMBEDDING_BACKWARD_ROUTE_PADDED]++;
            TtEmbeddingBackwardArgs inner;
            memset(&inner, 0, sizeof inner);
            inner.s = tt_embedding_backward_padded_shape(sh);
            (void)tt_embedding_backward_group_make_plan(inner.s, inner.W_off, TT_EMBEDDING_BACKWARD_TC_BLOCK);
            if (tt_embedding_backward_route(inner.s, inner.W_off, a.smem_limit, TT_EMBEDDING_BACKWARD_TC_BLOCK) != TT_EMBEDDING_BACKWARD_ROUTE_TENSOR) {
                bad++;
                why = "padded ranks that do not reach the tensor cores";
            }
        }
        if (tt_embedding_backward_tc_reason(sh).empty() && tt_embedding_backward_tc_split(sh) > 1)
            (void)tt_embedding_backward_tc_split_shape(sh, tt_embedding_backward_tc_split(sh));
        for (bool stash : {false, true}) {
            TtEmbeddingBackwardSlicePlan P;
            if (!tt_embedding_backward_slice_make_plan(sh, P, stash).empty()) continue;
            for (int t = 0; t < T; t++)
                if (P.lpp[t] < 1 || P.max_pt[t] < 1) {
                    bad++;
                    why = "T " + std::to_string(T) + ", core " + std::to_string(t) + ": " + std::to_string(P.lpp[t]) + " lookups a part, " +
                          std::to_string(P.max_pt[t]) + " parts";
                }
        }
        routes[tt_embedding_backward_route(sh, a.W_off, a.smem_limit, TT_EMBEDDING_BACKWARD_TC_BLOCK) & 15]++;
        for (int k : {1, 2, 3, 6, 7, 9}) (void)tt_embedding_backward_skip_reason(k, sh, a, a.smem_limit, 0);
        shapes++;
    }
    alarm(0);
    signal(SIGALRM, SIG_DFL);
    std::string seen;
    for (int k = 0; k < 16; k++)
        if (routes[k]) seen += " " + std::to_string(k) + ":" + std::to_string(routes[k]);
    report(bad == 0 && shapes > 3000 && routes[TT_EMBEDDING_BACKWARD_ROUTE_MERGED] > 0 && routes[TT_EMBEDDING_BACKWARD_ROUTE_SLICE_MMA] > 0 &&
               routes[TT_EMBEDDING_BACKWARD_ROUTE_PADDED] > 0,
           "host planners at " + std::to_string(shapes) + " random grid shapes: all end, version 9's parts sane (routes seen:" + seen + ")", why);
}

int main() {
    test_decode_and_counts();
    test_validators();
    test_fbtt_update_grid_defect();

    // finite differences, T = 2..6 (tables > 1 and repeated rows included)
    const Case fd[] = {
        {"T2", {3, 4}, {2, 3}, {3}, 2, 3, 4, 0.0, false, 1},
        {"T3", {3, 4, 5}, {2, 2, 2}, {2, 3}, 1, 4, 3, 0.0, true, 2},
        {"T4", {2, 3, 2, 3}, {2, 1, 3, 2}, {2, 3, 2}, 2, 2, 3, 0.0, false, 3},
        {"T5", {2, 2, 3, 2, 2}, {2, 2, 1, 2, 3}, {2, 3, 2, 2}, 1, 3, 4, 0.0, false, 4},
        {"T6", {2, 2, 2, 2, 2, 2}, {2, 1, 2, 1, 2, 2}, {2, 2, 3, 2, 2}, 2, 3, 4, 0.0, false, 5},
    };
    for (const Case& c : fd) test_finite_differences(c);

    // every version, emulated
    const int D = TT_EMBEDDING_BACKWARD_DENSE, S = TT_EMBEDDING_BACKWARD_SGD, A = TT_EMBEDDING_BACKWARD_ADAGRAD;
    test_versions({"T2_tables2", {5, 7}, {3, 5}, {6}, 2, 9, 5, 0.0, false, 1}, {A, D}, {128, 100});
    test_versions({"T3_example_ragged", {3, 4, 5}, {2, 2, 2}, {2, 3}, 1, 7, 3, 0.0, true, 2}, {S, D}, {128, 37});
    test_versions({"T4_ragged", {4, 3, 5, 2}, {2, 3, 1, 2}, {3, 5, 4}, 1, 13, 7, 0.0, true, 3}, {D, A}, {256});
    test_versions({"T5_tables3", {3, 2, 4, 3, 2}, {2, 2, 3, 1, 2}, {2, 4, 3, 5}, 3, 5, 9, 0.0, false, 4}, {S, D}, {128});
    test_versions({"T6", {2, 3, 2, 2, 3, 2}, {2, 1, 2, 3, 2, 2}, {3, 2, 4, 2, 3}, 1, 11, 6, 0.0, false, 5}, {A, S}, {96});
    test_versions({"zipf_hot_slices", {2, 30, 3}, {4, 4, 4}, {8, 8}, 1, 33, 17, 1.3, false, 6}, {S, A}, {256, 100});
    test_versions({"rank32_q4", {3, 4, 5}, {4, 4, 4}, {32, 32}, 1, 10, 7, 0.0, false, 7}, {S}, {256, 512});
    test_versions({"all_bags_empty", {3, 4, 5}, {2, 2, 2}, {2, 3}, 2, 4, 0, 0.0, false, 8}, {D, A}, {128});
    test_versions({"rank_ones", {4, 5}, {3, 2}, {1}, 1, 6, 4, 0.0, true, 9}, {S}, {128});
    test_checker_catches();

    // version 6: its plan at the bench shapes, then the emulated step on the cases above and on shapes that
    // take its float4 paths (T = 2 with the pivot last, T = 3, the 4- and 5-core shapes scaled down), split
    // pivot slices and long slices of the other cores (several chunks, several parts, several column items),
    // odd block sizes (the shared-memory accumulator), the pivot first (h = 0) and generic (III) with padding off
    test_plan6();
    test_lane_pairing();
    test_v6({"T2_tables2", {5, 7}, {3, 5}, {6}, 2, 9, 5, 0.0, false, 1}, {A, D}, {128, 100});
    test_v6({"T3_example_ragged", {3, 4, 5}, {2, 2, 2}, {2, 3}, 1, 7, 3, 0.0, true, 2}, {S, D}, {128, 37});
    test_v6({"T4_ragged", {4, 3, 5, 2}, {2, 3, 1, 2}, {3, 5, 4}, 1, 13, 7, 0.0, true, 3}, {D, A}, {256});
    test_v6({"T5_tables3", {3, 2, 4, 3, 2}, {2, 2, 3, 1, 2}, {2, 4, 3, 5}, 3, 5, 9, 0.0, false, 4}, {S, D}, {128});
    test_v6({"T6", {2, 3, 2, 2, 3, 2}, {2, 1, 2, 3, 2, 2}, {3, 2, 4, 2, 3}, 1, 11, 6, 0.0, false, 5}, {A, S}, {96});
    test_v6({"zipf_hot_slices", {2, 30, 3}, {4, 4, 4}, {8, 8}, 1, 33, 17, 1.3, false, 6}, {S, A}, {256, 100}, true);
    test_v6({"rank32_q4", {3, 4, 5}, {4, 4, 4}, {32, 32}, 1, 10, 7, 0.0, false, 7}, {S, D}, {256, 512, 128}, true);
    test_v6({"all_bags_empty", {3, 4, 5}, {2, 2, 2}, {2, 3}, 2, 4, 0, 0.0, false, 8}, {D, A}, {128});
    test_v6({"rank_ones_pivot_first", {4, 5}, {3, 2}, {1}, 1, 6, 4, 0.0, true, 9}, {S, D}, {128});
    test_v6({"T2_pivot_last_fast", {5, 3}, {4, 8}, {16}, 2, 11, 6, 0.0, true, 10}, {A, D}, {256, 97}, true);
    test_v6({"split_slices", {2, 3, 2}, {4, 4, 4}, {8, 8}, 1, 40, 6, 0.0, false, 11}, {S, A, D}, {256, 128}, true);
    test_v6({"split_slices", {2, 3, 2}, {4, 4, 4}, {8, 8}, 1, 40, 6, 0.0, false, 11}, {A}, {128}, true, 12);
    test_v6({"T5_tables3", {3, 2, 4, 3, 2}, {2, 2, 3, 1, 2}, {2, 4, 3, 5}, 3, 5, 9, 0.0, false, 4}, {D}, {37}, false, 4);
    test_v6({"four_core_small", {3, 4, 5, 2}, {4, 2, 2, 4}, {32, 32, 32}, 1, 40, 9, 0.0, true, 12}, {S, A}, {256}, true);
    test_v6({"five_core_small", {2, 3, 2, 3, 2}, {2, 2, 2, 2, 4}, {8, 16, 32, 64}, 2, 15, 5, 0.0, false, 13}, {A, D}, {256, 128}, true);
    test_v6({"generic_III", {3, 4, 5}, {4, 4, 2}, {8, 8}, 1, 9, 7, 0.0, false, 14}, {S}, {256}, true);
    test_v6({"zipf_default_p", {200, 220, 250}, {4, 4, 4}, {32, 32}, 1, 64, 20, 1.15, false, 15}, {A}, {256}, true);
    // ranks 64 and 128: dG_h in four register tiles per thread (mode 0) or accumulated in global memory (mode 1; at
    // EL-Rec's q 2,2,4 and rank 128 beside a 128 KB pivot slice, split slices and several tables)
    test_v6({"rank64_acc4", {3, 4, 5}, {4, 4, 4}, {64, 64}, 1, 8, 5, 0.0, false, 16}, {S, A}, {256}, true, 0, 0);
    test_v6({"rank64_acc_global", {3, 4, 5}, {4, 4, 4}, {64, 64}, 1, 8, 5, 0.0, false, 16}, {S, D}, {512}, false, 0, 1);
    test_v6({"rank128_q224_acc_global", {5, 3, 7}, {2, 2, 4}, {128, 128}, 2, 40, 3, 1.2, true, 18}, {A, D}, {128}, false, 0, 1);
    // FBTT's default itself (10,240 lookups), uniform and Zipf 1.15: the chunk and item lists of the bench runs
    test_v6({"fbtt_default", {200, 220, 250}, {4, 4, 4}, {32, 32}, 1, 512, 20, 0.0, false, 42}, {S}, {256}, true);
    test_v6({"fbtt_default_zipf", {200, 220, 250}, {4, 4, 4}, {32, 32}, 1, 512, 20, 1.15, false, 42}, {A}, {256}, true);

    // version 9 (its mma fragments emulated per accumulator): T = 2..6, every optimizer, empty bags, several tables,
    // Zipf slices longer than a part (several parts), ranks 64 and 128 with tiles and K not multiples of 64 and 16, the
    // narrow G tiles (n <= 16), wide tiles with rows, columns and K not multiples of 32, 16 and 8, D = 4
    test_v9({"T2_tables2", {5, 7}, {3, 5}, {6}, 2, 9, 5, 0.0, false, 1}, {A, D});
    test_v9({"T3_example_ragged", {3, 4, 5}, {2, 2, 2}, {2, 3}, 1, 7, 3, 0.0, true, 2}, {S, D});
    test_v9({"T4_ragged", {4, 3, 5, 2}, {2, 3, 1, 2}, {3, 5, 4}, 1, 13, 7, 0.0, true, 3}, {D, A});
    test_v9({"T5_tables3", {3, 2, 4, 3, 2}, {2, 2, 3, 1, 2}, {2, 4, 3, 5}, 3, 5, 9, 0.0, false, 4}, {S});
    test_v9({"T6", {2, 3, 2, 2, 3, 2}, {2, 1, 2, 3, 2, 2}, {3, 2, 4, 2, 3}, 1, 11, 6, 0.0, false, 5}, {A});
    test_v9({"all_bags_empty", {3, 4, 5}, {2, 2, 2}, {2, 3}, 2, 4, 0, 0.0, false, 8}, {D, A});
    test_v9({"rank_ones", {4, 5}, {3, 2}, {1}, 1, 6, 4, 0.0, true, 9}, {S});
    test_v9({"zipf_parts", {3, 20, 5}, {4, 4, 4}, {8, 8}, 1, 90, 30, 1.3, false, 11}, {S, A, D}, true);
    test_v9({"rank128_q224_odd_p", {5, 3, 7}, {2, 2, 4}, {128, 128}, 2, 20, 3, 1.2, true, 18}, {A, D});
    test_v9({"rank100_q444", {3, 5, 3}, {4, 4, 4}, {100, 72}, 1, 9, 4, 0.0, false, 19}, {S});
    test_v9({"D4_rank128_T2", {7, 9}, {2, 2}, {128}, 3, 8, 5, 0.0, true, 20}, {A});
    test_v9({"T5_rank64_D16", {3, 2, 3, 2, 3}, {1, 2, 2, 2, 2}, {64, 33, 64, 17}, 1, 6, 3, 0.0, false, 21}, {S, D});
    // the last core's D by the GEMM (q_{T-1} = 8 > LAST_D_MAX_Q); the cases above take the direct kernel, but T2_tables2 (q 5)
    test_v9_stash({"T3_rank128", {5, 3, 7}, {2, 2, 4}, {128, 128}, 2, 20, 3, 1.2, true, 23}, S);
    test_v9_stash({"T4_ragged", {4, 3, 5, 2}, {2, 3, 1, 2}, {3, 5, 4}, 2, 13, 7, 0.0, true, 24}, A);
    test_v9_stash({"T6", {2, 3, 2, 2, 3, 2}, {2, 1, 2, 3, 2, 2}, {3, 2, 4, 2, 3}, 1, 11, 6, 0.0, false, 25}, D);
    test_v9({"q448_ragged", {3, 4, 5}, {4, 4, 8}, {40, 24}, 1, 9, 4, 0.0, true, 22}, {A});
    // a lookup of 128 rows at core 3 (m_2 = 2 * 8 * 8) and few lookups: the plan's halving of parts must stop at one
    // lookup a part (it spun forever there once: every version's workspace, the default's too, is planned at allocation)
    test_v9({"prefix128_few_lookups", {3, 2, 3, 2}, {2, 8, 8, 2}, {2, 3, 4}, 2, 5, 3, 0.0, false, 26}, {S, D});
    test_plans_terminate();

    // version 7 (tensor cores: its maps and small steps here, the whole step in tests/gpu_cases.txt)
    test_v7(TT_EMBEDDING_BACKWARD_TC_NB);
    test_v7(13);                // a partial last segment: the absent lookups' rows not written, their k-steps zeros
    test_v7(1);
    test_v7_small_steps();
    test_v7_filter();
    test_v7_grids({"side_parts_p2_300_3", {2, 300, 3}, {4, 4, 4}, {32, 32}, 1, 33, 17, 1.3, false, 7});
    test_v7_grids({"side_parts_uniform", {5, 300, 7}, {4, 4, 4}, {32, 32}, 1, 100, 20, 0.0, false, 537});
    test_v7_grids({"side_parts_ragged_tables2", {3, 50, 4}, {4, 4, 4}, {32, 32}, 2, 70, 9, 0.0, true, 538});
    test_v7_split({"q8_ragged_tables2", {5, 6, 7}, {8, 4, 4}, {32, 32}, 2, 9, 5, 0.0, true, 31}, {S, A, D});
    test_v7_split({"q12_ragged", {3, 5, 4}, {12, 4, 4}, {32, 32}, 1, 11, 4, 0.0, true, 32}, {A});
    test_v7_split({"q16_zipf", {3, 4, 5}, {16, 4, 4}, {32, 32}, 1, 7, 6, 1.2, false, 33}, {S});

    // version 7 at T = 2: odd q and ranks, several tables, ragged and empty bags, Zipf runs cut by spans, ranks 33-64
    // (two rank indices a lane), q 32 (Q 32), rank 1
    test_two({"T2_tables2", {5, 7}, {3, 5}, {6}, 2, 9, 5, 0.0, false, 1}, {A, D, S}, true);
    test_two({"T2_zipf_long_runs", {4, 30}, {4, 4}, {32}, 1, 40, 20, 1.3, false, 51}, {S, D}, true);
    test_two({"T2_ragged_rank64", {6, 5}, {2, 8}, {64}, 3, 7, 6, 0.0, true, 52}, {A}, false);
    test_two({"T2_rank40_q16", {9, 11}, {16, 3}, {40}, 1, 12, 4, 0.0, false, 53}, {D}, false);
    test_two({"T2_q32", {3, 4}, {32, 2}, {7}, 1, 6, 5, 0.0, true, 54}, {S}, false);
    test_two({"T2_rank1_empty_bags", {4, 5}, {3, 2}, {1}, 2, 4, 0, 0.0, false, 55}, {D, A}, false);
    test_two({"T2_q8_rank48_zipf", {30, 7}, {8, 5}, {48}, 2, 20, 9, 1.2, true, 57}, {S, D}, true);
    test_two({"T2_merged_grid_T4", {40, 50}, {16, 8}, {32}, 1, 64, 20, 0.0, false, 56}, {D}, true);

    // version 7 at T >= 4: merged cores (a 3-core group included, several tables, ragged and Zipf bags, odd ranks)
    test_merge({"T4_tables2_ragged", {3, 4, 5, 3}, {2, 3, 2, 2}, {5, 3, 4}, 2, 7, 5, 0.0, true, 41}, {0, 1, 2, 4});
    test_merge({"T4_q2244_tensor_cores", {3, 4, 5, 3}, {2, 2, 4, 4}, {7, 32, 32}, 1, 8, 5, 0.0, false, 46});
    test_merge({"T5_zipf", {2, 3, 2, 3, 2}, {2, 2, 1, 3, 2}, {3, 4, 2, 5}, 1, 9, 4, 1.2, false, 42});
    test_merge({"T6_tables2", {2, 2, 3, 2, 2, 3}, {2, 2, 2, 2, 2, 2}, {3, 2, 4, 2, 3}, 2, 5, 6, 0.0, true, 43});
    test_merge({"T6_rank32", {3, 2, 2, 3, 2, 2}, {2, 2, 2, 2, 2, 2}, {32, 32, 32, 32, 32}, 1, 6, 3, 0.0, false, 44});
    test_merge({"T5_three_core_group", {2, 2, 2, 3, 2}, {1, 2, 2, 4, 4}, {2, 3, 5, 4}, 1, 5, 4, 0.0, true, 45});
    test_merge({"T4_two_groups", {3, 4, 2, 3}, {4, 4, 2, 4}, {5, 7, 3}, 2, 6, 4, 0.0, true, 47}, {0, 2, 4, 4});
    test_merge({"T5_two_groups_zipf", {2, 3, 2, 3, 2}, {2, 3, 1, 3, 2}, {3, 5, 2, 4}, 1, 9, 5, 1.2, false, 48}, {0, 3, 5, 5});
    test_pad({"q444_ranks16", {5, 6, 7}, {4, 4, 4}, {16, 16}, 1, 9, 5, 0.0, false, 49});
    test_pad({"q444_ranks32_17_tables2_ragged", {3, 5, 4}, {4, 4, 4}, {32, 17}, 2, 7, 4, 0.0, true, 50});
    test_pad({"q844_ranks20_16_zipf", {4, 3, 5}, {8, 4, 4}, {20, 16}, 1, 8, 6, 1.2, false, 51});

    return test_summary();
}
