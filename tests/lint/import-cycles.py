#!/usr/bin/env python3
"""Import cycles between the source files of each crate.

    python3 tests/lint/import-cycles.py [--graph] [CRATE_DIR ...]

For every crate of the workspace (or the crate directories given), reads
each file under src/ and records which other files of the crate it uses:
`use crate::…`, `use super::…`, `use self::…` and paths like `crate::a::B`
in code. A path is resolved to the file of the module that defines the
item, following `pub use` re-exports (so `use crate::Thing`, re-exported
by lib.rs from thing.rs, counts as a use of thing.rs, not of lib.rs).
`mod` declarations, `pub use` re-exports (followed instead) and
`#[cfg(test)]` modules are not uses. Prints every cycle (a strongly connected set of files, each reaching
the others through uses) and exits 1 if there is one; --graph also prints
every edge. Lines of the form `a.rs -> b.rs: Name, Other`.
"""
import os
import re
import sys
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

USE_RE = re.compile(r"^\s*(pub(?:\([^)]*\))?\s+)?use\s+([^;]+);", re.M)
PATH_RE = re.compile(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)+)")
MOD_RE = re.compile(r"^\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+([a-z_][a-z0-9_]*)\s*;", re.M)
CFG_TEST_MOD_RE = re.compile(r"#\[cfg\(test\)\]\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+([a-z_][a-z0-9_]*)")
PATH_ATTR_RE = re.compile(r'#\[path\s*=\s*"([^"]+)"\]\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+([a-z_][a-z0-9_]*)')


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    # String literals may hold `crate::` (docs in macros); drop them.
    return re.sub(r'"(?:\\.|[^"\\])*"', '""', text)


def strip_test_modules(text):
    """Drops inline `#[cfg(test)] mod name { … }` blocks (their `super` is the file itself)."""
    out, pos = [], 0
    for m in re.finditer(r"#\[cfg\(test\)\]\s*(?:#\[[^\]]*\]\s*)*mod\s+[a-z_][a-z0-9_]*\s*\{", text):
        if m.start() < pos:
            continue
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        out.append(text[pos : m.start()])
        pos = i
    out.append(text[pos:])
    return "".join(out)


def expand_use(tree):
    """`a::{b, c::{d, e}}` -> [a::b, a::c::d, a::c::e] (renames dropped, globs kept)."""
    tree = re.sub(r"\s+as\s+[A-Za-z_][A-Za-z0-9_]*", "", tree)
    tree = re.sub(r"\s+", "", tree)
    out = []

    def walk(prefix, t):
        i = t.find("{")
        if i < 0:
            for part in split_top(t):
                if part:
                    out.append(prefix + part)
            return
        head, body = t[:i], t[i + 1 : t.rfind("}")]
        for part in split_top(body):
            walk(prefix + head, part)

    walk("", tree)
    return [p[:-2] if p.endswith("::") else p for p in out]


def split_top(s):
    parts, depth, cur = [], 0, ""
    for ch in s:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur:
        parts.append(cur)
    return parts


