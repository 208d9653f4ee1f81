/*
repkv backward: the gradient of grouped-query attention's K/V head replication (llm.c, Llama 3).

The forward (repkv_forward.cu) copies each of the NKV key and value heads rep = NH / NKV times so
that Q, K and V all have NH heads. Its backward copies the Q gradient through and sums the rep
gradients of each K and V head:

  dout : (B, T, 3, NH, HD)              [dQ | dK replicated | dV replicated]
  dinp : (B, T, (NH + 2*NKV) * HD)      [dQ | dK | dV]
  dinp[b,t, Q h]          = dout[b,t,0,h]
  dinp[b,t, NH + g]       = sum_{r<rep} dout[b,t,1,g*rep + r]      (K head g)
  dinp[b,t, NH + NKV + g] = sum_{r<rep} dout[b,t,2,g*rep + r]      (V head g)

Fewest bytes: read dout once, write dinp once:
  bytes = B*T*HD*(3*NH + NH + 2*NKV) * sizeof(floatX)  = 604 MB in fp32 at B8,T1024,NH32,NKV8,HD128.
No arithmetic to speak of, so the floor is bytes / copy bandwidth (0.142 ms at the median 4255 GB/s
of the runs in results/h200.md).

Versions. H200, 2026-11-29, bench size, best block; median ms and % of the device-to-device copy
bandwidth measured in the same process (every number: results/h200.md):
                                                                       fp32             bf16
  1  one thread per dout element, most K/V threads idle (llm.c's)     0.7151  19.8%    0.7104  10.0%
  2  one thread per dinp element: no idle threads, dout read once     0.2601  54.6%    0.2534  28.0%
  3  16-byte vectors, one thread per 16 bytes of dinp (the default)   0.1432  99.1%    0.0760  93.4%
  4  version 3 on a 2-D grid: 32-bit index math, no 64-bit division   0.1451  97.8%    0.0752  94.4%
  5  version 4 with streaming (evict-first) loads and stores          0.1515  93.7%    0.0795  89.3%
PyTorch's composite (reshape / sum / cat; scripts/peers/repkv.py): 0.3016 ms (2026-11-30).

Lessons:
- Version 1 pays twice: half its threads idle, and the rest issue 4-byte accesses. Version 2 fixes the
  first, version 3 the second and reaches the copy roof: nothing is left to win in fp32.
- In bf16 the same bytes are twice the elements, so index math weighs more per byte and the 2-D grid
  (version 4) edges ahead, within run-to-run noise of version 3.
- Evict-first hints cost 2-5% when nothing else competes for L2.
- Ideas measured and dropped, and the effect of the L2 flush: results/notes/repkv_backward.md.

Compile and run:
  make repkv_backward          && ./repkv_backward 3
  make repkv_backward_bf16     && ./repkv_backward_bf16 all
*/
#include "repkv.h"

// tolerances: the Q part is a copy; a K/V sum of rep values in fp32 differs from the double
// reference by a few fp32 ulps; in bf16 the sum is rounded once to bf16 (half an ulp, 2^-9 relative)
#ifdef ENABLE_BF16
static const float REPKV_BWD_ATOL = 1e-5f, REPKV_BWD_RTOL = 4e-3f;
#else
static const float REPKV_BWD_ATOL = 1e-6f, REPKV_BWD_RTOL = 1e-6f;
#endif

// ----------------------------------------------------------------------------------------------
// CPU reference: plain loops over the layout above, sums in double

void repkv_backward_cpu(float* dinp, const float* dout, int B, int T, int NH, int NKV, int HD) {
    const int rep = NH / NKV;
    const int64_t C_in = (int64_t)(NH + 2 * NKV) * HD, C_out = (int64_t)3 * NH * HD;
    for (int64_t bt = 0; bt < (int64_t)B * T; bt++) {
        float* dx = dinp + bt * C_in;
        const float* dy = dout + bt * C_out;
        for (int64_t i = 0; i < (int64_t)NH * HD; i++) dx[i] = dy[i];
        for (int part = 1; part <= 2; part++) {              // 1: K, 2: V
            for (int g = 0; g < NKV; g++) {
                for (int d = 0; d < HD; d++) {
                    double sum = 0.0;
                    for (int r = 0; r < rep; r++) sum += dy[((int64_t)part * NH + g * rep + r) * HD + d];
                    dx[((int64_t)NH + (part - 1) * NKV + g) * HD + d] = (float)sum;
                }
            }
        }
    }
}

