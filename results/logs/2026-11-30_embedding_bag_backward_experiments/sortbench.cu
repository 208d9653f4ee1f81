// micro-benchmark: one global radix sort of 22-bit linear ids vs per-table segmented sorts of padded ids
#include <cub/cub.cuh>
#include <cstdio>
#include <vector>
#include <random>
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); exit(1); } } while (0)
int main() {
    for (int cfg = 0; cfg < 3; cfg++) {
        int T = 32, B = 512, L = 20; long E = 100000; bool one_row = false;
        if (cfg == 1) one_row = true;
        if (cfg == 2) { T = 1; B = 65536; L = 32; E = 1000000; }
        const int N = T * B * L;
        int idx_bits = 1; while ((E - 1) >> idx_bits) idx_bits++;
        int t_bits = 0; while (((long)T - 1) >> t_bits) t_bits++;
        int lin_bits = 1; while ((T * E - 1) >> lin_bits) lin_bits++;
        std::mt19937_64 rng(1);
        std::vector<uint32_t> lin(N), pad(N), vals(N);
        std::vector<int> seg(T + 1);
        for (int t = 0; t < T; t++) {
            seg[t] = t * B * L;
            for (int i = 0; i < B * L; i++) {
                uint32_t idx = one_row ? 7 : (uint32_t)(rng() % E);
                int o = t * B * L + i;
                lin[o] = (uint32_t)(t * E + idx);
                pad[o] = ((uint32_t)t << idx_bits) | idx;
                vals[o] = t * B + i / L;
            }
        }
        seg[T] = N;
        uint32_t *dk, *dk2, *dv, *dv2, *dp; int* dseg;
        CK(cudaMalloc(&dk, N * 4)); CK(cudaMalloc(&dk2, N * 4)); CK(cudaMalloc(&dv, N * 4)); CK(cudaMalloc(&dv2, N * 4)); CK(cudaMalloc(&dp, N * 4));
        CK(cudaMalloc(&dseg, (T + 1) * 4));
        CK(cudaMemcpy(dk, lin.data(), N * 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dp, pad.data(), N * 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dv, vals.data(), N * 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dseg, seg.data(), (T + 1) * 4, cudaMemcpyHostToDevice));
        size_t b1 = 0, b2 = 0, b3 = 0;
        CK(cub::DeviceRadixSort::SortPairs(nullptr, b1, dk, dk2, dv, dv2, N, 0, lin_bits));
        CK(cub::DeviceSegmentedRadixSort::SortPairs(nullptr, b2, dp, dk2, dv, dv2, N, T, dseg, dseg + 1, 0, idx_bits));
        CK(cub::DeviceSegmentedSort::StableSortPairs(nullptr, b3, dp, dk2, dv, dv2, N, T, dseg, dseg + 1));
        void* tmp; CK(cudaMalloc(&tmp, std::max(b1, std::max(b2, b3))));
        cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
        std::vector<uint32_t> ref(N), got(N);
        for (int m = 0; m < 3; m++) {
            auto run = [&]() {
                size_t b = std::max(b1, std::max(b2, b3));
                if (m == 0) CK(cub::DeviceRadixSort::SortPairs(tmp, b, dk, dk2, dv, dv2, N, 0, lin_bits));
                if (m == 1) CK(cub::DeviceSegmentedRadixSort::SortPairs(tmp, b, dp, dk2, dv, dv2, N, T, dseg, dseg + 1, 0, idx_bits));
                if (m == 2) CK(cub::DeviceSegmentedSort::StableSortPairs(tmp, b, dp, dk2, dv, dv2, N, T, dseg, dseg + 1));
            };
            for (int w = 0; w < 3; w++) run();
            CK(cudaDeviceSynchronize());
            float best = 1e9, sum = 0;
            for (int r = 0; r < 20; r++) {
                cudaEventRecord(e0); run(); cudaEventRecord(e1); cudaEventSynchronize(e1);
                float ms; cudaEventElapsedTime(&ms, e0, e1); best = std::min(best, ms); sum += ms;
            }
            CK(cudaMemcpy(got.data(), dv2, N * 4, cudaMemcpyDeviceToHost));
            if (m == 0) ref = got;
            printf("cfg %d (T=%d N=%d %s) method %s: min %.1f us mean %.1f us  vals %s\n", cfg, T, N, one_row ? "one-row" : "uniform",
                   m == 0 ? "DeviceRadixSort lin" : (m == 1 ? "SegmentedRadixSort pad" : "SegmentedSort::Stable pad"), best * 1e3, sum / 20 * 1e3,
                   got == ref ? "same as global" : "DIFFER");
        }
        cudaFree(dk); cudaFree(dk2); cudaFree(dv); cudaFree(dv2); cudaFree(dp); cudaFree(dseg); cudaFree(tmp);
    }
}
