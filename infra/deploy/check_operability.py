"""Checks that nothing fails silently on the transformed template: every
asynchronous failure lands in an SQS queue, dead-letter queues keep their
messages longer than their sources, alarms watch each of those queues, the
table stream's iterator age and every function's errors and throttles
(notifying an optional SNS topic), the table's stream carries only the image
the processor function reads, the processor and alarm functions can be given
reserved concurrency, and the role EventBridge Scheduler assumes trusts only
this account's schedule groups; a processor-lag alarm watches the processor
function's EMF metric; the chunk bucket keeps deleted objects as noncurrent
versions for as long as a table restore reaches back; the stack outputs what
`durable-streams aws redrive` reads. Used by check_template.py (run_checks)."""

import os
import re

from template_model import (ACCOUNT, ALARM, HTTP, PROCESSOR, REGION, Resolver, allowed, as_list, condition_holds,
                            condition_matches, defaults, function_env, mappings, statements, transform)

# Functions something invokes asynchronously (EventBridge Scheduler: expiry
# and revival schedules).
ASYNC_FUNCTIONS = (ALARM, PROCESSOR)
# Functions a crowd of HTTP requests must not starve.
RESERVED_FUNCTIONS = {ALARM: "AlarmReservedConcurrency", PROCESSOR: "ProcessorReservedConcurrency"}
ALARM_TOPIC_PARAM = "AlarmTopicArn"
ITERATOR_AGE_PARAM = "StreamIteratorAgeAlarmMs"
# Where the functions' code finds the schedules' dead-letter queue.
SCHEDULE_DLQ_VAR = "DS_AWS_SCHEDULE_DEAD_LETTER_ARN"
SQS_DEFAULT_RETENTION = 345_600
LAG_PARAM = "ProcessorLagAlarmThreshold"
# The processor function's EMF metric of a processor's lag, in the namespace
# DS_METRICS_NAMESPACE names (shared/processor-aws/src/lag.rs).
LAG_METRIC = "ProcessorLag"
# DynamoDB point-in-time recovery reaches back 35 days.
PITR_DAYS = 35
# What `durable-streams aws` reads (docs/aws.md, "Dead letters and redrive").
REDRIVE_OUTPUTS = ("TaskDeadLetterQueueUrl", "FailedInvocationsQueueUrl", "ScheduleDeadLetterQueueUrl",
                   "ParkedRecordsQueueUrl", "TaskQueueUrl", "RevivalScheduleGroupName", "SchedulerInvokeRoleArn",
                   "ScheduleDeadLetterQueueArn", "ProcessorFunctionArn")


def evaluate(node, cfn, params):
    """A property's value under `params`: Fn::If and Ref of parameters
    resolved, AWS::NoValue as None."""
    if isinstance(node, list):
        return [v for v in (evaluate(n, cfn, params) for n in node) if v is not None]
    if isinstance(node, dict) and len(node) == 1:
        (fn, arg), = node.items()
        if fn == "Fn::If":
            return evaluate(arg[1] if condition_holds(cfn, arg[0], params) else arg[2], cfn, params)
        if fn == "Ref" and arg == "AWS::NoValue":
            return None
        if fn == "Ref" and arg in params:
            return params[arg]
    return node


def logical_id_of(node):
    """`X` of `!GetAtt X.Arn` / `!Ref X`, else None."""
    if isinstance(node, dict) and len(node) == 1:
        (fn, arg), = node.items()
        if fn == "Fn::GetAtt":
            return (arg if isinstance(arg, list) else arg.split(".", 1))[0]
        if fn == "Ref" and isinstance(arg, str):
            return arg
    return None


def invoke_configs(cfn, function_id):
    return [r["Properties"] for r in cfn["Resources"].values() if r["Type"] == "AWS::Lambda::EventInvokeConfig"
            and r["Properties"].get("FunctionName") in ({"Ref": function_id}, {"Fn::GetAtt": [function_id, "Arn"]})]


