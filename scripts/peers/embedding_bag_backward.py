#!/usr/bin/env python3
"""embedding_bag_backward against PyTorch (and FBGEMM where it imports).

1. Cross-check: the op's --dump at small sizes (every version checked by the op itself, the dump holds the
   last version's step) against PyTorch: one nn.EmbeddingBag(sparse=True) over the T tables concatenated
   (same D), forward + backward with the op's grad_output, then torch.optim.SGD / Adagrad (lr 0.1, eps 0.1,
   Adagrad's state set to the op's initial state). Compared: the weights after one step (sgd, adagrad),
   Adagrad's state, and the gradient itself (dense). Rowwise Adagrad has no PyTorch optimizer; the op's own
   check covers it.
2. Timing at FBGEMM's default size (T=32 E=1e5 D=128 B=512 L=20), uniform and Zipf 1.15 (FBGEMM's recipe):
   PyTorch forward, forward+backward, + SGD step, + Adagrad step (sparse gradients), printed as PEER lines
   with the shape of the op's RESULT lines (rowwise_adagrad / sgd).
3. FBGEMM: SplitTableBatchedEmbeddingBagsCodegen with EXACT_ROWWISE_ADAGRAD (forward, and forward + its
   fused backward) at the same sizes, if `import fbgemm_gpu` works; otherwise `SKIP fbgemm: <why>`.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_util as pu

OP = "embedding_bag_backward"
# the fbgemm-gpu wheel that matches torch 2.11 / CUDA 13 / Python 3.12 on PyPI, as read on 2026-11-29
FBGEMM_WHEEL = "fbgemm_gpu-1.6.0-cp312-cp312-manylinux_2_28_x86_64.whl (443 MiB)"

pu.skip_without_torch(f"{OP} peers")
import numpy as np
import torch

result = pu.Outcome()


def concat_inputs(d, T, B):
    """The op's dump as one concatenated table: row ids shifted by each table's first row, bags t-major."""
    indices = torch.from_numpy(pu.load(d, OP + "_indices")).cuda()
    offsets = torch.from_numpy(pu.load(d, OP + "_offsets")).cuda()
    hash_offsets = torch.from_numpy(pu.load(d, OP + "_hash_offsets")).cuda()
    counts = offsets[1:] - offsets[:-1]                                    # lookups per bag, t-major
    table_of_bag = torch.arange(T * B, device="cuda") // B
    table_of_lookup = torch.repeat_interleave(table_of_bag, counts)
    return indices + hash_offsets[table_of_lookup], offsets


def cross_check(name, args, opt, mean=False, weighted=False):
    full = ["all", "--check-only", "--optimizer", opt] + args + (["--pooling", "mean"] if mean else []) + (["--weighted"] if weighted else [])
    with pu.dumped_run(result, OP, full, tail=1500) as d:
        if d is not None:
            compare_step(d, name, opt, mean, weighted)


def compare_step(d, name, opt, mean, weighted):
    """The op's dumped step against nn.EmbeddingBag + torch.optim on the same inputs."""
    D_offsets = pu.load(d, OP + "_D_offsets")
    T = len(D_offsets) - 1
    D = int(D_offsets[1] - D_offsets[0])
    offsets_np = pu.load(d, OP + "_offsets")
    B = (len(offsets_np) - 1) // T
    rows = int(pu.load(d, OP + "_hash_offsets")[-1])
    idx, offsets = concat_inputs(d, T, B)
    go = torch.from_numpy(pu.load(d, OP + "_grad_output")).cuda()          # [B, T*D]
    go_bags = go.view(B, T, D).permute(1, 0, 2).reshape(T * B, D)          # bag (t, b) -> row t*B + b
    w0 = torch.from_numpy(pu.load(d, OP + "_weights_before")).cuda().view(rows, D)
    emb = torch.nn.EmbeddingBag(rows, D, mode="mean" if mean else "sum", sparse=True, include_last_offset=True).cuda()
    with torch.no_grad():
        emb.weight.copy_(w0)
    psw = torch.from_numpy(pu.load(d, OP + "_per_sample_weights")).cuda() if weighted else None
    y = emb(idx, offsets, per_sample_weights=psw)
    y.backward(go_bags)
    checks = []
    if opt == "dense":
        got = torch.from_numpy(pu.load(d, OP + "_grad")).cuda().view(rows, D)
        checks.append(("gradient", got, emb.weight.grad.to_dense()))
    else:
        if opt == "sgd":
            step = torch.optim.SGD([emb.weight], lr=0.1)
        else:
            step = torch.optim.Adagrad([emb.weight], lr=0.1, eps=0.1)
            if "sum" not in step.state[emb.weight]:
                print(f"SKIP {OP} {name} {opt}: this torch's Adagrad makes its state lazily; the op's initial state cannot be set")
                return
            with torch.no_grad():
                step.state[emb.weight]["sum"].copy_(torch.from_numpy(pu.load(d, OP + "_state_before")).cuda().view(rows, D))
        step.step()
        got = torch.from_numpy(pu.load(d, OP + "_weights_after")).cuda().view(rows, D)
        checks.append(("weights", got, emb.weight.detach()))
        if opt == "adagrad":
            got_s = torch.from_numpy(pu.load(d, OP + "_state_after")).cuda().view(rows, D)
            checks.append(("state", got_s, step.state[emb.weight]["sum"]))
    for what, got, want in checks:
        err = (got - want).abs().max().item()
        result.report(torch.allclose(got, want, atol=2e-5, rtol=2e-5),
                      f"{OP} {name} {opt}: {what} against PyTorch (max abs diff {err:.2e})")


