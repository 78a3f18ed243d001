{{/* Names, labels and the pieces every workload shares. */}}

{{- define "h3pipe.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* <release>-h3pipe (or the release name when it contains "h3pipe", or fullnameOverride), at
     most 46 characters: the longest name built on it, the Redis StatefulSet "<fullname>-redis",
     must leave room for the pods' controller-revision-hash label (<name>-<10 characters>, a
     63-character label value), and "<fullname>-redis-headless" / "<fullname>-transfer" stay
     under 63.  A longer name keeps its first 37 characters and a hash of the whole, so two long
     releases in a namespace stay apart.  Service names are DNS-1035: the name must start with a
     letter (Helm allows release names starting with a digit). */}}
{{- define "h3pipe.fullname" -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- $full := "" -}}
{{- if .Values.fullnameOverride -}}
{{- $full = .Values.fullnameOverride -}}
{{- else if contains $name .Release.Name -}}
{{- $full = .Release.Name -}}
{{- else -}}
{{- $full = printf "%s-%s" .Release.Name $name -}}
{{- end -}}
{{- if not (regexMatch "^[a-z]([-a-z0-9]*[a-z0-9])?$" $full) -}}
{{- fail (printf "release name %q: the chart names its Services %s-<component>, and Service names must start with a lowercase letter and hold only a-z, 0-9 and '-' (DNS-1035); choose a release name starting with a letter or set fullnameOverride" .Release.Name $full) -}}
{{- end -}}
{{- if gt (len $full) 46 -}}
{{- printf "%s-%s" ($full | trunc 37 | trimSuffix "-") ($full | sha256sum | trunc 8) -}}
{{- else -}}
{{- $full -}}
{{- end -}}
{{- end -}}

{{/* The name of a stage Deployment (and its ScaledObject): <fullname>-<component>-<pool>, at
     most 63 characters (a hash of the whole replaces the tail of a longer one).  Call with
     (dict "root" $ "component" "sampler" "pool" NAME). */}}
{{- define "h3pipe.stageName" -}}
{{- $n := printf "%s-%s-%s" (include "h3pipe.fullname" .root) .component .pool -}}
{{- if gt (len $n) 63 -}}
{{- printf "%s-%s" ($n | trunc 54 | trimSuffix "-") ($n | sha256sum | trunc 8) -}}
{{- else -}}
{{- $n -}}
{{- end -}}
{{- end -}}

