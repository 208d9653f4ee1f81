#!/usr/bin/env python3
"""Tensor-train embedding bags against PyTorch: the peer of tt_embedding_forward, and (forward + backward,
forward + backward + SGD) of tt_embedding_backward, on the op's own inputs.

What a PyTorch user writes: split every row index into its core indices, gather each core's slice per
lookup (advanced indexing), chain them with torch.bmm, index_add_ the rows into their bags; autograd for
the backward; torch.optim.SGD for the step.

1. Cross-check: run tt_embedding_forward (version 3, --check-only) at small sizes with --dump, rebuild
   its inputs from the .npy files (cores, indices, offsets, meta) and compare the CPU reference and the
   last version's output with the PyTorch chain (T = 2..6, several tables, ragged bags, Zipf).
2. Timing on the op's bench inputs (every tt_embedding_forward shape in scripts/bench_cases.txt): the PyTorch
   chain forward (no_grad, and with autograd recording), forward + backward, forward + backward + SGD, and
   the dense nn.EmbeddingBag of the same logical table (E x D, sparse gradients) forward and
   forward + backward + SGD on the same bags. PEER lines carry the op's RESULT shape and us_per_lookup=
   (and gflops= for the chain's forward FLOPs); forward + backward lines are filed under tt_embedding_backward.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_util as pu

OP = "tt_embedding_forward"
OPB = "tt_embedding_backward"
pu.skip_without_torch("tt_embedding peers")
import torch

ATOL, RTOL = 1e-4, 1e-4      # the op file's fp32 tolerances (fp32 chains vs the double reference)
DEV = "cuda"


def load_dump(d):
    meta = pu.load(d, OP + "_meta").tolist()           # T, tables, B, E, D, p[T], q[T], R[T+1]
    T, tables, B, E, D = meta[:5]
    x = {"T": T, "tables": tables, "B": B, "E": E, "D": D,
         "p": meta[5:5 + T], "q": meta[5 + T:5 + 2 * T], "R": meta[5 + 2 * T:6 + 3 * T]}
    x["cores"] = [torch.from_numpy(pu.load(d, f"{OP}_core{t}")).to(DEV) for t in range(T)]
    x["indices"] = torch.from_numpy(pu.load(d, OP + "_indices")).to(DEV)
    x["offsets"] = torch.from_numpy(pu.load(d, OP + "_offsets")).to(DEV)
    with open(os.path.join(d, OP + "_shape.txt")) as f:
        x["shape"] = f.read().strip()
    return x


def flops_per_lookup(x):
    p, q, R = x["p"], x["q"], x["R"]
    f, m = 0, q[0]
    for t in range(1, x["T"]):
        f += 2 * m * R[t] * q[t] * R[t + 1]
        m *= q[t]
    return f


def tt_forward(cores, x, indices, offsets):
    """The PyTorch chain: [tables * B, D] pooled sums (differentiable in the cores)."""
    T, B, D, p, q, R = x["T"], x["B"], x["D"], x["p"], x["q"], x["R"]
    nbags, nnz = offsets.numel() - 1, indices.numel()
    bag = torch.repeat_interleave(torch.arange(nbags, device=DEV), offsets[1:] - offsets[:-1], output_size=nnz)
    tbl = torch.div(bag, B, rounding_mode="floor")
    digits, rem = [None] * T, indices
    for t in reversed(range(T)):                       # mixed radix, i_0 most significant
        digits[t] = torch.remainder(rem, p[t])
        rem = torch.div(rem, p[t], rounding_mode="floor")
    M = cores[0][tbl, digits[0]].view(nnz, q[0], R[1])
    for t in range(1, T):
        G = cores[t][tbl, digits[t]].view(nnz, R[t], q[t] * R[t + 1])
        M = torch.bmm(M.reshape(nnz, -1, R[t]), G)
    rows = M.reshape(nnz, D)
    return torch.zeros(nbags, D, device=DEV, dtype=rows.dtype).index_add_(0, bag, rows)


result = pu.Outcome()
# ---- 1. cross-check at small sizes
CASES = [
    ["--p", "7,9,5", "--q", "2,4,2", "--ranks", "8,16", "--tables", 2, "--B", 9, "--L", 7, "--seed", 3],
    ["--p", "5,6,4,3", "--q", "4,2,2,4", "--ranks", "8,8,8", "--B", 17, "--L", 5, "--ragged", "--seed", 4],
    ["--p", "3,4,3,2,5,2", "--q", "2,2,1,3,2,2", "--ranks", "2,3,4,3,2", "--tables", 3, "--B", 5, "--L", 9,
     "--alpha", 1.15, "--seed", 5],
    ["--p", "31,17", "--q", "8,8", "--ranks", 16, "--B", 33, "--L", 11, "--seed", 6],
    ["--p", "4,5,3,6,2", "--q", "2,2,2,2,4", "--ranks", "4,8,8,16", "--tables", 2, "--B", 7, "--L", 6, "--ragged", "--seed", 7],
]
for args in CASES:
    # version 3 is the fp32 version that runs every shape (4 is written for q 4,x,4 families, 5 and 6 use
    # TF32 with a looser tolerance; the dump holds the last version run); `all --check-only` at these
    # sizes is in tests/gpu_cases.txt
    with pu.dumped_run(result, OP, ["3", "--check-only"] + args) as d:
        if d is None:
            continue
        x = load_dump(d)
        with torch.no_grad():
            want = tt_forward(x["cores"], x, x["indices"], x["offsets"]).view(x["tables"], x["B"], x["D"])
        for what in ["out_ref", "out"]:
            got = torch.from_numpy(pu.load(d, f"{OP}_{what}")).to(DEV)
            label = "CPU reference" if what == "out_ref" else "version 3's output"
            result.report(torch.allclose(got, want, atol=ATOL, rtol=RTOL),
                          f"{OP} {x['shape']}: {label} against the PyTorch bmm chain "
                          f"(max abs diff {(got - want).abs().max().item():.2e})")

# ---- 2. timing on the op's bench inputs: every tt_embedding_forward shape of scripts/bench_cases.txt
def bench_shapes():
    shapes = []
    with open(os.path.join(pu.ROOT, "scripts", "bench_cases.txt")) as f:
        for line in f:
            words = line.split()
            if not words or words[0] != OP:
                continue
            args = words[2:] if len(words) > 1 and (words[1] == "all" or words[1].isdigit()) else words[1:]
            args = [w for w in args if w != "--stash"]   # the same inputs (the stash is the op's own buffer)
            if args not in shapes:
                shapes.append(args)
    return shapes


BENCH = bench_shapes()
for args in BENCH:
    # the inputs only (--no-check: no CPU reference, which takes about a minute at EL-Rec's L 20 shapes)
    with pu.dumped_run(result, OP, ["3", "--no-check", "--repeat", 1, "--block", 128] + args) as d:
        if d is None:
            continue
        x = load_dump(d)
    idx, offs, nnz = x["indices"], x["offsets"], x["indices"].numel()
    fl = flops_per_lookup(x) * nnz

    def extra(t, with_flops=False):
        e = f"dtype=fp32 us_per_lookup={t[0] * 1e3 / max(nnz, 1):.5f}"
        if with_flops:
            e += f" gflops={fl / (t[0] * 1e-3) / 1e9:.0f}"
        return e

    # the TT chain
    def fwd_nograd():
        with torch.no_grad():
            tt_forward(x["cores"], x, idx, offs)
    t = pu.time_cuda(fwd_nograd)
    pu.peer_line(OP, "pytorch_bmm_chain", x["shape"], t, extra(t, True))
    params = [c.clone().requires_grad_(True) for c in x["cores"]]
    t = pu.time_cuda(lambda: tt_forward(params, x, idx, offs))
    pu.peer_line(OP, "pytorch_bmm_chain_autograd_recording", x["shape"], t, extra(t, True))
    dY = torch.randn(offs.numel() - 1, x["D"], device=DEV)

    def clear_grads():
        for c in params:
            c.grad = None

    t = pu.time_cuda(lambda: tt_forward(params, x, idx, offs).backward(dY), setup=clear_grads)
    pu.peer_line(OPB, "pytorch_bmm_chain_fwd_bwd", x["shape"], t, extra(t))
    opt = torch.optim.SGD(params, lr=0.01)

    def fwd_bwd_sgd():
        tt_forward(params, x, idx, offs).backward(dY)
        opt.step()
    t = pu.time_cuda(fwd_bwd_sgd, setup=lambda: opt.zero_grad(set_to_none=True))
    pu.peer_line(OPB, "pytorch_bmm_chain_fwd_bwd_sgd", x["shape"], t, extra(t))
    del params, opt

    # the dense table of the same logical size (E x D per table; one table only)
    if x["tables"] == 1:
        try:
            emb = torch.nn.EmbeddingBag(x["E"], x["D"], mode="sum", sparse=True, include_last_offset=True).to(DEV)

            def dense_fwd():
                with torch.no_grad():
                    emb(idx, offs)
            t = pu.time_cuda(dense_fwd)
            pu.peer_line(OP, f"dense_nn.EmbeddingBag_{x['E']}x{x['D']}", x["shape"], t, extra(t))
            dopt = torch.optim.SGD(emb.parameters(), lr=0.01)

            def dense_step():
                emb(idx, offs).backward(dY)
                dopt.step()
            t = pu.time_cuda(dense_step, setup=lambda: dopt.zero_grad(set_to_none=True))
            pu.peer_line(OPB, f"dense_nn.EmbeddingBag_{x['E']}x{x['D']}_fwd_bwd_sgd_sparse", x["shape"], t, extra(t))
            del emb, dopt
        except RuntimeError as e:              # out of memory on a small GPU
            print(f"SKIP dense nn.EmbeddingBag {x['E']}x{x['D']}: {str(e)[:200]}")
    torch.cuda.empty_cache()
result.finish()
