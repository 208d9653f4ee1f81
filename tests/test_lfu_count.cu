// CPU tests of lfu_count (no GPU): the slot function against an independent implementation, the probe window
// and its wrap, drops in a full table, the sequential reference against a brute-force count, the GPU check
// (it accepts every insertion order's table and rejects each kind of broken one), and find.
#define NO_MAIN
#include "test_util.h"
#include "../dev/cuda/lfu_count.cu"

#include <map>
#include <random>

static LfuCountHostTable insert_all(uint64_t H, const std::vector<int64_t>& idx) {
    LfuCountHostTable t(H);
    lfu_count_cpu(t, idx.data(), (int64_t)idx.size());
    return t;
}

static std::string check(const LfuCountHostTable& t, const std::vector<int64_t>& idx) {
    return lfu_count_check_table(t.keys.data(), t.counts.data(), t.keys.size(), t.dropped,
                                 lfu_count_occurrences(idx.data(), (int64_t)idx.size()));
}

int main() {
    // 1. slot function: values from a separate Python implementation of fmix64 and (h >> 32) * H >> 32
    {
        struct { int64_t key; uint64_t H, slot; } cases[] = {
            {0, 11000000, 0}, {1, 11000000, 7748933}, {42, 11000000, 5544391}, {10999999, 11000000, 653270},
            {123456789012LL, 1000, 614}, {1, 1ull << 32, 3025583356ull}, {7, 1, 0}, {5, 3, 2}};
        std::string why;
        for (auto& c : cases)
            if (lfu_count_slot(c.key, c.H) != c.slot)
                why += "slot(" + std::to_string(c.key) + ", " + std::to_string(c.H) + ") = " + std::to_string(lfu_count_slot(c.key, c.H)) +
                       ", expected " + std::to_string(c.slot) + "; ";
        report(why.empty(), "slot function matches an independent fmix64 implementation", why);

        Rng rng(1);
        bool in_range = true;
        for (int i = 0; i < 100000; i++) {
            uint64_t H = (i % 4 == 0) ? (1ull << 32) : (uint64_t)rng.randint(1, 1 << 30);
            int64_t key = (int64_t)(rng.next() >> 1);
            in_range = in_range && lfu_count_slot(key, H) < H;
        }
        report(in_range, "slot < H for random keys and H in 1..2^32");

        std::vector<int> bucket(1000, 0);   // consecutive row ids spread evenly over the slots
        for (int64_t k = 0; k < 1000000; k++) bucket[lfu_count_slot(k, 1000)]++;
        auto mm = std::minmax_element(bucket.begin(), bucket.end());
        report(*mm.first > 850 && *mm.second < 1150, "consecutive keys spread evenly (1e6 keys, 1000 slots)",
               "bucket sizes " + std::to_string(*mm.first) + ".." + std::to_string(*mm.second));
    }

    // 2. the probe window: home, home+1, home+2, wrapping from H-1 to 0; the fourth key of a home is dropped
    {
        const uint64_t H = 7;
        std::vector<int64_t> k = lfu_count_keys_with_home(H - 1, H, 4);
        std::vector<int64_t> idx = {k[0], k[1], k[2], k[3], k[1], k[3], k[0], k[0]};
        LfuCountHostTable t = insert_all(H, idx);
        bool ok = t.keys[6] == k[0] && t.keys[0] == k[1] && t.keys[1] == k[2] && t.counts[6] == 3 && t.counts[0] == 2 &&
                  t.counts[1] == 1 && t.dropped == 2 && lfu_count_next(H - 1, H) == 0 && lfu_count_next(0, 1) == 0;
        report(ok, "probe window wraps from H-1 to 0 and a fourth key of one home is dropped (twice)");
        report(check(t, idx).empty(), "check accepts the wrapped window", check(t, idx));
    }

    // 3. full tables: with H <= 3 every window is the whole table, so the first H distinct keys stay
    for (uint64_t H : {1, 2, 3}) {
        std::vector<int64_t> idx = {10, 11, 10, 12, 13, 11, 14, 10, 13};
        LfuCountHostTable t = insert_all(H, idx);
        std::map<int64_t, int64_t> kept;
        for (uint64_t s = 0; s < H; s++) kept[t.keys[s]] = t.counts[s];
        std::map<int64_t, int64_t> want = {{10, 3}, {11, 2}, {12, 1}};
        while (want.size() > H) want.erase(std::prev(want.end()));
        int64_t want_dropped = 9 - (H >= 1 ? 3 : 0) - (H >= 2 ? 2 : 0) - (H >= 3 ? 1 : 0);
        report(kept == want && t.dropped == want_dropped && check(t, idx).empty(),
               "full table H=" + std::to_string(H) + ": the first H keys kept, the rest dropped",
               "dropped " + std::to_string(t.dropped) + " (want " + std::to_string(want_dropped) + ") " + check(t, idx));
    }

    // 4. the sequential reference against a brute-force count: exact multiset when nothing can be dropped,
    //    and with small tables every key kept with all its occurrences or dropped whole
    {
        std::string why_exact, why_small;
        for (int trial = 0; trial < 24; trial++) {
            Rng rng(100 + trial);
            int64_t B = rng.randint(1, 60), L = rng.randint(1, 25), E = rng.randint(L, 5000);
            std::vector<int64_t> idx = make_bag_indices(B, L, E, trial % 2 ? 0.0 : 1.15, rng);
            auto occ = lfu_count_occurrences(idx.data(), (int64_t)idx.size());
            LfuCountHostTable big = insert_all(1ull << 20, idx);
            std::map<int64_t, int64_t> got(occ.begin(), occ.end()), table;
            for (uint64_t s = 0; s < big.keys.size(); s++) if (big.keys[s] != LFU_COUNT_EMPTY) table[big.keys[s]] = big.counts[s];
            if (table != got || big.dropped != 0) why_exact += "trial " + std::to_string(trial) + " differs; ";
            uint64_t H = (uint64_t)rng.randint(1, std::max<int64_t>(2, (int64_t)occ.size()));
            LfuCountHostTable small = insert_all(H, idx);
            int64_t kept = 0;
            for (uint64_t s = 0; s < H; s++) if (small.keys[s] != LFU_COUNT_EMPTY) kept += small.counts[s];
            std::string c = check(small, idx);
            if (!c.empty() || kept + small.dropped != (int64_t)idx.size())
                why_small += "trial " + std::to_string(trial) + " H=" + std::to_string(H) + ": " + c + "; ";
        }
        report(why_exact.empty(), "sequential reference equals a brute-force count when no window fills (24 batches)", why_exact);
        report(why_small.empty(), "sequential reference with drops: every key kept whole or dropped whole (24 batches)", why_small);
    }

    // 5. any insertion order passes the check, and at least one order gives a different table than lookup order
    {
        std::string why;
        int differing = 0;
        for (int trial = 0; trial < 20; trial++) {
            Rng rng(200 + trial);
            std::vector<int64_t> idx = make_bag_indices(40, 9, 3000, 1.15, rng);
            uint64_t H = 60 + trial;
            LfuCountHostTable in_order = insert_all(H, idx);
            std::vector<int64_t> shuffled = idx;
            std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937_64(trial));
            LfuCountHostTable t = insert_all(H, shuffled);
            std::string c = check(t, idx);
            if (!c.empty()) why += "trial " + std::to_string(trial) + ": " + c + "; ";
            differing += t.keys != in_order.keys || t.dropped != in_order.dropped;
        }
        report(why.empty() && differing > 0, "check accepts the tables of shuffled insertion orders (" + std::to_string(differing) + " of 20 differ from lookup order)",
               why.empty() ? "no shuffled order changed the table: the case tests nothing" : why);
    }

    // 6. the check rejects each kind of broken table
    {
        const uint64_t H = 11;
        std::vector<int64_t> a = lfu_count_keys_with_home(4, H, 4), b = lfu_count_keys_with_home(9, H, 1, 1000);
        std::vector<int64_t> idx = {a[0], a[1], a[0], a[2], b[0], a[3], a[3], a[1]};   // a[3] dropped (window 4-6 full)
        LfuCountHostTable good = insert_all(H, idx);
        report(check(good, idx).empty() && good.dropped == 2, "check accepts the reference table", check(good, idx));
        struct Broken { const char* name; std::function<void(LfuCountHostTable&)> apply; const char* expect; };
        const int64_t other = lfu_count_keys_with_home(2, H, 1, 5000)[0];
        std::vector<Broken> broken = {
            {"a count off by one", [](LfuCountHostTable& t) { t.counts[4]++; }, "expected its"},
            {"a count in an empty slot", [](LfuCountHostTable& t) { t.counts[0] = 1; }, "empty slot"},
            {"a key that was never looked up", [&](LfuCountHostTable& t) { t.keys[2] = other; t.counts[2] = 1; }, "never looked up"},
            {"a key stored twice", [&](LfuCountHostTable& t) { t.keys[7] = a[0]; t.counts[7] = 2; }, "also at slot"},
            {"a key outside its window", [&](LfuCountHostTable& t) { std::swap(t.keys[9], t.keys[2]); std::swap(t.counts[9], t.counts[2]); }, "outside its probe window"},
            {"a key past an empty slot", [&](LfuCountHostTable& t) { t.keys[4] = LFU_COUNT_EMPTY; t.counts[4] = 0; t.dropped += 2; }, "past the empty slot"},
            {"a missing key with room in its window", [&](LfuCountHostTable& t) { t.keys[9] = LFU_COUNT_EMPTY; t.counts[9] = 0; t.dropped += 1; }, "is missing"},
            {"a wrong dropped count", [](LfuCountHostTable& t) { t.dropped++; }, "dropped ="},
        };
        for (auto& x : broken) {
            LfuCountHostTable t = good;
            x.apply(t);
            std::string c = check(t, idx);
            report(c.find(x.expect) != std::string::npos, std::string("check rejects ") + x.name, "got '" + c + "'");
        }
    }

    // 7. find: kept keys at their slots; a missing key stops at the first empty slot (FBTT's find reads all three)
    {
        const uint64_t H = 13;
        std::vector<int64_t> a = lfu_count_keys_with_home(5, H, 4), c = lfu_count_keys_with_home(12, H, 2, 1000);
        std::vector<int64_t> idx = {a[0], a[1], c[0], a[2], a[3]};   // slots 5, 6, 12, 7; a[3] dropped
        LfuCountHostTable t = insert_all(H, idx);
        int p = -1;
        bool ok = true;
        for (uint64_t s = 0; s < H; s++)
            if (t.keys[s] != LFU_COUNT_EMPTY) ok = ok && lfu_count_find(t.keys.data(), H, t.keys[s]) == (int64_t)s;
        report(ok, "find returns the slot of every kept key");
        report(lfu_count_find(t.keys.data(), H, a[3], &p) == -1 && p == 3, "find: a dropped key (full window) is missing after 3 probes",
               "probes " + std::to_string(p));
        int64_t r = lfu_count_find(t.keys.data(), H, c[1], &p);   // window 12, 0, 1: 12 taken, 0 empty
        report(r == -1 && p == 2, "find stops at an empty slot (home taken, next empty: 2 probes)", "probes " + std::to_string(p));
        int64_t absent = lfu_count_keys_with_home(2, H, 1, 2000)[0];
        r = lfu_count_find(t.keys.data(), H, absent, &p);
        report(r == -1 && p == 1, "find stops at an empty home slot after 1 probe (FBTT's find: 3)", "probes " + std::to_string(p));
        report(lfu_count_find(t.keys.data(), H, LFU_COUNT_EMPTY, &p) == -1 && p == 0, "find(-1) does not match an empty slot");
    }

    // 8. row ids outside [0, E) are rejected (a negative id is the empty marker)
    {
        std::vector<int64_t> ok = {0, 5, 9}, neg = {0, -1, 3}, big = {0, 10};
        report(lfu_count_validate_keys(ok.data(), 3, 10).empty() &&
                   lfu_count_validate_keys(neg.data(), 3, 10).find("lookup 1 = -1 is outside") != std::string::npos &&
                   lfu_count_validate_keys(big.data(), 2, 10).find("lookup 1 = 10 is outside [0, E = 10)") != std::string::npos,
               "row ids outside [0, E) are rejected");
    }
    return test_summary();
}
