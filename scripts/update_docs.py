#!/usr/bin/env python3
"""Docs that are tested: reruns every command quoted in README.md and docs/*.md and rewrites its output.

A quoted output sits between two HTML comments (invisible on the rendered page):

    <!-- output: $ build/examples/memory/categories -->
    ```
    ...the program's output, written by this script...
    ```
    <!-- /output -->

a number in the prose between two on one line:

    held-out loss <!-- value pick='held-out loss ([0-9.]+)': $ memgrad train -->2.4036<!-- /value -->

and a command the text shows without its output, whose exit code alone is checked, in one:

    <!-- runs: $ memgrad plan --checkpoint auto --budget 7GiB -->

The command after `$ ` runs under bash in a scratch folder where `build/` is the build directory,
`scripts/` the repository's and `memgrad` is build/bin/memgrad, so it reads as a reader types it;
with 2 OpenMP threads (OMP_NUM_THREADS=2), as the docs' training losses were printed. Attributes before the `:`:
  exit=N          the exit code it must end with (default 0)
  stderr          quote stderr after stdout (default: stdout only)
  from=RE to=RE   quote only the lines from the first that matches `from` to the next that matches `to`
  drop=RE         leave out the lines that match (e.g. a program's `[ok]` checks)
  pick=RE         (value) group 1 of RE's first match in the output
  mask=RE         the matches are timings: written, never compared (repeatable)
  approx=REL      numbers with a decimal point agree within a relative REL (a loss after many steps:
                  its last digits depend on the CPU's GEMM and vector width); integers stay exact
  slow            run only without --skip-slow (the ctest `docs` skips it; `docs_slow` runs it)
  requires=PROG   skipped when PROG is not on PATH (mpirun in a build without MPI)

Pages the docs link to are written from the sources too (PAGES): docs/memory_timeline.html is the
timeline page (report/) of a 3-layer MLP's training step, as tests/memory/test_timeline.cpp records
it. Its data holds the run's clock and the allocator's addresses, which differ at every run: those
are masked, the rest (the page's HTML, CSS and script, and every other number) is compared, and the
file is rewritten only when something else changed.

  scripts/update_docs.py [--build DIR] [--check] [--skip-slow] [FILE...]

Without --check it rewrites each region whose output changed (timings aside) and says which; with
--check it rewrites nothing and exits 1 on any difference, printing it. A command that ends with
another exit code fails either way. Each command runs once, however often quoted; -j N at once.
"""
import argparse
import difflib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OPEN = re.compile(r"<!-- (output|value|runs)((?: .*?)?): \$ (.*?) -->")
BLOCK_END = "<!-- /output -->"
VALUE_END = "<!-- /value -->"


class Region:
    def __init__(self, kind, attrs, command, path, line):
        self.kind, self.command, self.path, self.line = kind, command, path, line
        self.exit, self.stderr, self.slow, self.first, self.last, self.pick = 0, False, False, None, None, None
        self.masks, self.requires, self.drop, self.approx = [], None, None, 0.0
        for token in shlex.split(attrs):
            key, _, value = token.partition("=")
            if key == "exit":
                self.exit = int(value)
            elif key == "approx":
                self.approx = float(value)
            elif key in ("stderr", "slow"):
                setattr(self, key, True)
            elif key in ("from", "to", "pick", "mask", "requires", "drop"):
                if key == "mask":
                    self.masks.append(re.compile(value))
                else:
                    setattr(self, {"from": "first", "to": "last"}.get(key, key),
                            value if key == "requires" else re.compile(value))
            else:
                raise SystemExit(f"{self.where()}: unknown attribute {token!r}")

    def where(self):
        return f"{os.path.relpath(self.path, ROOT)}:{self.line}"

    def masked(self, text):
        for m in self.masks:
            text = m.sub("<timing>", text)
        return text

    def same(self, old, new):
        old, new = self.masked(old), self.masked(new)
        if not self.approx or old == new:
            return old == new
        decimal = re.compile(r"-?[0-9]+\.[0-9]+")
        a, b = decimal.findall(old), decimal.findall(new)
        return (decimal.sub("#", old) == decimal.sub("#", new) and
                all(abs(float(x) - float(y)) <= self.approx * abs(float(x)) for x, y in zip(a, b)))

    def quote(self, out):
        """The part of the command's output this region shows."""
        lines = out.splitlines()
        if self.pick:
            m = self.pick.search(out)
            if not m:
                raise ValueError(f"pick {self.pick.pattern!r} matches nothing in the output")
            return m.group(1)
        if self.drop:
            lines = [l for l in lines if not self.drop.search(l)]
        if self.first:
            start = next((i for i, l in enumerate(lines) if self.first.search(l)), None)
            if start is None:
                raise ValueError(f"from {self.first.pattern!r} matches no line of the output")
            lines = lines[start:]
        if self.last:
            end = next((i for i, l in enumerate(lines) if self.last.search(l)), None)
            if end is None:
                raise ValueError(f"to {self.last.pattern!r} matches no line of the output")
            lines = lines[:end + 1]
        return "\n".join(l.rstrip() for l in lines).strip("\n")


