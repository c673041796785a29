"""Assertions on template.yaml after the SAM transform, done locally.

    python check_template.py --root REPO [--observed CALLS.json] [--build-dir .aws-sam/build]
        [--lambda-dir target/lambda]

Runs in the SAM CLI venv (aws-sam-translator transforms the template the way
CloudFormation's AWS::Serverless transform does; no AWS account, credentials
or network: managed-policy lookups are refused). It checks what a first deploy
would otherwise find out the hard way:

- the Function URL streams (RESPONSE_STREAM) and both AuthType values work:
  NONE has the two public permissions, AWS_IAM has none;
- each function's IAM policy allows every AWS call its code makes, on the
  resources its environment names: the SDK calls found in
  shared/store-aws/src (all of them for the HTTP and processor functions,
  which serve every request path) and shared/processor-aws/src (the
  processor function's own: SQS, revival schedules) and, with --observed, the
  calls each function was seen making at the emulator through the Lambda
  runtime emulator;
- the processor function's event sources: the table stream's mapping
  filters (chunk inserts and TTL removals only), bisects, retries a bounded
  number of times, reports batch item failures and has an SQS on-failure
  destination; the task queue's mapping reports batch item failures, the
  queue dead-letters after a bounded number of receives and stays invisible
  at least a function timeout; the function's role may do what its mappings
  do for it, and the scheduler role may invoke it;
- no S3 lifecycle rule expires objects under a prefix the code never writes,
  or live objects;
- the Rules accept exactly the parameter combinations whose waits end at
  least 5 s before the HTTP function's timeout;
- no function is granted an action its code, its observed calls or its
  mappings never use (the alarm function's use is known from --observed),
  and no grant is on "*";
- nothing fails silently (check_operability.py): on-failure destinations
  for the asynchronously invoked functions, a dead-letter queue for the
  schedules the code creates, dead-letter queues keeping messages longer
  than their sources, alarms on every such queue, on the table stream's
  iterator age and on every function's errors and throttles (notifying the
  optional AlarmTopicArn), the stream view type the processor function
  reads, reserved-concurrency parameters, the scheduler role trusted by this
  account's schedule groups only, ListStreams on the table's streams only;
- an Architecture parameter (default arm64, or x86_64) sets every
  function's architecture (check_packages.py);
- with --build-dir: `sam build` produced a Linux executable for every function;
- with --lambda-dir: `make build-lambda` produced, for each architecture, a
  zip whose bootstrap is a Linux executable for that machine.

Output: one line per check ("ok: ..." / "FAIL: ..."), then
"deploy-check: N passed, N failed"; exit status 1 on any failure.
"""

import argparse
import itertools
import json
import logging
import os
import re
import sys

from check_packages import check_architecture, check_packages, package_self_test
from check_operability import async_destination, check_operability, evaluate, operability_mutations
from template_model import (ACCOUNT, ALARM, HTTP, PROCESSOR, REGION, TIMEOUT_MARGIN_MS, Checks, Resolver, active,
                            allowed, as_list, condition_holds, defaults, forget_transforms, function_env,
                            load_template, mappings, statements, transform)


