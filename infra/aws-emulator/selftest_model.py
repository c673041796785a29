"""selftest.py's checks of the fast path, capacity counting, keep-alive and the
latency and limit model (run by selftest.py; see its docstring)."""

import http.client
import json
import os
import random
import statistics
import threading
import time
import urllib.parse

AUTH = ("AWS4-HMAC-SHA256 Credential=selftest/20260101/us-east-1/dynamodb/aws4_request, "
        "SignedHeaders=host, Signature=0")


def ddb(ep, op, body, conn=None, headers=None):
    """(status, body as JSON, headers) of one raw DynamoDB call."""
    own = conn is None
    if own:
        conn = http.client.HTTPConnection(urllib.parse.urlsplit(ep).netloc, timeout=30)
    try:
        conn.request("POST", "/", json.dumps(body), {
            "X-Amz-Target": f"DynamoDB_20120810.{op}", "Content-Type": "application/x-amz-json-1.0",
            "Authorization": AUTH, **(headers or {})})
        r = conn.getresponse()
        data = r.read()
        return r.status, (json.loads(data) if data else None), dict(r.getheaders())
    finally:
        if own:
            conn.close()


def admin(ep, method, path, body=None):
    conn = http.client.HTTPConnection(urllib.parse.urlsplit(ep).netloc, timeout=30)
    try:
        conn.request(method, path, json.dumps(body) if body is not None else None,
                     {"Content-Type": "application/json"})
        r = conn.getresponse()
        return json.loads(r.read())
    finally:
        conn.close()


def table_body(name):
    return {"TableName": name, "BillingMode": "PAY_PER_REQUEST",
            "AttributeDefinitions": [{"AttributeName": "pk", "AttributeType": "S"},
                                     {"AttributeName": "sk", "AttributeType": "S"}],
            "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
            "StreamSpecification": {"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"}}


def key(pk, sk):
    return {"pk": {"S": pk}, "sk": {"S": sk}}


