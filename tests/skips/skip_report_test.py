#!/usr/bin/env python3
"""Skips made visible (issue #36 item 2), checked end to end with real processes.

1. The probe (a GoogleTest binary with tests/support/gtest_main.cpp) exits 0 when all pass, 77
   with one "H3PIPE_SKIP: Suite.Name: reason" line per skipped case when nothing failed, 1 when a
   case failed beside a skip, and dies of its signal when it crashes (never 77).
2. Under a ctest of its own (a scratch CMake project, SKIP_RETURN_CODE 77 as h3pipe_add_test sets
   it): the skipping probe is "Skipped", the crashing one and the failing one "Failed"; a script
   that prints "SKIP: ..." and exits 77 is "Skipped".  scripts/skips.py on ctest's JUnit file lists
   every skip with its reason; with --strict it exits 1 because one reason (redis-sentinel
   missing) is not in tests/skip_allowlist.txt, and 0 once only allowed reasons are left; a
   unittest case skipped inside a passing test is listed too.
3. Every test h3pipe_add_test registered in this build has SKIP_RETURN_CODE 77.

Usage: skip_report_test.py --probe BIN --source SRC --build BUILD
"""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile

failures = []


def check(ok, what, detail=""):
    print(("ok    " if ok else "FAIL  ") + what + ("" if ok or not detail else "\n" + detail), flush=True)
    if not ok:
        failures.append(what)


