/*
Embedding bags, forward (FBGEMM's split table-batched embedding bag, "TBE"; PyTorch's nn.EmbeddingBag
for one table): T tables are each looked up by B bags of row ids, and each bag's rows are summed (or
averaged) into one D_t-wide slice of the bag's output row; --pooling none (FBGEMM's nobag, sequence
embeddings) writes each lookup's row as its own output row instead.

Layout (FBGEMM's; the backward, embedding_bag_backward.cu, takes the same inputs):
  weights          one flat array of fp32, fp16 or bf16 (--weights; w bytes each); table t (E_t rows of
                   D_t elements, D_t % 4 == 0, dims may differ) starts at weights_offsets[t] (int64, a
                   multiple of 4: 16-byte aligned rows)
  D_offsets[T+1]   int32 running sum of D_t; total_D = D_offsets[T]
  indices[total_L] int64 row ids; offsets[T*B+1] int64, table-major: bag (t, b) is
                   indices[offsets[t*B + b] .. offsets[t*B + b + 1]); bags may be empty
  per_sample_weights[total_L] fp32, optional ("weighted")
  out[B][total_D]  fp32: out[b][D_offsets[t] + d] = scale * sum_{l in bag(t,b)} w_l * W_t[indices[l]][d]
                   (w_l = 1 unweighted; scale = 1/L_bag for MEAN, 1 for SUM; an empty bag gives 0)
  nobag            out[N][D] fp32, out[l] = W_t[indices[l]]: one D for every table (FBGEMM's nobag layout;
                   mixed dims exit 2) and no per-sample weights (FBGEMM's nobag kernels take none)
Accumulation and the output are fp32; every version is templated on the weights' type (half rows are
8-byte vectors: half the bytes). The _bf16 build defaults to --weights bf16.

Fewest bytes (every looked-up row read once per lookup: nothing deduplicates without a sort):
  bytes = sum_t L_t * D_t * w + 8 * total_L + 8 * (T*B + 1) + 4 * B * total_D
        + 4 * total_L (weighted) + 4 * (T+1) + 8 * T
  = 178.9 MB at FBGEMM's default size (T=32 E=1e5 D=128 B=512 L=20, fp32), 1124.6 MB at the large size
  (T=1 E=1e6 D=128 B=65536 L=32). Zipf inputs re-read hot rows from L2, so they pass 100% by this count.
  FBGEMM's benchmark figure, rw = 4*B*sum(D_t) + w*B*sum(D_t)*L over the time, is printed
  as `fbgemm_gbps=`. nobag: N * D * (w + 4) + 8 * N + 8 * (T+1) + 4 * (T+1) + 8 * T
  = 338.2 MB at the default size (only the table boundaries of the offsets are read); FBGEMM's rw has the
  output L times larger.

Versions. H200, 2026-11-29, best block, median ms (% of the copy bandwidth measured in the same process);
every number is in results/h200.md.
                                                               default size       default   large size
                                                               uniform            Zipf 1.15 uniform
  1  one thread per (bag, column), scalar loop over the bag    0.0651 (64.9%)     0.0404    0.3154 (84.3%)
  2  one warp per bag, a lane owns 4 columns (16-byte loads)   0.0560 (75.4%)     0.0242    0.2631 (101.1%)
  3  several bags per warp for small D (lanes per bag: D/4)    0.0598 (70.7%)     0.0270    0.2782 (95.6%)
  4  bag indices shuffled across lanes, 8 row loads in flight  0.0545 (77.6%)     0.0231    0.2561 (103.8%)
  5  version 4 with a warp per bag at any D (sub-warp rows)    0.0546 (77.4%)     0.0231    0.2562 (103.8%)
  6  version 5 with the L2::256B prefetch hint (the default)   0.0529 (79.9%)     0.0203    0.2587 (102.8%)
  7  nobag only: the gather, G lanes per row, 4 rows in flight   0.0869 (91.5%) 2026-12-01; Zipf 0.0526 (default, nobag)
PyTorch's F.embedding_bag, 2026-11-30: 0.1082 / 0.0813 / 0.6136 ms; other sizes, peers: results/h200.md.

Lessons:
- Rows in flight decide it: versions 4-6 keep 8 row loads per lane outstanding and beat the plain warp
  per bag (2) by up to 16%; several bags per warp (3) does not pay at D = 128.
- The large uniform size reads at the copy roof; there the 256-byte hint changes nothing, while at the
  default size (a ~50 us kernel) and on Zipf inputs it takes 3-12% off. The same hint slowed the backward.
- Half rows stay raw (2 registers) until summed: widened at the load they took 92 registers (fp16 0.0378 -> 0.0347).
- The default write flush leaves dirty L2 lines whose write-back lands in the timed kernel. Under it a bare gather
  of random rows (scripts/row_roof.cu) reaches 82% of copy with 512-byte rows and 69% with 256 on the H200, where
  version 6 takes 76% and 64%; on an H100 83% / 72%, and version 6 82% / 72%. After a read flush: 93% / 89% (H100).

Compile and run:
  make embedding_bag_forward       && ./embedding_bag_forward all
  ./embedding_bag_forward all --weights fp16 --T 4 --Ds 4,12,132,260 --B 37 --L 13     (half rows)
  ./embedding_bag_forward all --T 1 --E 1000000 --D 128 --B 65536 --L 32 --alpha 0     (the large size)
  ./embedding_bag_forward --pooling none                                   (version 7, one row per lookup)
*/
#include "embedding_bag.h"

// Tolerances: the GPU sums in fp32 (in bag order per lane or row slot), the reference in double. The
// error of an fp32 sum of L terms is at most about L * 2^-24 * sum|terms| and in practice ~sqrt(L) of
// that; the CPU test runs the fp32 orders of versions 1-5 against these at the GPU cases' sizes. The
// output is fp32 whatever the weights and the reference reads the same (rounded) half weights, so the
// tolerances are the same for fp16 and bf16.
static const float EMBEDDING_BAG_FORWARD_ATOL = 5e-5f, EMBEDDING_BAG_FORWARD_RTOL = 2e-5f;

// ----------------------------------------------------------------------------------------------
// inputs: embedding_bag.h (shared with the backward); here the tables' weights, the forward's own
// validation, bytes

// The tables' weights, uniform in [-1, 1) on a grid of 2^-23 (exact in fp32), rounded once to the weights'
// type (to nearest; held as the fp32 values, which the reference reads). Two weights per 64-bit draw (24
// bits each): the default size has 410M weights, the dense case 704M.
inline void embedding_bag_forward_round_weights(std::vector<float>& w, EmbeddingBagWeights wt) {
    if (wt != EmbeddingBagWeights::fp32)
        for (float& x : w) x = embedding_bag_half_to_float(embedding_bag_half_bits(x, wt, false), wt);
}
inline std::vector<float> embedding_bag_forward_make_weights(const EmbeddingBagInputs& in, uint64_t seed,
                                                             EmbeddingBagWeights wt = EmbeddingBagWeights::fp32) {
    Rng rng(seed ^ 0x5EED0F0E1647ull);
    std::vector<float> w((size_t)in.num_weights);
    const size_t n = w.size();
    for (size_t i = 0; i < n; i += 2) {
        const uint64_t r = rng.next();
        w[i] = (float)(r >> 40) * 0x1p-23f - 1.0f;
        if (i + 1 < n) w[i + 1] = (float)((r >> 16) & 0xFFFFFF) * 0x1p-23f - 1.0f;
    }
    embedding_bag_forward_round_weights(w, wt);
    return w;
}

