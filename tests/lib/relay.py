"""tests/lib/relay.py: a TCP relay that makes a link slow and lossy, for the multi-host tests
(the kernel's netem qdisc is not available on the machines these tests run on).

    relay.py --listen IP:PORT --to IP:PORT [--delay-ms D] [--loss P] [--seed S]

Every connection accepted at --listen is joined to a new connection to --to. Each direction
cuts what it reads into segments of 1448 bytes (a TCP segment's payload on Ethernet) and
hands each one on D ms after it was read. A relay between two TCP connections cannot drop
bytes (the stream would be corrupt), so loss is what a lost segment costs the receiving
program: with probability P a segment is held for a retransmission time-out (Linux's floor of
200 ms plus the round trip, 2 D) before it is handed on, and, TCP delivering in order,
everything behind it waits too. So "--delay-ms 200 --loss 0.05" is a link of 200 ms each way
where 5% of the segments are lost once and sent again.

Logs one line at start and one at the end (connections, bytes, segments held as lost) on
stderr; SIGTERM or SIGINT stops it at once (open connections are closed).
"""
import argparse
import asyncio
import random
import signal
import sys

SEGMENT = 1448
RTO_FLOOR_S = 0.2

stats = {"connections": 0, "bytes": 0, "lost": 0}


def addr(s):
    host, _, port = s.rpartition(":")
    return host, int(port)


async def one_way(reader, writer, delay, loss, rng):
    """Copies reader to writer, each segment delivered at its time, in order."""
    loop = asyncio.get_running_loop()
    queue = asyncio.Queue()
    rto = max(RTO_FLOOR_S, 2 * delay)

    async def deliver():
        while True:
            at, data = await queue.get()
            if data is None:
                break
            wait = at - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()

    sender = asyncio.create_task(deliver())
    last = 0.0
    try:
        while True:
            data = await reader.read(1 << 16)
            if not data:
                break
            now = loop.time()
            stats["bytes"] += len(data)
            for i in range(0, len(data), SEGMENT):
                at = max(now + delay, last)
                if rng.random() < loss:
                    at += rto
                    stats["lost"] += 1
                last = at
                queue.put_nowait((at, data[i:i + SEGMENT]))
    except (ConnectionError, OSError):
        pass
    queue.put_nowait((0.0, None))
    try:
        await sender
    except (ConnectionError, OSError):
        pass


async def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--listen", required=True)
    ap.add_argument("--to", required=True)
    ap.add_argument("--delay-ms", type=float, default=0.0)
    ap.add_argument("--loss", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    if not 0 <= a.loss < 1 or a.delay_ms < 0:
        sys.exit("relay: --loss must be in [0, 1) and --delay-ms >= 0")
    rng = random.Random(a.seed)
    delay = a.delay_ms / 1000.0
    target = addr(a.to)
    conns = set()

    async def on_client(creader, cwriter):
        stats["connections"] += 1
        conns.add(cwriter)
        try:
            treader, twriter = await asyncio.open_connection(*target)
        except OSError:
            cwriter.close()
            return
        conns.add(twriter)
        await asyncio.gather(one_way(creader, twriter, delay, a.loss, rng),
                             one_way(treader, cwriter, delay, a.loss, rng))
        for w in (cwriter, twriter):
            w.close()
            conns.discard(w)

    host, port = addr(a.listen)
    server = await asyncio.start_server(on_client, host, port, reuse_address=True)
    print("relay: %s -> %s, %.0f ms each way, %.1f%% of segments lost once" %
          (a.listen, a.to, a.delay_ms, 100 * a.loss), file=sys.stderr, flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    server.close()
    for w in list(conns):
        w.close()
    print("relay: stopping: %d connections, %d bytes, %d segments held as lost" %
          (stats["connections"], stats["bytes"], stats["lost"]), file=sys.stderr, flush=True)


if __name__ == "__main__":
    asyncio.run(main())