# AWS API operation -> [(IAM action, resource kind)]. Kinds: table, objects
# (keys in the bucket), bucket (ListBucket, with the key prefix as s3:prefix),
# schedules, scheduler-role (iam:PassRole), queues (every *_QUEUE_URL of the
# function's environment). TransactWriteItems is authorized
# per item action (filled in from the transaction builders the code uses).
IAM_FOR_OPERATION = {
    "GetItem": [("dynamodb:GetItem", "table")],
    "Query": [("dynamodb:Query", "table")],
    "Scan": [("dynamodb:Scan", "table")],
    "PutItem": [("dynamodb:PutItem", "table")],
    "UpdateItem": [("dynamodb:UpdateItem", "table")],
    "DeleteItem": [("dynamodb:DeleteItem", "table")],
    "BatchWriteItem": [("dynamodb:BatchWriteItem", "table")],
    "BatchGetItem": [("dynamodb:BatchGetItem", "table")],
    "TransactGetItems": [("dynamodb:GetItem", "table")],
    "TransactWriteItems": [],
    "PutObject": [("s3:PutObject", "objects")],
    "GetObject": [("s3:GetObject", "objects")],
    "HeadObject": [("s3:GetObject", "objects")],
    "DeleteObject": [("s3:DeleteObject", "objects")],
    "DeleteObjects": [("s3:DeleteObject", "objects")],
    "ListObjectsV2": [("s3:ListBucket", "bucket")],
    "CreateSchedule": [("scheduler:CreateSchedule", "schedules"), ("iam:PassRole", "scheduler-role")],
    "UpdateSchedule": [("scheduler:UpdateSchedule", "schedules"), ("iam:PassRole", "scheduler-role")],
    "DeleteSchedule": [("scheduler:DeleteSchedule", "schedules")],
    "GetSchedule": [("scheduler:GetSchedule", "schedules")],
    "SendMessage": [("sqs:SendMessage", "queues")],
}
TRANSACT_ITEM_ACTIONS = {
    "Put": "dynamodb:PutItem",
    "Update": "dynamodb:UpdateItem",
    "Delete": "dynamodb:DeleteItem",
    "ConditionCheck": "dynamodb:ConditionCheckItem",
}
# SDK calls in the substrate that no Lambda function makes, and why.
NOT_FROM_LAMBDA = {
    "Scan": "the one-off migration of the path index (ds_store_aws::index::backfill), run by an operator "
            "with `durable-streams aws index-paths`; listing streams queries the index",
}
# SDK calls of the substrate the processor function never makes, and why.
NOT_FROM_PROCESSOR = {
    "BatchGetItem": "listing streams (a new subscription's backfill, GET /v1/processors: "
                    "ds_store_aws::index::list) runs on requests only the HTTP function serves",
}


def requests_for(operation, env, key_prefixes, transact_actions, resolver=None):
    """(action, resource, context) triples one call of `operation` needs."""
    if operation not in IAM_FOR_OPERATION:
        return None
    pairs = IAM_FOR_OPERATION[operation]
    if operation == "TransactWriteItems":
        pairs = [(a, "table") for a in sorted(transact_actions)]
    table = f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{env.get('DS_AWS_TABLE')}"
    bucket = f"arn:aws:s3:::{env.get('DS_AWS_BUCKET')}"
    # Every schedule group the function's environment names (expiry; revival).
    groups = [v for k, v in sorted(env.items()) if k.endswith("_SCHEDULE_GROUP")]
    out = []
    for action, kind in pairs:
        if kind == "table":
            out.append((action, table, {}))
        elif kind == "objects":
            out.extend((action, f"{bucket}/{p}digest/incarnation/key", {}) for p in key_prefixes)
        elif kind == "bucket":
            out.extend((action, bucket, {"s3:prefix": f"{p}digest/incarnation/"}) for p in key_prefixes)
        elif kind == "schedules":
            out.extend((action, f"arn:aws:scheduler:{REGION}:{ACCOUNT}:schedule/{g}/ds-0123abcd", {}) for g in groups)
        elif kind == "scheduler-role":
            out.append((action, env.get("DS_AWS_SCHEDULER_ROLE_ARN", ""),
                        {"iam:PassedToService": "scheduler.amazonaws.com"}))
        elif kind == "queues":
            urls = [v for k, v in sorted(env.items()) if k.endswith("_QUEUE_URL")]
            # A queue's Ref (its URL) resolves to `ref:Id`; its ARN is Id's.
            out.extend((action, resolver.arn_of(u[4:]) if resolver and u.startswith("ref:") else u, {})
                       for u in urls or ["(no queue in the environment)"])
    return out


def check_calls(c, cfn, resolver, function_id, operations, source, key_prefixes, transact_actions):
    stmts = statements(cfn, function_id)
    env = function_env(cfn, function_id, resolver)
    for op in sorted(operations):
        needs = requests_for(op, env, key_prefixes, transact_actions, resolver)
        if needs is None:
            c.check(False, f"{function_id}: {op} ({source}) has an IAM mapping",
                    f"add {op} to IAM_FOR_OPERATION in {os.path.basename(__file__)}")
            continue
        missing = [f"{a} on {r}" + (f" with {ctx}" if ctx else "")
                   for a, r, ctx in needs if not allowed(stmts, resolver, a, r, ctx)]
        c.check(not missing, f"{function_id} may call {op} ({source})", "not allowed: " + "; ".join(missing))


# ---------------------------------------------------------------- source

