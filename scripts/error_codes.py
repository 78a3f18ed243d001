#!/usr/bin/python3
"""The error-code catalogue (common/core/error_codes.inc), checked and printed.

    error_codes.py check          catalogue sound, no code text outside it, docs/errors.md current
    error_codes.py markdown       print docs/errors.md (redirect it there after a change)

check fails when
  - an entry is malformed, a code or a name repeats, a name does not follow from the code, a
    meaning is missing, a runtime.permanent.* code is not kPermanent, or another code is
    kPermanent without being in PERMANENT_ELSEWHERE;
  - a source file outside the catalogue (common/, cli/, services/, fuzz/, bench/; comments
    excepted) spells a code's text as a string literal, or a prefix of one ("io.", "runtime.
    permanent") that builds a code at run time: name the constant, errc::domain::kName;
  - a catalogue code is used nowhere (a stale entry);
  - the ComfyUI node pack (integrations/comfyui/h3pipe_nodes) raises a code the catalogue does
    not list (its errors reach h3pipe as the task's code, and the catalogue's retry class);
  - docs/errors.md differs from what `markdown` prints.
Preflight check names (rep.pass/fail/warn/add("redis.auth", ...)) are names of checks, not error
codes, and may share a code's text.
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
CATALOGUE = ROOT / "common/core/error_codes.inc"
DOCS = ROOT / "docs/errors.md"
SOURCE_DIRS = ("common", "cli", "services", "fuzz", "bench")
# The node pack (Python, runs inside ComfyUI) raises its errors with a code as the first argument:
# LatentError("latent.layout", ...), SidecarError(...), or names one (`code = "io.error"`).
PACK_DIR = ROOT / "integrations/comfyui/h3pipe_nodes"
PACK_CODE = re.compile(r'(?:Error\(\s*|code\s*=\s*(?:"[a-z0-9_.]+"\s+if\s+[^"]*\s+else\s+)?)"([a-z0-9_]+\.[a-z0-9_.]+)"')
PACK_CODE_ALT = re.compile(r'code\s*=\s*"([a-z0-9_]+\.[a-z0-9_.]+)"')
OWN_FILES = {"common/core/error_codes.inc", "common/core/error_codes.h", "common/core/error_codes.cpp"}
RETRY = {"kRetried": "retried", "kPermanent": "permanent", "kNotATask": "-"}
# Codes outside runtime.permanent.* that no retry can change (issue #22): a path refused for what
# it is, a latent header over the limit.  tests/core/error_codes_test.cpp lists them too.
PERMANENT_ELSEWHERE = {"path.absolute", "path.dotdot", "path.empty", "path.escape", "path.not_beneath",
                       "path.nul", "path.symlink", "path.too_long", "latent.header_too_large",
                       "latent.nonfinite"}

ENTRY = re.compile(
    r'^H3_ERROR_CODE\((\w+), (k\w+), "([a-z0-9_.]+)", (k\w+),\s*((?:"(?:[^"\\]|\\.)*"\s*)+)\)',
    re.M)
LITERAL = re.compile(r'"((?:[^"\\\n]|\\.)*)"')
PREFLIGHT_NAME = re.compile(r'rep\.(pass|fail|warn|add)\(\s*$')


def load():
    text = CATALOGUE.read_text()
    entries = []
    for m in ENTRY.finditer(text):
        meaning = "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', m.group(5)))
        entries.append({"domain": m.group(1), "name": m.group(2), "code": m.group(3),
                        "retry": m.group(4), "meaning": meaning.replace('\\"', '"')})
    calls = len(re.findall(r"^H3_ERROR_CODE\(", text, re.M))
    return entries, calls


def expected_name(code):
    return "k" + "".join(w.capitalize() for w in re.split(r"[._]", code.split(".", 1)[1]))


def catalogue_problems(entries, calls):
    out = []
    if calls != len(entries):
        out.append(f"{CATALOGUE.name}: {calls} H3_ERROR_CODE entries, {len(entries)} well-formed")
    seen_code, seen_name = set(), set()
    for e in entries:
        c = e["code"]
        if c in seen_code:
            out.append(f"{c}: listed twice")
        seen_code.add(c)
        qual = f'{e["domain"]}::{e["name"]}'
        if qual in seen_name:
            out.append(f"{qual}: name used twice")
        seen_name.add(qual)
        if c.split(".", 1)[0] != e["domain"] or "." not in c:
            out.append(f"{c}: domain {e['domain']} is not the code's first part")
        elif e["name"] != expected_name(c):
            out.append(f"{c}: named {e['name']}, expected {expected_name(c)}")
        if e["retry"] not in RETRY:
            out.append(f"{c}: unknown retry class {e['retry']}")
        if c.startswith("runtime.permanent.") and e["retry"] != "kPermanent":
            out.append(f"{c}: a runtime.permanent.* code must be kPermanent")
        if e["retry"] == "kPermanent" and not c.startswith("runtime.permanent.") and c not in PERMANENT_ELSEWHERE:
            out.append(f"{c}: kPermanent outside runtime.permanent.* only for {sorted(PERMANENT_ELSEWHERE)}")
        if len(e["meaning"]) < 10 or not e["meaning"].endswith("."):
            out.append(f"{c}: the meaning must be a sentence")
    return out


def strip_comments(line, in_block):
    """The line without // and /* */ comments (string literals kept); returns (code, in_block)."""
    out, i, in_str = [], 0, False
    while i < len(line):
        if in_block:
            end = line.find("*/", i)
            if end < 0:
                return "".join(out), True
            i, in_block = end + 2, False
            continue
        ch = line[i]
        if in_str:
            out.append(ch)
            if ch == "\\" and i + 1 < len(line):
                out.append(line[i + 1])
                i += 1
            elif ch == '"':
                in_str = False
        elif line.startswith("//", i):
            break
        elif line.startswith("/*", i):
            in_block = True
            i += 1
        else:
            if ch == '"':
                in_str = True
            elif ch == "'" and line[i:i + 3] == "'\"'":
                out.append("'\"'")
                i += 3
                continue
            out.append(ch)
        i += 1
    return "".join(out), in_block