def async_destination(cfn, function_id):
    """The logical id of the SQS queue the function's failed asynchronous
    invocations go to, or None."""
    for conf in invoke_configs(cfn, function_id):
        qid = logical_id_of(conf.get("DestinationConfig", {}).get("OnFailure", {}).get("Destination"))
        if cfn["Resources"].get(qid, {}).get("Type") == "AWS::SQS::Queue":
            return qid
    return None


def schedule_dead_letter(cfn, resolver, function_id):
    """The queue (logical id) the function's schedules dead-letter to."""
    arn = function_env(cfn, function_id, resolver).get(SCHEDULE_DLQ_VAR)
    return next((lid for lid, r in cfn["Resources"].items()
                 if r["Type"] == "AWS::SQS::Queue" and arn and resolver.arn_of(lid) == arn), None)


def schedule_groups(cfn, resolver):
    """The schedule groups (logical ids) the functions' schedules go to."""
    names = set()
    for lid, r in cfn["Resources"].items():
        if r["Type"] == "AWS::Lambda::Function":
            names |= {v for k, v in function_env(cfn, lid, resolver).items() if k.endswith("_SCHEDULE_GROUP")}
    return sorted(lid for lid, r in cfn["Resources"].items()
                  if r["Type"] == "AWS::Scheduler::ScheduleGroup" and resolver.name_of(lid) in names)


def dead_letter_queues(cfn, resolver):
    """Every queue a failure lands in, with where its messages come from."""
    out = {}
    for lid, r in cfn["Resources"].items():
        redrive = r.get("Properties", {}).get("RedrivePolicy") or {}
        if r["Type"] == "AWS::SQS::Queue" and logical_id_of(redrive.get("deadLetterTargetArn")):
            out[logical_id_of(redrive["deadLetterTargetArn"])] = f"dead letters of {lid}"
        if r["Type"] == "AWS::Lambda::EventSourceMapping":
            dest = logical_id_of(r["Properties"].get("DestinationConfig", {}).get("OnFailure", {}).get("Destination"))
            if dest:
                out[dest] = f"records {lid} gave up on"
        if r["Type"] == "AWS::Lambda::Function":
            if async_destination(cfn, lid):
                out[async_destination(cfn, lid)] = f"failed asynchronous invocations of {lid}"
            if schedule_dead_letter(cfn, resolver, lid):
                out[schedule_dead_letter(cfn, resolver, lid)] = f"undeliverable schedules of {lid}"
    return out


def alarms_on(cfn, namespace, metric, dimension, value):
    return [(lid, r["Properties"]) for lid, r in cfn["Resources"].items()
            if r["Type"] == "AWS::CloudWatch::Alarm" and r["Properties"].get("Namespace") == namespace
            and r["Properties"].get("MetricName") == metric
            and {"Name": dimension, "Value": value} in r["Properties"].get("Dimensions", [])]


def stream_view_needed(root):
    """The view type carrying exactly the images the processor function's
    code reads (`.old_image` / `.new_image` outside tests)."""
    read = set()
    src = os.path.join(root, "shared", "processor-aws", "src")
    for dirpath, _, files in os.walk(src):
        for name in files:
            if name.endswith(".rs"):
                with open(os.path.join(dirpath, name), encoding="utf-8") as f:
                    text = f.read().split("#[cfg(test)]", 1)[0]
                read |= set(re.findall(r"\.\s*(old|new)_image\b", text))
    return {frozenset(): "KEYS_ONLY", frozenset({"old"}): "OLD_IMAGE", frozenset({"new"}): "NEW_IMAGE"}.get(
        frozenset(read), "NEW_AND_OLD_IMAGES")


