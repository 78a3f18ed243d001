#!/usr/bin/env bash
# Transfer benchmark (issue #3): two network namespaces joined by a veth pair shaped with tbf to
# the seeds' LAN (2.35 Gbit/s), a 4.3 MB and a 13 MB latent, CURVE on and off:
#   - time from "durable on A" (submit) to "verified and durable on B" (on_durable), median and
#     best of REPS, and its ratio to the wire time bytes*8/2.35e9;
#   - scp of the same files (sshd started in namespace B on a free port, temp host key, key auth);
#   - iperf3 TCP throughput of the same link, and the same files' bytes alone through one TCP
#     connection (bench/transfer/raw_tcp.py): the floor under any protocol on this link;
#   - loopback MB/s with and without CURVE; SHA-256 GB/s;
#   - three modes: curve (the product: CURVE handshake and control, the bytes as AES-256-GCM data
#     frames under a per-offer key, issue #36 item 8), curveall (--no-data-frames: CURVE carries
#     every byte, as before that change), plain (--no-curve: no cipher at all, the floor);
#   - the hand-off's breakdown (issue #24), median ms of each phase per size and mode:
#     submit_to_offer, offer_to_first_byte, wire, hash_tail, check, fsync_commit, handoff
#     (docs/report.md); JSON breakdown_ms_<size>_<mode>;
#   - CPU per hand-off, ms (user + system, all threads; sender and receiver from each process's
#     getrusage over its series, warm-up included): JSON cpu_ms_<size>_<mode>.
#   - the same CURVE link series again with a CPU hog (one busy-loop process) beside the sender in
#     A and one beside the receiver in B (issue #36 item 8: a sampler host's cores are busy):
#     JSON *_curve_hog keys (and *_curveall_hog, *_plain_hog); the curve mode's ratios to raw TCP are checked against the goal (4.3 MB
#     <= 1.10x, 13 MB <= 1.05x, median of REPS) and printed as met / NOT met.  HOG=0 skips it.
# Needs root.  Only loopback and the two namespaces it creates carry traffic.
#
# Usage: scripts/bench_transfer.sh [BUILD_DIR]      (default: build)
#   env: REPS=10 RATE_MBIT=2350 MTU=1500 ARTIFACT_DIR=<tmp on disk> KEEP=0
#        EAGER=0 (senders wait for the offer's reply: the zero-round-trip start off, to compare)
# Last line of stdout: one JSON object (ratio_13mb_curve, scp_speedup_4_3mb, ...).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
REPS=${REPS:-10}
RATE_MBIT=${RATE_MBIT:-2350}
MTU=${MTU:-1500}
NODE=$BUILD/bench/xfer_node
SHA=$BUILD/bench/bench_sha
[[ $(id -u) -eq 0 ]] || { echo "bench_transfer: needs root (network namespaces)" >&2; exit 2; }
[[ -x $NODE && -x $SHA ]] || { echo "bench_transfer: build first: cmake --build $BUILD --target xfer_node bench_sha" >&2; exit 2; }
NODE=$(readlink -f "$NODE"); SHA=$(readlink -f "$SHA")

W=$(mktemp -d "${ARTIFACT_DIR:-/var/tmp}/h3bench.XXXXXX")
A=h3bA$$; B=h3bB$$
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  ip netns del "$A" 2>/dev/null || true
  ip netns del "$B" 2>/dev/null || true
  [[ ${KEEP:-0} == 1 ]] || rm -rf "$W"
}
trap cleanup EXIT
log() { echo "bench_transfer: $*" >&2; }

# ---------------------------------------------------------------- the link
ip netns add "$A"; ip netns add "$B"
ip link add vA netns "$A" type veth peer name vB netns "$B"
ip -n "$A" addr add 10.214.0.1/24 dev vA
ip -n "$B" addr add 10.214.0.2/24 dev vB
for pair in "$A vA" "$B vB"; do
  set -- $pair
  ip -n "$1" link set "$2" mtu "$MTU" up
  ip -n "$1" link set lo up
  ip netns exec "$1" tc qdisc add dev "$2" root tbf rate "${RATE_MBIT}mbit" burst 256kb latency 50ms
