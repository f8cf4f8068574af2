#!/usr/bin/env python3
# SPDX-License-Identifier: BSL-1.0
"""The initiating-function docs test (ctest docs.initiating_functions): every public initiating
function says what it completes with and how it is cancelled, as Asio documents its own.

- A public function template (in include/coretry, outside every detail/ folder and every
  `namespace detail`) one of whose template parameters is a completion token (its name ends in
  `Token`: `CompletionToken`, `WaitToken`, ...) has a `///` comment holding both
  `@par Completion Signature` and `@par Per-Operation Cancellation`.
- A public function returning `asio::awaitable<...>` (a coroutine front end: `retry_async`,
  `hedge_async`, `curl::retry`, ...) has a `///` comment holding `@par Per-Operation
  Cancellation` (what cancelling the awaiting coroutine's slot does).
- Exempt: a function whose body refuses a braced argument (its body names `REFUSE_BRACED`:
  g++ 12's refusals, which never compile when called), and operators.

The comment is the run of `///` lines right above the declaration (above its `template` line,
when it has one). The headers are read as text: comments and literals are blanked before
braces are counted, and preprocessor lines are passed over.
Usage: check_async_docs.py --source-dir DIR
"""
import argparse
import os
import re
import sys

COMPLETION = "@par Completion Signature"
CANCELLATION = "@par Per-Operation Cancellation"


def blank_code(text):
    """`text` with comments, string and character literals replaced by blanks (newlines kept),
    and preprocessor lines (with their continuations) blanked too: what is left is the code
    whose braces and parentheses count."""
    out = []
    i, n = 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if line_start and c == "#" or (line_start and c in " \t" and
                                        text[i:].lstrip(" \t").startswith("#")):
            # a preprocessor line, with its continuations
            while i < n:
                j = text.find("\n", i)
                j = n if j < 0 else j
                cont = text[i:j].rstrip().endswith("\\")
                out.append(" " * (j - i))
                if j < n:
                    out.append("\n")
                i = j + 1
                if not cont:
                    break
            line_start = True
            continue
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
            continue
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
            continue
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + " " * (j - i - 2) + (c if j - i >= 2 else ""))
            i = j
            line_start = False
            continue
        out.append(c)
        line_start = c == "\n"
        i += 1
    return "".join(out)


def match_angle(code, i):
    """The index just past the `>` closing the `<` at `i`."""
    depth = 0
    while i < len(code):
        if code[i] == "<":
            depth += 1
        elif code[i] == ">":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return len(code)


def match_brace(code, i):
    """The index just past the `}` closing the `{` at `i`."""
    depth = 0
    while i < len(code):
        if code[i] == "{":
            depth += 1
        elif code[i] == "}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return len(code)


KEYWORDS = {"requires", "decltype", "sizeof", "alignof", "noexcept", "static_assert", "if",
            "for", "while", "switch", "return", "template", "operator"}


def doc_comment(lines, first_line):
    """The `///` lines right above line index `first_line`."""
    doc = []
    k = first_line - 1
    while k >= 0 and lines[k].lstrip().startswith("///"):
        doc.append(lines[k].lstrip()[3:])
        k -= 1
    return " ".join(reversed(doc))