small = ["--T", "3", "--E", "40", "--D", "8", "--B", "6", "--L", "4", "--alpha", "0", "--seed", "1"]
zipf = ["--T", "2", "--E", "300", "--D", "36", "--B", "50", "--L", "9", "--seed", "2"]
rowd = ["--T", "2", "--E", "64", "--D", "132", "--B", "40", "--L", "5", "--one-row", "--seed", "3"]
for opt in ["sgd", "dense", "adagrad"]:
    cross_check("T3,E40,D8,B6,L4 uniform", small, opt)
    cross_check("T2,E300,D36,B50,L9 Zipf", zipf, opt)
cross_check("T3,E40,D8,B6,L4 uniform mean", small, "sgd", mean=True)
cross_check("T3,E40,D8,B6,L4 uniform weighted", small, "sgd", weighted=True)
cross_check("T2,E300,D36,B50,L9 Zipf weighted", zipf, "dense", weighted=True)
cross_check("T2,E64,D132,B40,L5 one row", rowd, "sgd")
cross_check("T2,E64,D132,B40,L5 one row", rowd, "dense")


# ---------------------------------------------------------------------------------------------
# timing at FBGEMM's default size


def zipf_bags(rng, B, L, E, alpha):
    """FBGEMM's recipe (as common.h's make_bag_indices): max(3L, 20) Zipf draws per bag, (x-1) % E, the L
    smallest distinct, then a random permutation of the row ids."""
    draws = max(3 * L, 20)
    out = np.empty((B, L), dtype=np.int64)
    for b in range(B):
        vals = np.unique((rng.zipf(alpha, draws) - 1) % E)
        while len(vals) < L:
            vals = np.unique(np.concatenate([vals, (rng.zipf(alpha, L) - 1) % E]))
        out[b] = vals[:L]
    return rng.permutation(E)[out]


def make_batch(T, E, B, L, alpha, seed):
    rng = np.random.default_rng(seed)
    per_table = [zipf_bags(rng, B, L, E, alpha) if alpha > 1 else rng.integers(0, E, size=(B, L)) for _ in range(T)]
    ids = np.concatenate([p.reshape(-1) for p in per_table])               # t-major, bag-major
    offsets = np.arange(T * B + 1, dtype=np.int64) * L
    return torch.from_numpy(ids).cuda(), torch.from_numpy(offsets).cuda()


