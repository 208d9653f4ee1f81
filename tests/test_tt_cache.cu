// CPU tests of tt_cache (no GPU): populate's rebuild, its ranking and rows, the cache lookup after evictions, and
// the cached backward grouped per row against the sequential reference. Each FBTT defect of docs/tt_cache.md has
// a case that our code passes and that an emulation of FBTT's way fails (so the case can fail). Version 4's order of
// the cached backward against the reference within the GPU check's tolerance. Version 7's route: populate's hit
// estimate against the next step's hit rate on FBTT's batch (uniform and Zipf).
#define NO_MAIN
#include "test_util.h"
#include "../dev/cuda/tt_cache.cu"

#include <numeric>
#include <unordered_set>

// each key `reps` times, in order
static void count_keys(LfuCountHostTable& t, const std::vector<std::pair<int64_t, int>>& keys) {
    std::vector<int64_t> idx;
    for (auto& kr : keys) idx.insert(idx.end(), (size_t)kr.second, kr.first);
    lfu_count_cpu(t, idx.data(), (int64_t)idx.size());
}

// "" when lookups through the table reach the right rows: a slot with a key and a row holds that row's key, a row
// with a key is found through the table, an empty slot has no row
static std::string rows_consistent(const LfuCountHostTable& t, const std::vector<int>& state, const std::vector<int64_t>& row_key) {
    const uint64_t H = t.keys.size();
    for (uint64_t s = 0; s < H; s++) {
        if (t.keys[s] == LFU_COUNT_EMPTY && state[s] != -1) return fmt("empty slot %llu has cache row %d", (unsigned long long)s, state[s]);
        if (t.keys[s] != LFU_COUNT_EMPTY && state[s] >= 0 && row_key[state[s]] != t.keys[s])
            return fmt("key %lld (slot %llu) is sent to row %d, which holds key %lld", (long long)t.keys[s], (unsigned long long)s, state[s],
                       (long long)row_key[state[s]]);
    }
    for (size_t n = 0; n < row_key.size(); n++)
        if (row_key[n] >= 0 && tt_cache_row_of(t.keys.data(), state.data(), H, row_key[n]) != (int)n)
            return fmt("row %zu's key %lld is not found through the table", n, (long long)row_key[n]);
    return "";
}

// FBTT's populate: rank as ours, then evict by emptying the slot (key -1, count 0) and leave its cache_state;
// positions n < C without a key become row_key 0 (a filler row)
static void fbtt_populate(LfuCountHostTable& t, std::vector<int>& state, int64_t C, std::vector<int64_t>& row_key) {
    const uint64_t H = t.keys.size();
    std::vector<int64_t> order(H);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return t.counts[a] > t.counts[b]; });
    row_key.assign((size_t)C, -1);
    for (uint64_t n = 0; n < H; n++) {
        const int64_t s = order[n];
        if ((int64_t)n < C) {
            row_key[n] = t.keys[s] == LFU_COUNT_EMPTY ? 0 : t.keys[s];
            if (t.keys[s] != LFU_COUNT_EMPTY) state[s] = (int)n;
        } else {
            t.keys[s] = LFU_COUNT_EMPTY;
            t.counts[s] = 0;
        }
    }
}