// the tables on the device in their type (the values are exact in it)
inline void* embedding_bag_forward_upload_weights(const std::vector<float>& w, EmbeddingBagWeights wt) {
    if (wt == EmbeddingBagWeights::fp32) return device_upload(w);
    std::vector<uint16_t> h(w.size());
    for (size_t i = 0; i < w.size(); i++) h[i] = embedding_bag_half_bits(w[i], wt, false);
    return device_upload(h);
}

// embedding_bag_validate, and: versions 4 and 5 carry row ids in 32 bits. "" when fine.
inline std::string embedding_bag_forward_validate(const EmbeddingBagInputs& in) {
    for (size_t t = 0; t < in.E.size(); t++)
        if (in.E[t] > INT32_MAX)
            return "E of table " + std::to_string(t) + " (" + std::to_string(in.E[t]) + ") must be 1..2^31-1 (row ids travel as 32-bit in versions 4, 5)";
    return embedding_bag_validate(in);
}

// the fewest bytes of one call (the header's formula)
inline double embedding_bag_forward_bytes(const EmbeddingBagInputs& in, int wbytes = 4) {
    double bytes = 0.0;
    for (int t = 0; t < in.T; t++) {
        int64_t L_t = in.offsets[(int64_t)(t + 1) * in.B] - in.offsets[(int64_t)t * in.B];
        bytes += (double)L_t * in.D(t) * wbytes;
    }
    const double total_L = (double)in.indices.size();
    bytes += 8.0 * total_L + 8.0 * (in.nobag ? in.T + 1.0 : (double)in.T * in.B + 1);   // nobag: table boundaries only
    if (!in.per_sample_weights.empty()) bytes += 4.0 * total_L;
    bytes += 4.0 * (double)in.out_rows() * in.out_cols();
    bytes += 4.0 * (in.T + 1) + 8.0 * in.T;
    return bytes;
}

// FBGEMM benchmark's figure: output + B * sum(D) * L parameters at the nominal bag length L (nobag: the
// output is L times larger too)
inline double embedding_bag_forward_fbgemm_bytes(const EmbeddingBagInputs& in, int L, int wbytes = 4) {
    return 4.0 * in.B * in.total_D() * (in.nobag ? L : 1) + (double)wbytes * in.B * in.total_D() * L;
}

// ----------------------------------------------------------------------------------------------
// CPU reference: plain loops, sums in double

void embedding_bag_forward_cpu(float* out, const EmbeddingBagInputs& in, const float* weights) {
    const int total_D = in.total_D();
    if (in.nobag) {                          // out[l] = lookup l's row (one D for all tables)
        const int D = in.D(0);
        for (int t = 0; t < in.T; t++)
            for (int64_t l = in.offsets[(int64_t)t * in.B]; l < in.offsets[(int64_t)(t + 1) * in.B]; l++)
                for (int d = 0; d < D; d++) out[l * D + d] = weights[in.weights_offsets[t] + in.indices[l] * D + d];
        return;
    }
    std::vector<double> acc;
    for (int t = 0; t < in.T; t++) {
        const int D = in.D(t);
        acc.resize(D);
        for (int b = 0; b < in.B; b++) {
            const int64_t start = in.offsets[(int64_t)t * in.B + b], end = in.offsets[(int64_t)t * in.B + b + 1];
            std::fill(acc.begin(), acc.end(), 0.0);
            for (int64_t l = start; l < end; l++) {
                const double w = in.per_sample_weights.empty() ? 1.0 : in.per_sample_weights[l];
                const float* row = weights + in.weights_offsets[t] + in.indices[l] * D;
                for (int d = 0; d < D; d++) acc[d] += w * row[d];
            }
            const double scale = (in.mean && end > start) ? 1.0 / (double)(end - start) : 1.0;
            float* o = out + (int64_t)b * total_D + in.D_offsets[t];
            for (int d = 0; d < D; d++) o[d] = (float)(acc[d] * scale);
        }
    }
}

// ----------------------------------------------------------------------------------------------
// GPU kernels

// classes of tables for versions 4-6 (each class is one kernel instantiation): 0..4 hold the tables
// with G = 1, 2, 4, 8, 16 lanes per row, 5, 6, 7 those with G = 32 and NV = 1, 2, 4 vectors per lane
#define EMBEDDING_BAG_FORWARD_CLASSES 8
constexpr int EMBEDDING_BAG_FORWARD_CLASS_G[EMBEDDING_BAG_FORWARD_CLASSES] = {1, 2, 4, 8, 16, 32, 32, 32};
constexpr int EMBEDDING_BAG_FORWARD_CLASS_NV[EMBEDDING_BAG_FORWARD_CLASSES] = {1, 1, 1, 1, 1, 1, 2, 4};

// what every version gets: device pointers, sizes, and (host-made, see _plan) the tables ordered by
// class with each class's first position; max_D sizes the grid of version 3
struct EmbeddingBagForwardArgs {
    const void* weights;                                 // wtype elements (the kernels are templated on it)
    EmbeddingBagWeights wtype;
    const int64_t* weights_offsets;
    const int* D_offsets;
    const int64_t* indices;
    const int64_t* offsets;
    const float* per_sample_weights;   // nullptr: unweighted
    float* out;
    const int* table_order;                              // T table ids, grouped by class
    int class_begin[EMBEDDING_BAG_FORWARD_CLASSES + 1];  // class c: table_order[class_begin[c] .. class_begin[c+1])
    int T, B, total_D, max_D;
    int64_t max_lookups;                                 // the most lookups of one table: version 7's grid x
    bool mean;
};

// the table that owns output column c: the last t with D_offsets[t] <= c (binary search)
__host__ __device__ inline int embedding_bag_forward_table_of_column(const int* D_offsets, int T, int c) {
    int lo = 0, hi = T;                       // D_offsets[lo] <= c < D_offsets[hi]
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (D_offsets[mid] <= c) lo = mid; else hi = mid;
    }
    return lo;
}

// lanes that share one row: the power of two that covers its D/4 4-column vectors, at most a warp
__host__ __device__ inline int embedding_bag_forward_lanes_per_row(int D) {
    const int Dv = D / 4;
    int G = 1;
    while (G < Dv && G < 32) G *= 2;
    return G;
}

// 4-column vectors a lane holds per pass over the bag (versions 4, 5): 1, 2 or 4; D > 4*4*32 = 512
// takes several passes
__host__ __device__ inline int embedding_bag_forward_vecs_per_lane(int Dv, int G) {
    return Dv <= G ? 1 : (Dv <= 2 * G ? 2 : 4);
}

