"""What every peer script needs: skip without torch, run an op binary with --dump into a folder that is
removed afterwards, read .npy files, print PASS / FAIL / PEER lines and exit with the outcome, and time a
CUDA callable the way common.h times a version (warm-up, L2 flush before each sample, CUDA events, median)."""
import contextlib
import os
import shutil
import subprocess
import sys
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


class Outcome:
    """The PASS / FAIL lines of one peer script, and its exit code (1 if any FAIL)."""

    def __init__(self):
        self.failed = False

    def report(self, good, text):
        print(f"{'PASS' if good else 'FAIL'} {text}", flush=True)
        self.failed |= not good
        return good

    def finish(self):
        sys.exit(1 if self.failed else 0)


@contextlib.contextmanager
def dumped_run(outcome, binary, args, tail=800):
    """Run dev/cuda/<binary> args --dump DIR; yields DIR, or None after a FAIL line when the op exits
    non-zero. DIR is removed when the block ends."""
    d = tempfile.mkdtemp(prefix=binary)
    try:
        rc, out = run_op(binary, args, d)
        if rc != 0:
            outcome.report(False, f"{binary} {' '.join(map(str, args))}: the op exited {rc}\n{out[-tail:]}")
            yield None
        else:
            yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def skip_without_torch(what):
    """Print `SKIP <what>: <why>` and exit 0 unless torch imports with a CUDA device."""
    ok, why = have_torch_cuda()
    if not ok:
        print(f"SKIP {what}: {why or 'no CUDA device for torch'}")
        sys.exit(0)


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
