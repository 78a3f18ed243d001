{{/* Names, labels and the pieces every workload shares. */}}

{{- define "h3pipe.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "h3pipe.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
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
{{- printf "%s/%s/%s:%s" $img.registry $img.repository .component $img.tag -}}
{{- else -}}
{{- printf "%s/%s:%s" $img.repository .component $img.tag -}}
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

{{/* The Redis ACL users the chart's Secret holds a password for (configs/redis/users.acl). */}}
{{- define "h3pipe.redisUsers" -}}
encoder sampler decoder transfer operator keda admin
{{- end -}}

{{/* host:port of Redis (where KEDA connects): the bundled Service, or the external URL's
     authority; with redis.tls the bundled Service's TLS port. */}}
{{- define "h3pipe.redisAddress" -}}
{{- if .Values.redis.external.enabled -}}
{{- (urlParse .Values.redis.external.url).host -}}
{{- else if .Values.redis.tls.enabled -}}
{{- printf "%s-redis:6380" (include "h3pipe.fullname" .) -}}
{{- else -}}
{{- printf "%s-redis:6379" (include "h3pipe.fullname" .) -}}
{{- end -}}
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
     connect line pointed at the TLS endpoint). */}}
{{- define "h3pipe.redisTunnel" -}}
{{- if .Values.redis.tls.enabled }}
- name: redis-tunnel
  image: {{ .Values.redis.tls.image }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  command: ["/bin/sh", "-c"]
  args:
    - sed -e 's/^connect = .*/connect = {{ include "h3pipe.redisAddress" . }}/' /etc/stunnel/stunnel-client.conf | exec stunnel -fd 0
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

{{- define "h3pipe.redisTunnelVolumes" -}}
{{- if .Values.redis.tls.enabled }}
- name: stunnel-conf
  configMap:
    name: {{ include "h3pipe.fullname" . }}-stunnel
- name: redis-tls
  secret:
    secretName: {{ required "redis.tls.existingSecret: name the Secret with the CA, server and client certificates" .Values.redis.tls.existingSecret }}
    defaultMode: 0440
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
