#!/usr/bin/env python3
"""Per-function instructions per request between two callgrind runs.

    diff.py <callgrind.out with n1> <callgrind.out with n2> n1 n2 [--inclusive] [--top N]

Prints (Ir(n2) - Ir(n1)) / (n2 - n1) per function, largest first: where
one more request's instructions go (start-up cancels out).
"""
import re
import subprocess
import sys


def totals(path, inclusive):
    args = ["callgrind_annotate", "--auto=no", "--threshold=100", f"--inclusive={'yes' if inclusive else 'no'}", path]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    result = {}
    for line in out.splitlines():
        m = re.match(r"^\s*([\d,]+) \([^)]*\)\s+(.*)$", line)
        if not m or "PROGRAM TOTALS" in line:
            continue
        name = re.sub(r" \[[^\]]*\]$", "", m.group(2))
        name = re.sub(r"^[^:]*:", "", name, count=1) if not name.startswith("<") else name
        result[name] = result.get(name, 0) + int(m.group(1).replace(",", ""))
    return result


def main():
    a, b, n1, n2 = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    inclusive = "--inclusive" in sys.argv
    top = int(sys.argv[sys.argv.index("--top") + 1]) if "--top" in sys.argv else 60
    ta, tb = totals(a, inclusive), totals(b, inclusive)
    rows = [((tb.get(k, 0) - ta.get(k, 0)) / (n2 - n1), k) for k in set(ta) | set(tb)]
    rows.sort(reverse=True)
    for per, name in rows[:top]:
        print(f"{per:10.0f}  {name[:200]}")


if __name__ == "__main__":
    main()
