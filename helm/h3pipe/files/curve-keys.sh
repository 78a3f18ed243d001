# The transfer services' CURVE key Secret, made by the chart's pre-install/pre-upgrade hook Job
# (templates/curve-keys-hook.yaml) in the CLI image: `h3pipe keygen` per host, sent to the
# Kubernetes API with curl and the Job's service-account token.  Run by /bin/sh -c (dash).
#
#   Secret missing          -> POST a Secret with <host>.pub and <host>.key for every host
#   Secret has every pair   -> nothing (an upgrade keeps the keys)
#   some host has no pair   -> PATCH (JSON merge patch) adding only those hosts' keys
#   409 on POST             -> created meanwhile: look again (at most 3 rounds)
#
# No key and no token is ever printed or put on a command line: keys go from keygen's files
# through base64 into a request body file, the token into a header file, all in WORK (a memory
# volume); API answers that may hold keys (200, 201) are never shown, errors show the Status
# message only.  Environment: SECRET_NAME, HOSTS (space-separated), LABELS (a JSON object),
# KUBE_API (https://kubernetes.default.svc), SA_DIR (token, ca.crt, namespace), WORK.
set -eu
set -f
umask 077
: "${SECRET_NAME:?}" "${HOSTS:?}" "${LABELS:?}" "${KUBE_API:?}" "${SA_DIR:?}" "${WORK:?}"
trap 'rm -rf "$WORK/keys" "$WORK/resp" "$WORK/body" "$WORK/auth"' EXIT

fail() {
  echo "curve-keys: $*" >&2
  exit 1
}

ns=$(cat "$SA_DIR/namespace") || fail "no namespace file in $SA_DIR (service-account token not mounted?)"
url="$KUBE_API/api/v1/namespaces/$ns/secrets"
token=$(cat "$SA_DIR/token") || fail "no token in $SA_DIR"
printf 'Authorization: Bearer %s\n' "$token" >"$WORK/auth"
unset token

# api METHOD PATH [BODY_FILE CONTENT_TYPE]: prints the HTTP status; the answer is in $WORK/resp.
api() {
  m=$1 p=$2
  shift 2
  if [ $# -eq 2 ]; then
    set -- --data-binary "@$1" -H "Content-Type: $2"
  fi
  curl -q -sS --max-time 30 --cacert "$SA_DIR/ca.crt" -H "@$WORK/auth" -H "Accept: application/json" \
    -X "$m" -o "$WORK/resp" -w '%{http_code}' "$@" "$url$p"
}

# The "message" of a Status answer (errors only: never called on an answer holding keys).
message() {
  sed -n 's/.*"message": *"\(\([^"\\]\|\\.\)*\)".*/\1/p' "$WORK/resp" | head -n 1 | sed 's/\\"/"/g'
}

# has KEY: the Secret in $WORK/resp has a non-empty data key KEY ("KEY": "<base64>").
has() {
  grep -Eq "\"$(printf '%s' "$1" | sed 's/[.]/\\./g')\": *\"[A-Za-z0-9+/]" "$WORK/resp"
}

# data HOST...: a fresh pair per host, as the members of a JSON "data" object.
data() {
  sep=""
  for h in "$@"; do
    h3pipe keygen --dir "$WORK/keys" --name "$h" --force >/dev/null || fail "h3pipe keygen --name $h failed"
    printf '%s"%s.pub":"%s","%s.key":"%s"' "$sep" "$h" "$(base64 -w0 "$WORK/keys/$h.pub")" \
      "$h" "$(base64 -w0 "$WORK/keys/$h.key")"
    sep=,
  done
  rm -rf "$WORK/keys"
}

round=0
while [ "$round" -lt 3 ]; do
  round=$((round + 1))
  code=$(api GET "/$SECRET_NAME") || fail "GET $url/$SECRET_NAME failed (curl exit $?, HTTP ${code:-none})"
  case $code in
  200)
    missing=""
    for h in $HOSTS; do
      if ! has "$h.pub" || ! has "$h.key"; then missing="$missing $h"; fi
    done
    rm -f "$WORK/resp"
    if [ -z "$missing" ]; then
      echo "curve-keys: Secret $SECRET_NAME holds a key pair for every host ($HOSTS): kept"
      exit 0
    fi
    {
      printf '{"data":{'
      # shellcheck disable=SC2086 # one argument per host
      data $missing
      printf '}}'
    } >"$WORK/body"
    code=$(api PATCH "/$SECRET_NAME" "$WORK/body" application/merge-patch+json) ||
      fail "PATCH $url/$SECRET_NAME failed (curl exit $?, HTTP ${code:-none})"
    rm -f "$WORK/body"
    case $code in
    200)
      echo "curve-keys: Secret $SECRET_NAME: added a key pair for$missing (the other hosts' keys kept)"
      exit 0
      ;;
    404 | 409) echo "curve-keys: Secret $SECRET_NAME changed meanwhile (HTTP $code): looking again" ;;
    *) fail "PATCH $url/$SECRET_NAME: HTTP $code: $(message)" ;;
    esac
    ;;
  404)
    {
      printf '{"apiVersion":"v1","kind":"Secret","metadata":{"name":"%s","labels":%s},"type":"Opaque","data":{' \
        "$SECRET_NAME" "$LABELS"
      # shellcheck disable=SC2086 # one argument per host
      data $HOSTS
      printf '}}'
    } >"$WORK/body"
    code=$(api POST "" "$WORK/body" application/json) || fail "POST $url failed (curl exit $?, HTTP ${code:-none})"
    rm -f "$WORK/body"
    case $code in
    201)
      echo "curve-keys: created Secret $SECRET_NAME with a key pair for each host ($HOSTS)"
      exit 0
      ;;
    409) echo "curve-keys: Secret $SECRET_NAME was created meanwhile (HTTP 409): looking again" ;;
    *) fail "POST $url: HTTP $code: $(message)" ;;
    esac
    ;;
  *) fail "GET $url/$SECRET_NAME: HTTP $code: $(message)" ;;
  esac
done
fail "Secret $SECRET_NAME changed under this Job in 3 rounds; giving up (run the upgrade again)"
