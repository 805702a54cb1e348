#!/usr/bin/env python3
"""The include graph of core/, one node per unit: X.h, X.cpp and X.cu are one node, and so is X_impl.h
where X.h is beside it (a header's private half), so `tensor` stands for core/tensor.h, tensor.cpp and
tensor_impl.h. A private header of a folder (budget/cell_impl.h, memory/allocator_impl.h) is a node of
its own. Only includes are seen: a function declared in a lower header and defined in a higher file
(check_environment, and the Tensor methods ops/ defines) is a link-time dependency, not an edge.

Prints the loops (strongly connected components of more than one node), one edge of each that closes
it, and, given the inner layers, every include that points up a layer.
  tests/layering/core_graph.py ROOT              the loops; exit 1 if any
  tests/layering/core_graph.py ROOT --edges      the whole graph, one `from -> to` a line
  tests/layering/core_graph.py ROOT --layers F   also check F (- for stdin): one layer a line, lowest
                                                 first, `name: node node ...` (a node ending in / is a
                                                 folder's other nodes); a node may include its own layer
                                                 and those below
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]memgrad/core/([^>"]+)\.(?:h|cuh)[>"]', re.M)
SOURCES = ('.h', '.cuh', '.cpp', '.cu')


def unit(core, stem):
    """The node of a file stem: X_impl is X where core/X.h exists."""
    if stem.endswith('_impl') and os.path.exists(os.path.join(core, stem[:-len('_impl')] + '.h')):
        return stem[:-len('_impl')]
    return stem


def graph(root):
    """{node: {node it includes: a file that draws the edge}} for every source file under root/core."""
    edges = {}
    core = os.path.join(root, 'core')
    for folder, _, files in os.walk(core):
        for name in sorted(files):
            stem, ext = os.path.splitext(name)
            if ext not in SOURCES:
                continue
            path = os.path.join(folder, name)
            node = unit(core, os.path.relpath(os.path.join(folder, stem), core))
            out = edges.setdefault(node, {})
            with open(path, encoding='utf-8') as f:
                for target in INCLUDE.findall(f.read()):
                    target = unit(core, target)
                    if target != node:
                        out.setdefault(target, os.path.relpath(path, root))
    for targets in list(edges.values()):
        for target in targets:
            edges.setdefault(target, {})
    return edges


def loops(edges):
    """Tarjan's strongly connected components of more than one node, each sorted."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def read_layers(path):
    """[(layer name, [node or folder/])] from a file (- for stdin) of `name: node ...` lines, lowest first."""
    layers = []
    with (sys.stdin if path == '-' else open(path, encoding='utf-8')) as f:
        for raw in f:
            line = raw.split('#', 1)[0].strip()
            if line and raw[0].isspace() and layers:  # an indented line goes on with the layer above
                layers[-1][1].extend(line.split())
            elif line:
                name, _, members = line.partition(':')
                layers.append((name.strip(), members.split()))
    return layers


def layer_of(layers, node):
    """The index of the layer that names node, itself or its folder (the longest match wins)."""
    best, length = None, -1
    for i, (_, members) in enumerate(layers):
        for m in members:
            hit = node == m or (m.endswith('/') and node.startswith(m))
            if hit and len(m) > length:
                best, length = i, len(m)
    return best


def check_layers(edges, layers):
    bad = []
    for node in sorted(edges):
        here = layer_of(layers, node)
        if here is None:
            bad.append(f'core/{node} is in no inner layer of core (add it to the table)')
            continue
        for target, file in sorted(edges[node].items()):
            there = layer_of(layers, target)
            if there is not None and there > here:
                bad.append(f'{file} includes <memgrad/core/{target}.h>, above its inner layer '
                           f'(core/{node} is in {layers[here][0]}, core/{target} in {layers[there][0]})')
    return bad


def main(argv):
    root = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(__file__), '..', '..')
    edges = graph(root)
    if '--edges' in argv:
        for node in sorted(edges):
            for target in sorted(edges[node]):
                print(f'{node} -> {target}')
        return 0
    bad = []
    for component in loops(edges):
        members = set(component)
        closing = [f'{edges[a][b]} -> {b}' for a in component for b in sorted(edges[a]) if b in members]
        bad.append(f'core include loop: {" ".join(component)} (edges: {", ".join(closing)})')
    if '--layers' in argv:
        bad += check_layers(edges, read_layers(argv[argv.index('--layers') + 1]))
    for line in bad:
        print(line)
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