def check_async_failures(c, cfn, resolver):
    res = cfn["Resources"]
    for fn in ASYNC_FUNCTIONS:
        qid = async_destination(cfn, fn)
        c.check(qid is not None, f"{fn}: asynchronous invocations that fail go to an SQS queue (on-failure destination)",
                f"EventInvokeConfig: {invoke_configs(cfn, fn)}")
        if qid:
            c.check(allowed(statements(cfn, fn), resolver, "sqs:SendMessage", resolver.arn_of(qid), {}),
                    f"{fn}: its role may send to its on-failure destination {qid}")
        dlq = schedule_dead_letter(cfn, resolver, fn)
        c.check(dlq is not None, f"{fn}: the schedules its code creates dead-letter to an SQS queue ({SCHEDULE_DLQ_VAR})",
                f"{SCHEDULE_DLQ_VAR} = {function_env(cfn, fn, resolver).get(SCHEDULE_DLQ_VAR)}")
    dlq = schedule_dead_letter(cfn, resolver, ALARM)
    role = res.get("SchedulerInvokeRole", {}).get("Properties", {})
    role_stmts = [s for p in role.get("Policies", []) for s in as_list(p["PolicyDocument"]["Statement"])]
    if dlq:
        c.check(allowed(role_stmts, resolver, "sqs:SendMessage", resolver.arn_of(dlq), {}),
                f"the scheduler role may send undeliverable schedules to {dlq}")
    for lid, r in res.items():
        props = r.get("Properties", {})
        target = logical_id_of((props.get("RedrivePolicy") or {}).get("deadLetterTargetArn"))
        if r["Type"] != "AWS::SQS::Queue" or not target:
            continue
        source = int(props.get("MessageRetentionPeriod", SQS_DEFAULT_RETENTION))
        kept = int(res.get(target, {}).get("Properties", {}).get("MessageRetentionPeriod", SQS_DEFAULT_RETENTION))
        c.check(kept > source, f"{target} keeps messages longer than its source {lid} ({kept} s > {source} s)")


def check_alarms(c, sam, cfn, resolver):
    queues = dead_letter_queues(cfn, resolver)
    for qid, what in sorted(queues.items()):
        found = alarms_on(cfn, "AWS/SQS", "ApproximateNumberOfMessagesVisible", "QueueName",
                          {"Fn::GetAtt": [qid, "QueueName"]})
        c.check(any(p.get("Threshold") in (0, "0") and p.get("ComparisonOperator") == "GreaterThanThreshold"
                    for _, p in found), f"an alarm on {qid} ({what}) fires on its first message", f"{found}")
    functions = sorted(lid for lid, r in cfn["Resources"].items() if r["Type"] == "AWS::Lambda::Function")
    for fn in functions:
        for metric in ("Errors", "Throttles"):
            found = alarms_on(cfn, "AWS/Lambda", metric, "FunctionName", {"Ref": fn})
            c.check(any(p.get("Threshold") in (0, "0") and p.get("ComparisonOperator") == "GreaterThanThreshold"
                        for _, p in found), f"an alarm on {fn}'s {metric} fires on the first one", f"{found}")
    found = alarms_on(cfn, "AWS/Lambda", "IteratorAge", "FunctionName", {"Ref": PROCESSOR})
    c.check(ITERATOR_AGE_PARAM in sam.get("Parameters", {})
            and any(p.get("Threshold") == {"Ref": ITERATOR_AGE_PARAM} and p.get("Statistic") == "Maximum"
                    for _, p in found),
            f"an alarm on the table stream's IteratorAge (maximum) above the {ITERATOR_AGE_PARAM} parameter",
            f"{found}")
    alarms = sorted(lid for lid, r in cfn["Resources"].items() if r["Type"] == "AWS::CloudWatch::Alarm")
    if not c.check(ALARM_TOPIC_PARAM in sam.get("Parameters", {}) and bool(alarms),
                   f"alarms notify the optional SNS topic parameter {ALARM_TOPIC_PARAM}"):
        return
    topic = f"arn:aws:sns:{REGION}:{ACCOUNT}:ops"
    with_topic = {**defaults(sam), ALARM_TOPIC_PARAM: topic}
    cfn_topic = transform(sam, with_topic)
    wrong = [lid for lid in alarms
             if evaluate(cfn_topic["Resources"][lid]["Properties"].get("AlarmActions", []), cfn_topic, with_topic)
             != [topic]
             or evaluate(cfn["Resources"][lid]["Properties"].get("AlarmActions", []), cfn, defaults(sam))]
    c.check(not wrong, f"every alarm ({len(alarms)}) notifies {ALARM_TOPIC_PARAM} when set, nothing when empty",
            f"wrong actions: {wrong}")


