"""The hot DynamoDB operations, served straight from moto's own handler
methods, with the capacity each call consumes.

moto's server spends most of a small call outside DynamoDB: Flask routing,
looking the backend up by host, parsing the JSON body again against the
botocore model, and serializing the answer through it (GetItem: ~1.4 ms of
which ~0.05 ms is the lookup itself). For the operations below this module
calls `DynamoHandler.<operation>()` itself — the same validation, the same
backend code, the same errors — with the body parsed by `json` (binary
values decoded as botocore would) and the answer encoded by `json`
(binary values base64-encoded as botocore would). `selftest.py --only
fastpath` runs one request sequence through this path and through moto's
whole server and compares every answer.

Capacity (`/_emulator/calls`, "capacity") follows DynamoDB's rules: a
read costs ceil(size / 4 KB) units (half for an eventually consistent
one), a Query or Scan the size of every item it read, before filters, summed
then rounded up, a BatchGetItem each item it returned as a GetItem would,
a write ceil(size / 1 KB) of the larger of the item
before and after, at least one unit per request or item; in
TransactWriteItems every item costs twice (prepare and commit; a condition
check too). A write whose condition fails costs the size of the item it
checked; a cancelled transaction its prepare phase (once per item). Item
sizes: attribute names plus values, numbers as about half their
significant digits plus one byte, lists and maps 3 bytes plus 1 per
element (the developer guide's "Item sizes and formats").
"""

import base64
import json
import math
import uuid
import zlib

HOT_OPERATIONS = {
    "GetItem": "get_item",
    "PutItem": "put_item",
    "UpdateItem": "update_item",
    "DeleteItem": "delete_item",
    "Query": "query",
    "Scan": "scan",
    "TransactWriteItems": "transact_write_items",
    "BatchWriteItem": "batch_write_item",
    "BatchGetItem": "batch_get_item",
}
READS = ("GetItem", "Query", "Scan", "BatchGetItem")
JSON_TYPE = "application/x-amz-json-1.0"
ERROR_PREFIX = "com.amazonaws.dynamodb.v20120810#"


# ---------------------------------------------------------------------------
# bodies as botocore would parse and serialize them
# ---------------------------------------------------------------------------

def decode_blobs(node):
    """Binary attribute values ({"B": base64} and {"BS": [base64]}) as bytes, in place."""
    if isinstance(node, dict):
        if len(node) == 1:
            (k, v), = node.items()
            if k == "B" and isinstance(v, str):
                node["B"] = base64.b64decode(v)
                return node
            if k == "BS" and isinstance(v, list) and all(isinstance(x, str) for x in v):
                node["BS"] = [base64.b64decode(x) for x in v]
                return node
        for v in node.values():
            decode_blobs(v)
    elif isinstance(node, list):
        for v in node:
            decode_blobs(v)
    return node


def _bytes_as_base64(o):
    if isinstance(o, (bytes, bytearray)):
        return base64.b64encode(o).decode()
    raise TypeError(f"{type(o).__name__} is not JSON serializable")


def encode(result):
    return json.dumps(result, default=_bytes_as_base64).encode()


# ---------------------------------------------------------------------------
# item sizes and capacity units
# ---------------------------------------------------------------------------

def _number_size(s):
    digits = str(s).lstrip("-").replace(".", "").split("e")[0].split("E")[0]
    significant = digits.strip("0") or "0"
    return (len(significant) + 1) // 2 + 1


def value_size(av):
    """DynamoDB's size of one attribute value: JSON form ({"S": ...}) or moto's DynamoType."""
    if isinstance(av, dict):
        (t, v), = av.items()
    else:
        t, v = av.type, av.value
    if t == "S":
        return len(v.encode())
    if t == "N":
        return _number_size(v)
    if t == "B":
        return len(v) if isinstance(v, (bytes, bytearray)) else len(base64.b64decode(v))
    if t in ("BOOL", "NULL"):
        return 1
    if t == "SS":
        return sum(len(x.encode()) for x in v)
    if t == "NS":
        return sum(_number_size(x) for x in v)
    if t == "BS":
        return sum(len(x) for x in v)
    if t == "L":
        return 3 + sum(1 + value_size(x) for x in v)
    if t == "M":
        return 3 + sum(1 + len(k.encode()) + value_size(x) for k, x in v.items())
    return 0