def functions(text):
    """(line index of the declaration's first line, name, template parameters or None, the
    declaration up to its body, the body blanked, the body as written; both bodies empty for a
    declaration without one) of each function declared in `text` outside a `namespace
    detail`."""
    code = blank_code(text)
    found = []
    scope = []  # per open brace: the namespace it opens, or None
    i, n = 0, len(code)
    decl_start = 0  # where the current declaration began
    while i < n:
        c = code[i]
        if c == "(":
            # A parameter list (or any parenthesis): braces inside it (`policy = {}`) open no
            # body.
            depth = 0
            while i < n:
                depth += {"(": 1, ")": -1}.get(code[i], 0)
                i += 1
                if depth == 0:
                    break
            continue
        if c == ";":
            # A declaration without a body, at namespace or class scope.
            head = code[decl_start:i]
            in_detail = any(s and "detail" in s.split("::") for s in scope)
            func = None if (scope and scope[-1] is None) or in_detail else parse_function(head)
            if func:
                first = len(head) - len(head.lstrip())
                line = code.count("\n", 0, decl_start + first)
                found.append((line, func[0], func[1], " ".join(head.split()), "", ""))
            decl_start = i + 1
        elif c == "}":
            if scope:
                scope.pop()
            decl_start = i + 1
        elif c == "{":
            head = code[decl_start:i]
            m = re.search(r"\bnamespace\s+([\w:]*)\s*$", head)
            if m:
                scope.append(m.group(1))
                decl_start = i + 1
                i += 1
                continue
            in_detail = any(s and "detail" in s.split("::") for s in scope)
            func = parse_function(head)
            if func and not in_detail:
                end = match_brace(code, i)
                first = len(head) - len(head.lstrip())
                line = code.count("\n", 0, decl_start + first)
                found.append((line, func[0], func[1], " ".join(head.split()), code[i:end],
                              text[i:end]))
                i = end
                decl_start = i
                continue
            # A class's body holds declarations; any other block (a detail function's) none.
            is_class = re.search(r"\b(struct|class|union)\b[^()]*$", " ".join(head.split()))
            scope.append("" if is_class else None)
            decl_start = i + 1
        elif c == ":" and re.search(r"\b(public|private|protected)\s*$", code[decl_start:i]):
            decl_start = i + 1
        i += 1
    return found


def parse_function(head):
    """(name, template parameter text or None) when `head` (the text before a `{`) declares a
    function; else None."""
    h = " ".join(head.split())
    if not h:
        return None
    tparams = None
    if h.startswith("template"):
        lt = h.find("<")
        end = match_angle(h, lt)
        tparams = h[lt + 1:end - 1]
        h = h[end:].strip()
    if re.match(r"^(struct|class|union|enum|namespace|extern)\b", h) or "=" in h.split("(")[0]:
        return None
    for m in re.finditer(r"(~?\w+)\s*\(", h):
        name = m.group(1)
        if name in KEYWORDS:
            continue
        if re.search(r"\boperator\s*$", h[:m.start()]):
            return None
        return name, tparams
    return None


def token_parameter(tparams):
    """Whether a template parameter list names a completion token."""
    return bool(tparams) and re.search(r"\b(class|typename)\s+\w*Token\b", tparams) is not None


def check_file(path, rel):
    text = open(path, encoding="utf-8").read()
    lines = text.split("\n")
    problems = []
    checked = 0
    for line, name, tparams, decl, body_code, body_text in functions(text):
        if "REFUSE_BRACED" in body_code or "REFUSE_BRACED" in body_text:
            continue
        needs = []
        if token_parameter(tparams):
            needs = [COMPLETION, CANCELLATION]
        elif re.search(r"\basio::awaitable\s*<", decl.split(name + "(")[0]):
            needs = [CANCELLATION]
        if not needs:
            continue
        checked += 1
        doc = " ".join(doc_comment(lines, line).split())
        missing = [p for p in needs if p not in doc]
        if missing:
            problems.append(f"{rel}:{line + 1}: {name}: no " + " and no ".join(
                f"`{p}`" for p in missing) + " in its /// comment")
    return checked, problems


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--source-dir", required=True)
    args = ap.parse_args()
    root = os.path.join(args.source_dir, "include", "coretry")
    checked = 0
    problems = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "detail")
        for f in sorted(filenames):
            if not f.endswith(".hpp"):
                continue
            path = os.path.join(dirpath, f)
            c, p = check_file(path, os.path.relpath(path, args.source_dir))
            checked += c
            problems += p
    for p in problems:
        print(p)
    if checked == 0:
        print("no initiating function found: the reader of the headers is broken")
        return 1
    print(f"{checked} initiating functions and coroutine front ends read, "
          f"{len(problems)} without their @par paragraphs")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
