// common.h: the only code shared by the op files in dev/cuda.
//
// What is here, in order: error checks, checked size arithmetic, grid limits and memory needs, the
// element type (fp32, or bf16 with -DENABLE_BF16), seeded random data (uniform, Zipf bags), result
// validation, the command line, .npy dumps and loads, RESULT lines, then the device part: NaN poisoning,
// timing (with an L2 flush per sample), the copy-bandwidth and FP32-FMA peaks, PDL launches and TF32 mma,
// the version loop.
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
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

// ----------------------------------------------------------------------------------------------
// error checks: a failing CUDA or cuBLAS call names itself and exits 3 (the exit codes: 0 pass,
// 1 a check failed, 2 bad arguments or shape, 3 no usable CUDA device or a CUDA error)

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

// size arithmetic in 64 bits with overflow refused: `mul64(E, D, "E*D")` exits 2 naming the product
inline int64_t mul64(int64_t a, int64_t b, const char* what) {
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r)) fail_args("%s (%lld * %lld) overflows 64 bits", what, (long long)a, (long long)b);
    return r;
}
inline int64_t add64(int64_t a, int64_t b, const char* what) {
    int64_t r;
    if (__builtin_add_overflow(a, b, &r)) fail_args("%s (%lld + %lld) overflows 64 bits", what, (long long)a, (long long)b);
    return r;
}

// a grid dimension, checked before the cast: x up to 2^31 - 1 blocks, y and z up to 65535
inline unsigned grid_dim(int64_t blocks, int64_t limit, const char* what) {
    if (blocks < 1 || blocks > limit) fail_args("%s: a grid of %lld blocks (limit %lld)", what, (long long)blocks, (long long)limit);
    return (unsigned)blocks;
}
inline unsigned grid_x(int64_t blocks, const char* what) { return grid_dim(blocks, INT32_MAX, what); }
inline unsigned grid_y(int64_t blocks, const char* what) { return grid_dim(blocks, 65535, what); }

// ----------------------------------------------------------------------------------------------
// memory: an op states what it will allocate and is refused (exit 2) when the machine has less
//   require_host_memory(bytes, what)    before the host allocations (MemAvailable in /proc/meminfo)
//   require_device_memory(bytes, what)  after cuda_init, before the device allocations (cudaMemGetInfo)

// bytes the kernel reports available to a new allocation (MemAvailable), lowered to what an address-space
// limit (ulimit -v, RLIMIT_AS) leaves this process; -1 where neither is known
inline double host_available_bytes() {
    double avail = -1.0;
    if (FILE* f = fopen("/proc/meminfo", "r")) {
        char line[256];
        double kb = -1.0;
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "MemAvailable: %lf kB", &kb) == 1) break;
        fclose(f);
        if (kb >= 0) avail = kb * 1024.0;
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
        double used = 0.0, pages = 0.0;
        if (FILE* f = fopen("/proc/self/statm", "r")) {
            if (fscanf(f, "%lf", &pages) == 1) used = pages * (double)sysconf(_SC_PAGESIZE);
            fclose(f);
        }
        const double left = std::max(0.0, (double)rl.rlim_cur - used);
        avail = avail < 0 ? left : std::min(avail, left);
    }
    return avail;
}

