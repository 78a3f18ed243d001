#!/usr/bin/env python3
"""Every path and doc section that the code and the docs cite exists (issue #40 item 4).

    check_citations.py           list each stale citation as FILE:LINE: what, exit 1 if any

A citation is a repository path in a comment or a doc (common/..., services/..., cli/...,
tests/..., docs/..., scripts/..., bench/..., deploy/..., helm/..., configs/..., cmake/...), or a
doc section quoted after its file: docs/design.md, "The claim order" (with or without the comma,
"section" before the quote allowed).  A path passes when it exists, when it names an existing
file without its extension (common/core/sha256 for sha256.h), or when it is a file the build
generates (its name appears in a CMakeLists.txt and is no tracked file's: common/proto/h3pipe.pb.h).
A file named alone or with part of its path in a comment or a doc (`dispatch_test.cpp`,
worker/engine.h, state/resume.h) must be the end of a tracked file's path (a .h, .cpp, .mjs, .sh
or .md; a system header found under /usr/include passes; EXTERNAL lists the names of other
projects' files that comments cite).  A section passes when
the file has a Markdown heading of that title (case-insensitive; a prefix of the heading is
enough: "Runtimes" for "Runtimes: what each kind runs").
"""
import os
import re
import subprocess
import sys

ROOTS = ["common", "services", "cli", "tests", "docs", "scripts", "bench", "deploy", "helm",
         "configs", "cmake", "README.md", "CMakeLists.txt"]
SKIP_SUFFIXES = (".png", ".jpg", ".jpeg", ".svg", ".lock", ".mp4", ".wav", ".safetensors", ".bin")
PATH = re.compile(r"(?<![\w/.-])((?:common|services|cli|tests|docs|scripts|bench|deploy|helm|"
                  r"configs|cmake)/[\w./-]*\w)")
SECTION = re.compile(r"(docs/[\w-]+\.md),?\s*(?:section\s+)?[\"“]([A-Za-z0-9][^\"”\n]{1,100})[\"”]")
PATH_ROOTS = tuple(r + "/" for r in ("common", "services", "cli", "tests", "docs", "scripts", "bench",
                                      "deploy", "helm", "configs", "cmake"))  # checked by PATH
# Made by the operator or by h3pipe at run time in a checkout (docs/deploy.md), never committed.
RUNTIME_PATHS = ("deploy/secrets", "deploy/keys")
# A file named alone or with part of its path: a .h, .cpp, .mjs, .sh or .md.
BARE = re.compile(r"(?<![\w/.$<-])((?:[\w-]+/)*[\w-]+\.(?:h|cpp|mjs|sh|md))(?![\w/-])")
# Files of other projects that comments name (system headers are looked up, SYSTEM_INCLUDES):
# the redis image's entrypoint, ComfyUI's server scripts in an operator's checkout, the script a
# test writes itself, the KEDA site (keda.sh), the shared seeds next to a checkout (docs/planner.md).
SYSTEM_INCLUDES = ("/usr/include", "/usr/include/x86_64-linux-gnu", "/usr/local/include")
EXTERNAL = {"docker-entrypoint.sh", "start.sh", "stop.sh", "certs.sh", "keda.sh",
            "shared/seeds/DIGEST.md"}
# Comment text: after // in C++ and JavaScript, after # in scripts and CMake; all of a doc.
COMMENT = {".h": "//", ".cpp": "//", ".mjs": "//", ".js": "//", ".sh": "#", ".py": "#",
           ".cmake": "#", ".txt": "#", ".yaml": "#", ".yml": "#"}
# Paths written as patterns or placeholders, not as files.
PLACEHOLDER = re.compile(r"[*{}<>$]|/NAME|/RUN|/JOB|XXX")


def tracked():
    out = subprocess.run(["git", "ls-files", "--", *ROOTS], capture_output=True, text=True,
                         check=True).stdout.split("\n")
    return [f for f in out if f and "node_modules" not in f and not f.endswith(SKIP_SUFFIXES)]


