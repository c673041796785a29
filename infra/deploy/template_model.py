"""What the checks read a template with: the SAM transform (done locally by
aws-sam-translator), an intrinsic resolver, Conditions, and the IAM
evaluation of a role's inline policies. Used by check_template.py and
check_operability.py; no AWS account, credentials or network."""

import fnmatch
import json
import re

from samcli.yamlhelper import yaml_parse

REGION, ACCOUNT, STACK = "us-east-1", "123456789012", "ds-check"
PSEUDO = {
    "AWS::Region": REGION,
    "AWS::AccountId": ACCOUNT,
    "AWS::Partition": "aws",
    "AWS::StackName": STACK,
    "AWS::URLSuffix": "amazonaws.com",
}
# A wait must end this long before the function timeout (see template.yaml's Rules).
TIMEOUT_MARGIN_MS = 5_000
HTTP, ALARM, PROCESSOR = "HttpFunction", "AlarmFunction", "ProcessorFunction"


class Checks:
    def __init__(self, quiet=False):
        self.passed = 0
        self.failures = []
        self.quiet = quiet

    @property
    def failed(self):
        return len(self.failures)

    def check(self, ok, what, detail=""):
        if ok:
            self.passed += 1
        else:
            self.failures.append(what)
        if not self.quiet:
            print(f"ok: {what}" if ok else f"FAIL: {what}" + (f"\n    {detail}" if detail else ""))
        return ok

    def note(self, text):
        if not self.quiet:
            print(f"note: {text}")


# ---------------------------------------------------------------- transform

def load_template(path):
    with open(path, encoding="utf-8") as f:
        return yaml_parse(f.read())


def transform(sam, params):
    """The CloudFormation template CloudFormation would run for `params`."""
    key = json.dumps(params, sort_keys=True)
    if key not in _TRANSFORMED:
        _TRANSFORMED[key] = _transform(sam, params)
    return _TRANSFORMED[key]


_TRANSFORMED = {}


def forget_transforms():
    """Drops the cached transforms (the self-test mutates the template)."""
    _TRANSFORMED.clear()


def _transform(sam, params):
    import boto3
    from samtranslator.parser.parser import Parser
    from samtranslator.translator.translator import Translator

    def no_managed_policy_lookups():
        raise RuntimeError("the template names a managed policy: that lookup needs IAM (an AWS account)")

    sam = json.loads(json.dumps(sam))
    for r in sam.get("Resources", {}).values():
        props = r.get("Properties", {})
        # A local CodeUri is what `sam build`/`sam package` turn into an S3 object.
        if r.get("Type") == "AWS::Serverless::Function" and isinstance(props.get("CodeUri"), str) \
                and not props["CodeUri"].startswith("s3://"):
            props["CodeUri"] = f"s3://sam-artifacts/{props['CodeUri']}"
    values = dict(PSEUDO)
    values.update(params)
    translator = Translator(None, Parser(), boto_session=boto3.session.Session(region_name=REGION))
    return translator.translate(sam, parameter_values=values,
                                get_managed_policy_map=no_managed_policy_lookups)


def defaults(sam):
    return {k: str(v.get("Default")) for k, v in sam.get("Parameters", {}).items() if "Default" in v}


class Resolver:
    """Resolves intrinsics to strings: Ref/GetAtt of resources become
    symbolic names (`ref:Id`) inside ARNs of the right shape."""

    def __init__(self, cfn, params):
        self.resources = cfn.get("Resources", {})
        self.values = dict(PSEUDO)
        self.values.update(params)

    def arn_of(self, logical_id):
        kind = self.resources.get(logical_id, {}).get("Type", "")
        name = self.name_of(logical_id)
        return {
            "AWS::DynamoDB::Table": f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{name}",
            "AWS::S3::Bucket": f"arn:aws:s3:::{name}",
            "AWS::IAM::Role": f"arn:aws:iam::{ACCOUNT}:role/{name}",
            "AWS::Lambda::Function": f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{name}",
            "AWS::SQS::Queue": f"arn:aws:sqs:{REGION}:{ACCOUNT}:{name}",
            "AWS::Scheduler::ScheduleGroup": f"arn:aws:scheduler:{REGION}:{ACCOUNT}:schedule-group/{name}",
        }.get(kind, f"arn:unknown:{logical_id}")

    def name_of(self, logical_id):
        props = self.resources.get(logical_id, {}).get("Properties", {})
        for key in ("FunctionName", "Name", "TableName", "BucketName", "RoleName"):
            if key in props:
                return self.resolve(props[key])
        return f"ref:{logical_id}"

    def resolve(self, node):
        if isinstance(node, str):
            return node
        if isinstance(node, (int, float, bool)):
            return str(node).lower() if isinstance(node, bool) else str(node)
        if isinstance(node, list):
            return [self.resolve(n) for n in node]
        if not isinstance(node, dict) or len(node) != 1:
            return node
        (fn, arg), = node.items()
        if fn == "Ref":
            if arg in self.values:
                return str(self.values[arg])
            return self.name_of(arg) if arg in self.resources else f"ref:{arg}"
        if fn == "Fn::GetAtt":
            logical_id, attr = arg if isinstance(arg, list) else arg.split(".", 1)
            if attr == "Arn":
                return self.arn_of(logical_id)
            if attr == "StreamArn":  # a table's stream: one label per stream the table had
                return f"{self.arn_of(logical_id)}/stream/2026-01-01T00:00:00.000"
            return f"getatt:{logical_id}.{attr}"
        if fn == "Fn::Sub":
            text, extra = (arg, {}) if isinstance(arg, str) else (arg[0], arg[1])
            def sub(m):
                key = m.group(1)
                if key in extra:
                    return self.resolve(extra[key])
                if "." in key:
                    return self.resolve({"Fn::GetAtt": key.split(".", 1)})
                return self.resolve({"Ref": key})
            return re.sub(r"\$\{([^}!]+)\}", sub, text)
        if fn == "Fn::Join":
            return arg[0].join(self.resolve(p) for p in arg[1])
        return node