def check_lag_alarm(c, sam, cfn, resolver):
    namespace = function_env(cfn, PROCESSOR, resolver).get("DS_METRICS_NAMESPACE")
    c.check(namespace == resolver.resolve({"Ref": "MetricsNamespace"}),
            "the processor function writes its EMF metrics to the MetricsNamespace parameter's namespace",
            f"DS_METRICS_NAMESPACE = {namespace}")
    found = [(lid, r["Properties"]) for lid, r in cfn["Resources"].items()
             if r["Type"] == "AWS::CloudWatch::Alarm" and r["Properties"].get("MetricName") == LAG_METRIC
             and r["Properties"].get("Namespace") == {"Ref": "MetricsNamespace"}
             and not r["Properties"].get("Dimensions")]
    c.check(LAG_PARAM in sam.get("Parameters", {})
            and any(p.get("Threshold") == {"Ref": LAG_PARAM} and p.get("Statistic") == "Maximum"
                    and p.get("ComparisonOperator") == "GreaterThanThreshold" for _, p in found),
            f"an alarm on the processors' {LAG_METRIC} (maximum over every processor) above the {LAG_PARAM} parameter",
            f"{found}")


def check_chunk_versions(c, cfn):
    bucket = cfn["Resources"]["ChunksBucket"]["Properties"]
    c.check(bucket.get("VersioningConfiguration", {}).get("Status") == "Enabled",
            "the chunk bucket is versioned (a table restore can find objects purged since)")
    days = [int(r["NoncurrentVersionExpiration"]["NoncurrentDays"])
            for r in bucket.get("LifecycleConfiguration", {}).get("Rules", [])
            if r.get("Status") == "Enabled" and "NoncurrentVersionExpiration" in r
            and not r.get("Prefix", r.get("Filter", {}).get("Prefix", ""))]
    c.check(bool(days) and min(days) >= PITR_DAYS,
            f"noncurrent chunk versions expire, after the {PITR_DAYS} days a point-in-time restore reaches back",
            f"NoncurrentDays: {days}")


def check_redrive_outputs(c, cfn):
    missing = [o for o in REDRIVE_OUTPUTS if o not in cfn.get("Outputs", {})]
    c.check(not missing, "the stack outputs what `durable-streams aws redrive` reads", f"missing: {missing}")


def check_capacity(c, sam, cfn, root):
    table = cfn["Resources"]["StreamsTable"]["Properties"]
    view = table.get("StreamSpecification", {}).get("StreamViewType")
    needed = stream_view_needed(root)
    c.check(view == needed, f"the table's StreamViewType is {needed}, what the processor function reads",
            f"the template has {view}")
    for fn, param in RESERVED_FUNCTIONS.items():
        ok = param in sam.get("Parameters", {})
        for value, want in (("7", 7), (sam.get("Parameters", {}).get(param, {}).get("Default", ""), None)):
            params = {**defaults(sam), param: value}
            props = transform(sam, params)["Resources"][fn]["Properties"]
            got = evaluate(props.get("ReservedConcurrentExecutions"), cfn, params)
            want = want if value else None
            ok = ok and (got is None if want is None else str(got) == str(want))
        c.check(ok, f"{fn}: reserved concurrency set by the {param} parameter (none when empty)")


