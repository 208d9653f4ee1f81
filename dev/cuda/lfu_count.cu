/*
LFU frequency counting (FBTT-Embedding's row cache, docs/tt_cache.md): every row id of a batch of embedding
lookups is counted in an open-addressing hash table on the GPU; the most frequent rows are cached later.

Table (FBTT's): keys int64[H] (-1 = empty), counts int64[H]. A key's home slot: the MurmurHash3 64-bit
finaliser of the key, its high 32 bits h mapped to [0, H) by (h * H) >> 32. An insert probes home, home+1,
home+2 (mod H): it adds its count where the key is, or claims the first empty slot (atomicCAS) and adds there;
when all three slots hold other keys the access is dropped and added to `dropped`. Nothing empties a slot, so
a key sits in at most one slot and all its accesses are counted or all dropped, in any insertion order.
Input: --steps batches of B bags of L row ids in [0, E) (FBGEMM's Zipf recipe, uniform with --alpha 0),
step after step into the same table; lookups = steps*B*L. Default: FBTT's E = 200*220*250,
B 512, L 20, H = E (176 MB of table for 10,240 lookups a step).

Check. The GPU inserts in no fixed order, and where probe windows fill up, the order decides which keys are
kept. So the check tests what every order must give: each kept key appears once, in its probe window, with no
empty slot between its home and it, and with exactly its number of occurrences; empty slots have count 0;
each key not kept has a full window (three other keys) and `dropped` is the sum of their occurrences. When
nothing is dropped (H = E at the bench sizes) this is equality of the (key, count) multisets with the
sequential CPU reference (insertion in lookup order), whose drop count is printed alongside.
Timing: the table is reset to empty before every sample, outside the timed region (a 176 MB memset at H = E);
a sample times all the steps. Rate: minserts_per_s = lookups / time.
Fewest bytes, per access (the table is mostly untouched memory: H does not enter):
  bytes = 8 * lookups (row ids) + 32 * (distinct keys of each step, summed: a key and a count read and written)

Versions. H200, 2026-12-02, median ms at the best block (minserts/s), Zipf 1.15 unless named
(results/logs/2026-12-02_bench_tt_cache_lfu_count.log):
                                                     FBTT's batch (10,240)   uniform    2,097,152 lookups
  1  FBTT's insert: one thread per lookup, atomicCAS     0.0051 (2000)          0.0060     0.1391 (15073)
     probing, atomicAdd 1; a hot row costs one atomic pair per occurrence, serialised in L2   (default)
  2  the step deduplicated first: CUB radix sort (the    0.0433 (236)           0.0478     0.1164 (18019)
     bits of E only) + run-length encode, one atomicAdd(count) per distinct key; a chain of launches
  3  one kernel: each block deduplicates its chunk (4    0.0065 (1584)          0.0115     0.0265 (79150)
     lookups a thread) in a shared-memory hash table, then inserts each distinct key once
  retired (no gain at 2M lookups): each key's count prefetched into L2 beside its claim, 0.0320 against 3's
     0.0304 (`git show 94d5ca3:dev/cuda/lfu_count.cu`, its version 4); 32-bit keys in the shared table (not
     kept), 0.0261 against 0.0263 (results/logs/2026-12-02_lfu_count_32bit_keys_build_vs_v3.log).
Lessons: at FBTT's batch the whole step is a few microseconds of launch and L2 latency, and one kernel of
plain atomics (1) wins; deduplication pays once hot rows repeat thousands of times in a step (3 is 5.25x 1 at
2M lookups). CUB's sort chain (2) costs ~40 us of launches at any size here. Version 3's probe loop compares
against a local copy of the key: the same algorithm compiled to a schedule 13% faster (0.0304 -> 0.0263 ms).

Compile and run:
  make lfu_count && ./lfu_count all              (Zipf 1.15; --alpha 0 for uniform ids, --steps 10)
*/
#include "common.h"

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_run_length_encode.cuh>
#include <unistd.h>
#include <unordered_set>

