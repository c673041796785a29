#!/usr/bin/env python3
"""State Protocol compaction: what a new reader downloads, and what
compacting costs the writer.

Part `read` (one server, local store, a `state` processor `snap` bound to
`state/**` with NO compact_ratio, so nothing compacts by itself):

  1. writes --upserts State Protocol upserts over --keys keys into
     `state/bench` (message n upserts `k<n mod keys>` with a --value-bytes
     value `{"v": n, "pad": "…"}`), in batched POSTs of --batch messages;
  2. waits until the processor's own runner has read the whole stream
     (`lag` 0 in GET /v1/processors), then times a NEW reader from
     offset=-1, --reps times each:
     - `http`: this script's reader: one keep-alive connection, GET pages
       from offset=-1 until `Stream-Up-To-Date: true`, each page parsed and
       folded as it arrives (insert/update/upsert store the value, delete
       removes it, reset clears); bytes = the sum of the response bodies;
       time = first request sent → the last page folded (the state is
       consistent there: everything up to the tail, folded); `net` is the
       part of it spent in HTTP (request sent → body read);
     - `npm`: the official client (@durable-streams/state's StreamDB, via
       tests/state-client/materialize.mjs, `DS_STATE_CLIENT_LIVE=long-poll`
       so it reads a multi-response stream whole): one node process started
       beforehand; time = request line written → answer line read; its
       bytes are counted once more, untimed, through a relay;
  3. POST /v1/processors/snap/compact/state/bench {} (timed; the report
     is kept);
  4. the same readers again; every state read (both readers, before and
     after) must equal the state the writes imply, and a read at the old
     first page's next offset must now answer 410.

Part `writer` (--rounds rounds, each: one fresh server per mode in turn,
the order rotating per round): ds-load's P1 with `--p1-body state-upsert`
on streams `state/w…` (1 stream c=1, 1 stream c=--p1-concurrency, and
--p1-concurrency streams with one writer each) against --modes: `none` =
no processor, `off` = the `state` processor without compact_ratio, `on` =
with compact_ratio --ratio, compact_min_bytes --min-bytes,
compact_interval --interval (a background pass every interval). The
compactions that ran, and those that gave up ("state compaction failed"),
are counted per P1 case from the server's log. A run during which other
processes used more than --busy cores is repeated (--busy-retries times,
the quietest kept). ds-load's ceiling is measured before and after
(`ds-load calibrate`, 100 B POSTs).

Before each part, and each writer run, the script waits (up to
--quiet-wait seconds) for the machine to be quiet: other processes under
--busy cores over 2 s.

  python3 bench/compaction.py [--bin BIN] [--parts read,writer]

Builds `target/release/durable-streams` if it is missing or older than the
sources (or takes --bin), and ds-load into target-bench/ (as inline.sh).
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
import threading
import time
import urllib.parse

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SLUG = "snap"
STREAM = "state/bench"
TYPE = "row"


def log(*a):
    print(*a, flush=True)


def loadavg():
    return " ".join(open("/proc/loadavg").read().split()[:3])


# ---------------------------------------------------------------- binaries


def newest_source(paths):
    newest = 0.0
    for top in paths:
        for d, dirs, files in os.walk(os.path.join(ROOT, top)):
            dirs[:] = [x for x in dirs if x not in ("target", "node_modules", ".git")]
            for f in files:
                if f.endswith(".rs") or f in ("Cargo.toml", "Cargo.lock", "build.rs"):
                    newest = max(newest, os.path.getmtime(os.path.join(d, f)))
    return newest


def server_binary(arg):
    if arg:
        return os.path.abspath(arg)
    binary = os.path.join(ROOT, "target/release/durable-streams")
    stale = not os.path.exists(binary) or os.path.getmtime(binary) < max(
        newest_source(["shared", "functions"]),
        os.path.getmtime(os.path.join(ROOT, "Cargo.toml")),
        os.path.getmtime(os.path.join(ROOT, "Cargo.lock")))
    if stale:
        log("# building target/release/durable-streams (missing or older than the sources)")
        subprocess.run(["nice", "cargo", "build", "--release", "-q", "-p", "durable-streams"], cwd=ROOT, check=True)
    return binary


def load_binary(arg):
    if arg:
        return os.path.abspath(arg)
    target = os.environ.get("DS_LOAD_TARGET_DIR", os.path.join(ROOT, "target-bench"))
    subprocess.run(["nice", "cargo", "build", "--release", "-q", "-p", "ds-load"], cwd=ROOT, check=True,
                   env=dict(os.environ, CARGO_TARGET_DIR=target))
    return os.path.join(target, "release/ds-load")


def state_client(arg):
    """The installed materialize.mjs, or None (with the reason printed)."""
    if arg == "none":
        return None
    if arg != "auto":
        return os.path.abspath(arg)
    script = os.path.join(ROOT, "tests/state-client/install.sh")
    if not os.path.exists(script):
        log("# npm reader: tests/state-client/install.sh is not there; not measured")
        return None
    r = subprocess.run(["bash", script], capture_output=True, text=True)
    lines = r.stdout.strip().splitlines()
    if r.returncode != 0 or not lines:
        log(f"# npm reader: install.sh failed ({r.returncode}): {r.stderr.strip()[-500:]}; not measured")
        return None
    return lines[-1]


# ---------------------------------------------------------------- server


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def processors_toml(compaction):
    toml = f'[[processor]]\nkind = "state"\nslug = "{SLUG}"\nstreams = "state/**"\n'
    if compaction:
        ratio, min_bytes, interval = compaction
        toml += f'compact_ratio = {ratio}\ncompact_min_bytes = {min_bytes}\ncompact_interval = "{interval}"\n'
    return toml


class Server:
    def __init__(self, binary, work, name, toml):
        self.data_dir = os.path.join(work, f"data-{name}")
        self.log_path = os.path.join(work, f"server-{name}.log")
        self.port = free_port()
        env = dict(os.environ, RUST_LOG="warn,ds_processors_builtin=info")
        cmd = [binary, "serve", "--store", "local", "--data-dir", self.data_dir,
               "--bind", f"127.0.0.1:{self.port}", "--log-format", "json"]
        if toml:
            cmd += ["--processors-toml", toml]
        with open(self.log_path, "w") as logf:
            self.proc = subprocess.Popen(cmd, stdout=logf, stderr=logf, env=env)
        self.pid = self.proc.pid
        deadline = time.time() + 30
        while time.time() < deadline:
            if self.proc.poll() is not None:
                sys.exit(f"server exited with {self.proc.returncode} on start; see {self.log_path}")
            try:
                if request(self, "GET", "/health")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.02)
        self.stop()
        sys.exit("server did not answer /health within 30 s")

    @property
    def base(self):
        return f"http://127.0.0.1:{self.port}"

    def stop(self):
        """SIGTERM to our PID, then wait for the clean exit."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def log_events(self):
        out = []
        for line in open(self.log_path, errors="replace"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
        return out

    def compactions(self):
        """What the background passes logged: (stream, outcome, history
        before) per compaction,
        outcome "failed" for one that gave up (e.g. the tail moved under
        every snapshot it built)."""
        out = []
        for e in self.log_events():
            f = e.get("fields", {})
            if f.get("message") == "state compaction":
                out.append((f.get("stream"), str(f.get("outcome")).lower(), f.get("history_before") or 0))
            elif f.get("message") == "state compaction failed":
                out.append((f.get("stream"), "failed", 0))
        return out

    def warnings(self):
        """Other WARN/ERROR lines' messages and errors, counted."""
        seen = {}
        for e in self.log_events():
            f = e.get("fields", {})
            if e.get("level") in ("WARN", "ERROR") and f.get("message") != "state compaction failed":
                key = f"{f.get('message')}: {re.sub(r'[0-9]+', 'N', str(f.get('error', '')))}"
                seen[key] = seen.get(key, 0) + 1
        return seen


def request(server, method, path, body=None, headers=None, conn=None):
    c = conn or http.client.HTTPConnection("127.0.0.1", server.port, timeout=300)
    try:
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        return r.status, r.read(), dict((k.lower(), v) for k, v in r.getheaders())
    finally:
        if conn is None:
            c.close()


def cpu_secs(pid):
    """User + system CPU seconds of `pid` (and its waited-for children)."""
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def busy_secs():
    """All CPUs' busy seconds so far (/proc/stat: everything but idle and iowait)."""
    v = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    return (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")


def wait_quiet(args, what):
    """Waits until the rest of the machine uses under --busy cores over 2 s
    (at most --quiet-wait seconds); returns the last figure."""
    deadline = time.time() + args.quiet_wait
    while True:
        meter = OthersMeter([])
        time.sleep(2)
        others = meter.cores()
        if others < args.busy or time.time() >= deadline:
            if others >= args.busy:
                log(f"# {what}: still busy ({others:.2f} cores) after {args.quiet_wait} s; measuring anyway")
            return others
        log(f"# {what}: others use {others:.2f} cores; waiting")
        time.sleep(10)


class OthersMeter:
    """Other processes' CPU (cores) while a measurement runs: the machine's
    busy time minus that of our PIDs, over the wall time."""

    def __init__(self, pids):
        self.pids = [p for p in pids if p]
        self.t0, self.busy0, self.ours0 = time.time(), busy_secs(), self.ours()

    def ours(self):
        return sum(cpu_secs(p) for p in self.pids + [os.getpid()])

    def cores(self):
        wall = time.time() - self.t0
        return max(0.0, (busy_secs() - self.busy0) - (self.ours() - self.ours0)) / max(wall, 1e-9)


# ---------------------------------------------------------------- the stream


def upsert(n, keys, value_bytes):
    """Upsert number n: row k<n mod keys>, a value of `value_bytes` bytes of compact JSON."""
    head = '{"v":%d,"pad":"' % n
    value = head + "." * max(0, value_bytes - len(head) - 2) + '"}'
    return '{"type":"%s","key":"k%d","value":%s,"headers":{"operation":"upsert"}}' % (TYPE, n % keys, value)


def expected_state(upserts, keys, value_bytes):
    state = {}
    for n in range(max(1, upserts - keys + 1), upserts + 1):
        state[f"k{n % keys}"] = json.loads(upsert(n, keys, value_bytes))["value"]
    return {TYPE: state} if state else {}


def load(server, args):
    c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=300)
    status, text, _ = request(server, "PUT", f"/v1/stream/{STREAM}", None, {"Content-Type": "application/json"}, c)
    if status not in (200, 201):
        sys.exit(f"create answered {status}: {text[:300]!r}")
    t0 = time.perf_counter()
    n = 0
    while n < args.upserts:
        k = min(args.batch, args.upserts - n)
        body = "[" + ",".join(upsert(n + 1 + j, args.keys, args.value_bytes) for j in range(k)) + "]"
        status, text, _ = request(server, "POST", f"/v1/stream/{STREAM}", body.encode(),
                                  {"Content-Type": "application/json"}, c)
        if status not in (200, 204):
            sys.exit(f"batch append answered {status}: {text[:300]!r}")
        n += k
    c.close()
    return time.perf_counter() - t0


def fold(state, messages):
    for m in messages:
        headers = m.get("headers") or {}
        control = headers.get("control")
        if control == "reset":
            state.clear()
        if control is not None:
            continue
        op = headers.get("operation")
        rows = state.setdefault(m["type"], {})
        if op in ("insert", "update", "upsert"):
            rows[m["key"]] = m["value"]
        elif op == "delete":
            rows.pop(m["key"], None)
        else:
            raise ValueError(f"not a State Protocol message: {m}")


def http_reader(server, path=STREAM, offset="-1"):
    """A new reader: pages from `offset` to up-to-date, folding each page."""
    c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=300)
    c.connect()
    state, total, pages, net, first_next = {}, 0, 0, 0.0, None
    t0 = time.perf_counter()
    while True:
        t = time.perf_counter()
        c.request("GET", f"/v1/stream/{path}?offset={urllib.parse.quote(offset, safe='')}")
        r = c.getresponse()
        body = r.read()
        net += time.perf_counter() - t
        if r.status != 200:
            sys.exit(f"GET offset={offset} answered {r.status}: {body[:300]!r}")
        total += len(body)
        pages += 1
        fold(state, json.loads(body))
        offset = r.getheader("Stream-Next-Offset")
        first_next = first_next or offset
        if r.getheader("Stream-Up-To-Date") == "true":
            break
    ms = (time.perf_counter() - t0) * 1e3
    c.close()
    return dict(bytes=total, pages=pages, ms=ms, net_ms=net * 1e3, state={k: v for k, v in state.items() if v},
                first_next=first_next)