def check_scheduler_trust(c, cfn, resolver):
    role = cfn["Resources"].get("SchedulerInvokeRole", {}).get("Properties", {})
    trust = [s for s in as_list(role.get("AssumeRolePolicyDocument", {}).get("Statement", []))
             if s.get("Effect") == "Allow" and "scheduler.amazonaws.com" in as_list(s.get("Principal", {}).get("Service"))]

    def trusted(account, group_arn):
        context = {"aws:SourceAccount": account, "aws:SourceArn": group_arn}
        cond = {op: {k: resolver.resolve(v) for k, v in tests.items()}
                for op, tests in (trust[0].get("Condition") or {}).items()} if trust else {}
        return bool(trust) and condition_matches(cond, context)

    groups = schedule_groups(cfn, resolver)
    own = [resolver.arn_of(g) for g in groups]
    foreign = f"arn:aws:scheduler:{REGION}:{ACCOUNT}:schedule-group/someone-else"
    c.check(bool(groups) and all(trusted(ACCOUNT, a) for a in own),
            f"EventBridge Scheduler may assume the scheduler role for the schedule groups {groups}")
    c.check(not trusted("210987654321", own[0] if own else foreign),
            "the scheduler role's trust is limited by aws:SourceAccount")
    c.check(not trusted(ACCOUNT, foreign), "the scheduler role's trust is limited by aws:SourceArn (its schedule groups)")


def check_operability(c, sam, root):
    params = defaults(sam)
    cfn = transform(sam, params)
    resolver = Resolver(cfn, params)
    check_async_failures(c, cfn, resolver)
    check_alarms(c, sam, cfn, resolver)
    check_capacity(c, sam, cfn, root)
    check_scheduler_trust(c, cfn, resolver)
    check_lag_alarm(c, sam, cfn, resolver)
    check_chunk_versions(c, cfn)
    check_redrive_outputs(c, cfn)
    stmts = statements(cfn, PROCESSOR)
    stream = resolver.resolve({"Fn::GetAtt": ["StreamsTable", "StreamArn"]})
    other = f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/other/stream/2026-01-01T00:00:00.000"
    c.check(bool(mappings(cfn, PROCESSOR)) and allowed(stmts, resolver, "dynamodb:ListStreams", stream, {})
            and not allowed(stmts, resolver, "dynamodb:ListStreams", other, {}),
            "dynamodb:ListStreams is allowed on the table's streams only")