def sdk_operations(root, crate="store-aws"):
    """AWS operations a crate's code calls (`.ddb.op()`, `.s3.op()`, `.scheduler.op()`, `.sqs.op()`,
    or on a client named so: `scheduler.op()` where a helper takes the client as an argument)."""
    ops, items, writes_transactions = set(), set(), False
    src_dir = os.path.join(root, "shared", crate, "src")
    with open(os.path.join(src_dir, "lib.rs"), encoding="utf-8") as f:
        lib = f.read()
    # Modules behind a cargo feature (the tests' emulator set-up) are not in
    # the functions' builds.
    gated_mods = set(re.findall(r"#\[cfg\([^\]]*feature[^\]]*\)\]\s*pub mod (\w+);", lib))
    gated = {f"{m}.rs" for m in gated_mods}
    for dirpath, dirs, files in os.walk(src_dir):
        if dirpath == src_dir:
            dirs[:] = [d for d in dirs if d not in gated_mods]  # a gated module's directory
        for name in files:
            if not name.endswith(".rs") or (dirpath == src_dir and name in gated):
                continue
            with open(os.path.join(dirpath, name), encoding="utf-8") as f:
                text = f.read()
            text = text.split("#[cfg(test)]", 1)[0]
            for m in re.finditer(r"(?:\.|\b)(?:ddb|s3|scheduler|sqs)\s*\.\s*([a-z0-9_]+)\(\)", text):
                if m.group(1) != "clone":  # the client handle, not an operation
                    ops.add("".join(part.capitalize() for part in m.group(1).split("_")))
            # Transaction items are built where their DynamoDB types are
            # imported (plan.rs), not always where the transaction is sent.
            writes_transactions = writes_transactions or "transact_write_items" in text
            imported = {n.strip() for group in re.findall(r"use aws_sdk_dynamodb::types::\{?([^};]*)\}?;", text)
                        for n in group.split(",")}
            for m in re.finditer(r"\b(Put|Update|Delete|ConditionCheck)::builder\(\)", text):
                if m.group(1) in imported:
                    items.add(TRANSACT_ITEM_ACTIONS[m.group(1)])
    return ops, (items if writes_transactions else set())


def object_key_prefixes(root):
    """Top-level S3 key prefixes the code writes (from schema.rs)."""
    with open(os.path.join(root, "shared", "store-aws", "src", "schema.rs"), encoding="utf-8") as f:
        text = f.read()
    return sorted(set(re.findall(r'format!\("([a-z]+/)\{', text)))


# ---------------------------------------------------------------- checks

def check_function_url(c, sam):
    for auth in as_list(sam["Parameters"]["AuthType"]["AllowedValues"]):
        params = {**defaults(sam), "AuthType": auth}
        cfn = transform(sam, params)
        res = cfn["Resources"]
        urls = [r["Properties"] for r in res.values() if r["Type"] == "AWS::Lambda::Url"
                and r["Properties"].get("TargetFunctionArn") == {"Ref": HTTP}]
        c.check(len(urls) == 1 and urls[0].get("InvokeMode") == "RESPONSE_STREAM",
                f"AuthType={auth}: the HTTP function has one Function URL in RESPONSE_STREAM mode", f"{urls}")
        resolver = Resolver(cfn, params)
        auth_type = resolver.resolve(urls[0].get("AuthType")) if urls else None
        c.check(auth_type == auth, f"AuthType={auth}: the URL's AuthType is {auth}", f"got {auth_type}")
        perms = [(lid, r["Properties"]) for lid, r in res.items() if r["Type"] == "AWS::Lambda::Permission"
                 and r["Properties"].get("FunctionName") in ({"Ref": HTTP}, {"Fn::GetAtt": [HTTP, "Arn"]})
                 and active(cfn, lid, params)]
        public = [p for _, p in perms if p.get("Principal") == "*"]
        url_perm = any(p.get("Action") == "lambda:InvokeFunctionUrl" and p.get("FunctionUrlAuthType") == "NONE"
                       for p in public)
        invoke_perm = any(p.get("Action") == "lambda:InvokeFunction"
                          and str(p.get("InvokedViaFunctionUrl")).lower() == "true" for p in public)
        if auth == "NONE":
            c.check(url_perm and invoke_perm,
                    "AuthType=NONE: public lambda:InvokeFunctionUrl and lambda:InvokeFunction "
                    "(InvokedViaFunctionUrl) permissions exist",
                    f"permissions on the HTTP function: {[lid for lid, _ in perms]}")
        else:
            c.check(not public, f"AuthType={auth}: no public permission on the HTTP function",
                    f"{[lid for lid, _ in perms]}")


