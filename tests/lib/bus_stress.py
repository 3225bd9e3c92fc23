"""tests/lib/bus_stress.py: bin/bus stopped by SIGTERM at random moments under load, N times.

A client written from docs/PROTOCOL.md (pyzmq + msgpack, run with /usr/bin/python3), as the
issue that found the shutdown hang used. Usage:

    bus_stress.py N DIR        N iterations, ipc endpoints under DIR; prints one line per
                               iteration that failed, then "N passed, M failed"
    FT_STRESS_BUS=PATH         another bin/bus to try (an older build, to see the hang)

Each iteration starts a bus and stops it with SIGTERM, in one of three modes (in turn):
  sequence  the steps of the report that found the hang: late subscribers joining and leaving,
            malformed and non-UTF-8 ckpt events, ckpt events of 260 distinct runs (the cache,
            256 runs, evicts the oldest), one more late subscriber (which must receive the
            welcome index of 256 runs, without the non-UTF-8 one), the publisher closed, then
            SIGTERM 0-5 ms later;
  load      publishers of every kind of event (malformed ones included) and subscribers
            joining and leaving go on all the time; SIGTERM at a random moment 20-400 ms in;
  closing   40 publishers connect and close at once; SIGTERM 0-4 ms later, while the bus
            handles their disconnections (the moment that hung: a signal that arrived while
            zmq_poll handled libzmq's commands, outside its poll(2), was noticed only at the
            next event, and after the last publisher had gone there was none).
An iteration passes when the bus exits within 2 s of SIGTERM, with status 0 and its stop line.
"""
import os
import random
import signal
import subprocess
import sys
import threading
import time

import msgpack
import zmq

LIMIT_S = 2.0
BUS = os.environ.get("FT_STRESS_BUS", "bin/bus")


def event(topic, body):
    return topic.encode() + b"\0" + msgpack.packb(dict(body, v=1))


def ckpt(run, step, path=None):
    return event("ckpt/" + run, {"type": "ckpt", "run": run, "step": step, "time": 1.0,
                                 "path": path or "/runs/%s/ckpt-%08d" % (run, step), "model": "llama"})


def ckpt_not_utf8(run):
    # a str whose bytes are not UTF-8 (msgpack's str header, then 0xff 0xfe)
    return ckpt(run, 1, "QQ").replace(b"\xa2QQ", b"\xa2\xff\xfe")


def metrics(step):
    return event("metrics/r", {"type": "metrics", "run": "r", "step": step, "time": 1.0,
                               "values": {"loss": 1.0}, "precision": "fp32"})


MALFORMED = [b"garbage without a zero byte", b"ckpt/x\0\xc1\xc1", b"ckpt/y\0" + msgpack.packb({"v": 1})]


def one_malformed(pub):
    r = random.random()
    if r < 0.25:
        pub.send_multipart([b"ckpt/two\0", b"frames"])
    elif r < 0.5:
        pub.send(ckpt_not_utf8("bad%d" % random.randrange(3)))
    else:
        pub.send(random.choice(MALFORMED))


def socket(ctx, kind, ep, sub=None):
    s = ctx.socket(kind)
    s.setsockopt(zmq.LINGER, 0)
    if sub is not None:
        s.setsockopt(zmq.SUBSCRIBE, sub)
    s.connect(ep)
    return s


def connected_pub(ctx, ep):
    """An XPUB publisher that has seen the bus's subscription (docs/PROTOCOL.md §1)."""
    p = socket(ctx, zmq.XPUB, ep)
    p.setsockopt(zmq.RCVTIMEO, 5000)
    p.recv()
    return p


def late_subscriber(ctx, ep, wait_s):
    """Joins, reads for up to wait_s, leaves; returns the welcome index's items, or None."""
    s = socket(ctx, zmq.SUB, ep, b"ckpt")
    items, end = None, time.time() + wait_s
    while time.time() < end:
        if s.poll(20):
            frame = s.recv()
            topic, body = frame.split(b"\0", 1)
            m = msgpack.unpackb(body, raw=False)  # raises on a str that is not UTF-8
            if m["type"] == "ckpt_index":
                items = m["items"]
                break
    s.close()
    return items


