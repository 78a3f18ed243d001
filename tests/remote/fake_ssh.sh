#!/bin/sh
# Stands in for ssh in remote_test: logs its arguments (one line per call, words separated by
# a tab) to $FAKE_SSH_LOG, prints a line, and fails for the alias named in $FAKE_SSH_FAIL.
# One write per call (O_APPEND): calls made in parallel (preflight on every host) never
# interleave their words.
line=
tab=$(printf '\t')
for a in "$@"; do line="${line:+$line$tab}$a"; done
printf '%s\n' "$line" >> "$FAKE_SSH_LOG"
for a in "$@"; do
  case "$a" in
    -*|BatchMode=*|ConnectTimeout=*) ;;
    *) alias="$a"; break ;;
  esac
done
echo "fake ssh to $alias"
if [ -n "$FAKE_SSH_FAIL" ] && [ "$alias" = "$FAKE_SSH_FAIL" ]; then
  echo "ssh: connect to host $alias port 22: Connection refused" >&2
  exit 255
fi
exit 0
