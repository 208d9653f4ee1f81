/*
repkv forward: grouped-query attention's K/V head replication (llm.c, Llama 3).

Llama-3 attention has NH query heads but only NKV key/value heads (rep = NH / NKV). Before
attention each K and V head is copied rep times so that Q, K and V all have NH heads:

  inp : (B, T, (NH + 2*NKV) * HD)       [Q heads | K heads | V heads] per (b, t)
  out : (B, T, 3, NH, HD)               [Q | K replicated | V replicated]
  out[b,t,0,h] = inp[b,t, Q h];  out[b,t,1,h] = inp[b,t, K h/rep];  out[b,t,2,h] = inp[b,t, V h/rep]

Fewest bytes: read inp once, write out once:
  bytes = B*T*HD*(NH + 2*NKV + 3*NH) * sizeof(floatX) = 604 MB in fp32 at B8,T1024,NH32,NKV8,HD128.
No arithmetic, so the floor is bytes / copy bandwidth (0.142 ms at the median 4255 GB/s of
the runs in results/h200.md).

Versions. H200, 2026-11-29, bench size, best block; median ms and % of the device-to-device copy
bandwidth measured in the same process (every number: results/h200.md):
                                                                       fp32             bf16
  1  one thread per out element, five divisions (llm.c's dev/cuda)    0.6101  23.3%    0.6085  11.7%
  2  one thread per inp element writing its rep copies                0.2384  59.6%    0.2327  30.5%
  3  16-byte vectors, one thread per 16 bytes of inp (the default)    0.1496  94.9%    0.0768  92.5%
  4  version 3 on a 2-D grid: 32-bit index math, no 64-bit division   0.1495  94.9%    0.0768  92.5%
  5  version 4 with streaming (evict-first) loads and stores          0.1544  91.9%    0.0786  90.3%
  6  Hopper's bulk-copy engine: a row via shared memory, bulk stores  0.1619  87.7%    0.0826  86.0%
PyTorch's composite (split / expand / reshape / stack; scripts/peers/repkv.py): 0.5673 ms (2026-11-30).

Lessons:
- Version 1 re-reads each K/V element rep times and issues 4-byte accesses; version 2 removes the
  re-reads, version 3 the narrow accesses, and that alone reaches the copy roof.
- The forward writes twice what it reads; about 95% of a copy is where such a write-heavy stream lands.
- Versions 4-6 are the usual next ideas and none pays: the 64-bit division is hidden under memory
  latency (4 ties 3), evict-first hints cost a little when nothing competes for L2 (5), and the bulk
  engine with one row in flight per block moves less than plain vector stores (6).
- Ideas measured and dropped, and the effect of the L2 flush: results/notes/repkv_forward.md.

Compile and run:
  make repkv_forward        && ./repkv_forward 3
  make repkv_forward_bf16   && ./repkv_forward_bf16 all
*/
#include "repkv.h"

// tolerances: every output is a copy of an input, so any difference is a bug
static const float REPKV_FWD_ATOL = 0.0f, REPKV_FWD_RTOL = 0.0f;

// ----------------------------------------------------------------------------------------------
// CPU reference

void repkv_forward_cpu(float* out, const float* inp, int B, int T, int NH, int NKV, int HD) {
    const int rep = NH / NKV;
    const int64_t C_in = (int64_t)(NH + 2 * NKV) * HD, C_out = (int64_t)3 * NH * HD;
    for (int64_t bt = 0; bt < (int64_t)B * T; bt++) {
        const float* x = inp + bt * C_in;
        float* y = out + bt * C_out;
        for (int h = 0; h < NH; h++) {
            for (int d = 0; d < HD; d++) {
                y[((int64_t)0 * NH + h) * HD + d] = x[(int64_t)h * HD + d];
                y[((int64_t)1 * NH + h) * HD + d] = x[((int64_t)NH + h / rep) * HD + d];
                y[((int64_t)2 * NH + h) * HD + d] = x[((int64_t)NH + NKV + h / rep) * HD + d];
            }
        }
    }
}

