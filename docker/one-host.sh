#!/usr/bin/env bash
# docker/one-host.sh: the README's second way to run: every service of one host from the built
# images (scripts/images.sh) through compose.yaml, for `build/bin/h3pipe run` on the same host.
#
#   docker/one-host.sh up   [DIR]   # site files in DIR, compose up, wait for every /readyz
#   docker/one-host.sh down [DIR]   # compose down (volumes too), stop the podman API it started
#
# DIR (default $H3PIPE_ONE_HOST_DIR, else .state/one-host) gets what docs/deploy.md has an operator write by hand:
#   cluster.json   the cluster config as the containers see it (/var/lib/h3pipe, /run/secrets)
#   cli.json       the same cluster for the host's CLI: Redis on 127.0.0.1:6379 (published by
#                  compose), the operator's password from DIR/secrets, state in DIR/cli-state
#   one-host.env   compose's env file (profiles control, sampler-host, decoder-host)
#   secrets/       one Redis password per service user (0400, uid 10001, as the images run)
#   data/          the services' /var/lib/h3pipe: outputs in data/outputs/<run>/<job>.mp4
# Compose: `docker compose` where a Docker engine answers; else Debian's docker-compose against
# podman's Docker-compatible API (`podman system service`, started here on DIR/podman.sock and
# stopped by `down`; DOCKER_HOST set beforehand is used as it is).
# Images: h3pipe/*:<version> (scripts/images.sh), Redis and Prometheus from
# H3PIPE_REDIS_IMAGE / H3PIPE_PROMETHEUS_IMAGE (default: compose.yaml's public images; where no
# registry is reachable, the stand-ins of `scripts/images.sh --standins`:
# localhost/h3pipe-standin/redis:latest, localhost/h3pipe-standin/prometheus:latest).
# Needs root with podman (the secrets and data folder are chowned to uid 10001).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

