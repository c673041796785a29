"""Fault injection and ClientRequestToken idempotency for serve.py (see its docstring).

Kept apart from serve.py so the WSGI wrapper stays readable; nothing here
imports moto.
"""

import hashlib
import json
import random
import threading
import time
from collections import OrderedDict, defaultdict

FAULT_KINDS = ("throttle", "error", "apply_then_error", "slow")


class Faults:
    """Rules that make matching AWS calls fail, for tests of what the client does.

    A rule (JSON object) names what it matches and what happens:
      service    "dynamodb", "s3", ... or "*" (default "*")
      operation  e.g. "TransactWriteItems", "PutObject", or "*" (default "*")
      fault      one of, or a list to pick from at random per call:
                   "throttle"          not applied; DynamoDB 400 ThrottlingException,
                                       S3 503 SlowDown, others 429
                   "error"             not applied; 500 InternalServerError / InternalError
                   "apply_then_error"  applied, then answered 500: the unknown outcome
                   "slow"              applied normally after delay_ms
      count      at most this many faults from the rule (default: no limit)
      rate       probability that a matching call is faulted (default 1.0)
      delay_ms   for "slow" (default 1000); with other faults, a delay first
      seed       seeds the rule's random choices (default 0)
      for_ms     the rule fires only this long after it was added (default: no
                 limit): a burst, e.g. a second of throttling
      access_key only calls signed with this access key id (default: any), so
                 one process (one Lambda function's instance) fails while the
                 others sharing the emulator do not
    "Throttle the next 3 TransactWriteItems" is
      {"service": "dynamodb", "operation": "TransactWriteItems", "fault": "throttle", "count": 3}
    and "a fifth of all S3 calls fail" is {"service": "s3", "fault": "error", "rate": 0.2}.
    The first rule that matches a call and fires decides it.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self.rules = []
        self._reset_counts()

    def _reset_counts(self):
        self.injected = defaultdict(lambda: defaultdict(lambda: defaultdict(int)))
        self.total = 0

    @staticmethod
    def _rule(spec):
        if not isinstance(spec, dict):
            raise ValueError("a rule is a JSON object")
        unknown = set(spec) - {"service", "operation", "fault", "count", "rate", "delay_ms", "seed",
                                 "access_key", "for_ms"}
        if unknown:
            raise ValueError(f"unknown rule fields: {sorted(unknown)}")
        kinds = spec.get("fault")
        kinds = [kinds] if isinstance(kinds, str) else kinds
        if not kinds or any(k not in FAULT_KINDS for k in kinds):
            raise ValueError(f"fault must be one of {FAULT_KINDS}, or a list of them")
        rate = float(spec.get("rate", 1.0))
        count = spec.get("count")
        if not 0.0 <= rate <= 1.0 or (count is not None and int(count) < 0):
            raise ValueError("rate must be within 0..1 and count >= 0")
        return {
            "service": str(spec.get("service", "*")).lower(),
            "operation": str(spec.get("operation", "*")),
            "fault": list(kinds),
            "count": None if count is None else int(count),
            "rate": rate,
            "delay_ms": None if spec.get("delay_ms") is None else int(spec["delay_ms"]),
            "seed": int(spec.get("seed", 0)),
            "access_key": None if spec.get("access_key") is None else str(spec["access_key"]),
            "for_ms": None if spec.get("for_ms") is None else int(spec["for_ms"]),
            "until": None if spec.get("for_ms") is None else time.monotonic() + int(spec["for_ms"]) / 1000,
            "rng": random.Random(int(spec.get("seed", 0))),
            "fired": 0,
        }

    def add(self, body):
        specs = body.get("rules", [body]) if isinstance(body, dict) else body
        if not isinstance(specs, list):
            raise ValueError('expected a rule, a list of rules, or {"rules": [...]}')
        rules = [self._rule(spec) for spec in specs]
        with self._lock:
            self.rules.extend(rules)

    def pick(self, service, operation, key=None):
        """(fault, delay_ms) for this call (signed with access key id `key`), or None.
        Counts what it injects."""
        if not self.rules:  # unlocked fast path: no rules, no cost
            return None
        with self._lock:
            for r in self.rules:
                if r["service"] not in ("*", service) or r["operation"] not in ("*", operation):
                    continue
                if r["access_key"] is not None and r["access_key"] != key:
                    continue
                if r["count"] is not None and r["fired"] >= r["count"]:
                    continue
                if r["until"] is not None and time.monotonic() >= r["until"]:
                    continue
                if r["rate"] < 1.0 and r["rng"].random() >= r["rate"]:
                    continue
                r["fired"] += 1
                fault = r["rng"].choice(r["fault"])
                self.injected[service][operation][fault] += 1
                self.total += 1
                delay = r["delay_ms"] if r["delay_ms"] is not None else (1000 if fault == "slow" else 0)
                return fault, delay
        return None

    def snapshot(self, clear=False):
        with self._lock:
            out = {
                "rules": [{k: v for k, v in r.items() if k not in ("rng", "until")} for r in self.rules],
                "injected": {s: {o: dict(f) for o, f in sorted(ops.items())}
                             for s, ops in sorted(self.injected.items())},
                "total": self.total,
            }
            if clear:
                self.rules = []
                self._reset_counts()
            return out


def fault_response(service, fault):
    """(status line, headers, body) of an injected failure, as the service sends it."""
    if service == "s3":
        code, status = ("SlowDown", "503 Slow Down") if fault == "throttle" else \
            ("InternalError", "500 Internal Server Error")
        body = (f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
                f"<Message>injected by /_emulator/faults</Message></Error>").encode()
        return status, [("Content-Type", "application/xml")], body
    if fault == "throttle":
        status = "400 Bad Request" if service in ("dynamodb", "dynamodbstreams") else "429 Too Many Requests"
        kind = "com.amazonaws.dynamodb.v20120810#ThrottlingException" if status.startswith("400") \
            else "ThrottlingException"
    else:
        status, kind = "500 Internal Server Error", "com.amazonaws.dynamodb.v20120810#InternalServerError"
    body = json.dumps({"__type": kind, "message": "injected by /_emulator/faults"}).encode()
    return status, [("Content-Type", "application/x-amz-json-1.0"), ("x-amzn-ErrorType", kind)], body


# ---------------------------------------------------------------------------
# ClientRequestToken idempotency for TransactWriteItems
# ---------------------------------------------------------------------------

TOKEN_WINDOW_S = 600  # DynamoDB: a token is valid for 10 minutes after first use


class TransactTokens:
    """Applied TransactWriteItems by ClientRequestToken: (fingerprint, response, when),
    oldest first, so expiring them costs nothing per call."""

    def __init__(self):
        self.applied = OrderedDict()
        self.replayed = 0

    def _expire(self, now):
        while self.applied:
            token, (_, _, at) = next(iter(self.applied.items()))
            if now - at <= TOKEN_WINDOW_S:
                return
            del self.applied[token]

    @staticmethod
    def parse(body):
        """(token, fingerprint) of a request body; token None when absent."""
        try:
            req = json.loads(body or b"{}")
        except ValueError:
            return None, None
        token = req.pop("ClientRequestToken", None) if isinstance(req, dict) else None
        fingerprint = hashlib.sha256(json.dumps(req, sort_keys=True).encode()).hexdigest()
        return token, fingerprint

    def lookup(self, token, fingerprint):
        """The recorded response for a repeated token, an error for a mismatch, or None."""
        now = time.time()
        self._expire(now)
        if token not in self.applied:
            return None
        seen, response, _ = self.applied[token]
        if seen != fingerprint:
            kind = "com.amazonaws.dynamodb.v20120810#IdempotentParameterMismatchException"
            body = json.dumps({"__type": kind, "message": "ClientRequestToken was used with other "
                               "parameters within the idempotency window"}).encode()
            return "400 Bad Request", [("Content-Type", "application/x-amz-json-1.0")], body
        self.replayed += 1
        return response

    def record(self, token, fingerprint, response):
        self.applied.pop(token, None)
        self.applied[token] = (fingerprint, response, time.time())

