// common.h: the only code shared by the op files in dev/cuda.
//
// What is here, in order: error checks, the element type (fp32, or bf16 with -DENABLE_BF16), seeded
// random data (uniform, Zipf bags), NaN poisoning, result validation, the command line, timing (with
// an L2 flush per sample), the copy-bandwidth and FP32-FMA peaks, RESULT/PEAK lines, and .npy dumps.
// Everything above the "device" section runs without a GPU, so the CPU tests in tests/ use it.
#pragma once

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>
#include <sys/stat.h>

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

// ----------------------------------------------------------------------------------------------
// error checks: a failing CUDA or cuBLAS call names itself and exits 3 (DESIGN.md's exit codes)

enum ExitCode { EXIT_PASS = 0, EXIT_CHECK_FAILED = 1, EXIT_BAD_ARGS = 2, EXIT_CUDA_ERROR = 3 };

inline void cuda_check(cudaError_t err, const char* call, const char* file, int line) {
    if (err != cudaSuccess) {
        fprintf(stderr, "CUDA error: %s failed at %s:%d: %s (%s)\n", call, file, line,
                cudaGetErrorString(err), cudaGetErrorName(err));
        exit(EXIT_CUDA_ERROR);
    }
}
#define cudaCheck(call) cuda_check((call), #call, __FILE__, __LINE__)

inline void cublas_check(cublasStatus_t status, const char* call, const char* file, int line) {
    if (status != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "cuBLAS error: %s failed at %s:%d: status %d\n", call, file, line, (int)status);
        exit(EXIT_CUDA_ERROR);
    }
}
#define cublasCheck(call) cublas_check((call), #call, __FILE__, __LINE__)

// bad input: print the broken constraint and exit 2
[[noreturn]] inline void fail_args(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "error: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(EXIT_BAD_ARGS);
}

template <class T>
__host__ __device__ constexpr T ceil_div(T a, T b) { return (a + b - 1) / b; }

// ----------------------------------------------------------------------------------------------
// element type: fp32 by default, bf16 when built with -DENABLE_BF16 (the `<op>_bf16` targets)

#ifdef ENABLE_BF16
typedef __nv_bfloat16 floatX;
#define DTYPE_NAME "bf16"
#else
typedef float floatX;
#define DTYPE_NAME "fp32"
#endif

__host__ __device__ inline float to_float(float x) { return x; }
__host__ __device__ inline float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__host__ __device__ inline double to_float(double x) { return x; }
template <class T> __host__ __device__ inline T from_float(float x);
template <> __host__ __device__ inline float from_float<float>(float x) { return x; }
template <> __host__ __device__ inline __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
    return __float2bfloat16(x);  // round to nearest even
}

// host copy of a float array in the element type, and back (bf16 rounds once, on the way in)
inline std::vector<floatX> to_floatX(const std::vector<float>& v) {
    std::vector<floatX> out(v.size());
    for (size_t i = 0; i < v.size(); i++) out[i] = from_float<floatX>(v[i]);
    return out;
}
inline std::vector<float> to_float_vec(const std::vector<floatX>& v) {
    std::vector<float> out(v.size());
    for (size_t i = 0; i < v.size(); i++) out[i] = to_float(v[i]);
    return out;
}

// 16 bytes of elements (4 fp32 or 8 bf16): the widest load/store one thread can issue. `load` and
// `store` are plain; `load_cs` / `store_cs` add the evict-first streaming hint for data touched once.
template <class T>
struct alignas(16) Packed16 {
    static constexpr int N = 16 / sizeof(T);
    T v[N];
    __device__ static Packed16 load(const T* p) { Packed16 r; *reinterpret_cast<int4*>(r.v) = *reinterpret_cast<const int4*>(p); return r; }
    __device__ static Packed16 load_cs(const T* p) { Packed16 r; *reinterpret_cast<int4*>(r.v) = __ldcs(reinterpret_cast<const int4*>(p)); return r; }
    __device__ void store(T* p) const { *reinterpret_cast<int4*>(p) = *reinterpret_cast<const int4*>(v); }
    __device__ void store_cs(T* p) const { __stcs(reinterpret_cast<int4*>(p), *reinterpret_cast<const int4*>(v)); }
};
typedef Packed16<floatX> x128;

// ----------------------------------------------------------------------------------------------
// seeded random data. splitmix64 seeds a xoshiro256** generator: the same stream on every
// platform and compiler, unlike rand() or std::*_distribution.