cmd=${1:-}
dir=${2:-${H3PIPE_ONE_HOST_DIR:-.state/one-host}}
[[ $cmd == up || $cmd == down ]] || { echo "usage: docker/one-host.sh up|down [DIR]" >&2; exit 2; }
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
version=$(sed -n 's/^project(h3pipe VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
project=h3pipe-one-host
services=(redis prometheus encoder sampler0 decoder transfer)
health_ports=(9501 9502 9504 9505)

die() { echo "one-host: $*" >&2; exit 1; }

compose=()
pick_compose() {
  if [[ -z ${DOCKER_HOST:-} ]] && command -v docker >/dev/null 2>&1 && docker compose version >/dev/null 2>&1 &&
     docker info >/dev/null 2>&1; then
    compose=(docker compose)
    return
  fi
  command -v docker-compose >/dev/null 2>&1 || die "no compose: apt-get install docker-compose (with podman) or docker's compose plugin"
  if [[ -z ${DOCKER_HOST:-} ]]; then
    command -v podman >/dev/null 2>&1 || die "no Docker engine and no podman (apt-get install podman)"
    export DOCKER_HOST=unix://$dir/podman.sock
    if [[ $cmd == up ]] && ! curl -sf --unix-socket "$dir/podman.sock" http://d/_ping >/dev/null 2>&1; then
      if [[ -z ${CONTAINERS_CONF:-} ]]; then  # the settings images.sh builds with (sandboxes)
        export CONTAINERS_CONF=$dir/containers.conf
        scripts/images.sh --containers-conf "$CONTAINERS_CONF"
      fi
      nohup podman system service --time=0 "$DOCKER_HOST" >"$dir/podman-service.log" 2>&1 &
      echo $! >"$dir/podman-service.pid"
      for _ in $(seq 100); do
        curl -sf --unix-socket "$dir/podman.sock" http://d/_ping >/dev/null 2>&1 && break
        sleep 0.2
      done
    fi
  fi
  compose=(docker-compose)
}

write_site() {
  local u
  install -d -m 0700 "$dir/secrets" "$dir/cli-state"
  install -d -m 0750 -o 10001 -g 10001 "$dir/data" "$dir/keys"
  for u in encoder sampler decoder transfer operator admin; do
    [[ -s $dir/secrets/redis-$u.password ]] ||
      (umask 077; head -c 32 /dev/urandom | sha256sum | cut -d' ' -f1 >"$dir/secrets/redis-$u.password")
    chown 10001:10001 "$dir/secrets/redis-$u.password"
    chmod 0400 "$dir/secrets/redis-$u.password"
  done
  [[ -f $dir/secrets/grafana_admin_password ]] || echo unused >"$dir/secrets/grafana_admin_password"
  # The host's CLI reads the operator's password as the invoking user.
  install -m 0400 "$dir/secrets/redis-operator.password" "$dir/cli-state/redis-operator.password"
  python3 - "$dir" <<'EOF'
import json, sys
d = sys.argv[1]
pools = [{"name": "encoder", "host": "local", "stage": "encode", "profiles": {"default": {"kind": "fixed", "seconds": 0.05}}},
         {"name": "sampler0", "host": "local", "stage": "sample", "gpus": [0], "profiles": {"default": {"kind": "fixed", "seconds": 0.4}}},
         {"name": "decoder", "host": "local", "stage": "decode", "profiles": {"default": {"kind": "fixed", "seconds": 0.1}}}]
cfg = {"name": "one-host", "dispatch": "completion_time",
       "state_dir": "/var/lib/h3pipe/state", "artifact_root": "/var/lib/h3pipe/artifacts", "output_root": "/var/lib/h3pipe/outputs",
       "redis": {"host": "redis", "port": 6379, "user": "h3pipe-operator",
                 "password_file": "/run/secrets/redis-operator.password", "embedded": False},
       "queue": {"lease_ms": 5000, "renew_ms": 1000, "sweep_ms": 1000, "max_deliveries": 3, "block_ms": 200},
       "transfer": {"curve": False},
       "stages": {s: {"runtime": {"name": "builtin", "settings": {}}} for s in ("encode", "sample", "decode")},
       "classes": [{"name": "demo", "width": 256, "height": 256, "frames": 49, "steps": 6}],
       "hosts": [{"name": "local", "address": "127.0.0.1", "bind": "0.0.0.0", "transfer_port": 7700}],
       "pools": pools}
json.dump(cfg, open(d + "/cluster.json", "w"), indent=1)
cli = dict(cfg, state_dir=d + "/cli-state", artifact_root=d + "/data/artifacts", output_root=d + "/data/outputs",
           redis=dict(cfg["redis"], host="127.0.0.1", password_file=d + "/cli-state/redis-operator.password"))
json.dump(cli, open(d + "/cli.json", "w"), indent=1)
EOF
  cat >"$dir/one-host.env" <<EOF
COMPOSE_PROFILES=control,sampler-host,decoder-host
H3PIPE_HOST=local
H3PIPE_CONFIG_FILE=$dir/cluster.json
H3PIPE_KEYS_DIR=$dir/keys
H3PIPE_DATA_DIR=$dir/data
H3PIPE_SECRETS_DIR=$dir/secrets
H3PIPE_GRAFANA_PASSWORD_FILE=$dir/secrets/grafana_admin_password
H3PIPE_ENCODER_POOL=encoder
H3PIPE_SAMPLER0_POOL=sampler0
H3PIPE_DECODER_POOL=decoder
H3PIPE_REDIS_ADDRESS=redis:6379
H3PIPE_VERSION=$version
H3PIPE_REDIS_IMAGE=${H3PIPE_REDIS_IMAGE:-redis:7.2-bookworm}
H3PIPE_PROMETHEUS_IMAGE=${H3PIPE_PROMETHEUS_IMAGE:-prom/prometheus:v2.53.2}
EOF
}

pick_compose
run_compose() { "${compose[@]}" --project-name "$project" --project-directory "$repo" -f "$repo/compose.yaml" \
                  --env-file "$dir/one-host.env" "$@"; }

if [[ $cmd == down ]]; then
  [[ -f $dir/one-host.env ]] && run_compose down -v --remove-orphans -t 5 >/dev/null 2>&1 || true
  if [[ -f $dir/podman-service.pid ]]; then
    kill "$(cat "$dir/podman-service.pid")" 2>/dev/null || true
    rm -f "$dir/podman-service.pid"
  fi
  echo "one-host: down"
  exit 0
fi

[[ $(id -u) -eq 0 ]] || die "needs root (the secrets and the data folder belong to uid 10001, as the images run)"
t0=$SECONDS
write_site
log=$dir/compose-up.log
if ! run_compose up -d --no-build "${services[@]}" >"$log" 2>&1; then
  tail -n 20 "$log" >&2
  die "compose up failed (log $log)"
fi
for port in "${health_ports[@]}"; do
  deadline=$((SECONDS + 120))
  until docker/healthcheck.sh "$port" >/dev/null 2>&1; do
    if ((SECONDS > deadline)); then
      run_compose logs --tail=20 >&2 || true
      die "nothing ready on :$port within 120 s (logs above)"
    fi
    sleep 0.5
  done
done
echo "one-host: up in $((SECONDS - t0)) s (${compose[*]}; ${services[*]})"
echo "one-host: submit with: build/bin/h3pipe --config $dir/cli.json run examples/batch.jsonl"
echo "one-host: outputs in $dir/data/outputs/<run id>/; stop with: docker/one-host.sh down"
