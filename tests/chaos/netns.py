#!/usr/bin/python3
"""Two network namespaces joined by a veth pair, for the runs on chaos.py's two-host stack.

outer() creates namespaces A and B (a /24 between them, shaped like the seeds' 2.35 Gbit/s LAN),
re-executes the run inside A with B's name and both addresses (add_namespace_args), and removes
both namespaces, with whatever still runs in them, afterwards.  netns_main() is the main() of
such a run.  Needs root (77: skipped).
"""
import argparse
import os
import random
import socket
import subprocess
import sys

SKIP = 77


def log(msg):
    print(msg, flush=True)


def sh(cmd, check=True):
    r = subprocess.run(cmd, shell=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if check and r.returncode != 0:
        raise RuntimeError("%s: %s" % (cmd, r.stdout.strip()))
    return r


def outer(args, script):
    if os.geteuid() != 0:
        log("SKIP: network namespaces need root (CAP_NET_ADMIN)")
        return SKIP
    tag = "%x" % (os.getpid() & 0xFFFF)
    na, nb = "h3ca" + tag, "h3cb" + tag
    net = "10.%d.%d" % (200 + (os.getpid() >> 8) % 50, os.getpid() % 250)
    ip_a, ip_b = net + ".1", net + ".2"
    if sh("ip netns add " + na, check=False).returncode != 0:
        log("SKIP: cannot create a network namespace here")
        return SKIP
    try:
        sh("ip netns add " + nb)
        sh("ip link add va%s type veth peer name vb%s" % (tag, tag))
        sh("ip link set va%s netns %s" % (tag, na))
        sh("ip link set vb%s netns %s" % (tag, nb))
        for ns, dev, ip in ((na, "va" + tag, ip_a), (nb, "vb" + tag, ip_b)):
            sh("ip netns exec %s ip addr add %s/24 dev %s" % (ns, ip, dev))
            sh("ip netns exec %s ip link set %s up" % (ns, dev))
            sh("ip netns exec %s ip link set lo up" % ns)
            sh("ip netns exec %s tc qdisc add dev %s root tbf rate 2350mbit burst 256kb latency 50ms" % (ns, dev))
        inner_args = [sys.executable, script, "--inner", "--ns-b", nb, "--ip-a", ip_a,
                      "--ip-b", ip_b] + args.passthrough
        return subprocess.run(["ip", "netns", "exec", na] + inner_args).returncode
    finally:
        # Whatever the inner run left (it was killed, or failed before stopping its stacks) dies
        # with the namespaces.
        for ns in (na, nb):
            sh("ip netns pids %s | xargs -r kill -9" % ns, check=False)
            sh("ip netns del " + ns, check=False)


def free_port(ip):
    sck = socket.socket()
    sck.bind((ip, 0))
    port = sck.getsockname()[1]
    sck.close()
    return port


def netns_main(doc, script, inner, add_args, seed=None):
    """main() of a run on chaos.py's two namespaces: the common flags plus add_args(parser);
    outside, outer() sets up the namespaces and re-executes script inside A, where inner(args)
    runs.  seed None: a random one."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", required=True, help="folder with h3pipe and the h3pipe-* services")
    p.add_argument("--stall-s", type=float, default=30.0, help="no progress for this long: resume / fail")
    p.add_argument("--seed", type=int, default=seed)
    p.add_argument("--keep", action="store_true", help="keep the work folder")
    p.add_argument("--workdir", default=None)
    add_args(p)
    add_namespace_args(p)
    a = p.parse_args()
    if a.seed is None:
        a.seed = random.randrange(1 << 30)
    if not a.inner:
        a.passthrough = [x for x in sys.argv[1:] if x != "--inner"]
        if "--seed" not in a.passthrough:  # the inner run uses the seed chosen here
            a.passthrough += ["--seed", str(a.seed)]
        return outer(a, os.path.abspath(script))
    return inner(a)


def add_namespace_args(p):
    """The arguments outer() hands the run it re-executes inside namespace A."""
    p.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--ns-b", help=argparse.SUPPRESS)
    p.add_argument("--ip-a", help=argparse.SUPPRESS)
    p.add_argument("--ip-b", help=argparse.SUPPRESS)