struct Rng {
    uint64_t s[4];
    explicit Rng(uint64_t seed) {
        for (int i = 0; i < 4; i++) {
            seed += 0x9E3779B97F4A7C15ull;
            uint64_t z = seed;
            z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
            z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
            s[i] = z ^ (z >> 31);
        }
    }
    static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
    uint64_t next() {
        uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
        s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3]; s[2] ^= t; s[3] = rotl(s[3], 45);
        return result;
    }
    double uniform01() { return (next() >> 11) * 0x1.0p-53; }                     // [0, 1)
    float uniform(float lo, float hi) { return lo + (hi - lo) * (float)uniform01(); }
    int64_t randint(int64_t lo, int64_t hi) {                                      // [lo, hi)
        return lo + (int64_t)(uniform01() * (double)(hi - lo));
    }
    // numpy's np.random.zipf(a) (Devroye's rejection method): k >= 1 with P(k) ~ k^-a, a > 1
    int64_t zipf(double a) {
        const double am1 = a - 1.0, b = pow(2.0, am1);
        for (;;) {
            double U = 1.0 - uniform01(), V = uniform01();
            double X = floor(pow(U, -1.0 / am1));
            if (X > 9.0e18 || X < 1.0) continue;
            double T = pow(1.0 + 1.0 / X, am1);
            if (V * X * (T - 1.0) / (b - 1.0) <= T / b) return (int64_t)X;
        }
    }
};

inline std::vector<float> make_random_floats(size_t n, Rng& rng, float lo = -1.f, float hi = 1.f) {
    std::vector<float> v(n);
    for (auto& x : v) x = rng.uniform(lo, hi);
    return v;
}

// Row ids for `num_bags` bags of exactly L distinct rows each out of E rows, by FBGEMM's benchmark
// recipe (split_table_batched_embeddings_benchmark / generate_requests):
//   alpha <= 1: uniform in [0, E) (duplicates allowed, as in FBGEMM's uniform branch);
//   alpha >  1: draw max(3L, 20) Zipf(alpha) samples per bag, map x -> (x - 1) % E, keep the L smallest
//               distinct values (drawing more if a bag has fewer than L), then send every value
//               through one random injective map [0, E) -> [0, E), so the hot rows are scattered.
// Returned bag-major: bag i is out[i*L .. i*L + L).
inline std::vector<int64_t> make_bag_indices(int64_t num_bags, int64_t L, int64_t E, double alpha, Rng& rng) {
    std::vector<int64_t> out((size_t)(num_bags * L));
    if (alpha <= 1.0) {
        for (auto& x : out) x = rng.randint(0, E);
        return out;
    }
    if (E < L) fail_args("Zipf bags need E (%lld) >= L (%lld) to draw L distinct rows", (long long)E, (long long)L);
    const int64_t draws = std::max<int64_t>(3 * L, 20);
    std::vector<int64_t> bag;
    for (int64_t i = 0; i < num_bags; i++) {
        bag.clear();
        for (int64_t k = 0; k < draws; k++) bag.push_back((rng.zipf(alpha) - 1) % E);
        for (;;) {
            std::sort(bag.begin(), bag.end());
            bag.erase(std::unique(bag.begin(), bag.end()), bag.end());
            if ((int64_t)bag.size() >= L) break;
            for (int64_t k = 0; k < L; k++) bag.push_back((rng.zipf(alpha) - 1) % E);
        }
        std::copy(bag.begin(), bag.begin() + L, out.begin() + i * L);
    }
    // the random injective map, as a lazy Fisher-Yates shuffle of [0, E): only drawn values get slots
    std::unordered_map<int64_t, int64_t> swapped, assigned;
    int64_t next_slot = 0;
    auto slot_value = [&](int64_t s) { auto it = swapped.find(s); return it == swapped.end() ? s : it->second; };
    for (auto& x : out) {
        auto it = assigned.find(x);
        if (it == assigned.end()) {
            int64_t j = rng.randint(next_slot, E);
            int64_t vj = slot_value(j), vi = slot_value(next_slot);
            swapped[j] = vi;
            swapped[next_slot] = vj;
            next_slot++;
            it = assigned.emplace(x, vj).first;
        }
        x = it->second;
    }
    return out;
}

// ----------------------------------------------------------------------------------------------
// validation: compare a result with its reference, report, and return pass/fail (never exit here,
// so `all` goes on and main exits 1 at the end)