// ----------------------------------------------------------------------------------------------
// GPU kernels

// Version 1, the seed's approach: one thread per out element. The flat index is decoded into
// (bt, part, h, d) and the source head is h (Q) or h / rep (K, V). Each K/V input is read by rep
// threads; after the first, the reads come from L2, so DRAM traffic stays near the minimum, but
// there are 3*NH*HD threads per row, each with five divisions and 4-byte accesses.
// (The seed's int index overflows past 2^31 elements: here it is 64-bit, the only change.)
__global__ void repkv_forward_kernel1(floatX* out, const floatX* inp, int B, int T, int NH, int NKV, int HD) {
    int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (int64_t)B * T * 3 * NH * HD) return;
    const int rep = NH / NKV;
    int d = (int)(idx % HD);
    int64_t rest = idx / HD;
    int h = (int)(rest % NH);
    rest /= NH;
    int part = (int)(rest % 3);
    int64_t bt = rest / 3;
    int src_head = part == 0 ? h : NH + (part - 1) * NKV + h / rep;
    out[idx] = __ldcs(&inp[bt * (NH + 2 * NKV) * HD + src_head * HD + d]);
}

// Version 2: one thread per inp element, writing it to every place it goes: once for Q, rep
// times for K and V. Each input is loaded exactly once, by one thread.
__global__ void repkv_forward_kernel2(floatX* out, const floatX* inp, int B, int T, int NH, int NKV, int HD) {
    const int64_t C_in = (int64_t)(NH + 2 * NKV) * HD;
    int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (int64_t)B * T * C_in) return;
    int64_t bt = idx / C_in;
    int c = (int)(idx - bt * C_in);
    int head = c / HD, d = c - head * HD;
    floatX* y = out + bt * 3 * NH * HD;
    floatX x = inp[idx];
    if (head < NH) {
        y[c] = x;
    } else {
        const int rep = NH / NKV;
        int kv = head - NH, part = 1 + kv / NKV, g = kv % NKV;
        floatX* dst = y + (part * NH + g * rep) * HD + d;
        for (int r = 0; r < rep; r++) dst[r * HD] = x;
    }
}

// Version 3: version 2 on 16-byte vectors (HD a multiple of x128::N): one 128-bit load and one
// (Q) or rep (K/V) 128-bit stores per thread.
__global__ void repkv_forward_kernel3(floatX* out, const floatX* inp, int B, int T, int NH, int NKV, int HD) {
    const int HDv = HD / x128::N;
    const int64_t row_vecs = (int64_t)(NH + 2 * NKV) * HDv;
    int64_t v = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (v >= (int64_t)B * T * row_vecs) return;
    int64_t bt = v / row_vecs;
    int c = (int)(v - bt * row_vecs);
    int head = c / HDv, dv = c - head * HDv;
    floatX* y = out + bt * 3 * NH * HD;
    x128 x = x128::load(inp + v * x128::N);
    if (head < NH) {
        x.store(y + (int64_t)c * x128::N);
    } else {
        const int rep = NH / NKV;
        int kv = head - NH, part = 1 + kv / NKV, g = kv % NKV;
        floatX* dst = y + ((int64_t)(part * NH + g * rep) * HDv + dv) * x128::N;
        for (int r = 0; r < rep; r++) x.store(dst + (int64_t)r * HD);
    }
}