// the class of a table of D columns (the launchers of versions 4-6 instantiate the classes' G, NV)
__host__ __device__ inline int embedding_bag_forward_class(int D) {
    const int G = embedding_bag_forward_lanes_per_row(D);
    if (G < 32) {
        int c = 0;
        while ((1 << c) < G) c++;
        return c;
    }
    const int NV = embedding_bag_forward_vecs_per_lane(D / 4, 32);
    return NV == 1 ? 5 : (NV == 2 ? 6 : 7);
}

// the tables in class order (a counting sort of the class ids): made once on the host, outside timing
struct EmbeddingBagForwardPlan {
    std::vector<int> table_order;
    int class_begin[EMBEDDING_BAG_FORWARD_CLASSES + 1];
};
inline EmbeddingBagForwardPlan embedding_bag_forward_plan(const std::vector<int>& D_offsets) {
    EmbeddingBagForwardPlan p;
    const int T = (int)D_offsets.size() - 1;
    for (int c = 0, pos = 0; c < EMBEDDING_BAG_FORWARD_CLASSES; c++) {
        p.class_begin[c] = pos;
        for (int t = 0; t < T; t++)
            if (embedding_bag_forward_class(D_offsets[t + 1] - D_offsets[t]) == c) { p.table_order.push_back(t); pos++; }
    }
    p.class_begin[EMBEDDING_BAG_FORWARD_CLASSES] = T;
    return p;
}

// versions 3 and 4: the bag of a thread (b >= B: the thread idles) when G lanes share a bag, so that a
// warp holds 32/G bags; blocks are along x, tables along y
__host__ __device__ inline int64_t embedding_bag_forward_bag_of_thread(unsigned block_x, unsigned thread, unsigned block_dim, int G) {
    const int64_t warp = (int64_t)block_x * (block_dim / 32) + thread / 32;
    return warp * (32 / G) + (int)(thread % 32) / G;
}

// grid x of version 3: enough blocks for the table with the most lanes per bag (fewest bags per warp)
inline unsigned embedding_bag_forward_grid_x_groups(int B, int max_D, int block_size) {
    const int64_t bags_per_block = (int64_t)(block_size / 32) * (32 / embedding_bag_forward_lanes_per_row(max_D));
    return grid_x(ceil_div<int64_t>(B, bags_per_block), "embedding_bag_forward version 3");
}

// Four consecutive weights: one 16-byte load in fp32, one 8-byte load for half weights (half the bytes).
// Read-only path, default caching: hot rows (Zipf, the one-row input) should stay in L1/L2. A half vector
// stays in its raw 8 bytes (2 registers) until it is accumulated: converting at the load would hold 4
// registers per load in flight (ptxas, nvcc 13: version 4's G = 32 kernel took 92 registers for fp16 rows
// against 63 for fp32). bf16 is the top half of an fp32, so its conversion is a shift; fp16 converts two
// at a time.
template <class WT>
using EmbeddingBagForwardRaw = std::conditional_t<std::is_same_v<WT, float>, float4, uint2>;
__device__ __forceinline__ float4 embedding_bag_forward_to4(float4 x, const float*) { return x; }
__device__ __forceinline__ float4 embedding_bag_forward_to4(uint2 r, const __nv_bfloat16*) {
    return make_float4(__uint_as_float(r.x << 16), __uint_as_float(r.x & 0xFFFF0000u), __uint_as_float(r.y << 16), __uint_as_float(r.y & 0xFFFF0000u));
}
__device__ __forceinline__ float4 embedding_bag_forward_to4(uint2 r, const __half*) {
    const float2 lo = __half22float2(*reinterpret_cast<const __half2*>(&r.x)), hi = __half22float2(*reinterpret_cast<const __half2*>(&r.y));
    return make_float4(lo.x, lo.y, hi.x, hi.y);
}
__device__ __forceinline__ float4 embedding_bag_forward_load_raw(const float* p) { return __ldg(reinterpret_cast<const float4*>(p)); }
template <class WT>
__device__ __forceinline__ uint2 embedding_bag_forward_load_raw(const WT* p) { return __ldg(reinterpret_cast<const uint2*>(p)); }
template <class WT>
__device__ __forceinline__ float4 embedding_bag_forward_load4(const WT* p) { return embedding_bag_forward_to4(embedding_bag_forward_load_raw(p), p); }

// Version 6's row load: the same, with PTX's L2::256B prefetch-size hint, so a miss makes L2 fetch the
// 256-byte block around the vector from DRAM instead of its 32-byte sectors one request at a time. A row of
// D = 128 fp32 is two such blocks, read by the warp in one instruction.
__device__ __forceinline__ float4 embedding_bag_forward_load_raw_wide(const float* p) {
    float4 r;
    asm("ld.global.nc.L2::256B.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(r.x), "=f"(r.y), "=f"(r.z), "=f"(r.w) : "l"(p));
    return r;
}
template <class WT>
__device__ __forceinline__ uint2 embedding_bag_forward_load_raw_wide(const WT* p) {
    uint2 r;
    asm("ld.global.nc.L2::256B.v2.u32 {%0, %1}, [%2];" : "=r"(r.x), "=r"(r.y) : "l"(p));
    return r;
}
template <class WT>
__device__ __forceinline__ float4 embedding_bag_forward_load4_wide(const WT* p) {
    return embedding_bag_forward_to4(embedding_bag_forward_load_raw_wide(p), p);
}

// indices and per-sample weights are read once: streaming (evict-first) loads
__device__ __forceinline__ long long embedding_bag_forward_load_index(const int64_t* p) {
    return __ldcs(reinterpret_cast<const long long*>(p));
}

__device__ __forceinline__ void embedding_bag_forward_fma4(float4& acc, float w, const float4& x) {
    acc.x = fmaf(w, x.x, acc.x); acc.y = fmaf(w, x.y, acc.y); acc.z = fmaf(w, x.z, acc.z); acc.w = fmaf(w, x.w, acc.w);
}

// Version 1: one thread per output element (b, column). The column's table comes from a binary search
// over D_offsets; the thread walks the bag with 4-byte loads. Consecutive threads read consecutive
// columns of the same row (coalesced), but every thread re-reads the bag's offsets and indices and each
// row costs one load instruction per column.
template <class WT>
__global__ void embedding_bag_forward_kernel1(EmbeddingBagForwardArgs a) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (int64_t)a.B * a.total_D) return;
    const int64_t b = i / a.total_D;
    const int c = (int)(i - b * a.total_D);
    const int t = embedding_bag_forward_table_of_column(a.D_offsets, a.T, c);
    const int D = a.D_offsets[t + 1] - a.D_offsets[t], d = c - a.D_offsets[t];
    const int64_t bag = (int64_t)t * a.B + b;
    const int64_t start = a.offsets[bag], end = a.offsets[bag + 1];
    const WT* W = (const WT*)a.weights + a.weights_offsets[t] + d;
    float sum = 0.0f;
    for (int64_t l = start; l < end; l++) {
        const float w = a.per_sample_weights ? a.per_sample_weights[l] : 1.0f;
        sum = fmaf(w, embedding_bag_to_float(W[a.indices[l] * D]), sum);
    }
    if (a.mean && end > start) sum /= (float)(end - start);
    a.out[i] = sum;
}