{{- define "h3pipe.labels" -}}
app.kubernetes.io/name: {{ include "h3pipe.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: h3pipe
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Selector labels of one component: call with (dict "root" $ "component" "sampler" "pool" "x"). */}}
{{- define "h3pipe.selectorLabels" -}}
app.kubernetes.io/name: {{ include "h3pipe.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- if .pool }}
h3pipe.io/pool: {{ .pool }}
{{- end }}
{{- end -}}

{{/* The component labels that selectorLabels adds to h3pipe.labels (same dict argument). */}}
{{- define "h3pipe.componentLabels" -}}
app.kubernetes.io/component: {{ .component }}
{{- if .pool }}
h3pipe.io/pool: {{ .pool }}
{{- end }}
{{- end -}}

{{- define "h3pipe.image" -}}
{{- $img := .root.Values.image -}}
{{- if $img.registry -}}
{{- printf "%s/%s/%s:%s" $img.registry $img.repository .component (toString $img.tag) -}}
{{- else -}}
{{- printf "%s/%s:%s" $img.repository .component (toString $img.tag) -}}
{{- end -}}
{{- end -}}

{{- define "h3pipe.redisSecretName" -}}
{{- if .Values.redis.existingSecret -}}
{{- .Values.redis.existingSecret -}}
{{- else -}}
{{- printf "%s-redis" (include "h3pipe.fullname" .) -}}
{{- end -}}
{{- end -}}

{{- define "h3pipe.curveSecretName" -}}
{{- if .Values.curve.existingSecret -}}
{{- .Values.curve.existingSecret -}}
{{- else -}}
{{- printf "%s-curve" (include "h3pipe.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/* "true" when the CURVE keys come from the chart's hook Job (templates/curve-keys-hook.yaml):
     the transfer service runs with CURVE, and the values give neither the keys nor a Secret. */}}
{{- define "h3pipe.curveHook" -}}
{{- if and .Values.transfer.enabled .Values.cluster.transfer.curve (not .Values.curve.existingSecret) (not .Values.curve.keys) -}}
true
{{- end -}}
{{- end -}}

{{/* The Redis ACL users the chart's Secret holds a password for (configs/redis/users.acl), and
     with redis.sentinel the Sentinels' h3pipe-sentinel (files/sentinel.sh). */}}
{{- define "h3pipe.redisUsers" -}}
encoder sampler decoder transfer operator keda admin{{ if .Values.redis.sentinel.enabled }} sentinel{{ end }}
{{- end -}}

{{/* The Redis endpoint other pods and KEDA's operator (in its own namespace) reach: the bundled
     Service's fully qualified name <fullname>-redis.<namespace>.svc (a short name would resolve in
     KEDA's namespace), or the external URL's host; with redis.tls the bundled TLS port 6380.
     An external URL without a port means 6379. */}}
{{- define "h3pipe.redisHost" -}}
{{- if .Values.redis.external.enabled -}}
{{- $u := urlParse (required "redis.external.url: the external Redis as redis://host[:port]" .Values.redis.external.url) -}}
{{- required (printf "redis.external.url %q: no host (expected redis://host[:port])" .Values.redis.external.url) $u.hostname -}}
{{- else -}}
{{- printf "%s-redis.%s.svc" (include "h3pipe.fullname" .) .Release.Namespace -}}
{{- end -}}
{{- end -}}

{{- define "h3pipe.redisPort" -}}
{{- if .Values.redis.external.enabled -}}
{{- $u := urlParse .Values.redis.external.url -}}
{{- $port := trimPrefix (printf "%s:" $u.hostname) $u.host -}}
{{- if and $port (ne $port $u.host) }}{{ $port }}{{ else }}6379{{ end -}}
{{- else if .Values.redis.tls.enabled -}}
6380
{{- else -}}
6379
{{- end -}}
{{- end -}}

{{- define "h3pipe.redisAddress" -}}
{{- printf "%s:%s" (include "h3pipe.redisHost" .) (include "h3pipe.redisPort" .) -}}
{{- end -}}

{{/* host:port the services connect to: Redis itself, or their stunnel client sidecar. */}}
{{- define "h3pipe.serviceRedisAddress" -}}
{{- if .Values.redis.tls.enabled -}}
127.0.0.1:6379
{{- else -}}
{{- include "h3pipe.redisAddress" . -}}
{{- end -}}
{{- end -}}

{{/* The Redis credentials of one service: (dict "root" $ "user" "sampler"). */}}
{{- define "h3pipe.redisEnv" -}}
- name: H3PIPE_REDIS_USER
  value: {{ printf "h3pipe-%s" .user }}
- name: H3PIPE_REDIS_PASSWORD_FILE
  value: /etc/h3pipe/secrets/redis-password
{{- end -}}

{{/* With redis.tls: the stunnel client sidecar of an h3pipe pod (stunnel-client.conf, its
     connect line pointed at the TLS endpoint and its checkHost at the same host name, the one
     KEDA checks the server certificate against too: the certificate must name it). */}}
{{- define "h3pipe.redisTunnel" -}}
{{- if .Values.redis.tls.enabled }}
- name: redis-tunnel
  image: {{ .Values.redis.tls.image }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  command: ["/bin/sh", "-c"]
  args:
    - sed -e 's/^connect = .*/connect = {{ include "h3pipe.redisAddress" . }}/' -e 's/^checkHost = .*/checkHost = {{ include "h3pipe.redisHost" . }}/' /etc/stunnel/stunnel-client.conf | exec stunnel -fd 0
  securityContext:
    {{- toYaml .Values.containerSecurityContext | nindent 4 }}
  volumeMounts:
    - name: stunnel-conf
      mountPath: /etc/stunnel
      readOnly: true
    - name: redis-tls
      mountPath: /run/secrets
      readOnly: true
{{- end }}
{{- end -}}

{{- define "h3pipe.redisTlsSecret" -}}
{{- required "redis.tls.existingSecret: name the Secret with the CA, server and client certificates" .Values.redis.tls.existingSecret -}}
{{- end -}}

{{/* The client side of the TLS Secret: the CA and the client's certificate and key, never the
     server's key. */}}
{{- define "h3pipe.redisTunnelVolumes" -}}
{{- if .Values.redis.tls.enabled }}
- name: stunnel-conf
  configMap:
    name: {{ include "h3pipe.fullname" . }}-stunnel
- name: redis-tls
  secret:
    secretName: {{ include "h3pipe.redisTlsSecret" . }}
    defaultMode: 0440
    items:
      - {key: h3pipe_ca.pem, path: h3pipe_ca.pem}
      - {key: redis_client_cert.pem, path: redis_client_cert.pem}
      - {key: redis_client_key.pem, path: redis_client_key.pem}
{{- end }}
{{- end -}}

{{/* The arguments every service takes (docs/deploy.md). */}}
{{- define "h3pipe.serviceArgs" -}}
- --config=/etc/h3pipe/config/cluster.json
- --bind=0.0.0.0
- --metrics-port={{ .ports.metrics }}
- --health-port={{ .ports.health }}
- --state-dir=/var/lib/h3pipe/state
- --log-level={{ .root.Values.logLevel }}
{{- end -}}

{{- define "h3pipe.probes" -}}
startupProbe:
  httpGet: {path: /healthz, port: health}
  periodSeconds: {{ .Values.probes.periodSeconds }}
  failureThreshold: {{ .Values.probes.startupFailureThreshold }}
livenessProbe:
  httpGet: {path: /healthz, port: health}
  periodSeconds: {{ .Values.probes.periodSeconds }}
  failureThreshold: 3
readinessProbe:
  httpGet: {path: /readyz, port: health}
  periodSeconds: {{ .Values.probes.periodSeconds }}
  failureThreshold: 3
{{- end -}}

{{- define "h3pipe.volumeMounts" -}}
- name: config
  mountPath: /etc/h3pipe/config
  readOnly: true
- name: redis-password
  mountPath: /etc/h3pipe/secrets
  readOnly: true
- name: data
  mountPath: /var/lib/h3pipe
- name: tmp
  mountPath: /tmp
{{- end -}}

{{/* The volumes of an h3pipe pod: (dict "root" $ "user" "sampler"); the Redis Secret volume
     holds only that service user's password. */}}
{{- define "h3pipe.volumes" -}}
{{- $root := .root -}}
- name: config
  configMap:
    name: {{ include "h3pipe.fullname" $root }}-config
- name: redis-password
  secret:
    secretName: {{ include "h3pipe.redisSecretName" $root }}
    defaultMode: 0440
    items:
      - key: {{ printf "redis-%s.password" .user }}
        path: redis-password
      {{- if include "h3pipe.sentinel" $root }}
      # Only for asking the Sentinels where the primary is (redis.sentinel.password_file).
      - key: redis-sentinel.password
        path: sentinel-password
      {{- end }}
- name: data
{{- if $root.Values.storage.existingClaim }}
  persistentVolumeClaim:
    claimName: {{ $root.Values.storage.existingClaim }}
{{- else }}
  hostPath:
    path: {{ $root.Values.storage.hostPath }}
    type: DirectoryOrCreate
{{- end }}
- name: tmp
  emptyDir: {}
{{- include "h3pipe.redisTunnelVolumes" $root | nindent 0 }}
{{- end -}}

{{/* A config pool entry from a component's values: (dict "v" .Values.decoder "stage" "decode" "name" ...). */}}
{{- define "h3pipe.poolJson" -}}
{{- $p := dict "name" .name "host" .v.host "stage" .stage "gpus" (until (int .v.gpus)) "gpu_model" .v.gpuModel "profiles" .v.profiles -}}
{{- if .v.sharesGpusWith -}}{{- $_ := set $p "shares_gpus_with" .v.sharesGpusWith -}}{{- end -}}
{{- if .v.runtime -}}{{- $_ := set $p "runtime" .v.runtime -}}{{- end -}}
{{- toJson $p -}}
{{- end -}}

{{/*
"true" when the pool NAME (its own sharesGpusWith: SHARES) is in a GPU group: it names another
pool's GPUs, or another pool names its.  The group's stages take turns on one GPU lease
(h3pipe:gpu:<group>), so extra replicas of such a pool only wait for it: KEDA leaves it alone.
Call with (dict "root" $ "name" NAME "shares" SHARES).
*/}}
{{- define "h3pipe.inGpuGroup" -}}
{{- $v := .root.Values -}}
{{- $named := list -}}
{{- if $v.encoder.enabled }}{{ $named = append $named $v.encoder.sharesGpusWith }}{{ end -}}
{{- range $s := $v.samplerPools }}{{ $named = append $named $s.sharesGpusWith }}{{ end -}}
{{- if $v.decoder.enabled }}{{ $named = append $named $v.decoder.sharesGpusWith }}{{ end -}}
{{- if or .shares (has .name $named) }}true{{ end -}}
{{- end -}}

{{/* A stage pod's stop grace in seconds, its terminationGracePeriodSeconds and
     H3PIPE_STOP_GRACE_S (values.yaml, stopGrace): the pool's own terminationGracePeriodSeconds,
     else ceil(t + max(minMarginSeconds, marginFraction * t)) with t the longest of its profiles
     (fixed: seconds; normal: mean + 3 sd; cycle: the largest) times cluster.time_scale.
     Call with (dict "root" $ "v" POOL_VALUES). */}}
{{- define "h3pipe.stopGrace" -}}
{{- if gt (float64 (default 0 .v.terminationGracePeriodSeconds)) 0.0 -}}
{{- int .v.terminationGracePeriodSeconds -}}
{{- else -}}
{{- $t := 0.0 -}}
{{- range $_, $p := .v.profiles -}}
{{- $s := 0.0 -}}
{{- $kind := default "fixed" $p.kind -}}
{{- if eq $kind "normal" -}}
{{- $s = addf (default 0 $p.mean) (mulf 3 (default 0 $p.sd)) -}}
{{- else if eq $kind "cycle" -}}
{{- range $c := $p.seconds }}{{ $s = maxf $s $c }}{{ end -}}
{{- else -}}
{{- $s = float64 (default 0 $p.seconds) -}}
{{- end -}}
{{- $t = maxf $t $s -}}
{{- end -}}
{{- $t = mulf $t .root.Values.cluster.time_scale -}}
{{- $g := .root.Values.stopGrace -}}
{{- addf $t (maxf $g.minMarginSeconds (mulf $g.marginFraction $t)) | ceil | int -}}
{{- end -}}
{{- end -}}

{{/* "true" with redis.sentinel on. */}}
{{- define "h3pipe.sentinel" -}}
{{- if .Values.redis.sentinel.enabled }}true{{ end -}}
{{- end -}}

{{/* The bundled Sentinels' StatefulSet and headless Service: <fullname>-sentinel, at most 52
     characters (the revision-hash label), a hash of the whole in a longer one. */}}
{{- define "h3pipe.sentinelName" -}}
{{- $full := include "h3pipe.fullname" . -}}
{{- if gt (len $full) 43 -}}
{{- printf "%s-%s-sentinel" ($full | trunc 34 | trimSuffix "-") ($full | sha256sum | trunc 8) -}}
{{- else -}}
{{- printf "%s-sentinel" $full -}}
{{- end -}}
{{- end -}}

{{/* The Sentinels every client asks, HOST:PORT separated by spaces: the bundled pods' stable
     names (<name>-<i>.<headless>.<namespace>.svc, reachable from KEDA's namespace too) or
     redis.sentinel.external.addresses. */}}
{{- define "h3pipe.sentinelAddresses" -}}
{{- $s := .Values.redis.sentinel -}}
{{- if .Values.redis.external.enabled -}}
{{- if not $s.external.addresses -}}
{{- fail "redis.sentinel.external.addresses: name the Sentinels of your Redis (HOST:PORT each) when redis.sentinel and redis.external are both on" -}}
{{- end -}}
{{- join " " $s.external.addresses -}}
{{- else -}}
{{- $n := include "h3pipe.sentinelName" . -}}
{{- $out := list -}}
{{- range $i := until (int $s.sentinels) -}}
{{- $out = append $out (printf "%s-%d.%s.%s.svc:26379" $n $i $n $.Release.Namespace) -}}
{{- end -}}
{{- join " " $out -}}
{{- end -}}
{{- end -}}

{{/* The bundled Redis pods, HOST:PORT separated by spaces, pod 0 (the first primary) first. */}}
{{- define "h3pipe.redisNodes" -}}
{{- $full := include "h3pipe.fullname" . -}}
{{- $out := list -}}
{{- range $i := until (int .Values.redis.sentinel.replicas) -}}
{{- $out = append $out (printf "%s-redis-%d.%s-redis-headless.%s.svc:6379" $full $i $full $.Release.Namespace) -}}
{{- end -}}
{{- join " " $out -}}
{{- end -}}
