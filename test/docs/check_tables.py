#!/usr/bin/env python3
# SPDX-License-Identifier: BSL-1.0
"""The reference-table test (ctest docs.reference_tables): the README's tables against the headers.

- The README's option tables, each after a marker `<!-- reference-table: STRUCT HEADER -->`
  (every struct of `TABLES` must have one; STRUCT is qualified below `coretry`, as
  `http::retry_rules` or `curl::client_options`; the tables of a component this build does not
  have, `coretry::curl`, the Prometheus exporter, `coretry::config`, are skipped with
  `--skip-curl`, `--skip-prometheus`, `--skip-config`), name
  every data member of the struct but those marked `[[deprecated]]`, in declaration order,
  so that designated initializers written in the table's order compile; each row's type is the member's declared type and its
  default the header's initializer: the text is compared (one spelling: durations as literals,
  `nanoseconds::max()` as `unlimited`, an absent initializer as `{}`), and the type and the
  default are compiled (`decltype(STRUCT::field)` against the type; the default initializes a
  variable of that type).
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


def struct_members(header, name):
    """(name, type, initializer) of each data member of `struct name` in `header`, in order, up
    to its first member function; the initializer is "" when the member has none. `name` may be
    qualified (`http::retry_rules`): the header is searched for its last part. A braced
    initializer is kept with its braces (`{408, 429}`), or as `TYPE(N)` for a `std::chrono`
    duration (`std::chrono::seconds stall_timeout{60}`: `std::chrono::seconds(60)`, so `60s`)."""
    text = open(header, encoding="utf-8").read()
    name = name.split("::")[-1]
    m = re.search(r"^struct (?:CORETRY_\w+ )?%s \{$" % re.escape(name), text, re.M)
    if not m:
        raise SystemExit(f"{header}: no `struct {name} {{`")
    decls = []
    for line in text[m.end():].split("\n")[1:]:
        if re.match(r"^  (template\b|(?:CORETRY_\w+ )?[\w:<>]+ \w+\([^)]*\))", line):
            break  # the first member function ends the data members
        if line.startswith("};"):
            break
        decls.append(re.sub(r"//.*", "", line))
    members = []
    for d in " ".join(decls).split(";"):
        d = " ".join(d.split())
        if not d:
            continue
        m = re.match(r"^(?P<type>.+?) (?P<name>\w+) ?(?:= ?(?P<eq>.+)|\{(?P<br>.*)\})?$", d)
        if not m:
            raise SystemExit(f"{header}: cannot read the member declaration `{d}` of {name}")
        if m.group("type").startswith("[[deprecated"):
            continue  # a 0.2 spelling kept beside its new name: the tables use only the new one
        init, br = m.group("eq") or "", (m.group("br") or "").strip()
        if br:
            duration = re.fullmatch(r"std::chrono::(%s)" % "|".join(UNITS), m.group("type"))
            init = f"{m.group('type')}({br})" if duration else "{" + br + "}"
        members.append((m.group("name"), m.group("type"), init))
    return members


UNITS = {"nanoseconds": "ns", "microseconds": "us", "milliseconds": "ms", "seconds": "s",
         "minutes": "min", "hours": "h"}


def canonical_default(expr):
    """One spelling of a default, to compare a header's initializer with a table's: no blanks,
    no `coretry::` or `std::chrono::`, durations as literals (`std::chrono::seconds(60)` is
    `60s`), `nanoseconds::max()` as `unlimited` (its name, policy.hpp), and an empty or absent
    initializer as `{}` (value-initialized: an empty function or pointer, zero)."""
    s = re.sub(r"\s+", "", expr)
    if s in ("", "{}"):
        return "{}"
    s = s.replace("std::chrono::", "").replace("coretry::", "")
    s = re.sub(r"\bnanoseconds::max\(\)", "unlimited", s)
    s = re.sub(r"\bnanoseconds::zero\(\)", "0ns", s)
    return re.sub(r"\b(%s)\((\d+)\)" % "|".join(UNITS), lambda m: m.group(2) + UNITS[m.group(1)],
                  s)


def code_span(cell):
    m = re.search(r"`([^`]+)`", cell)
    return m.group(1) if m else None


# The README's option tables: each follows a marker `<!-- reference-table: STRUCT HEADER -->`
# and lists every data member of STRUCT as `| `field` | `type` | `default` ... | meaning |`,
# in declaration order, so that designated initializers written in the table's order compile.
# STRUCT is qualified below `coretry`; the third entry names the component whose headers hold it
# (None: the core), skipped when this build does not have it.
TABLES = [("retry_policy", "include/coretry/policy.hpp", None),
          ("hedge_options", "include/coretry/hedge.hpp", None),
          ("circuit_breaker_options", "include/coretry/breaker.hpp", None),
          ("ratio_budget_options", "include/coretry/budget.hpp", None),
          ("adaptive_throttle_options", "include/coretry/throttle.hpp", None),
          ("adaptive_rate_options", "include/coretry/rate_limit.hpp", None),
          ("endpoint_registry_options", "include/coretry/registry.hpp", None),
          ("http::retry_rules", "include/coretry/http.hpp", None),
          ("prometheus_options", "include/coretry/prometheus.hpp", "prometheus"),
          ("curl::client_options", "include/coretry/curl/client.hpp", "curl"),
          ("curl::tls_options", "include/coretry/curl/request.hpp", "curl"),
          ("curl::request", "include/coretry/curl/request.hpp", "curl"),
          ("config::grpc_options", "include/coretry/config/json.hpp", "config")]
MARKER = re.compile(r"^<!--\s*reference-table:\s*(\w+(?:::\w+)*)\s+(\S+)\s*-->\s*$")


def readme_tables(readme):
    """{struct: (header, [(line, field, type, default)])} for every marked table."""
    lines = open(readme, encoding="utf-8").read().split("\n")
    tables = {}
    for i, l in enumerate(lines):
        m = MARKER.match(l.strip())
        if not m:
            continue
        rows, in_table = [], False
        for n, row in enumerate(lines[i + 1:], i + 2):
            if not row.startswith("|"):
                if in_table:
                    break
                continue
            in_table = True
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", row)[1:-1]]
            field = re.fullmatch(r"`(\w+)`", cells[0]) if cells else None
            if field and len(cells) >= 4:
                rows.append((n, field.group(1), code_span(cells[1]), code_span(cells[2])))
        tables[m.group(1)] = (m.group(2), rows)
    return tables


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
    for component in ("curl", "prometheus", "config"):
        ap.add_argument(f"--skip-{component}", action="store_true",
                        help=f"this build has no {component}: skip the tables of its structs")
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

    # Each option table: its fields are the struct's, in order; each default is the header's
    # initializer (compared as text, `canonical_default`); each type is the member's declared
    # type and each default a valid value of it (checked by the compiler, below).
    tables = readme_tables("README.md")
    checks = []  # (line, struct, field, type, default) for the compiled check
    checked = []  # the (struct, header) pairs of this build's components
    for struct, header, component in TABLES:
        if component and getattr(a, f"skip_{component}"):
            print(f"skip README {struct} table: this build has no {component}")
            continue
        checked.append((struct, header))
        if struct not in tables:
            bad += 1
            print(f"FAIL README has no `<!-- reference-table: {struct} {header} -->` table")
            continue
        doc_header, rows = tables[struct]
        if doc_header != header:
            bad += 1
            print(f"FAIL README's {struct} table names {doc_header}, the struct is in {header}")
            continue
        code = struct_members(header, struct)
        compare(f"README {struct} field table vs struct {struct} (order too)",
                [r[1] for r in rows], [c[0] for c in code])
        declared = {c[0]: c for c in code}
        wrong = []
        for line, field, type_, default in rows:
            if field not in declared:
                continue
            if type_ is None or default is None:
                wrong.append(f"README.md:{line}: `{field}` needs a `type` and a `default` cell")
                continue
            init = declared[field][2]
            if canonical_default(default) != canonical_default(init):
                wrong.append(f"README.md:{line}: `{field}` defaults to `{default}` in the table, "
                             f"`{init or '{}'}` in {header}")
            checks.append((line, struct, field, type_, default))
        if wrong:
            bad += 1
            print(f"FAIL README {struct} defaults vs {header}:")
            print("\n".join("  " + w for w in wrong))
        else:
            print(f"ok   README {struct} defaults vs {header}: {len(rows)} entries")
    compare("README errc list vs enum class errc (order too)",
            readme_errc("README.md"), errc_values("include/coretry/error.hpp"))

    # The types and defaults, compiled: `decltype(struct::field)` is the table's type, and the
    # table's default initializes it (in the struct's namespace, `coretry` or one below it, as
    # the header names the types; with the chrono literals; a braced default as `T d{...}`).
    headers = sorted({h for _, h in checked})
    unit = ["#include <type_traits>"] + [f"#include <{h[len('include/'):]}>" for h in headers]
    for i, (line, struct, field, type_, default) in enumerate(checks):
        ns = "::".join(["coretry"] + struct.split("::")[:-1])
        name = struct.split("::")[-1]
        if canonical_default(default) == "{}":
            init = "{}"
        elif default.startswith("{"):
            init = default
        else:
            init = f" = {default}"
        unit += [f"namespace {ns} {{",
                 f'#line {line} "README.md"',
                 f"static_assert(std::is_same_v<decltype({name}::{field}), {type_}>, "
                 f'"README.md:{line}: the type of {struct}::{field} is not {type_}");',
                 f"[[maybe_unused]] inline void table_default_{i}() {{",
                 "  using namespace std::chrono_literals;",
                 f'#line {line} "README.md"',
                 f"  [[maybe_unused]] {type_} d{init};",
                 "}", f"}} // namespace {ns}"]
    unit += [""]
    with tempfile.NamedTemporaryFile("w", suffix=".cpp", delete=False) as f:
        f.write("\n".join(unit))
    r = subprocess.run([a.cxx, "-std=c++20", "-fsyntax-only", "-Werror=narrowing", *a.flag,
                        f.name], capture_output=True, text=True)
    os.unlink(f.name)
    if r.returncode:
        bad += 1
        print("FAIL the option tables' types and defaults, compiled:")
        print("\n".join("  " + l for l in r.stderr.splitlines() if "error" in l or "note" in l))
    else:
        print(f"ok   the option tables' types and defaults compile: {len(checks)} fields")

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
