#!/usr/bin/env python3
"""Extended-profile DTA reporter and collector verifier for the fault scripts.

Reports are pure functions of (reporter id, seq), so any process can regenerate (and
retransmit) any report, and the verifier knows what every key and entry must hold.

  reporter.py send --target IP:PORT --first S --count N [--rate R] [--kind ap|kw|mix]
                   [--prio medium|low|high|split] [--nack-bind IP:PORT] [--nack-log FILE]
                   [--retransmit FILE] [--linger S] [--id ID]
      Sends seqs S..S+N-1 (retransmittable, extended profile v1). Listens for DTA NACKs on
      --nack-bind and appends every NACKed seq to --nack-log. --retransmit FILE first resends
      every seq listed in FILE (one per line). Prints one JSON line of figures.
  reporter.py verify --control IP:PORT --count N [--first S] [--id ID] [--lists L] [--kind ..]
      Reads the collector over HTTP: every Append list (must hold only well-formed entries of
      this reporter, in seq order except for retransmissions) and every Key-Write key (must
      answer its own value or empty, never another value or a conflict). Prints JSON.
"""
import argparse
import json
import socket
import struct
import sys
import time
import urllib.request

MAGIC = 0xD1
OP_KW, OP_AP = 1, 2
RETX = 0x40
PRIO = {"low": 0, "medium": 1, "high": 2}
LISTS = 16
TAG = b"DTAF"


def entry(rid, seq):
    # 20 bytes: tag, reporter, seq, seq^0xA5A5A5A5, reporter^seq (a self-checking entry)
    return TAG + struct.pack(">IIII", rid, seq, seq ^ 0xA5A5A5A5, (rid * 2654435761 ^ seq) & 0xFFFFFFFF)


def kw_key(rid, seq):
    return struct.pack(">IIIB", 0xFA17, rid, seq, 17)  # 13 bytes


def kw_value(rid, seq):
    return struct.pack(">IIII", rid, seq, ~seq & 0xFFFFFFFF, 0x5EED) + b"\x00" * 4  # 20 bytes


def kind_of(args, seq):
    if args.kind == "mix":
        return "kw" if seq % 4 == 0 else "ap"
    return args.kind


def is_high(seq, share):
    return (seq * 2654435761) % 1000 < share * 1000


def prio_of(args, seq):
    if args.prio == "split":
        return "high" if is_high(seq, args.high_share) else "low"
    return args.prio


def report(args, seq):
    flags = RETX | (PRIO[prio_of(args, seq)] << 4)
    hdr = struct.pack(">BBBBI", MAGIC, OP_AP if kind_of(args, seq) == "ap" else OP_KW, flags, 0, seq)
    if kind_of(args, seq) == "ap":
        v = entry(args.id, seq)
        return hdr + struct.pack(">IB3x", seq % args.lists, len(v)) + v
    k, v = kw_key(args.id, seq), kw_value(args.id, seq)
    return hdr + struct.pack(">BBBx", 2, len(k), len(v)) + k + v


def send(args):
    host, port = args.target.rsplit(":", 1)
    dst = (host, int(port))
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    if args.sport:
        # A fixed source port: successive runs are one reporter to the translator.
        tx.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        tx.bind(("0.0.0.0", args.sport))
    rx = None
    if args.nack_bind:
        h, p = args.nack_bind.rsplit(":", 1)
        rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        rx.bind((h, int(p)))
        rx.setblocking(False)
    nacked, nack_msgs, bad_nacks = [], 0, 0

    def drain():
        nonlocal nack_msgs, bad_nacks
        if rx is None:
            return
        while True:
            try:
                d = rx.recv(64)
            except BlockingIOError:
                return
            if len(d) != 12 or d[0] != MAGIC:
                bad_nacks += 1
                continue
            _, _kind, _res, first, count = struct.unpack(">BBHII", d)
            nack_msgs += 1
            nacked.extend((first + i) & 0xFFFFFFFF for i in range(count))

    retx = []
    if args.retransmit:
        with open(args.retransmit) as f:
            retx = sorted({int(x) for x in f.read().split()})
    seqs = retx + list(range(args.first, args.first + args.count))
    per_prio = {"low": 0, "medium": 0, "high": 0}
    t0 = time.monotonic()
    for i, s in enumerate(seqs):
        if args.rate > 0:
            due = t0 + i / args.rate
            while True:
                now = time.monotonic()
                if now >= due:
                    break
                if due - now > 0.002:
                    time.sleep(due - now - 0.001)
        while True:
            try:
                tx.sendto(report(args, s), dst)
                break
            except BlockingIOError:
                time.sleep(0.0005)
        per_prio[prio_of(args, s)] += 1
        if i % 256 == 0:
            drain()
    elapsed = time.monotonic() - t0
    end = time.monotonic() + args.linger
    while time.monotonic() < end:
        drain()
        time.sleep(0.01)
    drain()
    if args.nack_log:
        with open(args.nack_log, "a") as f:
            for s in nacked:
                f.write(f"{s}\n")
    print(json.dumps({
        "sent": len(seqs), "retransmitted": len(retx), "elapsed_s": round(elapsed, 3),
        "rate": round(len(seqs) / elapsed, 1) if elapsed > 0 else 0,
        "nack_msgs": nack_msgs, "nacked": len(nacked), "nacked_distinct": len(set(nacked)),
        "bad_nacks": bad_nacks, "per_prio": per_prio,
    }))


