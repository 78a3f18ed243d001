#!/bin/bash
# Container HEALTHCHECK for h3pipe services: GET /readyz on 127.0.0.1:<port> and succeed on
# HTTP 200 (the service answers 503 until it is ready).  Bash's /dev/tcp keeps curl out of the
# images.  Port: $1, else $H3PIPE_HEALTH_PORT.
set -u
port=${1:-${H3PIPE_HEALTH_PORT:-}}
if [[ -z $port ]]; then
  echo "h3pipe-healthcheck: no port (pass one or set H3PIPE_HEALTH_PORT)" >&2
  exit 1
fi
exec 3<>"/dev/tcp/127.0.0.1/$port" 2>/dev/null || { echo "no listener on :$port"; exit 1; }
# One write(2) for the whole request: bash's printf flushes at every newline (three writes, and a
# server that answered after the first one made the third fail with EPIPE, exit 141).  cat writes
# what it reads in one go; the here-string adds the final "\n" after the last "\r".
req=$'GET /readyz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r'
cat >&3 <<<"$req" || { echo "cannot send to :$port"; exit 1; }
IFS= read -r -t 5 status <&3 || { echo "no reply on :$port"; exit 1; }
status=${status%$'\r'}
echo "$status"
[[ $status =~ ^HTTP/1\.[01]\ 200 ]]