static const int64_t LFU_COUNT_EMPTY = -1;   // an empty slot's key
static const int LFU_COUNT_MAX_PROBES = 3;   // FBTT's probe window
static const int LFU_COUNT_IPT = 4;          // versions 3-4: lookups per thread in a block's chunk

// ----------------------------------------------------------------------------------------------
// the table's arithmetic, shared by the CPU reference, the kernels and the later cache stages

// home slot in [0, H), H <= 2^32: the high 32 bits of MurmurHash3's fmix64, scaled without a division
__host__ __device__ inline uint64_t lfu_count_slot(int64_t key, uint64_t H) {
    uint64_t h = (uint64_t)key;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    return ((h >> 32) * H) >> 32;
}

__host__ __device__ inline uint64_t lfu_count_next(uint64_t s, uint64_t H) { return s + 1 == H ? 0 : s + 1; }

// The slot holding `key`, or -1. It stops at the first empty slot: no slot is ever emptied while counting, so
// no key lies past one (FBTT's find tests the query key, not the slot, against -1, so a key that is not there
// always costs all three probes). `probes`, if given, returns the number of slots read.
__host__ __device__ inline int64_t lfu_count_find(const int64_t* keys, uint64_t H, int64_t key, int* probes = nullptr) {
    int p = 0;
    int64_t found = -1;
    uint64_t s = lfu_count_slot(key, H);
    while (key >= 0 && p < LFU_COUNT_MAX_PROBES) {
        int64_t k = keys[s];
        p++;
        if (k == key) { found = (int64_t)s; break; }
        if (k == LFU_COUNT_EMPTY) break;
        s = lfu_count_next(s, H);
    }
    if (probes) *probes = p;
    return found;
}

// `count` keys whose home slot is `home`, the smallest from `from` up (the tests build collisions with them)
inline std::vector<int64_t> lfu_count_keys_with_home(uint64_t home, uint64_t H, int count, int64_t from = 0) {
    std::vector<int64_t> out;
    for (int64_t k = from; (int)out.size() < count; k++)
        if (lfu_count_slot(k, H) == home) out.push_back(k);
    return out;
}

// ----------------------------------------------------------------------------------------------
// CPU reference: the lookups inserted one by one, in order

struct LfuCountHostTable {
    std::vector<int64_t> keys, counts;
    int64_t dropped = 0;
    explicit LfuCountHostTable(uint64_t H) : keys(H, LFU_COUNT_EMPTY), counts(H, 0) {}
};

void lfu_count_cpu(LfuCountHostTable& t, const int64_t* idx, int64_t n) {
    const uint64_t H = t.keys.size();
    for (int64_t i = 0; i < n; i++) {
        uint64_t s = lfu_count_slot(idx[i], H);
        int p = 0;
        while (p < LFU_COUNT_MAX_PROBES && t.keys[s] != LFU_COUNT_EMPTY && t.keys[s] != idx[i]) { s = lfu_count_next(s, H); p++; }
        if (p == LFU_COUNT_MAX_PROBES) { t.dropped++; continue; }
        t.keys[s] = idx[i];
        t.counts[s]++;
    }
}

// Row ids must lie in [0, E): a negative id would collide with the empty marker. "" when they do.
std::string lfu_count_validate_keys(const int64_t* idx, int64_t n, int64_t E) {
    for (int64_t i = 0; i < n; i++)
        if (idx[i] < 0 || idx[i] >= E)
            return "lookup " + std::to_string(i) + " = " + std::to_string(idx[i]) + " is outside [0, E = " + std::to_string(E) + ")";
    return "";
}

std::unordered_map<int64_t, int64_t> lfu_count_occurrences(const int64_t* idx, int64_t n) {
    std::unordered_map<int64_t, int64_t> occ;
    for (int64_t i = 0; i < n; i++) occ[idx[i]]++;
    return occ;
}

