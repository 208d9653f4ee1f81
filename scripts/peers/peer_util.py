"""Shared helpers for the peer scripts: run an op binary with --dump, read .npy, and time a CUDA
callable the way common.h times a version (warm-up, L2 flush before each sample, CUDA events, median)."""
import os
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.join(ROOT, "dev", "cuda")


def run_op(binary, args, dump_dir=None):
    """Run dev/cuda/<binary> with args (list); returns (exit code, output). Adds --dump DIR if given."""
    cmd = [os.path.join(BIN, binary)] + [str(a) for a in args]
    if dump_dir:
        cmd += ["--dump", dump_dir]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=BIN)
    return p.returncode, p.stdout + p.stderr


def tempdir(prefix):
    return tempfile.mkdtemp(prefix=prefix)


def load(dump_dir, name):
    import numpy as np
    return np.load(os.path.join(dump_dir, name + ".npy"))


def time_cuda(fn, repeat=100, warmup=5, setup=None):
    """Median/min/max ms of fn() over `repeat` samples, each preceded by setup() (untimed) and an L2
    flush (a memset of twice the L2 size), timed with CUDA events."""
    import torch
    props = torch.cuda.get_device_properties(0)
    l2 = getattr(props, "L2_cache_size", 64 << 20) or (64 << 20)
    flush = torch.empty(2 * l2, dtype=torch.uint8, device="cuda")
    for _ in range(warmup):
        if setup:
            setup()
        fn()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ms = []
    for _ in range(repeat):
        if setup:
            setup()
        flush.zero_()
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        ms.append(start.elapsed_time(stop))
    ms.sort()
    n = len(ms)
    median = ms[n // 2] if n % 2 else 0.5 * (ms[n // 2 - 1] + ms[n // 2])
    return median, ms[0], ms[-1]


def peer_line(op, impl, shape, timing, extra=""):
    med, lo, hi = timing
    print(f"PEER op={op} impl={impl} shape={shape} ms_median={med:.4f} ms_min={lo:.4f} ms_max={hi:.4f}"
          + (f" {extra}" if extra else ""), flush=True)


def have_torch_cuda():
    try:
        import torch
        return torch.cuda.is_available(), ""
    except Exception as e:  # ImportError, or a broken install
        return False, f"torch does not import ({e.__class__.__name__}: {e})"
