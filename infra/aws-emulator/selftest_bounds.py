"""selftest.py's check of stream_bounds.py: shard iterators expire (the map,
with a fake clock); and, on a second server started with a one-second stream
retention, old stream records are trimmed and GetRecords skips them."""

import time

import stream_bounds
from selftest_util import Ctx, S, Server, create_table


def test_bounds(ck):
    now = [0.0]
    its = stream_bounds.ExpiringIterators(ttl_s=10, clock=lambda: now[0])
    its["a"] = 1
    now[0] = 5
    its["b"] = 2
    now[0] = 11
    its["c"] = 3
    ck.check("bounds: a shard iterator is forgotten once its time to live is past",
             "a" not in its and "b" in its and "c" in its, str(sorted(its)))

    srv = Server("--stream-retention", "1")
    try:
        ctx = Ctx(srv.endpoint)
        ddb, streams = ctx.ddb, ctx.streams
        arn = create_table(ddb, "bounds", range_key=False)
        for i in range(3):
            ddb.put_item(TableName="bounds", Item={"pk": S(f"old{i}")})
        shard = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"][0]["ShardId"]

        def horizon():
            return streams.get_shard_iterator(StreamArn=arn, ShardId=shard,
                                              ShardIteratorType="TRIM_HORIZON")["ShardIterator"]

        def keys(page):
            return [r["dynamodb"]["Keys"]["pk"]["S"] for r in page["Records"]]

        first = streams.get_records(ShardIterator=horizon(), Limit=2)
        ck.check("bounds: records within the retention are all there", keys(first) == ["old0", "old1"],
                 str(keys(first)))
        time.sleep(1.5)
        ddb.put_item(TableName="bounds", Item={"pk": S("new")})
        got = streams.get_records(ShardIterator=horizon(), Limit=10)
        ck.check("bounds: records older than the retention are trimmed, newer ones kept",
                 keys(got) == ["new"], str(keys(got)))
        after = streams.get_records(ShardIterator=got["NextShardIterator"], Limit=10)
        ck.check("bounds: the iterator moves past the last record returned", keys(after) == [], str(keys(after)))
        rest = streams.get_records(ShardIterator=first["NextShardIterator"], Limit=10)
        ck.check("bounds: a reader past part of the trimmed range goes on with what is kept",
                 keys(rest) == ["new"], str(keys(rest)))
    finally:
        srv.stop()
