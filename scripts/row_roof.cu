// The roof for random whole-row traffic on this GPU: what fraction of the copy bandwidth a kernel that does
// nothing else reaches when it reads (gather) or reads and writes back (update) rows of S bytes at random,
// with every row of a group's work in flight at once. The embedding-bag ops are bound by exactly this
// traffic, so their % of copy is best read against these numbers, not against 100%.
//
//   gather: bags of 20 random rows of a 1.6 GB table, summed (as 32-bit words) into one output row per bag:
//           the forward's bytes (rows read, one row written per bag), all 20 loads of a lane issued at once
//   update: 311,574 distinct random rows of the same table, each read, changed and written back (the optimizer's
//           read-modify-write), ROWS rows in flight per lane group
// A row takes S / 16 lanes (16-byte accesses); the table and the row ids are the embedding-bag defaults'
// sizes (T 32 x E 1e5 rows of 512 bytes; 327,680 lookups; 311,574 distinct rows for the update).
//
//   nvcc -O3 -std=c++17 -arch=sm_90 -I dev/cuda scripts/row_roof.cu -o build/row_roof && build/row_roof
//   L2_FLUSH=read build/row_roof       (the flush leaves L2 clean instead of dirty)
#include "common.h"
#include <random>

// A lane's 16-byte piece of each of the bag's L rows goes to shared memory by cp.async: all L copies are in
// flight at once whatever the register allocator does, then the lane sums its own pieces.
template <int S, int L>
__global__ void __launch_bounds__(128) row_roof_gather(const uint4* __restrict__ table, const int* __restrict__ ids, int bags,
                                                       uint4* __restrict__ out) {
    constexpr int LANES = S / 16, PER_WARP = 32 / LANES;
    __shared__ uint4 stage[128 / 32][L][32];   // 40 KB a block of 128 threads
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / LANES, c = lane % LANES;
    const int64_t bag = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32 * PER_WARP + g;
    if (bag >= bags) return;
#pragma unroll
    for (int j = 0; j < L; j++) {
        const uint4* src = table + (int64_t)ids[bag * L + j] * LANES + c;
        const unsigned dst = (unsigned)__cvta_generic_to_shared(&stage[warp][j][lane]);
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src));
    }
    asm volatile("cp.async.wait_all;" ::: "memory");
    uint4 acc = make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int j = 0; j < L; j++) {
        const uint4 x = stage[warp][j][lane];
        acc.x += x.x; acc.y += x.y; acc.z += x.z; acc.w += x.w;
    }
    out[bag * LANES + c] = acc;
}

template <int S, int ROWS>
__global__ void __launch_bounds__(256) row_roof_update(uint4* __restrict__ table, const int* __restrict__ ids, int n) {
    constexpr int LANES = S / 16, PER_WARP = 32 / LANES;
    const int lane = threadIdx.x % 32, g = lane / LANES, c = lane % LANES;
    const int64_t first = (((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32 * PER_WARP + g) * ROWS;
    uint4 x[ROWS];
#pragma unroll
    for (int j = 0; j < ROWS; j++)
        if (first + j < n) x[j] = table[(int64_t)ids[first + j] * LANES + c];
#pragma unroll
    for (int j = 0; j < ROWS; j++)
        if (first + j < n) table[(int64_t)ids[first + j] * LANES + c] = make_uint4(x[j].x + 1, x[j].y + 1, x[j].z + 1, x[j].w + 1);
}

template <int S>
void row_roof_run(double peak, uint4* table, const int* d_gather, const int* d_update, int bags, int n_update,
                  uint4* out) {
    constexpr int L = 20, LANES = S / 16, PER_WARP = 32 / LANES;
    const int block = 256;
    const unsigned gb = (unsigned)ceil_div<int64_t>(ceil_div<int64_t>(bags, PER_WARP) * 32, 128);
    Timing t = benchmark(30, [&] { row_roof_gather<S, L><<<gb, 128>>>(table, d_gather, bags, out); });
    const double gbytes = (double)bags * L * S + (double)bags * S + 4.0 * bags * L;
    printf("ROOF kind=gather row_bytes=%d rows_in_flight=%d ms_median=%.4f gbps=%.0f pct_copy=%.1f\n", S, L, t.median,
           gbytes / (t.median * 1e-3) / 1e9, 100.0 * gbytes / (t.median * 1e-3) / 1e9 / peak);
    auto update = [&](auto rows_c) {
        constexpr int R = decltype(rows_c)::value;
        const unsigned ub = (unsigned)ceil_div<int64_t>(ceil_div<int64_t>(ceil_div<int64_t>(n_update, R), PER_WARP) * 32, block);
        Timing u = benchmark(30, [&] { row_roof_update<S, R><<<ub, block>>>(table, d_update, n_update); });
        const double ubytes = 2.0 * n_update * S + 4.0 * n_update;
        printf("ROOF kind=update row_bytes=%d rows_in_flight=%d ms_median=%.4f gbps=%.0f pct_copy=%.1f\n", S, R, u.median,
               ubytes / (u.median * 1e-3) / 1e9, 100.0 * ubytes / (u.median * 1e-3) / 1e9 / peak);
    };
    update(std::integral_constant<int, 1>());
    update(std::integral_constant<int, 4>());
    update(std::integral_constant<int, 8>());
}

int main() {
    const double peak = copy_peak_gbps();
    const int64_t table_bytes = (int64_t)32 * 100000 * 512;   // the embedding-bag default's fp32 tables
    const int bags = 32 * 512, L = 20, n_update = 311574;
    uint4* table = nullptr;
    uint4* out = nullptr;
    cudaCheck(cudaMalloc(&table, table_bytes));
    cudaCheck(cudaMemset(table, 1, table_bytes));
    cudaCheck(cudaMalloc(&out, (size_t)bags * 1024));
    std::mt19937_64 rng(7);
    auto ids_for = [&](int S, std::vector<int>& g, std::vector<int>& u) {
        const int64_t rows = table_bytes / S;
        g.resize((size_t)bags * L);
        for (auto& x : g) x = (int)(rng() % (uint64_t)rows);
        std::vector<int> perm(rows);                                     // distinct rows for the update
        for (int64_t i = 0; i < rows; i++) perm[i] = (int)i;
        for (int64_t i = 0; i < n_update; i++) std::swap(perm[i], perm[i + (int64_t)(rng() % (uint64_t)(rows - i))]);
        u.assign(perm.begin(), perm.begin() + n_update);
    };
    int *d_g = nullptr, *d_u = nullptr;
    cudaCheck(cudaMalloc(&d_g, sizeof(int) * bags * L));
    cudaCheck(cudaMalloc(&d_u, sizeof(int) * n_update));
    auto upload = [&](int S) {
        std::vector<int> g, u;
        ids_for(S, g, u);
        cudaCheck(cudaMemcpy(d_g, g.data(), sizeof(int) * g.size(), cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(d_u, u.data(), sizeof(int) * u.size(), cudaMemcpyHostToDevice));
    };
    upload(128);  row_roof_run<128>(peak, table, d_g, d_u, bags, n_update, out);
    upload(256);  row_roof_run<256>(peak, table, d_g, d_u, bags, n_update, out);
    upload(512);  row_roof_run<512>(peak, table, d_g, d_u, bags, n_update, out);
    cudaCheck(cudaGetLastError());
    cudaCheck(cudaFree(table));
    cudaCheck(cudaFree(out));
    cudaCheck(cudaFree(d_g));
    cudaCheck(cudaFree(d_u));
    return 0;
}
