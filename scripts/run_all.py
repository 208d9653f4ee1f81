#!/usr/bin/env python3
"""Turn the RESULT / PEAK / PEER lines of the bench logs into results/<gpu>.md, .csv and .png.

  python3 scripts/run_all.py --run                 run every line of scripts/bench_cases.txt, then tabulate
  python3 scripts/run_all.py --logs build/logs     tabulate logs written by scripts/gpu_check.sh
  python3 scripts/run_all.py --gpu h200 --tables-only
                                                   rewrite results/<gpu>.md (and README's table) from the .csv

Rows already in results/<gpu>.csv are kept unless the new logs measure the same (op, dtype, shape,
kernel, block) or peer (op, impl, shape): a run of a subset (--only) updates its rows and leaves the rest.
For the reference GPU (h200) the headline table of README.md, between its `results:begin` and
`results:end` comments, is rewritten from the same rows, so the README holds no number of its own.
Standard library only; the PNG needs matplotlib and is skipped with a message without it.
"""
import argparse
import csv
import datetime
import os
import re
import shlex
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIELDS = ["kind", "op", "kernel", "block", "dtype", "shape", "check", "ms_median", "ms_min", "ms_max",
          "gbps", "pct_copy", "impl", "extra", "date"]


def parse_line(line):
    """'RESULT a=1 b="x y"' -> ('RESULT', {'a': '1', 'b': 'x y'}), or None for other lines."""
    m = re.match(r"^(RESULT|PEAK|PEER) (.*)$", line.strip())
    if not m:
        return None
    try:
        parts = shlex.split(m.group(2))
    except ValueError:
        return None
    kv = {}
    for p in parts:
        if "=" in p:
            k, v = p.split("=", 1)
            kv[k] = v
    return m.group(1), kv


def parse_logs(paths, date):
    rows, peaks = [], []
    for path in paths:
        with open(path, errors="replace") as f:
            for line in f:
                parsed = parse_line(line)
                if not parsed:
                    continue
                kind, kv = parsed
                if kind == "PEAK":
                    peaks.append(kv)
                    continue
                known = {"op", "kernel", "block", "dtype", "shape", "check", "ms_median", "ms_min", "ms_max",
                         "gbps", "pct_copy", "impl"}
                row = {k: kv.get(k, "") for k in FIELDS if k in known}
                row["kind"] = kind
                row["extra"] = " ".join(f"{k}={v}" for k, v in kv.items() if k not in known)
                row["date"] = date
                rows.append(row)
    return rows, peaks


def key(row):
    if row["kind"] == "PEER":
        return ("PEER", row["op"], row["impl"], row["shape"], row.get("dtype", ""))
    return ("RESULT", row["op"], row["dtype"], row["shape"], row["kernel"], row["block"])


def merge(old_rows, new_rows):
    merged = {key(r): r for r in old_rows}
    for r in new_rows:
        if r["kind"] == "PEER" and not r.get("dtype"):   # a peer without a dtype (FBGEMM's) replaces its shape's rows of any dtype
            for k in [k for k in merged if k[:4] == key(r)[:4]]:
                del merged[k]
        merged[key(r)] = r
    return list(merged.values())


def fnum(x, fmt="{:.4f}"):
    try:
        return fmt.format(float(x))
    except (TypeError, ValueError):
        return x or ""