def generated_names(files):
    names = set()
    for f in files:
        if os.path.basename(f) == "CMakeLists.txt" or f.endswith(".cmake"):
            try:
                names.update(re.findall(r"[\w.-]+\.\w+", open(f, encoding="utf-8").read()))
            except OSError:
                pass
    return names


def path_ok(p, all_files, generated):
    p = re.sub(r":\d+(-\d+)?$", "", p).rstrip(".")
    if os.path.exists(p) or p.startswith(RUNTIME_PATHS):
        return True
    if os.path.basename(p) in generated and not any(f.endswith("/" + os.path.basename(p))
                                                    for f in all_files):
        return True
    if p.endswith(".pb.h") and os.path.exists(p[: -len(".pb.h")] + ".proto"):
        return True  # protoc's output of a committed .proto
    # Without its extension, or a prefix of a family of files (scripts/bench_ for bench_*.sh).
    return any(f.startswith(p) for f in all_files)


def comment(f, line):
    """The part of line that is comment text (all of it in a doc; "" when there is none)."""
    ext = os.path.splitext(f)[1]
    if ext == ".md":
        return line
    mark = COMMENT.get(ext)
    if not mark:
        return ""
    if mark == "//" and line.lstrip().startswith(("*", "/*")):
        return line
    at = line.find(mark)
    return line[at:] if at >= 0 else ""


def tail_ok(p, tails):
    """A file named alone or with part of its path: the end of a tracked file's path."""
    if p in EXTERNAL or p in tails or p.startswith(PATH_ROOTS):
        return True
    # A system or library header (linux/sched/types.h, zmq.h): where the compiler finds it.
    return p.endswith(".h") and any(os.path.exists(os.path.join(d, p)) for d in SYSTEM_INCLUDES)


def headings(doc, cache={}):
    if doc not in cache:
        try:
            text = open(doc, encoding="utf-8").read()
        except OSError:
            text = ""
        cache[doc] = [re.sub(r"^\d+(\.\d+)*\.?\s+", "", re.sub(r"[`*]", "", h).strip()).lower()
                      for h in re.findall(r"^#+\s+(.*)$", text, re.M)]
    return cache[doc]


def main():
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    files = tracked()
    all_files = set(files)
    generated = generated_names(files)
    # Every end of a tracked path (engine.h, worker/engine.h, common/worker/engine.h), and the
    # files CMake generates.
    tails = set(generated)
    for f in subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                            capture_output=True, text=True,
                            check=True).stdout.split("\n"):
        parts = f.split("/")
        tails.update("/".join(parts[i:]) for i in range(len(parts)))
    bad = []
    for f in files:
        try:
            lines = open(f, encoding="utf-8").read().split("\n")
        except (OSError, UnicodeDecodeError):
            continue
        for n, line in enumerate(lines, 1):
            for m in PATH.finditer(line):
                p = m.group(1)
                if PLACEHOLDER.search(p) or p.endswith("/"):
                    continue
                if not path_ok(p, all_files, generated):
                    bad.append(f"{f}:{n}: cites {p}, which does not exist")
            for m in BARE.finditer(comment(f, line)):
                p = m.group(1)
                if not PLACEHOLDER.search(p) and not tail_ok(p, tails):
                    bad.append(f"{f}:{n}: cites {p}, which names no file of the repository")
            for m in SECTION.finditer(line):
                doc, title = m.group(1), m.group(2).strip().lower()
                if not os.path.exists(doc):
                    continue  # reported above as a path
                if not any(h.startswith(title) or title in h for h in headings(doc)):
                    bad.append(f"{f}:{n}: cites {doc}, \"{m.group(2)}\": no such heading there")
    for b in bad:
        print(b)
    print(f"{len(files)} files, {len(bad)} stale citation(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
