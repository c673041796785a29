#!/usr/bin/env python3
"""Issue 43's constructor fold time: the first append after a restart on a
stream with an inline counter and a long history.

An inline counter writes its reduction beside every append (the record
`inline/<slug>`), so after a clean restart the first append should read that
one record and fold nothing: its time must not depend on how much history
the stream holds. For each history length this script

  1. starts ours on the local store (durable) with an inline counter bound
     to `orders/*`, creates `orders/eu` (JSON) and loads N events with
     batched POSTs (JSON arrays of --batch events, 100 B each);
  2. --restarts times: stops the server with SIGTERM (to its PID, waiting
     for a clean exit), starts it again, waits for /health, opens one
     connection and times the FIRST append (request sent → whole response),
     then the second, then --steady more (their median is the ordinary
     append's time on the same process, fsync included);
  3. --refolds times: changes the counter's options (alternately adds and
     removes `group_by = "/type"`, which changes its reducer version) and
     restarts: the first append then refolds the whole history once; the
     second must be fast again;
  4. checks the operator view's count after every step (it must equal the
     events appended), and reads the server log's "inline reduction
     refolded" lines: none may appear after a plain restart, exactly one
     after each options change.

  python3 bench/inline_fold.py --bin BIN --events 10000,1000000 [--restarts 7] [--refolds 3]

Only 127.0.0.1; only the PIDs this script spawned are signalled.
"""
import argparse
import http.client
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

STREAM = "orders/eu"
SLUG = "order-count"


def processors_toml(group_by):
    # The counter alone: the figure is its constructor fold, nothing else.
    extra = f'group_by = "{group_by}"\n' if group_by else ""
    return f'[[processor]]\nkind = "counter"\nslug = "{SLUG}"\nstreams = "orders/*"\ninline = true\n{extra}'


