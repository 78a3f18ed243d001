#!/bin/sh
# Renders configs/redis/users.acl (the per-service ACL users, docs/security.md) into a loadable
# ACL file: each @NAME_SHA256@ placeholder becomes the SHA-256 of that user's password, read from
# a secret file, so no password is ever written in clear, passed as an argument, or baked into an
# image.  A user whose secret file is absent is rendered `off` (it cannot log in).  The template as
# shipped does not load (a '#' hash must be 64 hex digits): it can never run with a known password.
#
#   render_acl.sh SECRETS_DIR [OUT] [TEMPLATE]
#     SECRETS_DIR/redis-<user>.password for user in encoder sampler decoder transfer operator keda admin
#     (first line; a trailing CR and trailing spaces are dropped, as the services read it)
#     OUT defaults to stdout; it is written 0600 through a temp file and a rename.
#     TEMPLATE defaults to users.acl beside this script.
set -eu

secrets=${1:?usage: render_acl.sh SECRETS_DIR [OUT] [TEMPLATE]}
out=${2:-}
template=${3:-$(dirname "$0")/users.acl}
[ -r "$template" ] || { echo "render_acl: cannot read the template $template" >&2; exit 1; }

digest() {
  head -n 1 "$1" | tr -d '\r' | sed 's/ *$//' | tr -d '\n' | sha256sum | cut -d' ' -f1
}

umask 077
tmp=$(mktemp "${out:-/tmp/users.acl}.XXXXXX")
trap 'rm -f "$tmp"' EXIT
cp "$template" "$tmp"
for user in encoder sampler decoder transfer operator keda admin; do
  tag=$(echo "$user" | tr '[:lower:]' '[:upper:]')
  file="$secrets/redis-$user.password"
  if [ -r "$file" ]; then
    if [ -z "$(head -n 1 "$file" | tr -d '\r ')" ]; then
      echo "render_acl: $file is empty; refusing to render a user with an empty password" >&2
      exit 1
    fi
    sed -i "s/#@${tag}_SHA256@/#$(digest "$file")/" "$tmp"
  else
    echo "render_acl: no $file: user $user is rendered off" >&2
    sed -i "s/ on #@${tag}_SHA256@/ off resetpass/" "$tmp"
  fi
done
if grep -q '@[A-Z]*_SHA256@' "$tmp"; then
  echo "render_acl: unrendered placeholders remain in $template" >&2
  exit 1
fi
if [ -n "$out" ]; then
  mv "$tmp" "$out"
  trap - EXIT
else
  cat "$tmp"
fi
