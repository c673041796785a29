"""A model of AWS's latencies and DynamoDB's throughput limits, for benches
(`/_emulator/model`; off unless turned on: `serve.py --model aws`,
`start.sh --model aws`, or a POST).

Latency: each modeled call takes a time drawn from a log-normal distribution
fitted to the operation's published median and 99th percentile (README,
"Latency and limit model", gives every default and its source). The draw is
the whole time the call takes as seen by the client: the emulator's own work
counts towards it, and only the rest is slept, outside every lock, in the
connection's own thread, so delayed calls overlap freely. If the emulator is
slower than the draw, the call takes the emulator's time (the calibration
line of a bench says how fast that is).

Limits: every DynamoDB partition key has a write and a read token bucket
(1,000 write and 3,000 read units per second, one second of burst), and
every table one of each (40,000 units per second): the documented
per-partition maximum and the default per-table quota of on-demand tables.
A call whose partition (or table) bucket is empty is throttled as DynamoDB
throttles it and consumes nothing; an admitted call is charged what it
consumed afterwards (the bucket may go below zero, as DynamoDB's does, and
the debt is paid back before the next call is admitted).
"""

import copy
import math
import random
import threading
import time

# Defaults (milliseconds). Sources: README, "Latency and limit model".
DEFAULT_LATENCY = {
    "dynamodb": {
        "*": {"p50": 7.55, "p99": 16.2},
        "TransactWriteItems": {"p50": 25.3, "p99": 92.5, "items": 5,
                               "p50_per_item": 0.34, "p99_per_item": 0.25},
    },
    "dynamodbstreams": {"*": {"p50": 7.55, "p99": 16.2}},
    "s3": {
        "*": {"p50": 30.0, "p99": 200.0},
        "PutObject": {"p50": 60.0, "p99": 133.0},
        "CopyObject": {"p50": 60.0, "p99": 133.0},
    },
    "sqs": {"*": {"p50": 20.0, "p99": 100.0}},
    "scheduler": {"*": {"p50": 20.0, "p99": 100.0}},
}
# Control-plane calls are not modeled: they run at the emulator's speed.
UNMODELED = {"CreateTable", "DeleteTable", "DescribeTable", "UpdateTable", "ListTables",
             "UpdateTimeToLive", "DescribeTimeToLive", "CreateBucket", "DeleteBucket",
             "PutBucketLifecycleConfiguration", "CreateQueue", "DeleteQueue", "GetQueueUrl",
             "CreateScheduleGroup", "DeleteScheduleGroup"}

DEFAULT_LIMITS = {
    "partition_wcu": 1000.0,   # write units per second per partition key
    "partition_rcu": 3000.0,   # read units per second per partition key
    "table_wcu": 40000.0,      # per table (default on-demand table quota)
    "table_rcu": 40000.0,
    "burst_s": 1.0,            # seconds of unused capacity a bucket holds
}

Z99 = 2.3263478740408408  # the standard normal's 99th percentile


def lognormal_ms(rng, p50, p99):
    """A draw whose median is p50 and 99th percentile p99, capped at 3 x p99."""
    if p99 <= p50:
        return p50
    sigma = math.log(p99 / p50) / Z99
    return min(p50 * math.exp(rng.gauss(0.0, sigma)), 3 * p99)


class Bucket:
    __slots__ = ("rate", "cap", "tokens", "at")

    def __init__(self, rate, burst_s, now):
        self.rate, self.cap = rate, rate * burst_s
        self.tokens, self.at = self.cap, now

    def level(self, now):
        self.tokens = min(self.cap, self.tokens + (now - self.at) * self.rate)
        self.at = now
        return self.tokens


