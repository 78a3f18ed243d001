#!/usr/bin/python3
"""Every C++ file of the repository as .clang-format has it (docs/design.md, convention 13).

    check_format.py          list the files clang-format would change; exit 1 if any
    check_format.py --fix    reformat them in place

The files are git's (tracked and untracked, not ignored): *.cpp *.h *.cc *.cu *.cuh.  clang-format
is Debian's (scripts/setup.sh installs it with the test packages); a different major version may
format differently, so the version is printed.
"""
import pathlib
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXTS = ("*.cpp", "*.h", "*.cc", "*.cu", "*.cuh")


def files():
    out = subprocess.run(["git", "-C", str(ROOT), "ls-files", "--cached", "--others", "--exclude-standard",
                          "--", *EXTS], capture_output=True, text=True, check=True).stdout.split()
    return [f for f in out if "node_modules/" not in f and (ROOT / f).is_file()]


def main(argv):
    exe = shutil.which("clang-format")
    if not exe:
        print("clang-format is not installed (scripts/setup.sh installs it)")
        return 1
    version = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout.strip()
    fs = files()
    if "--fix" in argv:
        subprocess.run([exe, "--style=file", "-i", *fs], cwd=ROOT, check=True)
        print(f"{len(fs)} files formatted ({version})")
        return 0
    bad = []
    for f in fs:
        p = subprocess.run([exe, "--style=file", "--dry-run", "--Werror", f], cwd=ROOT,
                           capture_output=True, text=True)
        if p.returncode != 0:
            bad.append(f)
    for f in bad:
        print(f"{f}: not formatted (scripts/check_format.py --fix)")
    print(f"{len(fs)} files, {len(bad)} not formatted ({version})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