done
log "link: veth $A <-> $B, tbf ${RATE_MBIT}mbit burst 256kb latency 50ms, mtu $MTU; work dir $W"

ip netns exec "$B" iperf3 -s -1 -p 5201 >/dev/null 2>&1 &
PIDS+=($!)
sleep 0.3
IPERF_GBPS=$(ip netns exec "$A" iperf3 -c 10.214.0.2 -p 5201 -t 3 -J |
  /usr/bin/python3 -c 'import json,sys; print("%.3f" % (json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/1e9))')
log "iperf3 TCP: $IPERF_GBPS Gbit/s"

# ---------------------------------------------------------------- latents
"$NODE" keygen "$W/keys" >/dev/null
read -r _ SIZE4 < <("$NODE" mklatent "$W/A/src/l4/latent.h3latent" --width 736 --height 416 --frames 124)
read -r _ SIZE13 < <("$NODE" mklatent "$W/A/src/l13/latent.h3latent" --width 1280 --height 736 --frames 137)
log "latents: $SIZE4 and $SIZE13 bytes (416x736x124 and 736x1280x137)"

# The bytes alone through TCP, same sizes, same number of reps.
raw_tcp() {  # size out
  ip netns exec "$B" /usr/bin/python3 bench/transfer/raw_tcp.py recv 10.214.0.2 5202 "$1" $((REPS + 1)) &
  local rp=$!
  ip netns exec "$A" /usr/bin/python3 bench/transfer/raw_tcp.py send 10.214.0.2 5202 "$1" $((REPS + 1)) >"$2"
  wait "$rp"
}
raw_tcp "$SIZE4" "$W/raw4.json"
raw_tcp "$SIZE13" "$W/raw13.json"

# One series: receiver in B, sender in A, warm-up + REPS sequential transfers of one file.
series() {  # name curve_flag rel bind_ns_b endpoint
  local name=$1 flag=$2 rel=$3 ns_recv=$4 ns_send=$5 ep=$6
  local tasks=()
  for _ in $(seq $((REPS + 1))); do tasks+=(--task "$rel"); done
  ip netns exec "$ns_recv" "$NODE" receive --bind "tcp://$ep" --root "$W/B-$name" --keys "$W/keys" \
    --log "$W/$name.recv.jsonl" $flag 2>"$W/$name.recv.err" &
  local rp=$!
  PIDS+=($rp)
  for _ in $(seq 100); do grep -q '"ready"' "$W/$name.recv.jsonl" 2>/dev/null && break; sleep 0.05; done
  ip netns exec "$ns_send" "$NODE" send --peer "B=tcp://$ep" --root "$W/A" --keys "$W/keys" \
    --log "$W/$name.send.jsonl" --run "$name" --sequential --exit-after $((REPS + 1)) "${tasks[@]}" $flag \
    $([[ ${EAGER:-1} == 0 ]] && echo --no-eager) \
    2>"$W/$name.send.err"
  kill "$rp"; wait "$rp" 2>/dev/null || true
}
# The latents, their links and raw TCP's files written back first, so that the first series does
# not pay for their write-back in its fsyncs (it once showed 5-10 ms commits in its first reps).
sync
# The link series first, the loopback ones (which write ~300 MB to disk at full speed, leaving the
# host's cache busy for a while) after them, so that they cannot slow the link series.
mode_flag() {  # mode -> xfer_node flag
  case $1 in curve) echo "" ;; curveall) echo "--no-data-frames" ;; plain) echo "--no-curve" ;; esac
}
for c in curve curveall plain; do
  flag=$(mode_flag "$c")
  series "net4_$c" "$flag" src/l4/latent.h3latent "$B" "$A" 10.214.0.2:7000
  series "net13_$c" "$flag" src/l13/latent.h3latent "$B" "$A" 10.214.0.2:7000