def condition_holds(cfn, name, params):
    conditions = cfn.get("Conditions", {})

    def ev(node):
        if isinstance(node, dict) and len(node) == 1:
            (fn, arg), = node.items()
            if fn == "Fn::Equals":
                return ev(arg[0]) == ev(arg[1])
            if fn == "Fn::Not":
                return not ev(arg[0])
            if fn == "Fn::And":
                return all(ev(a) for a in arg)
            if fn == "Fn::Or":
                return any(ev(a) for a in arg)
            if fn == "Condition":
                return ev(conditions[arg])
            if fn == "Ref":
                return str(params.get(arg, PSEUDO.get(arg)))
            if fn == "Fn::Contains":
                return ev(arg[1]) in [ev(a) for a in arg[0]]
        if isinstance(node, list):
            return [ev(n) for n in node]
        return str(node)

    return bool(ev(conditions[name])) if name in conditions else bool(ev({"Condition": name}))


def active(cfn, logical_id, params):
    cond = cfn["Resources"][logical_id].get("Condition")
    return cond is None or condition_holds(cfn, cond, params)


# ---------------------------------------------------------------- IAM

def statements(cfn, function_id):
    """Inline policy statements of the function's execution role."""
    fn = cfn["Resources"][function_id]["Properties"]
    role_ref = fn.get("Role", {})
    role_id = role_ref.get("Fn::GetAtt", [None])[0] if isinstance(role_ref, dict) else None
    role = cfn["Resources"].get(role_id, {}).get("Properties", {})
    out = []
    for policy in role.get("Policies", []):
        stmts = policy["PolicyDocument"]["Statement"]
        out.extend(stmts if isinstance(stmts, list) else [stmts])
    return out


def as_list(v):
    return v if isinstance(v, list) else [v]


def condition_matches(cond, context):
    for operator, tests in (cond or {}).items():
        for key, wanted in tests.items():
            got = context.get(key)
            if got is None:
                return False
            wanted = [str(w) for w in as_list(wanted)]
            if operator == "StringEquals" and got not in wanted:
                return False
            if operator == "StringLike" and not any(fnmatch.fnmatchcase(got, w) for w in wanted):
                return False
            if operator == "Bool" and got.lower() not in [w.lower() for w in wanted]:
                return False
            if operator not in ("StringEquals", "StringLike", "Bool"):
                return False  # unknown operator: do not count it as allowing
    return True


def allowed(stmts, resolver, action, resource, context):
    def matches(st):
        actions = [a.lower() for a in as_list(st.get("Action", []))]
        if not any(fnmatch.fnmatchcase(action.lower(), a) for a in actions):
            return False
        resources = [resolver.resolve(r) for r in as_list(st.get("Resource", []))]
        if not any(fnmatch.fnmatchcase(resource, r) for r in resources):
            return False
        return condition_matches(st.get("Condition"), context)

    if any(st.get("Effect") == "Deny" and matches(st) for st in stmts):
        return False
    return any(st.get("Effect") == "Allow" and matches(st) for st in stmts)


def function_env(cfn, function_id, resolver):
    env = cfn["Resources"][function_id]["Properties"].get("Environment", {}).get("Variables", {})
    return {k: resolver.resolve(v) for k, v in env.items()}


def mappings(cfn, function_id):
    """The event source mappings of a function, by logical id."""
    return {lid: r["Properties"] for lid, r in cfn["Resources"].items()
            if r["Type"] == "AWS::Lambda::EventSourceMapping"
            and r["Properties"].get("FunctionName") in ({"Ref": function_id}, {"Fn::GetAtt": [function_id, "Arn"]})}
