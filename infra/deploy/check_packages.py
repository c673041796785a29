"""The Lambda packages for every architecture the template allows: the
`Architecture` parameter (default arm64) sets every function's
Architectures, and `make build-lambda` (infra/build-lambda.sh) builds
`<lambda-dir>/<arch>/<function>/bootstrap.zip`, whose `bootstrap` must be a
64-bit Linux executable for that machine. Used by check_template.py:
check_architecture always, check_packages with --lambda-dir, and
package_self_test, which shows check_packages failing on a package of the
wrong architecture (made here: an ELF header is all it reads)."""

import io
import os
import tempfile
import zipfile

from check_operability import evaluate
from template_model import Checks, defaults, transform

ARCH_PARAM = "Architecture"
DEFAULT_ARCH = "arm64"
# ELF e_machine of each Lambda architecture.
MACHINES = {"x86_64": 0x3E, "arm64": 0xB7}


def architectures(sam):
    return sam.get("Parameters", {}).get(ARCH_PARAM, {}).get("AllowedValues", [])


def function_dirs(sam):
    """`lambda-http`, ... : the CodeUri directory names of the functions."""
    return sorted(os.path.basename(r["Properties"]["CodeUri"].rstrip("/")) for r in sam["Resources"].values()
                  if r["Type"] == "AWS::Serverless::Function")


def check_architecture(c, sam):
    param = sam.get("Parameters", {}).get(ARCH_PARAM, {})
    c.check(param.get("Default") == DEFAULT_ARCH and sorted(architectures(sam)) == sorted(MACHINES),
            f"an {ARCH_PARAM} parameter: default {DEFAULT_ARCH}, allowing {sorted(MACHINES)}", f"{param}")
    for arch in architectures(sam):
        params = {**defaults(sam), ARCH_PARAM: arch}
        cfn = transform(sam, params)
        got = {lid: evaluate(r["Properties"].get("Architectures"), cfn, params) for lid, r in cfn["Resources"].items()
               if r["Type"] == "AWS::Lambda::Function"}
        c.check(bool(got) and all(v == [arch] for v in got.values()),
                f"{ARCH_PARAM}={arch}: every function runs on {arch}", f"{got}")


def elf_machine(data):
    """e_machine of a 64-bit little-endian ELF header, else None."""
    if len(data) < 20 or data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return None
    return int.from_bytes(data[18:20], "little")


def check_packages(c, sam, lambda_dir):
    for arch in architectures(sam):
        for fn in function_dirs(sam):
            path = os.path.join(lambda_dir, arch, fn, "bootstrap.zip")
            machine, size = None, 0
            if os.path.isfile(path):
                size = os.path.getsize(path)
                with zipfile.ZipFile(path) as z:
                    if "bootstrap" in z.namelist():
                        with z.open("bootstrap") as f:
                            machine = elf_machine(f.read(64))
            c.check(machine == MACHINES[arch], f"package {arch}/{fn}: bootstrap is a 64-bit {arch} Linux executable "
                    f"({size} bytes zipped)", f"{path}: ELF machine {machine}")


def package_self_test(sam):
    """check_packages fails on a package built for the other architecture."""
    c = Checks()
    with tempfile.TemporaryDirectory() as tmp:
        def package(arch, fn, machine):
            os.makedirs(os.path.join(tmp, arch, fn), exist_ok=True)
            header = b"\x7fELF\x02\x01\x01" + bytes(11) + machine.to_bytes(2, "little") + bytes(44)
            buf = io.BytesIO()
            with zipfile.ZipFile(buf, "w") as z:
                z.writestr("bootstrap", header)
            with open(os.path.join(tmp, arch, fn, "bootstrap.zip"), "wb") as f:
                f.write(buf.getvalue())

        for arch in architectures(sam):
            for fn in function_dirs(sam):
                package(arch, fn, MACHINES[arch])
        good = Checks(quiet=True)
        check_packages(good, sam, tmp)
        c.check(good.failed == 0 and good.passed > 0, "self-test: the package checks pass on packages of each "
                "architecture", f"failures: {good.failures}")
        package("arm64", function_dirs(sam)[0], MACHINES["x86_64"])
        wrong = Checks(quiet=True)
        check_packages(wrong, sam, tmp)
        c.check(any("package arm64/" in f for f in wrong.failures),
                "self-test: the checks catch an x86_64 package where arm64 belongs", f"failures: {wrong.failures}")
    return c