struct ValidateStats {
    size_t n = 0, failures = 0, nonfinite = 0;
    double max_abs = 0.0, max_rel = 0.0;
    std::vector<size_t> first_bad;  // up to 5 failing indices
};

// An element fails when it is non-finite where the reference is finite, or |got - ref| > atol + rtol*|ref|.
inline ValidateStats compare_arrays(const float* got, const float* ref, size_t n, float atol, float rtol) {
    ValidateStats s;
    s.n = n;
    for (size_t i = 0; i < n; i++) {
        double g = got[i], r = ref[i];
        bool bad;
        if (!std::isfinite(r)) {
            bad = !(std::isnan(r) ? std::isnan(g) : g == r);   // a non-finite reference must be matched
        } else if (!std::isfinite(g)) {
            bad = true;
            s.nonfinite++;
        } else {
            double abs_err = fabs(g - r), rel_err = abs_err / std::max(fabs(r), 1e-30);
            s.max_abs = std::max(s.max_abs, abs_err);
            if (fabs(r) > atol) s.max_rel = std::max(s.max_rel, rel_err);
            bad = abs_err > atol + rtol * fabs(r);
        }
        if (bad) {
            if (s.first_bad.size() < 5) s.first_bad.push_back(i);
            s.failures++;
        }
    }
    return s;
}

inline bool report_validation(const char* name, const ValidateStats& s, const float* got, const float* ref,
                              float atol, float rtol) {
    if (s.failures == 0) {
        printf("  %-16s ok    (%zu elements, max abs err %.3g, max rel err %.3g, atol %.1g rtol %.1g)\n",
               name, s.n, s.max_abs, s.max_rel, atol, rtol);
        return true;
    }
    printf("  %-16s FAIL  %zu of %zu elements (%zu non-finite), max abs err %.3g, max rel err %.3g, atol %.1g rtol %.1g\n",
           name, s.failures, s.n, s.nonfinite, s.max_abs, s.max_rel, atol, rtol);
    for (size_t i : s.first_bad) printf("    [%zu] got %.9g expected %.9g\n", i, got[i], ref[i]);
    return false;
}

// host result against host reference
inline bool validate_host(const char* name, const float* got, const float* ref, size_t n, float atol, float rtol) {
    ValidateStats s = compare_arrays(got, ref, n, atol, rtol);
    return report_validation(name, s, got, ref, atol, rtol);
}

// device result (float or bf16) against a host float reference
template <class T>
bool validate_device(const char* name, const T* d_got, const float* ref, size_t n, float atol, float rtol) {
    std::vector<T> raw(n);
    cudaCheck(cudaMemcpy(raw.data(), d_got, n * sizeof(T), cudaMemcpyDeviceToHost));
    std::vector<float> got(n);
    for (size_t i = 0; i < n; i++) got[i] = to_float(raw[i]);
    return validate_host(name, got.data(), ref, n, atol, rtol);
}

// ----------------------------------------------------------------------------------------------
// command line: the common flags of DESIGN.md plus the op's named size flags
//   ./<op> [KERNEL | all] [--<size> N ...] [--seed N] [--block N] [--repeat N]
//          [--check-only] [--no-check] [--csv] [--dump DIR] [-h | --help]

struct Cli {
    // the common flags, filled by parse()
    std::vector<int> kernels;      // versions to run, in order
    bool all = false;
    uint64_t seed = 42;
    int block = 0;                 // 0: every block size of the op's list
    int repeat = 100;
    bool check_only = false, no_check = false, csv = false;
    std::string dump_dir;

    struct Opt { std::string name, help, def; int kind; void* target; std::vector<std::string> choices; };
    enum { INT, INT64, DOUBLE, FLAG, CHOICE, INT_LIST };
    std::string op, about, constraints;
    int num_kernels, default_kernel;
    std::vector<Opt> opts;

    Cli(const char* op_name, const char* about_text, int num_kernels_, int default_kernel_)
        : op(op_name), about(about_text), num_kernels(num_kernels_), default_kernel(default_kernel_) {}

