#!/usr/bin/env python3
"""Start-up time of the local store against its data size (issue 11, section 2).

Loads STREAMS streams of BYTES each into a fresh data dir through the server's
HTTP API (one PUT per stream, keep-alive), then restarts the server several
times and reports spawn -> first successful PUT after a clean stop (SIGTERM)
and after a crash (SIGKILL right after 200 appends, so the log holds commits
the tables do not). Every server binds 127.0.0.1 on a free port.

    python3 bench/startup.py --bin target/release/durable-streams \
        [--streams 10000] [--bytes 100000] [--dir DIR] [--rounds 3]
"""
import argparse
import http.client
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def put(conn, path, body):
    conn.request("PUT", path, body=body, headers={"Content-Type": "application/octet-stream"})
    resp = conn.getresponse()
    resp.read()
    return resp.status


def start(binary, data, log):
    """Spawn the server; return (process, port, ms from spawn to the first successful PUT)."""
    port = free_port()
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [binary, "serve", "--bind", f"127.0.0.1:{port}", "--store", "local", "--data-dir", data],
        stdout=subprocess.DEVNULL, stderr=log, env=dict(os.environ, RUST_LOG="warn"))
    deadline = t0 + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode} (log: {log.name})")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            if put(conn, f"/v1/stream/probe/{time.monotonic_ns()}", b"x" * 100) in (200, 201):
                return proc, port, (time.monotonic() - t0) * 1000
        except OSError:
            time.sleep(0.001)
    proc.kill()
    raise SystemExit("server did not answer within 60 s")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--streams", type=int, default=10000)
    ap.add_argument("--bytes", type=int, default=100000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", help="parent of the data dir (default: a temp dir, removed at the end)")
    args = ap.parse_args()
    parent = args.dir or tempfile.mkdtemp(prefix="ds-startup-")
    data = os.path.join(parent, "data")
    shutil.rmtree(data, ignore_errors=True)
    log = open(os.path.join(parent, "server.log"), "a")
    try:
        proc, port, _ = start(args.bin, data, log)
        conn = http.client.HTTPConnection("127.0.0.1", port)
        body = b"y" * args.bytes
        t = time.monotonic()
        for i in range(args.streams):
            status = put(conn, f"/v1/stream/s/{i}", body)
            if status not in (200, 201):
                raise SystemExit(f"PUT s/{i} answered {status}")
        load_s = time.monotonic() - t
        proc.send_signal(signal.SIGTERM)
        proc.wait()
        size = sum(os.path.getsize(os.path.join(data, f)) for f in os.listdir(data))
        print(f"Loaded {args.streams} streams × {args.bytes} B ({args.streams * args.bytes / 1e9:.2f} GB of data; "
              f"{size / 1e9:.2f} GB on disk) in {load_s:.1f} s.\n")
        print("| start after | spawn → first successful PUT (ms) |")
        print("|---|---:|")
        previous = "clean stop (SIGTERM)"
        for n in range(2 * args.rounds):
            proc, port, ms = start(args.bin, data, log)
            print(f"| {previous} | {ms:.0f} |", flush=True)
            if n % 2 == 0:
                # A crash leaves the tables' last checkpoint plus a log to replay.
                conn = http.client.HTTPConnection("127.0.0.1", port)
                for i in range(200):
                    conn.request("POST", f"/v1/stream/s/{i % args.streams}", body=b"z" * 100,
                                 headers={"Content-Type": "application/octet-stream"})
                    conn.getresponse().read()
                proc.kill()
                previous = "crash (SIGKILL after 200 appends)"
            else:
                proc.send_signal(signal.SIGTERM)
                previous = "clean stop (SIGTERM)"
            proc.wait()
    finally:
        log.close()
        if not args.dir:
            shutil.rmtree(parent, ignore_errors=True)


if __name__ == "__main__":
    main()
