#!/usr/bin/python3
"""Every log line goes through a component's named logger (common/logging/log.h).

Fails when a source file outside common/logging/ (common/, cli/, services/, fuzz/, bench/;
comments excepted)
  - calls spdlog's free functions (spdlog::info, ::warn, ..., ::set_level, ::set_default_logger,
    ::stderr_color_mt ...): those write to spdlog's default logger, without a component name;
  - names more than one component logger, or names a component another module already uses
    (one name per component: logging::get("engine") lives in common/worker only).
Prints the component names it found, with their modules, when it passes.
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
SOURCE_DIRS = ("common", "cli", "services", "fuzz", "bench")
BARE = re.compile(r"\bspdlog::(trace|debug|info|warn|error|critical|log|set_level|set_pattern|"
                  r"set_default_logger|default_logger|default_logger_raw|stderr_color_mt|"
                  r"stdout_color_mt|stderr_color_st|stdout_color_st|flush_on)\b")
GET = re.compile(r'logging::get\("([^"]*)"\)')
NAME = re.compile(r"^[a-z][a-z0-9_]*$")


def strip(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r'//[^\n"]*$', "", text, flags=re.M)


def module(rel):
    parts = rel.split("/")
    # common/transfer and services/transfer are one component (the library and its service).
    return parts[0] if parts[0] in ("cli", "fuzz", "bench") else parts[1]


def main():
    problems, owners = [], {}
    for d in SOURCE_DIRS:
        for p in sorted((ROOT / d).rglob("*")):
            if p.suffix not in (".cpp", ".h", ".inc", ".cc") or not p.is_file():
                continue
            rel = p.relative_to(ROOT).as_posix()
            if rel.startswith("common/logging/") and not rel.endswith("protobuf_log.cpp"):
                continue
            lines = strip(p.read_text(errors="replace")).split("\n")
            names = set()
            for n, line in enumerate(lines, 1):
                for m in BARE.finditer(line):
                    problems.append(f"{rel}:{n}: spdlog::{m.group(1)}: log through the component's "
                                    "logger (logging::get)")
                for m in GET.finditer(line):
                    names.add(m.group(1))
                    if not NAME.match(m.group(1)):
                        problems.append(f"{rel}:{n}: logger name \"{m.group(1)}\": lower case, "
                                        "letters, digits and _")
            if len(names) > 1:
                problems.append(f"{rel}: more than one component logger ({', '.join(sorted(names))})")
            for name in names:
                owners.setdefault(name, set()).add(module(rel))
    for name, mods in sorted(owners.items()):
        if len(mods) > 1:
            problems.append(f"logger \"{name}\" is used by {', '.join(sorted(mods))}: one name per component")
    for p in problems:
        print(p)
    if not problems:
        for name, mods in sorted(owners.items()):
            print(f"{name}: {', '.join(sorted(mods))}")
    print(f"{len(owners)} component loggers, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