done
# The CURVE link series with both ends' cores busy: one busy loop in each namespace.
HOGS=()
if [[ ${HOG:-1} != 0 ]]; then
  for ns in "$A" "$B"; do
    ip netns exec "$ns" /bin/sh -c 'while :; do :; done' &
    HOGS+=($!); PIDS+=($!)
  done
  # The floor under the same load: the bytes alone through TCP with the same two busy loops.
  raw_tcp "$SIZE4" "$W/raw4_hog.json"
  raw_tcp "$SIZE13" "$W/raw13_hog.json"
  for c in curve curveall plain; do  # plain: no cipher at all, the floor for any data-path cipher
    flag=$(mode_flag "$c")
    series "net4_${c}_hog" "$flag" src/l4/latent.h3latent "$B" "$A" 10.214.0.2:7000
    series "net13_${c}_hog" "$flag" src/l13/latent.h3latent "$B" "$A" 10.214.0.2:7000
  done
  for p in "${HOGS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
fi
for c in curve curveall plain; do
  flag=$(mode_flag "$c")
  series "lo13_$c" "$flag" src/l13/latent.h3latent "$A" "$A" 127.0.0.1:7001
done

# ---------------------------------------------------------------- scp
mkdir -p "$W/ssh" /run/sshd
ssh-keygen -q -t ed25519 -N '' -f "$W/ssh/host" && ssh-keygen -q -t ed25519 -N '' -f "$W/ssh/client"
cp "$W/ssh/client.pub" "$W/ssh/authorized_keys"
SSH_PORT=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat >"$W/ssh/sshd_config" <<EOF
Port $SSH_PORT
ListenAddress 10.214.0.2
HostKey $W/ssh/host
AuthorizedKeysFile $W/ssh/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PidFile $W/ssh/sshd.pid
Subsystem sftp internal-sftp
EOF
ip netns exec "$B" /usr/sbin/sshd -D -e -f "$W/ssh/sshd_config" 2>"$W/ssh/sshd.log" &
PIDS+=($!)
for _ in $(seq 100); do ip netns exec "$A" bash -c "echo > /dev/tcp/10.214.0.2/$SSH_PORT" 2>/dev/null && break; sleep 0.05; done
mkdir -p "$W/scp-dst"
scp_series() {  # name file
  local out="$W/$1.scp.txt"
  : >"$out"
  for i in $(seq $((REPS + 1))); do
    local t0 t1
    t0=$(date +%s%N)
    ip netns exec "$A" scp -q -i "$W/ssh/client" -P "$SSH_PORT" -o StrictHostKeyChecking=no \
      -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR "$2" "root@10.214.0.2:$W/scp-dst/$1-$i"
    t1=$(date +%s%N)
    [[ $i -gt 1 ]] && echo $(((t1 - t0))) >>"$out"
  done
}
scp_series scp4 "$W/A/src/l4/latent.h3latent"
scp_series scp13 "$W/A/src/l13/latent.h3latent"

SHA_GBPS=$("$SHA" | tail -1)
LOAD=$(cut -d' ' -f1-3 /proc/loadavg)

# ---------------------------------------------------------------- report
W="$W" REPS="$REPS" EAGER="${EAGER:-1}" IPERF_GBPS="$IPERF_GBPS" SHA_JSON="$SHA_GBPS" LOAD="$LOAD" RATE_MBIT="$RATE_MBIT" MTU="$MTU" \
  NPROC=$(nproc) HOG="${HOG:-1}" /usr/bin/python3 - <<'EOF'
import json, os, statistics
W = os.environ["W"]
nominal = 2.35e9
iperf = float(os.environ["IPERF_GBPS"]) * 1e9

def series(name):
    sub, dur, size = {}, [], 0
    for line in open(f"{W}/{name}.send.jsonl"):
        e = json.loads(line)
        if e["event"] == "submit": sub[(e["run"], e["job"])] = e["t_ns"]
    for line in open(f"{W}/{name}.recv.jsonl"):
        e = json.loads(line)
        if e["event"] == "durable":
            dur.append((e["t_ns"] - sub[(e["run"], e["job"])]) / 1e9); size = e["size"]
    return size, dur[1:]  # first one warms up the connection