// Version 2: one warp per bag. The bag's offsets and each index are loaded once per warp (a broadcast),
// and each lane owns 4 consecutive columns: one 16-byte load per row (fp32), a warp covers 128 columns
// of a row with 512 contiguous bytes. D > 128 loops over column blocks of 128 (re-reading the indices);
// D < 128 leaves lanes idle (version 3 fixes that).
template <class WT>
__global__ void embedding_bag_forward_kernel2(EmbeddingBagForwardArgs a) {
    const int lane = threadIdx.x % 32;
    const int64_t bag = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    if (bag >= (int64_t)a.T * a.B) return;   // the whole warp: blocks are multiples of 32
    const int t = (int)(bag / a.B);
    const int64_t b = bag - (int64_t)t * a.B;
    const int D0 = a.D_offsets[t], D = a.D_offsets[t + 1] - D0, Dv = D / 4;
    const int64_t start = a.offsets[bag], end = a.offsets[bag + 1];
    const WT* W = (const WT*)a.weights + a.weights_offsets[t];
    float* out = a.out + b * a.total_D + D0;
    const float scale = (a.mean && end > start) ? 1.0f / (float)(end - start) : 1.0f;
    for (int v = lane; v < Dv; v += 32) {
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
        for (int64_t l = start; l < end; l++) {
            const float w = a.per_sample_weights ? a.per_sample_weights[l] : 1.0f;
            embedding_bag_forward_fma4(acc, w, embedding_bag_forward_load4(W + a.indices[l] * D + 4 * v));
        }
        *reinterpret_cast<float4*>(out + 4 * v) = make_float4(acc.x * scale, acc.y * scale, acc.z * scale, acc.w * scale);
    }
}

// Version 3: several bags per warp for small D. A bag gets G = the power of two lanes covering D/4
// (D=64: 16 lanes, 2 bags per warp; D=4: 1 lane, 32 bags per warp), so no lane idles for want of
// columns. The table is blockIdx.y, so G is the same in the whole block; grid x is sized for the table
// with the largest G, and blocks a smaller-G table does not need exit at once. Otherwise version 2:
// each lane loads the index itself (groups of a warp read different indices in one instruction).
template <class WT>
__global__ void embedding_bag_forward_kernel3(EmbeddingBagForwardArgs a) {
    const int t = blockIdx.y;
    const int D0 = a.D_offsets[t], D = a.D_offsets[t + 1] - D0, Dv = D / 4;
    const int G = embedding_bag_forward_lanes_per_row(D);
    const int64_t b = embedding_bag_forward_bag_of_thread(blockIdx.x, threadIdx.x, blockDim.x, G);
    if (b >= a.B) return;                    // no shuffles here: a lane may leave alone
    const int g = (int)(threadIdx.x % 32) % G;
    const int64_t bag = (int64_t)t * a.B + b;
    const int64_t start = a.offsets[bag], end = a.offsets[bag + 1];
    const WT* W = (const WT*)a.weights + a.weights_offsets[t];
    float* out = a.out + b * a.total_D + D0;
    const float scale = (a.mean && end > start) ? 1.0f / (float)(end - start) : 1.0f;
    for (int v = g; v < Dv; v += G) {
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
        for (int64_t l = start; l < end; l++) {
            const float w = a.per_sample_weights ? a.per_sample_weights[l] : 1.0f;
            embedding_bag_forward_fma4(acc, w, embedding_bag_forward_load4(W + a.indices[l] * D + 4 * v));
        }
        *reinterpret_cast<float4*>(out + 4 * v) = make_float4(acc.x * scale, acc.y * scale, acc.z * scale, acc.w * scale);
    }
}

// 16-byte row loads each lane has in flight in versions 4-6 (rows per batch * vectors per row)
#define EMBEDDING_BAG_FORWARD_VECS_IN_FLIGHT 8

// what versions 4-6 need of bag (t, b) before its rows: the table's D, the bag's lookups [start, end), the
// table's rows, the bag's slice of the output and the MEAN scale
template <class WT>
struct EmbeddingBagForwardBag {
    int D;
    int64_t start, end;
    const WT* W;
    float* out;
    float scale;
};
template <class WT>
__device__ __forceinline__ EmbeddingBagForwardBag<WT> embedding_bag_forward_bag(const EmbeddingBagForwardArgs& a, int t, int64_t b) {
    const int64_t bag = (int64_t)t * a.B + b, start = a.offsets[bag], end = a.offsets[bag + 1];
    return {a.D_offsets[t + 1] - a.D_offsets[t], start, end, (const WT*)a.weights + a.weights_offsets[t], a.out + b * a.total_D + a.D_offsets[t],
            (a.mean && end > start) ? 1.0f / (float)(end - start) : 1.0f};
}

// a batch of ROWS rows (live[u]: row u is in the bag) into acc, columns v1 + k*G (k < NV) of the rows
// (vectors of 4): all ROWS * NV loads are issued before the first is accumulated; WIDE: version 6's loads
template <int G, int NV, int ROWS, bool WIDE, class WT>
__device__ __forceinline__ void embedding_bag_forward_batch(const WT* const (&row)[ROWS], const float (&w)[ROWS], const bool (&live)[ROWS],
                                                            int v1, int Dv, float4 (&acc)[NV]) {
    EmbeddingBagForwardRaw<WT> x[ROWS][NV];
#pragma unroll
    for (int u = 0; u < ROWS; u++)
#pragma unroll
        for (int k = 0; k < NV; k++) {
            const int v = v1 + k * G;
            x[u][k] = (live[u] && v < Dv) ? (WIDE ? embedding_bag_forward_load_raw_wide(row[u] + 4 * v) : embedding_bag_forward_load_raw(row[u] + 4 * v))
                                          : EmbeddingBagForwardRaw<WT>{};
        }
#pragma unroll
    for (int u = 0; u < ROWS; u++)
#pragma unroll
        for (int k = 0; k < NV; k++) embedding_bag_forward_fma4(acc[k], w[u], embedding_bag_forward_to4(x[u][k], row[u]));
}

