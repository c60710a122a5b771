#!/usr/bin/env python3
"""A UDP fault injector on the reporter side: reports sent to --listen are forwarded to
--target from a socket bound to --source (the reporter's address, so the translator's NACKs
still reach the reporter), with random loss, duplication, reordering and delay. Every dropped
report's extended-profile seq is written to --dropped-log (each report that left after a
higher seq, by reordering or delay jitter, to --reordered-log) on SIGTERM/SIGINT, with a JSON
summary on stdout. SIGUSR1 removes every fault (forwarding goes on).

  faultproxy.py --listen IP:PORT --target IP:PORT --source IP [--loss P] [--dup P]
                [--reorder P] [--delay-ms D] [--dropped-log FILE] [--seed S]
"""
import argparse
import heapq
import json
import random
import select
import signal
import socket
import struct
import sys
import time


def addr(s):
    h, p = s.rsplit(":", 1)
    return h, int(p)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--listen", required=True)
    p.add_argument("--target", required=True)
    p.add_argument("--source", required=True)
    p.add_argument("--loss", type=float, default=0)
    p.add_argument("--dup", type=float, default=0)
    p.add_argument("--reorder", type=float, default=0)
    p.add_argument("--delay-ms", type=float, default=0)
    p.add_argument("--dropped-log")
    p.add_argument("--reordered-log")
    p.add_argument("--sport", type=int, default=0)
    p.add_argument("--seed", type=int, default=7)
    a = p.parse_args()
    rng = random.Random(a.seed)
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    rx.bind(addr(a.listen))
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    tx.bind((a.source, a.sport))
    dst = addr(a.target)
    stats = {"received": 0, "forwarded": 0, "dropped": 0, "duplicated": 0, "reordered": 0}
    dropped, reordered = [], []
    held = None  # a report held back to be sent after the next one (reordering)
    timers = []  # (due, n, payload) for delayed sends
    n = 0
    stop = False

    def on_stop(*_):
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_stop)
    signal.signal(signal.SIGINT, on_stop)

    def write_logs():
        for path, seqs in ((a.dropped_log, dropped), (a.reordered_log, reordered)):
            if path:
                with open(path, "w") as f:
                    f.writelines(f"{s}\n" for s in seqs)

    def heal(*_):  # SIGUSR1: the faults end (logs written now), forwarding goes on
        a.loss = a.dup = a.reorder = a.delay_ms = 0
        write_logs()

    signal.signal(signal.SIGUSR1, heal)

    maxsent = [None]
    firstsent = [None]
    seen = set()

    def transmit(d):
        # A report that leaves after a higher seq is one the translator sees as a gap first,
        # unless it is below the first seq this (new) reporter ever sent: no gap exists there.
        if len(d) >= 8:
            q = struct.unpack(">I", d[4:8])[0]
            if firstsent[0] is None:
                firstsent[0] = q
            if maxsent[0] is not None and firstsent[0] < q < maxsent[0] and q not in seen:
                reordered.append(q)
            seen.add(q)
            maxsent[0] = q if maxsent[0] is None else max(maxsent[0], q)
        tx.sendto(d, dst)

    def out(d):
        nonlocal n
        if a.delay_ms > 0:
            n += 1
            heapq.heappush(timers, (time.monotonic() + a.delay_ms / 1000 * (0.5 + rng.random()), n, d))
        else:
            transmit(d)
        stats["forwarded"] += 1

    while not stop:
        timeout = 0.05
        if timers:
            timeout = max(0, min(timeout, timers[0][0] - time.monotonic()))
        try:
            r, _, _ = select.select([rx], [], [], timeout)
        except InterruptedError:
            continue
        now = time.monotonic()
        while timers and timers[0][0] <= now:
            transmit(heapq.heappop(timers)[2])
        if not r:
            if held is not None:  # nothing followed: release it
                out(held)
                held = None
            continue
        d = rx.recv(2048)
        stats["received"] += 1
        if rng.random() < a.loss:
            stats["dropped"] += 1
            if len(d) >= 8:
                dropped.append(struct.unpack(">I", d[4:8])[0])
            continue
        if held is None and rng.random() < a.reorder:
            held = d
            stats["reordered"] += 1

            continue
        out(d)
        if rng.random() < a.dup:
            out(d)
            stats["duplicated"] += 1
        if held is not None:
            out(held)
            held = None
    if held is not None:
        out(held)
    for _, _, d in sorted(timers):
        transmit(d)
    write_logs()
    print(json.dumps(stats), flush=True)


if __name__ == "__main__":
    sys.exit(main())