inline void require_host_memory(double bytes, const char* what) {
    const double avail = host_available_bytes();
    if (avail >= 0 && bytes > avail)
        fail_args("%s needs %.3g GB of host memory; %.3g GB is available", what, bytes / 1e9, avail / 1e9);
}

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
    // numpy's np.random.zipf(a) (Devroye's rejection method): k >= 1 with P(k) ~ k^-a, a > 1, truncated
    // at 9e18 as numpy truncates at the int64 range. Bounded time for every finite a > 1:
    //  - a - 1 > 53: U^(-1/(a-1)) < 2 for every 53-bit U, so the method always returns 1 (the two draws
    //    are still taken, so the stream is the same as the plain loop's); pow(2, a-1) may be infinite here;
    //  - a near 1 proposes X > 9e18 almost always; after 64 such rejections U is drawn from the part of
    //    (0, 1] that gives X <= 9e18 (the same truncated distribution, without the waiting);
    //  - otherwise the accept test passes within a few tries on average, so the loop ends quickly.
    int64_t zipf(double a) {
        const double am1 = a - 1.0;
        if (am1 > 53.0) { next(); next(); return 1; }
        const double b = pow(2.0, am1), u_min = pow(9.0e18, -am1);   // X <= 9e18 <=> U >= u_min (about)
        int truncated = 0;
        for (;;) {
            double U = 1.0 - uniform01(), V = uniform01();
            if (truncated >= 64) U = u_min + (1.0 - u_min) * U;
            double X = floor(pow(U, -1.0 / am1));
            if (X > 9.0e18 || X < 1.0) { truncated++; continue; }
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

// Row ids for `num_bags` bags of L lookups each out of E rows, by FBGEMM's benchmark recipe
// (split_table_batched_embeddings_benchmark / generate_requests):
//   alpha <= 1: uniform in [0, E) (duplicates allowed, as in FBGEMM's uniform branch);
//   alpha >  1: Zipf(alpha) samples mapped x -> (x - 1) % E, then every value sent through one random
//               injective map [0, E) -> [0, E), so the hot rows are scattered. With `distinct` (FBGEMM's
//               recipe, the default of the ops) and E >= L a bag holds L distinct rows: draw max(3L, 20)
//               samples, keep the L smallest distinct values, drawing L more while a bag has fewer (at most
//               32 rounds; a bag still short after them, which only a steep alpha gives, is completed with
//               the smallest rows it lacks, the limit of the recipe as alpha grows). Without `distinct`, or
//               where E < L, a bag is L plain draws and may repeat rows, as real traces do.
// Bounded time for every alpha (Rng::zipf). Returned bag-major: bag i is out[i*L .. i*L + L).
inline std::vector<int64_t> make_bag_indices(int64_t num_bags, int64_t L, int64_t E, double alpha, Rng& rng,
                                             bool distinct = true) {
    std::vector<int64_t> out((size_t)(num_bags * L));
    if (alpha <= 1.0) {
        for (auto& x : out) x = rng.randint(0, E);
        return out;
    }
    if (!distinct || E < L) {
        for (auto& x : out) x = (rng.zipf(alpha) - 1) % E;
    } else {
        const int64_t draws = std::max<int64_t>(3 * L, 20);
        std::vector<int64_t> bag;
        for (int64_t i = 0; i < num_bags; i++) {
            bag.clear();
            for (int64_t k = 0; k < draws; k++) bag.push_back((rng.zipf(alpha) - 1) % E);
            for (int round = 0;; round++) {
                std::sort(bag.begin(), bag.end());
                bag.erase(std::unique(bag.begin(), bag.end()), bag.end());
                if ((int64_t)bag.size() >= L) break;
                if (round == 32) {                                  // complete with the smallest rows missing
                    std::vector<int64_t> have = bag;
                    size_t j = 0;
                    for (int64_t v = 0; (int64_t)bag.size() < L; v++) {
                        while (j < have.size() && have[j] < v) j++;
                        if (j == have.size() || have[j] != v) bag.push_back(v);
                    }
                    std::sort(bag.begin(), bag.end());
                    break;
                }
                for (int64_t k = 0; k < L; k++) bag.push_back((rng.zipf(alpha) - 1) % E);
            }
            std::copy(bag.begin(), bag.begin() + L, out.begin() + i * L);
        }
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

// host bytes make_bag_indices may hold beyond its output: the two hash maps of the injective map
// (about 64 bytes per node, two nodes per distinct row) and a bag's scratch
inline double bag_indices_host_bytes(int64_t num_bags, int64_t L, double alpha) {
    return alpha > 1.0 ? 128.0 * (double)num_bags * (double)L + 64.0 * (double)std::max<int64_t>(3 * L, 20) : 0.0;
}

// ----------------------------------------------------------------------------------------------
// validation: compare a result with its reference, report, and return pass/fail (never exit here,
// so `all` goes on and main exits 1 at the end)

struct ValidateStats {
    size_t n = 0, failures = 0, nonfinite = 0, ref_nan = 0;   // ref_nan: NaN in the reference itself (a defect)
    double max_abs = 0.0, max_rel = 0.0;
    std::vector<size_t> first_bad;  // up to 5 failing indices
};

// An element fails when it is non-finite where the reference is finite, or |got - ref| > atol + rtol*|ref|.
// An infinite reference must be matched exactly; a NaN in the reference always fails (a reference that
// computes NaN is broken, and a NaN-poisoned element would otherwise pass there).
inline ValidateStats compare_arrays(const float* got, const float* ref, size_t n, float atol, float rtol) {
    ValidateStats s;
    s.n = n;
    for (size_t i = 0; i < n; i++) {
        double g = got[i], r = ref[i];
        bool bad;
        if (std::isnan(r)) {
            bad = true;
            s.ref_nan++;
        } else if (std::isinf(r)) {
            bad = g != r;
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
    if (s.ref_nan) printf("    the reference itself holds %zu NaN: a defect of the reference or of its inputs\n", s.ref_nan);
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
// command line: the common flags plus the op's named size flags
//   ./<op> [KERNEL | all] [--<size> N ...] [--seed N] [--block N] [--repeat N]
//          [--check-only] [--no-check] [--csv] [--dump DIR] [--load DIR] [-h | --help]
// Every number is parsed in 64 bits and range-checked before it is narrowed; --dump's directory is
// created and tried before any work.

struct Cli {
    // the common flags, filled by parse()
    std::vector<int> kernels;      // versions to run, in order
    bool all = false;
    uint64_t seed = 42;
    int block = 0;                 // 0: every block size of the op's list
    int repeat = 100;
    bool check_only = false, no_check = false, csv = false;
    std::string dump_dir;
    std::string load_dir;          // --load DIR: inputs from the .npy files of a --dump (ops with supports_load)
    bool supports_load = false;    // set by an op that reads --load before calling parse()

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
               "  --block N       run one block size (1..1024) instead of the op's list\n"
               "  --repeat N      timed samples per measurement, 1..1000000 [100]\n"
               "  --check-only    check every version, time nothing\n"
               "  --no-check      time without checking\n"
               "  --csv           also print the results as CSV at the end\n"
               "  --dump DIR      write inputs, reference and the last version's output as .npy to DIR\n"
               "                  (tt_embedding_forward --no-check: no reference)\n");
        if (supports_load)
            printf("  --load DIR      read the inputs from the .npy files a --dump wrote to DIR (size flags are then ignored)\n");
        printf("  -h, --help      this text\n"
               "exit codes: 0 all checks passed, 1 a check failed, 2 bad arguments or shape, 3 no usable CUDA device or a CUDA error\n");
    }

    static long long parse_integer(const std::string& flag, const char* s) {
        char* end = nullptr;
        errno = 0;
        long long v = strtoll(s, &end, 10);
        if (end == s || *end != '\0') fail_args("%s expects an integer, got '%s'", flag.c_str(), s);
        if (errno == ERANGE) fail_args("%s (%s) does not fit in 64 bits", flag.c_str(), s);
        return v;
    }
    // an integer in [lo, hi], checked before any narrowing
    static long long parse_ranged(const std::string& flag, const char* s, long long lo, long long hi) {
        long long v = parse_integer(flag, s);
        if (v < lo || v > hi) fail_args("%s (%s) must be %lld..%lld", flag.c_str(), s, lo, hi);
        return v;
    }
    // a finite number that an fp32 kernel argument can hold (no overflow to infinity, no underflow to 0)
    static double parse_number(const std::string& flag, const char* s) {
        char* end = nullptr;
        double v = strtod(s, &end);
        if (end == s || *end != '\0') fail_args("%s expects a number, got '%s'", flag.c_str(), s);
        if (!std::isfinite(v)) fail_args("%s (%s) must be finite", flag.c_str(), s);
        if (fabs(v) > 3.4028234663852886e38 || (v != 0.0 && fabs(v) < 1.1754943508222875e-38))
            fail_args("%s (%s) does not fit in fp32 (|v| must be 0 or 1.2e-38..3.4e38)", flag.c_str(), s);
        return v;
    }
    // a directory that exists (or is created) and takes a file, checked before any work
    static void check_dump_dir(const std::string& dir) {
        if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
            fail_args("--dump: cannot create directory '%s': %s", dir.c_str(), strerror(errno));
        struct stat st;
        if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) fail_args("--dump: '%s' is not a directory", dir.c_str());
        const std::string probe = dir + "/.write_test";
        FILE* f = fopen(probe.c_str(), "wb");
        if (!f || fputc('x', f) == EOF || fclose(f) != 0)
            fail_args("--dump: cannot write in '%s': %s", dir.c_str(), strerror(errno));
        remove(probe.c_str());
    }

    void parse(int argc, char** argv) {
        setvbuf(stdout, nullptr, _IOLBF, 0);   // line-buffered even into a log file, so stdout and stderr interleave
        bool kernel_given = false;
        for (int i = 1; i < argc; i++) {
            std::string a = argv[i];
            auto value = [&](void) -> const char* {
                if (i + 1 >= argc) fail_args("%s needs a value", a.c_str());
                if (strncmp(argv[i + 1], "--", 2) == 0) fail_args("%s needs a value, got the flag '%s'", a.c_str(), argv[i + 1]);
                return argv[++i];
            };
            if (a == "-h" || a == "--help") { usage(); exit(EXIT_PASS); }
            else if (a == "--seed") seed = (uint64_t)parse_ranged(a, value(), 0, INT64_MAX);
            else if (a == "--block") block = (int)parse_ranged(a, value(), 1, 1024);
            else if (a == "--repeat") repeat = (int)parse_ranged(a, value(), 1, 1000000);
            else if (a == "--check-only") check_only = true;
            else if (a == "--no-check") no_check = true;
            else if (a == "--csv") csv = true;
            else if (a == "--dump") dump_dir = value();
            else if (a == "--load") {
                if (!supports_load) fail_args("--load: %s does not read dumped inputs yet", op.c_str());
                load_dir = value();
            }
            else if (a.rfind("--", 0) == 0) {
                const Opt* o = nullptr;
                for (const auto& c : opts) if ("--" + c.name == a) o = &c;
                if (!o) fail_args("unknown option '%s' (see -h)", a.c_str());
                switch (o->kind) {
                    case INT: {
                        const char* s = value();
                        long long v = parse_integer(a, s);
                        if (v < INT32_MIN || v > INT32_MAX) fail_args("%s (%s) does not fit in 32 bits", a.c_str(), s);
                        *(int*)o->target = (int)v;
                        break;
                    }
                    case INT64: *(int64_t*)o->target = parse_integer(a, value()); break;
                    case DOUBLE: *(double*)o->target = parse_number(a, value()); break;
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
                            if (v < INT32_MIN || v > INT32_MAX) fail_args("%s item %s does not fit in 32 bits", a.c_str(), item.c_str());
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
        if (check_only && no_check) fail_args("--check-only and --no-check exclude each other");
        if (!dump_dir.empty()) check_dump_dir(dump_dir);
        if (!load_dir.empty()) {
            struct stat st;
            if (stat(load_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) fail_args("--load: '%s' is not a directory", load_dir.c_str());
        }
    }

    // the block sizes to run: --block N, or the op's list
    std::vector<int> blocks(std::vector<int> op_list) const {
        if (block) return {block};
        return op_list;
    }
};

// the flags of make_bag_indices's recipe, for every op that draws its bags with it (the bag ops, the TT ops)
inline void add_bag_recipe_flags(Cli& cli, int* B, int* L, double* alpha, std::string* distinct) {
    cli.add_int("B", B, "bags per table (the batch size)");
    cli.add_int("L", L, "lookups per bag");
    cli.add_double("alpha", alpha, "Zipf exponent of the row ids (FBGEMM's recipe), any finite value; <= 1 gives uniform ids");
    cli.add_choice("distinct", distinct, {"on", "off"},
                   "Zipf bags of L distinct rows where E >= L (FBGEMM's recipe); off: rows drawn with repeats, as in real traces");
}

// shape error helper: `require(NH % NKV == 0, "NH (%d) must be a multiple of NKV (%d)", NH, NKV)`
#define require(cond, ...) do { if (!(cond)) fail_args(__VA_ARGS__); } while (0)

// ----------------------------------------------------------------------------------------------
// .npy files (format 1.0): little-endian '<f4', '<i8' or '<i4', C order. --dump writes them (Cli::parse
// has checked the directory before any work); --load reads them back through read_npy.

// the exit code of the last run_versions (0 before any): a dump that fails after a failed check exits 1,
// so that the check failure is never masked by the dump's error
inline int& last_run_rc() { static int rc = EXIT_PASS; return rc; }

[[noreturn]] inline void fail_dump(const std::string& path, const char* what) {
    fprintf(stderr, "error: --dump: %s '%s': %s\n", what, path.c_str(), strerror(errno));
    exit(last_run_rc() == EXIT_CHECK_FAILED ? EXIT_CHECK_FAILED : EXIT_BAD_ARGS);
}

inline void make_dir(const std::string& dir) {
    if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) fail_dump(dir, "cannot create directory");
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
    if (!f) fail_dump(path, "cannot open");
    unsigned short hlen = (unsigned short)header.size();
    bool ok = fwrite("\x93NUMPY\x01\x00", 1, 8, f) == 8 && fwrite(&hlen, 2, 1, f) == 1 &&
              fwrite(header.data(), 1, header.size(), f) == header.size() && (count == 0 || fwrite(data, sizeof(T), count, f) == count);
    if (fclose(f) != 0 || !ok) fail_dump(path, "cannot write");
}

// a text file next to the .npy files (checked as they are)
inline void write_text(const std::string& dir, const std::string& name, const std::string& text) {
    if (dir.empty()) return;
    const std::string path = dir + "/" + name;
    FILE* f = fopen(path.c_str(), "w");
    if (!f) fail_dump(path, "cannot open");
    bool ok = fputs(text.c_str(), f) >= 0;
    if (fclose(f) != 0 || !ok) fail_dump(path, "cannot write");
}

// An .npy array read back for --load. The header is parsed by npy_open (dtype string and shape; the
// payload size checked against the shape); read_npy<T> wants T's dtype exactly, read_npy_int64 takes
// '<i8' or '<i4' (numpy's default integer, or int32 ids) and widens. A missing file returns false when
// `optional`; every other problem exits 2 naming the file. `rank` -1 takes any rank.
struct NpyFile { FILE* f = nullptr; std::string path, descr; std::vector<int64_t> shape; int64_t count = 1; };

inline bool npy_open(const std::string& dir, const std::string& name, NpyFile& n, int rank, bool optional) {
    n.path = dir + "/" + name + ".npy";
    n.f = fopen(n.path.c_str(), "rb");
    if (!n.f) {
        if (optional && errno == ENOENT) return false;
        fail_args("--load: cannot open '%s': %s", n.path.c_str(), strerror(errno));
    }
    auto bad = [&](const std::string& why) { fclose(n.f); fail_args("--load: '%s': %s", n.path.c_str(), why.c_str()); };
    unsigned char head[12];
    if (fread(head, 1, 10, n.f) != 10 || memcmp(head, "\x93NUMPY", 6) != 0) bad("not an .npy file");
    size_t hlen = head[8] | (head[9] << 8);
    if (head[6] == 2 || head[6] == 3) {                      // versions 2 and 3: a 4-byte header length
        if (fread(head + 10, 1, 2, n.f) != 2) bad("truncated header");
        hlen |= ((size_t)head[10] << 16) | ((size_t)head[11] << 24);
    } else if (head[6] != 1) {
        bad("unknown .npy version " + std::to_string(head[6]));
    }
    if (hlen > (1u << 20)) bad("header over 1 MB");
    std::string h(hlen, ' ');
    if (fread(&h[0], 1, hlen, n.f) != hlen) bad("truncated header");
    const size_t d = h.find("'descr':");
    const size_t q1 = d == std::string::npos ? d : h.find('\'', d + 8), q2 = q1 == std::string::npos ? q1 : h.find('\'', q1 + 1);
    if (q2 == std::string::npos) bad("no readable 'descr' in the header");
    n.descr = h.substr(q1 + 1, q2 - q1 - 1);
    if (h.find("'fortran_order': False") == std::string::npos) bad("Fortran order: write it with np.ascontiguousarray");
    const size_t sp = h.find("'shape':"), open = sp == std::string::npos ? sp : h.find('(', sp),
                 close = open == std::string::npos ? open : h.find(')', open);
    if (close == std::string::npos) bad("no 'shape' in the header");
    const std::string shape_text = h.substr(open, close - open + 1);
    n.shape.clear();
    n.count = 1;
    for (size_t i = open + 1; i < close;) {
        while (i < close && (h[i] == ' ' || h[i] == ',')) i++;
        if (i >= close) break;
        char* end = nullptr;
        errno = 0;
        long long v = strtoll(h.c_str() + i, &end, 10);
        if (end == h.c_str() + i || errno || v < 0) bad("unreadable shape " + shape_text);
        n.shape.push_back(v);
        if (__builtin_mul_overflow(n.count, (int64_t)v, &n.count)) bad("the shape overflows 64 bits");
        i = end - h.c_str();
    }
    if (rank >= 0 && (int)n.shape.size() != rank)
        bad("shape " + shape_text + " has rank " + std::to_string(n.shape.size()) + ", expected " + std::to_string(rank));
    const size_t item = n.descr.size() >= 3 ? (size_t)atoi(n.descr.c_str() + 2) : 0;
    const long here = ftell(n.f);
    fseek(n.f, 0, SEEK_END);
    const long size = ftell(n.f);
    fseek(n.f, here, SEEK_SET);
    if (item == 0 || size < here || (uint64_t)(size - here) != (uint64_t)n.count * item)
        bad("the payload holds " + std::to_string(size - here) + " bytes; shape " + shape_text + " of '" + n.descr + "' needs " +
            std::to_string((uint64_t)n.count * item));
    return true;
}

template <class S, class T>
void npy_read_payload(NpyFile& n, std::vector<T>& data) {
    require_host_memory((double)n.count * (sizeof(S) + sizeof(T)), ("--load of " + n.path).c_str());
    std::vector<S> raw((size_t)n.count);
    const bool ok = n.count == 0 || fread(raw.data(), sizeof(S), (size_t)n.count, n.f) == (size_t)n.count;
    fclose(n.f);
    if (!ok) fail_args("--load: '%s': short read", n.path.c_str());
    data.assign(raw.begin(), raw.end());
}

template <class T>
bool read_npy(const std::string& dir, const std::string& name, std::vector<T>& data, std::vector<int64_t>& shape, int rank,
              bool optional = false) {
    NpyFile n;
    if (!npy_open(dir, name, n, rank, optional)) return false;
    if (n.descr != npy_descr<T>()) {
        fclose(n.f);
        fail_args("--load: '%s': dtype '%s', expected '%s'", n.path.c_str(), n.descr.c_str(), npy_descr<T>());
    }
    npy_read_payload<T>(n, data);
    shape = n.shape;
    return true;
}

inline bool read_npy_int64(const std::string& dir, const std::string& name, std::vector<int64_t>& data, std::vector<int64_t>& shape,
                           int rank, bool optional = false) {
    NpyFile n;
    if (!npy_open(dir, name, n, rank, optional)) return false;
    if (n.descr == "<i8") npy_read_payload<int64_t>(n, data);
    else if (n.descr == "<i4") npy_read_payload<int32_t>(n, data);
    else { fclose(n.f); fail_args("--load: '%s': dtype '%s', expected '<i8' or '<i4'", n.path.c_str(), n.descr.c_str()); }
    shape = n.shape;
    return true;
}

// a 1-d int64 array of exactly n entries (the *_meta.npy of a dump), each checked to lie in [lo, hi]
inline std::vector<int64_t> read_meta(const std::string& dir, const std::string& name, size_t n, int64_t lo, int64_t hi,
                                      const char* fields) {
    std::vector<int64_t> v, shape;
    read_npy_int64(dir, name, v, shape, 1);
    if (v.size() != n) fail_args("--load: %s.npy has %zu entries, expected %zu (%s)", name.c_str(), v.size(), n, fields);
    for (size_t i = 0; i < n; i++)
        if (v[i] < lo || v[i] > hi)
            fail_args("--load: %s[%zu] = %lld must be %lld..%lld (%s)", name.c_str(), i, (long long)v[i], (long long)lo, (long long)hi, fields);
    return v;
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

// Refuses (exit 2) an op whose device allocations exceed the free device memory, after cuda_init. The
// L2 flush buffer and the copy-peak measurement (2 GiB) come on top when the versions are timed.
inline void require_device_memory(double bytes, const char* what, bool timed = true) {
    size_t free_b = 0, total_b = 0;
    cudaCheck(cudaMemGetInfo(&free_b, &total_b));
    const double extra = timed ? 2.0 * (1 << 30) + 2.0 * (64 << 20) : 0.0;
    if (bytes + extra > (double)free_b)
        fail_args("%s needs %.3g GB of device memory%s; %.3g GB of %.3g GB is free", what, bytes / 1e9,
                  timed ? " (and 2.1 GB for timing)" : "", (double)free_b / 1e9, (double)total_b / 1e9);
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

// Before each timed sample: a buffer of twice the L2 size is written, so that no
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
// sm_90 building blocks used by several ops: programmatic dependent launch and TF32 tensor-core mma

// Programmatic dependent launch (PDL): a kernel launched with the attribute may start once every block of the
// kernel before it in the stream has executed pdl_allow_next() (or exited), so its launch and its blocks'
// start-up overlap that kernel's tail. It must call pdl_wait_prior() before reading what the earlier kernel
// wrote: the wait returns when that grid has completed and its writes are visible. Both are no-ops in a
// kernel launched without the attribute. Build with -DNO_PDL to time the same launches without it.
__device__ __forceinline__ void pdl_wait_prior() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }
__device__ __forceinline__ void pdl_allow_next() { asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory"); }

template <typename... Params, typename... Args>
void launch_pdl(void (*kernel)(Params...), dim3 grid, unsigned block, size_t smem, Args... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = dim3(block);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = 0;
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = &attr;
#ifdef NO_PDL
    cfg.numAttrs = 0;
#else
    cfg.numAttrs = 1;
#endif
    cudaCheck(cudaLaunchKernelEx(&cfg, kernel, args...));
}

// Asynchronous global -> shared copies (cp.async, sm_80+) of 16 bytes (both addresses 16-byte aligned) or 4 bytes;
// made visible by async_wait_group<N>() (at most N of this thread's committed groups still in flight) and a barrier.
// 16-byte copies bypass L1 unless l1 (where blocks of an SM re-read the same rows: hot rows of Zipf inputs).
// Host code (the CPU tests run the same block programs) copies at once.
__host__ __device__ inline void async_copy(float* dst, const float* src, bool vec4, bool l1 = false) {
#ifdef __CUDA_ARCH__
    const unsigned saddr = (unsigned)__cvta_generic_to_shared(dst);
    if (vec4 && l1) asm volatile("cp.async.ca.shared.global [%0], [%1], 16;\n" ::"r"(saddr), "l"(src) : "memory");
    else if (vec4) asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(saddr), "l"(src) : "memory");
    else asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(saddr), "l"(src) : "memory");
#else
    memcpy(dst, src, vec4 ? 16 : 4);
#endif
}
__host__ __device__ inline void async_commit() {
#ifdef __CUDA_ARCH__
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
template <int N>
__host__ __device__ inline void async_wait_group() {
#ifdef __CUDA_ARCH__
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

// d += a . b: one mma.sync.m16n8k8, TF32 inputs, FP32 accumulate. Fragments (PTX ISA; lane = 4 group + tig):
// A register r holds (row, col) = (group + 8 (r & 1), tig + 4 (r >> 1)); B register r holds (k, n) =
// (tig + 4 r, group); C register r holds (group + 8 (r >> 1), 2 tig + (r & 1)). Not volatile, one instruction
// per asm: the compiler may interleave independent tiles.
__device__ __forceinline__ void mma_tf32_m16n8k8(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// x rounded to TF32 (10 explicit mantissa bits, to nearest, ties away from zero), as cvt.rna.tf32.f32 does;
// host-callable so that CPU tests can check what the kernels feed the tensor cores
__host__ __device__ inline float tf32_round(float x) {
#ifdef __CUDA_ARCH__
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return __uint_as_float(r);
#else
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & 0xffffe000u;   // finite: round the 13 low bits away
    float r;
    memcpy(&r, &u, 4);
    return r;
#endif
}

// 3xTF32: x = hi + lo, both rounded to TF32; a . b ~ ahi bhi + ahi blo + alo bhi (alo blo, ~2^-22 relative,
// dropped) is accurate to about FP32's rounding for three mma instead of one
__host__ __device__ __forceinline__ void tf32_split(float x, float& hi, float& lo) {
    hi = tf32_round(x);
    lo = tf32_round(x - hi);
}

// The same split in two integer instructions: hi = x with its 13 low mantissa bits cleared (a TF32 value), lo =
// x - hi exactly (|lo| < 2^-10 |x|), of which the mma reads the top 10 mantissa bits. The three products then
// miss at most 3 * 2^-20 |a b|; cvt.rna compiles to a longer integer sequence, which counts where every value of
// a tile is split on the fly.
__device__ __forceinline__ void tf32_split_fast(float x, uint32_t& hi, uint32_t& lo) {
    const uint32_t h = __float_as_uint(x) & 0xffffe000u;
    hi = h;
    lo = __float_as_uint(x - __uint_as_float(h));
}

// ----------------------------------------------------------------------------------------------
// The loop every op's main runs. First every requested version is asked whether it can run the shape:
// a version named on the command line that cannot is an error (exit 2, naming its constraint and the
// versions that can); `all` lists the versions it skips and exits 2 when none can run. Then each version
// is checked at every block size (outputs poisoned first) and timed at every block size. Returns the
// exit code: 1 if any check failed.

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
    std::function<double(int kernel, int block)> flops_for, bytes_for;   // optional: a version's own counts
};

// The requested versions that can run, after the errors: a version named on the command line that cannot
// run exits 2 with its reason and the versions that can; `all` exits 2 when none can. `print` lists the
// versions `all` skips. An op may call this before any work (print = false) so that the error comes first.
inline std::vector<int> select_versions(const Cli& cli, const std::function<std::string(int)>& skip_reason, bool print) {
    std::string can;
    for (int k = 1; k <= cli.num_kernels; k++)
        if (!skip_reason || skip_reason(k).empty()) can += (can.empty() ? "" : ", ") + std::to_string(k);
    if (can.empty()) can = "none";
    std::vector<int> run;
    for (int k : cli.kernels) {
        const std::string why = skip_reason ? skip_reason(k) : "";
        if (why.empty()) { run.push_back(k); continue; }
        if (!cli.all) fail_args("version %d cannot run here: %s (versions that can: %s)", k, why.c_str(), can.c_str());
        if (print) printf("version %d: skipped, %s\n", k, why.c_str());
    }
    if (run.empty()) fail_args("no version can run here (versions 1..%d all skipped; the first: %s)", cli.num_kernels,
                               skip_reason ? skip_reason(cli.kernels[0]).c_str() : "");
    return run;
}

inline int run_versions(const Cli& cli, OpRunner& r) {
    const std::vector<int> run = select_versions(cli, r.skip_reason, true);
    bool all_pass = true;
    for (int k : run) {
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
            const double bytes = r.bytes_for ? r.bytes_for(k, b) : r.bytes, flops = r.flops_for ? r.flops_for(k, b) : r.flops;
            res.gbps = bytes / (t.median * 1e-3) / 1e9;
            res.pct_copy = 100.0 * res.gbps / copy_peak_gbps();
            if (flops > 0) {
                char buf[96];
                double gflops = flops / (t.median * 1e-3) / 1e9;
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
    if (run.size() < cli.kernels.size()) printf("\n%zu of %zu versions ran (the rest skipped above)", run.size(), cli.kernels.size());
    if (!cli.no_check) printf(all_pass ? "\nall checks passed\n" : "\nSOME CHECKS FAILED\n");
    else printf("\n");
    last_run_rc() = all_pass ? EXIT_PASS : EXIT_CHECK_FAILED;
    return last_run_rc();
}
