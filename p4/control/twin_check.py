"""twin_check.py: one corpus case through a running Tofino program, compared with expected.pcap.

Runs where the switch's ports are network interfaces: inside `scripts/tofino-model.sh BUILD
-- python3 p4/control/twin_check.py CASE_DIR` (Intel's Tofino model; DTA_TF_PORTS names the
test side of each device port), or on a host wired to a switch with --report-if/--collector-if.

  1. corpus_setup.setup() writes the case's collector metadata and translator TOML; dta_bfrt.py
     programs the switch through `bfshell -b` (skipped with --no-program);
  2. each frame of reports.pcap goes into the report port, one at a time; after report
     `after_report`, the next frame of responses.pcap goes into the collector port
     (case.json `responses`);
  3. every frame leaving the collector port and the report port is captured until the switch
     is quiet (--quiet-ms after the last frame);
  4. the capture is compared with the first `frames_before_flush` frames of expected.pcap, byte
     for byte (ICRC included), in order per flow: a RoCEv2 frame's flow is its destination QP,
     any other frame's (a sketch-column NACK) its IPv4 destination and UDP port.

Prints one JSON line: {"case", "equal", "frames_expected", "frames_captured", "frames_compared",
"differences": [...]}; exit status 0 when equal. `compare()` and the pcap helpers are plain
functions for the unit tests.
"""

import json
import os
import select
import socket
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpus_setup  # noqa: E402

ETH_P_ALL = 0x0003
ROCE_PORT = 4791
ETH_IPV4_UDP = 14 + 20 + 8


def read_pcap(path):
    """The frames of a classic pcap file (either byte order), as bytes."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 24:
        raise ValueError(f"{path}: not a pcap file")
    magic = data[:4]
    if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
        end = "<"
    elif magic in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
        end = ">"
    else:
        raise ValueError(f"{path}: not a pcap file")
    frames, off = [], 24
    while off + 16 <= len(data):
        _, _, incl, _ = struct.unpack(end + "IIII", data[off:off + 16])
        frames.append(data[off + 16:off + 16 + incl])
        off += 16 + incl
    return frames


def write_pcap(path, frames):
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        for i, fr in enumerate(frames):
            f.write(struct.pack("<IIII", i, 0, len(fr), len(fr)))
            f.write(fr)


def flow_of(frame):
    """The flow a frame's order is kept in: ("qp", destination QP) for RoCEv2, else
    ("udp", IPv4 destination, UDP destination port), else ("other",)."""
    if len(frame) < ETH_IPV4_UDP or frame[12:14] != b"\x08\x00" or frame[23] != 17:
        return ("other",)
    ihl = (frame[14] & 0x0F) * 4
    udp = 14 + ihl
    dport = struct.unpack("!H", frame[udp + 2:udp + 4])[0]
    if dport == ROCE_PORT and len(frame) >= udp + 8 + 12:
        bth = udp + 8
        return ("qp", struct.unpack("!I", frame[bth + 4:bth + 8])[0] & 0xFFFFFF)
    return ("udp", socket.inet_ntoa(frame[30:34]), dport)


# Byte ranges of a RoCEv2 frame with BTH at 42, for naming the first differing field.
FIELDS = [(0, 6, "eth dst"), (6, 12, "eth src"), (12, 14, "ethertype"), (14, 34, "IPv4 header"),
          (34, 42, "UDP header"), (42, 43, "BTH opcode"), (43, 46, "BTH flags/P_Key"),
          (46, 50, "BTH dest QP"), (50, 54, "BTH AckReq/PSN"), (54, 70, "RETH/AtomicETH")]


def field_at(frame, off):
    if off >= len(frame) - 4 and flow_of(frame)[0] == "qp":
        return "ICRC"
    for lo, hi, name in FIELDS:
        if lo <= off < hi:
            return name
    return "payload"


def compare(expected, captured):
    """Differences between expected and captured frames, order compared within each flow."""
    def by_flow(frames):
        out = {}
        for i, f in enumerate(frames):
            out.setdefault(flow_of(f), []).append((i, f))
        return out
    exp, got = by_flow(expected), by_flow(captured)
    diffs = []
    for flow in sorted(set(exp) | set(got), key=str):
        e, g = exp.get(flow, []), got.get(flow, [])
        for k in range(max(len(e), len(g))):
            if k >= len(g):
                diffs.append({"flow": list(flow), "index": k, "what": "missing",
                              "expected_frame": e[k][0]})
                continue
            if k >= len(e):
                diffs.append({"flow": list(flow), "index": k, "what": "extra",
                              "captured_frame": g[k][0], "bytes": g[k][1].hex()})
                continue
            a, b = e[k][1], g[k][1]
            if a != b:
                off = next((j for j in range(min(len(a), len(b))) if a[j] != b[j]),
                           min(len(a), len(b)))
                diffs.append({"flow": list(flow), "index": k, "what": "differs",
                              "expected_frame": e[k][0], "captured_frame": g[k][0],
                              "offset": off, "field": field_at(a, off),
                              "expected": a.hex(), "captured": b.hex()})
    return diffs


class Port:
    """A raw socket on one interface: send frames, collect whatever arrives."""

    def __init__(self, ifname):
        self.ifname = ifname
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        self.sock.bind((ifname, 0))
        self.sock.setblocking(False)

    def send(self, frame):
        self.sock.send(frame)

    def drain(self, into, quiet_ms, ports):
        """Collects frames from every port until none arrived for quiet_ms."""
        socks = {p.sock: p for p in ports}
        deadline = time.monotonic() + quiet_ms / 1000
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            ready, _, _ = select.select(list(socks), [], [], left)
            for s in ready:
                p = socks[s]
                while True:
                    try:
                        frame, addr = s.recvfrom(65535)
                    except BlockingIOError:
                        break
                    if addr[2] == socket.PACKET_OUTGOING:
                        continue   # our own injection, seen on the way out
                    into.append((p.ifname, frame))
                    deadline = time.monotonic() + quiet_ms / 1000


def program(case, cfg_path, out_dir, collector_port, bfshell):
    """Programs the switch: dta_bfrt.py checks the plan here and runs itself in bf_switchd's
    bfrt_python through `bfshell -b` (its --bfshell launcher)."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dta_bfrt.py")
    cmd = [sys.executable, script, "--config", cfg_path, "--ports", f"corpus={collector_port}",
           f"--defines={case['p4_defines']}",
           f"--sketch-switches={corpus_setup.sketch_switches(case)}", "--bfshell", bfshell]
    r = subprocess.run(cmd, cwd=out_dir, capture_output=True, text=True, timeout=900)
    log = r.stdout + r.stderr
    with open(os.path.join(out_dir, "bfshell.log"), "w") as f:
        f.write(log)
    if r.returncode != 0:
        raise RuntimeError(f"dta_bfrt.py through bfshell failed (log {out_dir}/bfshell.log)")