int main() {
    // 1. a second populate after eviction sends every key to its own row
    {
        const uint64_t H = 64;
        auto run = [&](bool ours) {
            LfuCountHostTable t(H);
            std::vector<int> state(H, -1);
            std::vector<int64_t> rows;
            const int64_t A = lfu_count_keys_with_home(5, H, 1)[0];
            std::vector<int64_t> hot = lfu_count_keys_with_home(20, H, 3, 1000);
            count_keys(t, {{A, 50}, {hot[0], 1}, {hot[1], 1}});
            ours ? (void)tt_cache_populate_cpu(t, state, 2, rows) : fbtt_populate(t, state, 2, rows);   // A cached
            count_keys(t, {{hot[0], 100}, {hot[1], 100}, {hot[2], 100}});
            ours ? (void)tt_cache_populate_cpu(t, state, 2, rows) : fbtt_populate(t, state, 2, rows);   // A evicted
            const int64_t X = lfu_count_keys_with_home(5, H, 1, A + 1)[0];                                                 // a new key at A's home
            count_keys(t, {{X, 1}});
            return rows_consistent(t, state, rows);
        };
        const std::string ours = run(true), fbtt = run(false);
        report(ours.empty(), "second populate after an eviction: every key reaches its own row (or none)", ours);
        report(!fbtt.empty(), "the same steps with FBTT's eviction (cache_state left) send a key to another key's row",
               "the emulation passed: the case cannot fail");
        if (!fbtt.empty()) printf("    (FBTT: %s)\n", fbtt.c_str());
    }

    // 2. no filler row when fewer than C keys were seen
    {
        LfuCountHostTable t(100);
        count_keys(t, {{17, 3}, {4242, 2}, {99, 1}});
        std::vector<int> state;
        std::vector<int64_t> rows;
        tt_cache_populate_cpu(t, state, 10, rows);
        std::string why;
        for (int n = 0; n < 10; n++)
            if ((n < 3) != (rows[n] >= 0)) why += fmt("row %d holds key %lld; ", n, (long long)rows[n]);
        if (rows[0] != 17 || rows[1] != 4242 || rows[2] != 99) why += "rows 0..2 are not the keys by count; ";
        report(why.empty(), "3 keys, C = 10: rows 0..2 hold them by count, rows 3..9 hold nothing (no row 0 filler)", why);
        LfuCountHostTable f(100);
        count_keys(f, {{17, 3}, {4242, 2}, {99, 1}});
        std::vector<int> fstate(100, -1);
        fbtt_populate(f, fstate, 10, rows);
        report(rows[3] == 0, "FBTT's populate materialises row 0 as filler at position 3 (the emulation shows the defect)");
    }

    // 3. no holes: find stops at an empty slot, so a kept key behind an evicted one must be moved
    {
        const uint64_t H = 32;
        const std::vector<int64_t> k = lfu_count_keys_with_home(7, H, 2);     // k[0] (rare) at slot 7, k[1] (hot) at slot 8
        LfuCountHostTable t(H);
        count_keys(t, {{k[0], 1}, {k[1], 9}});
        LfuCountHostTable f = t;
        std::vector<int> state, fstate(H, -1);
        std::vector<int64_t> rows;
        tt_cache_populate_cpu(t, state, 1, rows);
        int probes = 0;
        const int64_t s = lfu_count_find(t.keys.data(), H, k[1], &probes);
        report(s == 7 && state[7] == 0 && probes == 1, "the kept key behind an evicted one moves to its home: found in 1 probe, row 0",
               fmt("slot %lld, probes %d", (long long)s, probes));
        fbtt_populate(f, fstate, 1, rows);
        report(lfu_count_find(f.keys.data(), H, k[1]) == -1, "FBTT's emptied slot hides the kept key from a find that stops at empty");
        const int64_t miss = lfu_count_keys_with_home(7, H, 1, k[1] + 1)[0];
        lfu_count_find(t.keys.data(), H, miss, &probes);
        report(probes == 2, "find of a missing key stops at the first empty slot (2 probes here, FBTT: always 3)", fmt("%d probes", probes));
    }

    // 4. the rebuild on random crowded tables: no kept key lost, each in its window with no empty slot before it,
    //    its count kept; the rest gone; ties ranked in slot order; state and rows consistent
    {
        Rng rng(5);
        std::string why;
        int cases = 0;
        for (int iter = 0; iter < 400 && why.empty(); iter++) {
            const uint64_t H = (uint64_t)rng.randint(2, 60);
            LfuCountHostTable t(H);
            const int n = (int)rng.randint(1, (int64_t)(3 * H));
            std::vector<int64_t> idx;
            for (int i = 0; i < n; i++) idx.push_back(rng.randint(0, 2 * (int64_t)H));
            lfu_count_cpu(t, idx.data(), (int64_t)idx.size());
            if (std::count(t.keys.begin(), t.keys.end(), LFU_COUNT_EMPTY) == 0) continue;   // full: refused by the op
            const int64_t C = rng.randint(1, (int64_t)H + 3);
            const LfuCountHostTable before = t;
            std::vector<int> state;
            std::vector<int64_t> rows;
            const int lost = tt_cache_populate_cpu(t, state, C, rows);
            std::unordered_map<int64_t, int64_t> kept;
            for (size_t r = 0; r < rows.size(); r++)
                if (rows[r] >= 0) kept[rows[r]] = before.counts[lfu_count_find(before.keys.data(), H, rows[r])];
            std::string bad = lost ? fmt("%d keys lost", lost) : lfu_count_check_table(t.keys.data(), t.counts.data(), H, 0, kept);
            if (bad.empty()) bad = rows_consistent(t, state, rows);
            // ranking: counts non-increasing over the rows; equal counts in slot order of the old table
            for (size_t r = 1; bad.empty() && r < rows.size() && rows[r] >= 0; r++) {
                const int64_t a = lfu_count_find(before.keys.data(), H, rows[r - 1]), b = lfu_count_find(before.keys.data(), H, rows[r]);
                if (before.counts[a] < before.counts[b] || (before.counts[a] == before.counts[b] && a > b)) bad = fmt("rows %zu, %zu out of order", r - 1, r);
            }
            if (!bad.empty()) why = fmt("H %llu, C %lld: ", (unsigned long long)H, (long long)C) + bad;
            cases++;
        }
        report(why.empty() && cases > 100, fmt("rebuild of %d random crowded tables (H 2..59, wrap included): kept keys in place, counts kept", cases), why);
    }

    // 5. the cached backward grouped per row (the GPU's order: stable sort by row, a warp of 32 lanes per row, chunks of
    //    32 occurrences: states chained, multipliers apart, then the updates) against
    //    the sequential reference, bitwise, for each optimizer; rows shared by several bags; D not a multiple of 128
    for (int D : {37, 64, 200}) {
        Rng rng(11 + D);
        const int64_t nbags = 41, C = 5;          // ~45 occurrences a row: two chunks of the kernel
        const int L = 6, chunk = TT_CACHE_CHUNK;
        std::vector<int64_t> offsets(nbags + 1);
        for (int64_t b = 0; b <= nbags; b++) offsets[b] = b * L;
        std::vector<int> crow((size_t)(nbags * L));
        for (auto& c : crow) c = (int)rng.randint(-1, C);     // -1: a TT lookup
        crow[0] = crow[L] = crow[2 * L] = crow[5 * L + 1] = 2;  // row 2 in bags 0, 1, 2, 5
        const std::vector<float> dY = make_random_floats((size_t)(nbags * D), rng);
        std::vector<float> msq(nbags);
        for (int64_t b = 0; b < nbags; b++) msq[b] = tt_cache_mean_square(dY.data() + b * D, D);
        const std::vector<float> W0 = make_random_floats((size_t)(C * D), rng), st0 = make_random_floats((size_t)C, rng, 0.1f, 1.0f);
        for (int opt : {TT_EMBEDDING_BACKWARD_DENSE, TT_EMBEDDING_BACKWARD_SGD, TT_EMBEDDING_BACKWARD_ADAGRAD}) {
            std::vector<float> W = W0, st = st0, dW((size_t)(C * D), 0.0f), Wg = W0, stg = st0, dWg((size_t)(C * D), 0.0f);
            std::vector<float> mag((size_t)(C * D), 0.0f);
            tt_cache_backward_cpu(opt, 0.05f, 1e-8f, W.data(), st.data(), dW.data(), crow.data(), offsets.data(), nbags, dY.data(), D, C, mag.data());
            std::vector<std::pair<int, int>> occ;                 // (row, bag) in lookup order, then stably sorted by row
            for (int64_t b = 0; b < nbags; b++)
                for (int64_t n = offsets[b]; n < offsets[b + 1]; n++) if (crow[n] >= 0) occ.push_back({crow[n], (int)b});
            std::stable_sort(occ.begin(), occ.end(), [](const std::pair<int, int>& a, const std::pair<int, int>& b) { return a.first < b.first; });
            std::vector<std::pair<int, std::vector<int>>> runs;   // each row hit and its bags, in lookup order
            for (auto& rb : occ) {
                if (runs.empty() || runs.back().first != rb.first) runs.push_back({rb.first, {}});
                runs.back().second.push_back(rb.second);
            }
            for (auto& [c, bags] : runs) {
                float* w = (opt == TT_EMBEDDING_BACKWARD_DENSE ? dWg.data() : Wg.data()) + c * D;
                for (size_t c0 = 0; c0 < bags.size(); c0 += chunk) {   // the kernel's chunks: stage, states, multipliers, apply
                    const int n = (int)std::min(bags.size() - c0, (size_t)chunk);
                    float mult[64];
                    for (int o = 0; o < n; o++) mult[o] = opt == TT_EMBEDDING_BACKWARD_ADAGRAD ? msq[bags[c0 + o]] : 0.05f;
                    if (opt == TT_EMBEDDING_BACKWARD_ADAGRAD) {
                        stg[c] = tt_cache_row_states(stg[c], mult, n);
                        for (int o = 0; o < n; o++) mult[o] = 0.05f / (sqrtf(mult[o]) + 1e-8f);
                    }
                    for (int lane = 0; lane < 32; lane++)
                        for (int d0 = 0; d0 < D; d0 += 32 * TT_CACHE_EPL) {
                            float x[TT_CACHE_EPL];
                            for (int e = 0; e < TT_CACHE_EPL; e++) {
                                const int d = d0 + e * 32 + lane;
                                x[e] = d < D && (opt != TT_EMBEDDING_BACKWARD_DENSE || c0 > 0) ? w[d] : 0.0f;
                            }
                            tt_cache_apply_chunk(opt, x, bags.data() + c0, mult, n, dY.data(), D, d0, lane, 32);
                            for (int e = 0; e < TT_CACHE_EPL; e++)
                                if (d0 + e * 32 + lane < D) w[d0 + e * 32 + lane] = x[e];
                        }
                }
            }
            const bool same = memcmp(W.data(), Wg.data(), W.size() * 4) == 0 && memcmp(st.data(), stg.data(), st.size() * 4) == 0 &&
                              memcmp(dW.data(), dWg.data(), dW.size() * 4) == 0;
            report(same, fmt("cached backward (%s, D %d): grouped per row in chunks of %d, 32 lanes = the sequential reference, bitwise (rows in ~40 bags)",
                             TT_EMBEDDING_BACKWARD_OPT_NAMES[opt], D, chunk));
            // version 4's order (parts of a stage over 8 warps, the parts' sum applied once; stages of `stage4` here, 1024
            // in the kernel): states bitwise, rows within fp32 rounding of the sequential reference
            for (int stage4 : {TT_CACHE_STAGE4, 7}) {
                std::vector<float> W4 = W0, st4 = st0, dW4((size_t)(C * D), 0.0f);
                for (auto& [c, bags] : runs) {
                    float* w = (opt == TT_EMBEDDING_BACKWARD_DENSE ? dW4.data() : W4.data()) + c * D;
                    for (size_t s0 = 0; s0 < bags.size(); s0 += (size_t)stage4) {
                        const int n = (int)std::min(bags.size() - s0, (size_t)stage4);
                        std::vector<float> mult(n);
                        for (int o = 0; o < n; o++) mult[o] = opt == TT_EMBEDDING_BACKWARD_ADAGRAD ? msq[bags[s0 + o]] : 0.05f;
                        if (opt == TT_EMBEDDING_BACKWARD_ADAGRAD) {
                            st4[c] = tt_cache_row_states(st4[c], mult.data(), n);
                            for (int o = 0; o < n; o++) mult[o] = 0.05f / (sqrtf(mult[o]) + 1e-8f);
                        }
                        for (int d0 = 0; d0 < D; d0 += 32 * TT_CACHE_EPL) {
                            float part[TT_CACHE_WARPS4][32 * TT_CACHE_EPL] = {};
                            for (int q = 0; q < TT_CACHE_WARPS4; q++)
                                for (int lane = 0; lane < 32; lane++) {
                                    float acc[TT_CACHE_EPL] = {};
                                    tt_cache_part_sum(opt, acc, bags.data() + s0, mult.data(), n * q / TT_CACHE_WARPS4, n * (q + 1) / TT_CACHE_WARPS4,
                                                      dY.data(), D, d0, lane, 32);
                                    for (int e = 0; e < TT_CACHE_EPL; e++) part[q][e * 32 + lane] = acc[e];
                                }
                            for (int t = 0; t < 32 * TT_CACHE_EPL && d0 + t < D; t++) {
                                float sum = 0.0f;
                                for (int q = 0; q < TT_CACHE_WARPS4; q++) sum += part[q][t];
                                w[d0 + t] = opt == TT_EMBEDDING_BACKWARD_DENSE ? (s0 > 0 ? w[d0 + t] : 0.0f) + sum : w[d0 + t] - sum;
                            }
                        }
                    }
                }
                const std::vector<float>& ref4 = opt == TT_EMBEDDING_BACKWARD_DENSE ? dW : W;
                const std::vector<float>& got4 = opt == TT_EMBEDDING_BACKWARD_DENSE ? dW4 : W4;
                int64_t off = 0;
                for (size_t e = 0; e < ref4.size(); e++) off += !tt_cache_close(got4[e], ref4[e], mag[e], true);
                report(off == 0 && memcmp(st.data(), st4.data(), st.size() * 4) == 0,
                       fmt("version 4's order (%s, D %d, stages of %d): rows within the GPU check's tolerance of the sequential reference, "
                           "states bitwise", TT_EMBEDDING_BACKWARD_OPT_NAMES[opt], D, stage4), fmt("%lld elements off", (long long)off));
            }
            if (opt == TT_EMBEDDING_BACKWARD_ADAGRAD && D == 64) {
                // FBTT's rowwise kernel: every bag of row 2 reads the row, then all write (the race): the result differs
                std::vector<float> Wr = W0, str = st0;
                std::vector<float> row(W0.begin() + 2 * D, W0.begin() + 3 * D);
                for (int64_t b = 0; b < nbags; b++)
                    for (int64_t n = offsets[b]; n < offsets[b + 1]; n++) {
                        if (crow[n] != 2) continue;
                        str[2] += msq[b];
                        const float mult = 0.05f / (sqrtf(str[2]) + 1e-8f);
                        for (int d = 0; d < D; d++) Wr[2 * D + d] = fmaf(-mult, dY[b * D + d], row[d]);   // each from the stale row
                    }
                report(memcmp(Wr.data() + 2 * D, W.data() + 2 * D, D * 4) != 0,
                       "FBTT's racy rowwise Adagrad (all bags read row 2 before any writes) differs from the reference: the case can fail");
            }
        }
    }
    // 6. version 4's order on one hot row (in all 1,500 bags, two stages of 1,024): the GPU check's tolerance passes it,
    //    fails it with one occurrence dropped; for dense, the tolerance without the magnitude term fails the right answer
    //    (the bags' gradients cancel in pairs: a sum near 0 of 1,500 terms, reordered)
    {
        const int D = 64, nbags = 1500;
        Rng rng(29);
        std::vector<float> dY = make_random_floats((size_t)nbags * D, rng);
        const std::vector<float> W0 = make_random_floats(D, rng);
        for (int64_t i = (int64_t)(nbags / 2) * D; i < (int64_t)nbags * D; i++) dY[i] = -dY[i - (int64_t)(nbags / 2) * D];   // dense: sums cancel
        std::vector<int64_t> offsets(nbags + 1);
        for (int b = 0; b <= nbags; b++) offsets[b] = b;
        std::vector<float> msq(nbags);
        for (int b = 0; b < nbags; b++) msq[b] = tt_cache_mean_square(dY.data() + (int64_t)b * D, D);
        for (int opt : {TT_EMBEDDING_BACKWARD_DENSE, TT_EMBEDDING_BACKWARD_SGD, TT_EMBEDDING_BACKWARD_ADAGRAD}) {
            int64_t off[3] = {}, plain_off = 0;        // the right parts; one occurrence dropped; (dense) without mag
            int64_t off5[2] = {};                      // version 5's order (SGD, dense)
            for (int drop : {0, 1}) {
                std::vector<int> crow(nbags, 0);
                std::vector<float> W = W0, st = {0.5f}, dW(D, 0.0f), mag(D, 0.0f);
                tt_cache_backward_cpu(opt, 0.05f, 1e-8f, W.data(), st.data(), dW.data(), crow.data(), offsets.data(), nbags, dY.data(), D, 1, mag.data());
                std::vector<int> bags;
                for (int b = drop ? 1 : 0; b < nbags; b++) bags.push_back(b);
                std::vector<float> w4 = opt == TT_EMBEDDING_BACKWARD_DENSE ? std::vector<float>(D, 0.0f) : W0;
                float s4 = 0.5f;
                for (size_t s0 = 0; s0 < bags.size(); s0 += TT_CACHE_STAGE4) {
                    const int n = (int)std::min(bags.size() - s0, (size_t)TT_CACHE_STAGE4);
                    std::vector<float> mult(n);
                    for (int o = 0; o < n; o++) mult[o] = opt == TT_EMBEDDING_BACKWARD_ADAGRAD ? msq[bags[s0 + o]] : 0.05f;
                    if (opt == TT_EMBEDDING_BACKWARD_ADAGRAD) {
                        s4 = tt_cache_row_states(s4, mult.data(), n);
                        for (int o = 0; o < n; o++) mult[o] = 0.05f / (sqrtf(mult[o]) + 1e-8f);
                    }
                    for (int lane = 0; lane < 32; lane++) {
                        float sum[TT_CACHE_EPL] = {};
                        for (int q = 0; q < TT_CACHE_WARPS4; q++) {
                            float acc[TT_CACHE_EPL] = {};
                            tt_cache_part_sum(opt, acc, bags.data() + s0, mult.data(), n * q / TT_CACHE_WARPS4, n * (q + 1) / TT_CACHE_WARPS4, dY.data(),
                                              D, 0, lane, 32);
                            for (int e = 0; e < TT_CACHE_EPL; e++) sum[e] += acc[e];
                        }
                        for (int e = 0; e < TT_CACHE_EPL; e++)
                            if (e * 32 + lane < D) w4[e * 32 + lane] = opt == TT_EMBEDDING_BACKWARD_DENSE ? w4[e * 32 + lane] + sum[e] : w4[e * 32 + lane] - sum[e];
                    }
                }
                const std::vector<float>& ref = opt == TT_EMBEDDING_BACKWARD_DENSE ? dW : W;
                for (int d = 0; d < D; d++) {
                    off[drop] += !tt_cache_close(w4[d], ref[d], mag[d], true);
                    if (!drop) plain_off += !tt_cache_close(w4[d], ref[d], mag[d], false);
                }
                if (opt == TT_EMBEDDING_BACKWARD_ADAGRAD) continue;
                // version 5's order: pieces of TT_CACHE_SEG5 sorted positions (the row starts at position 0), each a sum in
                // order, the pieces' sums added in order and applied once
                for (int d = 0; d < D; d++) {
                    float total = 0.0f;
                    for (size_t p0 = 0; p0 < bags.size(); p0 += TT_CACHE_SEG5) {
                        float acc = 0.0f;
                        for (size_t o = p0; o < std::min(bags.size(), p0 + TT_CACHE_SEG5); o++) {
                            const float g = dY[(int64_t)bags[o] * D + d];
                            acc = opt == TT_EMBEDDING_BACKWARD_DENSE ? acc + g : fmaf(0.05f, g, acc);
                        }
                        total = p0 == 0 ? acc : total + acc;
                    }
                    off5[drop] += !tt_cache_close(opt == TT_EMBEDDING_BACKWARD_DENSE ? total : W0[d] - total, ref[d], mag[d], true);
                }
            }
            report(off[0] == 0 && off[1] > D / 2, fmt("version 4's order on a row in 1,500 bags (%s): within the check's tolerance; one occurrence "
                                                   "dropped fails %lld of %d elements", TT_EMBEDDING_BACKWARD_OPT_NAMES[opt], (long long)off[1], D),
                   fmt("%lld elements off", (long long)off[0]));
            if (opt != TT_EMBEDDING_BACKWARD_ADAGRAD)
                report(off5[0] == 0 && off5[1] > D / 2, fmt("version 5's order (pieces of %d) on the same row (%s): within the check's tolerance; one "
                                                         "occurrence dropped fails %lld of %d elements", TT_CACHE_SEG5,
                                                         TT_EMBEDDING_BACKWARD_OPT_NAMES[opt], (long long)off5[1], D),
                       fmt("%lld elements off", (long long)off5[0]));
            if (opt == TT_EMBEDDING_BACKWARD_DENSE)
                report(plain_off > 0, fmt("dense: without the magnitude term the tolerance fails the reordered sum (%lld of %d elements)",
                                          (long long)plain_off, D), "the reordered sum passed the plain tolerance: the magnitude term is not shown to be needed");
        }
    }
    // 7. version 7's route: populate's hit estimate (kept share less the rows counted once) against the hit rate of the
    //    next step of the same map, with FBTT's 4 warm-up steps of 512 bags of 20; the kept share alone misses uniform
    {
        struct Case { double alpha; int64_t E, C; };
        for (const Case& cs : {Case{0.0, 1000000, 100000}, Case{1.05, 1000000, 100000}, Case{1.15, 1000000, 100000}, Case{1.15, 1000000, 100},
                               Case{1.3, 100000, 30}}) {
            Rng rng(71);
            const int64_t nbags = 512, L = 20, steps = 4, per = nbags * L;
            const std::vector<int64_t> ids = make_bag_indices((steps + 1) * nbags, L, cs.E, cs.alpha, rng, true);
            std::unordered_map<int64_t, int64_t> cnt;
            for (int64_t j = 0; j < steps * per; j++) cnt[ids[j]]++;
            std::vector<std::pair<int64_t, int64_t>> by(cnt.begin(), cnt.end());   // (row, count), most counted first
            std::stable_sort(by.begin(), by.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
            std::unordered_set<int64_t> kept;
            int64_t kept_counts = 0, once = 0;
            for (size_t n = 0; n < by.size(); n++) {
                if ((int64_t)n < cs.C) { kept.insert(by[n].first); kept_counts += by[n].second; }
                once += by[n].second == 1;
            }
            int64_t hits = 0;
            for (int64_t j = steps * per; j < (steps + 1) * per; j++) hits += kept.count(ids[j]);
            const double actual = (double)hits / per, est = tt_cache_expected_hit(kept_counts, steps * per, once),
                         share = (double)kept_counts / (steps * per);
            const bool ok = std::fabs(est - actual) <= 0.03 && (cs.alpha > 0.0 || share - actual > 0.9);
            report(ok, fmt("version 7's hit estimate, alpha %g, E %lld, C %lld: %.4f against the next step's %.4f (kept share alone %.4f)", cs.alpha,
                           (long long)cs.E, (long long)cs.C, est, actual, share),
                   fmt("estimate %.4f, actual %.4f, share %.4f", est, actual, share));
        }
    }
    return test_summary();
}