def item_size(attrs):
    """Size of an item: {name: value} in JSON form, or a moto Item."""
    if attrs is None:
        return 0
    if hasattr(attrs, "attrs"):
        attrs = attrs.attrs
    return sum(len(k.encode()) + value_size(v) for k, v in attrs.items())


def read_units(size, consistent):
    units = max(1, math.ceil(size / 4096))
    return units if consistent else units / 2


def write_units(size):
    return max(1, math.ceil(size / 1024))


# ---------------------------------------------------------------------------
# the fast path
# ---------------------------------------------------------------------------

class Outcome:
    """A served call: the answer, the error codes it carries, and per
    partition the read and write units it consumed."""

    def __init__(self, status, headers, body, codes=(), result=None):
        self.status, self.headers, self.body, self.codes = status, headers, body, list(codes)
        self.result = result  # the answer's dict, binary values as bytes
        self.reads = {}   # (table, partition or None) -> units
        self.writes = {}
        self.items = None  # items of a TransactWriteItems (its modeled latency grows with them)

    @property
    def code(self):
        return int(self.status.split(" ", 1)[0])

    def charge(self, kind, part, units):
        book = self.reads if kind == "r" else self.writes
        book[part] = book.get(part, 0.0) + units

    @property
    def rcu(self):
        return sum(self.reads.values())

    @property
    def wcu(self):
        return sum(self.writes.values())


def response(status, headers, body):
    """(status line, headers, body) with moto's request id and CRC32 headers."""
    headers = [(k, v) for k, v in headers if k.lower() not in ("content-length", "x-amz-crc32")]
    headers += [("x-amzn-requestid", uuid.uuid4().hex), ("x-amz-crc32", str(zlib.crc32(body) & 0xFFFFFFFF))]
    return f"{status} {'OK' if status == 200 else 'Bad Request' if status == 400 else 'Error'}", headers, body


class Target:
    """An item a write names: its table, partition and key, and its size before."""

    def __init__(self, table, key, new_item=None, transactional=False):
        self.table, self.key, self.new_item, self.tx = table, key, new_item, transactional
        self.part = (table.name, _key_id(key.get(table.hash_key_attr)))
        self.before = item_size(stored(table, key))

    def units(self, after_size=None, prepare_only=False):
        size = max(self.before, after_size if after_size is not None else 0,
                   item_size(self.new_item) if self.new_item is not None else 0)
        units = write_units(size)
        return units * (2 if self.tx and not prepare_only else 1)


def _key_id(value):
    if value is None:
        return None
    (t, v), = value.items()
    return f"{t}:{v!r}" if isinstance(v, bytes) else f"{t}:{v}"


def stored(table, key):
    """The stored moto Item a key names, or None (never adds an empty partition)."""
    from moto.dynamodb.models.dynamo_type import DynamoType

    try:
        h = DynamoType(key[table.hash_key_attr])
        r = DynamoType(key[table.range_key_attr]) if table.range_key_attr else None
    except (KeyError, TypeError, ValueError, AttributeError, IndexError):
        return None
    part = table.items.get(h)
    if part is None or r is None:
        return part
    return part.get(r)


