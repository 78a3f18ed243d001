#!/usr/bin/python3
"""scripts/bench.sh builds what each benchmark runs (issue #36 item 7).

For every NAME in bench.sh's usage: `H3PIPE_BENCH_TARGETS_ONLY=1 scripts/bench.sh NAME` names the
build directory and the targets it builds first; each target must exist in this build
(`cmake --build BUILD --target help`), a NAME that runs build/bench/bench_NAME must build that
target, and one that runs the services (pipeline, plan-vs-run, chaos) must build the CLI and all
four.  An unknown NAME exits 2 listing the names.

Usage: bench_script_targets_check.py SOURCE_DIR BUILD_DIR CMAKE
"""
import os
import re
import subprocess
import sys


def main():
    src, build, cmake = sys.argv[1:4]
    bench = os.path.join(src, "scripts", "bench.sh")
    with open(bench) as f:
        text = f.read()
    names = re.search(r'^names="([^"]+)"', text, re.M).group(1).split("|")
    help_out = subprocess.run([cmake, "--build", build, "--target", "help"], capture_output=True, text=True).stdout
    known = set(re.findall(r"^(?:\.\.\. )?([A-Za-z0-9_.+-]+)(?::|$)", help_out, re.M))
    problems = []
    env = dict(os.environ, H3PIPE_BENCH_TARGETS_ONLY="1", H3PIPE_BUILD=build)
    env.pop("BUILD_DIR", None)
    for name in names:
        r = subprocess.run(["bash", bench, name], env=env, capture_output=True, text=True, cwd=src)
        if r.returncode != 0:
            problems.append(f"{name}: exit {r.returncode}: {r.stderr.strip()}")
            continue
        out = r.stdout.split()
        where, targets = out[0], out[1:]
        print(f"{name}: builds {' '.join(targets) or '(its own clang build: scripts/bench_fuzz.sh)'} in {where}")
        if where != build:
            problems.append(f"{name}: builds in {where}, not {build}")
        for t in targets:
            if t not in known:
                problems.append(f"{name}: target {t} is not a target of this build")
        own = "bench_" + name.replace("-", "_")
        runs_own_binary = not os.path.exists(os.path.join(src, "scripts", own + ".sh")) and \
            not name.startswith("fuzz")
        if runs_own_binary and own not in targets:
            problems.append(f"{name}: runs {build}/bench/{own} but does not build {own}")
        if name in ("pipeline", "plan-vs-run", "chaos"):
            need = {"h3pipe", "h3pipe-encoder", "h3pipe-sampler", "h3pipe-decoder", "h3pipe-transfer"}
            if not need <= set(targets):
                problems.append(f"{name}: runs the stack but builds only {targets}")
        if name in ("transfer",) and not {"xfer_node", "bench_sha"} <= set(targets):
            problems.append(f"{name}: does not build xfer_node and bench_sha")
        if name in ("runtime", "plan", "mp4", "queue") and own not in targets:
            problems.append(f"{name}: does not build {own}")
    if not re.search(r'^\[\[ \$name == fuzz-latent \]\] && exec scripts/bench_fuzz.sh "\$\{1:-60\}" fuzz_latent$',
                     text, re.M):
        problems.append("fuzz-latent: not handed to scripts/bench_fuzz.sh with its fuzz_latent target")
    r = subprocess.run(["bash", bench, "no-such-bench"], env=env, capture_output=True, text=True, cwd=src)
    if r.returncode != 2 or "no benchmark named no-such-bench (one of: queue" not in r.stderr:
        problems.append(f"an unknown NAME: exit {r.returncode}, {r.stderr.strip()!r}")
    for p in problems:
        print("FAIL " + p)
    print(f"bench_script_targets_check: {len(names)} names, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