    void add_int(const char* name, int* v, const char* help) { opts.push_back({name, help, std::to_string(*v), INT, v, {}}); }
    void add_int64(const char* name, int64_t* v, const char* help) { opts.push_back({name, help, std::to_string(*v), INT64, v, {}}); }
    void add_double(const char* name, double* v, const char* help) {
        char buf[64]; snprintf(buf, sizeof buf, "%g", *v);
        opts.push_back({name, help, buf, DOUBLE, v, {}});
    }
    void add_flag(const char* name, bool* v, const char* help) { opts.push_back({name, help, "off", FLAG, v, {}}); }
    void add_choice(const char* name, std::string* v, std::vector<std::string> choices, const char* help) {
        opts.push_back({name, help, *v, CHOICE, v, choices});
    }
    void add_int_list(const char* name, std::vector<int>* v, const char* help) {
        std::string d;
        for (size_t i = 0; i < v->size(); i++) d += (i ? "," : "") + std::to_string((*v)[i]);
        opts.push_back({name, help, d, INT_LIST, v, {}});
    }

    void usage() const {
        printf("usage: ./%s [KERNEL | all] [options]\n%s\n\n", op.c_str(), about.c_str());
        printf("  KERNEL          version 1..%d to run (default %d, the fastest); 'all' runs every version\n",
               num_kernels, default_kernel);
        printf("sizes and inputs:\n");
        for (const auto& o : opts) {
            std::string lhs = "--" + o.name + (o.kind == FLAG ? "" : " V");
            std::string help = o.help;
            if (o.kind == CHOICE) {
                help += " (";
                for (size_t i = 0; i < o.choices.size(); i++) help += (i ? "|" : "") + o.choices[i];
                help += ")";
            }
            printf("  %-15s %s [default %s]\n", lhs.c_str(), help.c_str(), o.def.c_str());
        }
        if (!constraints.empty()) printf("constraints:\n%s\n", constraints.c_str());
        printf("common:\n"
               "  --seed N        random seed for the inputs [42]\n"
               "  --block N       run one block size instead of the op's list\n"
               "  --repeat N      timed samples per measurement [100]\n"
               "  --check-only    check every version, time nothing\n"
               "  --no-check      time without checking\n"
               "  --csv           also print the results as CSV at the end\n"
               "  --dump DIR      write inputs, reference and the last version's output as .npy to DIR\n"
               "  -h, --help      this text\n"
               "exit codes: 0 all checks passed, 1 a check failed, 2 bad arguments or shape, 3 no usable CUDA device or a CUDA error\n");
    }

    static long long parse_integer(const std::string& flag, const char* s) {
        char* end = nullptr;
        errno = 0;
        long long v = strtoll(s, &end, 10);
        if (errno != 0 || end == s || *end != '\0') fail_args("%s expects an integer, got '%s'", flag.c_str(), s);
        return v;
    }

