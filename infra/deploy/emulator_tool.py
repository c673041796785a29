"""Small helpers for infra/conformance-lambda.sh, run with the emulator venv's
python (boto3 against $AWS_ENDPOINT_URL, the local emulator only).

    emulator_tool.py alarm-event PATH      the Input of PATH's expiry schedule (what
                                           EventBridge Scheduler sends the alarm function)
    emulator_tool.py objects               every key in $DS_AWS_BUCKET, one per line
    emulator_tool.py calls-add FILE NAME   add the emulator's call counts (read and reset)
                                           to FILE under NAME: {NAME: {service: {Operation: n}}}
    emulator_tool.py calls-drop            reset the emulator's call counts
"""

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


def take_calls():
    req = urllib.request.Request(f"{ENDPOINT}/_emulator/calls/reset", method="POST")
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.load(resp)["calls"]


def calls_add(file, name):
    calls = take_calls()
    data = {}
    if os.path.exists(file):
        with open(file, encoding="utf-8") as f:
            data = json.load(f)
    mine = data.setdefault(name, {})
    for service, ops in calls.items():
        for op, n in ops.items():
            mine.setdefault(service, {})[op] = mine.get(service, {}).get(op, 0) + n
    with open(file, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1, sort_keys=True)


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "alarm-event":
        alarm_event(args[0])
    elif cmd == "objects":
        objects()
    elif cmd == "calls-add":
        calls_add(args[0], args[1])
    elif cmd == "calls-drop":
        take_calls()
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
