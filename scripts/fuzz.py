#!/usr/bin/env python3
"""Random command lines for every op binary in dev/cuda, seeded and bounded in time (no third-party deps).

CPU mode (the default; `make test` runs it): valid and invalid command lines, built from each binary's own
-h (its flags, their defaults and choices), run with no GPU visible and an address-space limit of 4 GB.
Every run must exit 2 (bad input, refused) or 3 (no usable CUDA device), or 0 for -h; a timeout (a hang),
a signal (an abort, a crash) or any other code is a failure.

GPU mode (--gpu, on a machine with a GPU): `--check-only` on random valid shapes of each op (every version, or
for the TT ops half the time the default alone, over their whole grid: T 2..6, D <= 256, ranks 1..64, tables,
Zipf, ragged bags, every optimizer, the stash); every run must exit 0. Ends with the lines per binary and the
five slowest.

    python3 scripts/fuzz.py [--seed N] [--seconds S] [--jobs J] [--gpu] [--only SUBSTRING]

Prints one line per failure, the exit-code histogram, and `PASS fuzz ...` or `FAIL fuzz ...`; exits 1 on a
failure.
"""
import argparse
import collections
import concurrent.futures
import os
import random
import re
import resource
import shlex
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CUDA_DIR = os.path.join(ROOT, "dev", "cuda")

INT_BAD = ["0", "-1", "2147483648", "4294967360", "4294967297", "1099511627776", "9223372036854775807",
           "9223372036854775808", "18446744073709551616", "2^40", "1e3", "0x10", "12x", "", "abc", "-0", "+5"]
FLOAT_ODD = ["nan", "inf", "-inf", "1e308", "-1e308", "1e-50", "-1", "0", "-0", "1e30", "5", "10", "1.000001",
             "0.5", "abc", "1e", ""]
LIST_BAD = ["", ",", "1,,2", "2147483648", "-1,4", "0", "4,x", "1e3"]


def parse_help(binary):
    """The flags of an op from its -h: {name: (kind, default, choices)}, and its number of versions."""
    out = subprocess.run([binary, "-h"], capture_output=True, text=True, timeout=30,
                         env=dict(os.environ, CUDA_VISIBLE_DEVICES="")).stdout
    m = re.search(r"version 1\.\.(\d+) to run", out)
    versions = int(m.group(1)) if m else 1
    flags = {}
    for line in out.splitlines():
        m = re.match(r"\s+--([A-Za-z][\w-]*)( V| N| DIR)?\s+(.*)", line)
        if not m:
            continue
        name, has_value, rest = m.group(1), m.group(2), m.group(3)
        d = re.search(r"\[default ([^\]]*)\]", rest)
        default = d.group(1) if d else ""
        choices = re.search(r"\(([\w.-]+(?:\|[\w.-]+)+)\)", rest)
        if not has_value:
            kind = "flag"
        elif choices:
            kind = "choice"
        elif "," in default:
            kind = "list"
        elif re.fullmatch(r"-?\d+", default):
            kind = "int"
        elif re.fullmatch(r"[-+0-9.e]+", default):
            kind = "float"
        elif name in ("dump", "load"):
            kind = "dir"
        else:
            kind = "int"
        flags[name] = (kind, default, choices.group(1).split("|") if choices else [])
    return flags, versions


