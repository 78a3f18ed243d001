#!/usr/bin/env python3
"""Every ctest is named after its file (issue #40 item 4): `ctest -R NAME` and the file NAME.*
are the same test, so a failing name leads to its source without a search.

    check_test_names.py          fail on a ctest named unlike its file that is not listed in
                                 tests/source_checks/test_names.txt (the list only shrinks)
    check_test_names.py --list   print every ctest named unlike its file, and why
    check_test_names.py --write  rewrite the list from the tree as it is

Read from tests/**/CMakeLists.txt (text, no build needed):
  h3pipe_add_test(NAME ... SOURCES a.cpp b.cpp ...)   NAME is the stem of one of its sources
                                                      (NAME.cpp; the others are its helpers)
  add_test(NAME name COMMAND ... dir/file.py ...)     name is the stem of the test file it runs
                                                      (a file of the test's directory: file.py,
                                                      file.sh, file.cmake; x.test.mjs: x)
A ctest that runs its file in one of its configurations (one script, several cases: deploy_helm
and deploy_helm_schemas, or chaos.py as chaos_small) may be named stem_CASE.  A ctest that runs a tool of scripts/ or a built program on a file of the
repository (a source check, a config validated by h3pipe_config_check) is named after what it
checks: no test file of its own, nothing to compare.
"""
import os
import re
import subprocess
import sys

KEYWORDS = {"SOURCES", "DEPS", "LABELS", "TIMEOUT", "SERIAL", "COMMAND", "WORKING_DIRECTORY",
            "CONFIGURATIONS", "COMMAND_EXPAND_LISTS"}
DIR_VARS = re.compile(r"^\$\{(CMAKE_CURRENT_SOURCE_DIR|CMAKE_CURRENT_LIST_DIR|HERE)\}/")


def calls(text, fn):
    """The argument lists of every fn(...) call, comments removed, as lists of tokens."""
    text = re.sub(r"#[^\n]*", "", text)
    out = []
    for m in re.finditer(r"\b" + fn + r"\s*\(", text):
        depth, i = 1, m.end()
        while depth and i < len(text):
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        out.append(re.findall(r'"[^"]*"|[^\s]+', text[m.end():i - 1]))
    return out


def stem(path):
    base = os.path.basename(path)
    for ext in (".test.mjs", ".mjs", ".cpp", ".py", ".sh", ".cmake"):
        if base.endswith(ext):
            return base[: -len(ext)]
    return os.path.splitext(base)[0]


def tests():
    """(cmake file, ctest name, [candidate files], kind) for each test the tree declares."""
    files = subprocess.run(["git", "ls-files", "tests"], capture_output=True, text=True,
                           check=True).stdout.split()
    found = []
    for cm in sorted(f for f in files if os.path.basename(f) == "CMakeLists.txt"):
        text = open(cm, encoding="utf-8").read()
        for args in calls(text, "h3pipe_add_test"):
            name, sources, key = args[0], [], None
            for a in args[1:]:
                if a in KEYWORDS:
                    key = a
                elif key == "SOURCES":
                    sources.append(a)
            found.append((cm, name, sources, "sources"))
        for args in calls(text, "add_test"):
            if len(args) < 2 or args[0] != "NAME":
                continue
            name = args[1]
            scripts = [DIR_VARS.sub("", a) for a in args[2:] if DIR_VARS.match(a)]
            found.append((cm, name, scripts, "script"))
    return found


LIST = "tests/source_checks/test_names.txt"


def mismatches():
    """{ctest name: why} for every ctest named unlike its file."""
    found = tests()
    bad = {}
    for cm, name, files, kind in found:
        if "${" in name:  # made in a loop (tests/fuzz): the loop's pattern decides
            continue
        stems = [stem(f) for f in files]
        if kind == "sources":
            if name not in stems:
                bad[name] = (f"{cm}: built from {' '.join(files)}: name it after one of them, or "
                             f"the file after it (git mv to {name}.cpp)")
            continue
        if not files:
            continue  # a tool or a built program on a repository file: named for what it checks
        if name == stems[0] or name.startswith(stems[0] + "_"):
            continue
        bad[name] = (f"{cm}: runs {files[0]}: name it {stems[0]} (or {stems[0]}_CASE), or the "
                     "file after it")
    return len(found), bad


def read_list():
    if not os.path.exists(LIST):
        return set()
    return {line.strip() for line in open(LIST, encoding="utf-8")
            if line.strip() and not line.startswith("#")}


def main():
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    n, bad = mismatches()
    if "--list" in sys.argv:
        for name, why in sorted(bad.items()):
            print(f"{name}: {why}")
        return 0
    if "--write" in sys.argv:
        with open(LIST, "w", encoding="utf-8") as f:
            f.write("# ctests still named unlike their file (issue #40 item 4): the list may only "
                    "shrink\n# (scripts/check_test_names.py --write; --list says why each).\n")
            for name in sorted(bad):
                f.write(name + "\n")
        print(f"{LIST}: {len(bad)} ctest(s)")
        return 0
    listed = read_list()
    problems = [f"{name}: {why}" for name, why in sorted(bad.items()) if name not in listed]
    problems += [f"{name}: listed in {LIST} but named like its file now (or gone): "
                 "scripts/check_test_names.py --write" for name in sorted(listed - set(bad))]
    for p in problems:
        print(p)
    print(f"{n} ctests, {len(bad)} named unlike their file, {len(listed)} listed, "
          f"{len(problems)} problem(s)")
    return 1 if problems else 0



if __name__ == "__main__":
    sys.exit(main())