def run(case_dir, report_if, collector_if, collector_port, quiet_ms, bfshell, out_dir):
    case, cfg_path = corpus_setup.setup(case_dir, out_dir)
    result = {"case": case["name"]}
    if case.get("p4_unsupported"):
        result.update(skipped=case["p4_unsupported"])
        return result
    if bfshell:
        program(case, cfg_path, out_dir, collector_port, bfshell)
    reports = read_pcap(os.path.join(case_dir, "reports.pcap"))
    responses = (read_pcap(os.path.join(case_dir, "responses.pcap"))
                 if case.get("responses") else [])
    schedule = [r["after_report"] for r in case.get("responses", [])]
    rep, col = Port(report_if), Port(collector_if)
    ports = [rep, col]
    captured = []
    nxt = 0
    for i, frame in enumerate(reports, 1):
        rep.send(frame)
        rep.drain(captured, quiet_ms, ports)
        while nxt < len(schedule) and schedule[nxt] == i:
            col.send(responses[nxt])
            col.drain(captured, quiet_ms, ports)
            nxt += 1
    rep.drain(captured, quiet_ms, ports)
    frames = [f for _, f in captured]
    write_pcap(os.path.join(out_dir, "captured.pcap"), frames)
    expected = read_pcap(os.path.join(case_dir, "expected.pcap"))[:case["frames_before_flush"]]
    diffs = compare(expected, frames)
    result.update(equal=not diffs, frames_expected=len(expected), frames_captured=len(frames),
                  frames_compared=min(len(expected), len(frames)), differences=diffs[:20])
    return result


def main(argv):
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("case_dir")
    ports = dict(p.split("=") for p in os.environ.get("DTA_TF_PORTS", "").split(",") if p)
    ap.add_argument("--report-port", default="0", help="device port reports enter (default 0)")
    ap.add_argument("--collector-port", default="136", help="the collector's device port")
    ap.add_argument("--report-if", help="interface wired to the report port")
    ap.add_argument("--collector-if", help="interface wired to the collector port")
    ap.add_argument("--quiet-ms", type=int, default=int(os.environ.get("DTA_TF_QUIET_MS", "1500")),
                    help="the switch is done when nothing arrived for this long")
    ap.add_argument("--no-program", action="store_true", help="the switch is programmed already")
    ap.add_argument("--out", help="keep the set-up, bfshell log and captured.pcap here")
    a = ap.parse_args(argv)
    report_if = a.report_if or ports.get(a.report_port)
    collector_if = a.collector_if or ports.get(a.collector_port)
    if not report_if or not collector_if:
        ap.error("no interface for the report or collector port (DTA_TF_PORTS or --*-if)")
    bfshell = None if a.no_program else os.path.join(
        os.environ.get("SDE_INSTALL", "/opt/bf-sde/install"), "bin", "bfshell")
    out = a.out or tempfile.mkdtemp(prefix="dta-twin-")
    os.makedirs(out, exist_ok=True)
    try:
        r = run(a.case_dir, report_if, collector_if, int(a.collector_port), a.quiet_ms, bfshell,
                out)
    except (RuntimeError, OSError, ValueError, subprocess.SubprocessError) as e:
        r = {"case": os.path.basename(os.path.normpath(a.case_dir)), "equal": False,
             "error": str(e)}
    ok = bool(r.get("equal") or r.get("skipped"))
    if ok and not a.out:
        import shutil
        shutil.rmtree(out, ignore_errors=True)
    else:
        r["out"] = out   # the set-up, bfshell.log and captured.pcap, for a look
    print(json.dumps(r))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