def event(i):
    head = '{"type":"order.placed","payload":{"id":"e%012d","qty":1,"note":"' % i
    tail = '"}}'
    return head + "." * (100 - len(head) - len(tail)) + tail


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Server:
    def __init__(self, binary, data_dir, log_path, toml_path):
        self.binary, self.data_dir, self.log_path, self.toml_path = binary, data_dir, log_path, toml_path
        self.proc = None
        self.port = None

    def start(self):
        self.port = free_port()
        log = open(self.log_path, "a")
        log.write(f"--- start on port {self.port}\n")
        log.flush()
        env = dict(os.environ, RUST_LOG="warn,ds_core::service::inline=info")
        spawned = time.perf_counter()
        self.proc = subprocess.Popen(
            [self.binary, "serve", "--store", "local", "--data-dir", self.data_dir,
             "--bind", f"127.0.0.1:{self.port}", "--processors", self.toml_path],
            stdout=log, stderr=log, env=env)
        deadline = spawned + 30
        while time.perf_counter() < deadline:
            if self.proc.poll() is not None:
                sys.exit(f"server exited with {self.proc.returncode} on start; see {self.log_path}")
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                c.request("GET", "/health")
                ok = c.getresponse().status == 200
                c.close()
                if ok:
                    return (time.perf_counter() - spawned) * 1e3
            except OSError:
                pass
            time.sleep(0.005)
        sys.exit("server did not answer /health within 30 s")

    def stop(self):
        """SIGTERM to our PID, then wait for the clean exit."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            sys.exit("server did not stop within 60 s of SIGTERM")
        if code != 0:
            sys.exit(f"server exited with {code} after SIGTERM; see {self.log_path}")
        self.proc = None

    def conn(self):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=300)
        c.connect()
        return c


def request(c, method, path, body=None, headers=None):
    c.request(method, path, body=body, headers=headers or {})
    r = c.getresponse()
    return r.status, r.read()


def timed_append(c, i):
    """One append of event i on an open connection: request sent → whole answer, in ms."""
    body = event(i).encode()
    t0 = time.perf_counter()
    status, text = request(c, "POST", f"/v1/stream/{STREAM}", body, {"Content-Type": "application/json"})
    ms = (time.perf_counter() - t0) * 1e3
    if status not in (200, 204):
        sys.exit(f"append answered {status}: {text[:300]!r}")
    return ms


def view(server):
    c = server.conn()
    status, text = request(c, "GET", f"/v1/processors/{SLUG}/streams/{STREAM}")
    c.close()
    if status != 200:
        sys.exit(f"operator view answered {status}: {text[:300]!r}")
    return json.loads(text)


def count_of(v):
    state = v.get("state")
    if isinstance(state, str):
        state = json.loads(state)
    return (state or {}).get("count"), state


def refold_lines(log_path):
    with open(log_path) as f:
        text = re.sub(r"\x1b\[[0-9;]*m", "", f.read())  # the log may be coloured
    return [int(m) for m in re.findall(r"inline reduction refolded.*?millis=(\d+)", text)]


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p * (len(xs) - 1))))]


def run(binary, n, args, work):
    data_dir = os.path.join(work, f"data-{n}")
    log_path = os.path.join(work, f"server-{n}.log")
    toml_path = os.path.join(work, f"processors-{n}.toml")
    with open(toml_path, "w") as f:
        f.write(processors_toml(None))
    server = Server(binary, data_dir, log_path, toml_path)
    server.start()
    c = server.conn()
    status, text = request(c, "PUT", f"/v1/stream/{STREAM}", None, {"Content-Type": "application/json"})
    if status not in (200, 201):
        sys.exit(f"create answered {status}: {text[:300]!r}")
    t0 = time.perf_counter()
    appended = 0
    while appended < n:
        k = min(args.batch, n - appended)
        body = ("[" + ",".join(event(appended + j) for j in range(k)) + "]").encode()
        status, text = request(c, "POST", f"/v1/stream/{STREAM}", body, {"Content-Type": "application/json"})
        if status not in (200, 204):
            sys.exit(f"batch append answered {status}: {text[:300]!r}")
        appended += k
    load_s = time.perf_counter() - t0
    c.close()
    count, _ = count_of(view(server))
    if count != n:
        sys.exit(f"after loading {n} events the counter says {count}")
    print(f"# {n} events loaded in {load_s:.1f} s ({n / load_s:,.0f} events/s); "
          f"data dir {subprocess.run(['du', '-sh', data_dir], capture_output=True, text=True).stdout.split()[0]}",
          flush=True)
    server.stop()

    rows = {"restart": [], "refold": []}

    def one_start(kind):
        refolds_before = len(refold_lines(log_path))
        ready_ms = server.start()
        c = server.conn()
        nonlocal appended
        first = timed_append(c, appended)
        second = timed_append(c, appended + 1)
        appended += 2
        steady = []
        for _ in range(args.steady):
            steady.append(timed_append(c, appended))
            appended += 1
        c.close()
        count, state = count_of(view(server))
        if count != appended:
            sys.exit(f"{kind}: the counter says {count}, {appended} events were appended")
        new = refold_lines(log_path)[refolds_before:]
        expected = 1 if kind == "refold" else 0
        if len(new) != expected:
            sys.exit(f"{kind}: {len(new)} refolds logged, expected {expected}")
        server.stop()
        row = dict(ready=ready_ms, first=first, second=second, steady=statistics.median(steady),
                   refold_log_ms=new[0] if new else None, by=state.get("by"))
        rows[kind].append(row)
        print(f"{n} {kind}: ready {ready_ms:.1f} ms, first append {first:.2f} ms, second {second:.2f} ms, "
              f"steady median {row['steady']:.2f} ms, logged refold {row['refold_log_ms']} ms, state {state}",
              flush=True)

    for _ in range(args.restarts):
        one_start("restart")
    group_by = None
    for _ in range(args.refolds):
        group_by = None if group_by else "/type"
        with open(toml_path, "w") as f:
            f.write(processors_toml(group_by))
        one_start("refold")
    # And once more without a change: the refolded reduction was stored.
    one_start("restart")
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--events", default="10000,1000000")
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--restarts", type=int, default=7)
    ap.add_argument("--refolds", type=int, default=3)
    ap.add_argument("--steady", type=int, default=20)
    ap.add_argument("--keep", action="store_true", help="keep the work dir (logs)")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="inline-fold-")
    print(f"# load average at start: {open('/proc/loadavg').read().split()[:3]}; work dir {work}", flush=True)
    results = {}
    for n in [int(x) for x in args.events.split(",")]:
        results[n] = run(os.path.abspath(args.bin), n, args, work)
    print(f"# load average at end: {open('/proc/loadavg').read().split()[:3]}")
    print()
    print("| history (events) | start | n | first append p50 (ms) | first append max (ms) | second append p50 (ms) "
          "| steady append p50 (ms) | spawn → /health p50 (ms) | refold logged by the server (ms) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for n, rows in results.items():
        for kind in ("restart", "refold"):
            r = rows[kind]
            if not r:
                continue
            f = [x["first"] for x in r]
            logged = [x["refold_log_ms"] for x in r if x["refold_log_ms"] is not None]
            print(f"| {n:,} | {'clean restart' if kind == 'restart' else 'options changed (refold)'} | {len(r)} "
                  f"| {statistics.median(f):.2f} | {max(f):.2f} | {statistics.median(x['second'] for x in r):.2f} "
                  f"| {statistics.median(x['steady'] for x in r):.2f} | {statistics.median(x['ready'] for x in r):.1f} "
                  f"| {', '.join(str(m) for m in logged) or 'none (as expected)'} |")
    if not args.keep:
        subprocess.run(["rm", "-rf", work])


if __name__ == "__main__":
    main()
