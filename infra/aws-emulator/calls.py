"""Call counting for serve.py: which AWS API a request is, and the counts
`/_emulator/calls` reports (calls, errors, error codes, consumed capacity).

Nothing here imports moto at module level.
"""

import threading
import time
from collections import defaultdict
from io import BytesIO
from urllib.parse import parse_qs


def _nested(depth):
    """defaultdict of `depth` levels ending in int counts."""
    if depth == 1:
        return defaultdict(int)
    return defaultdict(lambda: _nested(depth - 1))


def _plain(d):
    """Sorted plain dicts of nested defaultdicts (for JSON)."""
    if isinstance(d, dict):
        return {k: _plain(v) for k, v in sorted(d.items())}
    return round(d, 3) if isinstance(d, float) else d


class CallCounter:
    """Counts AWS API calls per (service, operation); errors are responses >= 400.

    Also counted, per (service, operation): the requests an SDK sent as a
    retry of its own (`sdk_retries`: the `amz-sdk-request` header, which
    every AWS SDK sends, says `attempt=N` with N > 1), error codes (for a cancelled
    TransactWriteItems, each cancellation reason code, so conditional-check
    failures and throttled items show apart), and the DynamoDB capacity the
    call consumed, in read and write request units (see dynamo.py).
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._reset_locked()

    def _reset_locked(self):
        self.calls = _nested(2)
        # The same counts per access key id, so processes given keys of their
        # own (moto accepts any) are told apart.
        self.by_key = _nested(3)
        self.errors = _nested(2)
        self.sdk_retries = _nested(2)
        self.error_codes = _nested(3)
        self.capacity = defaultdict(lambda: defaultdict(lambda: {"rcu": 0.0, "wcu": 0.0}))
        self.capacity_by_key = defaultdict(lambda: {"rcu": 0.0, "wcu": 0.0})
        self.total = 0
        self.since = time.time()

    def record(self, service, operation, status, key=None, codes=(), rcu=0.0, wcu=0.0, attempt=1):
        with self._lock:
            self.calls[service][operation] += 1
            if attempt > 1:
                self.sdk_retries[service][operation] += 1
            self.by_key[key or "-"][service][operation] += 1
            self.total += 1
            if status >= 400:
                self.errors[service][operation] += 1
            for code in codes:
                self.error_codes[service][operation][code] += 1
            if rcu or wcu:
                cap = self.capacity[service][operation]
                cap["rcu"] += rcu
                cap["wcu"] += wcu
                mine = self.capacity_by_key[key or "-"]
                mine["rcu"] += rcu
                mine["wcu"] += wcu

    def snapshot(self, reset=False):
        with self._lock:
            rcu = sum(c["rcu"] for ops in self.capacity.values() for c in ops.values())
            wcu = sum(c["wcu"] for ops in self.capacity.values() for c in ops.values())
            out = {
                "total": self.total,
                "since": self.since,
                "calls": _plain(self.calls),
                "errors": _plain(self.errors),
                "sdk_retries": _plain(self.sdk_retries),
                "error_codes": _plain(self.error_codes),
                "by_key": _plain(self.by_key),
                "capacity": _plain(self.capacity),
                "capacity_by_key": _plain(self.capacity_by_key),
                "capacity_total": {"rcu": round(rcu, 3), "wcu": round(wcu, 3)},
            }
            if reset:
                self._reset_locked()
            return out


def sdk_attempt(environ):
    """The attempt number an AWS SDK gave this request (`amz-sdk-request:
    attempt=2; max=3`), 1 when it says none."""
    header = environ.get("HTTP_AMZ_SDK_REQUEST", "")
    for part in header.split(";"):
        name, _, value = part.strip().partition("=")
        if name == "attempt":
            try:
                return int(value)
            except ValueError:
                return 1
    return 1


def access_key(environ):
    """The access key id of a SigV4-signed request (header, or presigned query)."""
    auth = environ.get("HTTP_AUTHORIZATION", "")
    if "Credential=" in auth:
        return auth.split("Credential=", 1)[1].split("/", 1)[0].strip()
    cred = parse_qs(environ.get("QUERY_STRING", "")).get("X-Amz-Credential", [""])[0]
    return cred.split("/", 1)[0] or None


def signing_service(environ):
    """Service from the SigV4 credential scope (header, or query for presigned URLs)."""
    auth = environ.get("HTTP_AUTHORIZATION", "")
    scope = ""
    if "Credential=" in auth:
        scope = auth.split("Credential=", 1)[1].split(",", 1)[0].strip()
    elif "X-Amz-Credential=" in environ.get("QUERY_STRING", ""):
        scope = parse_qs(environ["QUERY_STRING"]).get("X-Amz-Credential", [""])[0]
    parts = scope.split("/")
    return parts[3].lower() if len(parts) == 5 else None


def classify(environ):
    """(service, operation) of an AWS request, named as in the API reference."""
    from moto.moto_server.werkzeug_app import SIGNING_ALIASES

    service = signing_service(environ)
    service = SIGNING_ALIASES.get(service, service)
    target = environ.get("HTTP_X_AMZ_TARGET")
    if target:  # JSON protocols: DynamoDB, DynamoDB Streams, SQS, EventBridge, ...
        prefix, _, op = target.rpartition(".")
        if prefix.startswith("DynamoDBStreams"):
            service = "dynamodbstreams"
        elif prefix.startswith("DynamoDB_"):
            service = "dynamodb"
        return service or prefix.split("_")[0].lower(), op
    method = environ.get("REQUEST_METHOD", "GET")
    if service != "s3" and environ.get("CONTENT_TYPE", "").startswith(
            "application/x-www-form-urlencoded"):
        # Query protocol: Action is in the form body. Read it and put it back.
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        if 0 < length <= 16 << 20:
            body = environ["wsgi.input"].read(length)
            environ["wsgi.input"] = BytesIO(body)
            action = parse_qs(body.decode("utf-8", "replace")).get("Action")
            if action:
                return service or "unknown", action[0]
    action = parse_qs(environ.get("QUERY_STRING", "")).get("Action")
    if action:
        return service or "unknown", action[0]
    if service:  # REST protocols (S3, Scheduler, ...): moto's own botocore-model router
        try:
            from moto.core.request import Request
            from moto.core.routing import get_service_router

            operation, _ = get_service_router(service).match(Request(environ))
            return service, operation.name
        except Exception:
            pass
    return service or "unknown", f"Unrecognized{method.capitalize()}"
