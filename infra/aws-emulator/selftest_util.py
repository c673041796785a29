"""Helpers shared by the selftest modules: the server under test, boto3
clients without retries, DynamoDB helpers, the check list."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

import boto3
from botocore.config import Config

HERE = os.path.dirname(os.path.abspath(__file__))

CFG = Config(retries={"total_max_attempts": 1, "mode": "standard"},  # no retries: a
             max_pool_connections=32, s3={"addressing_style": "path"},  # retried write
             connect_timeout=5, read_timeout=60)                        # could apply twice


class Server:
    """serve.py in a child process on a free port."""

    def __init__(self, *flags):
        self.dir = tempfile.mkdtemp(prefix="aws-emulator-selftest-")
        port_file = os.path.join(self.dir, "port")
        self.log = open(os.path.join(self.dir, "log"), "w+")
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "serve.py"), "--port", "0",
             "--port-file", port_file, *flags],
            stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.time() + 60
        while not os.path.exists(port_file):
            if self.proc.poll() is not None or time.time() > deadline:
                self.log.seek(0)
                raise RuntimeError("serve.py did not start:\n" + self.log.read()[-3000:])
            time.sleep(0.05)
        with open(port_file) as f:
            self.endpoint = f"http://127.0.0.1:{int(f.read())}"

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def http_json(url, method="GET"):
    req = urllib.request.Request(url, method=method)
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


class Ctx:
    def __init__(self, endpoint):
        self.ep = endpoint
        self.session = boto3.session.Session(aws_access_key_id="test", aws_secret_access_key="test",
                                             region_name="us-east-1")
        self.ddb = self.client("dynamodb")
        self.streams = self.client("dynamodbstreams")

    def client(self, name):
        return self.session.client(name, endpoint_url=self.ep, config=CFG)


# ---------------------------------------------------------------------------
# DynamoDB helpers
# ---------------------------------------------------------------------------

def S(v):
    return {"S": v}


def N(v):
    return {"N": str(v)}


def create_table(ddb, name, range_key=True, stream=True):
    attrs = [{"AttributeName": "pk", "AttributeType": "S"}]
    keys = [{"AttributeName": "pk", "KeyType": "HASH"}]
    if range_key:
        attrs.append({"AttributeName": "sk", "AttributeType": "N"})
        keys.append({"AttributeName": "sk", "KeyType": "RANGE"})
    kw = dict(TableName=name, AttributeDefinitions=attrs, KeySchema=keys,
              BillingMode="PAY_PER_REQUEST")
    if stream:
        kw["StreamSpecification"] = {"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"}
    return ddb.create_table(**kw)["TableDescription"].get("LatestStreamArn")


def all_pages(call, **kw):
    """Every item of a paged Scan or Query (`call` is ddb.scan or ddb.query)."""
    items = []
    while True:
        r = call(**kw)
        items += r["Items"]
        if "LastEvaluatedKey" not in r:
            return items
        kw["ExclusiveStartKey"] = r["LastEvaluatedKey"]


def scan_all(ddb, table):
    return all_pages(ddb.scan, TableName=table, ConsistentRead=True)


def stream_records(streams, arn):
    shards = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]
    out = []
    for sh in shards:
        it = streams.get_shard_iterator(StreamArn=arn, ShardId=sh["ShardId"],
                                        ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
        while it:
            r = streams.get_records(ShardIterator=it, Limit=1000)
            out += r["Records"]
            if not r["Records"]:
                break
            it = r.get("NextShardIterator")
    return out


def batch_fill(ddb, table, pk, start, stop, pad=100):
    reqs = [{"PutRequest": {"Item": {"pk": S(pk), "sk": N(i), "d": S("x" * pad)}}}
            for i in range(start, stop)]
    for i in range(0, len(reqs), 25):
        r = ddb.batch_write_item(RequestItems={table: reqs[i:i + 25]})
        assert not r.get("UnprocessedItems"), r["UnprocessedItems"]


class Checks:
    def __init__(self):
        self.results = []

    def check(self, name, cond, detail=""):
        self.results.append((name, bool(cond), detail))
        print(f"  [{'ok' if cond else 'FAIL'}] {name}{(': ' + detail) if detail else ''}", flush=True)
        return cond

    @property
    def failed(self):
        return [n for n, ok, _ in self.results if not ok]