// ----------------------------------------------------------------------------------------------
// GPU kernels

// Version 1, the seed's approach: one thread per dout element, decoded into (bt, part, head, d).
// Only a K/V thread whose head is the first of its group (h % rep == 0) works, summing rep values;
// the other rep-1 of every rep K/V threads return at once. With rep = 4, half of the grid idles.
// (The seed's int index overflows past 2^31 elements: here it is 64-bit, the only change.)
__global__ void repkv_backward_kernel1(floatX* dinp, const floatX* dout, int B, int T, int NH, int NKV, int HD) {
    int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (int64_t)B * T * 3 * NH * HD) return;
    const int rep = NH / NKV;
    int d = (int)(idx % HD);
    int64_t rest = idx / HD;
    int h = (int)(rest % NH);
    rest /= NH;
    int part = (int)(rest % 3);
    int64_t bt = rest / 3;
    floatX* dx = dinp + bt * (NH + 2 * NKV) * HD;
    if (part == 0) {
        dx[h * HD + d] = __ldcs(&dout[idx]);
    } else if (h % rep == 0) {
        float sum = 0.0f;
        for (int r = 0; r < rep; r++) sum += to_float(__ldcs(&dout[idx + (int64_t)r * HD]));
        dx[(NH + (part - 1) * NKV + h / rep) * HD + d] = from_float<floatX>(sum);
    }
}

// Version 2: one thread per dinp element, so every thread writes. A Q thread copies one value; a
// K/V thread reads the rep values of its group. Every dout element is read by exactly one thread.
__global__ void repkv_backward_kernel2(floatX* dinp, const floatX* dout, int B, int T, int NH, int NKV, int HD) {
    const int64_t C_in = (int64_t)(NH + 2 * NKV) * HD;
    int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (int64_t)B * T * C_in) return;
    int64_t bt = idx / C_in;
    int c = (int)(idx - bt * C_in);
    int head = c / HD, d = c - head * HD;
    const floatX* dy = dout + bt * 3 * NH * HD;
    if (head < NH) {
        dinp[idx] = dy[c];
    } else {
        const int rep = NH / NKV;
        int kv = head - NH;                  // 0..2*NKV-1
        int part = 1 + kv / NKV, g = kv % NKV;
        const floatX* src = dy + (part * NH + g * rep) * HD + d;
        float sum = 0.0f;
        for (int r = 0; r < rep; r++) sum += to_float(src[r * HD]);
        dinp[idx] = from_float<floatX>(sum);
    }
}

// Version 3: version 2 on 16-byte vectors. A thread owns x128::N consecutive elements of one head
// (HD must be a multiple of x128::N), issues one 128-bit load per source vector and one 128-bit
// store: a quarter (fp32) or an eighth (bf16) of the instructions and threads of version 2.
__global__ void repkv_backward_kernel3(floatX* dinp, const floatX* dout, int B, int T, int NH, int NKV, int HD) {
    const int HDv = HD / x128::N;                            // vectors per head
    const int64_t row_vecs = (int64_t)(NH + 2 * NKV) * HDv;
    int64_t v = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (v >= (int64_t)B * T * row_vecs) return;
    int64_t bt = v / row_vecs;
    int c = (int)(v - bt * row_vecs);
    int head = c / HDv, dv = c - head * HDv;
    const floatX* dy = dout + bt * 3 * NH * HD;
    floatX* dx = dinp + v * x128::N;
    if (head < NH) {
        x128::load(dy + (int64_t)c * x128::N).store(dx);
    } else {
        const int rep = NH / NKV;
        int kv = head - NH, part = 1 + kv / NKV, g = kv % NKV;
        const floatX* src = dy + ((int64_t)(part * NH + g * rep) * HDv + dv) * x128::N;
        float sum[x128::N] = {};
        for (int r = 0; r < rep; r++) {
            x128 in = x128::load(src + (int64_t)r * HD);
            for (int k = 0; k < x128::N; k++) sum[k] += to_float(in.v[k]);
        }
        x128 out;
        for (int k = 0; k < x128::N; k++) out.v[k] = from_float<floatX>(sum[k]);
        out.store(dx);
    }
}

