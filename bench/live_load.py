"""bench/live_load.py: the load test of bin/live (bench/bench_live.sh runs it).

A publisher stands in for a trainer: it sends metrics/load events (8 values each, as a trainer's)
to the bus at RATE a second, first BASELINE seconds with no page open, then SECONDS with N page
clients (build/bench/live_clients) reading bin/live's update stream. Measured:
  - the publisher's time in each send (a ZeroMQ PUB send: the bus never waits on a subscriber,
    and bin/live is only one) without and with the pages: p50, p99, max, and sends refused;
  - bin/live's resident memory every second, and its own account (store_bytes);
  - the events bin/live took in against those published (a subscriber that cannot keep up
    loses events, docs/PROTOCOL.md §1.1), and the last step it holds;
  - every client's stream: ids one after another with no gap, up to the last update.
Prints one JSON object."""
import argparse
import json
import os
import subprocess
import sys
import time
import urllib.request

import msgpack
import zmq

ap = argparse.ArgumentParser()
ap.add_argument("--port", type=int, required=True)
ap.add_argument("--pid", type=int, required=True)
ap.add_argument("--pub", required=True)
ap.add_argument("--rate", type=int, default=1000)
ap.add_argument("--seconds", type=float, default=60)
ap.add_argument("--baseline", type=float, default=10)
ap.add_argument("--clients", type=int, default=50)
ap.add_argument("--clients-bin", default="build/bench/live_clients")
ap.add_argument("--work", required=True)
a = ap.parse_args()
U = "http://127.0.0.1:%d" % a.port


def get(path):
    with urllib.request.urlopen(U + path, timeout=10) as r:
        return json.load(r)


def rss_kib():
    with open("/proc/%d/status" % a.pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


ctx = zmq.Context()
pub = ctx.socket(zmq.PUB)
pub.connect(a.pub)
time.sleep(1.0)  # the bus's subscription reaches the PUB
step = 0
refused = 0


def publish(seconds, times, samples):
    """RATE events a second for `seconds`; each send's duration (ns) into times."""
    global step, refused
    t0 = time.perf_counter()
    n_total = int(seconds * a.rate)
    next_sample = t0
    for i in range(n_total):
        due = t0 + i / a.rate
        d = due - time.perf_counter()
        if d > 0:
            time.sleep(d)
        step += 1
        body = msgpack.packb({"v": 1, "type": "metrics", "run": "load", "step": step, "time": time.time(),
                              "values": {"loss": 3.0 / (1 + step * 1e-4), "lr": 3e-4, "grad_norm": 1.0, "tok_s": 5e4,
                                         "tokens": step * 2048.0, "data_wait_s": 1e-5, "ce": 2.9, "kl_bits": 0.5}},
                             use_bin_type=True)
        frame = b"metrics/load\x00" + body
        s = time.perf_counter_ns()
        try:
            pub.send(frame, zmq.NOBLOCK)
        except zmq.Again:
            refused += 1
        times.append(time.perf_counter_ns() - s)
        if samples is not None and time.perf_counter() >= next_sample:
            next_sample += 1.0
            h = get("/api/health")
            samples.append({"t": round(time.perf_counter() - t0, 1), "rss_kib": rss_kib(), "store_bytes": h["store_bytes"],
                            "seq": h["seq"], "bus_events": h.get("bus_events")})
    return time.perf_counter() - t0


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p / 100 * len(v)))] / 1000.0 if v else None


base_times, load_times, samples = [], [], []
h0 = get("/api/health")
base_s = publish(a.baseline, base_times, None)
time.sleep(0.5)
seq0 = get("/api/state?runs=load&points=1")["seq"]
stop = os.path.join(a.work, "stop")
if os.path.exists(stop):
    os.remove(stop)
clients = subprocess.Popen([a.clients_bin, str(a.port), str(a.clients), str(seq0), stop], stdout=subprocess.PIPE, text=True)
time.sleep(1.0)  # the streams are open
rss_before = rss_kib()
load_s = publish(a.seconds, load_times, samples)
# wait until bin/live has taken in what was sent, then tell the clients where the end is
last, stable = -1, 0
while stable < 3:
    time.sleep(0.5)
    s = get("/api/health")["seq"]
    stable = stable + 1 if s == last else 0
    last = s
with open(stop + ".tmp", "w") as f:
    f.write("%d\n" % last)
os.rename(stop + ".tmp", stop)
out, _ = clients.communicate(timeout=60)
cl = json.loads(out.strip().splitlines()[-1])
h1 = get("/api/health")
series = get("/api/series?run=load&name=loss")
got = (h1.get("bus_events") or 0) - (h0.get("bus_events") or 0)
published = step
result = {
    "rate": a.rate, "seconds": a.seconds, "clients": a.clients,
    "published": published, "taken_in": got, "last_step_held": series["points"][-1][0], "points_held": len(series["points"]),
    "send_us_baseline": {"p50": pct(base_times, 50), "p99": pct(base_times, 99), "max": pct(base_times, 100)},
    "send_us_with_pages": {"p50": pct(load_times, 50), "p99": pct(load_times, 99), "max": pct(load_times, 100)},
    "sends_refused": refused,
    "achieved_rate": round(len(load_times) / load_s, 1),
    "rss_kib": {"before": rss_before, "at_10s": next((x["rss_kib"] for x in samples if x["t"] >= 10), None),
                "max": max(x["rss_kib"] for x in samples), "end": samples[-1]["rss_kib"]},
    "store_bytes_max": max(x["store_bytes"] for x in samples),
    "streams": cl,
    "updates_expected_per_client": last - seq0,
}
print(json.dumps(result))