    void parse(int argc, char** argv) {
        setvbuf(stdout, nullptr, _IOLBF, 0);   // line-buffered even into a log file, so stdout and stderr interleave
        bool kernel_given = false;
        for (int i = 1; i < argc; i++) {
            std::string a = argv[i];
            auto value = [&](void) -> const char* {
                if (i + 1 >= argc) fail_args("%s needs a value", a.c_str());
                return argv[++i];
            };
            if (a == "-h" || a == "--help") { usage(); exit(EXIT_PASS); }
            else if (a == "--seed") seed = (uint64_t)parse_integer(a, value());
            else if (a == "--block") block = (int)parse_integer(a, value());
            else if (a == "--repeat") repeat = (int)parse_integer(a, value());
            else if (a == "--check-only") check_only = true;
            else if (a == "--no-check") no_check = true;
            else if (a == "--csv") csv = true;
            else if (a == "--dump") dump_dir = value();
            else if (a.rfind("--", 0) == 0) {
                const Opt* o = nullptr;
                for (const auto& c : opts) if ("--" + c.name == a) o = &c;
                if (!o) fail_args("unknown option '%s' (see -h)", a.c_str());
                switch (o->kind) {
                    case INT: {
                        long long v = parse_integer(a, value());
                        if (v < INT32_MIN || v > INT32_MAX) fail_args("%s (%lld) does not fit in 32 bits", a.c_str(), v);
                        *(int*)o->target = (int)v;
                        break;
                    }
                    case INT64: *(int64_t*)o->target = parse_integer(a, value()); break;
                    case DOUBLE: {
                        const char* s = value(); char* end = nullptr;
                        double v = strtod(s, &end);
                        if (end == s || *end != '\0' || !std::isfinite(v)) fail_args("%s expects a number, got '%s'", a.c_str(), s);
                        *(double*)o->target = v;
                        break;
                    }
                    case FLAG: *(bool*)o->target = true; break;
                    case CHOICE: {
                        std::string v = value();
                        if (std::find(o->choices.begin(), o->choices.end(), v) == o->choices.end())
                            fail_args("%s must be one of its choices (see -h), got '%s'", a.c_str(), v.c_str());
                        *(std::string*)o->target = v;
                        break;
                    }
                    case INT_LIST: {
                        std::string s = value();
                        auto* list = (std::vector<int>*)o->target;
                        list->clear();
                        size_t start = 0;
                        while (start <= s.size()) {
                            size_t comma = s.find(',', start);
                            if (comma == std::string::npos) comma = s.size();
                            std::string item = s.substr(start, comma - start);
                            if (item.empty()) fail_args("%s expects a comma-separated list of integers, got '%s'", a.c_str(), s.c_str());
                            long long v = parse_integer(a, item.c_str());
                            if (v < INT32_MIN || v > INT32_MAX) fail_args("%s item %lld does not fit in 32 bits", a.c_str(), v);
                            list->push_back((int)v);
                            start = comma + 1;
                        }
                        break;
                    }
                }
            } else if (a == "all") {
                all = true; kernel_given = true;
                kernels.clear();
                for (int k = 1; k <= num_kernels; k++) kernels.push_back(k);
            } else {
                long long k = parse_integer("KERNEL", a.c_str());
                if (k < 1 || k > num_kernels) fail_args("KERNEL must be 1..%d or 'all', got %lld", num_kernels, k);
                if (!kernel_given) kernels.clear();
                kernel_given = true;
                kernels.push_back((int)k);
            }
        }
        if (!kernel_given) kernels = {default_kernel};
        if (block < 0 || block > 1024) fail_args("--block (%d) must be 1..1024", block);
        if (repeat < 1) fail_args("--repeat (%d) must be >= 1", repeat);
        if (check_only && no_check) fail_args("--check-only and --no-check exclude each other");
    }

    // the block sizes to run: --block N, or the op's list
    std::vector<int> blocks(std::vector<int> op_list) const {
        if (block) return {block};
        return op_list;
    }
};

// shape error helper: `require(NH % NKV == 0, "NH (%d) must be a multiple of NKV (%d)", NH, NKV)`
#define require(cond, ...) do { if (!(cond)) fail_args(__VA_ARGS__); } while (0)

// ----------------------------------------------------------------------------------------------
// .npy dump (format 1.0): little-endian '<f4', '<i8' or '<i4', C order

inline void make_dir(const std::string& dir) {
    if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "error: cannot create dump directory '%s': %s\n", dir.c_str(), strerror(errno));
        exit(EXIT_BAD_ARGS);
    }
}

template <class T> inline const char* npy_descr();
template <> inline const char* npy_descr<float>() { return "<f4"; }
template <> inline const char* npy_descr<int64_t>() { return "<i8"; }
template <> inline const char* npy_descr<int32_t>() { return "<i4"; }

template <class T>
void write_npy(const std::string& dir, const std::string& name, const T* data, std::vector<int64_t> shape) {
    if (dir.empty()) return;
    make_dir(dir);
    std::string path = dir + "/" + name + ".npy";
    std::string sh = "(";
    size_t count = 1;
    for (size_t i = 0; i < shape.size(); i++) { sh += std::to_string(shape[i]) + (shape.size() == 1 ? "," : (i + 1 < shape.size() ? ", " : "")); count *= (size_t)shape[i]; }
    sh += ")";
    std::string header = std::string("{'descr': '") + npy_descr<T>() + "', 'fortran_order': False, 'shape': " + sh + ", }";
    size_t total = 10 + header.size() + 1;
    header += std::string((64 - total % 64) % 64, ' ') + "\n";
    FILE* f = fopen(path.c_str(), "wb");
    if (!f) { fprintf(stderr, "error: cannot write '%s': %s\n", path.c_str(), strerror(errno)); exit(EXIT_BAD_ARGS); }
    unsigned short hlen = (unsigned short)header.size();
    fwrite("\x93NUMPY\x01\x00", 1, 8, f);
    fwrite(&hlen, 2, 1, f);
    fwrite(header.data(), 1, header.size(), f);
    fwrite(data, sizeof(T), count, f);
    fclose(f);
}

