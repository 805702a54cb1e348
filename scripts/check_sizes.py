#!/usr/bin/env python3
"""Lists the source files over 600 lines and the functions over 120 lines (the house's limits).

A function is a brace block opened right after a parameter list's `)` (optionally followed by const,
noexcept, override, mutable, a trailing return type or a constructor's initializers) outside any other
function; lambdas and blocks inside a function count as part of it. Strings, characters and comments
are skipped. Exits 1 when something is over.

  scripts/check_sizes.py [folders...]    (default: the library, tools/, tests/, bench/, examples/)
  scripts/check_sizes.py --self-test     (the check finds a function and a file one line over, only those)
"""
import os
import re
import sys

FOLDERS = ["core", "kernels", "autograd", "ops", "nn", "optim", "amp", "data", "distributed", "train", "plan", "tools",
           "tests", "bench", "examples"]
MAX_FILE, MAX_FUNCTION = 600, 120


def code_only(text):
    """The text with comments, strings and character literals blanked (newlines kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif c == 'R' and text.startswith('R"', i):
            m = re.match(r'R"([^(]*)\(', text[i:])
            end = text.find(")" + m.group(1) + '"', i) if m else -1
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(" ")
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


HEADER_END = re.compile(r"\)\s*(const|noexcept|override|final|mutable|->\s*[\w:<>,\s*&]+|\s)*$")


def functions(text):
    """(first line, last line, name) of each outermost function body in `text`."""
    code = code_only(text)
    found, depth, inside = [], 0, None  # inside: (depth, start line, name) of the open function
    line = 1
    for i, c in enumerate(code):
        if c == "\n":
            line += 1
        elif c == "{":
            if inside is None:
                before = code[max(0, i - 400):i]
                head = before.split(";")[-1].split("}")[-1].split("{")[-1]
                # a constructor's initializer list: `) : a_(x), b_{y} {`
                head_no_init = re.sub(r"\)\s*:\s*[\w:]+[({].*$", ")", head, flags=re.S)
                if HEADER_END.search(head_no_init) and not re.search(r"\b(if|for|while|switch|catch)\s*\(", head):
                    name = re.findall(r"([\w:~]+)\s*\(", head)
                    start = line - head.count("\n")
                    inside = (depth, start, name[0] if name else "?")
            depth += 1
        elif c == "}":
            depth -= 1
            if inside is not None and depth == inside[0]:
                found.append((inside[1], line, inside[2]))
                inside = None
    return found


def over_limits(rel, text):
    """What in the file `rel` (its text) is over a limit, one message each."""
    found = []
    lines = text.count("\n")
    if lines > MAX_FILE:
        found.append(f"{rel}: {lines} lines (file limit {MAX_FILE})")
    for first, last, fn in functions(text):
        if last - first + 1 > MAX_FUNCTION:
            found.append(f"{rel}:{first}: {fn} is {last - first + 1} lines (function limit {MAX_FUNCTION})")
    return found


def self_test():
    """The check must see what it guards against: a function one line over, a file one line over, and
    neither a function at the limit nor its lambdas, strings and comments as functions of their own."""
    def function(name, lines):  # a function of `lines` lines in all, a lambda and a brace in a string inside
        body = ["  auto f = [](int x) { return x; };", '  const char* s = "{";  // {'] + ["  f(1);"] * (lines - 4)
        return [f"int {name}(int a) {{"] + body + ["}"]
    at_limit, over = function("fits", MAX_FUNCTION), function("too_long", MAX_FUNCTION + 1)
    ok = over_limits("a.cpp", "\n".join(at_limit) + "\n") == []
    ok &= over_limits("b.cpp", "\n".join(over) + "\n") == [
        f"b.cpp:1: too_long is {MAX_FUNCTION + 1} lines (function limit {MAX_FUNCTION})"]
    ok &= over_limits("c.h", "//\n" * MAX_FILE) == []
    ok &= over_limits("d.h", "//\n" * (MAX_FILE + 1)) == [f"d.h: {MAX_FILE + 1} lines (file limit {MAX_FILE})"]
    print("self-test:", "ok" if ok else "FAILED")
    return ok


def main():
    if sys.argv[1:] == ["--self-test"]:
        return 0 if self_test() else 1
    folders = sys.argv[1:] or FOLDERS
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    over = []
    for folder in folders:
        for dirpath, _, names in sorted(os.walk(os.path.join(root, folder))):
            for name in sorted(names):
                if not re.search(r"\.(h|cpp|cu|cuh)$", name):
                    continue
                path = os.path.join(dirpath, name)
                with open(path, errors="replace") as f:
                    over += over_limits(os.path.relpath(path, root), f.read())
    print("\n".join(over) if over else f"no file over {MAX_FILE} lines, no function over {MAX_FUNCTION}")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
