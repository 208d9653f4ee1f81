// CPU tests of common.h's host helpers (no GPU): the validator, the random generators, the .npy writer.
#include "test_util.h"
#include "../dev/cuda/common.h"
#include <sys/wait.h>
#include <unistd.h>

// the exit status of f() run in a child process (-1: it returned instead of exiting), its output hidden
template <class F>
static int exit_status_of(F f) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stdout) || !freopen("/dev/null", "w", stderr)) _exit(254);
        f();
        _exit(255);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) && WEXITSTATUS(st) != 255 ? WEXITSTATUS(st) : -1;
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
        report(s.failures == 0, "validate passes values within atol + rtol*|ref|", std::to_string(s.failures) + " test_failures");

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

        // an infinite reference must be matched exactly; a NaN in the reference fails whatever the result
        // (a NaN-poisoned element must not pass where a broken reference is NaN), and is counted
        std::vector<float> r2 = {INFINITY, 1.0f}, g2 = {INFINITY, 1.0f}, g3 = {-INFINITY, 1.0f};
        report(compare_arrays(g2.data(), r2.data(), 2, 0, 0).failures == 0 && compare_arrays(g3.data(), r2.data(), 2, 0, 0).failures == 1,
               "validate matches infinite references exactly");
        std::vector<float> rn = {NAN, 1.0f}, gn = {poisoned_float(), 1.0f};
        s = compare_arrays(gn.data(), rn.data(), 2, 1e30f, 1.0f);
        report(s.failures == 1 && s.ref_nan == 1 && s.first_bad == std::vector<size_t>{0}, "validate fails a NaN reference, even against a NaN result");

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

    // ---- Zipf in bounded time for every alpha the flags accept (they refuse only non-finite and fp32
    //      overflow): steep (1e30, 60, 10, 5) and flat (1.000001) exponents, a million draws each
    {
        bool ok = true;
        std::string why;
        for (double a : {1.000001, 1.0001, 5.0, 10.0, 53.0, 60.0, 1e30}) {
            Rng r(5);
            clock_t t0 = clock();
            int64_t ones = 0, bad = 0;
            for (int i = 0; i < 1000000; i++) { int64_t k = r.zipf(a); ones += k == 1; bad += k < 1 || k > (int64_t)9e18; }
            double sec = (double)(clock() - t0) / CLOCKS_PER_SEC;
            // P(1) = 1/zeta(a): 1 - 2^-a about for a steep a; tiny for a near 1 (a heavy tail)
            bool p_ok = a >= 53 ? ones == 1000000 : (a >= 5 ? ones > 950000 : ones < 100000);
            if (sec > 20 || bad || !p_ok) { ok = false; why += " a=" + std::to_string(a) + ": " + std::to_string(sec) + " s, P(1)=" + std::to_string(ones / 1e6); }
        }
        report(ok, "Rng::zipf finishes fast and stays in [1, 9e18] for alpha 1.000001 .. 1e30", why);

        // the same draws as the plain rejection loop at the bench's alpha (the bench inputs do not change)
        Rng r1(9), r2(9);
        bool same = true;
        for (int i = 0; i < 100000 && same; i++) {
            int64_t k = r1.zipf(1.15);
            const double am1 = 1.15 - 1.0, b = pow(2.0, am1);
            int64_t plain = 0;
            while (!plain) {
                double U = 1.0 - r2.uniform01(), V = r2.uniform01(), X = floor(pow(U, -1.0 / am1));
                if (X > 9.0e18 || X < 1.0) continue;
                double T = pow(1.0 + 1.0 / X, am1);
                if (V * X * (T - 1.0) / (b - 1.0) <= T / b) plain = (int64_t)X;
            }
            same = k == plain;
        }
        report(same, "Rng::zipf(1.15) gives the plain Devroye loop's draws");

        // steep alpha with distinct rows: bounded (the completion step), L distinct rows per bag
        bool bags_ok = true;
        for (double a : {5.0, 10.0, 1e30, 1.000001}) {
            Rng r(21);
            clock_t t0 = clock();
            std::vector<int64_t> z = make_bag_indices(2000, 20, 100000, a, r);
            double sec = (double)(clock() - t0) / CLOCKS_PER_SEC;
            for (int64_t b = 0; b < 2000 && bags_ok; b++) {
                std::vector<int64_t> bag(z.begin() + b * 20, z.begin() + (b + 1) * 20);
                std::sort(bag.begin(), bag.end());
                bags_ok = std::unique(bag.begin(), bag.end()) == bag.end() && bag.front() >= 0 && bag.back() < 100000;
            }
            bags_ok = bags_ok && sec < 20;
        }
        report(bags_ok, "distinct Zipf bags at alpha 5, 10, 1e30, 1.000001: fast, L distinct rows each");

        // without distinct (and where E < L) bags repeat rows; E < L is legal
        Rng r3(22), r4(22);
        std::vector<int64_t> rep = make_bag_indices(500, 20, 100000, 3.0, r3, false), small = make_bag_indices(500, 7, 2, 1.15, r4);
        int64_t repeats = 0;
        for (int64_t b = 0; b < 500; b++) {
            std::vector<int64_t> bag(rep.begin() + b * 20, rep.begin() + (b + 1) * 20);
            std::sort(bag.begin(), bag.end());
            repeats += std::unique(bag.begin(), bag.end()) != bag.end();
        }
        bool small_ok = small.size() == 3500;
        for (auto x : small) small_ok = small_ok && (x == 0 || x == 1);
        report(repeats > 400 && small_ok, "bags with repeats: alpha 3 without distinct repeats rows; E = 2 < L = 7 draws in [0, 2)",
               std::to_string(repeats) + " of 500 bags repeat");
    }

    // ---- checked sizes and grids (the refusals exit 2: tests/cli_cases.txt runs them)
    {
        report(mul64(3037000499LL, 3037000499LL, "x") == 9223372030926249001LL && add64(INT64_MAX - 1, 1, "y") == INT64_MAX &&
                   grid_x(INT32_MAX, "g") == (unsigned)INT32_MAX && grid_y(65535, "g") == 65535u,
               "mul64/add64/grid_x/grid_y pass values at their limits");
        report(host_available_bytes() > 0, "host_available_bytes reads MemAvailable from /proc/meminfo");
    }

    // ---- version selection: a named version that cannot run exits 2; `all` skips, and exits 2 when none can
    {
        Cli cli("demo", "", 3, 1);
        auto skip = [](int k) { return k == 2 ? std::string("version 2 needs an even D") : std::string(); };
        auto none = [](int) { return std::string("never"); };
        cli.kernels = {2};
        int named = exit_status_of([&] { select_versions(cli, skip, false); });
        cli.kernels = {1, 2, 3}; cli.all = true;
        std::vector<int> run = select_versions(cli, skip, false);
        int nothing = exit_status_of([&] { select_versions(cli, none, false); });
        report(named == 2 && nothing == 2 && run == std::vector<int>{1, 3},
               "select_versions: a named version that cannot run exits 2; all runs the rest, exits 2 when none can",
               "named " + std::to_string(named) + ", none " + std::to_string(nothing));
        report(exit_status_of([] { mul64(INT64_MAX / 2, 3, "x"); }) == 2 && exit_status_of([] { grid_x((int64_t)INT32_MAX + 1, "g"); }) == 2 &&
                   exit_status_of([] { grid_y(65536, "g"); }) == 2 && exit_status_of([] { require_host_memory(1e18, "x"); }) == 2,
               "mul64, grid_x, grid_y and require_host_memory exit 2 past their limits");
        // a dump that fails after a failed check keeps the check's exit 1
        int after_fail = exit_status_of([] { last_run_rc() = EXIT_CHECK_FAILED; float x = 0; write_npy("/proc/no_such_dir", "x", &x, {1}); });
        int after_pass = exit_status_of([] { float x = 0; write_npy("/proc/no_such_dir", "x", &x, {1}); });
        report(after_fail == 1 && after_pass == 2, "a failed dump exits 1 after a failed check, 2 otherwise",
               std::to_string(after_fail) + ", " + std::to_string(after_pass));
    }

    // ---- .npy reader: what the writer wrote comes back bit for bit, with its shape
    {
        std::string dir = "build/tests/npy_read";
        make_dir("build"); make_dir("build/tests"); make_dir(dir);
        std::vector<float> f = {1.5f, -0.0f, 3.25e-30f, NAN, 5.0f, 6.0f};
        std::vector<int64_t> i = {0, INT64_MAX, -7};
        write_npy(dir, "f", f.data(), {3, 2});
        write_npy(dir, "i", i.data(), {3});
        std::vector<float> f2; std::vector<int64_t> i2, sf, si;
        read_npy(dir, "f", f2, sf, 2);
        read_npy(dir, "i", i2, si, 1);
        bool same = f2.size() == 6 && memcmp(f2.data(), f.data(), 24) == 0 && i2 == i && sf == std::vector<int64_t>{3, 2} &&
                    si == std::vector<int64_t>{3};
        std::vector<float> none;
        report(same && !read_npy(dir, "missing", none, sf, 1, true), ".npy reader returns what the writer wrote (bits and shape); an optional file may be missing");
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
    return test_summary();
}
