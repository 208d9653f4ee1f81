#!/usr/bin/env python3
"""repkv against PyTorch: the op's --dump output against the PyTorch composite (slicing, reshape /
expand for the forward, reshape + sum + cat for the backward), then the composite timed at llm.c's bench
size (B8 T1024 NH32 NKV8 HD128, fp32) so that it prints beside the op's RESULT lines."""
import sys
import os
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_util as pu

pu.skip_without_torch("repkv peers")
import torch


def fwd_torch(inp, NH, NKV, HD):
    B, T, _ = inp.shape
    rep = NH // NKV
    q, k, v = inp.split([NH * HD, NKV * HD, NKV * HD], dim=-1)
    k = k.view(B, T, NKV, 1, HD).expand(B, T, NKV, rep, HD).reshape(B, T, NH, HD)
    v = v.view(B, T, NKV, 1, HD).expand(B, T, NKV, rep, HD).reshape(B, T, NH, HD)
    return torch.stack([q.view(B, T, NH, HD), k, v], dim=2)          # (B, T, 3, NH, HD)


def bwd_torch(dout, NH, NKV, HD):
    B, T = dout.shape[:2]
    rep = NH // NKV
    dq = dout[:, :, 0].reshape(B, T, NH * HD)
    dk = dout[:, :, 1].reshape(B, T, NKV, rep, HD).sum(3).reshape(B, T, NKV * HD)
    dv = dout[:, :, 2].reshape(B, T, NKV, rep, HD).sum(3).reshape(B, T, NKV * HD)
    return torch.cat([dq, dk, dv], dim=-1)


result = pu.Outcome()
for B, T, NH, NKV, HD, seed in [(2, 37, 12, 4, 40, 1), (3, 5, 8, 8, 16, 2), (1, 64, 32, 8, 128, 3)]:
    shape = f"B{B},T{T},NH{NH},NKV{NKV},HD{HD}"
    for op in ["repkv_forward", "repkv_backward"]:
        args = ["all", "--check-only", "--B", B, "--T", T, "--NH", NH, "--NKV", NKV, "--HD", HD, "--seed", seed]
        with pu.dumped_run(result, op, args) as d:
            if d is None:
                continue
            if op == "repkv_forward":
                x = torch.from_numpy(pu.load(d, "repkv_forward_inp")).cuda()
                got = torch.from_numpy(pu.load(d, "repkv_forward_out")).cuda()
                want = fwd_torch(x, NH, NKV, HD)
                good = torch.equal(got, want)
            else:
                dy = torch.from_numpy(pu.load(d, "repkv_backward_dout")).cuda()
                got = torch.from_numpy(pu.load(d, "repkv_backward_dinp")).cuda()
                want = bwd_torch(dy, NH, NKV, HD)
                good = torch.allclose(got, want, atol=1e-6, rtol=1e-6)
            err = (got - want).abs().max().item()
            result.report(good, f"{op} {shape} against PyTorch (max abs diff {err:.2e})")

# timing at the bench size, fp32
B, T, NH, NKV, HD = 8, 1024, 32, 8, 128
shape = f"B{B},T{T},NH{NH},NKV{NKV},HD{HD}"
nbytes = (B * T * (NH + 2 * NKV) * HD + B * T * 3 * NH * HD) * 4
inp = torch.randn(B, T, (NH + 2 * NKV) * HD, device="cuda")
dout = torch.randn(B, T, 3, NH, HD, device="cuda")
for op, fn in [("repkv_forward", lambda: fwd_torch(inp, NH, NKV, HD)), ("repkv_backward", lambda: bwd_torch(dout, NH, NKV, HD))]:
    t = pu.time_cuda(fn)
    pu.peer_line(op, "pytorch", shape, t, f"dtype=fp32 gbps={nbytes / (t[0] * 1e-3) / 1e9:.0f}")
result.finish()