def source_files():
    for d in SOURCE_DIRS:
        for p in sorted((ROOT / d).rglob("*")):
            if p.suffix in (".cpp", ".h", ".inc", ".cc") and p.is_file():
                rel = p.relative_to(ROOT).as_posix()
                if rel not in OWN_FILES:
                    yield rel, p


def component(rel):
    parts = rel.split("/")
    return parts[0] if parts[0] in ("cli", "fuzz", "bench") else f"{parts[0]}/{parts[1]}"


def scan(entries):
    """(problems, where): code literals outside the catalogue; components using each constant."""
    codes = {e["code"] for e in entries}
    prefixes = set()
    for c in codes:
        parts = c.split(".")
        for n in range(1, len(parts)):
            prefixes.add(".".join(parts[:n]))
            prefixes.add(".".join(parts[:n]) + ".")
    domains = {e["domain"] for e in entries}
    uses = {}
    for e in entries:
        uses[f'errc::{e["domain"]}::{e["name"]}'] = e["code"]
    use_re = re.compile(r"errc::(\w+)::(k\w+)\b")
    problems, where = [], {c: set() for c in codes}
    for rel, p in source_files():
        in_block = False
        for n, line in enumerate(p.read_text(errors="replace").split("\n"), 1):
            code, in_block = strip_comments(line, in_block)
            for m in LITERAL.finditer(code):
                s = m.group(1)
                if s in codes:
                    if PREFLIGHT_NAME.search(code[:m.start()]):
                        continue
                    problems.append(f"{rel}:{n}: the code \"{s}\" spelled out: use its errc:: constant")
                elif s in prefixes and s.split(".")[0] in domains and "." in s:
                    problems.append(f"{rel}:{n}: \"{s}\" builds a code at run time: pass a constant")
            for m in use_re.finditer(code):
                key = f"errc::{m.group(1)}::{m.group(2)}"
                if key in uses:
                    where[uses[key]].add(component(rel))
                else:
                    problems.append(f"{rel}:{n}: {key} is not in the catalogue")
    for p in sorted(PACK_DIR.glob("*.py")):
        rel = p.relative_to(ROOT).as_posix()
        for n, line in enumerate(p.read_text().split("\n"), 1):
            for c in sorted({m.group(1) for rx in (PACK_CODE, PACK_CODE_ALT) for m in rx.finditer(line)}):
                if c in where:
                    where[c].add("node pack")
                else:
                    problems.append(f"{rel}:{n}: the node pack raises \"{c}\", which the catalogue "
                                    "does not list")
    for c, w in sorted(where.items()):
        if not w:
            problems.append(f"{c}: in the catalogue but used nowhere (remove the entry)")
    return problems, where


def markdown(entries, where):
    lines = [
        "# Error codes",
        "",
        "<!-- Generated by `scripts/error_codes.py markdown > docs/errors.md` from",
        "     common/core/error_codes.inc; the error_codes_check test fails when they differ. -->",
        "",
        "Every error h3pipe reports carries one of these codes: in a job's reason (`status`, the",
        "dead-letter stream, receipts), a transfer reply, a command's message (`CODE: message`).",
        "The code text is stable; the message names the field, file or peer concerned.  In code,",
        "each is a constant of `common/core/error_codes.h` (`errc::redis::kIo`).",
        "",
        "Retry: what the stage engine does with a task that fails with the code.",
        "",
        "- `retried`: retried with backoff (`queue.retry_backoff_ms`) until `queue.max_deliveries`,",
        "  then dead-lettered.",
        "- `permanent`: retrying cannot help, so the first failure dead-letters the job",
        "  (`failed permanently on delivery N`).",
        "- `-`: reported by a command, a config load or a service start-up, not by a task.",
        "",
        "A command's exit status is a separate, smaller table: see \"Exit codes\" in the",
        "[README](../README.md) (also `h3pipe --help`).",
        "",
        "| code | meaning | retry | where |",
        "|---|---|---|---|",
    ]
    for e in entries:
        meaning = e["meaning"].replace("|", "\\|")
        w = ", ".join(sorted(where[e["code"]]))
        lines.append(f'| `{e["code"]}` | {meaning} | {RETRY.get(e["retry"], "?")} | {w} |')
    return "\n".join(lines) + "\n"


def main(argv):
    mode = argv[1] if len(argv) > 1 else "check"
    entries, calls = load()
    problems = catalogue_problems(entries, calls)
    scan_problems, where = scan(entries)
    if mode == "markdown":
        sys.stdout.write(markdown(entries, where))
        return 0
    if mode != "check":
        print(__doc__)
        return 2
    problems += scan_problems
    if not DOCS.exists() or DOCS.read_text() != markdown(entries, where):
        problems.append("docs/errors.md is not current: scripts/error_codes.py markdown > docs/errors.md")
    for p in problems:
        print(p)
    print(f"{len(entries)} codes, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
