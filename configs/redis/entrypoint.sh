#!/bin/sh
# Starts redis-server for h3pipe with ACL users built from secret files (never from arguments,
# never baked into an image):
#   user default  off                        (no anonymous access)
#   user h3pipe   password from $REDIS_PASSWORD_FILE       the services and the CLI
#                 keys h3pipe:*, all commands except @admin and @dangerous, plus INFO
#   user keda     password from $REDIS_KEDA_PASSWORD_FILE (optional): the KEDA scaler,
#                 read-only on the task streams (XPENDING, XINFO, XLEN)
# Passwords are stored in the ACL file as SHA-256 digests (#...), on a tmpfs.
# Environment (defaults fit the compose file):
#   REDIS_CONF=/usr/local/etc/redis/redis.conf  REDIS_ACL_DIR=/run/redis
#   REDIS_PASSWORD_FILE=/run/secrets/redis_password  REDIS_KEDA_PASSWORD_FILE=/run/secrets/redis_keda_password
#   REDIS_SERVER: the command that runs redis (default: the image's docker-entrypoint.sh, which
#   drops to the redis user, or redis-server)
# Extra arguments are passed to redis-server (tests add --port, --dir).
set -eu

conf=${REDIS_CONF:-/usr/local/etc/redis/redis.conf}
acl_dir=${REDIS_ACL_DIR:-/run/redis}
pw_file=${REDIS_PASSWORD_FILE:-/run/secrets/redis_password}
keda_file=${REDIS_KEDA_PASSWORD_FILE:-/run/secrets/redis_keda_password}

digest() {
  # First line of the file, trailing CR/space removed, as the services read it.
  head -n 1 "$1" | tr -d '\r' | sed 's/[[:space:]]*$//' | tr -d '\n' | sha256sum | cut -d' ' -f1
}

if [ ! -r "$pw_file" ]; then
  echo "redis entrypoint: cannot read the password file $pw_file (compose secret redis_password)" >&2
  exit 1
fi
if [ -z "$(head -n 1 "$pw_file" | tr -d '\r[:space:]')" ]; then
  echo "redis entrypoint: $pw_file is empty" >&2
  exit 1
fi

mkdir -p "$acl_dir"
acl="$acl_dir/users.acl"
umask 077
{
  echo "user default off resetkeys resetchannels -@all"
  echo "user h3pipe on #$(digest "$pw_file") resetkeys ~h3pipe:* resetchannels &h3pipe:* -@all +@all -@admin -@dangerous +info"
  if [ -r "$keda_file" ]; then
    echo "user keda on #$(digest "$keda_file") resetkeys ~h3pipe:stream:* resetchannels -@all +@connection -@admin -@dangerous +xpending +xinfo +xlen"
  fi
} > "$acl.tmp"
mv "$acl.tmp" "$acl"
if [ "$(id -u)" = 0 ] && id redis >/dev/null 2>&1; then
  chown -R redis "$acl_dir"
fi

if [ -n "${REDIS_SERVER:-}" ]; then
  set -- $REDIS_SERVER "$conf" --aclfile "$acl" "$@"
elif command -v docker-entrypoint.sh >/dev/null 2>&1; then
  set -- docker-entrypoint.sh redis-server "$conf" --aclfile "$acl" "$@"
else
  set -- redis-server "$conf" --aclfile "$acl" "$@"
fi
exec "$@"
