#!/bin/sh
# Starts one Redis of a set that Sentinel watches (a primary and its replicas, docs/deploy.md
# "Redis with Sentinel"), then runs entrypoint.sh beside this script, or REDIS_ENTRYPOINT (the
# ACL users, as for a single Redis).  At every start it asks the Sentinels which node is the primary now: itself, it
# starts as the primary; another, it starts as that one's replica (the answer most Sentinels
# give); no Sentinel answers (the first start of the set), REDIS_BOOTSTRAP_PRIMARY is the primary.  Replication logs in as redis-admin;
# the password goes into a 0600 file on the ACL tmpfs, never into an argument.
# Environment:
#   REDIS_ANNOUNCE_HOST, REDIS_ANNOUNCE_PORT (6379)  how Sentinels and clients reach this node
#   REDIS_BOOTSTRAP_PRIMARY  HOST:PORT of the node that is the primary when no Sentinel knows one
#   SENTINEL_ADDRESSES       "HOST:PORT HOST:PORT ..." of the Sentinels; SENTINEL_MASTER its name
#   REDIS_SECRETS_DIR (/run/secrets), REDIS_ACL_DIR (/run/redis): as entrypoint.sh
# Extra arguments are passed on to entrypoint.sh (and redis-server).
set -eu

here=$(dirname "$0")
secrets=${REDIS_SECRETS_DIR:-/run/secrets}
acl_dir=${REDIS_ACL_DIR:-/run/redis}
host=${REDIS_ANNOUNCE_HOST:?set REDIS_ANNOUNCE_HOST (how the Sentinels reach this node)}
port=${REDIS_ANNOUNCE_PORT:-6379}
bootstrap=${REDIS_BOOTSTRAP_PRIMARY:?set REDIS_BOOTSTRAP_PRIMARY (HOST:PORT)}
master=${SENTINEL_MASTER:-h3}

if [ ! -r "$secrets/redis-admin.password" ]; then
  echo "redis node: cannot read $secrets/redis-admin.password (replication logs in as redis-admin)" >&2
  exit 1
fi
admin=$(head -n 1 "$secrets/redis-admin.password" | tr -d '\r' | sed 's/ *$//')

# "HOST PORT" of the primary the Sentinel at $1 names, or nothing (down, not yet resolvable,
# or it knows no such master).
ask() {
  REDISCLI_AUTH="$admin" timeout 3 redis-cli --no-auth-warning --raw -h "${1%:*}" -p "${1##*:}" \
    --user redis-admin SENTINEL get-master-addr-by-name "$master" 2>/dev/null | tr '\n' ' '
}
# Every Sentinel is asked and the answer most of them give wins: one that has not yet heard of a
# failover (they learn it from one another within a second or two) must not make a restarted old
# primary a second one.
answers=""
for s in ${SENTINEL_ADDRESSES:-}; do
  a=$(ask "$s") || a=""
  p=$(echo "$a" | cut -s -d' ' -f2)
  case "$p" in '' | *[!0-9]*) continue ;; esac
  answers="$answers$(echo "$a" | cut -d' ' -f1):$p
"
done
primary=$(printf '%s' "$answers" | sort | uniq -c | sort -rn | awk 'NR == 1 { print $2 }')
if [ -z "$primary" ]; then
  primary=$bootstrap
  echo "redis node: no Sentinel names a primary $master: $primary (REDIS_BOOTSTRAP_PRIMARY)" >&2
fi

mkdir -p "$acl_dir"
umask 077
conf="$acl_dir/replication.conf"
{
  echo "masteruser redis-admin"
  echo "masterauth \"$admin\""
  echo "replica-announce-ip $host"
  echo "replica-announce-port $port"
  if [ "$primary" != "$host:$port" ]; then
    echo "replicaof ${primary%:*} ${primary##*:}"
  fi
} > "$conf"
if [ "$primary" = "$host:$port" ]; then
  echo "redis node: $host:$port starts as the primary $master" >&2
else
  echo "redis node: $host:$port starts as a replica of $primary" >&2
fi
exec sh "${REDIS_ENTRYPOINT:-$here/entrypoint.sh}" --include "$conf" "$@"