// The check (see the header): "" when the table is one that some insertion order of the lookups produces,
// else the first broken property. `occ`: every key's number of occurrences.
std::string lfu_count_check_table(const int64_t* keys, const int64_t* counts, uint64_t H, int64_t dropped,
                                  const std::unordered_map<int64_t, int64_t>& occ, int64_t* kept = nullptr) {
    auto at = [](const char* what, uint64_t s) { return std::string(what) + " at slot " + std::to_string(s) + ": "; };
    std::unordered_map<int64_t, uint64_t> where;
    for (uint64_t s = 0; s < H; s++) {
        const int64_t k = keys[s], c = counts[s];
        if (k == LFU_COUNT_EMPTY) {
            if (c != 0) return at("empty slot", s) + "count " + std::to_string(c) + ", expected 0";
            continue;
        }
        const std::string key = "key " + std::to_string(k);
        auto it = occ.find(k);
        if (it == occ.end()) return at(key.c_str(), s) + "never looked up";
        if (c != it->second) return at(key.c_str(), s) + "count " + std::to_string(c) + ", expected its " + std::to_string(it->second) + " occurrences";
        if (!where.emplace(k, s).second) return at(key.c_str(), s) + "also at slot " + std::to_string(where[k]);
        uint64_t home = lfu_count_slot(k, H), d = (s + H - home) % H;
        if (d >= (uint64_t)std::min<uint64_t>(LFU_COUNT_MAX_PROBES, H))
            return at(key.c_str(), s) + "outside its probe window (home slot " + std::to_string(home) + ")";
        for (uint64_t j = 0, q = home; j < d; j++, q = lfu_count_next(q, H))
            if (keys[q] == LFU_COUNT_EMPTY) return at(key.c_str(), s) + "past the empty slot " + std::to_string(q);
    }
    int64_t lost = 0;
    for (const auto& kv : occ) {
        if (where.count(kv.first)) continue;
        uint64_t q = lfu_count_slot(kv.first, H);
        for (int p = 0; p < LFU_COUNT_MAX_PROBES; p++, q = lfu_count_next(q, H))
            if (keys[q] == LFU_COUNT_EMPTY)
                return "key " + std::to_string(kv.first) + " is missing, but its probe window has the empty slot " + std::to_string(q);
        lost += kv.second;
    }
    if (dropped != lost)
        return "dropped = " + std::to_string(dropped) + ", but the keys not in the table have " + std::to_string(lost) + " occurrences";
    if (kept) *kept = (int64_t)where.size();
    return "";
}

// ----------------------------------------------------------------------------------------------
// GPU kernels

struct LfuCountDeviceTable {
    int64_t* keys;
    int64_t* counts;
    uint64_t H;
    unsigned long long* dropped;
};

__device__ __forceinline__ int64_t lfu_count_claim(const LfuCountDeviceTable& t, uint64_t s, int64_t key) {
    return (int64_t)atomicCAS((unsigned long long*)(t.keys + s), (unsigned long long)LFU_COUNT_EMPTY, (unsigned long long)key);
}

// The rest of an insert of `c` accesses of `key` whose first claim, at slot s, returned `old`: add c where the
// key is, claim the next slot, or drop c after the third. Versions 3-4 issue many first claims before this.
__device__ void lfu_count_finish(const LfuCountDeviceTable& t, int64_t key, unsigned long long c, uint64_t s, int64_t old) {
    for (int p = 1;; p++) {
        if (old == LFU_COUNT_EMPTY || old == key) { atomicAdd((unsigned long long*)(t.counts + s), c); return; }
        if (p == LFU_COUNT_MAX_PROBES) break;
        s = lfu_count_next(s, t.H);
        old = lfu_count_claim(t, s, key);
    }
    atomicAdd(t.dropped, c);
}

__device__ void lfu_count_insert(const LfuCountDeviceTable& t, int64_t key, unsigned long long c) {
    uint64_t s = lfu_count_slot(key, t.H);
    lfu_count_finish(t, key, c, s, lfu_count_claim(t, s, key));
}

// Version 1, FBTT's insert: one thread per lookup; claim-or-match with atomicCAS over at most three slots,
// then atomicAdd 1. Two dependent L2 round trips per lookup, and a row that is in every bag (Zipf: the top row
// is in all 512) sends all its atomics to one key and one count, which L2 performs one after another.
__global__ void lfu_count_kernel1(const int64_t* __restrict__ idx, int64_t n, LfuCountDeviceTable t) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) lfu_count_insert(t, idx[i], 1);
}