// Version 4: fewer index divisions. Version 3 decodes each thread's flat index with a 64-bit division
// by the row length (a software routine of ~70 instructions on the GPU) and two 32-bit ones. Here the
// grid is two-dimensional: blockIdx.y walks the (b, t) rows (grid-stride past 65535 rows) and the x
// dimension covers one row's vectors, so the row needs no division and the rest is 32-bit.
__global__ void repkv_forward_kernel4(floatX* __restrict__ out, const floatX* __restrict__ inp,
                                      int B, int T, int NH, int NKV, int HD) {
    const int HDv = HD / x128::N, rep = NH / NKV;
    const int row_vecs = (NH + 2 * NKV) * HDv;
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= row_vecs) return;
    const int head = c / HDv, dv = c - head * HDv;
    const int kv = head - NH, part = 1 + kv / NKV, g = kv - (part - 1) * NKV;   // used when head >= NH
    for (int64_t bt = blockIdx.y; bt < (int64_t)B * T; bt += gridDim.y) {
        x128 x = x128::load(inp + (bt * row_vecs + c) * x128::N);
        floatX* y = out + bt * 3 * NH * HD;
        if (head < NH) {
            x.store(y + c * x128::N);
        } else {
            floatX* dst = y + ((part * NH + g * rep) * HDv + dv) * x128::N;
            for (int r = 0; r < rep; r++) x.store(dst + r * HD);
        }
    }
}

// Version 5: version 4 with streaming cache hints: inp is read once and out written once, so loads
// and stores carry evict-first (ld.global.cs / st.global.cs) and should not push other data out of L2.
__global__ void repkv_forward_kernel5(floatX* __restrict__ out, const floatX* __restrict__ inp,
                                      int B, int T, int NH, int NKV, int HD) {
    const int HDv = HD / x128::N, rep = NH / NKV;
    const int row_vecs = (NH + 2 * NKV) * HDv;
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= row_vecs) return;
    const int head = c / HDv, dv = c - head * HDv;
    const int kv = head - NH, part = 1 + kv / NKV, g = kv - (part - 1) * NKV;
    for (int64_t bt = blockIdx.y; bt < (int64_t)B * T; bt += gridDim.y) {
        x128 x = x128::load_cs(inp + (bt * row_vecs + c) * x128::N);
        floatX* y = out + bt * 3 * NH * HD;
        if (head < NH) {
            x.store_cs(y + c * x128::N);
        } else {
            floatX* dst = y + ((part * NH + g * rep) * HDv + dv) * x128::N;
            for (int r = 0; r < rep; r++) x.store_cs(dst + r * HD);
        }
    }
}