class Model:
    def __init__(self):
        self._lock = threading.Lock()
        self.latency_on = False
        self.limits_on = False
        self.latency = copy.deepcopy(DEFAULT_LATENCY)
        self.limits = dict(DEFAULT_LIMITS)
        self.seed = 0
        self.rng = random.Random(0)
        self._reset()

    def _reset(self):
        self.buckets = {}
        self.throttled = {}
        self.delayed = 0
        self.delay_ms = 0.0
        self.late = 0  # calls the emulator itself served slower than their draw

    # -- configuration -------------------------------------------------------

    def configure(self, body):
        """`{"latency": true|false|{service: {op: {"p50": ms, "p99": ms}}},
        "limits": true|false|{name: value}, "seed": n}`; absent keys keep
        their value. `{"preset": "aws"}` turns both on with the defaults."""
        if not isinstance(body, dict):
            raise ValueError("expected a JSON object")
        unknown = set(body) - {"latency", "limits", "seed", "preset"}
        if unknown:
            raise ValueError(f"unknown model fields: {sorted(unknown)}")
        with self._lock:
            if body.get("preset") not in (None, "aws"):
                raise ValueError('preset must be "aws"')
            if body.get("preset") == "aws":
                self.latency_on = self.limits_on = True
                self.latency, self.limits = copy.deepcopy(DEFAULT_LATENCY), dict(DEFAULT_LIMITS)
            lat = body.get("latency")
            if isinstance(lat, bool):
                self.latency_on = lat
            elif isinstance(lat, dict):
                for service, ops in lat.items():
                    for op, dist in ops.items():
                        if not {"p50", "p99"} <= set(dist) or float(dist["p50"]) < 0:
                            raise ValueError(f"{service}.{op}: needs p50 and p99 in ms")
                        self.latency.setdefault(service, {})[op] = {k: float(v) for k, v in dist.items()}
                self.latency_on = True
            lim = body.get("limits")
            if isinstance(lim, bool):
                self.limits_on = lim
            elif isinstance(lim, dict):
                bad = set(lim) - set(DEFAULT_LIMITS)
                if bad:
                    raise ValueError(f"unknown limits: {sorted(bad)}")
                self.limits.update({k: float(v) for k, v in lim.items()})
                self.limits_on = True
            if "seed" in body:
                self.seed = int(body["seed"])
                self.rng = random.Random(self.seed)
            self.buckets = {}

    def snapshot(self, clear=False):
        with self._lock:
            out = {
                "latency_on": self.latency_on,
                "limits_on": self.limits_on,
                "latency_ms": copy.deepcopy(self.latency),
                "limits": dict(self.limits),
                "seed": self.seed,
                "throttled": {k: dict(v) for k, v in sorted(self.throttled.items())},
                "delayed_calls": self.delayed,
                "delay_ms_total": round(self.delay_ms, 1),
                "calls_slower_than_model": self.late,
            }
            if clear:
                self._reset()
            return out

    def disable(self):
        with self._lock:
            self.latency_on = self.limits_on = False
            self.latency, self.limits = copy.deepcopy(DEFAULT_LATENCY), dict(DEFAULT_LIMITS)

    # -- latency -------------------------------------------------------------

    def draw_s(self, service, op, items=None):
        """The modeled duration of a call in seconds, or 0 when not modeled."""
        if not self.latency_on or op in UNMODELED:
            return 0.0
        ops = self.latency.get(service)
        if not ops:
            return 0.0
        dist = ops.get(op) or ops.get("*")
        if not dist:
            return 0.0
        p50, p99 = dist["p50"], dist["p99"]
        if items is not None and "items" in dist:
            extra = items - dist["items"]
            floor = ops.get("*", {"p50": 0.0, "p99": 0.0})
            p50 = max(floor["p50"], p50 + extra * dist.get("p50_per_item", 0.0))
            p99 = max(floor["p99"], p99 + extra * dist.get("p99_per_item", 0.0))
        with self._lock:
            return lognormal_ms(self.rng, p50, p99) / 1000.0

    def wait(self, draw_s, started):
        """Sleep what is left of a call's draw (the caller holds no lock)."""
        if draw_s <= 0:
            return
        left = draw_s - (time.monotonic() - started)
        with self._lock:
            if left > 0:
                self.delayed += 1
                self.delay_ms += left * 1000
            else:
                self.late += 1
        if left > 0:
            time.sleep(left)

    # -- limits --------------------------------------------------------------

    def _bucket(self, key, rate, now):
        b = self.buckets.get(key)
        if b is None:
            b = self.buckets[key] = Bucket(rate, self.limits["burst_s"], now)
        return b

    def _buckets_of(self, part, kind, now):
        table, partition = part
        unit = "wcu" if kind == "w" else "rcu"
        out = [("table", self._bucket(("t", table, kind), self.limits[f"table_{unit}"], now))]
        if partition is not None:
            out.append(("partition", self._bucket(("p", table, partition, kind), self.limits[f"partition_{unit}"], now)))
        return out

    def refused(self, op, parts, kind):
        """The parts (table, partition) of a call that their buckets refuse,
        with the reason ("partition" or "table"); empty when admitted."""
        if not self.limits_on:
            return {}
        now = time.monotonic()
        out = {}
        with self._lock:
            for part in parts:
                for scope, b in self._buckets_of(part, kind, now):
                    if b.level(now) <= 0:
                        out[part] = scope
            if out:  # counted once per call, by its narrowest refusing scope
                scope = "partition" if "partition" in out.values() else "table"
                counts = self.throttled.setdefault(op, {})
                counts[scope] = counts.get(scope, 0) + 1
        return out

    def charge(self, reads, writes):
        """Debit what an admitted call consumed: {(table, partition): units}."""
        if not self.limits_on:
            return
        now = time.monotonic()
        with self._lock:
            for book, kind in ((reads, "r"), (writes, "w")):
                for part, units in book.items():
                    for _, b in self._buckets_of(part, kind, now):
                        b.level(now)
                        b.tokens -= units