// Version 2's last step: one thread per run of equal keys in the sorted step (the run count stays on the
// device: the grid covers n, threads past it return), each key inserted once with its run length.
__global__ void lfu_count_kernel2(const int64_t* __restrict__ unique, const int* __restrict__ run_lengths,
                                  const int* __restrict__ num_runs, LfuCountDeviceTable t) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < *num_runs) lfu_count_insert(t, unique[i], (unsigned long long)run_lengths[i]);
}

// Version 3: a block takes a chunk of LFU_COUNT_IPT * blockDim lookups and counts
// them first in a shared-memory table of twice as many slots (so it is at most half full and probing always
// ends), with no launch and no sort: one kernel per step. A hot row then costs one global insert per block
// instead of one per occurrence. In the global phase each thread owns 2 * LFU_COUNT_IPT shared slots and
// issues the first claims of all of them before it looks at any result, so their L2/DRAM round trips overlap.
__global__ void __launch_bounds__(1024) lfu_count_kernel3(const int64_t* __restrict__ idx, int64_t n, LfuCountDeviceTable t) {
    extern __shared__ int64_t lfu_count_smem[];
    constexpr int R = 2 * LFU_COUNT_IPT;
    const uint64_t S = (uint64_t)R * blockDim.x;
    int64_t* s_keys = lfu_count_smem;
    unsigned* s_counts = (unsigned*)(s_keys + S);

    int64_t key[LFU_COUNT_IPT];   // loads issued first; the shared table is cleared while they are in flight
    const int64_t base = (int64_t)blockIdx.x * LFU_COUNT_IPT * blockDim.x + threadIdx.x;
#pragma unroll
    for (int j = 0; j < LFU_COUNT_IPT; j++) {
        int64_t i = base + (int64_t)j * blockDim.x;
        key[j] = i < n ? idx[i] : LFU_COUNT_EMPTY;
    }
    for (uint64_t s = threadIdx.x; s < S; s += blockDim.x) { s_keys[s] = LFU_COUNT_EMPTY; s_counts[s] = 0; }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < LFU_COUNT_IPT; j++) {
        if (key[j] == LFU_COUNT_EMPTY) continue;
        const int64_t kj = key[j];   // compared as a local, not key[j]: ptxas schedules the loop 13% faster (notes)
        for (uint64_t s = lfu_count_slot(key[j], S);; s = lfu_count_next(s, S)) {
            const int64_t old = (int64_t)atomicCAS((unsigned long long*)(s_keys + s), (unsigned long long)LFU_COUNT_EMPTY,
                                                   (unsigned long long)kj);
            if (old == LFU_COUNT_EMPTY || old == kj) { atomicAdd(s_counts + s, 1u); break; }
        }
    }
    __syncthreads();

    int64_t k[R], old[R] = {};
    uint64_t home[R] = {};
#pragma unroll
    for (int r = 0; r < R; r++) {
        k[r] = s_keys[threadIdx.x + r * blockDim.x];
        if (k[r] == LFU_COUNT_EMPTY) continue;
        home[r] = lfu_count_slot(k[r], t.H);
        old[r] = lfu_count_claim(t, home[r], k[r]);
    }
#pragma unroll
    for (int r = 0; r < R; r++)
        if (k[r] != LFU_COUNT_EMPTY) lfu_count_finish(t, k[r], s_counts[threadIdx.x + r * blockDim.x], home[r], old[r]);
}

// ----------------------------------------------------------------------------------------------
// launchers and dispatcher

// version 2's buffers, sized once for a step of n lookups (nothing is allocated in the timed launches)
struct LfuCountWorkspace {
    void* temp = nullptr;
    size_t temp_bytes = 0;
    int64_t *sorted = nullptr, *unique = nullptr;
    int *run_lengths = nullptr, *num_runs = nullptr;
    int end_bit = 1;   // row ids are < E: the sort looks at bits [0, end_bit) only
};