def run_probe(probe, mode):
    env = dict(os.environ, H3PIPE_SKIP_PROBE=mode)
    return subprocess.run([probe], env=env, capture_output=True, text=True, timeout=60)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--probe", required=True)
    p.add_argument("--source", required=True)
    p.add_argument("--build", required=True)
    a = p.parse_args()
    a.probe, a.source, a.build = (os.path.abspath(x) for x in (a.probe, a.source, a.build))
    skips_py = os.path.join(a.source, "scripts", "skips.py")
    allow = os.path.join(a.source, "tests", "skip_allowlist.txt")

    # 1. The probe's exit codes.
    r = run_probe(a.probe, "pass")
    check(r.returncode == 0 and "H3PIPE_SKIP" not in r.stdout, "all pass: exit 0, no skip line", r.stdout)
    r = run_probe(a.probe, "skip")
    check(r.returncode == 77, "a skip, nothing failed: exit 77 (got %d)" % r.returncode, r.stdout)
    check("H3PIPE_SKIP: Probe.MaySkipFailOrCrash: needs root: the probe's allowed reason" in r.stdout,
          "the skip's line names the case and its reason", r.stdout)
    r = run_probe(a.probe, "fail_and_skip")
    check(r.returncode == 1, "a failure beside a skip: exit 1, a failure (got %d)" % r.returncode, r.stdout)
    r = run_probe(a.probe, "crash")
    check(r.returncode == -signal.SIGSEGV, "a crash: killed by its signal, never 77 (got %d)" % r.returncode,
          r.stdout)

    # 2. Under ctest, and scripts/skips.py on its JUnit file.
    cmake, ctest = shutil.which("cmake"), shutil.which("ctest")
    check(bool(cmake and ctest), "cmake and ctest on PATH")
    if not (cmake and ctest):
        return 1
    with tempfile.TemporaryDirectory() as d:
        src, bld = os.path.join(d, "src"), os.path.join(d, "build")
        os.makedirs(src)
        script = os.path.join(src, "netns_like.py")
        with open(script, "w") as f:
            f.write("import sys\nprint('[chaos 0.0s] SKIP: network namespaces need root (CAP_NET_ADMIN)')\n"
                    "sys.exit(77)\n")
        cases = {"probe_pass": "pass", "probe_skip": "skip", "probe_skip_other": "skip_other",
                 "probe_crash": "crash", "probe_fail_and_skip": "fail_and_skip"}
        lines = ["cmake_minimum_required(VERSION 3.16)", "project(skips NONE)", "enable_testing()"]
        for name, mode in cases.items():
            lines.append(f'add_test(NAME {name} COMMAND {cmake} -E env H3PIPE_SKIP_PROBE={mode} "{a.probe}")')
            lines.append(f"set_tests_properties({name} PROPERTIES SKIP_RETURN_CODE 77)")
        partial = os.path.join(src, "partial.py")
        with open(partial, "w") as f:
            f.write("import os, unittest\n"
                    "class Case(unittest.TestCase):\n"
                    "    def test_a(self):\n        self.assertTrue(True)\n"
                    "    @unittest.skipUnless(os.environ.get('NO_SUCH_VAR_H3'), "
                    "'set H3PIPE_HOOK_IMAGE=IMAGE to run the script in the CLI image')\n"
                    "    def test_b(self):\n        pass\n"
                    "unittest.main(verbosity=2)\n")
        lines.append(f'add_test(NAME unittest_partial COMMAND /usr/bin/python3 "{partial}")')
        lines.append(f'add_test(NAME script_skip COMMAND /usr/bin/python3 "{script}")')
        lines.append("set_tests_properties(script_skip PROPERTIES SKIP_RETURN_CODE 77)")
        with open(os.path.join(src, "CMakeLists.txt"), "w") as f:
            f.write("\n".join(lines) + "\n")
        subprocess.run([cmake, "-S", src, "-B", bld], check=True, capture_output=True)
        junit = os.path.join(d, "junit.xml")

        def ctest_run(regex):
            if os.path.exists(junit):
                os.remove(junit)
            return subprocess.run([ctest, "--test-dir", bld, "-R", regex, "--output-junit", junit],
                                  capture_output=True, text=True, timeout=120)

        out = ctest_run(".").stdout
        status = {}
        for l in out.splitlines():
            if " Test " in l and "#" in l:
                name = l.split(":", 1)[1].split()[0]
                status[name] = "Skipped" if "Skipped" in l else "Passed" if "Passed" in l else "Failed"
        want = {"probe_pass": "Passed", "probe_skip": "Skipped", "probe_skip_other": "Skipped",
                "probe_crash": "Failed", "probe_fail_and_skip": "Failed", "script_skip": "Skipped",
                "unittest_partial": "Passed"}
        check(status == want, "ctest: skips Skipped, the crash and the failure Failed", json.dumps(status) + "\n" + out)

        s = subprocess.run(["/usr/bin/python3", skips_py, junit, "--allowlist", allow],
                           capture_output=True, text=True)
        print(s.stdout, end="")
        check(s.returncode == 0, "skips.py without --strict lists and exits 0", s.stdout + s.stderr)
        check("skipped: probe_skip [Probe.MaySkipFailOrCrash]: needs root: the probe's allowed reason" in s.stdout
              and "(allowed: needs root)" in s.stdout, "an allowed GTest skip: its ctest name, case, reason, rule")
        check("skipped: probe_skip_other [Probe.MaySkipFailOrCrash]: /usr/bin/redis-sentinel missing   "
              "(NOT ALLOWED)" in s.stdout, "a skip for a missing tool is not allowed")
        check("skipped: script_skip: network namespaces need root (CAP_NET_ADMIN)" in s.stdout,
              "a script's SKIP line is its reason")
        check("probe_crash" not in s.stdout and "probe_fail_and_skip" not in s.stdout,
              "a crash or a failure is not listed as a skip")
        check("skipped: unittest_partial [Case.test_b] (in a test that passed): set H3PIPE_HOOK_IMAGE=IMAGE"
              in s.stdout, "a unittest case skipped inside a passing test is listed, marked so")
        check(s.stdout.startswith("skips: 3 test(s) skipped, 4 skip(s), 1 not in"), "the count line", s.stdout)
        s = subprocess.run(["/usr/bin/python3", skips_py, junit, "--allowlist", allow, "--strict"],
                           capture_output=True, text=True)
        check(s.returncode == 1 and "skips: FAIL: 1 skip(s)" in s.stdout,
              "--strict (CI=true): a skip the allowlist does not allow fails", s.stdout)
        ctest_run("probe_skip$|script_skip|probe_pass|unittest_partial")
        s = subprocess.run(["/usr/bin/python3", skips_py, junit, "--allowlist", allow, "--strict"],
                           capture_output=True, text=True)
        check(s.returncode == 0, "--strict with only allowed reasons passes", s.stdout)

    # 3. Every h3pipe_add_test test of this build maps a skip to ctest's skip.
    # (Their names from the CMake files: an executable not built yet has no command in the list.)
    names = set()
    for root, _, files in os.walk(os.path.join(a.source, "tests")):
        if "CMakeLists.txt" in files:
            with open(os.path.join(root, "CMakeLists.txt"), encoding="utf-8") as f:
                names.update(re.findall(r"h3pipe_add_test\(\s*([A-Za-z0-9_]+)", f.read()))
    show = subprocess.run([ctest, "--test-dir", a.build, "--show-only=json-v1"], capture_output=True, text=True)
    tests = {t["name"]: t for t in (json.loads(show.stdout).get("tests", []) if show.returncode == 0 else [])}
    gtests = [tests[n] for n in sorted(names) if n in tests]
    missing = [t["name"] for t in gtests
               if not any(p.get("name") == "SKIP_RETURN_CODE" and p.get("value") == 77
                          for p in t.get("properties", []))]
    check(len(gtests) > 50 and len(gtests) == len(names),
          "the build's GoogleTest tests found (%d of %d in the CMake files)" % (len(gtests), len(names)))
    check(not missing, "every h3pipe_add_test test has SKIP_RETURN_CODE 77", " ".join(missing))
    print("skip_report_test: %d failure(s)" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