def actions_of(operations, env, prefixes, transact, resolver):
    return {a for op in operations for a, _, _ in (requests_for(op, env, prefixes, transact, resolver) or [])}


def check_iam(c, sam, root, observed):
    params = defaults(sam)
    cfn = transform(sam, params)
    resolver = Resolver(cfn, params)
    ops, transact = sdk_operations(root)
    prefixes = object_key_prefixes(root)
    c.check(bool(ops) and bool(prefixes), "found the substrate's SDK calls and key prefixes",
            f"calls {sorted(ops)}, prefixes {prefixes}")
    for op in sorted(ops):
        c.check(op in IAM_FOR_OPERATION, f"{op} (in shared/store-aws/src) has an IAM mapping",
                f"add {op} to IAM_FOR_OPERATION")
    from_lambda = {op for op in ops if op not in NOT_FROM_LAMBDA}
    for op, why in NOT_FROM_LAMBDA.items():
        if op in ops:
            c.note(f"{op} is not expected from a Lambda: {why}")
    check_calls(c, cfn, resolver, HTTP, from_lambda, "in the code", prefixes, transact)
    own, own_transact = sdk_operations(root, "processor-aws")
    c.check(bool(own), "found the processor function's own SDK calls (shared/processor-aws/src)", f"{own}")
    for op in sorted(own):
        c.check(op in IAM_FOR_OPERATION, f"{op} (in shared/processor-aws/src) has an IAM mapping",
                f"add {op} to IAM_FOR_OPERATION")
    processor_ops = {op for op in from_lambda if op not in NOT_FROM_PROCESSOR} | own
    for op, why in NOT_FROM_PROCESSOR.items():
        c.note(f"{op} is not made by the processor function: {why}")
    check_calls(c, cfn, resolver, PROCESSOR, processor_ops, "in the code", prefixes, transact | own_transact)
    # What each function uses its role for: its code's calls (the alarm
    # function's only as observed), the calls observed, its mappings.
    used = {HTTP: actions_of(from_lambda, function_env(cfn, HTTP, resolver), prefixes, transact, resolver),
            PROCESSOR: actions_of(processor_ops, function_env(cfn, PROCESSOR, resolver), prefixes,
                                  transact | own_transact, resolver)}
    if observed is None:
        c.note("no --observed calls: the calls seen through the Lambda runtime emulator are checked by make test")
    for function_id, by_service in sorted((observed or {}).items()):
        seen = {op for ops_ in by_service.values() for op in ops_}
        c.check(function_id in cfn["Resources"] and bool(seen), f"{function_id}: calls were observed", f"{by_service}")
        if function_id in cfn["Resources"]:
            check_calls(c, cfn, resolver, function_id, seen, "observed", prefixes, transact)
            env = function_env(cfn, function_id, resolver)
            used.setdefault(function_id, set()).update(actions_of(seen, env, prefixes, transact, resolver))
    for function_id in (HTTP, ALARM, PROCESSOR):
        stmts = [s for s in statements(cfn, function_id) if s.get("Effect") == "Allow"]
        unscoped = sorted({a for s in stmts if "*" in as_list(s.get("Resource", [])) for a in as_list(s["Action"])})
        c.check(not unscoped, f"{function_id}: every grant names its resources", f"on \"*\": {unscoped}")
        if function_id not in used:
            continue
        needs = used[function_id] | {a for a, _ in mapping_needs(cfn, resolver, function_id)}
        granted = {a for s in stmts for a in as_list(s.get("Action", []))}
        unused = sorted(a for a in granted if a not in needs)
        c.check(not unused, f"{function_id}: no unused grant (every action is called by its code or its mappings)",
                f"granted but never used: {unused}")