static size_t lfu_count_smem_bytes(int block_size) { return (size_t)2 * LFU_COUNT_IPT * block_size * (sizeof(int64_t) + sizeof(unsigned)); }

LfuCountWorkspace lfu_count_workspace(int64_t n, int64_t E) {
    LfuCountWorkspace w;
    while (w.end_bit < 63 && ((E - 1) >> w.end_bit) != 0) w.end_bit++;
    size_t sort_bytes = 0, rle_bytes = 0;
    cudaCheck(cub::DeviceRadixSort::SortKeys(nullptr, sort_bytes, (const int64_t*)nullptr, (int64_t*)nullptr, (int)n, 0, w.end_bit));
    cudaCheck(cub::DeviceRunLengthEncode::Encode(nullptr, rle_bytes, (const int64_t*)nullptr, (int64_t*)nullptr, (int*)nullptr,
                                                 (int*)nullptr, (int)n));
    w.temp_bytes = std::max(sort_bytes, rle_bytes);
    w.temp = device_alloc<char>(w.temp_bytes);
    w.sorted = device_alloc<int64_t>(n);
    w.unique = device_alloc<int64_t>(n);
    w.run_lengths = device_alloc<int>(n);
    w.num_runs = device_alloc<int>(1);
    const int max_smem = (int)lfu_count_smem_bytes(1024);
    cudaCheck(cudaFuncSetAttribute(lfu_count_kernel3, cudaFuncAttributeMaxDynamicSharedMemorySize, max_smem));
    return w;
}

void lfu_count_free(LfuCountWorkspace& w) {
    for (void* p : {w.temp, (void*)w.sorted, (void*)w.unique, (void*)w.run_lengths, (void*)w.num_runs}) cudaCheck(cudaFree(p));
}

// one step: the n lookups at idx inserted into t
void lfu_count(int kernel_num, const int64_t* idx, int64_t n, const LfuCountDeviceTable& t, LfuCountWorkspace& w, int block_size) {
    const unsigned grid = (unsigned)ceil_div<int64_t>(n, block_size);
    const unsigned chunks = (unsigned)ceil_div<int64_t>(n, (int64_t)LFU_COUNT_IPT * block_size);
    switch (kernel_num) {
        case 1: lfu_count_kernel1<<<grid, block_size>>>(idx, n, t); break;
        case 2: {
            size_t bytes = w.temp_bytes;
            cudaCheck(cub::DeviceRadixSort::SortKeys(w.temp, bytes, idx, w.sorted, (int)n, 0, w.end_bit));
            bytes = w.temp_bytes;
            cudaCheck(cub::DeviceRunLengthEncode::Encode(w.temp, bytes, w.sorted, w.unique, w.run_lengths, w.num_runs, (int)n));
            lfu_count_kernel2<<<grid, block_size>>>(w.unique, w.run_lengths, w.num_runs, t);
            break;
        }
        case 3: lfu_count_kernel3<<<chunks, block_size, lfu_count_smem_bytes(block_size)>>>(idx, n, t); break;
        default: fail_args("lfu_count has no version %d", kernel_num);
    }
}

// ----------------------------------------------------------------------------------------------

#ifndef NO_MAIN
// the bench: its inputs, the device table, and the check's expectations
struct LfuCountRun {
    int64_t E = 200LL * 220 * 250, H = -1;      // H = -1: H = E (FBTT's default)
    int B = 512, L = 20, steps = 1;
    double alpha = 1.15;
    int64_t n = 0, total = 0, distinct = 0;     // lookups a step, in all steps; distinct keys summed over steps
    std::vector<int64_t> idx;
    std::unordered_map<int64_t, int64_t> occ;   // each key's occurrences (empty with --no-check)
    int64_t* d_idx = nullptr;
    LfuCountDeviceTable t{};
    LfuCountWorkspace w;
};