def write_markdown(path, gpu, rows, peaks):
    ops = []
    for r in rows:
        if r["op"] not in ops:
            ops.append(r["op"])
    lines = [f"# Results: {gpu}", "",
             "Written by `scripts/run_all.py` from the RESULT/PEER lines of `scripts/gpu_check.sh` runs on this GPU.",
             "Each table row is a version's best block size (all block sizes are in the .csv). `% copy` is the",
             "achieved bandwidth (the op's fewest-bytes count over the median time) over the device-to-device copy",
             "bandwidth measured in the same process. Times are medians of timed samples with an L2 flush before each.", ""]
    if peaks:
        copies = sorted(float(p["copy_gbps"]) for p in peaks if "copy_gbps" in p)
        fmas = sorted(float(p["fma_gflops"]) for p in peaks if "fma_gflops" in p)
        if copies:
            lines.append(f"Copy peak in these runs: median {copies[len(copies)//2]:.0f} GB/s "
                         f"(min {copies[0]:.0f}, max {copies[-1]:.0f}, {len(copies)} processes).")
        if fmas:
            lines.append(f"FP32 FMA peak: median {fmas[len(fmas)//2]:.0f} GFLOP/s ({len(fmas)} processes).")
        lines.append("")
    elif os.path.exists(path):   # no PEAK lines in this call (--tables-only): keep the last run's summary
        with open(path) as f:
            kept = [l.rstrip("\n") for l in f if l.startswith(("Copy peak in these runs", "FP32 FMA peak"))]
        if kept:
            lines += kept + [""]
    for op in ops:
        lines += [f"## {op}", ""]
        res = [r for r in rows if r["op"] == op and r["kind"] == "RESULT"]
        groups = []
        for r in res:
            g = (r["dtype"], r["shape"])
            if g not in groups:
                groups.append(g)
        for dtype, shape in groups:
            lines += [f"`{shape}`, {dtype}", "",
                      "| version | block | ms median | ms min | ms max | GB/s | % copy | check | more | measured |",
                      "|---|---|---|---|---|---|---|---|---|---|"]
            best = {}
            for r in res:
                if (r["dtype"], r["shape"]) != (dtype, shape):
                    continue
                k = int(r["kernel"])
                if k not in best or float(r["ms_median"]) < float(best[k]["ms_median"]):
                    best[k] = r
            for k in sorted(best):
                r = best[k]
                lines.append(f"| {k} | {r['block']} | {fnum(r['ms_median'])} | {fnum(r['ms_min'])} | {fnum(r['ms_max'])} | "
                             f"{fnum(r['gbps'], '{:.0f}')} | {fnum(r['pct_copy'], '{:.1f}')} | {r['check']} | {r['extra']} | {r['date']} |")
            lines.append("")
        peers = [r for r in rows if r["op"] == op and r["kind"] == "PEER"]
        if peers:
            lines += ["Peers, same GPU, same method (median of timed samples after an L2 flush):", "",
                      "| implementation | shape | ms median | ms min | ms max | more | measured |", "|---|---|---|---|---|---|---|"]
            for r in peers:
                lines.append(f"| {r['impl']} | `{r['shape']}` | {fnum(r['ms_median'])} | {fnum(r['ms_min'])} | "
                             f"{fnum(r['ms_max'])} | {r['extra']} | {r['date']} |")
            lines.append("")
        if op == "tt_embedding_backward":
            lines += tt_step_table(rows)
    notes = os.path.join(os.path.dirname(path), f"{gpu}_notes.md")   # hand-written notes, appended as they are
    if os.path.exists(notes):
        with open(notes) as f:
            lines += ["", f.read()]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def default_versions():
    """{op: the version it runs when none is named}, read from each op's `Cli cli("<op>", about, versions, default)`."""
    out = {}
    for name in sorted(os.listdir(os.path.join(ROOT, "dev", "cuda"))):
        if name.endswith(".cu"):
            with open(os.path.join(ROOT, "dev", "cuda", name)) as f:
                m = re.search(r'Cli cli\("(\w+)",.*?,\s*(\d+)\);', f.read(), re.S)
            if m:
                out[m.group(1)] = m.group(2)
    return out