class Crate:
    def __init__(self, src):
        self.src = src
        self.modules = {}  # module path tuple -> file
        self.files = {}  # file -> module path tuple
        self.text = {}
        self.test_only = set()
        self.reexports = defaultdict(dict)  # module -> name -> target module path
        self.globs = defaultdict(list)  # module -> modules it re-exports whole (`pub use m::*`)
        root = os.path.join(src, "lib.rs")
        if not os.path.exists(root):
            root = os.path.join(src, "main.rs")
        self.load((), root, test=False)
        for mod, f in list(self.modules.items()):
            self.read_reexports(mod, f)

    def load(self, mod, path, test):
        if not os.path.exists(path) or path in self.files:
            return
        self.modules[mod] = path
        self.files[path] = mod
        text = strip_comments(open(path, encoding="utf-8").read())
        self.text[path] = text
        if test:
            self.test_only.add(path)
        tests = set(CFG_TEST_MOD_RE.findall(text))
        explicit = {name: p for p, name in PATH_ATTR_RE.findall(text)}
        base = os.path.dirname(path)
        own_dir = base if os.path.basename(path) in ("lib.rs", "main.rs", "mod.rs") else os.path.join(base, os.path.splitext(os.path.basename(path))[0])
        for name in MOD_RE.findall(text):
            if name in explicit:
                child = os.path.normpath(os.path.join(base, explicit[name]))
            else:
                child = os.path.join(own_dir, name + ".rs")
                if not os.path.exists(child):
                    child = os.path.join(own_dir, name, "mod.rs")
            self.load(mod + (name,), child, test or name in tests)

    def absolute(self, mod, segs):
        """Resolve leading crate/super/self of `segs` against module `mod`."""
        if not segs:
            return None
        head, rest = segs[0], segs[1:]
        if head == "crate":
            base = ()
        elif head == "self":
            base = mod
        elif head == "super":
            base = mod[:-1]
            while rest and rest[0] == "super":
                base, rest = base[:-1], rest[1:]
        elif mod + (head,) in self.modules:
            # `use child::Item` from the module that declares `child`.
            return mod + tuple(segs)
        else:
            return None
        return base + tuple(rest)

    def read_reexports(self, mod, f):
        for vis, tree in USE_RE.findall(self.text[f]):
            if not vis:
                continue
            for p in expand_use(tree):
                segs = p.split("::")
                name = segs[-1]
                absolute = self.absolute(mod, segs)
                if absolute is None:
                    continue
                if name == "*":
                    self.globs[mod].append(absolute[:-1])
                else:
                    self.reexports[mod][name] = absolute

    def defines(self, mod, name):
        f = self.modules.get(mod)
        if f is None:
            return False
        item = r"\bpub(?:\([^)]*\))?\s+(?:async\s+)?(?:unsafe\s+)?(?:struct|enum|fn|trait|type|const|static|union|mod)\s+"
        return re.search(item + re.escape(name) + r"\b", self.text[f]) is not None

    def owner(self, path, depth=0):
        """The module (tuple) whose file defines the item at `path`."""
        for cut in range(len(path), -1, -1):
            prefix = path[:cut]
            if prefix in self.modules:
                rest = path[cut:]
                if rest and depth < 16 and rest[0] in self.reexports.get(prefix, {}):
                    return self.owner(self.reexports[prefix][rest[0]] + rest[1:], depth + 1)
                if rest and depth < 16 and not self.defines(prefix, rest[0]):
                    for glob in self.globs.get(prefix, ()):
                        if self.defines(glob, rest[0]) or rest[0] in self.reexports.get(glob, {}):
                            return self.owner(glob + rest, depth + 1)
                return prefix
        return None

    def edges(self):
        out = defaultdict(set)
        for f, mod in self.files.items():
            # Re-exports are followed where they are used, not counted as uses.
            text = strip_test_modules(USE_RE.sub(lambda m: "" if m.group(1) else m.group(0), self.text[f]))
            paths = []
            for _vis, tree in USE_RE.findall(text):
                paths += [p.split("::") for p in expand_use(tree)]
            for head, tail in PATH_RE.findall(text):
                paths.append([head] + tail.strip(":").split("::"))
            for segs in paths:
                absolute = self.absolute(mod, segs)
                if absolute is None:
                    continue
                name = absolute[-1] if absolute else ""
                if name == "*":
                    absolute = absolute[:-1]
                target = self.owner(absolute)
                if target is None or target == mod:
                    continue
                # A child's module file declaring it is not a use of it.
                tf = self.modules[target]
                if tf == f:
                    continue
                out[(f, tf)].add(absolute[-1] if absolute and absolute[-1] != "*" else "*")
        return out


def sccs(nodes, adj):
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in adj.get(v, ()):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(comp)

    sys.setrecursionlimit(10000)
    for v in nodes:
        if v not in index:
            strong(v)
    return out


def crate_dirs():
    out = []
    for group in ("shared", "functions", "tests"):
        base = os.path.join(ROOT, group)
        for name in sorted(os.listdir(base)):
            if os.path.exists(os.path.join(base, name, "Cargo.toml")):
                out.append(os.path.join(base, name))
    return out


def main(argv):
    show = "--graph" in argv
    dirs = [a for a in argv if not a.startswith("--")] or crate_dirs()
    cycles = 0
    for d in dirs:
        crate = Crate(os.path.join(d, "src"))
        edges = crate.edges()
        adj = defaultdict(set)
        for (a, b), names in sorted(edges.items()):
            if a in crate.test_only or b in crate.test_only:
                continue
            adj[a].add(b)
            if show:
                print(f"{os.path.relpath(a, ROOT)} -> {os.path.relpath(b, ROOT)}: {', '.join(sorted(names))}")
        for comp in sccs(sorted(crate.files), adj):
            if len(comp) < 2:
                continue
            cycles += 1
            members = set(comp)
            print(f"cycle in {os.path.relpath(d, ROOT)}:")
            for (a, b), names in sorted(edges.items()):
                if a in members and b in members:
                    print(f"  {os.path.relpath(a, ROOT)} -> {os.path.relpath(b, ROOT)}: {', '.join(sorted(names))}")
    print(f"import cycles: {cycles} ({len(dirs)} crates)")
    return 1 if cycles else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