// Version 4, one bag of G lanes (G, NV compile-time; mask = the group's lanes). Per chunk of CHUNK row
// ids, every lane of the group loads IPL of them (and their per-sample weights) with one coalesced
// instruction each, before any row is touched; then per batch of ROWS rows the group broadcasts the ids
// with shuffles, issues all ROWS*NV row loads, and only then accumulates. With the ids already in
// registers the rows of a batch are independent loads, so a warp has 8 (G >= 8) row vectors per lane in
// flight instead of one.
template <int G, int NV, class WT>
__device__ __forceinline__ void embedding_bag_forward_bag4(const EmbeddingBagForwardArgs& a, int t, int64_t b, int g, unsigned mask) {
    constexpr int ROWS = EMBEDDING_BAG_FORWARD_VECS_IN_FLIGHT / NV;       // rows per batch: 8, 4 or 2
    constexpr int IPL_MIN = ROWS / G > 1 ? ROWS / G : 1;                  // a chunk holds at least a batch
    constexpr int IPL_CAP = 32 / G < 4 ? 32 / G : 4;                      // and up to 32 ids, 4 per lane
    constexpr int IPL = IPL_MIN > IPL_CAP ? IPL_MIN : IPL_CAP;            // row ids held per lane
    constexpr int CHUNK = G * IPL;
    static_assert(ROWS >= 1 && CHUNK % ROWS == 0, "a chunk must be whole batches");
    const auto [D, start, end, W, out, scale] = embedding_bag_forward_bag<WT>(a, t, b);
    const int Dv = D / 4;
    const float* psw = a.per_sample_weights;
    for (int v0 = 0; v0 < Dv; v0 += NV * G) {              // one pass unless D > 4*NV*G
        float4 acc[NV];
#pragma unroll
        for (int k = 0; k < NV; k++) acc[k] = make_float4(0.f, 0.f, 0.f, 0.f);
        for (int64_t c = start; c < end; c += CHUNK) {
            const int n = (int)min((int64_t)CHUNK, end - c);      // the same in every lane of the group
            int ids[IPL];                                          // row ids < 2^31 (validated)
            float wts[IPL];
#pragma unroll
            for (int k = 0; k < IPL; k++) {
                const int j = k * G + g;
                ids[k] = j < n ? (int)embedding_bag_forward_load_index(a.indices + c + j) : 0;
                wts[k] = (psw != nullptr && j < n) ? __ldcs(psw + c + j) : 0.0f;
            }
#pragma unroll
            for (int j0 = 0; j0 < CHUNK; j0 += ROWS) {
                if (j0 >= n) break;
                bool live[ROWS];                                   // the batch's rows: addresses, weights
                const WT* row[ROWS];
                float w[ROWS];
#pragma unroll
                for (int u = 0; u < ROWS; u++) {
                    const int j = j0 + u;                          // compile-time: register ids[j / G] of lane j % G
                    live[u] = j < n;
                    row[u] = W + (int64_t)__shfl_sync(mask, ids[j / G], j % G, G) * D;
                    w[u] = psw != nullptr ? __shfl_sync(mask, wts[j / G], j % G, G) : 1.0f;
                }
                embedding_bag_forward_batch<G, NV, ROWS, false>(row, w, live, v0 + g, Dv, acc);
            }
        }
#pragma unroll
        for (int k = 0; k < NV; k++) {
            const int v = v0 + k * G + g;
            if (v < Dv)
                __stcs(reinterpret_cast<float4*>(out + 4 * v),
                       make_float4(acc[k].x * scale, acc[k].y * scale, acc[k].z * scale, acc[k].w * scale));
        }
    }
}

// One kernel per class of tables (same G and NV), so that each instantiation gets its own register
// count (ptxas, nvcc 13: 60 for G = 32, NV = 1, where one kernel switching over every class takes 80,
// i.e. 24 instead of 32 resident warps per SM); blockIdx.y walks the tables of the class
// (EmbeddingBagForwardPlan). One launch when all tables have one D.
template <int G, int NV, class WT>
__global__ void __launch_bounds__(512) embedding_bag_forward_kernel4(EmbeddingBagForwardArgs a, int first) {
    const int t = a.table_order[first + blockIdx.y];
    const int64_t b = embedding_bag_forward_bag_of_thread(blockIdx.x, threadIdx.x, blockDim.x, G);
    if (b >= a.B) return;                    // whole groups leave: the shuffles name only their group
    const int lane = threadIdx.x % 32, g = lane % G;
    const unsigned mask = G == 32 ? 0xFFFFFFFFu : ((1u << G) - 1u) << (lane - g);
    embedding_bag_forward_bag4<G, NV, WT>(a, t, b, g, mask);
}

// Version 5, one bag per warp for every D. A row still takes G lanes, and the warp's S = 32/G row slots
// take different rows of the bag: slot s of batch j0 processes rows j0 + s + u*S (u < ROWS). The warp
// loads 32 row ids (one per lane) per chunk and each lane fetches the id of its own row with a shuffle
// (every lane active: full mask). At the end the slots' partial sums meet in log2(S) xor shuffles, in a
// fixed order, and slot 0 stores. For G = 32 this is version 4; for small D a bag's rows go S at a time,
// so a bag takes fewer round trips to memory and the grid has S times more warps.
template <int G, int NV, bool WIDE, class WT>
__device__ __forceinline__ void embedding_bag_forward_bag5(const EmbeddingBagForwardArgs& a, int t, int64_t b, int lane) {
    constexpr int S = 32 / G;                                             // row slots
    constexpr int ROWS_MAX = EMBEDDING_BAG_FORWARD_VECS_IN_FLIGHT / NV;
    constexpr int ROWS = ROWS_MAX < G ? ROWS_MAX : G;                     // rows per slot per batch
    constexpr int BATCH = ROWS * S;                                       // rows per batch, divides 32
    static_assert(32 % BATCH == 0, "a chunk of 32 row ids must be whole batches");
    const unsigned full = 0xFFFFFFFFu;
    const int s = lane / G, g = lane % G;
    const auto [D, start, end, W, out, scale] = embedding_bag_forward_bag<WT>(a, t, b);
    const int Dv = D / 4;
    const float* psw = a.per_sample_weights;
    for (int v0 = 0; v0 < Dv; v0 += NV * G) {
        float4 acc[NV];
#pragma unroll
        for (int k = 0; k < NV; k++) acc[k] = make_float4(0.f, 0.f, 0.f, 0.f);
        for (int64_t c = start; c < end; c += 32) {
            const int n = (int)min((int64_t)32, end - c);         // the same in the whole warp
            const int id = lane < n ? (int)embedding_bag_forward_load_index(a.indices + c + lane) : 0;   // < 2^31
            const float wt = (psw != nullptr && lane < n) ? __ldcs(psw + c + lane) : 0.0f;
#pragma unroll
            for (int j0 = 0; j0 < 32; j0 += BATCH) {
                if (j0 >= n) break;
                const WT* row[ROWS];
                float w[ROWS];
                bool live[ROWS];
#pragma unroll
                for (int u = 0; u < ROWS; u++) {
                    const int j = j0 + u * S + s;                  // < j0 + BATCH <= 32
                    live[u] = j < n;
                    row[u] = W + (int64_t)__shfl_sync(full, id, j) * D;
                    w[u] = psw != nullptr ? __shfl_sync(full, wt, j) : 1.0f;
                }
                embedding_bag_forward_batch<G, NV, ROWS, WIDE>(row, w, live, v0 + g, Dv, acc);
            }
        }
#pragma unroll
        for (int off = G; off < 32; off *= 2)                     // combine the slots (none when G = 32)
#pragma unroll
            for (int k = 0; k < NV; k++) {
                acc[k].x += __shfl_xor_sync(full, acc[k].x, off);
                acc[k].y += __shfl_xor_sync(full, acc[k].y, off);
                acc[k].z += __shfl_xor_sync(full, acc[k].z, off);
                acc[k].w += __shfl_xor_sync(full, acc[k].w, off);
            }
#pragma unroll
        for (int k = 0; k < NV; k++) {
            const int v = v0 + k * G + g;
            if (s == 0 && v < Dv)
                __stcs(reinterpret_cast<float4*>(out + 4 * v),
                       make_float4(acc[k].x * scale, acc[k].y * scale, acc[k].z * scale, acc[k].w * scale));
        }
    }
}