def check_lifecycle(c, sam, root):
    prefixes = object_key_prefixes(root)
    cfn = transform(sam, defaults(sam))
    for lid, r in cfn["Resources"].items():
        if r["Type"] != "AWS::S3::Bucket":
            continue
        for rule in r.get("Properties", {}).get("LifecycleConfiguration", {}).get("Rules", []):
            # Expiring only noncurrent versions (what a delete left) touches no live object.
            expires = any(k in rule for k in ("ExpirationInDays", "ExpirationDate"))
            if not expires:
                continue
            prefix = rule.get("Prefix", rule.get("Filter", {}).get("Prefix", ""))
            written = [p for p in prefixes if p.startswith(prefix) or prefix.startswith(p)]
            c.check(bool(written), f"{lid} rule {rule.get('Id')}: prefix {prefix!r} matches keys the code writes",
                    f"the code writes only under {prefixes}")
            c.check(not written, f"{lid} rule {rule.get('Id')}: does not expire live objects",
                    f"{prefix!r} covers {written}, where committed chunks and segments live")
    c.check(True, f"S3 key prefixes the code writes: {prefixes}")


def duration_ms(text):
    m = re.fullmatch(r"(\d+)(ms|s|m|h)", str(text))
    if not m:
        return None
    return int(m.group(1)) * {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000}[m.group(2)]


def rules_accept(sam, params):
    cfn = {"Conditions": {}}
    for name, rule in sam.get("Rules", {}).items():
        cond = rule.get("RuleCondition")
        cfn["Conditions"] = {"c": cond} if cond else {}
        if cond and not condition_holds(cfn, "c", params):
            continue
        for a in rule.get("Assertions", []):
            cfn["Conditions"] = {"a": a["Assert"]}
            if not condition_holds(cfn, "a", params):
                return False, f"{name}: {a.get('AssertDescription')}"
    return True, ""


def check_parameters(c, sam):
    p = sam["Parameters"]
    fn = sam["Resources"][HTTP]["Properties"]
    env = fn.get("Environment", {}).get("Variables", {})
    wired = c.check(fn.get("Timeout") == {"Ref": "HttpFunctionTimeoutSeconds"},
                    "HTTP function Timeout = HttpFunctionTimeoutSeconds", f"got {fn.get('Timeout')}")
    for var, param in (("DS_LONG_POLL_TIMEOUT", "LongPollTimeout"), ("DS_SSE_MAX_DURATION", "SseMaxDuration")):
        ok = c.check(env.get(var) == {"Ref": param} and "AllowedValues" in p.get(param, {}),
                     f"{var} = the {param} parameter, chosen from a list", f"{var} is {env.get(var)}")
        wired = wired and ok
        if ok:
            bad = [v for v in p[param]["AllowedValues"] if duration_ms(v) is None]
            c.check(not bad, f"{param} values are durations with a unit", f"{bad}")
    conc = p.get("HttpConcurrentInvocations", {})
    c.check(env.get("DS_LAMBDA_CONCURRENT") == {"Ref": "HttpConcurrentInvocations"}
            and conc.get("Default") == "off" and sorted(conc.get("AllowedValues", [])) == ["off", "on"],
            "DS_LAMBDA_CONCURRENT = the HttpConcurrentInvocations parameter, off by default",
            f"DS_LAMBDA_CONCURRENT is {env.get('DS_LAMBDA_CONCURRENT')}, parameter {conc}")
    if not wired or "AllowedValues" not in p["HttpFunctionTimeoutSeconds"]:
        c.check(False, "the parameters that bound the waits can be checked against the timeout by Rules")
        return
    timeouts = [str(v) for v in p["HttpFunctionTimeoutSeconds"]["AllowedValues"]]
    waits = [str(v) for v in p["LongPollTimeout"]["AllowedValues"]]
    sses = [str(v) for v in p["SseMaxDuration"]["AllowedValues"]]
    wrong = []
    for t, lp, sse in itertools.product(timeouts, waits, sses):
        params = {**defaults(sam), "HttpFunctionTimeoutSeconds": t, "LongPollTimeout": lp, "SseMaxDuration": sse}
        fits = max(duration_ms(lp), duration_ms(sse)) + TIMEOUT_MARGIN_MS <= int(t) * 1000
        accepted, why = rules_accept(sam, params)
        if accepted != fits:
            wrong.append(f"timeout {t}s, long-poll {lp}, SSE {sse}: rules {'accept' if accepted else 'reject'}"
                         f" but the waits {'fit' if fits else 'do not fit'} {why}")
    n = len(timeouts) * len(waits) * len(sses)
    c.check(not wrong, f"Rules accept exactly the {n} combinations' fitting ones", "\n    ".join(wrong[:8]))
    c.check(rules_accept(sam, defaults(sam))[0], "the default parameters pass the Rules")