def tt_step_table(rows):
    """The TT training step per shape: the default forward + the default backward with SGD (the same shape string),
    beside FBTT's pipeline (forward version 2) and the PyTorch composite's forward + backward on the same inputs.
    The measured column shows whether the parts come from one run (one date)."""
    fwd, bwd = "tt_embedding_forward", "tt_embedding_backward"
    dv = default_versions()
    if fwd not in dv or bwd not in dv:
        return []

    def best(op, kernel, shape):
        res = [r for r in rows if r["kind"] == "RESULT" and r["op"] == op and r["kernel"] == kernel
               and r["dtype"] == "fp32" and r["shape"] == shape]
        return min(res, key=lambda r: float(r["ms_median"])) if res else None

    out = []
    shapes = [r["shape"] for r in rows if r["kind"] == "RESULT" and r["op"] == bwd and r["kernel"] == dv[bwd]
              and r["dtype"] == "fp32"]
    for shape in dict.fromkeys(shapes):
        f, b = best(fwd, dv[fwd], shape), best(bwd, dv[bwd], shape)
        if not f or not b:
            continue
        peer_shape = shape[:-len(",stash")] if shape.endswith(",stash") else shape
        f2 = best(fwd, "2", peer_shape)
        pt = [r for r in rows if r["kind"] == "PEER" and (r["op"], r["impl"], r["shape"]) == (bwd, "pytorch_bmm_chain_fwd_bwd", peer_shape)]
        step = float(f["ms_median"]) + float(b["ms_median"])
        mark = lambda r: "" if r["check"] == "pass" else f" ({r['check']})"
        cells = [f"`{shape}`", fnum(f["ms_median"]) + mark(f)]
        cells += [fnum(f2["ms_median"]), f"{float(f2['ms_median']) / float(f['ms_median']):.1f}x"] if f2 else ["", ""]
        cells += [fnum(b["ms_median"]) + mark(b), f"{step:.4f}"]
        cells += [fnum(pt[0]["ms_median"]), f"{float(pt[0]['ms_median']) / step:.1f}x"] if pt else ["", ""]
        dates = {f["date"], b["date"]} | {r["date"] for r in ([f2] if f2 else []) + pt[:1]}
        out.append("| " + " | ".join(cells + [", ".join(sorted(dates))]) + " |")
    if not out:
        return []
    return [f"The training step per shape: forward {dv[fwd]} + backward {dv[bwd]} with SGD (the defaults, best block each), "
            "against FBTT's cuBLAS pipeline (forward 2) and the PyTorch composite's forward + backward "
            "(`pytorch_bmm_chain_fwd_bwd`) on the same inputs (a `stash` row against the same inputs' forward 2 and PyTorch, "
            "which keep no stash); one date in the last column: one run.", "",
            f"| shape | forward {dv[fwd]} | forward 2 | 2 / {dv[fwd]} | backward {dv[bwd]} + SGD | step | PyTorch fwd + bwd | "
            "step vs PyTorch | measured |", "|---|---|---|---|---|---|---|---|---|"] + out + [""]


# The README's headline table: one row per (op, dtype, bench shape) with the fastest version there, and
# the PyTorch peer as a signed sum of peer rows (a forward subtracted from forward + backward + step).
README_GPU = "h200"
README_BEGIN, README_END = "<!-- results:begin -->", "<!-- results:end -->"
_REPKV = "B8,T1024,NH32,NKV8,HD128"
_BAG = "T32,E100000,D128,B512,L20,alpha{a},{pool}"
_BAG_LARGE = "T1,E1000000,D128,B65536,L32,alpha{a},sum"
_TT = "T3,p200x220x250,q4x4x4,r32x32,nt1,B{b},L20,alpha{a}"
HEADLINE = [  # (op, dtype, shape, [(peer op, peer impl, sign)], what the peer times)
    ("repkv_forward", "fp32", _REPKV, [("repkv_forward", "pytorch", 1)], "split / expand / stack"),
    ("repkv_forward", "bf16", _REPKV, [], ""),
    ("repkv_backward", "fp32", _REPKV, [("repkv_backward", "pytorch", 1)], "reshape / sum / cat"),
    ("repkv_backward", "bf16", _REPKV, [], ""),
] + [
    ("embedding_bag_forward", "fp32", shape.format(a=a, pool="sum"), [("embedding_bag_forward", "torch.F.embedding_bag", 1)],
     "F.embedding_bag") for shape in (_BAG, _BAG_LARGE) for a in ("0", "1.15")
] + [
    ("embedding_bag_forward", "fp32", _BAG.format(a=a, pool="none"), [], "") for a in ("0", "1.15")
] + [
    ("embedding_bag_forward", "fp32", _BAG.format(a=a, pool="sum") + ",fp16,stochastic", [], "") for a in ("0", "1.15")
] + [
    ("embedding_bag_backward", "fp32", _BAG.format(a=a, pool="sum") + ",fp16,stochastic,rowwise_adagrad", [], "")
    for a in ("0", "1.15")
] + [
    ("embedding_bag_backward", "fp32", _BAG.format(a=a, pool=pool) + ",rowwise_adagrad",
     [("embedding_bag_backward", "pytorch_fwd_bwd_adagrad_step", 1), ("embedding_bag_backward", "pytorch_forward", -1)]
     if pool == "sum" else [], "backward + Adagrad step") for pool in ("sum", "none") for a in ("0", "1.15")
] + [
    ("tt_embedding_forward", "fp32", _TT.format(b=512, a=a), [("tt_embedding_forward", "pytorch_bmm_chain", 1)],
     "bmm chain") for a in ("0", "1.15")
] + [
    ("tt_embedding_forward", "fp32", _TT.format(b=4096, a="0"), [], ""),
] + [
    ("tt_embedding_backward", "fp32", _TT.format(b=512, a=a),
     [("tt_embedding_backward", "pytorch_bmm_chain_fwd_bwd_sgd", 1), ("tt_embedding_forward", "pytorch_bmm_chain", -1)],
     "bmm chain backward + SGD") for a in ("0", "1.15")
]