class NpmReader:
    """materialize.mjs in one node process, started before any timing."""

    def __init__(self, script, timeout_ms):
        env = dict(os.environ, DS_STATE_CLIENT_LIVE="long-poll", DS_STATE_CLIENT_TIMEOUT_MS=str(timeout_ms))
        self.stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(["node", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.stderr, env=env, text=True, bufsize=1)
        self.pid = self.proc.pid

    def read(self, url):
        line = json.dumps({"url": url, "types": [TYPE]}) + "\n"
        t0 = time.perf_counter()
        self.proc.stdin.write(line)
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline()
        ms = (time.perf_counter() - t0) * 1e3
        if not answer:
            self.stderr.seek(0)
            sys.exit(f"materialize.mjs ended: {self.stderr.read()[-2000:]!r}")
        a = json.loads(answer)
        if "error" in a:
            sys.exit(f"materialize.mjs: {a['error']}")
        return dict(ms=ms, state=a["state"])

    def stop(self):
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class CountingProxy:
    """A TCP relay on 127.0.0.1 in front of the server that counts the bytes
    it passes back to the client (HTTP heads included): what the npm
    client downloads, measured once outside the timed reads."""

    def __init__(self, port):
        self.target = port
        self.down = 0
        self.lock = threading.Lock()
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target))
            threading.Thread(target=self.pump, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self.pump, args=(upstream, client, True), daemon=True).start()

    def pump(self, src, dst, count):
        try:
            while True:
                data = src.recv(1 << 16)
                if not data:
                    break
                if count:
                    with self.lock:
                        self.down += len(data)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self):
        self.listener.close()