// ----------------------------------------------------------------------------------------------
// results: one RESULT line per measured (version, block); a table at the end of `all`

struct Result {
    std::string op, shape, check;   // check: pass, fail or unchecked
    int kernel, block;
    double ms_median, ms_min, ms_max, gbps, pct_copy;
    std::string extra;              // more key=value fields (gflops=, pct_fma=, fbgemm_gbps=, ...)
};

inline std::vector<Result>& results_log() { static std::vector<Result> log; return log; }

inline void print_result(const Result& r) {
    printf("RESULT op=%s kernel=%d block=%d dtype=%s shape=%s check=%s ms_median=%.4f ms_min=%.4f ms_max=%.4f gbps=%.0f pct_copy=%.1f%s%s\n",
           r.op.c_str(), r.kernel, r.block, DTYPE_NAME, r.shape.c_str(), r.check.c_str(), r.ms_median, r.ms_min,
           r.ms_max, r.gbps, r.pct_copy, r.extra.empty() ? "" : " ", r.extra.c_str());
    fflush(stdout);
    results_log().push_back(r);
}

// the comparison table: the best block of each version, and --csv rows of every measurement
inline void print_summary(bool csv) {
    const auto& log = results_log();
    if (log.empty()) return;
    printf("\n%-8s %-6s %-10s %-10s %-10s %-8s %-8s %s\n", "version", "block", "ms_median", "ms_min", "ms_max", "GB/s", "%copy", "check");
    std::vector<int> seen;
    for (const auto& r : log) {
        if (std::find(seen.begin(), seen.end(), r.kernel) != seen.end()) continue;
        seen.push_back(r.kernel);
        const Result* best = &r;
        for (const auto& q : log) if (q.kernel == r.kernel && q.ms_median < best->ms_median) best = &q;
        printf("%-8d %-6d %-10.4f %-10.4f %-10.4f %-8.0f %-8.1f %s\n", best->kernel, best->block, best->ms_median,
               best->ms_min, best->ms_max, best->gbps, best->pct_copy, best->check.c_str());
    }
    if (csv) {
        printf("\nop,kernel,block,dtype,shape,check,ms_median,ms_min,ms_max,gbps,pct_copy\n");
        for (const auto& r : log)
            printf("%s,%d,%d,%s,%s,%s,%.4f,%.4f,%.4f,%.0f,%.1f\n", r.op.c_str(), r.kernel, r.block, DTYPE_NAME,
                   r.shape.c_str(), r.check.c_str(), r.ms_median, r.ms_min, r.ms_max, r.gbps, r.pct_copy);
    }
}

// ================================================================================================
// device: everything below needs a GPU

// Exits 3 with a clear message when there is no usable CUDA device (checked before any other call).
inline cudaDeviceProp cuda_init() {
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count == 0) {
        fprintf(stderr, "error: no usable CUDA device (cudaGetDeviceCount: %s)\n",
                err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
        exit(EXIT_CUDA_ERROR);
    }
    cudaCheck(cudaSetDevice(0));
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s, %d SMs, L2 %d MB, compute capability %d.%d\n", prop.name, prop.multiProcessorCount,
           prop.l2CacheSize >> 20, prop.major, prop.minor);
    return prop;
}

// Fill device memory with 0xFF bytes: NaN as fp32 and as bf16, -1 as an integer, so an element that
// a kernel forgets to write fails the check.
inline void poison(void* d_ptr, size_t bytes) { cudaCheck(cudaMemset(d_ptr, 0xFF, bytes)); }

template <class T>
T* device_upload(const std::vector<T>& host) {
    T* d = nullptr;
    cudaCheck(cudaMalloc(&d, std::max<size_t>(host.size(), 1) * sizeof(T)));
    if (!host.empty()) cudaCheck(cudaMemcpy(d, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}

template <class T>
T* device_alloc(size_t n) {
    T* d = nullptr;
    cudaCheck(cudaMalloc(&d, std::max<size_t>(n, 1) * sizeof(T)));
    return d;
}

template <class T>
std::vector<T> device_download(const T* d, size_t n) {
    std::vector<T> h(n);
    if (n) cudaCheck(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
}

struct Timing { double median, min, max; };

inline Timing summarize(std::vector<float> ms) {
    std::sort(ms.begin(), ms.end());
    size_t n = ms.size();
    double median = (n % 2) ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]);
    return {median, ms.front(), ms.back()};
}

// Reads every 16 bytes of a buffer (plain loads, so the lines are allocated in L2); the store never
// happens but keeps the loads alive.
__global__ void flush_l2_read_kernel(const int4* buf, size_t n, int* sink) {
    int acc = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        int4 v = buf[i];
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x7fffffff) *sink = acc;
}