def check_scheduler_target(c, sam):
    params = defaults(sam)
    cfn = transform(sam, params)
    resolver = Resolver(cfn, params)
    target = function_env(cfn, HTTP, resolver).get("DS_AWS_ALARM_TARGET_ARN")
    c.check(target == resolver.arn_of(ALARM), "schedules target the alarm function", f"{target}")
    role = cfn["Resources"]["SchedulerInvokeRole"]["Properties"]
    stmts = [s for p in role["Policies"] for s in as_list(p["PolicyDocument"]["Statement"])]
    c.check(allowed(stmts, resolver, "lambda:InvokeFunction", target or "", {}),
            "the scheduler role may invoke the alarm function")


def mapping_needs(cfn, resolver, function_id):
    """(action, resource) pairs the function's event source mappings and
    asynchronous-invocation destinations use its role for."""
    needs = []
    for m in mappings(cfn, function_id).values():
        src = m.get("EventSourceArn")
        arn = resolver.resolve(src)
        if src == {"Fn::GetAtt": ["StreamsTable", "StreamArn"]}:
            needs += [(a, arn) for a in ("dynamodb:DescribeStream", "dynamodb:GetRecords",
                                         "dynamodb:GetShardIterator", "dynamodb:ListStreams")]
        else:
            needs += [(a, arn) for a in ("sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes")]
        dest = m.get("DestinationConfig", {}).get("OnFailure", {}).get("Destination")
        if dest:
            needs.append(("sqs:SendMessage", resolver.resolve(dest)))
    queue = async_destination(cfn, function_id)
    if queue:
        needs.append(("sqs:SendMessage", resolver.arn_of(queue)))
    return needs


def check_processor(c, sam):
    params = defaults(sam)
    cfn = transform(sam, params)
    resolver = Resolver(cfn, params)
    res = cfn["Resources"]
    maps = mappings(cfn, PROCESSOR)
    table = [m for m in maps.values() if m.get("EventSourceArn") == {"Fn::GetAtt": ["StreamsTable", "StreamArn"]}]
    ok = c.check(len(table) == 1, "the processor function has one mapping on the table's stream", f"{maps}")
    if ok:
        m = table[0]
        patterns = [json.loads(f["Pattern"]) for f in m.get("FilterCriteria", {}).get("Filters", [])]
        # Chunk inserts of stream partitions only: the path index's sort keys
        # are paths, and a path may start with "c#" (ds_store_aws::schema).
        inserts = [p for p in patterns if p.get("eventName") == ["INSERT"]
                   and p.get("dynamodb", {}).get("Keys", {}).get("pk", {}).get("S") == [{"prefix": "stream#"}]
                   and p.get("dynamodb", {}).get("Keys", {}).get("sk", {}).get("S") == [{"prefix": "c#"}]]
        removals = [p for p in patterns if p.get("eventName") == ["REMOVE"]
                    and p.get("userIdentity", {}).get("principalId") == ["dynamodb.amazonaws.com"]
                    and p.get("dynamodb", {}).get("Keys", {}).get("sk", {}).get("S") == ["meta"]]
        keys = lambda p: p.get("dynamodb", {}).get("Keys", {})
        subscriptions = [p for p in patterns if p.get("eventName") == ["INSERT", "MODIFY"]
                         and keys(p).get("pk", {}).get("S") == [{"prefix": "stream#__ds/subscriptions/"}]
                         and keys(p).get("sk", {}).get("S") == ["r#v1#state"]]
        c.check(len(patterns) == 3 and inserts and removals and subscriptions,
                "the table stream's FilterCriteria let through chunk inserts, TTL removals of meta items and "
                "subscriptions' state records only", f"{patterns}")
        c.check(m.get("StartingPosition") in ("TRIM_HORIZON", "LATEST"), "the table stream's mapping has a StartingPosition")
        c.check(m.get("BisectBatchOnFunctionError") is True, "a failing batch is bisected")
        retries = m.get("MaximumRetryAttempts")
        c.check(isinstance(retries, int) and 0 <= retries <= 10000, "retries of a failing batch are bounded",
                f"MaximumRetryAttempts {retries}")
        c.check("ReportBatchItemFailures" in m.get("FunctionResponseTypes", []),
                "the table stream's mapping takes batch item failures")
        dest = m.get("DestinationConfig", {}).get("OnFailure", {}).get("Destination", {})
        dest_id = dest.get("Fn::GetAtt", [None])[0] if isinstance(dest, dict) else None
        c.check(res.get(dest_id, {}).get("Type") == "AWS::SQS::Queue",
                "records the table stream's mapping gives up on go to an SQS queue", f"{dest}")
    queues = [m for m in maps.values() if res.get((m.get("EventSourceArn") or {}).get("Fn::GetAtt", [None])[0], {})
              .get("Type") == "AWS::SQS::Queue"]
    if c.check(len(queues) == 1, "the processor function has one SQS mapping (background tasks)", f"{maps}"):
        q = queues[0]
        c.check("ReportBatchItemFailures" in q.get("FunctionResponseTypes", []), "the task mapping takes batch item failures")
        qid = q["EventSourceArn"]["Fn::GetAtt"][0]
        props = res[qid].get("Properties", {})
        redrive = props.get("RedrivePolicy", {})
        dlq = (redrive.get("deadLetterTargetArn") or {}).get("Fn::GetAtt", [None])[0]
        c.check(res.get(dlq, {}).get("Type") == "AWS::SQS::Queue" and int(redrive.get("maxReceiveCount", 0)) > 0,
                f"{qid} dead-letters a task after a bounded number of receives", f"{redrive}")
        timeout = int(res[PROCESSOR]["Properties"].get("Timeout", 3))
        c.check(int(props.get("VisibilityTimeout", 30)) >= timeout,
                f"{qid} keeps a received task invisible at least the function's timeout ({timeout} s)")
        env = function_env(cfn, PROCESSOR, resolver)
        c.check(env.get("DS_PROCESSOR_TASK_QUEUE_URL") == f"ref:{qid}", "tasks are enqueued where the mapping reads")
    # What the mappings do as the function's role.
    stmts = statements(cfn, PROCESSOR)
    needs = mapping_needs(cfn, resolver, PROCESSOR)
    missing = [f"{a} on {r}" for a, r in needs if not allowed(stmts, resolver, a, r, {})]
    c.check(bool(needs) and not missing, "the processor function's role may do what its event source mappings do",
            "not allowed: " + "; ".join(missing))
    env = function_env(cfn, PROCESSOR, resolver)
    target = env.get("DS_PROCESSOR_FUNCTION_ARN")
    c.check(target == resolver.arn_of(PROCESSOR), "revival schedules target the processor function", f"{target}")
    role = res["SchedulerInvokeRole"]["Properties"]
    role_stmts = [s for p in role["Policies"] for s in as_list(p["PolicyDocument"]["Statement"])]
    c.check(allowed(role_stmts, resolver, "lambda:InvokeFunction", target or "", {}),
            "the scheduler role may invoke the processor function")