# (file, command): the command writes the file at $OUT, run as the quoted commands are.
PAGES = [("docs/memory_timeline.html",
          "MG_TIMELINE_OUT=\"$OUT\" build/tests/test_memory --test-case='timeline: the page*' >/dev/null")]
PAGE_DATA = re.compile(r'(<script id="mg-data" type="application/json">)(.*?)(</script>)', re.S)


def page_key(html):
    """The page with what differs from run to run masked: each event's time and each segment's address."""
    def masked(m):
        data = json.loads(m.group(2))
        for run in data.get("runs", []):
            run.get("points", {}).pop("t", None)
            run.get("segments", {}).pop("address", None)
        return m.group(1) + json.dumps(data, sort_keys=True) + m.group(3)
    key, n = PAGE_DATA.subn(masked, html)
    if n != 1:
        raise ValueError(f"expected one data element ({PAGE_DATA.pattern}), found {n}")
    return key


def regions(path, text):
    """(region, start, end): text[start:end] is what the region quotes (for a block, its fenced code)."""
    found, pos = [], 0
    while True:
        m = OPEN.search(text, pos)
        if not m:
            return found
        r = Region(m.group(1), m.group(2), m.group(3), path, text.count("\n", 0, m.start()) + 1)
        if r.kind == "runs":
            found.append((r, m.end(), m.end()))
            pos = m.end()
            continue
        end_marker = BLOCK_END if r.kind == "output" else VALUE_END
        end = text.find(end_marker, m.end())
        if end < 0 or (r.kind == "value" and "\n" in text[m.end():end]):
            raise SystemExit(f"{r.where()}: no {end_marker} after it" + (" on its line" if r.kind == "value" else ""))
        start = m.end() + (1 if r.kind == "output" else 0)  # a block starts on the next line
        found.append((r, start, end))
        pos = end + len(end_marker)


def fenced(old, body):
    """The block's new text: its old opening fence (with its language, if any), the body, a fence."""
    fence = old.split("\n", 1)[0] if old.startswith("```") else "```"
    return f"{fence}\n{body}\n```\n"


