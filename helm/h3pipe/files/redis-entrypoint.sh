#!/bin/sh
# Starts redis-server for h3pipe with one ACL user per service (users.acl beside this script,
# docs/security.md), rendered at start by render_acl.sh from secret files: never from arguments,
# never baked into an image, stored as SHA-256 digests in a 0600 file on a tmpfs.
#   user default         off (no anonymous access)
#   user h3pipe-encoder, h3pipe-sampler, h3pipe-decoder, h3pipe-transfer, h3pipe-operator,
#        h3pipe-keda, redis-admin      password from $REDIS_SECRETS_DIR/redis-<name>.password
#        (<name> = encoder sampler decoder transfer operator keda admin); a user whose file is
#        absent is rendered off, so a deployment grants exactly the users it has secrets for.
# The operator's password is required: the health check and every h3pipe tool log in with it.
# acl.conf beside the config is included (aclfile, ACL log, no DEBUG/MODULE, busy threshold).
# Environment (defaults fit compose.yaml and the Helm chart):
#   REDIS_CONF=/usr/local/etc/redis/redis.conf  REDIS_SECRETS_DIR=/run/secrets  REDIS_ACL_DIR=/run/redis
#   REDIS_SERVER: the command that runs redis (default: the image's docker-entrypoint.sh, which
#   drops to the redis user, or redis-server)
# Extra arguments are passed to redis-server (tests add --port, --dir).
set -eu

conf=${REDIS_CONF:-/usr/local/etc/redis/redis.conf}
here=$(dirname "$0")
secrets=${REDIS_SECRETS_DIR:-/run/secrets}
acl_dir=${REDIS_ACL_DIR:-/run/redis}

if [ ! -r "$secrets/redis-operator.password" ]; then
  echo "redis entrypoint: cannot read the password file $secrets/redis-operator.password" \
       "(secret redis-operator.password); every h3pipe tool and the health check log in with it" >&2
  exit 1
fi

mkdir -p "$acl_dir"
acl="$acl_dir/users.acl"
sh "$here/render_acl.sh" "$secrets" "$acl" "$here/users.acl"
if [ "$(id -u)" = 0 ] && id redis >/dev/null 2>&1; then
  chown -R redis "$acl_dir"
fi

set -- "$conf" --include "$here/acl.conf" --aclfile "$acl" "$@"
if [ -n "${REDIS_SERVER:-}" ]; then
  set -- $REDIS_SERVER "$@"
elif command -v docker-entrypoint.sh >/dev/null 2>&1; then
  set -- docker-entrypoint.sh redis-server "$@"
else
  set -- redis-server "$@"
fi
exec "$@"
