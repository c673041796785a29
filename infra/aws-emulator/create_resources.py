#!/usr/bin/env python3
"""Create the Durable Streams AWS resources on the local emulator (idempotent).

    AWS_ENDPOINT_URL=http://127.0.0.1:PORT python create_resources.py

Names come from the environment, with the same defaults as the Rust substrate
(`ds-store-aws`) and template.yaml:

    DS_AWS_TABLE           streams table      (default: durable-streams)
    DS_AWS_BUCKET          chunk bucket       (default: durable-streams-chunks)
    DS_AWS_SCHEDULE_GROUP  scheduler group    (default: durable-streams)

The table mirrors template.yaml: keys pk/sk (strings), on-demand billing, a
OLD_IMAGE stream (what the processor function reads) and TTL on attribute `ttl`. The bucket gets the
lifecycle rule that expires never-committed objects under `pending/`.
Safe to run again: existing resources are left as they are.
"""

import os
import sys

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

TABLE = os.environ.get("DS_AWS_TABLE", "durable-streams")
BUCKET = os.environ.get("DS_AWS_BUCKET", "durable-streams-chunks")
GROUP = os.environ.get("DS_AWS_SCHEDULE_GROUP", "durable-streams")
TTL_ATTRIBUTE = "ttl"
PENDING_PREFIX = "pending/"


def main():
    endpoint = os.environ.get("AWS_ENDPOINT_URL")
    if not endpoint:
        print("create-resources: AWS_ENDPOINT_URL is not set; refusing to touch real AWS",
              file=sys.stderr)
        return 2
    host = endpoint.split("://", 1)[-1].split("/", 1)[0].rsplit(":", 1)[0]
    if host not in ("127.0.0.1", "localhost", "[::1]"):
        print(f"create-resources: {endpoint} is not a loopback endpoint; this script is for "
              "the local emulator only (deploy real resources with template.yaml)",
              file=sys.stderr)
        return 2
    region = os.environ.get("AWS_REGION", "us-east-1")
    cfg = Config(region_name=region, s3={"addressing_style": "path"},
                 retries={"total_max_attempts": 3, "mode": "standard"})
    kw = dict(endpoint_url=endpoint, config=cfg,
              aws_access_key_id=os.environ.get("AWS_ACCESS_KEY_ID", "test"),
              aws_secret_access_key=os.environ.get("AWS_SECRET_ACCESS_KEY", "test"))
    ddb = boto3.client("dynamodb", **kw)
    s3 = boto3.client("s3", **kw)
    scheduler = boto3.client("scheduler", **kw)

    try:
        ddb.create_table(
            TableName=TABLE,
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"},
                                  {"AttributeName": "sk", "AttributeType": "S"}],
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"},
                       {"AttributeName": "sk", "KeyType": "RANGE"}],
            BillingMode="PAY_PER_REQUEST",
            StreamSpecification={"StreamEnabled": True, "StreamViewType": "OLD_IMAGE"},
        )
        ddb.get_waiter("table_exists").wait(TableName=TABLE)
        ddb.update_time_to_live(TableName=TABLE, TimeToLiveSpecification={
            "Enabled": True, "AttributeName": TTL_ATTRIBUTE})
        print(f"create-resources: table {TABLE} created", file=sys.stderr)
    except ClientError as e:
        if e.response["Error"]["Code"] != "ResourceInUseException":
            raise
        print(f"create-resources: table {TABLE} exists", file=sys.stderr)

    try:
        s3.create_bucket(Bucket=BUCKET)
        print(f"create-resources: bucket {BUCKET} created", file=sys.stderr)
    except ClientError as e:
        if e.response["Error"]["Code"] not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
            raise
        print(f"create-resources: bucket {BUCKET} exists", file=sys.stderr)
    s3.put_bucket_lifecycle_configuration(Bucket=BUCKET, LifecycleConfiguration={"Rules": [{
        "ID": "expire-pending-chunks",
        "Filter": {"Prefix": PENDING_PREFIX},
        "Status": "Enabled",
        "Expiration": {"Days": 1},
        "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 1},
    }]})

    try:
        scheduler.create_schedule_group(Name=GROUP)
        print(f"create-resources: schedule group {GROUP} created", file=sys.stderr)
    except ClientError as e:
        if e.response["Error"]["Code"] != "ConflictException":
            raise
        print(f"create-resources: schedule group {GROUP} exists", file=sys.stderr)

    print(f"DS_AWS_TABLE={TABLE}")
    print(f"DS_AWS_BUCKET={BUCKET}")
    print(f"DS_AWS_SCHEDULE_GROUP={GROUP}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
