#!/usr/bin/env python3
"""No function over 120 lines in common/, services/, cli/ (issue #40 item 3).

    check_function_length.py            fail on a function over the limit that is not listed in
                                        tests/source_checks/long_functions.txt, or one listed that
                                        grew past its listed length (the list only shrinks)
    check_function_length.py --list     print every function over the limit, longest first
    check_function_length.py --write    rewrite the list from the tree as it is

Function extents come from Universal Ctags (`ctags --fields=+ne`: a function's first and last
line), C++ only, generated code (build/) excluded.
"""
import os
import re
import subprocess
import sys

LIMIT = 120
DIRS = ["common", "services", "cli"]
LIST = "tests/source_checks/long_functions.txt"


def functions():
    out = subprocess.run(
        ["ctags", "-R", "--languages=C++", "--kinds-C++=f", "--fields=+ne", "-x",
         "--_xformat=%{end}\t%{line}\t%{scope}\t%N\t%F", *DIRS],
        capture_output=True, text=True, check=True).stdout
    found = []
    for line in out.splitlines():
        parts = line.split("\t")
        if len(parts) != 5 or not parts[0].isdigit():
            continue
        end, start, scope, name, path = int(parts[0]), int(parts[1]), parts[2], parts[3], parts[4]
        scope = "" if scope in ("-", "") else scope + "::"
        scope = re.sub(r"__anon[0-9a-f]+", "(anonymous)", scope)  # ctags' hash changes with the file
        found.append((end - start + 1, f"{path}:{scope}{name}"))
    return found


def read_list():
    allowed = {}
    if not os.path.exists(LIST):
        return allowed
    for line in open(LIST, encoding="utf-8"):
        line = line.strip()
        if line and not line.startswith("#"):
            n, key = line.split(None, 1)
            allowed[key] = int(n)
    return allowed


def main():
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    long = sorted(((n, k) for n, k in functions() if n > LIMIT), reverse=True)
    if "--list" in sys.argv:
        for n, k in long:
            print(n, k)
        return 0
    if "--write" in sys.argv:
        with open(LIST, "w", encoding="utf-8") as f:
            f.write(f"# Functions over {LIMIT} lines that are still to be split (issue #40 item 3),\n"
                    "# with their length: the list may only shrink "
                    "(scripts/check_function_length.py --write).\n")
            for n, k in long:
                f.write(f"{n} {k}\n")
        print(f"{LIST}: {len(long)} function(s)")
        return 0
    allowed = read_list()
    bad = []
    for n, k in long:
        if k not in allowed:
            bad.append(f"{k}: {n} lines (the limit is {LIMIT}; split it by what it does)")
        elif n > allowed[k]:
            bad.append(f"{k}: {n} lines, longer than the {allowed[k]} listed in {LIST}")
    for b in bad:
        print(b)
    print(f"{len(long)} function(s) over {LIMIT} lines, {len(allowed)} listed, {len(bad)} problem(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