# The hand-off's breakdown (issue #24): each phase's median over the timed reps, ms.
PHASES = ("submit_to_offer", "offer_to_first_byte", "wire", "hash_tail", "check", "fsync_commit", "handoff")
def breakdown(name):
    sub, ph = {}, {k: [] for k in PHASES}
    for line in open(f"{W}/{name}.send.jsonl"):
        e = json.loads(line)
        if e["event"] == "submit": sub[(e["run"], e["job"])] = e["t_ns"]
    rows = [json.loads(l) for l in open(f"{W}/{name}.recv.jsonl")]
    rows = [e for e in rows if e["event"] == "durable" and e.get("offer_ns")][1:]
    for e in rows:
        t0 = sub[(e["run"], e["job"])]
        ph["submit_to_offer"].append((e["offer_ns"] - t0) / 1e6)
        ph["offer_to_first_byte"].append(e["offer_s"] * 1e3)
        ph["wire"].append((e["wire_s"] - e["offer_s"]) * 1e3)
        ph["hash_tail"].append((e["verify_s"] - e["check_s"] - e["commit_s"]) * 1e3)
        ph["check"].append(e["check_s"] * 1e3)
        ph["fsync_commit"].append(e["commit_s"] * 1e3)
        ph["handoff"].append((e["t_ns"] - e["offer_ns"]) / 1e6 - (e["wire_s"] + e["verify_s"]) * 1e3)
    return {k: round(statistics.median(v), 3) for k, v in ph.items() if v}

# CPU per hand-off (ms): each process's own getrusage at its end, over the series' transfers.
def cpu(name):
    out = {}
    for side in ("send", "recv"):
        rows = [json.loads(l) for l in open(f"{W}/{name}.{side}.jsonl")]
        stop = [e for e in rows if e["event"] == "stopped" and "cpu_s" in e]
        n = sum(1 for e in rows if e["event"] == ("sent" if side == "send" else "durable"))
        if stop and n:
            out["sender" if side == "send" else "receiver"] = round(stop[-1]["cpu_s"] * 1e3 / n, 2)
    return out

# How many of the timed transfers went as AES-256-GCM data frames (SendReport.sealed).
def sealed(name):
    rows = [json.loads(l) for l in open(f"{W}/{name}.send.jsonl")]
    sent = [e for e in rows if e["event"] == "sent"][1:]
    return sum(1 for e in sent if e.get("sealed")), len(sent)

def scp(name):
    return [int(x) / 1e9 for x in open(f"{W}/{name}.scp.txt").read().split()]

r = {"reps": int(os.environ["REPS"]), "eager": os.environ["EAGER"] != "0", "link_mbit": int(os.environ["RATE_MBIT"]), "mtu": int(os.environ["MTU"]),
     "iperf3_gbps": float(os.environ["IPERF_GBPS"]), "cpus": int(os.environ["NPROC"]), "loadavg": os.environ["LOAD"]}
rows = []
MODES = ("curve", "curveall", "plain")
for label, name in [("4.3MB", "net4"), ("13MB", "net13")]:
    for c in MODES:
        size, d = series(f"{name}_{c}")
        med, best = statistics.median(d), min(d)
        wire = size * 8 / nominal
        key = f"{label.replace('.', '_').lower()}_{c}"
        r[f"seconds_{key}"] = round(med, 5)
        r[f"best_seconds_{key}"] = round(best, 5)
        r[f"ratio_{key}"] = round(med / wire, 3)
        r[f"best_ratio_{key}"] = round(best / wire, 3)
        r[f"ratio_vs_iperf_{key}"] = round(med / (size * 8 / iperf), 3)
        rows.append((label, c, size, med, best, wire, med / wire, best / wire, med / (size * 8 / iperf)))
bd_rows = []
for label, name in [("4.3MB", "net4"), ("13MB", "net13")]:
    for c in MODES:
        b = breakdown(f"{name}_{c}")
        r[f"breakdown_ms_{label.replace('.', '_').lower()}_{c}"] = b
        r[f"cpu_ms_{label.replace('.', '_').lower()}_{c}"] = cpu(f"{name}_{c}")
        bd_rows.append((label, c, b))
    for c in (MODES if os.environ["HOG"] != "0" else ()):  # the same phases with the busy loops
        b = breakdown(f"{name}_{c}_hog")
        r[f"breakdown_ms_{label.replace('.', '_').lower()}_{c}_hog"] = b
        r[f"cpu_ms_{label.replace('.', '_').lower()}_{c}_hog"] = cpu(f"{name}_{c}_hog")
        bd_rows.append((label, c + "_hog", b))