def headline_table(rows):
    """The README's table (markdown lines), from the same rows as results/<gpu>.md."""
    out = ["| op | dtype | shape | fastest version | ms (median) | rate | PyTorch ms | speed-up | FBGEMM kernels ms | "
           "vs FBGEMM | measured |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for op, dtype, shape, peer_parts, peer_what in HEADLINE:
        res = [r for r in rows if r["kind"] == "RESULT" and (r["op"], r["dtype"], r["shape"]) == (op, dtype, shape)]
        if not res:
            continue
        best = min(res, key=lambda r: float(r["ms_median"]))
        versions = max(int(r["kernel"]) for r in rows if r["kind"] == "RESULT" and r["op"] == op)
        extra = dict(kv.split("=", 1) for kv in best["extra"].split() if "=" in kv)
        if "gflops" in extra:
            rate = f"{float(extra['gflops']) / 1000:.1f} TFLOP/s ({extra.get('pct_fma', '?')}% of FMA)"
        else:
            rate = f"{float(best['pct_copy']):.1f}% of copy"
        if "fbgemm_gbps" in extra and op.endswith("backward"):
            rate += f" (FBGEMM's count: {extra['fbgemm_gbps']} GB/s)"
        peers = []
        for peer_op, impl, sign in peer_parts:
            match = [r for r in rows if r["kind"] == "PEER" and (r["op"], r["impl"], r["shape"]) == (peer_op, impl, shape)]
            peers.append((match[0], sign) if match else None)
        peer_ms, speedup, dates = "", "", {best["date"]}
        if peers and all(peers):
            ms = sum(sign * float(r["ms_median"]) for r, sign in peers)
            dates |= {r["date"] for r, _ in peers}
            peer_ms = f"{ms:.4f} ({peer_what})"
            speedup = f"{ms / float(best['ms_median']):.1f}x"
        # FBGEMM's kernel time (scripts/peers/fbgemm_tbe.py, profiler sum) on the same inputs, fp32 weights
        fb_impl = "fbgemm_forward_kernels" if op == "embedding_bag_forward" else "fbgemm_backward_kernels"
        fb = [r for r in rows if r["kind"] == "PEER" and (r["op"], r["impl"], r["shape"]) == (op, fb_impl, shape)
              and r.get("dtype", "") in ("", dtype)]
        fb_ms, fb_x = "", ""
        if fb and op.startswith("embedding_bag"):
            fb_ms, fb_x = fnum(fb[0]["ms_median"]), f"{float(fb[0]['ms_median']) / float(best['ms_median']):.2f}x"
            dates.add(fb[0]["date"])
        out.append(f"| {op} | {dtype} | `{shape}` | {best['kernel']} (of {versions}) | {fnum(best['ms_median'])} | "
                   f"{rate} | {peer_ms} | {speedup} | {fb_ms} | {fb_x} | {', '.join(sorted(dates))} |")
    return out


def write_readme_table(readme, rows):
    with open(readme) as f:
        text = f.read()
    if README_BEGIN not in text or README_END not in text:
        print(f"{readme}: no {README_BEGIN} / {README_END} markers, table not written")
        return
    head, rest = text.split(README_BEGIN, 1)
    tail = rest.split(README_END, 1)[1]
    with open(readme, "w") as f:
        f.write(head + README_BEGIN + "\n" + "\n".join(headline_table(rows)) + "\n" + README_END + tail)
    print(f"wrote the headline table of {readme}")


def write_plot(path, gpu, rows):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not found: no plot written")
        return
    best = {}
    for r in rows:
        if r["kind"] != "RESULT":
            continue
        k = (r["op"], r["dtype"], r["shape"], int(r["kernel"]))
        if k not in best or float(r["ms_median"]) < float(best[k]["ms_median"]):
            best[k] = r
    labels = [f"{op} {dt} v{k}\n{shape}" for (op, dt, shape, k) in best]
    if not labels:
        return
    values = [float(best[k]["pct_copy"]) for k in best]
    fig, ax = plt.subplots(figsize=(10, max(3, 0.28 * len(labels))))
    ax.barh(range(len(labels)), values, color="#4477aa")
    ax.set_yticks(range(len(labels)))
    ax.set_yticklabels(labels, fontsize=5)
    ax.invert_yaxis()
    ax.axvline(100, color="gray", lw=0.8, ls="--")
    ax.set_xlabel("% of measured device-to-device copy bandwidth (best block per version)")
    ax.set_title(f"{gpu}: bandwidth per version")
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    print(f"wrote {path}")


def run_bench_cases(log_path):
    with open(os.path.join(ROOT, "scripts", "bench_cases.txt")) as f:
        cases = [l.strip() for l in f if l.strip() and not l.startswith("#")]
    with open(log_path, "w") as log:
        for line in cases:
            print("running", line, flush=True)
            log.write(f"### {line}\n")
            log.flush()
            subprocess.run("./" + line, shell=True, cwd=os.path.join(ROOT, "dev", "cuda"), stdout=log, stderr=subprocess.STDOUT)


def write_outputs(out, gpu, rows, peaks, plot):
    write_markdown(os.path.join(out, f"{gpu}.md"), gpu, rows, peaks)
    print(f"wrote {os.path.join(out, gpu + '.md')}")
    if plot:
        write_plot(os.path.join(out, f"{gpu}.png"), gpu, rows)
    if gpu == README_GPU:
        write_readme_table(os.path.join(ROOT, "README.md"), rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", action="store_true", help="run scripts/bench_cases.txt first")
    ap.add_argument("--logs", default=os.path.join(ROOT, "build", "logs"), help="folder of *.log files")
    ap.add_argument("--gpu", default=None, help="name for results/<gpu>.md (default: from nvidia-smi)")
    ap.add_argument("--out", default=os.path.join(ROOT, "results"))
    ap.add_argument("--tables-only", action="store_true",
                    help="read no logs: rewrite results/<gpu>.md and README's table from results/<gpu>.csv")
    args = ap.parse_args()
    gpu = args.gpu
    if not gpu:
        try:
            name = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                                  text=True).stdout.strip().splitlines()[0]
            gpu = re.sub(r"[^a-z0-9]", "_", name.lower().replace("nvidia ", ""))
        except Exception:
            gpu = "unknown"
    csv_path = os.path.join(args.out, f"{gpu}.csv")
    old = []
    if os.path.exists(csv_path):
        with open(csv_path) as f:
            old = [dict(r) for r in csv.DictReader(f)]
    if args.tables_only:
        if not old:
            print(f"no rows in {csv_path}")
            return 1
        write_outputs(args.out, gpu, old, [], plot=False)
        return 0
    os.makedirs(args.logs, exist_ok=True)
    if args.run:
        run_bench_cases(os.path.join(args.logs, "bench.log"))
    logs = [os.path.join(args.logs, f) for f in sorted(os.listdir(args.logs)) if f.endswith(".log")]
    date = datetime.date.today().isoformat()
    new_rows, peaks = parse_logs(logs, date)
    if not new_rows:
        print(f"no RESULT or PEER lines in {args.logs}")
        return 1
    os.makedirs(args.out, exist_ok=True)
    rows = merge(old, new_rows)
    with open(csv_path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow(r)
    write_outputs(args.out, gpu, rows, peaks, plot=True)
    print(f"wrote {csv_path}: {len(new_rows)} new rows, {len(rows)} in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