// the flags and their constraints (exit 2 naming the broken one), then the host memory the check needs
void lfu_count_parse(LfuCountRun& r, Cli& cli, int argc, char** argv) {
    cli.add_int64("E", &r.E, "rows of the embedding table (row ids are in [0, E))");
    cli.add_int("B", &r.B, "bags per step");
    cli.add_int("L", &r.L, "lookups per bag");
    cli.add_int64("H", &r.H, "hash-table slots; -1: H = E (FBTT's default)");
    cli.add_double("alpha", &r.alpha, "Zipf exponent of the row ids (FBGEMM's recipe); <= 1 gives uniform ids");
    cli.add_int("steps", &r.steps, "batches counted one after another into the same table (one timed sample)");
    cli.constraints = "  E, B, L, steps >= 1; B*L*steps < 2^31; 1 <= H <= 2^32 (the slot function scales a 32-bit hash);\n"
                      "  a bag repeats rows where E < L; a key's probe window is its home slot and the next two";
    cli.parse(argc, argv);
    if (r.H == -1) r.H = r.E;
    require(r.E >= 1 && r.B >= 1 && r.L >= 1 && r.steps >= 1, "E, B, L, steps must be >= 1 (got %lld, %d, %d, %d)", (long long)r.E, r.B,
            r.L, r.steps);
    require(r.H >= 1 && r.H <= (1LL << 32), "H (%lld) must be 1..2^32 (or -1 for H = E)", (long long)r.H);
    r.n = (int64_t)r.B * r.L;
    r.total = r.n * r.steps;
    require(r.total < INT32_MAX, "steps*B*L (%lld) must be < 2^31", (long long)r.total);
    const double host_bytes = (double)sysconf(_SC_PHYS_PAGES) * sysconf(_SC_PAGE_SIZE);
    require(cli.no_check || 32.0 * r.H < 0.8 * host_bytes,
            "the check keeps two host copies of the table (32 B x H = %.1f GB): more than 80%% of this host's %.1f GB (use --no-check)",
            32.0 * r.H / 1e9, host_bytes / 1e9);
}

// every step's row ids (one Zipf map for all steps), validated, and the distinct keys of each step
void lfu_count_make_inputs(LfuCountRun& r, uint64_t seed) {
    Rng rng(seed);
    r.idx = make_bag_indices((int64_t)r.steps * r.B, r.L, r.E, r.alpha, rng);
    std::string bad = lfu_count_validate_keys(r.idx.data(), r.total, r.E);
    require(bad.empty(), "%s", bad.c_str());
    for (int s = 0; s < r.steps; s++)
        r.distinct += (int64_t)std::unordered_set<int64_t>(r.idx.begin() + s * r.n, r.idx.begin() + (s + 1) * r.n).size();
}

// the device memory it needs against what is free (exit 2 if not), then the table, the row ids and version 2's buffers
void lfu_count_setup_device(LfuCountRun& r) {
    size_t free_b = 0, total_b = 0;
    cudaCheck(cudaMemGetInfo(&free_b, &total_b));
    const double need = 16.0 * r.H + 8.0 * r.total + 30.0 * r.n + (3ull << 30);   // table, ids, version 2, the bench's own 3 GB
    require(need < (double)free_b, "the table (16 B x H = %.2f GB) with the inputs and the bench's buffers needs %.2f GB; the device has %.2f GB free",
            16.0 * r.H / 1e9, need / 1e9, free_b / 1e9);
    r.d_idx = device_upload(r.idx);
    r.t = {device_alloc<int64_t>(r.H), device_alloc<int64_t>(r.H), (uint64_t)r.H, device_alloc<unsigned long long>(1)};
    r.w = lfu_count_workspace(r.n, r.E);
}

// the table emptied: every key -1, every count and `dropped` 0
void lfu_count_reset(const LfuCountRun& r) {
    cudaCheck(cudaMemsetAsync(r.t.keys, 0xFF, (size_t)r.H * sizeof(int64_t)));
    cudaCheck(cudaMemsetAsync(r.t.counts, 0, (size_t)r.H * sizeof(int64_t)));
    cudaCheck(cudaMemsetAsync(r.t.dropped, 0, sizeof(unsigned long long)));
}

