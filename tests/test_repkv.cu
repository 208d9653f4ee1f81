// CPU tests of the repkv references (no GPU): the adjoint identity between forward and backward,
// and each reference against a second, independent formulation.
#define NO_MAIN
#include "test_util.h"
#include "../dev/cuda/repkv_forward.cu"
#include "../dev/cuda/repkv_backward.cu"

struct Shape { int B, T, NH, NKV, HD; };

static std::string shape_name(const Shape& s) {
    char buf[96];
    snprintf(buf, sizeof buf, "B%d,T%d,NH%d,NKV%d,HD%d", s.B, s.T, s.NH, s.NKV, s.HD);
    return buf;
}

// Random shapes with NH % NKV == 0, including rep = 1, rep = NH, odd HD and odd T.
static std::vector<Shape> random_shapes(int count, Rng& rng) {
    std::vector<Shape> shapes = {{1, 1, 1, 1, 1}, {2, 3, 4, 1, 5}, {1, 2, 6, 6, 3}, {3, 5, 12, 4, 7}};
    while ((int)shapes.size() < count) {
        int NKV = (int)rng.randint(1, 6), rep = (int)rng.randint(1, 7);
        shapes.push_back({(int)rng.randint(1, 4), (int)rng.randint(1, 9), NKV * rep, NKV, (int)rng.randint(1, 40)});
    }
    return shapes;
}

// Independent forward: the source column of every output column, built from the head tables
// (which input head feeds output slot (part, h)) rather than from the index arithmetic.
static std::vector<float> forward_by_column_map(const std::vector<float>& inp, const Shape& s) {
    const int C_in = (s.NH + 2 * s.NKV) * s.HD, C_out = 3 * s.NH * s.HD, rep = s.NH / s.NKV;
    std::vector<int> src_col(C_out);
    int col = 0;
    for (int part = 0; part < 3; part++)
        for (int h = 0; h < s.NH; h++) {
            int head = part == 0 ? h : (part == 1 ? s.NH : s.NH + s.NKV) + h / rep;
            for (int d = 0; d < s.HD; d++) src_col[col++] = head * s.HD + d;
        }
    std::vector<float> out((size_t)s.B * s.T * C_out);
    for (int row = 0; row < s.B * s.T; row++)
        for (int c = 0; c < C_out; c++) out[(size_t)row * C_out + c] = inp[(size_t)row * C_in + src_col[c]];
    return out;
}

// Independent backward: scatter-add every dout element into the input column it was copied from
// (the transpose of the forward's gather), in double.
static std::vector<float> backward_by_scatter(const std::vector<float>& dout, const Shape& s) {
    const int C_in = (s.NH + 2 * s.NKV) * s.HD, C_out = 3 * s.NH * s.HD, rep = s.NH / s.NKV;
    std::vector<double> acc((size_t)s.B * s.T * C_in, 0.0);
    for (int row = 0; row < s.B * s.T; row++)
        for (int c = 0; c < C_out; c++) {
            int part = c / (s.NH * s.HD), h = (c / s.HD) % s.NH, d = c % s.HD;
            int head = part == 0 ? h : s.NH + (part - 1) * s.NKV + h / rep;
            acc[(size_t)row * C_in + head * s.HD + d] += dout[(size_t)row * C_out + c];
        }
    return std::vector<float>(acc.begin(), acc.end());
}

static size_t input_size(const Shape& s) { return (size_t)s.B * s.T * (s.NH + 2 * s.NKV) * s.HD; }
static size_t output_size(const Shape& s) { return (size_t)s.B * s.T * 3 * s.NH * s.HD; }

// Runs `check` on every shape; the first non-empty answer, prefixed with its shape, is the reason for a failure.
template <typename Check>
static std::string first_failure(const std::vector<Shape>& shapes, Check check) {
    for (const Shape& s : shapes) {
        std::string why = check(s);
        if (!why.empty()) return shape_name(s) + ": " + why;
    }
    return "";
}