// Version 6: Hopper's bulk-copy engine (the TMA unit, cp.async.bulk, plain sm_90). One block per row
// (grid-stride, as many blocks as fit on the SMs): thread 0 pulls the whole input row into shared memory
// with one bulk copy that completes on an mbarrier; then one thread per destination (the Q block, and
// each of the 2*NH replicated K/V heads) issues a bulk store from shared memory. No thread touches the
// data and the copy engine moves it in large transactions; the cost is a round trip through shared
// memory and one row in flight per block.
__device__ __forceinline__ void repkv_bulk_load(void* smem_dst, const void* gmem_src, unsigned bytes, uint64_t* bar) {
    unsigned s = (unsigned)__cvta_generic_to_shared(smem_dst), b = (unsigned)__cvta_generic_to_shared(bar);
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(b), "r"(bytes) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 :: "r"(s), "l"(gmem_src), "r"(bytes), "r"(b) : "memory");
}
__device__ __forceinline__ void repkv_mbarrier_wait(uint64_t* bar, unsigned phase) {
    unsigned b = (unsigned)__cvta_generic_to_shared(bar);
    asm volatile("{\n .reg .pred p;\n WAIT_%=:\n"
                 " mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
                 " @!p bra WAIT_%=;\n}" :: "r"(b), "r"(phase) : "memory");
}
__device__ __forceinline__ void repkv_bulk_store(void* gmem_dst, const void* smem_src, unsigned bytes) {
    unsigned s = (unsigned)__cvta_generic_to_shared(smem_src);
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" :: "l"(gmem_dst), "r"(s), "r"(bytes) : "memory");
}
__global__ void repkv_forward_kernel6(floatX* __restrict__ out, const floatX* __restrict__ inp, int B, int T, int NH, int NKV, int HD) {
    extern __shared__ __align__(128) unsigned char repkv_row[];
    __shared__ __align__(8) uint64_t bar;
    const int rep = NH / NKV;
    const unsigned row_bytes = (unsigned)((NH + 2 * NKV) * HD * sizeof(floatX)), head_bytes = (unsigned)(HD * sizeof(floatX));
    if (threadIdx.x == 0) {
        unsigned b = (unsigned)__cvta_generic_to_shared(&bar);
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(b) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    unsigned phase = 0;
    for (int64_t bt = blockIdx.x; bt < (int64_t)B * T; bt += gridDim.x, phase ^= 1) {
        if (threadIdx.x == 0) repkv_bulk_load(repkv_row, inp + bt * (NH + 2 * NKV) * HD, row_bytes, &bar);
        repkv_mbarrier_wait(&bar, phase);
        floatX* y = out + bt * 3 * NH * HD;
        for (int j = threadIdx.x; j < 1 + 2 * NH; j += blockDim.x) {
            if (j == 0) {
                repkv_bulk_store(y, repkv_row, (unsigned)NH * head_bytes);
            } else {
                int slot = NH + (j - 1);                       // K heads NH..2NH-1, V heads 2NH..3NH-1
                int part = slot / NH, h = slot - part * NH;
                int src_head = NH + (part - 1) * NKV + h / rep;
                repkv_bulk_store(y + (int64_t)slot * HD, repkv_row + src_head * head_bytes, head_bytes);
            }
        }
        asm volatile("cp.async.bulk.commit_group;" ::: "memory");
        asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");   // shared memory read out: reusable
        __syncthreads();
    }
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

// ----------------------------------------------------------------------------------------------
// launchers and dispatcher

void repkv_forward1(floatX* out, const floatX* inp, int B, int T, int NH, int NKV, int HD, int block_size) {
    int64_t n = (int64_t)B * T * 3 * NH * HD;
    repkv_forward_kernel1<<<grid_x(ceil_div<int64_t>(n, block_size), "repkv_forward"), block_size>>>(out, inp, B, T, NH, NKV, HD);
}

void repkv_forward2(floatX* out, const floatX* inp, int B, int T, int NH, int NKV, int HD, int block_size) {
    int64_t n = (int64_t)B * T * (NH + 2 * NKV) * HD;
    repkv_forward_kernel2<<<grid_x(ceil_div<int64_t>(n, block_size), "repkv_forward"), block_size>>>(out, inp, B, T, NH, NKV, HD);
}

void repkv_forward3(floatX* out, const floatX* inp, int B, int T, int NH, int NKV, int HD, int block_size) {
    int64_t n = (int64_t)B * T * (NH + 2 * NKV) * HD / x128::N;
    repkv_forward_kernel3<<<grid_x(ceil_div<int64_t>(n, block_size), "repkv_forward"), block_size>>>(out, inp, B, T, NH, NKV, HD);
}

// versions 4-5: x covers one row's vectors, y the rows (at most 65535; the kernel strides over the rest)
static dim3 repkv_forward_grid2d(int B, int T, int NH, int NKV, int HD, int block_size) {
    int row_vecs = (NH + 2 * NKV) * HD / x128::N;
    return dim3(grid_x(ceil_div(row_vecs, block_size), "repkv_forward"), grid_y(std::min<int64_t>((int64_t)B * T, 65535), "repkv_forward"));
}

void repkv_forward4(floatX* out, const floatX* inp, int B, int T, int NH, int NKV, int HD, int block_size) {
    repkv_forward_kernel4<<<repkv_forward_grid2d(B, T, NH, NKV, HD, block_size), block_size>>>(out, inp, B, T, NH, NKV, HD);
}

void repkv_forward5(floatX* out, const floatX* inp, int B, int T, int NH, int NKV, int HD, int block_size) {
    repkv_forward_kernel5<<<repkv_forward_grid2d(B, T, NH, NKV, HD, block_size), block_size>>>(out, inp, B, T, NH, NKV, HD);
}

// version 6: one block per row in flight, as many blocks as fit (the shared-memory row limits them)
void repkv_forward6(floatX* out, const floatX* inp, int B, int T, int NH, int NKV, int HD, int block_size) {
    size_t smem = (size_t)(NH + 2 * NKV) * HD * sizeof(floatX);
    // the grid depends on the occupancy: computed once per (block, smem), not inside every timed call
    static int cached_block = -1, cached_grid = 0;
    static size_t cached_smem = 0;
    if (block_size != cached_block || smem != cached_smem) {
        cudaCheck(cudaFuncSetAttribute(repkv_forward_kernel6, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
        int dev = 0, sms = 0, blocks_per_sm = 0;
        cudaCheck(cudaGetDevice(&dev));
        cudaCheck(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
        cudaCheck(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, repkv_forward_kernel6, block_size, smem));
        cached_block = block_size; cached_smem = smem; cached_grid = sms * std::max(blocks_per_sm, 1);
    }
    unsigned grid = grid_x(std::min<int64_t>((int64_t)B * T, cached_grid), "repkv_forward version 6");
    repkv_forward_kernel6<<<grid, block_size, smem>>>(out, inp, B, T, NH, NKV, HD);
}

void repkv_forward(int kernel_num, floatX* out, const floatX* inp, int B, int T, int NH, int NKV, int HD, int block_size) {
    switch (kernel_num) {
        case 1: repkv_forward1(out, inp, B, T, NH, NKV, HD, block_size); break;
        case 2: repkv_forward2(out, inp, B, T, NH, NKV, HD, block_size); break;
        case 3: repkv_forward3(out, inp, B, T, NH, NKV, HD, block_size); break;
        case 4: repkv_forward4(out, inp, B, T, NH, NKV, HD, block_size); break;
        case 5: repkv_forward5(out, inp, B, T, NH, NKV, HD, block_size); break;
        case 6: repkv_forward6(out, inp, B, T, NH, NKV, HD, block_size); break;
        default: fail_args("repkv_forward has no version %d", kernel_num);
    }
}

std::string repkv_forward_skip_reason(int kernel_num, int NH, int NKV, int HD) {
    if (kernel_num >= 3 && HD % x128::N != 0)
        return "HD (" + std::to_string(HD) + ") is not a multiple of the " + std::to_string(x128::N) +
               "-element 16-byte vector (" DTYPE_NAME ")";
    if (kernel_num == 6 && ((int64_t)NH + 2 * (int64_t)NKV) * HD * (int64_t)sizeof(floatX) > 200 * 1024)
        return "an input row does not fit in 200 KB of shared memory";
    return "";
}

// ----------------------------------------------------------------------------------------------
// --load: the input of a --dump, validated (the shape and its checks: repkv.h)

// --load DIR: repkv_forward_meta.npy (B, T, NH, NKV, HD) and repkv_forward_inp.npy (B, T, (NH + 2*NKV)*HD)
inline std::vector<float> repkv_forward_load(const std::string& dir, RepkvShape& s) {
    s = repkv_read_meta(dir, "repkv_forward", "out");
    std::vector<float> inp;
    std::vector<int64_t> sh;
    read_npy(dir, "repkv_forward_inp", inp, sh, 3);
    const int64_t C_in = (int64_t)(s.NH + 2 * (int64_t)s.NKV) * s.HD;
    require(sh[0] == s.B && sh[1] == s.T && sh[2] == C_in, "--load: repkv_forward_inp has shape (%lld, %lld, %lld); the meta gives (%d, %d, %lld)",
            (long long)sh[0], (long long)sh[1], (long long)sh[2], s.B, s.T, (long long)C_in);
    for (size_t i = 0; i < inp.size(); i++)
        require(std::isfinite(inp[i]), "--load: repkv_forward_inp[%zu] (flat) is %g; the inputs must be finite", i, inp[i]);
    return inp;
}

inline void repkv_forward_dump(const std::string& dir, const RepkvShape& s, const float* inp, const float* ref, const float* out) {
    const int64_t C_in = (int64_t)(s.NH + 2 * (int64_t)s.NKV) * s.HD;
    repkv_write_meta(dir, "repkv_forward", s);
    write_npy(dir, "repkv_forward_inp", inp, {s.B, s.T, C_in});
    write_npy(dir, "repkv_forward_out_ref", ref, {s.B, s.T, 3, s.NH, s.HD});
    if (out) write_npy(dir, "repkv_forward_out", out, {s.B, s.T, 3, s.NH, s.HD});
}

// ----------------------------------------------------------------------------------------------

#ifndef NO_MAIN
int main(int argc, char** argv) {
    RepkvShape s;
    Cli cli("repkv_forward", "Grouped-query attention's K/V replication: copy each K/V head NH/NKV times.", 6, 3);
    repkv_add_flags(cli, s);
    cli.constraints = "  B, T, NH, NKV, HD >= 1; NH must be a multiple of NKV; 3*NH*HD < 2^31;\n"
                      "  versions 3-6 need HD a multiple of 4 (fp32) or 8 (bf16); version 6 an input row within 200 KB";
    cli.supports_load = true;
    cli.parse(argc, argv);
    std::vector<float> inp_f;
    if (!cli.load_dir.empty()) inp_f = repkv_forward_load(cli.load_dir, s);
    repkv_check_shape(s, "out");
    const int B = s.B, T = s.T, NH = s.NH, NKV = s.NKV, HD = s.HD;
    const int64_t n_in = (int64_t)B * T * (NH + 2 * (int64_t)NKV) * HD, n_out = (int64_t)B * T * 3 * NH * HD;
    select_versions(cli, [&](int k) { return repkv_forward_skip_reason(k, NH, NKV, HD); }, false);
    require_host_memory((double)n_in * (8 + sizeof(floatX)) + (double)n_out * 4 * (cli.dump_dir.empty() ? 1 : 2), "repkv_forward");
    cuda_init();
    require_device_memory((double)(n_in + n_out) * sizeof(floatX), "repkv_forward", !cli.check_only);

    Rng rng(cli.seed);
    if (inp_f.empty()) inp_f = make_random_floats(n_in, rng);
    std::vector<floatX> inp = to_floatX(inp_f);
    inp_f = to_float_vec(inp);                     // the reference sees the values rounded to floatX
    std::vector<float> ref(n_out);
    repkv_forward_cpu(ref.data(), inp_f.data(), B, T, NH, NKV, HD);

    floatX* d_inp = device_upload(inp);
    floatX* d_out = device_alloc<floatX>(n_out);

    char shape[128];
    snprintf(shape, sizeof shape, "B%d,T%d,NH%d,NKV%d,HD%d", B, T, NH, NKV, HD);
    OpRunner r;
    r.op = "repkv_forward";
    r.shape = shape;
    r.bytes = (double)(n_in + n_out) * sizeof(floatX);
    r.skip_reason = [&](int k) { return repkv_forward_skip_reason(k, NH, NKV, HD); };
    r.prepare_check = [&] { poison(d_out, n_out * sizeof(floatX)); };
    r.launch = [&](int k, int block) { repkv_forward(k, d_out, d_inp, B, T, NH, NKV, HD, block); };
    r.check = [&](int, int) { return validate_device("out", d_out, ref.data(), n_out, REPKV_FWD_ATOL, REPKV_FWD_RTOL); };
    int rc = run_versions(cli, r);

    if (!cli.dump_dir.empty()) {
        std::vector<float> got = to_float_vec(device_download(d_out, n_out));
        repkv_forward_dump(cli.dump_dir, s, inp_f.data(), ref.data(), got.data());
        printf("dumped repkv_forward_{meta,inp,out_ref,out}.npy to %s\n", cli.dump_dir.c_str());
    }
    cudaCheck(cudaFree(d_inp));
    cudaCheck(cudaFree(d_out));
    return rc;
}
#endif