template <int G, int NV, bool WIDE, class WT>
__global__ void __launch_bounds__(512) embedding_bag_forward_kernel5(EmbeddingBagForwardArgs a, int first) {
    const int t = a.table_order[first + blockIdx.y];
    const int64_t b = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (b >= a.B) return;                    // the whole warp
    embedding_bag_forward_bag5<G, NV, WIDE, WT>(a, t, b, threadIdx.x % 32);
}

// Version 7 (--pooling none only): the gather. Nothing is summed: each lookup's row is copied to its own
// output row, N random rows read and N rows written contiguously, so rows in flight are all that matters.
// G lanes (the power of two covering D/4, at most a warp) move a row with 16-byte loads and streaming
// 16-byte stores; a group takes ROWS consecutive lookups and issues all their row loads before the first
// store. The table is blockIdx.y: table-major offsets make table t's lookups one range, offsets[t*B] ..
// offsets[(t+1)*B], so a block reads two offsets and no lookup searches for its table; grid x covers the
// table with the most lookups (blocks past a shorter table's end leave at once). Rows of 256 bytes or
// more take version 6's L2::256B hint, smaller rows the plain load (the hint would fetch unused bytes).
constexpr int EMBEDDING_BAG_FORWARD_GATHER_ROWS = 4;

template <int ROWS, class WT>
__global__ void __launch_bounds__(512) embedding_bag_forward_kernel7(EmbeddingBagForwardArgs a) {
    const int t = blockIdx.y;
    const int64_t begin = a.offsets[(int64_t)t * a.B], n = a.offsets[(int64_t)(t + 1) * a.B] - begin;
    const int D = a.D_offsets[t + 1] - a.D_offsets[t], Dv = D / 4;
    const int G = embedding_bag_forward_lanes_per_row(D), g = (int)(threadIdx.x % G);
    const int64_t j0 = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / G * ROWS;
    if (j0 >= n) return;                     // whole groups (G divides 32): no shuffles here anyway
    const bool wide = D * (int)sizeof(WT) >= 256;
    const WT* W = (const WT*)a.weights + a.weights_offsets[t];
    const WT* row[ROWS];
#pragma unroll
    for (int u = 0; u < ROWS; u++)           // the G lanes load the same id: one broadcast transaction
        row[u] = j0 + u < n ? W + embedding_bag_forward_load_index(a.indices + begin + j0 + u) * D : nullptr;
    float* out = a.out + (begin + j0) * D;
    for (int v = g; v - g < Dv; v += G) {    // the group's trip count: D > 4 * 32 loops
        float4 x[ROWS];
#pragma unroll
        for (int u = 0; u < ROWS; u++)
            x[u] = (row[u] == nullptr || v >= Dv) ? make_float4(0.f, 0.f, 0.f, 0.f)
                   : (wide ? embedding_bag_forward_load4_wide(row[u] + 4 * v) : embedding_bag_forward_load4(row[u] + 4 * v));
#pragma unroll
        for (int u = 0; u < ROWS; u++)
            if (row[u] != nullptr && v < Dv) __stcs(reinterpret_cast<float4*>(out + (int64_t)u * D + 4 * v), x[u]);
    }
}

// ----------------------------------------------------------------------------------------------
// launchers and dispatcher (block sizes are multiples of 32: main requires it)

template <class WT>
void embedding_bag_forward1(const EmbeddingBagForwardArgs& a, int block_size) {
    const int64_t n = (int64_t)a.B * a.total_D;
    embedding_bag_forward_kernel1<WT><<<grid_x(ceil_div<int64_t>(n, block_size), "embedding_bag_forward version 1"), block_size>>>(a);
}

template <class WT>
void embedding_bag_forward2(const EmbeddingBagForwardArgs& a, int block_size) {
    const int64_t bags = (int64_t)a.T * a.B;
    embedding_bag_forward_kernel2<WT><<<grid_x(ceil_div<int64_t>(bags, block_size / 32), "embedding_bag_forward version 2"), block_size>>>(a);
}

template <class WT>
void embedding_bag_forward3(const EmbeddingBagForwardArgs& a, int block_size) {
    dim3 grid(embedding_bag_forward_grid_x_groups(a.B, a.max_D, block_size), grid_y(a.T, "embedding_bag_forward version 3"));
    embedding_bag_forward_kernel3<WT><<<grid, block_size>>>(a);
}

// versions 4-6: one launch per class of tables present, grid y = the class's tables
template <int c, class WT>
void embedding_bag_forward4_class(const EmbeddingBagForwardArgs& a, int block_size) {
    constexpr int G = EMBEDDING_BAG_FORWARD_CLASS_G[c], NV = EMBEDDING_BAG_FORWARD_CLASS_NV[c];
    const int n = a.class_begin[c + 1] - a.class_begin[c];
    if (n == 0) return;
    dim3 grid(grid_x(ceil_div<int64_t>(a.B, (int64_t)(block_size / 32) * (32 / G)), "embedding_bag_forward version 4"), grid_y(n, "embedding_bag_forward version 4"));
    embedding_bag_forward_kernel4<G, NV, WT><<<grid, block_size>>>(a, a.class_begin[c]);
}

template <class WT>
void embedding_bag_forward4(const EmbeddingBagForwardArgs& a, int block_size) {
    embedding_bag_forward4_class<0, WT>(a, block_size);
    embedding_bag_forward4_class<1, WT>(a, block_size);
    embedding_bag_forward4_class<2, WT>(a, block_size);
    embedding_bag_forward4_class<3, WT>(a, block_size);
    embedding_bag_forward4_class<4, WT>(a, block_size);
    embedding_bag_forward4_class<5, WT>(a, block_size);
    embedding_bag_forward4_class<6, WT>(a, block_size);
    embedding_bag_forward4_class<7, WT>(a, block_size);
}

template <int c, bool WIDE, class WT>
void embedding_bag_forward5_class(const EmbeddingBagForwardArgs& a, int block_size) {
    constexpr int G = EMBEDDING_BAG_FORWARD_CLASS_G[c], NV = EMBEDDING_BAG_FORWARD_CLASS_NV[c];
    const int n = a.class_begin[c + 1] - a.class_begin[c];
    if (n == 0) return;
    dim3 grid(grid_x(ceil_div<int64_t>(a.B, block_size / 32), "embedding_bag_forward versions 5-6"), grid_y(n, "embedding_bag_forward versions 5-6"));
    embedding_bag_forward_kernel5<G, NV, WIDE, WT><<<grid, block_size>>>(a, a.class_begin[c]);
}

// versions 5 and 6 (WIDE: the L2::256B row loads)
template <bool WIDE, class WT>
void embedding_bag_forward5(const EmbeddingBagForwardArgs& a, int block_size) {
    embedding_bag_forward5_class<0, WIDE, WT>(a, block_size);
    embedding_bag_forward5_class<1, WIDE, WT>(a, block_size);
    embedding_bag_forward5_class<2, WIDE, WT>(a, block_size);
    embedding_bag_forward5_class<3, WIDE, WT>(a, block_size);
    embedding_bag_forward5_class<4, WIDE, WT>(a, block_size);
    embedding_bag_forward5_class<5, WIDE, WT>(a, block_size);
    embedding_bag_forward5_class<6, WIDE, WT>(a, block_size);
    embedding_bag_forward5_class<7, WIDE, WT>(a, block_size);
}

