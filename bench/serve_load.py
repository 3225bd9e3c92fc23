#!/usr/bin/python3
"""Closed-loop clients of bin/sampler --serve (bench/bench_serve.sh).

--clients C threads, each with its own DEALER socket, each sending one gen_req, waiting for its
answer and sending the next, --requests times. Latency: from send to the final reply, per
request. Tokens/s: every generated token (the replies' n_tokens) over the wall time from the
first send to the last reply. Prints one JSON line.

  /usr/bin/python3 bench/serve_load.py --endpoint EP --clients 8 --requests 10 --prompt TEXT
                                       [--max-new 64] [--seed 1]
"""
import argparse
import json
import statistics
import threading
import time

import msgpack
import zmq


def client(ctx, a, k, lat, toks, errors, start):
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.RCVTIMEO, 120000)
    s.setsockopt(zmq.LINGER, 0)
    s.connect(a.endpoint)
    start.wait()
    for r in range(a.requests):
        req = {"v": 1, "type": "gen_req", "req_id": r, "prompt": a.prompt, "max_new": a.max_new,
               "temperature": 1.0, "top_k": 0, "top_p": 1.0, "seed": a.seed,
               "latent": "independent", "index": k * a.requests + r, "group": 1, "flags": 0}
        t0 = time.perf_counter()
        s.send_multipart([b"", msgpack.packb(req)])
        rep = msgpack.unpackb(s.recv_multipart()[-1], raw=False)
        lat.append(time.perf_counter() - t0)
        if rep["type"] == "gen":
            toks.append(rep["n_tokens"])
        else:
            errors.append(rep.get("code"))
    s.close()


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--clients", type=int, default=1)
    ap.add_argument("--requests", type=int, default=10)
    ap.add_argument("--prompt", required=True)
    ap.add_argument("--max-new", type=int, default=64)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    ctx = zmq.Context()
    lat, toks, errors = [], [], []
    start = threading.Event()
    th = [threading.Thread(target=client, args=(ctx, a, k, lat, toks, errors, start)) for k in range(a.clients)]
    for t in th:
        t.start()
    time.sleep(0.5)               # every socket connected
    t0 = time.perf_counter()
    start.set()
    for t in th:
        t.join()
    wall = time.perf_counter() - t0
    print(json.dumps(dict(clients=a.clients, requests=len(lat), errors=len(errors), tokens=sum(toks),
                          wall_s=wall, tok_s=sum(toks) / wall, p50_ms=1e3 * statistics.median(lat),
                          p99_ms=1e3 * pct(lat, 99), mean_ms=1e3 * statistics.mean(lat))))


if __name__ == "__main__":
    main()