T, E, D, B, L = 32, 100000, 128, 512, 20
rw = 4 * B * T * D + 4 * B * T * D * L                                     # FBGEMM's rw (fp32)
for alpha in [0.0, 1.15]:
    shape = f"T{T},E{E},D{D},B{B},L{L},alpha{alpha:g},sum"
    ids, offsets = make_batch(T, E, B, L, alpha, 7)
    table_base = (torch.arange(T, device="cuda") * E).repeat_interleave(B * L)
    ids_cat = ids + table_base
    uniq = torch.unique(ids_cat).numel()
    grad = torch.randn(T * B, D, device="cuda")
    emb = torch.nn.EmbeddingBag(T * E, D, mode="sum", sparse=True, include_last_offset=True).cuda()
    sgd = torch.optim.SGD([emb.weight], lr=0.1)
    ada = torch.optim.Adagrad([emb.weight], lr=0.1, eps=0.1)

    def clear():
        emb.weight.grad = None

    def fwd():
        return emb(ids_cat, offsets)

    def fwd_bwd():
        emb(ids_cat, offsets).backward(grad)

    def fwd_bwd_sgd():
        emb(ids_cat, offsets).backward(grad)
        sgd.step()

    def fwd_bwd_adagrad():
        emb(ids_cat, offsets).backward(grad)
        ada.step()

    extra = f"unique_rows={uniq}"
    with torch.no_grad():
        t_fwd = pu.time_cuda(fwd)
    pu.peer_line(OP, "pytorch_forward", shape + ",rowwise_adagrad", t_fwd, extra)
    t = pu.time_cuda(fwd_bwd, setup=clear)
    pu.peer_line(OP, "pytorch_fwd_bwd_sparse", shape + ",rowwise_adagrad", t, extra)
    t = pu.time_cuda(fwd_bwd_sgd, setup=clear)
    pu.peer_line(OP, "pytorch_fwd_bwd_sgd_step", shape + ",sgd", t, extra + f" fbgemm_gbps={2 * rw / (t[0] * 1e-3) / 1e9:.0f}")
    t = pu.time_cuda(fwd_bwd_adagrad, setup=clear)
    pu.peer_line(OP, "pytorch_fwd_bwd_adagrad_step", shape + ",rowwise_adagrad", t,
                 extra + f" fbgemm_gbps={2 * rw / (t[0] * 1e-3) / 1e9:.0f} note=elementwise_adagrad")
    del emb, sgd, ada
    torch.cuda.empty_cache()

# ---------------------------------------------------------------------------------------------
# FBGEMM (fused rowwise Adagrad)

try:
    import fbgemm_gpu  # noqa: F401
    from fbgemm_gpu.split_table_batched_embeddings_ops_training import SplitTableBatchedEmbeddingBagsCodegen
    from fbgemm_gpu.split_embedding_configs import EmbOptimType, SparseType
    from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation, PoolingMode
    try:
        from fbgemm_gpu.split_table_batched_embeddings_ops_common import ComputeDevice
    except ImportError:
        from fbgemm_gpu.split_table_batched_embeddings_ops_training import ComputeDevice
except Exception as e:  # ImportError, or a wheel built against another torch
    print(f"SKIP fbgemm: fbgemm_gpu does not import here ({e.__class__.__name__}: {e}); the wheel that matches "
          f"torch 2.11 / CUDA 13 / Python 3.12 is {FBGEMM_WHEEL} on PyPI")
    result.finish()

for alpha in [0.0, 1.15]:
    shape = f"T{T},E{E},D{D},B{B},L{L},alpha{alpha:g},sum,rowwise_adagrad"
    ids, offsets = make_batch(T, E, B, L, alpha, 7)
    tbe = SplitTableBatchedEmbeddingBagsCodegen(
        embedding_specs=[(E, D, EmbeddingLocation.DEVICE, ComputeDevice.CUDA) for _ in range(T)],
        optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD,
        learning_rate=0.1,
        eps=0.1,
        weights_precision=SparseType.FP32,
        output_dtype=SparseType.FP32,
        pooling_mode=PoolingMode.SUM,
    ).cuda()
    grad = torch.randn(B, T * D, device="cuda")

    def tbe_fwd():
        return tbe(ids, offsets)

    def tbe_fwd_bwd():
        tbe(ids, offsets).backward(grad)

    with torch.no_grad():
        t_fwd = pu.time_cuda(tbe_fwd)
    pu.peer_line(OP, "fbgemm_forward", shape, t_fwd)
    t = pu.time_cuda(tbe_fwd_bwd)
    bwd = t[0] - t_fwd[0]
    pu.peer_line(OP, "fbgemm_fwd_bwd_rowwise_adagrad", shape, t,
                 f"bwd_ms_est={bwd:.4f} fbgemm_gbps={2 * rw / (bwd * 1e-3) / 1e9:.0f}")
    del tbe
    torch.cuda.empty_cache()

result.finish()