// version 7's grid x: groups of G lanes (nobag: one D) taking ROWS lookups each, for the longest table
inline int64_t embedding_bag_forward_grid_x7(int64_t max_lookups, int D, int block_size) {
    const int64_t groups = ceil_div<int64_t>(max_lookups, EMBEDDING_BAG_FORWARD_GATHER_ROWS);
    return std::max<int64_t>(1, ceil_div<int64_t>(groups, block_size / embedding_bag_forward_lanes_per_row(D)));
}

template <class WT>
void embedding_bag_forward7(const EmbeddingBagForwardArgs& a, int block_size) {
    dim3 grid(grid_x(embedding_bag_forward_grid_x7(a.max_lookups, a.max_D, block_size), "embedding_bag_forward version 7"),
              grid_y(a.T, "embedding_bag_forward version 7"));
    embedding_bag_forward_kernel7<EMBEDDING_BAG_FORWARD_GATHER_ROWS, WT><<<grid, block_size>>>(a);
}

// every version is compiled for the three weight types (WT: float, __half, __nv_bfloat16)
template <class WT>
void embedding_bag_forward_typed(int kernel_num, const EmbeddingBagForwardArgs& a, int block_size) {
    switch (kernel_num) {
        case 1: embedding_bag_forward1<WT>(a, block_size); break;
        case 2: embedding_bag_forward2<WT>(a, block_size); break;
        case 3: embedding_bag_forward3<WT>(a, block_size); break;
        case 4: embedding_bag_forward4<WT>(a, block_size); break;
        case 5: embedding_bag_forward5<false, WT>(a, block_size); break;
        case 6: embedding_bag_forward5<true, WT>(a, block_size); break;
        case 7: embedding_bag_forward7<WT>(a, block_size); break;
        default: fail_args("embedding_bag_forward has no version %d", kernel_num);
    }
}

void embedding_bag_forward(int kernel_num, const EmbeddingBagForwardArgs& a, int block_size) {
    switch (a.wtype) {
        case EmbeddingBagWeights::fp16: embedding_bag_forward_typed<__half>(kernel_num, a, block_size); break;
        case EmbeddingBagWeights::bf16: embedding_bag_forward_typed<__nv_bfloat16>(kernel_num, a, block_size); break;
        default: embedding_bag_forward_typed<float>(kernel_num, a, block_size); break;
    }
}

// each version's block sizes; versions 4-7 are compiled for at most 512 threads (__launch_bounds__)
inline std::vector<int> embedding_bag_forward_blocks(int kernel_num) {
    if (kernel_num >= 4) return {64, 128, 256, 512};
    return {32, 64, 128, 256, 512, 1024};
}
inline int embedding_bag_forward_max_block(int kernel_num) { return kernel_num >= 4 ? 512 : 1024; }

// why version k cannot run (pooled or nobag, the block size), "" if it can
inline std::string embedding_bag_forward_skip_reason(int k, bool nobag, int block) {
    if (nobag && k != 7) return "--pooling none is a gather of one row per lookup; versions 1-6 pool bags";
    if (!nobag && k == 7) return "version 7 is the gather of --pooling none (one row per lookup); it does not pool";
    if (block > embedding_bag_forward_max_block(k))
        return "--block " + std::to_string(block) + " exceeds the " + std::to_string(embedding_bag_forward_max_block(k)) +
               " threads version " + std::to_string(k) + " is compiled for";
    return "";
}

// ----------------------------------------------------------------------------------------------

// the inputs of a run: loaded (--load) or generated from the flags (host memory checked first), broken
// on request (--break-input), and validated (exit 2 with the offending position)
inline EmbeddingBagInputs embedding_bag_forward_inputs(const Cli& cli, EmbeddingBagConfig& cfg, const EmbeddingBagFlags& flags) {
    EmbeddingBagInputs in;
    if (!cli.load_dir.empty()) {
        in = embedding_bag_load_inputs(cli.load_dir, "embedding_bag_forward_", cfg);
    } else {
        embedding_bag_check_config(cfg, flags);
        int64_t total_D = 0;
        for (int t = 0; t < cfg.T; t++) {
            total_D += embedding_bag_table_D(cfg, t);
            require(embedding_bag_table_E(cfg, t) <= INT32_MAX, "E of table %d (%lld) must be 1..2^31-1 (row ids travel as 32-bit in versions 4, 5)",
                    t, (long long)embedding_bag_table_E(cfg, t));
        }
        require_host_memory(embedding_bag_inputs_host_bytes(cfg) + (double)embedding_bag_num_weights(cfg) * 6.0 +
                                4.0 * (double)cfg.B * total_D * (cfg.nobag ? cfg.L : 1) * (cli.dump_dir.empty() ? 1 : 2),
                            "embedding_bag_forward (inputs, tables, reference)");
        in = embedding_bag_make_inputs(cfg, cli.seed);
    }
    embedding_bag_break(in, flags.break_input);
    std::string bad = embedding_bag_forward_validate(in);
    if (!bad.empty()) fail_args("invalid input: %s", bad.c_str());
    return in;
}

// the table weights: the dump's embedding_bag_forward_weights.npy when --load has one, else from the seed
// (fp32 values: main rounds them to the weights' type)
inline std::vector<float> embedding_bag_forward_weights(const Cli& cli, const EmbeddingBagInputs& in) {
    std::vector<float> w;
    std::vector<int64_t> sh;
    if (cli.load_dir.empty() || !read_npy(cli.load_dir, "embedding_bag_forward_weights", w, sh, 1, true))
        return embedding_bag_forward_make_weights(in, cli.seed);
    require((int64_t)w.size() == in.num_weights, "--load: embedding_bag_forward_weights has %zu entries; the layout needs %lld", w.size(),
            (long long)in.num_weights);
    for (size_t i = 0; i < w.size(); i++)
        require(std::isfinite(w[i]), "--load: embedding_bag_forward_weights[%zu] is %g: the weights must be finite", i, w[i]);
    return w;
}

// device bytes of a run: tables, ids, offsets, per-sample weights, output, the plan
inline double embedding_bag_forward_device_bytes(const EmbeddingBagInputs& in, int wbytes) {
    return (double)in.num_weights * wbytes + 8.0 * in.N() + 8.0 * in.offsets.size() + 4.0 * in.per_sample_weights.size() +
           4.0 * (double)in.out_rows() * in.out_cols() + 24.0 * (in.T + 1);
}

inline void embedding_bag_forward_dump(const std::string& dir, const EmbeddingBagConfig& cfg, const EmbeddingBagInputs& in,
                                       const std::vector<float>& weights, const float* ref, const float* got, const std::string& shape) {
    embedding_bag_dump_inputs(dir, "embedding_bag_forward_", in, cfg.L);
    write_npy(dir, "embedding_bag_forward_out_ref", ref, {in.out_rows(), in.out_cols()});
    write_npy(dir, "embedding_bag_forward_out", got, {in.out_rows(), in.out_cols()});
    if (in.num_weights <= ((int64_t)64 << 20)) {
        write_npy(dir, "embedding_bag_forward_weights", weights.data(), {in.num_weights});
    } else {
        printf("weights (%lld elements) not dumped: over 64M elements; the peer makes its own of the same shape\n", (long long)in.num_weights);
    }
    write_text(dir, "embedding_bag_forward_shape.txt", shape + "\n");
    printf("dumped embedding_bag_forward_*.npy to %s\n", dir.c_str());
}

