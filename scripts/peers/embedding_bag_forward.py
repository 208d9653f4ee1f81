#!/usr/bin/env python3
"""embedding_bag_forward against its peers, on the op's own inputs.

1. Cross-check: run the op at small sizes with --dump, rebuild its inputs from the .npy files (row ids,
   table-major offsets, per-table D and row offsets, per-sample weights, the weights), and compare the op's
   output (the last version run) with PyTorch F.embedding_bag called per table and concatenated along
   the columns (and with FBGEMM's SplitTableBatchedEmbeddingBagsCodegen forward where fbgemm_gpu imports).
2. Timing at the bench sizes (FBGEMM's default T=32 E=1e5 D=128 B=512 L=20 uniform and Zipf 1.15, the
   large single table E=1e6 D=128 B=65536 L=32 uniform and Zipf, and the dense case E=1.1e7 D=64 B=512
   L=20): the op writes its row ids and offsets (the weights are not dumped at these sizes: random weights
   of the same shape stand in, the time does not depend on their values), and PyTorch runs one
   concatenated table (row ids shifted by each table's first row).
   Prints PEER lines with the op's RESULT shape, our fewest-bytes GB/s and FBGEMM's labelled figure.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_util as pu

OP = "embedding_bag_forward"
pu.skip_without_torch(f"{OP} peers")
import torch
import torch.nn.functional as F

ATOL, RTOL = 5e-5, 2e-5      # the op file's tolerances (fp32 sums in another order)


def load_dump(d):
    meta = pu.load(d, OP + "_meta").tolist()           # T, B, total_D, mean, weighted, L
    x = {"T": meta[0], "B": meta[1], "total_D": meta[2], "mean": bool(meta[3]), "weighted": bool(meta[4]), "L": meta[5]}
    for name in ["indices", "offsets", "D_offsets", "weights_offsets", "E"]:
        x[name] = torch.from_numpy(pu.load(d, f"{OP}_{name}")).cuda()
    x["psw"] = torch.from_numpy(pu.load(d, OP + "_per_sample_weights")).cuda() if x["weighted"] else None
    wpath = os.path.join(d, OP + "_weights.npy")
    x["weights"] = torch.from_numpy(pu.load(d, OP + "_weights")).cuda() if os.path.exists(wpath) else None
    with open(os.path.join(d, OP + "_shape.txt")) as f:
        x["shape"] = f.read().strip()
    x["Ds"] = (x["D_offsets"][1:] - x["D_offsets"][:-1]).tolist()
    x["Es"] = x["E"].tolist()
    return x


def torch_per_table(x):
    """F.embedding_bag on each table's slice of the flat weights, columns concatenated: [B, total_D]."""
    T, B = x["T"], x["B"]
    offs, idx, w = x["offsets"], x["indices"], x["weights"]
    outs = []
    for t in range(T):
        D, E, wo = x["Ds"][t], x["Es"][t], int(x["weights_offsets"][t])
        table = w[wo:wo + E * D].view(E, D)
        o = offs[t * B:(t + 1) * B + 1]
        s, e = int(o[0]), int(o[-1])
        psw = x["psw"][s:e] if x["weighted"] else None
        outs.append(F.embedding_bag(idx[s:e], table, o - s, mode="mean" if x["mean"] else "sum",
                                    per_sample_weights=psw, include_last_offset=True))
    return torch.cat(outs, dim=1)


def fbgemm_module(Es, Ds, mean):
    """FBGEMM's training TBE (fp32 weights and output) or (None, why) when fbgemm_gpu does not load."""
    try:
        import fbgemm_gpu  # noqa: F401
        try:
            from fbgemm_gpu.split_table_batched_embeddings_ops_training import SplitTableBatchedEmbeddingBagsCodegen
            from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation, PoolingMode
            try:
                from fbgemm_gpu.split_table_batched_embeddings_ops_common import ComputeDevice
            except ImportError:
                from fbgemm_gpu.split_table_batched_embeddings_ops_training import ComputeDevice
        except ImportError:
            from fbgemm_gpu.split_table_batched_embeddings_ops import (SplitTableBatchedEmbeddingBagsCodegen, EmbeddingLocation,
                                                                       PoolingMode, ComputeDevice)
        from fbgemm_gpu.split_embedding_configs import EmbOptimType, SparseType
        specs = [(E, D, EmbeddingLocation.DEVICE, ComputeDevice.CUDA) for E, D in zip(Es, Ds)]
        emb = SplitTableBatchedEmbeddingBagsCodegen(specs, optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD, learning_rate=0.1, eps=0.1,
                                                    weights_precision=SparseType.FP32, output_dtype=SparseType.FP32,
                                                    pooling_mode=PoolingMode.MEAN if mean else PoolingMode.SUM)
        return emb, ""
    except Exception as e:  # not installed, or built for another torch / CUDA
        return None, f"{e.__class__.__name__}: {str(e)[:200]}"