def npm_wire_bytes(server, npm):
    """Bytes the npm client receives for one materialization (through a
    CountingProxy; not timed)."""
    proxy = CountingProxy(server.port)
    try:
        npm.read(f"http://127.0.0.1:{proxy.port}/v1/stream/{STREAM}")
        time.sleep(0.2)
        return proxy.down
    finally:
        proxy.close()


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def span(xs):
    return f"{min(xs):,.0f}-{max(xs):,.0f}" if xs else "-"


def processor_status(server):
    status, text, _ = request(server, "GET", "/v1/processors")
    listed = json.loads(text) if status == 200 else {}
    listed = listed.get("processors", listed) if isinstance(listed, dict) else listed
    return [p for p in listed if isinstance(p, dict) and p.get("stream") == STREAM]


def wait_runner(server, timeout=300):
    """Seconds until the processor's runner on STREAM has no lag."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        if any(p.get("lag") == 0 for p in processor_status(server)):
            return time.time() - t0
        time.sleep(0.2)
    sys.exit(f"the processor's runner did not catch up within {timeout} s: {processor_status(server)}")


def measure_readers(server, npm, args, when):
    """--reps reads by each reader. A read of 0.2 s or more during which
    other processes used more than --busy cores is repeated (--busy-retries
    times, the quietest kept); shorter reads are below /proc/stat's tick
    resolution one by one, so the others' CPU is measured over all the reads
    of one reader."""
    out = {"http": [], "npm": [], "others": {}}
    pids = [server.pid, npm.pid if npm else None]
    url = f"{server.base}/v1/stream/{STREAM}"
    readers = [("http", lambda: http_reader(server))] + ([("npm", lambda: npm.read(url))] if npm else [])
    for kind, read in readers:
        group = OthersMeter(pids)
        for i in range(args.reps):
            best = None
            for _ in range(1 + args.busy_retries):
                meter = OthersMeter(pids)
                r = read()
                r["others"] = meter.cores() if r["ms"] >= 200 else None
                if best is None or (r["others"] or 0) < (best["others"] or 0):
                    best = r
                if (r["others"] or 0) <= args.busy:
                    break
            out[kind].append(best)
            net = f" (HTTP {best['net_ms']:.1f} ms)" if "net_ms" in best else ""
            size = f"{best['bytes']:,} B in {best['pages']} pages, " if "bytes" in best else ""
            others = f", others {best['others']:.2f} cores" if best["others"] is not None else ""
            log(f"{when} {kind} reader {i + 1}: {size}{best['ms']:.1f} ms{net}{others}")
        out["others"][kind] = group.cores()
        log(f"{when} {kind} reader: others used {out['others'][kind]:.2f} cores over its {args.reps} reads")
    if npm:
        out["npm_wire"] = npm_wire_bytes(server, npm)
        log(f"{when} npm reader: {out['npm_wire']:,} B received (HTTP heads included, through a counting relay)")
    return out


def part_read(binary, work, args, npm_script):
    server = Server(binary, work, "read", processors_toml(None))
    npm = None
    try:
        secs = load(server, args)
        _, _, head = request(server, "HEAD", f"/v1/stream/{STREAM}")
        log(f"# {args.upserts:,} upserts over {args.keys:,} keys loaded in {secs:.1f} s; tail {head.get('stream-next-offset')}")
        # The processor's own runner follows the stream too (it consumes
        # nothing, but reads every message): let it catch up first, so the
        # reads are not timed against the server's catch-up work.
        lag_s = wait_runner(server)
        log(f"# the processor's runner caught up with the stream {lag_s:.1f} s after the load")
        npm = NpmReader(npm_script, args.npm_timeout_ms) if npm_script else None
        before = measure_readers(server, npm, args, "before")
        cpu0, t0 = cpu_secs(server.pid), time.perf_counter()
        status, text, _ = request(server, "POST", f"/v1/processors/{SLUG}/compact/{STREAM}", b"{}",
                                  {"Content-Type": "application/json"})
        compact_ms, compact_cpu_ms = (time.perf_counter() - t0) * 1e3, (cpu_secs(server.pid) - cpu0) * 1e3
        if status != 200:
            sys.exit(f"compact answered {status}: {text[:500]!r}")
        report = json.loads(text)
        log(f"# compaction report ({compact_ms:.1f} ms, server CPU {compact_cpu_ms:.0f} ms): {json.dumps(report)}")
        _, _, head_after = request(server, "HEAD", f"/v1/stream/{STREAM}")
        status_old, _, _ = request(server, "GET", f"/v1/stream/{STREAM}?offset="
                                   + urllib.parse.quote(before["http"][0]["first_next"], safe=""))
        after = measure_readers(server, npm, args, "after")
        # The processor's own status on the stream (its hosted cursor, lastError).
        processor = processor_status(server)
    finally:
        if npm:
            npm.stop()
        server.stop()
    # Every state read must be the state the writes imply.
    want = expected_state(args.upserts, args.keys, args.value_bytes)
    checks = []
    for when, runs in (("before", before), ("after", after)):
        for kind in ("http", "npm"):
            for i, r in enumerate(runs[kind]):
                if r["state"] != want:
                    got = r["state"].get(TYPE, {})
                    missing = sorted(set(want.get(TYPE, {})) - set(got))[:10]
                    wrong = sorted(k for k in got if want.get(TYPE, {}).get(k) != got[k])[:10]
                    checks.append(f"{when} {kind} read {i + 1}: {len(got)} rows, missing {missing}, differing {wrong}")
    return dict(before=before, after=after, report=report, head_before=head, head_after=head_after,
                status_old=status_old, checks=checks, compact_ms=compact_ms, compact_cpu_ms=compact_cpu_ms, rows=len(want.get(TYPE, {})), processor=processor,
                warnings=server.warnings())


# ---------------------------------------------------------------- writer


P1_CASES = ["1 stream c=1", "1 stream c={c}", "{c} streams"]


def part_writer(binary, load, work, args):
    tomls = {"none": None, "off": processors_toml(None), "on": processors_toml((args.ratio, args.min_bytes, args.interval))}
    modes = args.modes.split(",")
    runs = []
    for rnd in range(1, args.rounds + 1):
        k = (rnd - 1) % len(modes)
        for mode in modes[k:] + modes[:k]:  # the order rotates each round
            best = None
            for attempt in range(1 + args.busy_retries):
                wait_quiet(args, f"round {rnd} {mode}")
                server = Server(binary, work, f"writer-{rnd}-{mode}-{attempt}", tomls[mode])
                try:
                    out = subprocess.run(
                        [load, "run", "--base", server.base, "--pid", str(server.pid), "--workloads", "p1",
                         "--p1-secs", str(args.p1_secs), "--p1-concurrency", str(args.p1_concurrency),
                         "--p1-body", "state-upsert", "--p1-state-keys", str(args.keys),
                         "--p1-stream-prefix", "state/w"],
                        capture_output=True, text=True)
                finally:
                    server.stop()
                text = out.stdout + out.stderr
                if out.returncode != 0 or not re.search(r"^RESULT: OK", text, re.M):
                    log(text)
                    sys.exit(f"round {rnd} {mode}: ds-load did not report OK; server log {server.log_path}")
                rows = [line for line in text.splitlines() if line.startswith("| P1")]
                busy = max(float(re.sub(r"[^0-9.]", "", r.split("|")[4]) or 0) for r in rows)
                if best is None or busy < best[0]:
                    best = (busy, text, server.compactions(), server.warnings())
                if busy <= args.busy:
                    break
                log(f"round {rnd} {mode}: others used {busy:.2f} cores; run again")
            _, text, compactions, warnings = best
            rows = [line for line in text.splitlines() if line.startswith("| P1")]
            vals = [float(r.split("|")[2].replace(",", "").strip()) for r in rows]
            others = rows[0].split("|")[4].strip() if rows else "?"
            # Per case: compactions of that case's streams (…-p1-{streams}x{writers}-{i}).
            c = args.p1_concurrency
            shapes = ["-p1-1x1-", f"-p1-1x{c}-", f"-p1-{c}x{c}-"]
            count = lambda shape, want: sum(1 for s, o, _ in compactions if s and shape in s and o == want)
            done = [count(shape, "compacted") for shape in shapes]
            failed = [count(shape, "failed") for shape in shapes]
            largest = [max([h for s, o, h in compactions if s and shape in s] or [0]) for shape in shapes]
            other_outcomes = sorted({o for _, o, _ in compactions if o not in ("compacted", "failed")})
            run = dict(round=rnd, mode=mode, rates=vals[:3], cpu=vals[3:6], others=others, compactions=done,
                       failed=failed, largest=largest, other_outcomes=other_outcomes, warnings=warnings)
            runs.append(run)
            log(f"round={rnd} mode={mode} appends/s={[round(v) for v in vals[:3]]} cpu_us={vals[3:6]} "
                f"others={others} compacted={done} failed={failed} largest_history={largest} "
                f"{other_outcomes or ''} {warnings or ''}")
    return runs


def calibrate(load, c):
    out = subprocess.run([load, "calibrate", "--secs", "2", "--concurrency", f"1,{c}"], capture_output=True, text=True)
    return (out.stdout.strip() or out.stderr.strip()).splitlines()[-1] if (out.stdout or out.stderr) else "?"


# ---------------------------------------------------------------- report


def print_read(r, args):
    log("\n## New reader from offset=-1, before and after compaction\n")
    log(f"Median of {args.reps} reads (min-max); `http` = this script's reader (pages + parse + fold), "
        "`npm` = the official client (StreamDB, long-poll) in a node process started beforehand.\n")
    log("| measure | before | after | before ÷ after |")
    log("|---|---|---|---|")
    b, a = r["before"], r["after"]
    bb, ab = med([x["bytes"] for x in b["http"]]), med([x["bytes"] for x in a["http"]])
    log(f"| bytes downloaded (response bodies) | {bb:,.0f} | {ab:,.0f} | **{bb / ab:.1f}×** |")
    if "npm_wire" in b:
        nb, na = b["npm_wire"], a["npm_wire"]
        log(f"| npm client: bytes received (HTTP heads included) | {nb:,} | {na:,} | **{nb / na:.1f}×** |")
    log(f"| responses (pages) | {med([x['pages'] for x in b['http']]):.0f} | {med([x['pages'] for x in a['http']]):.0f} | |")
    for kind, key, name in (("http", "ms", "http reader: time to its first consistent state (ms)"),
                            ("http", "net_ms", "http reader: of which HTTP (ms)"),
                            ("npm", "ms", "npm client (StreamDB): request → state (ms)")):
        xb, xa = [x[key] for x in b[kind]], [x[key] for x in a[kind]]
        if not xb:
            log(f"| {name} | not measured | not measured | |")
            continue
        log(f"| {name} | {med(xb):,.1f} ({span(xb)}) | {med(xa):,.1f} ({span(xa)}) | {med(xb) / med(xa):.1f}× |")
    oth = ", ".join(f"{when} {k} {x['others'][k]:.2f}" for when, x in (("before", b), ("after", a)) for k in x["others"])
    log(f"\nOther processes' CPU over each reader's {args.reps} reads (cores): {oth}.")
    log(f"\nHEAD before: earliest {r['head_before'].get('stream-earliest-offset', '(none)')}, "
        f"tail {r['head_before'].get('stream-next-offset')}; after: earliest "
        f"{r['head_after'].get('stream-earliest-offset', '(none)')}, tail {r['head_after'].get('stream-next-offset')}; "
        f"a read at the first page's old next offset now answers {r['status_old']}.")
    log(f"\nCompaction report (the POST answered in {r['compact_ms']:.1f} ms; server CPU meanwhile "
        f"{r['compact_cpu_ms']:.0f} ms, at /proc's 10 ms resolution): `{json.dumps(r['report'])}`")
    log(f"\n`GET /v1/processors` after the reads, this stream: `{json.dumps(r['processor'])}`")
    if r["warnings"]:
        log(f"\nServer warnings: {r['warnings']}")
    if r["checks"]:
        log("\n**STATE CHECK FAILED**: " + "; ".join(r["checks"]))
    else:
        log(f"\nState check: every read (both readers, before and after) holds exactly the {r['rows']:,} rows "
            "the writes imply (each key's last upsert).")


def print_writer(runs, args, cal_before, cal_after):
    c = args.p1_concurrency
    modes = args.modes.split(",")
    log(f"\n## Writer appends/s: {', '.join(modes)} (on: ratio {args.ratio}, min {args.min_bytes} B, every {args.interval})\n")
    log(f"Calibration (ds-load against the trivial sink, 100 B POSTs): before: {cal_before}; after: {cal_after}\n")
    log(f"Median (min-max) over {args.rounds} rounds; {args.p1_secs} s per case; change = of the medians.\n")
    vs = [(a, b) for a, b in (("on", "off"), ("off", "none"), ("on", "none")) if a in modes and b in modes]
    log("| measure | " + " | ".join(modes) + " | " + " | ".join(f"{a} vs {b}" for a, b in vs)
        + " | compactions per run (on): done / gave up | largest history a compaction found (on), MB |")
    log("|---|" + "---|" * (len(modes) + len(vs) + 2))
    for what, unit in (("rates", "appends/s"), ("cpu", "server CPU µs/append")):
        for i, case in enumerate(P1_CASES):
            cells, meds = [], {}
            for mode in modes:
                xs = [r[what][i] for r in runs if r["mode"] == mode and len(r[what]) > i]
                meds[mode] = med(xs)
                fmt = (lambda v: f"{v:,.0f}") if what == "rates" else (lambda v: f"{v:.1f}")
                cells.append(f"{fmt(meds[mode])} ({fmt(min(xs))}-{fmt(max(xs))})" if xs else "-")
            diffs = [f"{100 * (meds[a] - meds[b]) / meds[b]:+.1f}%" for a, b in vs]
            on = [r for r in runs if r["mode"] == "on"] if what == "rates" else []
            comp = ", ".join(f"{r['compactions'][i]}/{r['failed'][i]}" for r in on)
            largest = ", ".join(f"{r['largest'][i] / 1e6:.1f}" for r in on)
            log(f"| {case.format(c=c)}, {unit} | " + " | ".join(cells) + " | " + " | ".join(diffs)
                + f" | {comp} | {largest} |")
    log("\nOthers' CPU during each run's first case (cores): "
        + ", ".join(f"{r['round']}/{r['mode']} {r['others']}" for r in runs))
    extra = sorted({o for r in runs for o in r["other_outcomes"]})
    if extra:
        log(f"\nOther compaction outcomes logged: {extra}")
    for r in runs:
        if r["warnings"]:
            log(f"\nServer warnings, round {r['round']} {r['mode']}: {r['warnings']}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", help="durable-streams binary (default: target/release/durable-streams, built if stale)")
    ap.add_argument("--load", help="ds-load binary (default: built into target-bench/)")
    ap.add_argument("--parts", default="read,writer")
    ap.add_argument("--upserts", type=int, default=100_000)
    ap.add_argument("--keys", type=int, default=1_000)
    ap.add_argument("--value-bytes", type=int, default=200)
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--state-client", default="auto", help="materialize.mjs path, auto (install.sh) or none")
    ap.add_argument("--npm-timeout-ms", type=int, default=600_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--p1-secs", type=float, default=10)
    ap.add_argument("--p1-concurrency", type=int, default=8)
    ap.add_argument("--modes", default="none,off,on",
                    help="writer part: none (no processor), off (state processor, no compact_ratio), on")
    ap.add_argument("--ratio", type=int, default=2)
    ap.add_argument("--min-bytes", type=int, default=65536)
    ap.add_argument("--interval", default="1s")
    ap.add_argument("--busy", type=float, default=0.25, help="other processes' cores that make a run busy")
    ap.add_argument("--busy-retries", type=int, default=2)
    ap.add_argument("--quiet-wait", type=float, default=600, help="seconds to wait for a quiet machine")
    ap.add_argument("--keep", action="store_true", help="keep the work dir (data, logs)")
    args = ap.parse_args()
    parts = set(args.parts.split(","))
    binary = server_binary(args.bin)
    load = load_binary(args.load) if "writer" in parts else None
    npm_script = state_client(args.state_client) if "read" in parts else None
    work = tempfile.mkdtemp(prefix="compaction-bench-")
    log(f"# load average at start: {loadavg()}; binary {binary}; work dir {work}")
    try:
        if "read" in parts:
            wait_quiet(args, "read part")
            r = part_read(binary, work, args, npm_script)
        if "writer" in parts:
            wait_quiet(args, "calibration")
            cal_before = calibrate(load, args.p1_concurrency)
            runs = part_writer(binary, load, work, args)
            wait_quiet(args, "calibration")
            cal_after = calibrate(load, args.p1_concurrency)
        log(f"# load average at end: {loadavg()}")
        if "read" in parts:
            print_read(r, args)
        if "writer" in parts:
            print_writer(runs, args, cal_before, cal_after)
    finally:
        if not args.keep:
            subprocess.run(["rm", "-rf", work])
    if "read" in parts and r["checks"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
