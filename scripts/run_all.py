#!/usr/bin/env python3
"""Turn the RESULT / PEAK / PEER lines of the bench logs into results/<gpu>.md, .csv and .png.

  python3 scripts/run_all.py --run                 run every line of scripts/bench_cases.txt, then tabulate
  python3 scripts/run_all.py --logs build/logs     tabulate logs written by scripts/gpu_check.sh

Rows already in results/<gpu>.csv are kept unless the new logs measure the same (op, dtype, shape,
kernel, block) or peer (op, impl, shape): a run of a subset (--only) updates its rows and leaves the rest.
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
             "Written by `scripts/run_all.py` from the RESULT/PEER lines of `scripts/gpu_check.sh` runs on the lent GPU.",
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
    notes = os.path.join(os.path.dirname(path), f"{gpu}_notes.md")   # hand-written notes, appended as they are
    if os.path.exists(notes):
        with open(notes) as f:
            lines += ["", f.read()]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


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


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", action="store_true", help="run scripts/bench_cases.txt first")
    ap.add_argument("--logs", default=os.path.join(ROOT, "build", "logs"), help="folder of *.log files")
    ap.add_argument("--gpu", default=None, help="name for results/<gpu>.md (default: from nvidia-smi)")
    ap.add_argument("--out", default=os.path.join(ROOT, "results"))
    args = ap.parse_args()
    gpu = args.gpu
    if not gpu:
        try:
            name = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                                  text=True).stdout.strip().splitlines()[0]
            gpu = re.sub(r"[^a-z0-9]", "_", name.lower().replace("nvidia ", ""))
        except Exception:
            gpu = "unknown"
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
    csv_path = os.path.join(args.out, f"{gpu}.csv")
    old = []
    if os.path.exists(csv_path):
        with open(csv_path) as f:
            old = [dict(r) for r in csv.DictReader(f)]
    rows = merge(old, new_rows)
    with open(csv_path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow(r)
    write_markdown(os.path.join(args.out, f"{gpu}.md"), gpu, rows, peaks)
    write_plot(os.path.join(args.out, f"{gpu}.png"), gpu, rows)
    print(f"wrote {csv_path} and {gpu}.md: {len(new_rows)} new rows, {len(rows)} in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
