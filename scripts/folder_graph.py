#!/usr/bin/env python3
"""Draws memgrad's folder graph from its #include lines, as a self-contained SVG.

Each box is a top folder of the library, with its lines of code; an arrow A -> B means a
file in A includes a header of B. Folders are stacked in the layer order (core at the bottom), so an
arrow that points down is a layer using one below it (grey) and one that points up breaks the layering
(red): every red arrow closes a cycle.

  scripts/folder_graph.py [--rev REV] OUT.svg    # REV: a git revision (default: the working tree)

docs/folder_graph_before.svg and docs/folder_graph_after.svg are this script's output for e7610cf and
for the tree after the second pass of issue #29 (the ops floor, the budget in one folder).
"""
import argparse
import collections
import os
import re
import subprocess
import sys

ORDER = ["core", "kernels", "autograd", "ops", "nn", "optim", "amp", "data", "distributed", "train", "plan", "report"]
SOURCE = re.compile(r"\.(h|cpp|cu|cuh)$")
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]memgrad/([a-z_]+)/', re.M)


def read_tree(rev):
    """{path: text} of the source files under the folders of ORDER, at `rev` or in the working tree."""
    root = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True,
                          check=True).stdout.strip()
    if rev:
        names = subprocess.run(["git", "-C", root, "ls-tree", "-r", "--name-only", rev], capture_output=True,
                               text=True, check=True).stdout.split()
    else:
        names = subprocess.run(["git", "-C", root, "ls-files", "--cached", "--others", "--exclude-standard"],
                               capture_output=True, text=True, check=True).stdout.split()
    files = {}
    for name in names:
        if name.split("/")[0] not in ORDER or not SOURCE.search(name):
            continue
        if rev:
            files[name] = subprocess.run(["git", "-C", root, "show", f"{rev}:{name}"], capture_output=True,
                                         text=True, errors="replace", check=True).stdout
        elif os.path.exists(os.path.join(root, name)):
            with open(os.path.join(root, name), errors="replace") as f:
                files[name] = f.read()
    return files


def graph(files):
    lines = collections.Counter()
    edges = collections.Counter()  # (from, to) -> include lines
    for name, text in files.items():
        top = name.split("/")[0]
        lines[top] += text.count("\n")
        for target in INCLUDE.findall(text):
            if target != top and target in ORDER:
                edges[(top, target)] += 1
    folders = [f for f in ORDER if lines[f]]
    return folders, lines, edges


def svg(folders, lines, edges, title):
    w, row, box_w, box_h = 560, 58, 190, 34
    h = row * len(folders) + 70
    # boxes zig-zag left and right so that arrows between neighbours do not run through others
    pos = {}
    for i, f in enumerate(folders):
        y = h - 40 - row * i
        x = w / 2 + (-110 if i % 2 else 110) * (1 if i % 4 < 2 else 0.35)
        pos[f] = (x, y)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
           'font-family="sans-serif" font-size="13">',
           '<defs>'
           '<marker id="down" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" '
           'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#888"/></marker>'
           '<marker id="up" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" '
           'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#d00"/></marker></defs>',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="12" y="22" font-size="15" font-weight="bold">{title}</text>']
    up_count = 0
    for (a, b), n in sorted(edges.items()):
        (xa, ya), (xb, yb) = pos[a], pos[b]
        up = folders.index(b) > folders.index(a)
        up_count += up
        bend = 60 + 12 * abs(folders.index(a) - folders.index(b))
        cx = (xa + xb) / 2 + (bend if up else -bend) * (1 if xa <= w / 2 else -1)
        y1 = ya - box_h / 2 if up else ya + box_h / 2  # leave from the top (up) or bottom (down) edge
        y2 = yb + box_h / 2 if up else yb - box_h / 2
        colour, width, marker = ("#d00", 2.2, "up") if up else ("#aaa", 0.6 + 0.25 * min(n, 8) ** 0.5, "down")
        out.append(f'<path d="M{xa:.0f},{y1:.0f} Q{cx:.0f},{(ya + yb) / 2:.0f} {xb:.0f},{y2:.0f}" fill="none" '
                   f'stroke="{colour}" stroke-width="{width:.1f}" marker-end="url(#{marker})">'
                   f'<title>{a} -> {b}: {n} include lines</title></path>')
    for f in folders:
        x, y = pos[f]
        out.append(f'<rect x="{x - box_w / 2:.0f}" y="{y - box_h / 2:.0f}" width="{box_w}" height="{box_h}" rx="5" '
                   'fill="#eef3fb" stroke="#4a6fa5"/>')
        out.append(f'<text x="{x:.0f}" y="{y + 5:.0f}" text-anchor="middle"><tspan font-weight="bold">{f}/</tspan>'
                   f' {lines[f]:,} lines</text>')
    note = f"{up_count} arrow{'s' if up_count != 1 else ''} pointing up (red: a cycle)" if up_count else \
        "every arrow points down: no cycle"
    out.append(f'<text x="12" y="42" fill="{"#d00" if up_count else "#2a2"}">{note}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rev", default="", help="git revision (default: the working tree)")
    p.add_argument("--title", default="")
    p.add_argument("out")
    a = p.parse_args()
    folders, lines, edges = graph(read_tree(a.rev))
    title = a.title or f"memgrad's folders at {a.rev or 'the working tree'}"
    with open(a.out, "w") as f:
        f.write(svg(folders, lines, edges, title))
    for (x, y), n in sorted(edges.items()):
        if ORDER.index(y) > ORDER.index(x):
            print(f"up: {x} -> {y} ({n} include lines)", file=sys.stderr)


if __name__ == "__main__":
    main()