result = pu.Outcome()
fbgemm_why = ""
# ---- 1. cross-check at small sizes, the op's inputs and output
CASES = [
    ["--T", 4, "--Ds", "4,12,132,260", "--Es", "1000,77,5000,300", "--B", 37, "--L", 13, "--seed", 1],
    ["--T", 4, "--Ds", "4,12,132,260", "--Es", "1000,77,5000,300", "--B", 37, "--L", 13, "--pooling", "mean", "--empty-frac", 0.3, "--seed", 2],
    ["--T", 3, "--Ds", "64,36,8", "--E", 3000, "--B", 37, "--L", 13, "--weighted", "--alpha", 0, "--seed", 3],
    ["--T", 2, "--D", 128, "--E", 1000, "--B", 50, "--L", 20, "--one-row", "--seed", 4],
]
for args in CASES:
    with pu.dumped_run(result, OP, ["all", "--check-only"] + args) as d:
        if d is None:
            continue
        x = load_dump(d)
        got = torch.from_numpy(pu.load(d, OP + "_out")).cuda()
        want = torch_per_table(x)
        result.report(torch.allclose(got, want, atol=ATOL, rtol=RTOL),
                      f"{OP} {x['shape']} against torch F.embedding_bag per table (max abs diff {(got - want).abs().max().item():.2e})")
        if not x["weighted"]:            # FBGEMM's weighted forward takes per_sample_weights too, but keep it simple
            emb, fbgemm_why = fbgemm_module(x["Es"], x["Ds"], x["mean"])
            if emb is not None:
                with torch.no_grad():
                    for t, wt in enumerate(emb.split_embedding_weights()):
                        wo, E, D = int(x["weights_offsets"][t]), x["Es"][t], x["Ds"][t]
                        wt.copy_(x["weights"][wo:wo + E * D].view(E, D))
                    fb = emb(x["indices"], x["offsets"])
                result.report(torch.allclose(got, fb, atol=ATOL, rtol=RTOL),
                              f"{OP} {x['shape']} against FBGEMM TBE forward (max abs diff {(got - fb).abs().max().item():.2e})")
if fbgemm_why:
    print(f"SKIP {OP} FBGEMM peer: fbgemm_gpu does not load ({fbgemm_why})")

# ---- 2. timing at the bench sizes, the op's row ids and offsets
BENCH = [
    ["--alpha", 0],
    [],
    ["--T", 1, "--E", 1000000, "--D", 128, "--B", 65536, "--L", 32, "--alpha", 0],
    ["--T", 1, "--E", 1000000, "--D", 128, "--B", 65536, "--L", 32],
    ["--T", 1, "--E", 11000000, "--D", 64, "--B", 512, "--L", 20, "--alpha", 0],
]
for args in BENCH:
    with pu.dumped_run(result, OP, ["5", "--check-only", "--block", 128] + args) as d:
        if d is None:
            continue
        x = load_dump(d)
    T, B, L, D = x["T"], x["B"], x["L"], x["Ds"][0]
    assert all(Dt == D for Dt in x["Ds"]), "the bench sizes have one D"
    total_L = x["indices"].numel()
    # one concatenated table: shift each lookup by its table's first row
    row_base = torch.tensor([0] + list(torch.tensor(x["Es"]).cumsum(0)[:-1].tolist()), device="cuda", dtype=torch.int64)
    lookups_per_table = (x["offsets"][B::B] - x["offsets"][0:-1:B])
    idx_cat = x["indices"] + torch.repeat_interleave(row_base, lookups_per_table)
    W = torch.rand(sum(x["Es"]), D, device="cuda") * 2 - 1
    offs = x["offsets"]
    # our fewest bytes (the op file's formula) and FBGEMM's figure
    nbytes = total_L * D * 4 + 8 * total_L + 8 * (T * B + 1) + 4 * B * T * D + 4 * (T + 1) + 8 * T
    fbgemm_rw = 4 * B * T * D + 4 * B * T * D * L
    fn = lambda: F.embedding_bag(idx_cat, W, offs, mode="sum", include_last_offset=True)
    t = pu.time_cuda(fn)
    pu.peer_line(OP, "torch.F.embedding_bag", x["shape"], t,
                 f"dtype=fp32 gbps={nbytes / (t[0] * 1e-3) / 1e9:.0f} fbgemm_gbps={fbgemm_rw / (t[0] * 1e-3) / 1e9:.0f}")
    del W
    emb, fbgemm_why = fbgemm_module(x["Es"], x["Ds"], False)
    if emb is not None:
        def fb():
            with torch.no_grad():
                emb(x["indices"], x["offsets"])
        t = pu.time_cuda(fb)
        pu.peer_line(OP, "fbgemm.SplitTableBatchedEmbeddingBagsCodegen", x["shape"], t,
                     f"dtype=fp32 gbps={nbytes / (t[0] * 1e-3) / 1e9:.0f} fbgemm_gbps={fbgemm_rw / (t[0] * 1e-3) / 1e9:.0f}")
        del emb
    torch.cuda.empty_cache()
result.finish()
