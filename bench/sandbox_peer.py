"""bench/sandbox_peer.py: the peer of bench/bench_sandbox.sh.

Runs each program of a JSONL file (one JSON string per line) the way a Python evaluation
harness without isolation does: a fresh temporary directory, the program written there,
subprocess.run([python3, file], timeout=...) with its output captured, in a thread pool of
--jobs workers. Prints programs per second (from the first start to the last end). Exits
non-zero when a program fails, so a broken peer never reports a speed.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor


def run_one(src, timeout):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "main.py")
        with open(path, "w") as f:
            f.write(src)
        try:
            r = subprocess.run([sys.executable, path], cwd=d, capture_output=True, timeout=timeout)
            return r.returncode == 0
        except subprocess.TimeoutExpired:
            return False


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("programs")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=10.0)
    a = ap.parse_args()
    with open(a.programs) as f:
        progs = [json.loads(line) for line in f if line.strip()]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=a.jobs) as ex:
        ok = list(ex.map(lambda p: run_one(p, a.timeout), progs))
    dt = time.perf_counter() - t0
    if not all(ok):
        print("sandbox_peer: %d of %d programs failed" % (ok.count(False), len(ok)), file=sys.stderr)
        return 1
    print("%.3f" % (len(progs) / dt))
    return 0


if __name__ == "__main__":
    sys.exit(main())