int main() {
    Rng rng(2026);
    std::vector<Shape> shapes = random_shapes(40, rng);

    // 1. adjoint identity <fwd(x), y> == <x, bwd(y)> over many shapes
    std::string why = first_failure(shapes, [&](const Shape& s) -> std::string {
        std::vector<float> x = make_random_floats(input_size(s), rng), y = make_random_floats(output_size(s), rng);
        std::vector<float> fx(y.size()), by(x.size());
        repkv_forward_cpu(fx.data(), x.data(), s.B, s.T, s.NH, s.NKV, s.HD);
        repkv_backward_cpu(by.data(), y.data(), s.B, s.T, s.NH, s.NKV, s.HD);
        double lhs = 0, rhs = 0, scale = 0;
        for (size_t i = 0; i < y.size(); i++) { lhs += (double)fx[i] * y[i]; scale += fabs((double)fx[i] * y[i]); }
        for (size_t i = 0; i < x.size(); i++) rhs += (double)x[i] * by[i];
        // by[] is rounded to float once per element: the two sides agree to ~1e-7 of the sum of |terms|
        if (fabs(lhs - rhs) <= 1e-6 * scale + 1e-12) return "";
        return "<fwd(x),y>=" + std::to_string(lhs) + " <x,bwd(y)>=" + std::to_string(rhs);
    });
    report(why.empty(), "repkv adjoint identity over " + std::to_string(shapes.size()) + " random shapes", why);

    // 2. the forward reference against the column-map formulation (exact: both are copies)
    why = first_failure(shapes, [&](const Shape& s) -> std::string {
        std::vector<float> x = make_random_floats(input_size(s), rng), out(output_size(s));
        repkv_forward_cpu(out.data(), x.data(), s.B, s.T, s.NH, s.NKV, s.HD);
        return memcmp(out.data(), forward_by_column_map(x, s).data(), out.size() * sizeof(float)) == 0 ? "" : "differs";
    });
    report(why.empty(), "repkv_forward_cpu equals the column-map gather", why);

    // 3. the backward reference against the scatter-add formulation
    why = first_failure(shapes, [&](const Shape& s) -> std::string {
        std::vector<float> y = make_random_floats(output_size(s), rng), dinp(input_size(s));
        repkv_backward_cpu(dinp.data(), y.data(), s.B, s.T, s.NH, s.NKV, s.HD);
        std::vector<float> alt = backward_by_scatter(y, s);
        ValidateStats st = compare_arrays(dinp.data(), alt.data(), dinp.size(), 0.0f, 0.0f);  // both round a double sum once
        return st.failures ? std::to_string(st.failures) + " elements differ" : "";
    });
    report(why.empty(), "repkv_backward_cpu equals the scatter-add transpose", why);

    // 4. the backward reference is not trivially zero or a copy: a hand-checked element
    {
        Shape s = {1, 1, 4, 2, 1};  // rep 2: K head 0 <- dout K heads 0,1
        std::vector<float> dout = {1, 2, 3, 4, 10, 20, 30, 40, 100, 200, 300, 400}, dinp(8);
        repkv_backward_cpu(dinp.data(), dout.data(), s.B, s.T, s.NH, s.NKV, s.HD);
        std::vector<float> want = {1, 2, 3, 4, 30, 70, 300, 700};
        report(dinp == want, "repkv_backward_cpu on a hand-computed row", "got a different row");
        std::vector<float> inp = {1, 2, 3, 4, 5, 6, 7, 8}, out(12);
        repkv_forward_cpu(out.data(), inp.data(), s.B, s.T, s.NH, s.NKV, s.HD);
        std::vector<float> want_out = {1, 2, 3, 4, 5, 5, 6, 6, 7, 7, 8, 8};
        report(out == want_out, "repkv_forward_cpu on a hand-computed row", "got a different row");
    }

    // 5. the version preconditions
    report(repkv_backward_skip_reason(3, 32, 8, 130).find("HD (130)") != std::string::npos &&
               repkv_backward_skip_reason(3, 32, 8, 128).empty() &&
               repkv_backward_skip_reason(2, 32, 8, 13).empty(),
           "repkv_backward version preconditions", "a skip reason is wrong");
    report(repkv_forward_skip_reason(4, 32, 8, 6).find("HD (6)") != std::string::npos && repkv_forward_skip_reason(1, 32, 8, 6).empty(),
           "repkv_forward version preconditions", "a skip reason is wrong");

    // 6. replay: what --dump writes, --load reads back bit for bit (shape and values); the fixtures of
    //    tests/cli_cases.txt's --load cases (a good dump, a wrong shape, a NaN) are left in build/tests/fixtures
    {
        const std::string root = "build/tests/fixtures", ok_dir = root + "/repkv_ok";
        make_dir("build"); make_dir("build/tests"); make_dir(root); make_dir(ok_dir);
        RepkvShape fs{2, 3, 6, 2, 5};
        RepkvShape bs{3, 2, 4, 4, 7};
        const size_t f_in = (size_t)fs.B * fs.T * (fs.NH + 2 * fs.NKV) * fs.HD, b_out = (size_t)bs.B * bs.T * 3 * bs.NH * bs.HD;
        std::vector<float> x = make_random_floats(f_in, rng), fx((size_t)fs.B * fs.T * 3 * fs.NH * fs.HD);
        std::vector<float> y = make_random_floats(b_out, rng), by((size_t)bs.B * bs.T * (bs.NH + 2 * bs.NKV) * bs.HD);
        x[1] = -0.0f; x[2] = 1e-40f;                                   // a signed zero and a denormal survive too
        repkv_forward_cpu(fx.data(), x.data(), fs.B, fs.T, fs.NH, fs.NKV, fs.HD);
        repkv_backward_cpu(by.data(), y.data(), bs.B, bs.T, bs.NH, bs.NKV, bs.HD);
        repkv_forward_dump(ok_dir, fs, x.data(), fx.data(), nullptr);
        repkv_backward_dump(ok_dir, bs, y.data(), by.data(), nullptr);
        RepkvShape fs2;
        RepkvShape bs2;
        std::vector<float> x2 = repkv_forward_load(ok_dir, fs2), y2 = repkv_backward_load(ok_dir, bs2);
        bool same = x2.size() == x.size() && memcmp(x2.data(), x.data(), x.size() * 4) == 0 && y2.size() == y.size() &&
                    memcmp(y2.data(), y.data(), y.size() * 4) == 0 && fs2.B == fs.B && fs2.T == fs.T && fs2.NH == fs.NH &&
                    fs2.NKV == fs.NKV && fs2.HD == fs.HD && bs2.B == bs.B && bs2.NKV == bs.NKV && bs2.HD == bs.HD;
        report(same, "repkv --dump then --load: the inputs and their shape come back bit for bit");

        const std::string bad_shape = root + "/repkv_bad_shape", bad_nan = root + "/repkv_bad_nan";
        make_dir(bad_shape); make_dir(bad_nan);
        RepkvShape wrong = fs;
        wrong.NKV = 1;                                                 // meta says NKV 1, inp has NKV 2's columns
        repkv_forward_dump(bad_shape, fs, x.data(), fx.data(), nullptr);
        const int64_t meta[5] = {wrong.B, wrong.T, wrong.NH, wrong.NKV, wrong.HD};
        write_npy(bad_shape, "repkv_forward_meta", meta, {5});
        x[7] = NAN;
        repkv_forward_dump(bad_nan, fs, x.data(), fx.data(), nullptr);
    }

    return test_summary();
}
