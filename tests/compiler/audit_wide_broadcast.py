#!/usr/bin/env python3
"""Finds every place where GCC 12's x86 back end turned a 32- or 64-byte integer constant into a
broadcast of its first word without looking at all of its words: the miscompile of issue 37
(SmallVector<int64_t, 6>{2^40, 2^40, 2^40, 0} stored as four 2^40).

GCC 12's ix86_convert_const_wide_int_to_broadcast compares only the words a CONST_WIDE_INT stores,
and a CONST_WIDE_INT drops high words that are zero (or the sign extension); later GCC checks that
the constant has as many words as the mode. Each conversion leaves, in the RTL expand dump, a
subreg of the broadcast register with a REG_EQUAL note holding the constant: a constant with fewer
64-bit words than the mode is the bug. This script recompiles each C++ file of a build
(compile_commands.json, CMAKE_EXPORT_COMPILE_COMMANDS=ON) with -fdump-rtl-expand and lists them.

  tests/compiler/audit_wide_broadcast.py BUILD_DIR [EXTRA_FLAG ...] [--without FLAG ...] [--filter REGEX]

Exit status 1 when any is found. EXTRA_FLAGs are appended to every command (e.g. -march=sapphirerapids
to audit that flag set), each --without FLAG removed from it (--without -mmove-max=128 --without
-mstore-max=128 audits a build as it would be without the workaround CMakeLists.txt adds); --filter
keeps the files whose path matches.
"""
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile

MODE_WORDS = {"OI": 4, "XI": 8}
# (insn ... (set (reg:OI 87) (subreg:OI (reg:V4DI 88) 0)) ... (expr_list:REG_EQUAL (const_wide_int 0x...)
INSN = re.compile(r"\(set \(reg:(OI|XI) \d+\)\s*\(subreg:\1 \(reg:(V\d+[QHSD]I) \d+\) 0\)\)"
                  r"[^\n]*\n(?:[^\n]*\n)*?\s*\(expr_list:REG_EQUAL \(const_wide_int 0x([0-9a-f]+)\)")


def audit(build, extra, without, pattern):
    commands = json.load(open(os.path.join(build, "compile_commands.json")))
    found = 0
    with tempfile.TemporaryDirectory() as tmp:
        for n, c in enumerate(commands):
            src = c["file"]
            if not src.endswith((".cpp", ".cc")) or (pattern and not re.search(pattern, src)):
                continue
            args = shlex.split(c["command"]) if "command" in c else c["arguments"]
            out = args.index("-o")
            args = [a for a in args[:out] + args[out + 2:] if a not in without]
            if args[0].endswith("ccache"):
                args = args[1:]
            dump = os.path.join(tmp, str(n))
            os.makedirs(dump)
            r = subprocess.run(args + extra + ["-fdump-rtl-expand", "-dumpdir", dump + "/", "-o", os.devnull],
                               cwd=c["directory"], capture_output=True, text=True)
            if r.returncode != 0:
                print(f"{src}: does not compile: {r.stderr[:500]}", file=sys.stderr)
                continue
            for name in os.listdir(dump):
                text = open(os.path.join(dump, name), errors="replace").read()
                for m in INSN.finditer(text):
                    mode, vmode, digits = m.group(1), m.group(2), m.group(3)
                    words = (len(digits) + 15) // 16
                    if words < MODE_WORDS[mode]:
                        fn = text.rfind(";; Function ", 0, m.start())
                        where = text[fn + 12:text.find(" (", fn)] if fn >= 0 else "?"
                        print(f"{os.path.relpath(src)}: {where}: {mode} constant 0x{digits} "
                              f"({words} of {MODE_WORDS[mode]} words) broadcast as {vmode}")
                        found += 1
                os.remove(os.path.join(dump, name))
    return found


def main():
    argv, rest, without, pattern = sys.argv[1:], [], [], None
    while argv:
        a = argv.pop(0)
        if a in ("--filter", "--without") and argv:
            if a == "--filter":
                pattern = argv.pop(0)
            else:
                without.append(argv.pop(0))
        else:
            rest.append(a)
    if not rest:
        print(__doc__, file=sys.stderr)
        return 2
    found = audit(rest[0], rest[1:], without, pattern)
    print(f"{found} miscompiled constant broadcast(s)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