// Version 4: fewer index divisions. Version 3 decodes each thread's flat index with a 64-bit division
// by the row length (a software routine of ~70 instructions on the GPU) and two 32-bit ones. Here the
// grid is two-dimensional: blockIdx.y walks the (b, t) rows (grid-stride past 65535 rows) and the x
// dimension covers one row's vectors, so the row needs no division and the rest is 32-bit.
__global__ void repkv_backward_kernel4(floatX* __restrict__ dinp, const floatX* __restrict__ dout,
                                       int B, int T, int NH, int NKV, int HD) {
    const int HDv = HD / x128::N, rep = NH / NKV;
    const int row_vecs = (NH + 2 * NKV) * HDv;
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= row_vecs) return;
    const int head = c / HDv, dv = c - head * HDv;
    const int kv = head - NH, part = 1 + kv / NKV, g = kv - (part - 1) * NKV;   // used when head >= NH
    for (int64_t bt = blockIdx.y; bt < (int64_t)B * T; bt += gridDim.y) {
        const floatX* dy = dout + bt * 3 * NH * HD;
        floatX* dx = dinp + (bt * row_vecs + c) * x128::N;
        if (head < NH) {
            x128::load(dy + c * x128::N).store(dx);
        } else {
            const floatX* src = dy + ((part * NH + g * rep) * HDv + dv) * x128::N;
            float sum[x128::N] = {};
            for (int r = 0; r < rep; r++) {
                x128 in = x128::load(src + r * HD);
                for (int k = 0; k < x128::N; k++) sum[k] += to_float(in.v[k]);
            }
            x128 out;
            for (int k = 0; k < x128::N; k++) out.v[k] = from_float<floatX>(sum[k]);
            out.store(dx);
        }
    }
}

// Version 5: version 4 with streaming cache hints. dout is read once and dinp written once, so the
// loads and stores carry evict-first (ld.global.cs / st.global.cs): they should not push other data
// out of L2. Nothing else in this benchmark wants L2, so this measures the hints' own cost.
__global__ void repkv_backward_kernel5(floatX* __restrict__ dinp, const floatX* __restrict__ dout,
                                       int B, int T, int NH, int NKV, int HD) {
    const int HDv = HD / x128::N, rep = NH / NKV;
    const int row_vecs = (NH + 2 * NKV) * HDv;
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= row_vecs) return;
    const int head = c / HDv, dv = c - head * HDv;
    const int kv = head - NH, part = 1 + kv / NKV, g = kv - (part - 1) * NKV;
    for (int64_t bt = blockIdx.y; bt < (int64_t)B * T; bt += gridDim.y) {
        const floatX* dy = dout + bt * 3 * NH * HD;
        floatX* dx = dinp + (bt * row_vecs + c) * x128::N;
        if (head < NH) {
            x128::load_cs(dy + c * x128::N).store_cs(dx);
        } else {
            const floatX* src = dy + ((part * NH + g * rep) * HDv + dv) * x128::N;
            float sum[x128::N] = {};
            for (int r = 0; r < rep; r++) {
                x128 in = x128::load_cs(src + r * HD);
                for (int k = 0; k < x128::N; k++) sum[k] += to_float(in.v[k]);
            }
            x128 out;
            for (int k = 0; k < x128::N; k++) out.v[k] = from_float<floatX>(sum[k]);
            out.store_cs(dx);
        }
    }
}

// ----------------------------------------------------------------------------------------------
// launchers and dispatcher

void repkv_backward1(floatX* dinp, const floatX* dout, int B, int T, int NH, int NKV, int HD, int block_size) {
    int64_t n = (int64_t)B * T * 3 * NH * HD;
    repkv_backward_kernel1<<<grid_x(ceil_div<int64_t>(n, block_size), "repkv_backward"), block_size>>>(dinp, dout, B, T, NH, NKV, HD);
}

