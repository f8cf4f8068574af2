#!/usr/bin/env python3
# SPDX-License-Identifier: BSL-1.0
"""The docs test (ctest docs.code_blocks): every ```cpp block of README.md and docs/*.md compiles.

Each block becomes one translation unit, wrapped only in what a reader adds to an excerpt:

1. A fixed prelude of standard headers: <algorithm> <chrono> <cstdio> <limits> <memory>
   <string> <system_error> <thread> <utility> <vector>. Nothing else: no coretry or Asio
   header, no `using namespace`, no literals.
2. The block's own `#include` lines, moved to the top of the unit.
3. The rest of the block, as it stands, at file scope when it defines `main`, a `TEST_CASE`, or
   carries the hint `file`; otherwise as the body of a function, `void docs_block(...)`, or
   `asio::awaitable<void> docs_block(...)` when it uses co_await.
4. At most one hint, an HTML comment on the line just above the block (invisible when rendered,
   so every hint names only what the surrounding prose already says), holding `;`-separated
   directives:
     include <h>          an include the prose names (e.g. `include <coretry/presets.hpp>`);
     given <declaration>  a name the excerpt uses from its surroundings: a parameter of the
                          wrapping function (e.g. `given asio::any_io_executor ex`);
     declare <decl>       a file-scope declaration the prose describes (e.g. a helper function);
     literals             `using namespace std::chrono_literals;` in the wrapping function;
     file                 the block is at file scope;
     boost                the block needs coretry built with Boost.Asio (<coretry/beast.hpp>):
                          it is compiled with the --boost-flag flags instead of the --flag ones
                          (CMake passes an include directory whose <coretry/detail/
                          asio_config.hpp> chooses Boost.Asio), or skipped with --skip-boost;
                          `asio` names `boost::asio` in its unit.
   Example: <!-- docs-test: include <coretry/presets.hpp>; given coretry::curl::request req -->
5. A block opts out only with a visible first line `// not compiled: <reason>`.

Units are checked with `-fsyntax-only` (templates are instantiated, nothing is linked).
Usage: compile_blocks.py --cxx g++ --source-dir DIR [--flag=-I...]... [--boost-flag=-I...]...
       [--skip-boost] [--jobs N]
"""
import argparse
import concurrent.futures
import glob
import os
import re
import subprocess
import sys
import tempfile

PRELUDE = [f"#include <{h}>" for h in (
    "algorithm", "chrono", "cstdio", "limits", "memory", "string", "system_error", "thread",
    "utility", "vector")]
HINT = re.compile(r"^<!--\s*docs-test:(.*)-->\s*$")
SKIP = re.compile(r"^\s*//\s*not compiled:\s*\S")


def blocks(path):
    lines = open(path, encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        if lines[i].strip() == "```cpp":
            j = i + 1
            while j < len(lines) and not lines[j].strip().startswith("```"):
                j += 1
            hint = HINT.match(lines[i - 1].strip()) if i > 0 else None
            yield i + 1, (hint.group(1) if hint else ""), lines[i + 1:j]
            i = j
        i += 1


def unit(path, line, hint, body):
    includes, given, declare = [], [], []
    literals = at_file = boost = False
    for d in filter(None, (d.strip() for d in hint.split(";"))):
        word, _, rest = d.partition(" ")
        if word == "include":
            includes.append(f"#include {rest.strip()}")
        elif word == "given":
            given.append(rest.strip())
        elif word == "declare":
            declare.append(rest.strip().rstrip(";") + ";")
        elif word == "literals":
            literals = True
        elif word == "file":
            at_file = True
        elif word == "boost":
            boost = True
        else:
            raise SystemExit(f"{path}:{line}: unknown docs-test directive '{d}'")
    own = [l for l in body if l.lstrip().startswith("#include")]
    rest = [l for l in body if not l.lstrip().startswith("#include")]
    text = "\n".join(rest)
    at_file = at_file or re.search(r"\bint main\s*\(|^TEST_CASE\(", text, re.M) is not None
    # A boost block's wrapper spells asio:: as the others' do: Boost's, once its headers are in.
    alias = ["namespace asio = boost::asio;"] if boost else []
    out = [f"// {path}:{line}"] + PRELUDE + includes + own + alias + declare
    if at_file:
        out += [f'#line {line + 1} "{path}"'] + rest
    else:
        ret = "asio::awaitable<void>" if re.search(r"\bco_(await|return|yield)\b", text) else "void"
        out.append(f"[[maybe_unused]] {ret} docs_block({', '.join(given)}) {{")
        if literals:
            out.append("  using namespace std::chrono_literals;")
        out += [f'#line {line + 1} "{path}"'] + rest + ["}"]
    return "\n".join(out) + "\n", boost


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cxx", default="g++")
    ap.add_argument("--source-dir", required=True)
    ap.add_argument("--flag", action="append", default=[])
    ap.add_argument("--boost-flag", action="append", default=[])
    ap.add_argument("--skip-boost", action="store_true",
                    help="skip the blocks marked boost (no Boost.Asio here)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--keep", help="write the units here and keep them")
    a = ap.parse_args()
    os.chdir(a.source_dir)
    files = ["README.md"] + sorted(glob.glob("docs/*.md"))
    work = a.keep or tempfile.mkdtemp(prefix="docs-blocks-")
    os.makedirs(work, exist_ok=True)
    jobs, skipped = [], []
    for path in files:
        for line, hint, body in blocks(path):
            if body and SKIP.match(body[0]):
                skipped.append(f"{path}:{line}: {body[0].strip()}")
                continue
            text, boost = unit(path, line, hint, body)
            if boost and a.skip_boost:
                skipped.append(f"{path}:{line}: needs Boost.Asio (--skip-boost)")
                continue
            if boost and not a.boost_flag:
                raise SystemExit(f"{path}:{line}: a boost block, and neither --boost-flag "
                                 "nor --skip-boost was given")
            name = os.path.join(work, f"{path.replace('/', '_')}_{line}.cpp")
            with open(name, "w", encoding="utf-8") as f:
                f.write(text)
            jobs.append((f"{path}:{line}", name, a.boost_flag if boost else a.flag))

    def compile_one(job):
        where, name, flags = job
        cmd = [a.cxx, "-std=c++20", "-fsyntax-only", *flags, name]
        r = subprocess.run(cmd, capture_output=True, text=True)
        return where, name, r.returncode, r.stderr

    failed = 0
    with concurrent.futures.ThreadPoolExecutor(a.jobs) as pool:
        for where, name, rc, err in pool.map(compile_one, jobs):
            print(f"{'ok  ' if rc == 0 else 'FAIL'} {where}")
            if rc:
                failed += 1
                print(f"  unit: {name}\n" + "\n".join("  " + l for l in err.splitlines()[:40]))
    for s in skipped:
        print(f"skip {s}")
    print(f"{len(jobs)} blocks compiled, {failed} failed, {len(skipped)} opted out")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