def sequence(t):
    """Requests covering what the fast path serves: successes, failed
    conditions with ALL_OLD, validation errors, paging, binary values."""
    big = {"B": "AAEC/w==" * 40}
    item = {**key("p", "a"), "n": {"N": "012.50"}, "b": big, "ok": {"BOOL": True}, "nul": {"NULL": True},
            "l": {"L": [{"S": "x"}, {"N": "1"}]}, "m": {"M": {"k": {"SS": ["a", "b"]}, "bs": {"BS": ["AAE="]}}}}
    yield "PutItem", {"TableName": t, "Item": item}
    for i in range(6):
        yield "PutItem", {"TableName": t, "Item": {**key("p", f"c{i}"), "v": {"N": str(i)}, "d": {"S": "x" * 300}}}
    yield "PutItem", {"TableName": t, "Item": {**key("p", "a")}, "ConditionExpression": "attribute_not_exists(pk)",
                      "ReturnValuesOnConditionCheckFailure": "ALL_OLD"}
    yield "PutItem", {"TableName": t, "Item": {**key("p", "z"), "v": {"N": "1"}}, "ReturnValues": "ALL_OLD"}
    yield "GetItem", {"TableName": t, "Key": key("p", "a"), "ConsistentRead": True}
    yield "GetItem", {"TableName": t, "Key": key("p", "missing")}
    yield "GetItem", {"TableName": t, "Key": key("p", "a"), "ProjectionExpression": "#n, b",
                      "ExpressionAttributeNames": {"#n": "n"}}
    yield "GetItem", {"TableName": "no-such-table", "Key": key("p", "a")}
    yield "UpdateItem", {"TableName": t, "Key": key("p", "c1"), "UpdateExpression": "SET v = v + :one, w = :b",
                         "ExpressionAttributeValues": {":one": {"N": "1"}, ":b": big}, "ReturnValues": "ALL_NEW"}
    yield "UpdateItem", {"TableName": t, "Key": key("p", "c2"), "UpdateExpression": "SET v = :x",
                         "ConditionExpression": "v = :y", "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                         "ExpressionAttributeValues": {":x": {"N": "9"}, ":y": {"N": "7"}}}
    yield "UpdateItem", {"TableName": t, "Key": key("p", "c3"), "UpdateExpression": "SET v = :x REMOVE d",
                         "ExpressionAttributeValues": {":x": {"N": "9"}}, "ReturnValues": "UPDATED_OLD"}
    yield "UpdateItem", {"TableName": t, "Key": key("p", "c3"), "UpdateExpression": "SET v = :x",
                         "ExpressionAttributeValues": {":x": {"N": "1"}, ":unused": {"N": "2"}}}
    yield "DeleteItem", {"TableName": t, "Key": key("p", "c4"), "ReturnValues": "ALL_OLD"}
    yield "DeleteItem", {"TableName": t, "Key": key("p", "c5"), "ConditionExpression": "attribute_not_exists(pk)"}
    q = {"TableName": t, "KeyConditionExpression": "pk = :p AND begins_with(sk, :c)", "ConsistentRead": True,
         "ExpressionAttributeValues": {":p": {"S": "p"}, ":c": {"S": "c"}}}
    yield "Query", q
    yield "Query", {**q, "Limit": 2, "ScanIndexForward": False}
    yield "Query", {**q, "Limit": 2, "ExclusiveStartKey": key("p", "c1")}
    yield "Query", {**q, "FilterExpression": "v > :v", "ProjectionExpression": "sk, v",
                    "ExpressionAttributeValues": {**q["ExpressionAttributeValues"], ":v": {"N": "1"}}}
    yield "Scan", {"TableName": t, "ConsistentRead": True, "FilterExpression": "begins_with(sk, :c)",
                   "ExpressionAttributeValues": {":c": {"S": "c"}}}
    yield "Scan", {"TableName": t, "Limit": 3}
    yield "TransactWriteItems", {"TransactItems": [
        {"Update": {"TableName": t, "Key": key("p", "z"), "UpdateExpression": "SET v = :n",
                    "ConditionExpression": "v = :o", "ExpressionAttributeValues": {":n": {"N": "2"}, ":o": {"N": "1"}}}},
        {"Put": {"TableName": t, "Item": {**key("p", "t1"), "d": big}, "ConditionExpression": "attribute_not_exists(pk)"}},
        {"ConditionCheck": {"TableName": t, "Key": key("p", "a"), "ConditionExpression": "attribute_exists(pk)"}},
        {"Delete": {"TableName": t, "Key": key("p", "c0")}}]}
    yield "TransactWriteItems", {"TransactItems": [
        {"Update": {"TableName": t, "Key": key("p", "z"), "UpdateExpression": "SET v = :n",
                    "ConditionExpression": "v = :o", "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                    "ExpressionAttributeValues": {":n": {"N": "3"}, ":o": {"N": "1"}}}},
        {"Put": {"TableName": t, "Item": {**key("p", "t2")}}}]}
    yield "TransactWriteItems", {"TransactItems": [
        {"Put": {"TableName": t, "Item": {**key("p", "t3")}}},
        {"Delete": {"TableName": t, "Key": key("p", "t3")}}]}
    yield "TransactWriteItems", {"TransactItems": [
        {"Update": {"TableName": t, "Key": key("p", "z"), "UpdateExpression": "SET v = v + :s",
                    "ExpressionAttributeValues": {":s": {"S": "text"}}}}]}
    yield "BatchWriteItem", {"RequestItems": {t: [
        {"PutRequest": {"Item": {**key("q", "1"), "b": big}}}, {"DeleteRequest": {"Key": key("p", "c1")}}]}}
    yield "BatchGetItem", {"RequestItems": {t: {"Keys": [key("p", "a"), key("p", "missing")],
                                                 "ConsistentRead": True}}}
    yield "BatchGetItem", {"RequestItems": {t: {"Keys": [key("p", "c2")], "ProjectionExpression": "sk"}}}
    yield "BatchGetItem", {"RequestItems": {"no-such-table": {"Keys": [key("p", "a")]}}}
    yield "Query", {"TableName": t, "KeyConditionExpression": "pk = :p", "ConsistentRead": True,
                    "ExpressionAttributeValues": {":p": {"S": "p"}}}
    yield "Scan", {"TableName": t, "ConsistentRead": True}


def test_fastpath(ck, ep, moto_ep):
    """The same requests answered by the fast path and by moto's whole server."""
    print("fastpath", flush=True)
    t = f"fp_{os.getpid()}_{int(time.time() * 1000) % 10**8}"
    for e in (ep, moto_ep):
        ddb(e, "CreateTable", table_body(t))
    diffs, n = [], 0
    for op, body in sequence(t):
        n += 1
        fast, slow = ddb(ep, op, body), ddb(moto_ep, op, body)
        if (fast[0], fast[1]) != (slow[0], slow[1]):
            diffs.append(f"{op} #{n}: fast {fast[0]} {json.dumps(fast[1])[-300:]} / moto {slow[0]} "
                         f"{json.dumps(slow[1])[-300:]}")
        elif fast[0] >= 400 and fast[2].get("x-amzn-ErrorType") != slow[2].get("x-amzn-ErrorType"):
            diffs.append(f"{op} #{n}: error type header {fast[2].get('x-amzn-ErrorType')} / "
                         f"{slow[2].get('x-amzn-ErrorType')}")
    ck.check(f"fastpath: {n} requests answered exactly as moto's own server answers them",
             not diffs, "; ".join(diffs[:3]))


def test_keep_alive(ck, ep):
    print("keep-alive", flush=True)
    host = urllib.parse.urlsplit(ep).netloc
    conn = http.client.HTTPConnection(host, timeout=30)
    socks = set()
    for _ in range(3):
        status, _, headers = ddb(ep, "ListTables", {}, conn)
        socks.add(id(conn.sock))
    ck.check("keep-alive: three calls on one connection", status == 200 and len(socks) == 1 and conn.sock
             is not None and headers.get("Connection") != "close", f"sockets {len(socks)}")
    conn.close()
    # A chunked request body (no Content-Length) is read to its end, then the next request.
    conn = http.client.HTTPConnection(host, timeout=30)
    body = json.dumps({"TableName": "none"}).encode()
    conn.request("POST", "/", body=iter([body[:5], body[5:]]), encode_chunked=True, headers={
        "X-Amz-Target": "DynamoDB_20120810.DescribeTable", "Content-Type": "application/x-amz-json-1.0",
        "Authorization": AUTH, "Transfer-Encoding": "chunked"})
    r = conn.getresponse()
    first = (r.status, json.loads(r.read()).get("__type", ""))
    status, _, _ = ddb(ep, "ListTables", {}, conn)
    conn.close()
    ck.check("keep-alive: a chunked body is read whole, the connection serves the next call",
             first[0] == 400 and first[1].endswith("ResourceNotFoundException") and status == 200, f"{first}")


def test_capacity(ck, ep):
    """Units per call as DynamoDB bills them (transactions twice)."""
    print("capacity", flush=True)
    t = f"cap_{os.getpid()}_{int(time.time() * 1000) % 10**8}"
    ddb(ep, "CreateTable", table_body(t))
    kb = lambda n: {"S": "x" * (n * 1024 - 40)}  # noqa: E731 (room for keys and names)
    admin(ep, "POST", "/_emulator/calls/reset")
    steps = [
        ("PutItem", {"TableName": t, "Item": {**key("p", "a"), "d": kb(2)}}, 0, 2),
        ("GetItem", {"TableName": t, "Key": key("p", "a"), "ConsistentRead": True}, 1, 0),
        ("GetItem", {"TableName": t, "Key": key("p", "a")}, 0.5, 0),
        ("GetItem", {"TableName": t, "Key": key("p", "none"), "ConsistentRead": True}, 1, 0),
        ("UpdateItem", {"TableName": t, "Key": key("p", "a"), "UpdateExpression": "SET d = :d",
                        "ExpressionAttributeValues": {":d": kb(3)}}, 0, 3),
        ("PutItem", {"TableName": t, "Item": {**key("p", "b"), "d": kb(1)}, "ConditionExpression": "attribute_exists(x)"},
         0, 1),
        ("TransactWriteItems", {"TransactItems": [
            {"Put": {"TableName": t, "Item": {**key("p", "c"), "d": kb(1)}}},
            {"Update": {"TableName": t, "Key": key("p", "a"), "UpdateExpression": "SET v = :v",
                        "ExpressionAttributeValues": {":v": {"N": "1"}}}}]}, 0, 2 * 1 + 2 * 3),
        ("TransactWriteItems", {"TransactItems": [
            {"Put": {"TableName": t, "Item": {**key("p", "d"), "d": kb(1)}}},
            {"ConditionCheck": {"TableName": t, "Key": key("p", "a"), "ConditionExpression": "attribute_not_exists(pk)"}}]},
         0, 1 + 3),
        ("PutItem", {"TableName": t, "Item": {**key("p", "e"), "d": kb(2)}}, 0, 2),
        ("Query", {"TableName": t, "KeyConditionExpression": "pk = :p", "ConsistentRead": True,
                   "FilterExpression": "attribute_exists(nothing)", "ExpressionAttributeValues": {":p": {"S": "p"}}},
         2, 0),  # reads a (3 KB), c (1 KB) and e (2 KB) before the filter drops them all
        ("Scan", {"TableName": t, "Limit": 1}, 0.5, 0),
        # Each item returned, rounded up on its own: a (3 KB) and c (1 KB), consistent.
        ("BatchGetItem", {"RequestItems": {t: {"Keys": [key("p", "a"), key("p", "c"), key("p", "none")],
                                               "ConsistentRead": True}}}, 2, 0),
        ("BatchGetItem", {"RequestItems": {t: {"Keys": [key("p", "a")]}}}, 0.5, 0),
    ]
    bad = []
    for op, body, rcu, wcu in steps:
        before = admin(ep, "GET", "/_emulator/calls")["capacity_total"]
        status, _, _ = ddb(ep, op, body)
        after = admin(ep, "GET", "/_emulator/calls")["capacity_total"]
        got = (round(after["rcu"] - before["rcu"], 3), round(after["wcu"] - before["wcu"], 3))
        if got != (rcu, wcu):
            bad.append(f"{op} (HTTP {status}): rcu/wcu {got}, want {(rcu, wcu)}")
    calls = admin(ep, "GET", "/_emulator/calls")
    codes = calls["error_codes"].get("dynamodb", {})
    ck.check("capacity: read/write units per call (transactions twice, failed conditions charged)",
             not bad, "; ".join(bad))
    before = admin(ep, "GET", "/_emulator/calls")["sdk_retries"].get("dynamodb", {}).get("GetItem", 0)
    for attempt in (1, 2, 3):
        ddb(ep, "GetItem", {"TableName": t, "Key": key("p", "a")},
            headers={"amz-sdk-request": f"attempt={attempt}; max=3"})
    after = admin(ep, "GET", "/_emulator/calls")["sdk_retries"].get("dynamodb", {}).get("GetItem", 0)
    ck.check("counting: requests an SDK sent as its own retry (amz-sdk-request attempt > 1) are counted",
             after - before == 2, f"{before} -> {after}")
    ck.check("capacity: conditional-check failures counted by code",
             codes.get("PutItem", {}).get("ConditionalCheckFailedException") == 1
             and codes.get("TransactWriteItems", {}).get("ConditionalCheckFailed") == 1, json.dumps(codes))


def test_model(ck, ep):
    print("model", flush=True)
    from model import lognormal_ms

    rng = random.Random(7)
    draws = sorted(lognormal_ms(rng, 20.0, 60.0) for _ in range(20000))
    p50, p99 = draws[len(draws) // 2], draws[int(len(draws) * 0.99)]
    ck.check("model: draws have the configured p50 and p99", abs(p50 - 20) < 1 and abs(p99 - 60) < 4,
             f"p50 {p50:.1f} ms, p99 {p99:.1f} ms")

    t = f"mdl_{os.getpid()}_{int(time.time() * 1000) % 10**8}"
    ddb(ep, "CreateTable", table_body(t))
    ddb(ep, "PutItem", {"TableName": t, "Item": key("p", "a")})
    admin(ep, "POST", "/_emulator/model", {"latency": {"dynamodb": {"GetItem": {"p50": 200, "p99": 200}}}})
    each, lock = [], threading.Lock()

    def get():
        t0 = time.monotonic()
        ddb(ep, "GetItem", {"TableName": t, "Key": key("p", "a")})
        with lock:
            each.append(time.monotonic() - t0)

    threads = [threading.Thread(target=get) for _ in range(20)]
    t0 = time.monotonic()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    total = time.monotonic() - t0
    w0 = time.monotonic()
    ddb(ep, "ListTables", {})
    unmodeled = time.monotonic() - w0
    ck.check("model: 20 delayed calls overlap (no lock held while delayed), each takes its draw",
             min(each) >= 0.195 and total < 1.0 and unmodeled < 0.1,
             f"each {min(each):.3f}-{max(each):.3f} s, all {total:.2f} s, ListTables {unmodeled * 1000:.0f} ms")

    admin(ep, "POST", "/_emulator/model", {"latency": False, "limits": {"partition_wcu": 10, "burst_s": 1}})
    codes = []
    for i in range(14):
        status, doc, _ = ddb(ep, "PutItem", {"TableName": t, "Item": {**key("hot", f"i{i}"), "d": {"S": "x" * 900}}})
        codes.append((status, (doc or {}).get("__type", "").rsplit("#", 1)[-1],
                      [r.get("reason") for r in (doc or {}).get("ThrottlingReasons", [])]))
    ok = [c for c in codes if c[0] == 200]
    refused = [c for c in codes if c[0] == 400]
    ck.check("model: a partition beyond its write units is throttled as DynamoDB throttles",
             len(ok) in (10, 11) and refused and all(c[1] == "ProvisionedThroughputExceededException"
                                                     and c[2] == ["TableWriteKeyRangeThroughputExceeded"]
                                                     for c in refused), f"{len(ok)} admitted; {refused[:1]}")
    other = ddb(ep, "PutItem", {"TableName": t, "Item": key("cool", "x")})[0]
    status, doc, _ = ddb(ep, "TransactWriteItems", {"TransactItems": [
        {"Put": {"TableName": t, "Item": key("cool", "y")}}, {"Put": {"TableName": t, "Item": key("hot", "tx")}}]})
    reasons = [r["Code"] for r in (doc or {}).get("CancellationReasons", [])]
    applied = ddb(ep, "GetItem", {"TableName": t, "Key": key("cool", "y"), "ConsistentRead": True})[1]
    ck.check("model: other partitions are served; a transaction touching the hot one is cancelled whole",
             other == 200 and status == 400 and reasons == ["None", "ThrottlingError"] and "Item" not in applied,
             f"{other} {status} {reasons} {applied}")
    time.sleep(1.1)
    again = ddb(ep, "PutItem", {"TableName": t, "Item": {**key("hot", "late"), "d": {"S": "x"}}})[0]
    state = admin(ep, "DELETE", "/_emulator/model")
    off = admin(ep, "GET", "/_emulator/model")
    ck.check("model: the bucket refills; DELETE reports what was throttled and turns the model off",
             again == 200 and state["throttled"].get("PutItem", {}).get("partition", 0) == len(refused)
             and not off["latency_on"] and not off["limits_on"], json.dumps(state["throttled"]))


def median_call_ms(ep, op, body, n=30):
    conn = http.client.HTTPConnection(urllib.parse.urlsplit(ep).netloc, timeout=30)
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        ddb(ep, op, body, conn)
        times.append((time.perf_counter() - t0) * 1000)
    conn.close()
    return statistics.median(times)
