#!/usr/bin/env python3
# SPDX-License-Identifier: BSL-1.0
"""Counts coretry's option surface: the public option structs of include/coretry and their fields.

An option struct is a struct defined at namespace scope in a public header (include/coretry,
not include/coretry/detail, and not inside a `detail` namespace) whose name ends in `_options`,
`_policy` or `_rules`, or is `request` (`curl::request`, the settings of one HTTP call): the
settings a user fills in (`retry_policy`, `hedge_options`, `http::retry_rules`,
`curl::client_options`, ...). The structs the library fills in (events, stats, results,
`curl::response`) are not counted; neither are address types (`endpoint`). With this rule the
tree of d544cb9 counts 11 structs and 99 fields, the figure issue 28 starts from. Its fields are its data members up to its first
member function; a field declared `[[deprecated(...)]]` (a 0.2 spelling kept beside its new name)
is counted apart.

Usage:
  tools/option_surface.py                 # the working tree this script is in
  tools/option_surface.py --rev b155369   # the tree of a commit, read with `git show`
  tools/option_surface.py --list          # also one line per struct
"""
import argparse
import os
import re
import subprocess
import sys

OPTION_NAME = re.compile(r"\w+_(?:options|policy|rules)|request")
STRUCT = re.compile(r"^struct (?:CORETRY_\w+ )?(\w+) \{$")
NAMESPACE_OPEN = re.compile(r"^namespace ([\w:]+) \{")
NAMESPACE_CLOSE = re.compile(r"^\} // namespace")
MEMBER_FUNCTION = re.compile(r"^  (template\b|(?:CORETRY_\w+ )?[\w:<>~]+ ~?\w+\([^)]*\)|\w+\()")


class Tree:
    """The headers of a working tree, or of a commit (`git show REV:PATH`)."""

    def __init__(self, root, rev):
        self.root, self.rev = root, rev

    def headers(self):
        if self.rev:
            out = subprocess.run(["git", "-C", self.root, "ls-tree", "-r", "--name-only", self.rev,
                                  "include/coretry"], check=True, capture_output=True, text=True)
            paths = out.stdout.split()
        else:
            paths = [os.path.relpath(os.path.join(d, f), self.root)
                     for d, _, files in os.walk(os.path.join(self.root, "include/coretry"))
                     for f in files]
        return sorted(p for p in paths if p.endswith(".hpp") and "/detail/" not in p)

    def read(self, path):
        if self.rev:
            return subprocess.run(["git", "-C", self.root, "show", f"{self.rev}:{path}"],
                                  check=True, capture_output=True, text=True).stdout
        with open(os.path.join(self.root, path), encoding="utf-8") as f:
            return f.read()


def fields(lines):
    """(fields, deprecated fields) of the struct whose body starts at lines[0]."""
    decls = []
    for line in lines:
        if line.startswith("};") or MEMBER_FUNCTION.match(line):
            break
        decls.append(re.sub(r"//.*", "", line))
    current, deprecated = [], []
    for d in " ".join(decls).split(";"):
        d = " ".join(d.split())
        if not d or d.startswith(("using ", "static ", "friend ")):
            continue
        name = re.match(r"^(?P<type>.+?) (?P<name>\w+) ?(?:=.*|\{.*\})?$", d)
        if not name:
            raise SystemExit(f"cannot read the member declaration `{d}`")
        (deprecated if d.startswith("[[deprecated") else current).append(name.group("name"))
    return current, deprecated


def option_structs(tree):
    """[(qualified name, header, fields, deprecated fields)] of every option struct."""
    found = []
    for path in tree.headers():
        lines = tree.read(path).split("\n")
        spaces = []
        for i, line in enumerate(lines):
            if NAMESPACE_OPEN.match(line):
                spaces.append(NAMESPACE_OPEN.match(line).group(1))
            elif NAMESPACE_CLOSE.match(line) and spaces:
                spaces.pop()
            m = STRUCT.match(line)
            if not m or not OPTION_NAME.fullmatch(m.group(1)):
                continue
            scope = "::".join(spaces).split("::")
            if "detail" in scope:
                continue
            name = "::".join([s for s in scope if s and s != "coretry"] + [m.group(1)])
            current, deprecated = fields(lines[i + 1:])
            found.append((name, path, current, deprecated))
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                    help="the repository (default: the one holding this script)")
    ap.add_argument("--rev", help="count the tree of this commit instead of the working tree")
    ap.add_argument("--list", action="store_true", help="one line per struct too")
    a = ap.parse_args()
    found = option_structs(Tree(a.root, a.rev))
    if a.list:
        for name, path, current, deprecated in found:
            extra = f" + {len(deprecated)} deprecated ({', '.join(deprecated)})" if deprecated else ""
            print(f"  {name:32} {len(current):3} fields{extra}  {path}")
    n_fields = sum(len(f[2]) for f in found)
    n_deprecated = sum(len(f[3]) for f in found)
    print(f"{a.rev or 'working tree'}: {len(found)} option structs, {n_fields} fields "
          f"(+ {n_deprecated} deprecated)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
