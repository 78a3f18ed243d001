#!/usr/bin/env python3
"""The skipped tests of a ctest run, with their reasons, checked against the allowlist.

Usage: scripts/skips.py JUNIT_XML [--allowlist tests/skip_allowlist.txt] [--strict]

JUNIT_XML is what `ctest --output-junit FILE` wrote (scripts/test.sh writes
build/Testing/ctest-junit.xml).  A ctest test is skipped when it exited with its SKIP_RETURN_CODE
(77): a GoogleTest binary (h3pipe_add_test) does so when nothing failed and a GTEST_SKIP ran,
printing one "H3PIPE_SKIP: Suite.Name: reason" line per skipped case
(tests/support/gtest_main.cpp); a Python or shell test prints a "SKIP: reason" (or "skipped:
reason") line before it exits 77.  A Python unittest case skipped inside a ctest test that
passed ("test_x (mod.Class.test_x) ... skipped 'reason'") is listed too, marked so.  Each skip is
printed as

    skipped: CTEST_NAME [Suite.Name]: reason   (allowed: ALLOWLIST LINE | NOT ALLOWED)

A reason is allowed when one of the allowlist's regular expressions (Python syntax,
case-insensitive, one per line; '#' starts a comment) occurs in it.  --strict (scripts/test.sh
passes it under CI=true): exit 1 when a skip's reason is not allowed, or a skip gave no reason.
Exit 0 otherwise; 2 on a missing or unreadable file.
"""
import argparse
import re
import sys
import xml.etree.ElementTree as ET

GTEST_LINE = re.compile(r"^H3PIPE_SKIP: (\S+): (.*)$")
GTEST_TOTAL = re.compile(r"^H3PIPE_SKIP: \d+ of \d+ tests skipped")
SCRIPT_LINE = re.compile(r"^\s*(?:\[[^\]]*\]\s*)?skip(?:ped)?\b[^:\n]{0,40}:\s*(.+)$", re.I)
# A Python unittest case skipped inside a ctest test that passed (unittest -v):
#   test_name (module.Class.test_name) ... skipped 'reason'
UNITTEST_SKIP = re.compile(r"^(\w+) \(([\w.]+)\) \.\.\. skipped '(.*)'$")


def load_allowlist(path):
    pats = []
    with open(path, encoding="utf-8") as f:
        for n, raw in enumerate(f, 1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            try:
                pats.append((line, re.compile(line, re.I)))
            except re.error as e:
                raise SystemExit(f"skips.py: {path}:{n}: not a regular expression ({e}): {line}")
    return pats


def skips_of(output):
    """[(case, reason)] of one skipped ctest test's output."""
    lines = output.splitlines()
    found = [(m.group(1), m.group(2).strip()) for l in lines
             if not GTEST_TOTAL.match(l) and (m := GTEST_LINE.match(l))]
    if found:
        return found
    script = [m.group(1).strip() for l in lines if (m := SCRIPT_LINE.match(l))]
    if script:
        return [("", script[-1])]
    last = next((l.strip() for l in reversed(lines) if l.strip()), "")
    return [("", "")] if not last else [("", "(no SKIP line; last output: %s)" % last[:200])]


def unittest_skips(output):
    """[(Class.test, reason)] of the unittest cases a passing test skipped."""
    out = []
    for l in output.splitlines():
        m = UNITTEST_SKIP.match(l.strip())
        if m:
            cls = m.group(2).rsplit(".", 2)
            out.append((".".join(cls[-2:]) if len(cls) >= 2 else m.group(1), m.group(3)))
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("junit")
    p.add_argument("--allowlist", default="tests/skip_allowlist.txt")
    p.add_argument("--strict", action="store_true", help="exit 1 on a skip the allowlist does not allow")
    a = p.parse_args()
    try:
        root = ET.parse(a.junit).getroot()
        allow = load_allowlist(a.allowlist)
    except (OSError, ET.ParseError) as e:
        print(f"skips.py: {e}")
        return 2
    rows, bad = [], 0
    for tc in root.iter("testcase"):
        out = tc.findtext("system-out") or ""
        if tc.find("skipped") is not None:
            found, note = skips_of(out), ""
        elif tc.get("status") == "run":
            # A ctest test that passed with unittest cases skipped inside it (its other cases ran).
            found, note = unittest_skips(out), " (in a test that passed)"
        else:
            continue
        for case, reason in found:
            rule = next((text for text, rx in allow if reason and rx.search(reason)), None)
            bad += rule is None
            where = f"{tc.get('name')} [{case}]" if case else tc.get("name")
            rows.append(f"  skipped: {where}{note}: {reason or '(no reason given)'}   "
                        + (f"(allowed: {rule})" if rule else "(NOT ALLOWED)"))
    tests = len({tc.get("name") for tc in root.iter("testcase") if tc.find("skipped") is not None})
    print(f"skips: {tests} test(s) skipped, {len(rows)} skip(s), {bad} not in {a.allowlist}")
    for r in rows:
        print(r)
    if bad and a.strict:
        print(f"skips: FAIL: {bad} skip(s) for a reason {a.allowlist} does not allow (CI=true)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