void repkv_backward2(floatX* dinp, const floatX* dout, int B, int T, int NH, int NKV, int HD, int block_size) {
    int64_t n = (int64_t)B * T * (NH + 2 * NKV) * HD;
    repkv_backward_kernel2<<<grid_x(ceil_div<int64_t>(n, block_size), "repkv_backward"), block_size>>>(dinp, dout, B, T, NH, NKV, HD);
}

void repkv_backward3(floatX* dinp, const floatX* dout, int B, int T, int NH, int NKV, int HD, int block_size) {
    int64_t n = (int64_t)B * T * (NH + 2 * NKV) * HD / x128::N;
    repkv_backward_kernel3<<<grid_x(ceil_div<int64_t>(n, block_size), "repkv_backward"), block_size>>>(dinp, dout, B, T, NH, NKV, HD);
}

// versions 4-5: x covers one row's vectors, y the rows (at most 65535; the kernel strides over the rest)
static dim3 repkv_backward_grid2d(int B, int T, int NH, int NKV, int HD, int block_size) {
    int row_vecs = (NH + 2 * NKV) * HD / x128::N;
    return dim3(grid_x(ceil_div(row_vecs, block_size), "repkv_backward"), grid_y(std::min<int64_t>((int64_t)B * T, 65535), "repkv_backward"));
}

void repkv_backward4(floatX* dinp, const floatX* dout, int B, int T, int NH, int NKV, int HD, int block_size) {
    repkv_backward_kernel4<<<repkv_backward_grid2d(B, T, NH, NKV, HD, block_size), block_size>>>(dinp, dout, B, T, NH, NKV, HD);
}

void repkv_backward5(floatX* dinp, const floatX* dout, int B, int T, int NH, int NKV, int HD, int block_size) {
    repkv_backward_kernel5<<<repkv_backward_grid2d(B, T, NH, NKV, HD, block_size), block_size>>>(dinp, dout, B, T, NH, NKV, HD);
}

void repkv_backward(int kernel_num, floatX* dinp, const floatX* dout, int B, int T, int NH, int NKV, int HD, int block_size) {
    switch (kernel_num) {
        case 1: repkv_backward1(dinp, dout, B, T, NH, NKV, HD, block_size); break;
        case 2: repkv_backward2(dinp, dout, B, T, NH, NKV, HD, block_size); break;
        case 3: repkv_backward3(dinp, dout, B, T, NH, NKV, HD, block_size); break;
        case 4: repkv_backward4(dinp, dout, B, T, NH, NKV, HD, block_size); break;
        case 5: repkv_backward5(dinp, dout, B, T, NH, NKV, HD, block_size); break;
        default: fail_args("repkv_backward has no version %d", kernel_num);
    }
}

// the precondition of each version on a shape, "" when it can run
std::string repkv_backward_skip_reason(int kernel_num, int NH, int NKV, int HD) {
    (void)NH; (void)NKV;
    if (kernel_num >= 3 && HD % x128::N != 0)
        return "HD (" + std::to_string(HD) + ") is not a multiple of the " + std::to_string(x128::N) +
               "-element 16-byte vector (" DTYPE_NAME ")";
    return "";
}

// ----------------------------------------------------------------------------------------------
// --load: the input of a --dump, validated (the shape and its checks: repkv.h)

// --load DIR: repkv_backward_meta.npy (B, T, NH, NKV, HD) and repkv_backward_dout.npy (B, T, 3, NH, HD)
inline std::vector<float> repkv_backward_load(const std::string& dir, RepkvShape& s) {
    s = repkv_read_meta(dir, "repkv_backward", "dout");
    std::vector<float> dout;
    std::vector<int64_t> sh;
    read_npy(dir, "repkv_backward_dout", dout, sh, 5);
    require(sh[0] == s.B && sh[1] == s.T && sh[2] == 3 && sh[3] == s.NH && sh[4] == s.HD,
            "--load: repkv_backward_dout has shape (%lld, %lld, %lld, %lld, %lld); the meta gives (%d, %d, 3, %d, %d)", (long long)sh[0],
            (long long)sh[1], (long long)sh[2], (long long)sh[3], (long long)sh[4], s.B, s.T, s.NH, s.HD);
    for (size_t i = 0; i < dout.size(); i++)
        require(std::isfinite(dout[i]), "--load: repkv_backward_dout[%zu] (flat) is %g; the inputs must be finite", i, dout[i]);
    return dout;
}