class FastPath:
    """See the module docs. `serve` runs under the caller's DynamoDB lock."""

    def __init__(self, read_meter):
        from moto.core.exceptions import ServiceException
        from moto.core.responses import ActionResult
        from moto.dynamodb.models import dynamodb_backends
        from moto.dynamodb.responses import DynamoHandler
        from werkzeug.exceptions import HTTPException

        self.backends = dynamodb_backends
        self.handler_class = DynamoHandler
        self.action_result = ActionResult
        self.service_exception = ServiceException
        self.http_exception = HTTPException
        self.read_meter = read_meter
        self.members = {}  # operation -> the members of its output shape

    def output_members(self, op):
        """What botocore's serializer keeps of an answer: the output shape's
        members (moto's handlers return a few more, e.g. DeleteItem's
        ConsumedCapacityUnits, which it drops)."""
        members = self.members.get(op)
        if members is None:
            from moto.core.responses import get_service_model

            shape = get_service_model("dynamodb").operation_model(op).output_shape
            members = self.members[op] = frozenset(shape.members) if shape is not None else frozenset()
        return members

    def targets(self, backend, op, req):
        """The items a write request names, with their sizes before."""
        out = []
        table = lambda name: backend.get_table(name)  # noqa: E731
        try:
            if op == "PutItem":
                t = table(req["TableName"])
                out.append(Target(t, req["Item"], new_item=req["Item"]))
            elif op in ("UpdateItem", "DeleteItem"):
                out.append(Target(table(req["TableName"]), req["Key"]))
            elif op == "TransactWriteItems":
                for entry in req.get("TransactItems", []):
                    for kind, x in entry.items():
                        t = table(x["TableName"])
                        if kind == "Put":
                            out.append(Target(t, x["Item"], new_item=x["Item"], transactional=True))
                        else:
                            out.append(Target(t, x["Key"], transactional=True))
            elif op == "BatchWriteItem":
                for name, reqs in req.get("RequestItems", {}).items():
                    t = table(name)
                    for r in reqs:
                        if "PutRequest" in r:
                            out.append(Target(t, r["PutRequest"]["Item"], new_item=r["PutRequest"]["Item"]))
                        elif "DeleteRequest" in r:
                            out.append(Target(t, r["DeleteRequest"]["Key"]))
        except Exception:
            return None  # moto reports what is wrong with the request
        return out

    def serve(self, op, body, account, region, model=None):
        """The Outcome of one call. With the limit model on, a call its
        partition's (or table's) bucket refuses is throttled instead, and an
        admitted one is charged to the buckets."""
        req = decode_blobs(json.loads(body or b"{}"))
        out = self._serve(op, req, account, region, model)
        if op == "TransactWriteItems":
            out.items = len(req.get("TransactItems") or [])
        return out

    def _serve(self, op, req, account, region, model):
        backend = self.backends[account][region]
        writes = self.targets(backend, op, req) if op not in READS else []
        limits = model is not None and model.limits_on
        if limits and writes:
            parts = [w.part for w in writes]
            refused = model.refused(op, parts, "w")
            if refused:
                return throttled(op, parts, refused, "w")
        h = self.handler_class()
        h.body = h.params = req
        h.headers = {"X-Amz-Target": f"DynamoDB_20120810.{op}", "Content-Type": JSON_TYPE}
        h.current_account, h.region = account, region
        h.response_headers, h.uri_match, h.querystring = {}, {}, {}
        reads = self.read_meter.begin() if op in ("Query", "Scan") else None
        try:
            result = getattr(h, HOT_OPERATIONS[op])()
            members = self.output_members(op)
            answer = {k: v for k, v in result.result.items() if k in members}
            out = Outcome(*response(200, [("Content-Type", JSON_TYPE)], encode(answer)), result=answer)
        except self.http_exception as e:
            out = Outcome(*response(e.code, list(e.get_headers() or []), e.description.encode()),
                          codes=error_codes(e.description))
        except self.service_exception as e:
            status, headers, data = h.serialized(self.action_result(e))
            data = data.encode() if isinstance(data, str) else data
            out = Outcome(*response(int(status), list(headers.items()), data), codes=error_codes(data))
        finally:
            scanned = self.read_meter.end() if reads is not None else None
        self.bill(op, req, writes, scanned, out, backend)
        if limits and out.reads:
            parts = list(out.reads)
            refused = model.refused(op, parts, "r")
            if refused:  # a read has no effect: answer as throttled instead
                return throttled(op, parts, refused, "r")
        if limits:
            model.charge(out.reads, out.writes)
        return out

    def bill(self, op, req, writes, scanned, out, backend):
        ok = out.code == 200
        consistent = bool(req.get("ConsistentRead"))
        if op == "GetItem":
            if ok:
                try:
                    table = backend.get_table(req["TableName"])
                    part = (table.name, _key_id(req["Key"].get(table.hash_key_attr)))
                except Exception:
                    return
                item = (out.result or {}).get("Item")
                out.charge("r", part, read_units(item_size(item), consistent))
            return
        if op == "BatchGetItem":
            # Every item returned, each rounded up on its own (as GetItem),
            # consistent or not per table.
            if ok:
                for name, items in ((out.result or {}).get("Responses") or {}).items():
                    try:
                        table = backend.get_table(name)
                    except Exception:
                        continue
                    strong = bool(((req.get("RequestItems") or {}).get(name) or {}).get("ConsistentRead"))
                    for item in items:
                        part = (table.name, _key_id(item.get(table.hash_key_attr)))
                        out.charge("r", part, read_units(item_size(item), strong))
            return
        if op in ("Query", "Scan"):
            if ok:
                by_part = {}
                for part, size in scanned or []:
                    by_part[part] = by_part.get(part, 0) + size
                if not by_part:
                    by_part[(req.get("TableName"), None)] = 0
                for part, size in by_part.items():
                    out.charge("r", part, read_units(size, consistent))
            return
        if ok:
            for w in writes:
                out.charge("w", w.part, w.units(item_size(stored(w.table, w.key))))
        elif any(c.startswith("ConditionalCheckFailed") for c in out.codes):
            for w in writes:  # the checked item (single write), or the prepare phase
                out.charge("w", w.part, w.units(prepare_only=True))