// Before each timed sample: a buffer of twice the L2 size is written (DESIGN.md's flush), so that no
// sample starts with its inputs in L2. The environment variable L2_FLUSH=read reads a buffer of that
// size instead: a written buffer leaves up to an L2 of dirty lines whose write-back to DRAM then happens
// during the timed kernel; a read leaves L2 clean. (scripts/gpu_check.sh measures one case both ways.)
inline void flush_l2() {
    static void* buf = nullptr;
    static int* sink = nullptr;
    static size_t bytes = 0;
    static bool read_mode = false;
    if (!buf) {
        int dev = 0, l2 = 0;
        cudaCheck(cudaGetDevice(&dev));
        cudaCheck(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
        bytes = 2 * (size_t)std::max(l2, 1 << 20);
        cudaCheck(cudaMalloc(&buf, bytes));
        cudaCheck(cudaMemset(buf, 0, bytes));
        cudaCheck(cudaMalloc(&sink, sizeof(int)));
        const char* mode = getenv("L2_FLUSH");
        read_mode = mode && strcmp(mode, "read") == 0;
        if (read_mode) printf("L2 flush: read %zu MB before each sample\n", bytes >> 20);
    }
    if (read_mode) flush_l2_read_kernel<<<1024, 256>>>((const int4*)buf, bytes / 16, sink);
    else cudaCheck(cudaMemsetAsync(buf, 0, bytes));
}

// Warm up, then `repeat` samples of: [setup, untimed] flush L2, event, launch, event.
// `setup` restores inputs that a version consumes (an optimizer step, say); it may be empty.
template <class Launch, class Setup>
Timing benchmark(int repeat, Launch&& launch, Setup&& setup) {
    for (int i = 0; i < 3; i++) { setup(); launch(); }
    cudaCheck(cudaGetLastError());
    cudaCheck(cudaDeviceSynchronize());
    cudaEvent_t start, stop;
    cudaCheck(cudaEventCreate(&start));
    cudaCheck(cudaEventCreate(&stop));
    std::vector<float> ms(repeat);
    for (int i = 0; i < repeat; i++) {
        setup();
        flush_l2();
        cudaCheck(cudaEventRecord(start));
        launch();
        cudaCheck(cudaEventRecord(stop));
        cudaCheck(cudaEventSynchronize(stop));
        cudaCheck(cudaEventElapsedTime(&ms[i], start, stop));
    }
    cudaCheck(cudaGetLastError());
    cudaCheck(cudaEventDestroy(start));
    cudaCheck(cudaEventDestroy(stop));
    return summarize(ms);
}
template <class Launch>
Timing benchmark(int repeat, Launch&& launch) { return benchmark(repeat, launch, [] {}); }

// Device-to-device copy bandwidth (bytes read + written), 1 GiB each way, median of 20, once per
// process. Every version reports its bandwidth as a percentage of this.
inline double copy_peak_gbps() {
    static double peak = 0.0;
    if (peak > 0.0) return peak;
    const size_t bytes = (size_t)1 << 30;
    void *src, *dst;
    cudaCheck(cudaMalloc(&src, bytes));
    cudaCheck(cudaMalloc(&dst, bytes));
    cudaCheck(cudaMemset(src, 1, bytes));
    Timing t = benchmark(20, [&] { cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice)); });
    cudaCheck(cudaFree(src));
    cudaCheck(cudaFree(dst));
    peak = 2.0 * bytes / (t.median * 1e-3) / 1e9;
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, 0));
    printf("PEAK copy_gbps=%.0f device=\"%s\"\n", peak, prop.name);
    return peak;
}

// FP32 FMA peak: every thread runs 8 independent FMA chains (enough to hide the 4-cycle latency),
// a grid of 16 blocks of 256 threads per SM. The result is stored so the compiler keeps the loop.
__global__ void fma_peak_kernel(float* out, int iters, float a, float b) {
    float x[8];
    for (int j = 0; j < 8; j++) x[j] = threadIdx.x * 1e-3f + j;
    for (int i = 0; i < iters; i++) {
#pragma unroll
        for (int j = 0; j < 8; j++) x[j] = fmaf(x[j], a, b);
    }
    float s = 0.f;
    for (int j = 0; j < 8; j++) s += x[j];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}

