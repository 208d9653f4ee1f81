// CPU tests of common.h's host helpers (no GPU): the validator, the random generators, the .npy writer.
#include "../dev/cuda/common.h"

static int failures = 0;
static void report(bool ok, const std::string& name, const std::string& why = "") {
    printf("%s %s%s%s\n", ok ? "PASS" : "FAIL", name.c_str(), ok ? "" : ": ", ok ? "" : why.c_str());
    if (!ok) failures++;
}

static float poisoned_float() {  // what common.h's poison() leaves in a float: all bytes 0xFF
    float f;
    memset(&f, 0xFF, sizeof f);
    return f;
}

int main() {
    // ---- validator: catches NaN, an unwritten (poisoned) element, an out-of-tolerance element,
    //      an infinity; passes values within tolerance; counts and locates failures
    {
        std::vector<float> ref = {1.0f, -2.0f, 3.0f, 0.0f, 1e6f, 5.0f};
        std::vector<float> good = {1.0f + 1e-7f, -2.0f, 3.0f - 2e-6f, 5e-7f, 1e6f + 0.5f, 5.0f};
        ValidateStats s = compare_arrays(good.data(), ref.data(), ref.size(), 1e-6f, 1e-6f);
        report(s.failures == 0, "validate passes values within atol + rtol*|ref|", std::to_string(s.failures) + " failures");

        std::vector<float> nan = good; nan[2] = NAN;
        s = compare_arrays(nan.data(), ref.data(), ref.size(), 1e-6f, 1e-6f);
        report(s.failures == 1 && s.nonfinite == 1 && s.first_bad == std::vector<size_t>{2}, "validate catches a NaN");

        std::vector<float> unwritten = good; unwritten[4] = poisoned_float();
        s = compare_arrays(unwritten.data(), ref.data(), ref.size(), 1e-6f, 1e-6f);
        report(std::isnan(poisoned_float()) && s.failures == 1 && s.first_bad[0] == 4, "validate catches an unwritten (poisoned) element");

        std::vector<float> off = good; off[1] = -2.0f + 1e-4f; off[5] = 5.1f;
        s = compare_arrays(off.data(), ref.data(), ref.size(), 1e-6f, 1e-6f);
        report(s.failures == 2 && s.first_bad == std::vector<size_t>{1, 5} && fabs(s.max_abs - 0.5) < 1e-6,  // 0.5: the 1e6 element, within its tolerance
               "validate catches out-of-tolerance elements and reports the max error");

        std::vector<float> inf = good; inf[0] = INFINITY;
        s = compare_arrays(inf.data(), ref.data(), ref.size(), 1e30f, 1.0f);
        report(s.failures == 1, "validate fails an infinity however loose the tolerance");

        // atol = rtol = 0 is an exact comparison; a reference NaN must be matched by a NaN
        std::vector<float> r2 = {NAN, 1.0f}, g2 = {NAN, 1.0f}, g3 = {0.0f, 1.0f};
        report(compare_arrays(g2.data(), r2.data(), 2, 0, 0).failures == 0 && compare_arrays(g3.data(), r2.data(), 2, 0, 0).failures == 1,
               "validate matches non-finite references exactly");

        std::vector<float> many(100, 7.0f), ref_many(100, 1.0f);
        s = compare_arrays(many.data(), ref_many.data(), 100, 0.1f, 0.1f);
        report(s.failures == 100 && s.first_bad.size() == 5, "validate counts every failure and lists the first five");
        report(!validate_host("demo", many.data(), ref_many.data(), 100, 0.1f, 0.1f) &&
                   validate_host("demo", ref_many.data(), ref_many.data(), 100, 0.0f, 0.0f),
               "validate_host returns pass/fail instead of exiting");
    }

    // ---- bf16 conversion rounds to nearest even on the host
    {
        float x = 1.0f + 1.0f / 256.0f + 1.0f / 512.0f;   // between two bf16 values: 1+2^-8+2^-9 -> 1+2^-7
        float back = to_float(from_float<__nv_bfloat16>(x));
        report(back == 1.0f + 1.0f / 128.0f, "bf16 round-trip rounds to nearest", std::to_string(back));
    }

    // ---- Rng: reproducible, in range, seeds differ
    {
        Rng a(7), b(7), c(8);
        bool same = true, differ = false, in_range = true;
        for (int i = 0; i < 1000; i++) {
            uint64_t x = a.next(), y = b.next(), z = c.next();
            same = same && x == y;
            differ = differ || x != z;
        }
        Rng r(1);
        double mean = 0;
        for (int i = 0; i < 100000; i++) {
            float u = r.uniform(-1, 1);
            int64_t k = r.randint(3, 10);
            in_range = in_range && u >= -1 && u < 1 && k >= 3 && k < 10;
            mean += u;
        }
        mean /= 100000;
        report(same && differ, "Rng is reproducible per seed and differs across seeds");
        report(in_range && fabs(mean) < 0.01, "Rng uniform/randint stay in range, uniform mean near 0", std::to_string(mean));
    }

    // ---- Zipf sampler: P(1) = 1/zeta(a); at a = 2, zeta(2) = pi^2/6, so P(1) = 0.6079
    {
        Rng r(3);
        int n = 200000, ones = 0, twos = 0;
        for (int i = 0; i < n; i++) { int64_t k = r.zipf(2.0); ones += k == 1; twos += k == 2; }
        double p1 = (double)ones / n, p2 = (double)twos / n;
        report(fabs(p1 - 0.6079) < 0.005 && fabs(p2 - 0.6079 / 4) < 0.004, "Rng::zipf(2) matches 1/zeta(2) and 1/(4 zeta(2))",
               "P(1)=" + std::to_string(p1) + " P(2)=" + std::to_string(p2));
    }

    // ---- bag indices: every bag has L distinct rows in [0, E) under Zipf; uniform stays in range;
    //      same seed, same bags
    {
        Rng r1(11), r2(11);
        int64_t bags = 300, L = 20, E = 1000;
        std::vector<int64_t> z = make_bag_indices(bags, L, E, 1.15, r1), z2 = make_bag_indices(bags, L, E, 1.15, r2);
        bool distinct = true, range = true;
        for (int64_t b = 0; b < bags; b++) {
            std::vector<int64_t> bag(z.begin() + b * L, z.begin() + (b + 1) * L);
            for (auto x : bag) range = range && x >= 0 && x < E;
            std::sort(bag.begin(), bag.end());
            distinct = distinct && std::unique(bag.begin(), bag.end()) == bag.end();
        }
        report(distinct && range && z == z2, "Zipf bags: L distinct rows per bag, in range, reproducible");
        Rng r3(12);
        std::vector<int64_t> u = make_bag_indices(bags, L, E, 0.0, r3);
        bool urange = true;
        for (auto x : u) urange = urange && x >= 0 && x < E;
        report(urange && u.size() == (size_t)(bags * L), "uniform bags stay in [0, E)");
        // with alpha = 3 almost every draw is tiny, yet the map scatters the hot rows over [0, E)
        Rng r4(13);
        std::vector<int64_t> hot = make_bag_indices(50, 3, 1000000, 3.0, r4);
        int64_t big = 0;
        for (auto x : hot) big += x >= 1000;
        report(big > (int64_t)hot.size() / 2, "Zipf hot rows are scattered by the random map");
    }

    // ---- .npy writer: magic, version, 64-byte aligned header, shape, payload
    {
        std::string dir = "build/tests/npy_test";
        std::vector<float> data = {1.5f, -2.0f, 3.25f, 4.0f, 5.0f, 6.0f};
        write_npy(dir, "arr", data.data(), {2, 3});
        FILE* f = fopen((dir + "/arr.npy").c_str(), "rb");
        bool ok = f != nullptr;
        std::string why;
        if (f) {
            unsigned char head[10];
            ok = fread(head, 1, 10, f) == 10 && memcmp(head, "\x93NUMPY\x01\x00", 8) == 0;
            unsigned hlen = head[8] | (head[9] << 8);
            std::string header(hlen, ' ');
            ok = ok && fread(&header[0], 1, hlen, f) == hlen && (10 + hlen) % 64 == 0 &&
                 header.find("'descr': '<f4'") != std::string::npos && header.find("'shape': (2, 3)") != std::string::npos &&
                 header.back() == '\n';
            std::vector<float> back(6);
            ok = ok && fread(back.data(), sizeof(float), 6, f) == 6 && back == data;
            fclose(f);
            if (!ok) why = "header: " + header;
        }
        report(ok, ".npy writer produces a valid version-1.0 file", why);
        std::vector<int64_t> idx = {1, 2, 3};
        write_npy(dir, "idx", idx.data(), {3});
        f = fopen((dir + "/idx.npy").c_str(), "rb");
        char buf[128] = {};
        bool ok1 = f && fread(buf, 1, 127, f) > 0 && std::string(buf + 10).find("'shape': (3,)") != std::string::npos &&
                   std::string(buf + 10).find("'<i8'") != std::string::npos;
        if (f) fclose(f);
        report(ok1, ".npy writer: 1-d int64 shape is written as (3,)");
    }

    // ---- timing summary: median of an even and an odd count
    {
        Timing t = summarize({3, 1, 2});
        Timing u = summarize({4, 1, 3, 2});
        report(t.median == 2 && t.min == 1 && t.max == 3 && u.median == 2.5, "summarize gives median/min/max");
    }
    return failures ? 1 : 0;
}