def throttled(op, parts, refused, kind):
    """The answer DynamoDB gives a call beyond a partition's (or the table's)
    throughput: TransactionCanceledException with ThrottlingError for the
    throttled items of a transaction, else ProvisionedThroughputExceededException
    with its ThrottlingReasons."""
    if op == "TransactWriteItems":
        reasons = [{"Code": "ThrottlingError", "Message": "Throughput exceeds the current capacity of your "
                    "table or index. DynamoDB is automatically scaling your table or index so please try "
                    "again shortly."} if p in refused else {"Code": "None"} for p in parts]
        codes = ", ".join(r["Code"] for r in reasons)
        kind_name = "TransactionCanceledException"
        doc = {"__type": ERROR_PREFIX + kind_name, "CancellationReasons": reasons,
               "Message": f"Transaction cancelled, please refer cancellation reasons for specific reasons [{codes}]"}
    else:
        kind_name = "ProvisionedThroughputExceededException"
        rw = "Write" if kind == "w" else "Read"
        doc = {"__type": ERROR_PREFIX + kind_name,
               "message": "Throughput exceeds the current capacity for one or more partitions of the table.",
               "ThrottlingReasons": [{
                   "reason": f"Table{rw}{'KeyRangeThroughputExceeded' if scope == 'partition' else 'AccountLimitExceeded'}",
                   "resource": f"arn:aws:dynamodb:us-east-1:123456789012:table/{table}"}
                   for (table, _), scope in sorted(refused.items(), key=lambda x: str(x[0]))]}
    headers = [("Content-Type", JSON_TYPE), ("x-amzn-ErrorType", kind_name)]
    out = Outcome(*response(400, headers, json.dumps(doc).encode()), codes=error_codes(json.dumps(doc)))
    return out


def error_codes(description):
    """Cancellation reason codes of a cancelled transaction, else the error type."""
    try:
        doc = json.loads(description)
    except (ValueError, TypeError):
        return []
    reasons = doc.get("CancellationReasons")
    if reasons:
        return sorted({r.get("Code") for r in reasons if r.get("Code") not in (None, "None")})
    kind = doc.get("__type", "")
    return [kind.rsplit("#", 1)[-1]] if kind else []