for label, name in [("4.3MB", "raw4"), ("13MB", "raw13")]:
    d = json.load(open(f"{W}/{name}.json"))
    key = label.replace('.', '_').lower()
    r[f"raw_tcp_seconds_{key}"] = round(statistics.median(d["seconds"]), 5)
    r[f"raw_tcp_ratio_{key}"] = round(statistics.median(d["seconds"]) / (d["size"] * 8 / nominal), 3)
    for c in MODES:
        r[f"ratio_vs_raw_tcp_{key}_{c}"] = round(r[f"seconds_{key}_{c}"] / r[f"raw_tcp_seconds_{key}"], 3)
# With the CPU hogs (issue #36 item 8): the ratio to the quiet raw TCP figure, CPU per hand-off.
GOAL = {"4_3mb": 1.10, "13mb": 1.05}
goal_rows = []
for label, name in [("4.3MB", "net4"), ("13MB", "net13")]:
    key = label.replace('.', '_').lower()
    for c in ("curve", "curveall"):
        goal_rows.append((label, c, "quiet", r[f"ratio_vs_raw_tcp_{key}_{c}"], GOAL[key], r[f"cpu_ms_{key}_{c}"]))
    for c in (MODES if os.environ["HOG"] != "0" else ()):
        size, d = series(f"{name}_{c}_hog")
        r[f"seconds_{key}_{c}_hog"] = round(statistics.median(d), 5)
        r[f"ratio_vs_raw_tcp_{key}_{c}_hog"] = round(statistics.median(d) / r[f"raw_tcp_seconds_{key}"], 3)
        r[f"cpu_ms_{key}_{c}_hog"] = cpu(f"{name}_{c}_hog")
        raw_hog = json.load(open(f"{W}/raw{name[3:]}_hog.json"))
        r[f"raw_tcp_seconds_{key}_hog"] = round(statistics.median(raw_hog["seconds"]), 5)
        r[f"ratio_vs_raw_tcp_hog_{key}_{c}_hog"] = round(statistics.median(d) / r[f"raw_tcp_seconds_{key}_hog"], 3)
        goal_rows.append((label, c, "hog", r[f"ratio_vs_raw_tcp_{key}_{c}_hog"], GOAL[key], r[f"cpu_ms_{key}_{c}_hog"]))
for label, name in [("4.3MB", "net4"), ("13MB", "net13")]:
    for c in MODES:
        n, of = sealed(f"{name}_{c}")
        r[f"sealed_{label.replace('.', '_').lower()}_{c}"] = f"{n}/{of}"
r["goal_met"] = all(g[3] <= g[4] for g in goal_rows if g[1] == "curve")
# The same goal with each case's own floor: the hog series against raw TCP under the same hogs.
r["goal_met_same_load"] = all(
    (r[f"ratio_vs_raw_tcp_hog_{g[0].replace('.', '_').lower()}_curve_hog"] if g[2] == "hog" else g[3]) <= g[4]
    for g in goal_rows if g[1] == "curve")
for label, name in [("4.3MB", "scp4"), ("13MB", "scp13")]:
    d = scp(name)
    r[f"scp_seconds_{label.replace('.', '_').lower()}"] = round(statistics.median(d), 4)
for c in MODES:
    size, d = series(f"lo13_{c}")
    r[f"loopback_mbps_{c}"] = round(size / statistics.median(d) / 1e6, 1)