def operability_mutations():
    """The defects of issue 42's review, one at a time."""

    def props(t, lid):
        return t["Resources"][lid]["Properties"]

    def grant(t, function_id, sid, action):
        stmts = props(t, function_id)["Policies"][0]["Statement"]
        next(s for s in stmts if s.get("Sid") == sid)["Action"].append(action)

    def set_prop(lid, key, value):
        return lambda t: props(t, lid).__setitem__(key, value)

    def trust_account_only(t):
        props(t, "SchedulerInvokeRole")["AssumeRolePolicyDocument"]["Statement"][0]["Condition"]["StringEquals"] \
            .pop("aws:SourceArn")

    def list_streams_anywhere(t):
        stmts = props(t, PROCESSOR)["Policies"][0]["Statement"]
        next(s for s in stmts if s.get("Sid") == "ListTableStreams")["Resource"] = "*"

    alarm_calls = {ALARM: {"dynamodb": {"GetItem": 1, "Query": 1, "BatchWriteItem": 1, "TransactWriteItems": 1},
                           "s3": {"ListObjectsV2": 1, "DeleteObjects": 1},
                           "scheduler": {"CreateSchedule": 1, "UpdateSchedule": 1, "DeleteSchedule": 1}}}
    return [
        ("an alarm function without an on-failure destination",
         lambda t: props(t, ALARM).pop("EventInvokeConfig"), None,
         "AlarmFunction: asynchronous invocations that fail go to an SQS queue"),
        ("a processor function without an on-failure destination",
         lambda t: props(t, PROCESSOR).pop("EventInvokeConfig"), None,
         "ProcessorFunction: asynchronous invocations that fail go to an SQS queue"),
        ("schedules with no dead-letter queue",
         lambda t: t["Globals"]["Function"]["Environment"]["Variables"].pop("DS_AWS_SCHEDULE_DEAD_LETTER_ARN"),
         None, "the schedules its code creates dead-letter"),
        ("a dead-letter queue keeping messages as long as its source",
         set_prop("TaskQueue", "MessageRetentionPeriod", 1209600), None, "keeps messages longer than its source"),
        ("no alarm on the task dead-letter queue",
         lambda t: t["Resources"].pop("TaskDeadLetterQueueAlarm"), None, "an alarm on TaskDeadLetterQueue"),
        ("no alarm on the schedules' dead-letter queue",
         lambda t: t["Resources"].pop("ScheduleDeadLetterQueueAlarm"), None, "an alarm on ScheduleDeadLetterQueue"),
        ("no alarm on the processor function's throttles",
         lambda t: t["Resources"].pop("ProcessorFunctionThrottlesAlarm"), None, "ProcessorFunction's Throttles"),
        ("an iterator-age alarm with a fixed threshold",
         set_prop("StreamIteratorAgeAlarm", "Threshold", 60000), None, "IteratorAge"),
        ("an alarm that notifies nobody", set_prop("HttpFunctionErrorsAlarm", "AlarmActions", []), None,
         "notifies AlarmTopicArn when set"),
        ("the stream view NEW_AND_OLD_IMAGES",
         lambda t: props(t, "StreamsTable")["StreamSpecification"].__setitem__("StreamViewType", "NEW_AND_OLD_IMAGES"),
         None, "StreamViewType is"),
        ("no reserved concurrency for the processor function",
         lambda t: props(t, PROCESSOR).pop("ReservedConcurrentExecutions"), None,
         "ProcessorFunction: reserved concurrency"),
        ("a scheduler trust without aws:SourceArn", trust_account_only, None, "limited by aws:SourceArn"),
        ("dynamodb:ListStreams on every stream", list_streams_anywhere, None, "ListStreams is allowed on the table's"),
        ("scheduler:GetSchedule granted to the HTTP function",
         lambda t: grant(t, HTTP, "ExpirySchedules", "scheduler:GetSchedule"), None, "HttpFunction: no unused grant"),
        ("dynamodb:Scan granted to the processor function",
         lambda t: grant(t, PROCESSOR, "StreamsTable", "dynamodb:Scan"), None, "ProcessorFunction: no unused grant"),
        ("no processor-lag alarm", lambda t: t["Resources"].pop("ProcessorLagAlarm"), None, "ProcessorLag"),
        ("a processor-lag alarm with a fixed threshold", set_prop("ProcessorLagAlarm", "Threshold", 1000), None,
         "ProcessorLag"),
        ("a processor function writing its EMF lines elsewhere",
         lambda t: props(t, PROCESSOR)["Environment"]["Variables"].pop("DS_METRICS_NAMESPACE"), None,
         "writes its EMF metrics"),
        ("an unversioned chunk bucket", lambda t: props(t, "ChunksBucket").pop("VersioningConfiguration"), None,
         "the chunk bucket is versioned"),
        ("noncurrent chunk versions kept forever", lambda t: props(t, "ChunksBucket").pop("LifecycleConfiguration"),
         None, "noncurrent chunk versions expire"),
        ("noncurrent chunk versions gone before a restore could use them",
         lambda t: props(t, "ChunksBucket")["LifecycleConfiguration"]["Rules"][0]["NoncurrentVersionExpiration"]
         .__setitem__("NoncurrentDays", 7), None, "noncurrent chunk versions expire"),
        ("no TaskQueueUrl output", lambda t: t["Outputs"].pop("TaskQueueUrl"), None, "aws redrive"),
        ("scheduler:GetSchedule granted to the alarm function (observed calls)",
         lambda t: grant(t, ALARM, "ExpirySchedules", "scheduler:GetSchedule"), alarm_calls,
         "AlarmFunction: no unused grant"),
    ]
