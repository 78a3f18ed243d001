#!/bin/sh
# Stands in for ssh in remote_test: logs its arguments (one line per call, words separated by
# a tab) to $FAKE_SSH_LOG, prints a line, and fails for the alias named in $FAKE_SSH_FAIL.
{
  first=1
  for a in "$@"; do
    if [ $first = 1 ]; then printf '%s' "$a"; first=0; else printf '\t%s' "$a"; fi
  done
  printf '\n'
} >> "$FAKE_SSH_LOG"
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
