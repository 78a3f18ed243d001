#!/bin/sh
# Starts one Redis Sentinel of h3pipe's primary + replica set (docs/deploy.md, "Redis with
# Sentinel").  The config is written at every start into SENTINEL_DIR (Sentinel rewrites it, so
# it cannot be a read-only mount), 0600, from the secret files:
#   - the primary to monitor: the one the other Sentinels name now, else the node among
#     REDIS_NODES that answers ROLE as a master, else the first of REDIS_NODES (a first start);
#   - Sentinel logs in to Redis and to the other Sentinels as redis-admin (auth-user/auth-pass,
#     sentinel-user/sentinel-pass);
#   - its own users: `default` off, redis-admin (everything, for people and the other Sentinels),
#     and h3pipe-sentinel (password redis-sentinel.password) that may only ask where the primary
#     is: the services, the CLI and KEDA log in as it.
#   - hostnames, not addresses, are announced and resolved (pods change addresses on restart).
# Environment:
#   SENTINEL_MASTER (h3), SENTINEL_QUORUM (2), SENTINEL_DOWN_AFTER_MS (5000),
#   SENTINEL_FAILOVER_TIMEOUT_MS (60000), SENTINEL_PORT (26379), SENTINEL_DIR (/data)
#   SENTINEL_ANNOUNCE_HOST   how the other Sentinels and the clients reach this one
#   SENTINEL_ADDRESSES       "HOST:PORT ..." of every Sentinel of the set (this one may be listed)
#   REDIS_NODES              "HOST:PORT ..." of the Redis nodes, the bootstrap primary first
#   REDIS_SECRETS_DIR (/run/secrets): redis-admin.password, redis-sentinel.password
#   REDIS_SERVER (redis-server): the binary, run as `REDIS_SERVER CONF --sentinel`
set -eu

secrets=${REDIS_SECRETS_DIR:-/run/secrets}
dir=${SENTINEL_DIR:-/data}
port=${SENTINEL_PORT:-26379}
master=${SENTINEL_MASTER:-h3}
self=${SENTINEL_ANNOUNCE_HOST:?set SENTINEL_ANNOUNCE_HOST (how the others reach this Sentinel)}
nodes=${REDIS_NODES:?set REDIS_NODES (HOST:PORT of the Redis nodes, the bootstrap primary first)}

line() { head -n 1 "$1" | tr -d '\r' | sed 's/ *$//'; }
digest() { line "$1" | tr -d '\n' | sha256sum | cut -d' ' -f1; }
for f in redis-admin.password redis-sentinel.password; do
  if [ ! -r "$secrets/$f" ] || [ -z "$(line "$secrets/$f")" ]; then
    echo "sentinel: cannot read $secrets/$f (or it is empty)" >&2
    exit 1
  fi
done
admin=$(line "$secrets/redis-admin.password")
# The password as one double-quoted config argument (\ and " escaped), so that spaces, quotes and
# backslashes in it reach Sentinel as they are.
quoted() { printf '"%s"' "$(printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g')"; }

cli() {  # HOST:PORT ARGS...: one command as redis-admin, the raw reply on one line, or nothing
  hp=$1
  shift
  REDISCLI_AUTH="$admin" timeout 3 redis-cli --no-auth-warning --raw -h "${hp%:*}" -p "${hp##*:}" \
    --user redis-admin "$@" 2>/dev/null | tr '\n' ' '
}

primary=""
for s in ${SENTINEL_ADDRESSES:-}; do
  [ "$s" = "$self:$port" ] && continue
  a=$(cli "$s" SENTINEL get-master-addr-by-name "$master") || a=""
  p=$(echo "$a" | cut -s -d' ' -f2)
  case "$p" in '' | *[!0-9]*) continue ;; esac
  primary="$(echo "$a" | cut -d' ' -f1) $p"
  break
done
if [ -z "$primary" ]; then
  for n in $nodes; do
    r=$(cli "$n" ROLE) || r=""
    if [ "${r%% *}" = master ]; then
      primary="${n%:*} ${n##*:}"
      break
    fi
  done
fi
if [ -z "$primary" ]; then
  first=${nodes%% *}
  primary="${first%:*} ${first##*:}"
fi
echo "sentinel: $self:$port monitors $master at $primary" >&2

mkdir -p "$dir"
umask 077
conf="$dir/sentinel.conf"
tmp="$conf.tmp"
cat > "$tmp" <<EOF
port $port
dir $dir
sentinel resolve-hostnames yes
sentinel announce-hostnames yes
sentinel announce-ip $self
sentinel announce-port $port
sentinel monitor $master $primary ${SENTINEL_QUORUM:-2}
sentinel auth-user $master redis-admin
sentinel auth-pass $master $(quoted "$admin")
sentinel down-after-milliseconds $master ${SENTINEL_DOWN_AFTER_MS:-5000}
sentinel failover-timeout $master ${SENTINEL_FAILOVER_TIMEOUT_MS:-60000}
sentinel parallel-syncs $master 1
sentinel sentinel-user redis-admin
sentinel sentinel-pass $(quoted "$admin")
user default off resetpass
user redis-admin on #$(digest "$secrets/redis-admin.password") ~* &* +@all
user h3pipe-sentinel on #$(digest "$secrets/redis-sentinel.password") resetchannels -@all +ping +sentinel|get-master-addr-by-name +sentinel|sentinels +sentinel|replicas +sentinel|master &+switch-master +subscribe +unsubscribe
EOF
mv "$tmp" "$conf"
exec ${REDIS_SERVER:-redis-server} "$conf" --sentinel
