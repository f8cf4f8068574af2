#!/usr/bin/env python3
# SPDX-License-Identifier: BSL-1.0
"""The reference-table test (ctest docs.reference_tables): the README's tables against the headers.

- The README's `retry_policy` field table (the one after "`retry_policy` is an aggregate")
  names every data member of `struct retry_policy` (include/coretry/policy.hpp), in declaration
  order, so that designated initializers written in the table's order compile.
- The README's list of `coretry::errc` values (section "Errors") is the enum of
  include/coretry/error.hpp, in order.
- Every "NNN B copy" of a `retry_policy` in README.md and docs/*.md is its size: each number is
  checked with a static_assert compiled by the compiler under test (-fsyntax-only).
Usage: check_tables.py --source-dir DIR --cxx g++ [--flag=-I...]...
"""
import argparse
import glob
import os
import re
import subprocess
import sys
import tempfile


def policy_members(header):
    text = open(header, encoding="utf-8").read()
    body = text[text.index("struct CORETRY_API retry_policy {"):]
    members = []
    for line in body.split("\n")[1:]:
        if re.match(r"^  (template\b|[\w:<>]+ \w+\([^)]*\))", line):
            break  # the first member function ends the data members
        if line.startswith("};"):
            break
        m = re.match(r"^  (?!//)[^=;{]*?\b(\w+)\s*(=[^;]*|\{[^;]*\})?;\s*$", line)
        if m:
            members.append(m.group(1))
        elif re.match(r"^  (?!/)[^;]*?\b(\w+) =\s*$", line):  # an initializer on the next lines
            members.append(re.match(r"^  [^;]*?\b(\w+) =\s*$", line).group(1))
    return members


def readme_fields(readme):
    lines = open(readme, encoding="utf-8").read().split("\n")
    start = next(i for i, l in enumerate(lines) if "`retry_policy` is an aggregate" in l)
    fields, in_table = [], False
    for l in lines[start + 1:]:
        if l.startswith("|"):
            in_table = True
            m = re.match(r"^\| `(\w+)` \|", l)
            if m:
                fields.append(m.group(1))
        elif in_table:
            break
    return fields


def errc_values(header):
    text = open(header, encoding="utf-8").read()
    body = text[text.index("enum class errc {"):]
    body = body[:body.index("};")]
    body = re.sub(r"//[^\n]*", "", body)
    return re.findall(r"^\s*(\w+)\s*(?:=\s*\d+)?\s*,", body, re.M)


def readme_errc(readme):
    text = open(readme, encoding="utf-8").read()
    section = text[text.index("### Errors"):]
    m = re.search(r'coretry\'s own codes \(`coretry::errc`, category "coretry"\):(.*?)\.\n', section,
                  re.S)
    return re.findall(r"`(\w+)`", m.group(1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--source-dir", required=True)
    ap.add_argument("--cxx", default="g++")
    ap.add_argument("--flag", action="append", default=[])
    ap.add_argument("--skip-size", action="store_true",
                    help="the docs state sizes for x86-64 with libstdc++; skip them elsewhere")
    a = ap.parse_args()
    os.chdir(a.source_dir)
    bad = 0

    def compare(what, doc, code):
        nonlocal bad
        if doc == code:
            print(f"ok   {what}: {len(code)} entries")
            return
        bad += 1
        print(f"FAIL {what}\n  header: {code}\n  doc:    {doc}")
        print(f"  missing from the doc: {[c for c in code if c not in doc]}")
        print(f"  not in the header:    {[d for d in doc if d not in code]}")

    compare("README retry_policy field table vs struct retry_policy (order too)",
            readme_fields("README.md"), policy_members("include/coretry/policy.hpp"))
    compare("README errc list vs enum class errc (order too)",
            readme_errc("README.md"), errc_values("include/coretry/error.hpp"))

    sizes = []
    for path in [] if a.skip_size else ["README.md"] + sorted(glob.glob("docs/*.md")):
        for n, line in enumerate(open(path, encoding="utf-8"), 1):
            for m in re.finditer(r"\b(\d+) B copy\b", line):
                sizes.append((path, n, int(m.group(1))))
    unit = "#include <coretry/policy.hpp>\n" + "".join(
        f'static_assert(sizeof(coretry::retry_policy) == {s}, "{p}:{n} says {s} B");\n'
        for p, n, s in sizes)
    with tempfile.NamedTemporaryFile("w", suffix=".cpp", delete=False) as f:
        f.write(unit)
    r = subprocess.run([a.cxx, "-std=c++20", "-fsyntax-only", *a.flag, f.name],
                       capture_output=True, text=True)
    os.unlink(f.name)
    if r.returncode:
        bad += 1
        print("FAIL sizeof(retry_policy) as the docs state it:")
        print("\n".join("  " + l for l in r.stderr.splitlines() if "error" in l or "note" in l))
    else:
        print(f"ok   sizeof(retry_policy): {len(sizes)} mentions")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
