"""tests/lib/echo.py: the two ends of a TCP conversation for tests/it_net_hosts.sh.

    echo.py serve IP:PORT             echoes every connection's bytes back; logs "open",
                                      "data N" and "eof" lines (flushed) on stdout
    echo.py rtt IP:PORT [N]           N round trips of one byte; prints the median in ms
    echo.py hold IP:PORT FIFO         connects, then for each line read from FIFO sends it and
                                      prints what came back ("back LINE"), or "error WHY" when
                                      the connection failed; "timeout" after 1.5 s without an answer
"""
import os
import socket
import sys
import threading
import time


def addr(s):
    host, _, port = s.rpartition(":")
    return host, int(port)


def serve(ep):
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(addr(ep))
    srv.listen(16)

    def one(c):
        print("open", flush=True)
        while True:
            try:
                d = c.recv(65536)
            except OSError as e:
                print("error", e, flush=True)
                return
            if not d:
                print("eof", flush=True)
                return
            print("data", len(d), flush=True)
            c.sendall(d)

    while True:
        c, _ = srv.accept()
        threading.Thread(target=one, args=(c,), daemon=True).start()


def rtt(ep, n):
    s = socket.create_connection(addr(ep), timeout=10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    times = []
    for _ in range(n):
        t = time.time()
        s.sendall(b"x")
        s.recv(1)
        times.append((time.time() - t) * 1e3)
    times.sort()
    print("%.1f" % times[len(times) // 2])


def hold(ep, fifo):
    s = socket.create_connection(addr(ep), timeout=5)
    s.settimeout(1.5)
    print("connected", flush=True)
    with open(fifo) as f:
        for line in f:
            try:
                s.sendall(line.encode())
                print("back", s.recv(65536).decode().strip(), flush=True)
            except socket.timeout:
                print("timeout", flush=True)
            except OSError as e:
                print("error", e, flush=True)


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "serve":
        serve(sys.argv[2])
    elif mode == "rtt":
        rtt(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 5)
    elif mode == "hold":
        hold(sys.argv[2], sys.argv[3])
    else:
        sys.exit("usage: echo.py serve|rtt|hold ...")
    os._exit(0)