inline void repkv_backward_dump(const std::string& dir, const RepkvShape& s, const float* dout, const float* ref, const float* dinp) {
    const int64_t C_in = (int64_t)(s.NH + 2 * (int64_t)s.NKV) * s.HD;
    repkv_write_meta(dir, "repkv_backward", s);
    write_npy(dir, "repkv_backward_dout", dout, {s.B, s.T, 3, s.NH, s.HD});
    write_npy(dir, "repkv_backward_dinp_ref", ref, {s.B, s.T, C_in});
    if (dinp) write_npy(dir, "repkv_backward_dinp", dinp, {s.B, s.T, C_in});
}

// ----------------------------------------------------------------------------------------------

#ifndef NO_MAIN
int main(int argc, char** argv) {
    RepkvShape s;
    Cli cli("repkv_backward", "Backward of grouped-query attention's K/V replication: sum the rep copies of each K/V head.", 5, 3);
    repkv_add_flags(cli, s);
    cli.constraints = "  B, T, NH, NKV, HD >= 1; NH must be a multiple of NKV; 3*NH*HD < 2^31;\n"
                      "  versions 3-5 need HD a multiple of 4 (fp32) or 8 (bf16)";
    cli.supports_load = true;
    cli.parse(argc, argv);
    std::vector<float> dout_f;
    if (!cli.load_dir.empty()) dout_f = repkv_backward_load(cli.load_dir, s);
    repkv_check_shape(s, "dout");
    const int B = s.B, T = s.T, NH = s.NH, NKV = s.NKV, HD = s.HD;
    const int64_t n_in = (int64_t)B * T * (NH + 2 * (int64_t)NKV) * HD, n_out = (int64_t)B * T * 3 * NH * HD;
    select_versions(cli, [&](int k) { return repkv_backward_skip_reason(k, NH, NKV, HD); }, false);
    require_host_memory((double)n_out * (8 + sizeof(floatX)) + (double)n_in * 4 * (cli.dump_dir.empty() ? 1 : 2), "repkv_backward");
    cuda_init();
    require_device_memory((double)(n_in + n_out) * sizeof(floatX), "repkv_backward", !cli.check_only);

    // inputs, rounded once to the element type; the reference sees the same rounded values
    Rng rng(cli.seed);
    if (dout_f.empty()) dout_f = make_random_floats(n_out, rng);
    std::vector<floatX> dout = to_floatX(dout_f);
    dout_f = to_float_vec(dout);
    std::vector<float> ref(n_in);
    repkv_backward_cpu(ref.data(), dout_f.data(), B, T, NH, NKV, HD);

    floatX* d_dout = device_upload(dout);
    floatX* d_dinp = device_alloc<floatX>(n_in);

    char shape[128];
    snprintf(shape, sizeof shape, "B%d,T%d,NH%d,NKV%d,HD%d", B, T, NH, NKV, HD);
    OpRunner r;
    r.op = "repkv_backward";
    r.shape = shape;
    r.bytes = (double)(n_in + n_out) * sizeof(floatX);
    r.skip_reason = [&](int k) { return repkv_backward_skip_reason(k, NH, NKV, HD); };
    r.prepare_check = [&] { poison(d_dinp, n_in * sizeof(floatX)); };
    r.launch = [&](int k, int block) { repkv_backward(k, d_dinp, d_dout, B, T, NH, NKV, HD, block); };
    r.check = [&](int, int) { return validate_device("dinp", d_dinp, ref.data(), n_in, REPKV_BWD_ATOL, REPKV_BWD_RTOL); };
    int rc = run_versions(cli, r);

    if (!cli.dump_dir.empty()) {
        std::vector<float> got = to_float_vec(device_download(d_dinp, n_in));
        repkv_backward_dump(cli.dump_dir, s, dout_f.data(), ref.data(), got.data());
        printf("dumped repkv_backward_{meta,dout,dinp_ref,dinp}.npy to %s\n", cli.dump_dir.c_str());
    }
    cudaCheck(cudaFree(d_dout));
    cudaCheck(cudaFree(d_dinp));
    return rc;
}
#endif
