#!/usr/bin/python3
"""Every JSON text from outside goes through the one bounded reader (issue #35 D2).

    check_json_parse.py        exit 1, listing each offending line, when a source file under
                               common/, cli/, services/ or fuzz/ calls nlohmann's parser
                               (json::parse, ordered_json::parse, Json::parse, sax_parse, accept)
                               anywhere but common/core/json_parse.cpp

nlohmann's parser bounds neither depth nor size; its DOM's copy, dump() and comparison recurse
once per level, so a 300,000-level document from a ComfyUI server, a config or a workflow
overflowed the stack.  common/core/json_parse.h (json_reader::parse_limited, parse_json, ...)
refuses too deep or too large text with the source and the JSON pointer.  A call that parses text
this process made itself (a built-in table, protobuf's own output) or that bounds depth itself is
allowed when the line, or the line above it, says why with a `json-parse:` comment.
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
DIRS = ("common", "cli", "services", "fuzz")
OWN = {"common/core/json_parse.cpp"}
CALL = re.compile(r"\b(?:\w+::)*\w*(?:json|Json|JSON)::(?:parse|accept|sax_parse|from_cbor|"
                  r"from_msgpack|from_bson|from_ubjson|from_bjdata)\s*\(|\bsax_parse\s*\(")
MARK = "json-parse:"


def strip_comment(line):
    return line.split("//", 1)[0]


def problems():
    out = []
    for d in DIRS:
        for path in sorted((ROOT / d).rglob("*")):
            if path.suffix not in (".cpp", ".h", ".hpp", ".cc") or not path.is_file():
                continue
            rel = path.relative_to(ROOT).as_posix()
            if rel in OWN:
                continue
            lines = path.read_text(errors="replace").splitlines()
            for i, line in enumerate(lines):
                if not CALL.search(strip_comment(line)):
                    continue
                if MARK in line or (i > 0 and MARK in lines[i - 1]):
                    continue
                out.append(f"{rel}:{i + 1}: {line.strip()}")
    return out


def main():
    found = problems()
    for p in found:
        print(p)
    if found:
        print(f"{len(found)} raw JSON parse(s): read outside text with json_reader::parse_limited "
              "(common/core/json_parse.h), or say why the text is safe with a `json-parse:` "
              "comment", file=sys.stderr)
        return 1
    print("json parse: every JSON text from outside goes through common/core/json_parse.h")
    return 0


if __name__ == "__main__":
    sys.exit(main())