def check_build(c, sam, build_dir):
    for lid, r in sam["Resources"].items():
        if r["Type"] != "AWS::Serverless::Function":
            continue
        path = os.path.join(build_dir, lid, "bootstrap")
        ok = os.path.isfile(path) and os.access(path, os.X_OK)
        head = open(path, "rb").read(20) if ok else b""
        cfn = transform(sam, defaults(sam))
        arch = evaluate(cfn["Resources"][lid]["Properties"].get("Architectures", ["x86_64"]), cfn, defaults(sam))[0]
        machine = {"x86_64": 0x3E, "arm64": 0xB7}[arch]
        is_elf = head[:4] == b"\x7fELF" and head[4] == 2 and int.from_bytes(head[18:20], "little") == machine
        size = os.path.getsize(path) if ok else 0
        c.check(ok and is_elf, f"sam build: {lid}/bootstrap is a 64-bit {arch} Linux executable ({size} bytes)", path)


def run_checks(sam, root, observed=None, build_dir=None, quiet=False, lambda_dir=None):
    c = Checks(quiet)
    check_function_url(c, sam)
    check_iam(c, sam, root, observed)
    check_lifecycle(c, sam, root)
    check_parameters(c, sam)
    check_scheduler_target(c, sam)
    check_processor(c, sam)
    check_operability(c, sam, root)
    check_architecture(c, sam)
    if lambda_dir:
        check_packages(c, sam, lambda_dir)
    if build_dir:
        check_build(c, sam, build_dir)
    return c