// the device table against what every insertion order must give (the header's Check); prints one line
bool lfu_count_check(const LfuCountRun& r) {
    std::vector<int64_t> keys = device_download(r.t.keys, r.H), counts = device_download(r.t.counts, r.H);
    int64_t dropped = (int64_t)device_download(r.t.dropped, 1)[0], kept = 0;
    std::string why = lfu_count_check_table(keys.data(), counts.data(), (uint64_t)r.H, dropped, r.occ, &kept);
    if (why.empty()) printf("  table            ok    (%lld keys kept with their counts, %lld accesses dropped)\n", (long long)kept, (long long)dropped);
    else printf("  table            FAIL  %s\n", why.c_str());
    return why.empty();
}

void lfu_count_dump(const LfuCountRun& r, const std::string& dir) {
    write_npy(dir, "lfu_count_idx", r.idx.data(), {r.steps, r.n});
    write_npy(dir, "lfu_count_keys", device_download(r.t.keys, r.H).data(), {r.H});
    write_npy(dir, "lfu_count_counts", device_download(r.t.counts, r.H).data(), {r.H});
    printf("dumped lfu_count_{idx,keys,counts}.npy to %s\n", dir.c_str());
}

int main(int argc, char** argv) {
    LfuCountRun r;
    Cli cli("lfu_count", "LFU cache frequency counting: every lookup inserted into a GPU hash table (3-slot linear probing).", 3, 1);
    lfu_count_parse(r, cli, argc, argv);
    lfu_count_make_inputs(r, cli.seed);
    cuda_init();
    lfu_count_setup_device(r);
    if (!cli.no_check) {
        LfuCountHostTable ref((uint64_t)r.H);
        lfu_count_cpu(ref, r.idx.data(), r.total);
        r.occ = lfu_count_occurrences(r.idx.data(), r.total);
        printf("%lld lookups (%d steps), %zu distinct keys; sequential CPU reference: %lld accesses dropped\n",
               (long long)r.total, r.steps, r.occ.size(), (long long)ref.dropped);
    }
    char shape[160];
    snprintf(shape, sizeof shape, "E%lld,B%d,L%d,H%lld,alpha%g,steps%d", (long long)r.E, r.B, r.L, (long long)r.H, r.alpha > 1.0 ? r.alpha : 0.0, r.steps);
    double v1_ms = 0.0;
    OpRunner op;
    op.op = "lfu_count";
    op.shape = shape;
    op.bytes = 8.0 * r.total + 32.0 * r.distinct;
    op.prepare_check = [&] {
        lfu_count_reset(r);   // and version 2's scratch poisoned: stale contents must not help
        for (void* p : {(void*)r.w.sorted, (void*)r.w.unique}) poison(p, r.n * sizeof(int64_t));
        poison(r.w.run_lengths, r.n * sizeof(int));
        poison(r.w.num_runs, sizeof(int));
    };
    op.prepare_timing = [&] { lfu_count_reset(r); };
    op.launch = [&](int k, int block) { for (int s = 0; s < r.steps; s++) lfu_count(k, r.d_idx + s * r.n, r.n, r.t, r.w, block); };
    op.check = [&](int, int) { return lfu_count_check(r); };
    op.extra = [&](int k, int, double ms) {
        if (k == 1 && (v1_ms == 0.0 || ms < v1_ms)) v1_ms = ms;
        char buf[96];
        int len = snprintf(buf, sizeof buf, "minserts_per_s=%.1f", r.total / (ms * 1e-3) / 1e6);
        if (k != 1 && v1_ms > 0.0) snprintf(buf + len, sizeof buf - len, " speedup_vs_v1=%.2f", v1_ms / ms);
        return std::string(buf);
    };
    int rc = run_versions(cli, op);
    if (!cli.dump_dir.empty()) lfu_count_dump(r, cli.dump_dir);
    lfu_count_free(r.w);
    for (void* p : {(void*)r.d_idx, (void*)r.t.keys, (void*)r.t.counts, (void*)r.t.dropped}) cudaCheck(cudaFree(p));
    return rc;
}
#endif