def mode_sequence(ctx, pub_ep, sub_ep, why):
    pub = connected_pub(ctx, pub_ep)
    for i in range(3):
        late_subscriber(ctx, sub_ep, 0.01)
        one_malformed(pub)
        pub.send(ckpt_not_utf8("nu%d" % i))
    for i in range(260):
        pub.send(ckpt("run%03d" % i, 100 + i))
    pub.send(metrics(1))  # the bus has seen every ckpt once this passed: ask a tap for it
    tap = socket(ctx, zmq.SUB, sub_ep, b"metrics")
    end = time.time() + 5
    while time.time() < end:
        pub.send(metrics(2))
        if tap.poll(50):
            break
    tap.close()
    items = late_subscriber(ctx, sub_ep, 3.0)
    runs = sorted(it["run"] for it in items or [])
    if runs != ["run%03d" % i for i in range(4, 260)]:
        why.append("late subscriber's welcome index: %d runs, first %s" % (len(runs), runs[:2]))
    pub.close()
    time.sleep(random.random() * 0.005)


def mode_load(ctx, pub_ep, sub_ep, why, stop):
    def publisher():
        p = socket(ctx, zmq.PUB, pub_ep)
        k = 0
        while not stop.is_set():
            r = random.random()
            if r < 0.1:
                one_malformed(p)
            elif r < 0.6:
                p.send(ckpt("run%d" % (k % 300), k))
            else:
                p.send(metrics(k))
            k += 1
            if k % 50 == 0:
                time.sleep(0.001)
        p.close()

    def churn():
        while not stop.is_set():
            late_subscriber(ctx, sub_ep, random.random() * 0.03)

    threads = [threading.Thread(target=f) for f in (publisher, publisher, churn, churn, churn)]
    for t in threads:
        t.start()
    time.sleep(0.02 + random.random() * 0.38)
    return threads


def mode_closing(ctx, pub_ep, sub_ep, why):
    pubs = [socket(ctx, zmq.XPUB, pub_ep) for _ in range(40)]
    for p in pubs:
        p.setsockopt(zmq.RCVTIMEO, 5000)
        p.recv()
    for p in pubs:
        p.close()
    time.sleep(random.random() * 0.004)


def iteration(it, d):
    pub_ep, sub_ep = "ipc://%s/p%d" % (d, it), "ipc://%s/s%d" % (d, it)
    log = open(os.path.join(d, "bus%d.log" % it), "w+")
    bus = subprocess.Popen([BUS, "--pub", pub_ep, "--sub", sub_ep], stderr=log)
    # the signal must find the bus running: before its handler is installed the default
    # action would end it (quickly, but without its stop line)
    end = time.time() + 10
    while time.time() < end and "bus: publishers" not in open(log.name).read():
        time.sleep(0.01)
    ctx = zmq.Context()
    why, threads, stop = [], [], threading.Event()
    mode = ("sequence", "load", "closing")[it % 3]
    try:
        if mode == "sequence":
            mode_sequence(ctx, pub_ep, sub_ep, why)
        elif mode == "load":
            threads = mode_load(ctx, pub_ep, sub_ep, why, stop)
        else:
            mode_closing(ctx, pub_ep, sub_ep, why)
    except Exception as e:  # a client that could not talk to the bus: the iteration fails
        why.append("client: %r" % (e,))
    t0 = time.time()
    bus.send_signal(signal.SIGTERM)
    try:
        rc = bus.wait(10)
        dt = time.time() - t0
    except subprocess.TimeoutExpired:
        rc, dt = None, None
        bus.kill()
        bus.wait()
    stop.set()
    for t in threads:
        t.join()
    ctx.destroy(0)
    log.seek(0)
    text = log.read()
    log.close()
    if dt is None:
        why.append("still running 10 s after SIGTERM")
    elif dt > LIMIT_S:
        why.append("exited %.2f s after SIGTERM (limit %.0f s)" % (dt, LIMIT_S))
    if rc is not None and rc != 0:
        why.append("exit status %d" % rc)
    if rc is not None and "bus: stopping" not in text:
        why.append("no stop line")
    if why:
        print("iteration %d (%s): %s" % (it, mode, "; ".join(why)), flush=True)
    return dt, not why


def main():
    n, d = int(sys.argv[1]), sys.argv[2]
    passed = failed = 0
    worst = 0.0
    for it in range(n):
        dt, good = iteration(it, d)
        worst = max(worst, dt if dt is not None else float("inf"))
        passed, failed = passed + good, failed + (not good)
    print("%d iterations, the slowest exit %.3f s after SIGTERM" % (n, worst))
    print("%d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