// ----------------------------------------------------------------------------------------------

#ifndef NO_MAIN
// the flags and their constraints; exits 2 naming a broken one
void embedding_bag_forward_parse(Cli& cli, EmbeddingBagConfig& cfg, EmbeddingBagFlags& flags, int argc, char** argv) {
    embedding_bag_add_flags(cli, cfg, flags);
    cli.constraints = std::string(EMBEDDING_BAG_CONSTRAINTS) +
                      ";\n  E < 2^31 per table; --block a multiple of 32 (at most 512 for versions 4-7); version 7 only with --pooling none";
    cli.parse(argc, argv);
    require(cli.block % 32 == 0, "--block (%d) must be a multiple of 32 (versions 2-7 give bags and rows whole warps)", cli.block);
}

// one line: the shape, where the bags came from, the pooling, the tables' size and element type
void embedding_bag_forward_describe(const EmbeddingBagConfig& cfg, const EmbeddingBagInputs& in, int wbytes) {
    printf("T=%d B=%d total_D=%d max_D=%d lookups=%zu (%s, %s%s), tables %.2f GB of %s\n", in.T, in.B, in.total_D(), in.max_D(),
           in.indices.size(), !cfg.loaded.empty() ? "loaded" : (cfg.one_row ? "one row" : (cfg.alpha > 1.0 ? "Zipf" : "uniform")),
           embedding_bag_pooling_name(in.mean, in.nobag), cfg.weighted ? ", weighted" : "", (double)in.num_weights * wbytes / 1e9,
           EMBEDDING_BAG_WEIGHTS_NAMES[(int)cfg.weights]);
}

// the inputs on the device, the output (n_out floats, not set) and the tables' classes: what every version reads
EmbeddingBagForwardArgs embedding_bag_forward_device_args(const EmbeddingBagInputs& in, const std::vector<float>& weights,
                                                          EmbeddingBagWeights wtype, size_t n_out) {
    EmbeddingBagForwardArgs a;
    a.weights = embedding_bag_forward_upload_weights(weights, wtype);
    a.wtype = wtype;
    a.weights_offsets = device_upload(in.weights_offsets);
    a.D_offsets = device_upload(in.D_offsets);
    a.indices = device_upload(in.indices);
    a.offsets = device_upload(in.offsets);
    a.per_sample_weights = in.per_sample_weights.empty() ? nullptr : device_upload(in.per_sample_weights);
    a.out = device_alloc<float>(n_out);
    const EmbeddingBagForwardPlan plan = embedding_bag_forward_plan(in.D_offsets);
    a.table_order = device_upload(plan.table_order);
    std::copy(plan.class_begin, plan.class_begin + EMBEDDING_BAG_FORWARD_CLASSES + 1, a.class_begin);
    a.T = in.T; a.B = in.B; a.total_D = in.total_D(); a.max_D = in.max_D(); a.mean = in.mean;
    a.max_lookups = 0;
    for (int t = 0; t < in.T; t++) a.max_lookups = std::max(a.max_lookups, in.offsets[(int64_t)(t + 1) * in.B] - in.offsets[(int64_t)t * in.B]);
    return a;
}

void embedding_bag_forward_free_args(const EmbeddingBagForwardArgs& a) {
    for (const void* p : {(const void*)a.weights, (const void*)a.weights_offsets, (const void*)a.D_offsets, (const void*)a.indices,
                          (const void*)a.offsets, (const void*)a.per_sample_weights, (const void*)a.out, (const void*)a.table_order})
        if (p) cudaCheck(cudaFree(const_cast<void*>(p)));
}

int main(int argc, char** argv) {
    EmbeddingBagConfig cfg;
    EmbeddingBagFlags flags;
    Cli cli("embedding_bag_forward",
            "Embedding bags, forward (FBGEMM split TBE layout): T tables, B bags each, SUM or MEAN of the looked-up rows, or "
            "(--pooling none) one row per lookup.",
            7, embedding_bag_default_version(argc, argv, 6, 7));
    embedding_bag_forward_parse(cli, cfg, flags, argc, argv);
    bool nobag = flags.pooling == "none";    // a --load says it again below
    auto skip = [&](int k) { return embedding_bag_forward_skip_reason(k, nobag, cli.block); };
    select_versions(cli, skip, false);
    EmbeddingBagInputs in = embedding_bag_forward_inputs(cli, cfg, flags);
    nobag = in.nobag;
    select_versions(cli, skip, false);      // again: a --load may have said nobag
    embedding_bag_set_precision(cfg, flags);
    const int wbytes = embedding_bag_weight_bytes(cfg.weights);

    cuda_init();
    require_device_memory(embedding_bag_forward_device_bytes(in, wbytes), "embedding_bag_forward", !cli.check_only);
    embedding_bag_forward_describe(cfg, in, wbytes);
    std::vector<float> weights = embedding_bag_forward_weights(cli, in);
    embedding_bag_forward_round_weights(weights, cfg.weights);
    const size_t n_out = (size_t)(in.out_rows() * in.out_cols());
    std::vector<float> ref(n_out);
    embedding_bag_forward_cpu(ref.data(), in, weights.data());
    EmbeddingBagForwardArgs a = embedding_bag_forward_device_args(in, weights, cfg.weights, n_out);

    OpRunner r;
    r.op = "embedding_bag_forward";
    r.shape = embedding_bag_shape(cfg);
    r.bytes = embedding_bag_forward_bytes(in, wbytes);
    r.blocks_for = [](int k) { return embedding_bag_forward_blocks(k); };
    r.skip_reason = skip;
    r.prepare_check = [&] { poison(a.out, n_out * sizeof(float)); };
    r.launch = [&](int k, int block) { embedding_bag_forward(k, a, block); };
    r.check = [&](int, int) {
        if (n_out == 0) { printf("out: no lookups (nobag, every bag empty): nothing to compare\n"); return true; }
        return validate_device("out", a.out, ref.data(), n_out, EMBEDDING_BAG_FORWARD_ATOL, EMBEDDING_BAG_FORWARD_RTOL);
    };
    r.extra = [fbgemm_bytes = embedding_bag_forward_fbgemm_bytes(in, cfg.L, wbytes)](int, int, double ms) {
        char buf[64];
        snprintf(buf, sizeof buf, "fbgemm_gbps=%.0f", fbgemm_bytes / (ms * 1e-3) / 1e9);
        return std::string(buf);
    };
    int rc = run_versions(cli, r);

    if (!cli.dump_dir.empty()) embedding_bag_forward_dump(cli.dump_dir, cfg, in, weights, ref.data(), device_download(a.out, n_out).data(), r.shape);
    embedding_bag_forward_free_args(a);
    return rc;
}
#endif
