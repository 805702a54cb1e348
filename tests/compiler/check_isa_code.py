#!/usr/bin/env python3
"""Checks, instruction by instruction, that a libmemgrad built with MG_CPU_DISPATCH runs on any x86-64
CPU: code that needs AVX (VEX-encoded instructions) or AVX-512 (EVEX) is only reached from the
kernels of its ISA level (kernels/cpu/cpu_kernels.h), never from the rest of the library.

A function in mg::cpu::avx2:: or mg::cpu::avx512:: (by its name: its lambdas, OpenMP regions and the
templates instantiated on them included) is of that level. Any other function is reached at the
lowest level of the functions that call or jump to it (the baseline when none does directly: a
pointer may reach it); such a function may hold AVX or AVX-512 code where it is a copy of an inline
function that only a level's kernels call (a local clone, or the one copy the linker kept, which is
the lowest level's: the levels are linked from the lowest up). No function may hold code above the
level it is reached at: VEX-encoded instructions need AVX, EVEX ones AVX-512.

And, for each level given with --levels, that the level's code was compiled for its ISA: some of its
functions hold VEX (avx2) or EVEX (avx512) instructions.

  tests/compiler/check_isa_code.py [--levels avx2,avx512] LIBRARY    (objdump from binutils on PATH)
Exit status 0 when the library keeps to that, 1 with the offending functions or levels listed.
"""
import bisect
import re
import subprocess
import sys

LEVELS = {"baseline": 0, "avx2": 1, "avx512": 2}
LEGACY_PREFIXES = {0x26, 0x2E, 0x36, 0x3E, 0x64, 0x65, 0x67, 0xF0}
HEADER = re.compile(r"^([0-9a-f]+) <(.*)>:$")
INSN = re.compile(r"^\s*[0-9a-f]+:\t((?:[0-9a-f]{2} )+)\s*\t?(.*)$")
CALL = re.compile(r"\b(?:call|j[a-z]{1,3})\s+([0-9a-f]+) <")


def level_of_name(mangled):
    if "2mg3cpu6avx512" in mangled:  # mg::cpu::avx512:: in the name or its template arguments
        return 2
    if "2mg3cpu4avx2" in mangled:
        return 1
    return 0


def demangle(names):
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout
    return out.splitlines() if out else names


def encoding(hex_bytes):
    """0 for legacy/SSE, 1 for VEX, 2 for EVEX (in 64-bit mode c4/c5 and 62 only start those)."""
    for b in hex_bytes:
        if b in LEGACY_PREFIXES:
            continue
        return 1 if b in (0xC4, 0xC5) else 2 if b == 0x62 else 0
    return 0


def main():
    args = sys.argv[1:]
    expected = []
    if len(args) == 3 and args[0] == "--levels":
        expected, args = args[1].split(","), args[2:]
    if len(args) != 1 or any(lv not in ("avx2", "avx512") for lv in expected):
        print(__doc__, file=sys.stderr)
        return 2
    dump = subprocess.run(["objdump", "-d", "-w", args[0]], capture_output=True, text=True, check=True)
    # Functions by start address (local clones of one inline function share a name across levels).
    names, needs, calls = {}, {}, []  # address -> name, address -> highest encoding, (caller, target)
    at = None
    for line in dump.stdout.splitlines():
        m = HEADER.match(line)
        if m:
            at = int(m.group(1), 16)
            names[at], needs[at] = m.group(2), 0
            continue
        m = INSN.match(line)
        if not m or at is None:
            continue
        needs[at] = max(needs[at], encoding([int(b, 16) for b in m.group(1).split()]))
        c = CALL.search(m.group(2))
        if c:
            calls.append((at, int(c.group(1), 16)))
    starts = sorted(names)
    by_name = {}
    for fn, name in names.items():
        by_name.setdefault(name, []).append(fn)
    callers = {}  # function -> the functions that call or jump into it (through the PLT too)
    for caller, target in calls:
        i = bisect.bisect_right(starts, target) - 1
        if i < 0 or starts[i] == caller:
            continue
        callee = names[starts[i]]
        for fn in by_name.get(callee[:-4], []) if callee.endswith("@plt") else [starts[i]]:
            callers.setdefault(fn, set()).add(caller)
    # The lowest level a function can be reached from: its own for a level's function; for any other,
    # the lowest of its callers' (taken to the fixed point), the baseline where nothing calls it
    # directly (it may be reached through a pointer).
    own = {fn: level_of_name(names[fn]) for fn in names}
    reach = {fn: own[fn] if own[fn] or fn not in callers else 2 for fn in names}
    changed = True
    while changed:
        changed = False
        for fn in names:
            if own[fn] == 0 and fn in callers:
                low = min(reach[c] for c in callers[fn])
                if low < reach[fn]:
                    reach[fn], changed = low, True
    bad = []
    for fn, enc in needs.items():
        if enc <= reach[fn]:
            continue
        what = "AVX-512" if enc == 2 else "AVX"
        where = ["baseline", "avx2"][reach[fn]]
        via = sorted(names[c] for c in callers.get(fn, ()) if reach[c] == reach[fn])[:2]
        bad.append(f"{names[fn]}: {what} code reachable from {where} code" + (f" ({via})" if via else ""))
    counts = [sum(1 for fn in needs if level_of_name(names[fn]) == lv) for lv in (1, 2)]
    # The other half: each level given with --levels was compiled for its ISA, its copies holding its
    # instructions (VEX for avx2, EVEX for avx512), not just named for it.
    wide = [sum(1 for fn in needs if level_of_name(names[fn]) == lv and needs[fn] == lv) for lv in (1, 2)]
    for lv in expected:
        i = LEVELS[lv] - 1
        if wide[i] == 0:
            bad.append(f"level {lv}: none of its {counts[i]} functions holds {['VEX', 'EVEX'][i]} code")
    for b in demangle(bad):
        print(b)
    print(f"{len(needs)} functions, {counts[0]} of level avx2 ({wide[0]} with VEX code) and {counts[1]} of level "
          f"avx512 ({wide[1]} with EVEX code); {len(bad)} problems")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