r.update(json.loads(os.environ["SHA_JSON"]))
r["scp_speedup_4_3mb"] = round(r["scp_seconds_4_3mb"] / r["seconds_4_3mb_curve"], 1)
r["scp_speedup_13mb"] = round(r["scp_seconds_13mb"] / r["seconds_13mb_curve"], 1)
r["ratio_13mb_curve"] = r["ratio_13mb_curve"]
import sys
print(f"link {r['link_mbit']} Mbit/s tbf, iperf3 {r['iperf3_gbps']} Gbit/s, {r['cpus']} CPUs, load {r['loadavg']}", file=sys.stderr)
print(f"{'size':>6} {'mode':>8} {'bytes':>9} {'median ms':>9} {'best ms':>8} {'wire ms':>8} {'ratio':>6} {'best':>6} {'vs iperf':>8}", file=sys.stderr)
for row in rows:
    print(f"{row[0]:>6} {row[1]:>8} {row[2]:>9} {row[3]*1e3:>9.1f} {row[4]*1e3:>8.1f} {row[5]*1e3:>8.1f} {row[6]:>6.2f} {row[7]:>6.2f} {row[8]:>8.2f}", file=sys.stderr)
print("hand-off breakdown, median ms: " + " ".join(PHASES), file=sys.stderr)
for label, c, b in bd_rows:
    u = r[f"cpu_ms_{label.replace('.', '_').lower()}_{c}"]
    print(f"{label:>6} {c:>12} " + " ".join(f"{b.get(k, 0):>7.2f}" for k in PHASES) +
          f"   cpu ms/hand-off: sender {u.get('sender', 0):.1f}, receiver {u.get('receiver', 0):.1f}", file=sys.stderr)
if os.environ["HOG"] != "0":
    print(f"raw TCP with the two busy loops: 4.3MB {r['raw_tcp_seconds_4_3mb_hog']*1e3:.1f} ms, "
          f"13MB {r['raw_tcp_seconds_13mb_hog']*1e3:.1f} ms", file=sys.stderr)
print(f"raw TCP (the bytes alone, same link) median: 4.3MB {r['raw_tcp_seconds_4_3mb']*1e3:.1f} ms "
      f"(ratio {r['raw_tcp_ratio_4_3mb']}), 13MB {r['raw_tcp_seconds_13mb']*1e3:.1f} ms (ratio {r['raw_tcp_ratio_13mb']}); "
      f"13MB curve / raw TCP {r['ratio_vs_raw_tcp_13mb_curve']}", file=sys.stderr)
print(f"scp median: 4.3MB {r['scp_seconds_4_3mb']*1e3:.0f} ms, 13MB {r['scp_seconds_13mb']*1e3:.0f} ms; "
      f"speedup {r['scp_speedup_4_3mb']}x / {r['scp_speedup_13mb']}x", file=sys.stderr)
print(f"loopback 13MB: curve {r['loopback_mbps_curve']} MB/s, curveall {r['loopback_mbps_curveall']} MB/s, plain {r['loopback_mbps_plain']} MB/s; "
      f"sha256 {r['sha256_gbps']} GB/s", file=sys.stderr)
print("goal (curve: CURVE control + AES-256-GCM data frames; median / raw TCP median): quiet and with a busy"
      " loop beside sender and receiver; curveall (CURVE carries every byte) and plain (no cipher) for comparison only", file=sys.stderr)
print("transfers sent as AES-256-GCM data frames (timed ones): " + ", ".join(
      f"{k[len('sealed_'):]} {v}" for k, v in sorted(r.items()) if k.startswith("sealed_")), file=sys.stderr)
for label, c, case, ratio, goal, u in goal_rows:
    verdict = ('met' if ratio <= goal else 'NOT met') if c == "curve" else "(info)"
    same = (f"; {r[f'ratio_vs_raw_tcp_hog_{label.replace(chr(46), chr(95)).lower()}_{c}_hog']:.3f}x raw TCP under the same hog"
            if case == "hog" else "")
    print(f"{label:>6} {c:>8} {case:>5} {ratio:>6.3f}x (goal <= {goal:.2f}x) {verdict:>7}{same}"
          f"   cpu s/hand-off: sender {u.get('sender', 0)/1e3:.4f}, receiver {u.get('receiver', 0)/1e3:.4f}", file=sys.stderr)
print(json.dumps(r, sort_keys=True))
EOF
