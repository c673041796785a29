"""Small helpers for infra/conformance-lambda.sh, run with the emulator venv's
python (boto3 against $AWS_ENDPOINT_URL, the local emulator only).

    emulator_tool.py alarm-event PATH      the Input of PATH's expiry schedule (what
                                           EventBridge Scheduler sends the alarm function)
    emulator_tool.py objects               every key in $DS_AWS_BUCKET, one per line
    emulator_tool.py calls-add FILE NAME   add the emulator's call counts (read and reset)
                                           to FILE under NAME: {NAME: {service: {Operation: n}}}
    emulator_tool.py calls-add FILE NAME=KEY...  the same, per process: the calls signed with
                                           access key id KEY go under NAME, the rest are dropped
    emulator_tool.py calls-drop            reset the emulator's call counts
    emulator_tool.py processor-resources   create the processor function's queues and revival
                                           schedule group; print its DS_PROCESSOR_* settings
    emulator_tool.py stream-event PATH     the table's DynamoDB Stream records of PATH that the
                                           template's FilterCriteria passes (chunk inserts), as
                                           the Lambda event the processor function receives
"""

import base64
import json
import os
import sys
import urllib.request

import boto3

ENDPOINT = os.environ["AWS_ENDPOINT_URL"]
if not ENDPOINT.startswith(("http://127.", "http://localhost")):
    sys.exit(f"emulator_tool: {ENDPOINT} is not a local emulator")


def client(service):
    return boto3.client(service, endpoint_url=ENDPOINT, region_name=os.environ.get("AWS_REGION", "us-east-1"))


def alarm_event(path):
    group = os.environ.get("DS_AWS_SCHEDULE_GROUP", "durable-streams")
    sched = client("scheduler")
    for page in sched.get_paginator("list_schedules").paginate(GroupName=group):
        for s in page["Schedules"]:
            target = sched.get_schedule(GroupName=group, Name=s["Name"])["Target"]
            event = json.loads(target["Input"])
            if event.get("path") == path:
                print(json.dumps(event))
                return
    sys.exit(f"emulator_tool: no expiry schedule for {path}")


def objects():
    s3 = client("s3")
    bucket = os.environ.get("DS_AWS_BUCKET", "durable-streams-chunks")
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for o in page.get("Contents", []):
            print(o["Key"])


def take_counts():
    req = urllib.request.Request(f"{ENDPOINT}/_emulator/calls/reset", method="POST")
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.load(resp)


def take_calls():
    return take_counts()["calls"]


def calls_add(file, *names):
    """NAME: every call since the last take is NAME's; NAME=KEY (one or
    more): the calls signed with access key KEY are NAME's, others dropped."""
    counts = take_counts()
    data = {}
    if os.path.exists(file):
        with open(file, encoding="utf-8") as f:
            data = json.load(f)
    for spec in names:
        name, _, key = spec.partition("=")
        calls = counts.get("by_key", {}).get(key, {}) if key else counts["calls"]
        mine = data.setdefault(name, {})
        for service, ops in calls.items():
            for op, n in ops.items():
                mine.setdefault(service, {})[op] = mine.get(service, {}).get(op, 0) + n
    with open(file, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1, sort_keys=True)


def processor_resources():
    sqs = client("sqs")
    tasks = sqs.create_queue(QueueName="durable-streams-tasks")["QueueUrl"]
    parked = sqs.create_queue(QueueName="durable-streams-parked")["QueueUrl"]
    failed = sqs.create_queue(QueueName="durable-streams-failed-invocations")["QueueUrl"]
    group = "durable-streams-revival"
    sched = client("scheduler")
    try:
        sched.create_schedule_group(Name=group)
    except sched.exceptions.ConflictException:
        pass
    print(f"DS_PROCESSOR_TASK_QUEUE_URL={tasks}")
    print(f"DS_PROCESSOR_PARKED_QUEUE_URL={parked}")
    print(f"DS_PROCESSOR_FAILED_INVOCATIONS_QUEUE_URL={failed}")
    print(f"DS_PROCESSOR_SCHEDULE_GROUP={group}")
    print("DS_PROCESSOR_FUNCTION_ARN=arn:aws:lambda:us-east-1:000000000000:function:lambda-processor")


def lambda_json(value):
    """boto3's view of a record, as Lambda delivers it: binary attributes base64."""
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode()
    if isinstance(value, dict):
        return {k: lambda_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [lambda_json(v) for v in value]
    return value


def stream_event(path):
    """Every record of the table's stream, read from the start of each shard
    as the event source mapping would, filtered like the template's first
    FilterCriteria pattern (INSERT of an item whose sk starts with c#) and to
    PATH's partition, in the Lambda event shape (DynamoDB JSON images)."""
    table = os.environ.get("DS_AWS_TABLE", "durable-streams")
    arn = client("dynamodb").describe_table(TableName=table)["Table"]["LatestStreamArn"]
    streams = client("dynamodbstreams")
    records = []
    for shard in streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]:
        it = streams.get_shard_iterator(
            StreamArn=arn, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        while it:
            out = streams.get_records(ShardIterator=it, Limit=1000)
            for r in out["Records"]:
                keys = r["dynamodb"]["Keys"]
                if r["eventName"] != "INSERT" or not keys["sk"]["S"].startswith("c#"):
                    continue
                if keys["pk"]["S"] != f"stream#{path}":
                    continue
                d = dict(r["dynamodb"])
                if "ApproximateCreationDateTime" in d:
                    d["ApproximateCreationDateTime"] = d["ApproximateCreationDateTime"].timestamp()
                records.append({
                    "eventID": r["eventID"], "eventName": r["eventName"], "eventVersion": r.get("eventVersion", "1.1"),
                    "eventSource": "aws:dynamodb", "awsRegion": r.get("awsRegion", "us-east-1"),
                    "dynamodb": lambda_json(d), "eventSourceARN": arn,
                })
            it = out.get("NextShardIterator") if out["Records"] else None
    if not records:
        sys.exit(f"emulator_tool: no chunk inserts of {path} in the table's stream")
    print(json.dumps({"Records": records}))


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "alarm-event":
        alarm_event(args[0])
    elif cmd == "objects":
        objects()
    elif cmd == "calls-add":
        calls_add(args[0], *args[1:])
    elif cmd == "calls-drop":
        take_calls()
    elif cmd == "processor-resources":
        processor_resources()
    elif cmd == "stream-event":
        stream_event(args[0])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