def get(url, headers=None):
    with urllib.request.urlopen(url, timeout=10) as r:
        if headers is not None:
            headers.update(r.headers.items())
        return r.read().decode()


def tail_all(base, lst, stats):
    """Every entry of a list, oldest first, paging with X-Dta-Next-Seq. A reader that returns
    nothing while the head is further on is stuck at a batch that was never written (a hole);
    it is counted in stats["holes"] and skipped by asking for the next batch number."""
    frm, lines = "oldest", []
    while True:
        h = {}
        body = get(f"{base}/tail/ap/{lst}?from={frm}", h)
        stats["lost_batches"] += int(h.get("X-Dta-Lost-Batches", "0"))
        got = [ln for ln in body.splitlines() if ln.strip()]
        lines.extend(got)
        nxt, head = h.get("X-Dta-Next-Seq"), h.get("X-Dta-Head-Seq")
        if nxt is None:
            return lines
        if not got:
            if head is not None and int(nxt) <= int(head):
                stats["holes"] += 1
                frm = str(int(nxt) + 1)
                continue
            return lines
        frm = nxt


def verify(args):
    base = f"http://{args.control}"
    want = [s for s in range(args.first, args.first + args.count)
            if args.only_high is None or is_high(s, args.only_high)]
    seen, malformed, foreign, order_breaks, entries = set(), 0, 0, 0, 0
    tstats = {"lost_batches": 0, "holes": 0}
    if args.kind in ("ap", "mix"):
        for lst in range(args.lists):
            last = -1
            for line in tail_all(base, lst, tstats):
                e = bytes.fromhex(json.loads(line)["entry"])
                entries += 1
                if len(e) < 20 or e[:4] != TAG:
                    malformed += 1
                    continue
                rid, seq, chk, chk2 = struct.unpack(">IIII", e[4:20])
                if chk != seq ^ 0xA5A5A5A5 or chk2 != (rid * 2654435761 ^ seq) & 0xFFFFFFFF \
                        or seq % args.lists != lst:
                    malformed += 1
                    continue
                if rid != args.id:
                    foreign += 1
                    continue
                if seq < last and seq not in seen:
                    order_breaks += 1  # a retransmission landing late is expected
                last = max(last, seq)
                seen.add(seq)
    ap_want = [s for s in want if args.kind == "ap" or (args.kind == "mix" and s % 4 != 0)]
    kw_want = [s for s in want if args.kind == "kw" or (args.kind == "mix" and s % 4 == 0)]
    kw = {"value": 0, "empty": 0, "wrong": 0, "conflict": 0}
    for s in kw_want[: args.kw_sample]:
        r = json.loads(get(f"{base}/query/keywrite/kw/{kw_key(args.id, s).hex()}"))
        res = r.get("result")
        if res == "value":
            kw["value" if r.get("value", "").startswith(kw_value(args.id, s).hex()) else "wrong"] += 1
        elif res in kw:
            kw[res] += 1
        else:
            kw["wrong"] += 1
    missing = [s for s in ap_want if s not in seen]
    print(json.dumps({
        "append_entries": entries, "append_expected": len(ap_want), "append_distinct": len(seen),
        "append_missing": len(missing), "append_missing_first": missing[:10],
        "append_malformed": malformed, "append_foreign": foreign, "append_late": order_breaks, "append_lost_batches": tstats["lost_batches"],
        "append_holes": tstats["holes"],
        "kw_checked": min(len(kw_want), args.kw_sample), "kw": kw,
    }))


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("send")
    s.add_argument("--target", required=True)
    s.add_argument("--first", type=int, default=1)
    s.add_argument("--count", type=int, required=True)
    s.add_argument("--rate", type=float, default=0)
    s.add_argument("--kind", default="ap", choices=["ap", "kw", "mix"])
    s.add_argument("--prio", default="medium", choices=["low", "medium", "high", "split"])
    s.add_argument("--nack-bind")
    s.add_argument("--nack-log")
    s.add_argument("--retransmit")
    s.add_argument("--high-share", type=float, default=0.5, help="with --prio split")
    s.add_argument("--sport", type=int, default=0)
    s.add_argument("--linger", type=float, default=0.5)
    s.add_argument("--id", type=int, default=7)
    s.add_argument("--lists", type=int, default=LISTS)
    v = sub.add_parser("verify")
    v.add_argument("--control", required=True)
    v.add_argument("--first", type=int, default=1)
    v.add_argument("--count", type=int, required=True)
    v.add_argument("--kind", default="ap", choices=["ap", "kw", "mix"])
    v.add_argument("--id", type=int, default=7)
    v.add_argument("--lists", type=int, default=LISTS)
    v.add_argument("--only-high", type=float, default=None,
                   help="check only the reports --prio split --high-share F made high")
    v.add_argument("--kw-sample", type=int, default=2000)
    a = p.parse_args()
    send(a) if a.cmd == "send" else verify(a)


if __name__ == "__main__":
    sys.exit(main())