inline double fma_peak_gflops() {
    static double peak = 0.0;
    if (peak > 0.0) return peak;
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, 0));
    const int blocks = prop.multiProcessorCount * 16, threads = 256, iters = 4096;
    float* out = device_alloc<float>((size_t)blocks * threads);
    Timing t = benchmark(20, [&] { fma_peak_kernel<<<blocks, threads>>>(out, iters, 0.999f, 1e-3f); });
    cudaCheck(cudaFree(out));
    peak = 2.0 * 8.0 * iters * (double)blocks * threads / (t.median * 1e-3) / 1e9;
    printf("PEAK fma_gflops=%.0f device=\"%s\"\n", peak, prop.name);
    return peak;
}

// ----------------------------------------------------------------------------------------------
// The loop every op's main runs: for each requested version, skip it (with the reason) if the shape
// breaks its precondition; check it at every block size (outputs poisoned first); then time it at
// every block size. Returns the exit code: 1 if any check failed.

struct OpRunner {
    const char* op = "";
    std::string shape;                                    // e.g. "B8,T1024,NH32,NKV8,HD128"
    double bytes = 0.0, flops = 0.0;                      // fewest bytes (and FLOPs) of one call
    std::vector<int> block_sizes = {32, 64, 128, 256, 512, 1024};
    std::function<std::string(int kernel)> skip_reason;   // "" = the version can run this shape
    std::function<std::vector<int>(int kernel)> blocks_for;  // optional: a version's own block list
    std::function<void()> prepare_check;                  // poison outputs, restore consumed inputs
    std::function<void()> prepare_timing;                 // optional: restore consumed inputs (untimed)
    std::function<void(int kernel, int block)> launch;    // the version; no host sync, no allocation
    std::function<bool(int kernel, int block)> check;     // compare with the reference, print, pass?
    std::function<std::string(int kernel, int block, double ms)> extra;  // optional key=value fields
};

inline int run_versions(const Cli& cli, OpRunner& r) {
    bool all_pass = true;
    for (int k : cli.kernels) {
        std::string why = r.skip_reason ? r.skip_reason(k) : "";
        if (!why.empty()) {
            printf("version %d: skipped, %s\n", k, why.c_str());
            continue;
        }
        std::vector<int> blocks = cli.blocks(r.blocks_for ? r.blocks_for(k) : r.block_sizes);
        std::string check = "unchecked";
        if (!cli.no_check) {
            bool pass = true;
            for (int b : blocks) {
                printf("version %d, block %d: checking\n", k, b);
                r.prepare_check();
                r.launch(k, b);
                cudaCheck(cudaGetLastError());
                cudaCheck(cudaDeviceSynchronize());
                pass = r.check(k, b) && pass;
            }
            check = pass ? "pass" : "fail";
            all_pass = all_pass && pass;
            printf("version %d: check %s\n", k, check.c_str());
        }
        if (cli.check_only) continue;
        for (int b : blocks) {
            auto launch = [&] { r.launch(k, b); };
            Timing t = r.prepare_timing ? benchmark(cli.repeat, launch, r.prepare_timing) : benchmark(cli.repeat, launch);
            Result res;
            res.op = r.op; res.shape = r.shape; res.check = check; res.kernel = k; res.block = b;
            res.ms_median = t.median; res.ms_min = t.min; res.ms_max = t.max;
            res.gbps = r.bytes / (t.median * 1e-3) / 1e9;
            res.pct_copy = 100.0 * res.gbps / copy_peak_gbps();
            if (r.flops > 0) {
                char buf[96];
                double gflops = r.flops / (t.median * 1e-3) / 1e9;
                snprintf(buf, sizeof buf, "gflops=%.0f pct_fma=%.1f", gflops, 100.0 * gflops / fma_peak_gflops());
                res.extra = buf;
            }
            if (r.extra) {
                std::string e = r.extra(k, b, t.median);
                if (!e.empty()) res.extra += (res.extra.empty() ? "" : " ") + e;
            }
            print_result(res);
        }
    }
    print_summary(cli.csv);
    if (!cli.no_check) printf(all_pass ? "\nall checks passed\n" : "\nSOME CHECKS FAILED\n");
    return all_pass ? EXIT_PASS : EXIT_CHECK_FAILED;
}
