#!/usr/bin/env python3
"""FBGEMM's training TBE (SplitTableBatchedEmbeddingBagsCodegen) timed on the bag ops' own inputs.

At FBGEMM's default size (T=32 E=1e5 D=128 B=512 L=20), uniform and Zipf 1.15, pooled (sum) and nobag
(pooling none), fp32 and fp16 weights (fp16 updated with FBGEMM's stochastic rounding, its default):
the forward, and the backward with its fused EXACT_SGD and EXACT_ROWWISE_ADAGRAD, each timed two ways:
  - kernel time: torch.profiler's sum of the GPU work of one call (kernels, memsets, copies), the number to
    set against our RESULT lines, which time kernels only;
  - event time: CUDA events around the call, what a user waits for (FBGEMM's host-side work included).
The row ids and offsets are the ones the op writes with --dump (same seed and recipe as its RESULT lines);
the weights are FBGEMM's own random initialisation (the time does not depend on their values). The backward's
kernel time is the profile of forward + backward less the profile of the forward alone.
PEER lines carry the op's RESULT shape for the same flags (with --weights fp16 it ends in ",fp16,stochastic";
the backward's has the optimizer appended), so each sits beside our version's line in results/.
Skips with a message where fbgemm_gpu does not import.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_util as pu

pu.skip_without_torch("FBGEMM TBE peers")
import logging
import warnings

import torch

logging.disable(logging.ERROR)          # fbgemm_gpu logs each optional library it does not find, and a version table
warnings.filterwarnings("ignore", message=".*TBE B200 optimization.*")
try:
    import fbgemm_gpu  # noqa: F401
    from fbgemm_gpu.split_embedding_configs import EmbOptimType, SparseType
    from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation, PoolingMode
    from fbgemm_gpu.split_table_batched_embeddings_ops_training import SplitTableBatchedEmbeddingBagsCodegen
    try:
        from fbgemm_gpu.split_table_batched_embeddings_ops_common import ComputeDevice
    except ImportError:
        from fbgemm_gpu.split_table_batched_embeddings_ops_training import ComputeDevice
except Exception as e:  # ImportError, or a wheel built against another torch
    print(f"SKIP FBGEMM TBE peers: fbgemm_gpu does not import here ({e.__class__.__name__}: {e})")
    sys.exit(0)
logging.disable(logging.NOTSET)

result = pu.Outcome()
PROFILE_ITERS = 20
ALPHAS = os.environ.get("FBGEMM_ALPHAS", "0,1.15").split(",")
NOBAG = [p == "none" for p in os.environ.get("FBGEMM_POOLING", "sum,none").split(",")]


def gpu_us(prof):
    """Microseconds of GPU work in a profile (kernels, memsets, copies)."""
    total = 0.0
    for e in prof.key_averages():
        total += getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0.0)
    return total


def kernel_ms(fn, setup=None):
    """GPU work per call of fn, in ms: a profile of PROFILE_ITERS x (L2 flush, setup, fn) less one of the flush
    and setup alone."""
    from torch.profiler import ProfilerActivity, profile
    l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 64 << 20) or (64 << 20)
    flush = torch.empty(2 * l2, dtype=torch.uint8, device="cuda")

    def calls(n, with_fn):
        for _ in range(n):
            flush.zero_()
            if setup:
                setup()
            if with_fn:
                fn()
        torch.cuda.synchronize()

    def prof_of(with_fn):
        calls(3, with_fn)                                     # warm-up outside the profile
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            calls(PROFILE_ITERS, with_fn)
        return gpu_us(prof)

    return (prof_of(True) - prof_of(False)) / PROFILE_ITERS / 1e3


def dumped_inputs(nobag, weights, args):
    """Row ids, offsets and the RESULT shape that embedding_bag_forward writes for these flags (version 1 pools,
    version 7 gathers)."""
    with pu.dumped_run(result, "embedding_bag_forward", ["7" if nobag else "1", "--check-only", "--weights", weights] + args) as d:
        if d is None:
            return None
        meta = pu.load(d, "embedding_bag_forward_meta").tolist()    # T, B, total_D, mean, weighted, L
        with open(os.path.join(d, "embedding_bag_forward_shape.txt")) as f:
            shape = f.read().strip()
        return {"T": int(meta[0]), "B": int(meta[1]), "Es": [int(e) for e in pu.load(d, "embedding_bag_forward_E")],
                "Ds": [int(x) for x in pu.load(d, "embedding_bag_forward_D_offsets")[1:] - pu.load(d, "embedding_bag_forward_D_offsets")[:-1]],
                "indices": torch.from_numpy(pu.load(d, "embedding_bag_forward_indices")).cuda(),
                "offsets": torch.from_numpy(pu.load(d, "embedding_bag_forward_offsets")).cuda(), "shape": shape}


def tbe(x, nobag, weights, optimizer):
    return SplitTableBatchedEmbeddingBagsCodegen(
        embedding_specs=[(E, D, EmbeddingLocation.DEVICE, ComputeDevice.CUDA) for E, D in zip(x["Es"], x["Ds"])],
        optimizer=optimizer, learning_rate=0.01, eps=1e-8,
        weights_precision=SparseType.FP16 if weights == "fp16" else SparseType.FP32,
        output_dtype=SparseType.FP32,
        pooling_mode=PoolingMode.NONE if nobag else PoolingMode.SUM,
    ).cuda()


def line(op, what, shape, weights, kernel, events):
    pu.peer_line(op, f"fbgemm_{what}_kernels", shape, (kernel, kernel, kernel), f"weights={weights} note=profiler_sum")
    pu.peer_line(op, f"fbgemm_{what}_events", shape, events, f"weights={weights} note=cuda_events")


for alpha in ALPHAS:
    for nobag in NOBAG:
        for weights in ["fp32", "fp16"]:
            x = dumped_inputs(nobag, weights, ["--alpha", alpha] + (["--pooling", "none"] if nobag else []))
            if x is None:
                continue
            ids, offs = x["indices"], x["offsets"]
            for opt_name, opt in [("rowwise_adagrad", EmbOptimType.EXACT_ROWWISE_ADAGRAD), ("sgd", EmbOptimType.EXACT_SGD)]:
                emb = tbe(x, nobag, weights, opt)
                out = emb(ids, offs)
                grad = torch.randn_like(out)
                del out
                if opt_name == "rowwise_adagrad":          # the forward does not depend on the optimizer
                    def fwd():
                        with torch.no_grad():
                            emb(ids, offs)
                    line("embedding_bag_forward", "forward", x["shape"], weights, kernel_ms(fwd), pu.time_cuda(fwd))
                held = {}

                def run_fwd():
                    held["out"] = emb(ids, offs)

                def run_bwd():
                    held["out"].backward(grad)

                def fwd_bwd():
                    emb(ids, offs).backward(grad)

                k_bwd = kernel_ms(fwd_bwd) - kernel_ms(run_fwd)
                line("embedding_bag_backward", "backward", f"{x['shape']},{opt_name}", weights, k_bwd,
                     pu.time_cuda(run_bwd, setup=run_fwd))
                result.report(k_bwd > 0, f"FBGEMM {x['shape']} {weights} {opt_name}: backward kernel time {k_bwd:.4f} ms is positive")
                del emb, held, grad
                torch.cuda.empty_cache()
result.finish()