def self_test(sam, root):
    """Each check fails on the defect it guards against: re-introduce the
    defects found in review (and one unauthorized observed call) one at a
    time into a copy of the template and expect that check to fail."""

    def without_sid(res, function_id, sid):
        stmts = res[function_id]["Properties"]["Policies"][0]["Statement"]
        res[function_id]["Properties"]["Policies"][0]["Statement"] = [s for s in stmts if s.get("Sid") != sid]

    def drop(res, logical_id):
        res.pop(logical_id)

    def pending_rule(res):
        res["ChunksBucket"]["Properties"]["LifecycleConfiguration"] = {"Rules": [
            {"Id": "expire-pending", "Status": "Enabled", "Prefix": "pending/", "ExpirationInDays": 1}]}

    def loose_rules(t):
        t["Rules"].pop("WaitsFitTimeout60")

    mutations = [
        ("no s3:ListBucket for the HTTP function", lambda t: without_sid(t["Resources"], HTTP, "ChunkListing"),
         None, "HttpFunction may call ListObjectsV2"),
        ("no s3:ListBucket for the alarm function", lambda t: without_sid(t["Resources"], ALARM, "ChunkListing"),
         {ALARM: {"s3": {"ListObjectsV2": 1}}}, "AlarmFunction may call ListObjectsV2"),
        ("an observed call no policy allows", lambda t: None,
         {ALARM: {"s3": {"PutObject": 1}}}, "AlarmFunction may call PutObject"),
        ("lifecycle rule on pending/", lambda t: pending_rule(t["Resources"]),
         None, "matches keys the code writes"),
        ("AuthType NONE without the InvokeFunction permission",
         lambda t: drop(t["Resources"], "HttpFunctionUrlPublicInvoke"), None, "AuthType=NONE: public"),
        ("a timeout whose rule is missing", loose_rules, None, "Rules accept exactly"),
        ("the processor function unable to read the table's stream",
         lambda t: without_sid(t["Resources"], PROCESSOR, "TableStream"), None, "do what its event source mappings do"),
        ("the processor function unable to hand tasks to SQS",
         lambda t: without_sid(t["Resources"], PROCESSOR, "TaskQueue"), None, "ProcessorFunction may call SendMessage"),
        ("a table stream mapping without FilterCriteria",
         lambda t: t["Resources"]["ProcessorTableStream"]["Properties"].pop("FilterCriteria"), None, "FilterCriteria"),
        ("functions fixed on x86_64", lambda t: t["Globals"]["Function"].__setitem__("Architectures", ["x86_64"]),
         None, "Architecture=arm64: every function"),
        ("the concurrent runner on by default",
         lambda t: t["Parameters"]["HttpConcurrentInvocations"].__setitem__("Default", "on"), None,
         "DS_LAMBDA_CONCURRENT = the HttpConcurrentInvocations parameter, off by default"),
        ("a task queue without a dead-letter queue",
         lambda t: t["Resources"]["TaskQueue"]["Properties"].pop("RedrivePolicy"), None, "dead-letters a task"),
    ] + operability_mutations()
    c = Checks()
    for name, mutate, observed, expected in mutations:
        broken = json.loads(json.dumps(sam))
        mutate(broken)
        forget_transforms()
        result = run_checks(broken, root, observed, quiet=True)
        caught = [f for f in result.failures if expected in f]
        c.check(bool(caught), f"self-test: the checks catch {name}", f"failures: {result.failures}")
    forget_transforms()
    return c


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--template")
    ap.add_argument("--observed", help="JSON: {FunctionLogicalId: {service: {Operation: count}}}")
    ap.add_argument("--build-dir")
    ap.add_argument("--lambda-dir", help="make build-lambda's output: <arch>/<function>/bootstrap.zip")
    ap.add_argument("--self-test", action="store_true", help="also check that each check fails on its defect")
    args = ap.parse_args()
    # The translator's metrics are never published: silence its warning about that.
    logging.getLogger("samtranslator.metrics").setLevel(logging.ERROR)
    sam = load_template(args.template or os.path.join(args.root, "template.yaml"))
    observed = None
    if args.observed:
        with open(args.observed, encoding="utf-8") as f:
            observed = json.load(f)
    c = run_checks(sam, args.root, observed, args.build_dir, lambda_dir=args.lambda_dir)
    passed, failed = c.passed, c.failed
    if args.self_test:
        t = self_test(sam, args.root)
        p = package_self_test(sam)
        passed, failed = passed + t.passed + p.passed, failed + t.failed + p.failed
    print(f"deploy-check: {passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
