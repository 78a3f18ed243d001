#!/bin/sh
# Starts one Redis of a set that Sentinel watches (a primary and its replicas, docs/deploy.md
# "Redis with Sentinel"), then runs entrypoint.sh beside this script, or REDIS_ENTRYPOINT (the
# ACL users, as for a single Redis).  At every start it asks every configured Sentinel which node
# is the primary now, and takes an answer only when a majority of ALL configured Sentinels (not of
# those that replied) give it: itself, it starts as the primary; another, it starts as that one's
# replica.  No Sentinel names any primary (the first start of the set), REDIS_BOOTSTRAP_PRIMARY is
# the primary.  Some answer but no majority agrees (Sentinels down, or some not yet told of a
# failover): it asks again every second for REDIS_MAJORITY_WAIT_S (30) and then exits 1 (the pod
# restarts and asks again) rather than guess.  Replication logs in as redis-admin; the password
# goes into a 0600 file on the ACL tmpfs, never into an argument.
# Environment:
#   REDIS_ANNOUNCE_HOST, REDIS_ANNOUNCE_PORT (6379)  how Sentinels and clients reach this node
#   REDIS_BOOTSTRAP_PRIMARY  HOST:PORT of the node that is the primary when no Sentinel knows one
#   SENTINEL_ADDRESSES       "HOST:PORT HOST:PORT ..." of the Sentinels; SENTINEL_MASTER its name
#   REDIS_MAJORITY_WAIT_S    how long to wait for a majority when some Sentinels answer (30)
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
# The password as one double-quoted Redis config argument: \ and " escaped (any other byte,
# spaces and ' included, stands as it is inside the quotes).
quoted() { printf '"%s"' "$(printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g')"; }

# "HOST PORT" of the primary the Sentinel at $1 names, or nothing (down, not yet resolvable,
# or it knows no such master).
ask() {
  REDISCLI_AUTH="$admin" timeout 3 redis-cli --no-auth-warning --raw -h "${1%:*}" -p "${1##*:}" \
    --user redis-admin SENTINEL get-master-addr-by-name "$master" 2>/dev/null | tr '\n' ' '
}
# Every configured Sentinel is asked; an answer counts only when more than half of ALL of them
# give it (quorum of the configured set, as Sentinel's own failover needs): one that has not yet
# heard of a failover (they learn it from one another within a second or two), or the one
# Sentinel left answering, must not make a restarted old primary a second one.
total=0
for s in ${SENTINEL_ADDRESSES:-}; do total=$((total + 1)); done
need=$((total / 2 + 1))
wait_s=${REDIS_MAJORITY_WAIT_S:-30}
case "$wait_s" in '' | *[!0-9]*)
  echo "redis node: REDIS_MAJORITY_WAIT_S must be whole seconds, not \"$wait_s\"" >&2
  exit 1 ;;
esac
waited=0
while :; do
  answers=""
  for s in ${SENTINEL_ADDRESSES:-}; do
    a=$(ask "$s") || a=""
    p=$(echo "$a" | cut -s -d' ' -f2)
    case "$p" in '' | *[!0-9]*) continue ;; esac
    answers="$answers$(echo "$a" | cut -d' ' -f1):$p
"
  done
  # "COUNT HOST:PORT" of the answer most Sentinels give; empty when none answered.
  top=$(printf '%s' "$answers" | sort | uniq -c | sort -rn | awk 'NR == 1 { print $1, $2 }')
  if [ -z "$top" ]; then
    primary=$bootstrap
    echo "redis node: no Sentinel of $total names a primary $master: $primary (REDIS_BOOTSTRAP_PRIMARY)" >&2
    break
  fi
  if [ "${top%% *}" -ge "$need" ]; then
    primary=${top#* }
    echo "redis node: $((${top%% *})) of $total Sentinels name the primary $master $primary" >&2
    break
  fi
  if [ "$waited" -ge "$wait_s" ]; then
    echo "redis node: no majority of the $total Sentinels ($need) names one primary $master after" \
      "${waited} s (answers: $(printf '%s' "$answers" | tr '\n' ' ')); not starting rather than guess" >&2
    exit 1
  fi
  sleep 1
  waited=$((waited + 1))
done

mkdir -p "$acl_dir"
umask 077
conf="$acl_dir/replication.conf"
{
  echo "masteruser redis-admin"
  printf 'masterauth %s\n' "$(quoted "$admin")"  # not echo: dash's echo eats backslashes
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