def unfenced(block):
    lines = block.rstrip("\n").split("\n")
    return "\n".join(l.rstrip() for l in lines[1:-1]) if len(lines) >= 2 else ""


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("files", nargs="*")
    p.add_argument("--build", default=os.environ.get("MG_BUILD_DIR", os.path.join(ROOT, "build")))
    p.add_argument("--check", action="store_true", help="rewrite nothing; exit 1 on any difference")
    p.add_argument("--skip-slow", action="store_true", help="leave the regions marked slow out")
    p.add_argument("--only-slow", action="store_true", help="only the regions marked slow")
    p.add_argument("-j", type=int, default=os.cpu_count() or 1, help="commands run at once (default: the cores)")
    a = p.parse_args()
    files = a.files or [os.path.join(ROOT, "README.md")] + sorted(
        os.path.join(ROOT, "docs", f) for f in os.listdir(os.path.join(ROOT, "docs")) if f.endswith(".md"))
    build = os.path.abspath(a.build)
    if not os.path.isfile(os.path.join(build, "bin", "memgrad")):
        raise SystemExit(f"{build}/bin/memgrad not found: build first (or pass --build DIR)")

    scratch = tempfile.mkdtemp(prefix="mg-docs-")
    os.symlink(build, os.path.join(scratch, "build"))
    os.symlink(os.path.join(ROOT, "scripts"), os.path.join(scratch, "scripts"))
    env = dict(os.environ, PATH=os.path.join(build, "bin") + os.pathsep + os.environ.get("PATH", ""))
    env.setdefault("OMP_WAIT_POLICY", "passive")
    env["OMP_NUM_THREADS"] = "2"  # a run's losses depend on the threads' summation order: the docs' are 2

    def run(command):
        p = subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=scratch, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        return p.returncode, p.stdout, p.stdout + p.stderr

    def wanted(r):
        return not ((a.skip_slow and r.slow) or (a.only_slow and not r.slow) or
                    (r.requires and not shutil.which(r.requires, path=env["PATH"])))

    texts = {path: open(path).read() for path in files}
    found = {path: regions(path, text) for path, text in texts.items()}
    commands = sorted({r.command for rs in found.values() for r, _, _ in rs if wanted(r)})
    failures, changed, checked, skipped = [], [], 0, 0
    try:
        with ThreadPoolExecutor(max(1, a.j)) as pool:  # each command once, however often quoted
            runs = dict(zip(commands, pool.map(run, commands)))
        for page, command in (PAGES if not a.only_slow else []):
            path = os.path.join(ROOT, page)
            if a.files and os.path.abspath(path) not in map(os.path.abspath, a.files):
                continue
            out = os.path.join(scratch, os.path.basename(page))
            code, _, both = run(f"OUT={shlex.quote(out)}; {command}")
            checked += 1
            if code != 0 or not os.path.isfile(out):
                failures.append(f"{page}: `{command}` exited {code} without writing it\n{both[-3000:]}")
                continue
            new = open(out).read()
            old = open(path).read() if os.path.isfile(path) else ""
            try:
                if old and page_key(old) == page_key(new):
                    continue
            except ValueError as e:
                failures.append(f"{page}: {e}")
                continue
            diff = "\n".join(difflib.unified_diff(old.split("\n"), new.split("\n"), "committed", "written now",
                                                  lineterm="", n=0))
            (failures if a.check else changed).append(f"{page}: `{command}`\n{diff[:3000]}")
            if not a.check:
                open(path, "w").write(new)
        for path in files:
            text = texts[path]
            edits = []
            for r, start, end in found[path]:
                if not wanted(r):
                    skipped += 1
                    continue
                code, out, both = runs[r.command]
                checked += 1
                if code != r.exit:
                    failures.append(f"{r.where()}: `{r.command}` exited {code}, expected {r.exit}\n{both[-3000:]}")
                    continue
                if r.kind == "runs":
                    continue
                try:
                    new = r.quote(both if r.stderr else out)
                except ValueError as e:
                    failures.append(f"{r.where()}: `{r.command}`: {e}")
                    continue
                old = text[start:end] if r.kind == "value" else unfenced(text[start:end])
                if r.same(old, new):
                    continue
                diff = "\n".join(difflib.unified_diff(old.split("\n"), new.split("\n"), "in the text", "printed now",
                                                      lineterm="", n=1))
                (failures if a.check else changed).append(f"{r.where()}: `{r.command}`\n{diff}")
                edits.append((start, end, new if r.kind == "value" else fenced(text[start:end], new)))
            if edits and not a.check:
                for start, end, new in reversed(edits):
                    text = text[:start] + new + text[end:]
                open(path, "w").write(text)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    for c in changed:
        print(f"rewrote {c}\n")
    for f in failures:
        print(f"FAILED {f}\n", file=sys.stderr)
    print(f"{checked} quoted outputs from {len(runs)} commands, {len(changed)} rewritten, {len(failures)} failed,"
          f" {skipped} skipped")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