def small_int(rng, default):
    try:
        d = int(default)
    except ValueError:
        d = 8
    return str(rng.choice([1, 2, 3, 4, 5, 7, 8, 13, 16, 32, max(1, d // 4), max(1, d), rng.randint(1, 64)]))


def value_for(rng, name, kind, default, choices, bad_rate):
    bad = rng.random() < bad_rate
    if kind == "int":
        if name in ("repeat",):
            return rng.choice(["1", "2"]) if not bad else rng.choice(INT_BAD)
        return rng.choice(INT_BAD) if bad else small_int(rng, default)
    if kind == "float":
        return rng.choice(FLOAT_ODD) if bad else rng.choice([default, "0", "0.5", "1.05", "1.15", "2", "0.1"])
    if kind == "list":
        if bad:
            return rng.choice(LIST_BAD)
        n = len(default.split(","))
        n = max(1, n + rng.choice([-1, 0, 0, 0, 1]))
        items = default.split(",")
        return ",".join(rng.choice(items + [str(rng.randint(1, 9))]) for _ in range(n))
    if kind == "choice":
        return rng.choice(choices) if not bad else "bogus"
    if kind == "dir":   # never a directory that --dump could create outside build/
        return rng.choice([os.path.join(ROOT, "build", "fuzz_no_such_dir", "x"), "/proc", "/dev/null"])
    return None


def random_cpu_line(rng, flags, versions):
    args = []
    r = rng.random()
    if r < 0.3:
        args.append("all")
    elif r < 0.7:
        args.append(str(rng.choice([rng.randint(1, versions), rng.randint(-1, versions + 2)])))
    elif r < 0.72:
        args.append(rng.choice(["bogus", "-h"]))
    bad_rate = rng.choice([0.0, 0.0, 0.1, 0.3])
    names = list(flags)
    for name in rng.sample(names, k=min(len(names), rng.randint(0, 5))):
        kind, default, choices = flags[name]
        if kind == "flag":
            args.append("--" + name)
        else:
            args += ["--" + name, value_for(rng, name, kind, default, choices, bad_rate)]
    if rng.random() < 0.05:
        args.append("--no-such-flag")
    if rng.random() < 0.05:
        args.append("--" + rng.choice(names))   # a flag without its value, at the end
    if "check-only" in flags and rng.random() < 0.5:
        args.append("--check-only")
    return args


# ---- GPU mode: valid shapes per op family
def gpu_line(rng, op):
    seed = ["--seed", str(rng.randint(0, 10**6))]
    if op.startswith("repkv"):
        nkv, rep = rng.randint(1, 4), rng.randint(1, 4)
        hd = rng.choice([1, 3, 5, 8, 13, 16, 24, 32, 40, 64, 128])
        return ["all", "--check-only", "--B", str(rng.randint(1, 4)), "--T", str(rng.randint(1, 70)), "--NH", str(nkv * rep),
                "--NKV", str(nkv), "--HD", str(hd)] + seed
    if op.startswith("embedding_bag"):
        T = rng.randint(1, 5)
        maxd = 1024 if "backward" in op else 600
        Ds = ",".join(str(4 * rng.randint(1, maxd // 4)) for _ in range(T))
        Es = ",".join(str(rng.randint(1, 3000)) for _ in range(T))
        a = ["all", "--check-only", "--T", str(T), "--Ds", Ds, "--Es", Es, "--B", str(rng.randint(1, 70)),
             "--L", str(rng.randint(0, 30)), "--alpha", rng.choice(["0", "1.05", "1.15", "2", "5"]),
             "--distinct", rng.choice(["on", "off"]), "--pooling", rng.choice(["sum", "mean"])] + seed
        if rng.random() < 0.5:
            a.append("--weighted")
        if rng.random() < 0.3:
            a += ["--empty-frac", rng.choice(["0.2", "0.5", "1"])]
        if "backward" in op:
            a += ["--optimizer", rng.choice(["dense", "sgd", "rowwise_adagrad", "adagrad"])]
        return a
    if op.startswith("tt_"):
        return tt_line(rng, op) + seed
    return None


def tt_line(rng, op):
    """A random shape of the TT grid for tt_embedding_forward / _backward / tt_cache: T = 2..6 cores, q_t in 1..16
    with D = prod q <= 256, ranks 1..64, small p_t (where the backward merges cores) or large, 1..3 tables, uniform
    or Zipf ids, ragged bags, every optimizer, the stash. The lookups are cut down until the CPU reference's chain
    products stay near 3e8 multiply-adds, and the cores under 4M floats. Half the lines run every version, the
    others the default only (it must run every shape: exit 0)."""
    T = rng.randint(2, 6)
    q, D = [], 1
    for _ in range(T):
        x = rng.choice([c for c in (1, 2, 3, 4, 4, 8, 16) if D * c <= 256])
        q.append(x)
        D *= x
    ranks = [rng.choice([1, 2, 3, 5, 8, 16, 16, 17, 32, 32, 64]) for _ in range(T - 1)]
    small = rng.random() < 0.5 or T >= 4
    p = [rng.randint(2, 12) if small else rng.randint(2, 300) for _ in range(T)]
    R = [1] + ranks + [1]
    tables = rng.choice([1, 1, 2, 3])
    core_floats = tables * sum(p[t] * R[t] * q[t] * R[t + 1] for t in range(T))
    while core_floats > 4_000_000:                      # shrink the largest core's p
        t = max(range(T), key=lambda u: p[u] * R[u] * q[u] * R[u + 1])
        if p[t] <= 2:
            return tt_line(rng, op)
        p[t] = max(2, p[t] // 2)
        core_floats = tables * sum(p[u] * R[u] * q[u] * R[u + 1] for u in range(T))
    E = 1
    for x in p:
        E *= x
    Q, per_lookup = q[0], 0
    for t in range(1, T):
        per_lookup += Q * R[t] * q[t] * R[t + 1]
        Q *= q[t]
    cache = "cache" in op                               # tt_cache: bags of L >= 1 lookups, none ragged
    B, L, E = rng.randint(1, 40), rng.randint(1 if cache else 0, 12), rng.randint(1, E)
    while tables * B * L * per_lookup > 3e8 and B * L > 1:
        if B > 1:
            B = (B + 1) // 2
        else:
            L = max(L // 2, 1)
    args = [] if rng.random() < 0.5 else ["all"]
    args += ["--check-only", "--p", ",".join(map(str, p)), "--q", ",".join(map(str, q)),
             "--ranks", ",".join(map(str, ranks)), "--tables", str(tables), "--E", str(E),
             "--B", str(B), "--L", str(L), "--alpha", rng.choice(["0", "0", "1.15", "2"]),
             "--distinct", rng.choice(["on", "off"])]
    if rng.random() < 0.3 and not cache:
        args.append("--ragged")
    if "backward" in op or cache:
        args += ["--optimizer", rng.choice(["dense", "sgd", "adagrad"])]
    if cache:
        # --part-rows warp forces a warp per lookup, whose chain buffers (the forward's two ping-pong buffers, rows
        # padded to odd) times the block's 4 warps must fit a block's shared memory (227 KB on sm_90): else exit 2
        buf, Q = [0, 0], q[0]
        for t in range(1, T - 1):
            Q *= q[t]
            buf[1 - t % 2] = max(buf[1 - t % 2], (Q * (R[t + 1] | 1) + 3) // 4 * 4)
        modes = ["auto", "tt"] + (["warp"] if 4 * 4 * sum(buf) <= 232448 else [])
        args += ["--cache-rows", str(rng.choice([-1, 1, rng.randint(1, tables * E)])),
                 "--H", str(2 * tables * E + rng.randint(0, 7)), "--part-rows", rng.choice(modes)]
    elif rng.random() < 0.2:
        args.append("--stash")
    return args


def limit_memory():
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))


def no_bf16_mode(op):
    """An op whose _bf16 build only refuses (exit 2, 'has no bf16 mode'): the GPU mode has nothing to check there."""
    with open(os.path.join(CUDA_DIR, op + ".cu")) as f:
        return "has no bf16 mode" in f.read()


def run_one(binary, args, timeout, gpu):
    env = dict(os.environ)
    if not gpu:
        env["CUDA_VISIBLE_DEVICES"] = ""
    t0 = time.time()
    try:
        p = subprocess.run([binary] + args, cwd=CUDA_DIR, capture_output=True, text=True, timeout=timeout, env=env,
                           stdin=subprocess.DEVNULL, preexec_fn=None if gpu else limit_memory)
        rc, tail = p.returncode, (p.stdout + p.stderr).strip().splitlines()[-1:]
    except subprocess.TimeoutExpired:
        rc, tail = "timeout", []
    return rc, time.time() - t0, tail[0] if tail else ""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=60.0, help="time budget (runs started after it are not)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=None, help="per run (default 30 s CPU, 300 s GPU)")
    ap.add_argument("--gpu", action="store_true", help="all --check-only on random valid shapes (needs a GPU)")
    ap.add_argument("--only", default="", help="only binaries whose name contains this")
    opt = ap.parse_args()
    timeout = opt.timeout or (300.0 if opt.gpu else 30.0)
    rng = random.Random(opt.seed)
    ops = sorted(f[:-3] for f in os.listdir(CUDA_DIR) if f.endswith(".cu"))
    binaries = [b for op in ops for b in (op, op + "_bf16")
                if opt.only in b and os.access(os.path.join(CUDA_DIR, b), os.X_OK)
                and not (opt.gpu and b.endswith("_bf16") and no_bf16_mode(op))]
    if not binaries:
        print("FAIL fuzz: no op binary built in dev/cuda")
        return 1
    helps = {b: parse_help(os.path.join(CUDA_DIR, b)) for b in binaries}
    deadline = time.time() + opt.seconds
    hist, fails, n, times = collections.Counter(), [], 0, []

    def draw():
        b = rng.choice(binaries)
        args = gpu_line(rng, b) if opt.gpu else random_cpu_line(rng, *helps[b])
        return b, args

    with concurrent.futures.ThreadPoolExecutor(max_workers=opt.jobs) as pool:
        pending = set()
        while True:
            while len(pending) < opt.jobs and time.time() < deadline:
                b, args = draw()
                if args is None:
                    continue
                fut = pool.submit(run_one, os.path.join(CUDA_DIR, b), args, timeout, opt.gpu)
                fut.line = b + " " + " ".join(shlex.quote(a) for a in args)
                fut.args = args
                pending.add(fut)
            if not pending:
                break
            done, pending = concurrent.futures.wait(pending, return_when=concurrent.futures.FIRST_COMPLETED)
            for fut in done:
                rc, sec, tail = fut.result()
                n += 1
                hist[rc] += 1
                times.append((sec, fut.line))
                if opt.gpu:
                    ok = rc == 0
                else:
                    ok = rc in (2, 3) or (rc == 0 and "-h" in fut.args)
                if not ok:
                    why = "hang (timeout)" if rc == "timeout" else ("signal %d" % -rc if isinstance(rc, int) and rc < 0 else "exit %s" % rc)
                    fails.append("%s after %.1f s: %s   [%s]" % (why, sec, fut.line, tail))
    for f in fails[:20]:
        print("  " + f)
    if opt.gpu:
        print("lines per binary: " + ", ".join("%s %d" % (b, sum(1 for _, l in times if l.split()[0] == b)) for b in binaries))
        for sec, line in sorted(times, reverse=True)[:5]:
            print("  slowest: %.1f s  %s" % (sec, line))
    mode = "GPU (all --check-only, valid shapes)" if opt.gpu else "CPU (no GPU visible)"
    histo = ", ".join("%s: %d" % (k, v) for k, v in sorted(hist.items(), key=lambda kv: str(kv[0])))
    print("%s fuzz %s: %d command lines over %d binaries, seed %d; exit codes {%s}; %d failed" %
          ("FAIL" if fails else "PASS", mode, n, len(binaries), opt.seed, histo, len(fails)))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
