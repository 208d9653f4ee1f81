#!/usr/bin/env python3
"""Run every peer script in scripts/peers/ (the PyTorch / FBGEMM cross-checks and timings).

Each peer script checks an op's --dump output against PyTorch and times the PyTorch (or FBGEMM)
composite at the bench size; it prints PASS / FAIL / SKIP / PEER lines. This runner passes them through
and exits 1 if any script printed FAIL or crashed. `--only TEXT` runs the scripts whose name contains TEXT.
"""
import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--only", default="", help="run only the peer scripts whose file name contains this")
    args = ap.parse_args()
    peers_dir = os.path.join(HERE, "peers")
    scripts = sorted(f for f in os.listdir(peers_dir) if f.endswith(".py") and not f.startswith("_") and f != "peer_util.py")
    failed = False
    for name in scripts:
        if args.only and args.only not in name:
            continue
        print(f"== {name}", flush=True)
        p = subprocess.run([sys.executable, os.path.join(peers_dir, name)], cwd=ROOT, capture_output=True, text=True)
        sys.stdout.write(p.stdout)
        if p.returncode != 0 or any(l.startswith("FAIL") for l in p.stdout.splitlines()):
            failed = True
            if p.returncode != 0:
                print(f"FAIL {name}: exited {p.returncode}")
                sys.stdout.write(p.stderr[-3000:])
        sys.stdout.flush()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
