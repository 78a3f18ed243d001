{{/* Values the services would reject at start, refused at render with what to change
     (configmap.yaml includes this, so every install and upgrade runs it). */}}
{{- define "h3pipe.validate" -}}
{{- if not .Values.samplerPools -}}
{{- fail "samplerPools: at least one sampler pool is required (name, host, gpus, gpuModel, profiles): h3pipe's config loader rejects a cluster without a sample pool" -}}
{{- end -}}
{{- if not .Values.encoder.enabled -}}
{{- fail "encoder.enabled: false leaves the cluster without an encode pool: submissions are ingested by the encoder service, so every job would wait forever (h3pipe's config loader rejects it)" -}}
{{- end -}}
{{- if not .Values.decoder.enabled -}}
{{- fail "decoder.enabled: false leaves the cluster without a decode pool: nothing would decode the sampled latents, so every job would wait forever (h3pipe's config loader rejects it)" -}}
{{- end -}}
{{- if eq (int .Values.transfer.dataPort) (int .Values.transfer.port) -}}
{{- fail (printf "transfer.dataPort %v equals transfer.port: the receiver's data connection needs a port of its own" .Values.transfer.dataPort) -}}
{{- end -}}
{{- $hosts := list -}}
{{- range $h := .Values.cluster.hosts -}}
{{- $hosts = append $hosts $h.name -}}
{{- /* One DaemonSet serves every host with one hostPort: the hosts' transfer_port is
       transfer.port (the chart fills it in); a host that gives another one is an error. */ -}}
{{- if and (hasKey $h "transfer_port") (ne (int $h.transfer_port) (int $.Values.transfer.port)) -}}
{{- fail (printf "cluster.hosts[%s].transfer_port %v differs from transfer.port %v: the transfer DaemonSet listens on transfer.port on every node; drop transfer_port from cluster.hosts (the chart sets it from transfer.port)" $h.name $h.transfer_port $.Values.transfer.port) -}}
{{- end -}}
{{- if and (hasKey $h "transfer_data_port") (ne (int $h.transfer_data_port) (int $.Values.transfer.dataPort)) -}}
{{- fail (printf "cluster.hosts[%s].transfer_data_port %v differs from transfer.dataPort %v: the transfer DaemonSet's data connection listens on transfer.dataPort on every node; drop transfer_data_port from cluster.hosts (the chart sets it from transfer.dataPort)" $h.name $h.transfer_data_port $.Values.transfer.dataPort) -}}
{{- end -}}
{{- end -}}
{{- $pools := list -}}
{{- if .Values.encoder.enabled }}{{ $pools = append $pools (dict "what" "encoder" "name" .Values.encoder.pool "host" .Values.encoder.host "shares" .Values.encoder.sharesGpusWith) }}{{ end -}}
{{- range $i, $p := .Values.samplerPools }}{{ $pools = append $pools (dict "what" (printf "samplerPools[%d]" $i) "name" $p.name "host" $p.host "shares" $p.sharesGpusWith) }}{{ end -}}
{{- if .Values.decoder.enabled }}{{ $pools = append $pools (dict "what" "decoder" "name" .Values.decoder.pool "host" .Values.decoder.host "shares" .Values.decoder.sharesGpusWith) }}{{ end -}}
{{- $names := list -}}
{{- range $p := $pools }}{{ $names = append $names (toString $p.name) }}{{ end -}}
{{- range $p := $pools -}}
{{- if and $p.shares (not (has $p.shares $names)) -}}
{{- fail (printf "%s: sharesGpusWith %q is not a pool of this release (%s)" $p.what $p.shares (join ", " $names)) -}}
{{- end -}}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" (toString $p.name)) -}}
{{- fail (printf "%s: pool name %q must be lowercase letters, digits and '-' (it names a Deployment and labels its pods)" $p.what (toString $p.name)) -}}
{{- end -}}
{{- if gt (len (toString $p.name)) 63 -}}
{{- fail (printf "%s: pool name %q is longer than 63 characters (a label value)" $p.what $p.name) -}}
{{- end -}}
{{- if not (has $p.host $hosts) -}}
{{- fail (printf "%s: host %q is not a host of cluster.hosts (%s)" $p.what $p.host (join ", " $hosts)) -}}
{{- end -}}
{{- end -}}
{{- if .Values.redis.sentinel.enabled -}}
{{- if .Values.redis.tls.enabled -}}
{{- fail "redis.sentinel.enabled with redis.tls.enabled: behind Sentinel the services connect to the primary the Sentinels name, which the stunnel sidecar (one fixed address) cannot follow; turn one of them off" -}}
{{- end -}}
{{- if and (not .Values.redis.external.enabled) (not .Values.redis.bundled.persistence.enabled) -}}
{{- fail "redis.sentinel.enabled without redis.bundled.persistence.enabled: a primary restarted empty before the Sentinels notice it is down would empty its replicas; keep persistence on" -}}
{{- end -}}
{{- if and (not .Values.redis.external.enabled) (lt (int .Values.redis.sentinel.replicas) 2) -}}
{{- fail (printf "redis.sentinel.replicas %v: a failover needs a replica to promote (at least 2: a primary and a replica)" .Values.redis.sentinel.replicas) -}}
{{- end -}}
{{- if and (not .Values.redis.external.enabled) (gt (int .Values.redis.sentinel.quorum) (int .Values.redis.sentinel.sentinels)) -}}
{{- fail (printf "redis.sentinel.quorum %v is more than redis.sentinel.sentinels %v: no failover could ever be agreed" .Values.redis.sentinel.quorum .Values.redis.sentinel.sentinels) -}}
{{- end -}}
{{- end -}}
{{- if and .Values.curve.existingSecret .Values.curve.keys -}}
{{- fail (printf "curve.existingSecret %q and curve.keys are both set: the transfer pods mount one Secret; give the keys in your Secret, or drop curve.existingSecret to have the chart render curve.keys" .Values.curve.existingSecret) -}}
{{- end -}}
{{- if and .Values.transfer.enabled .Values.cluster.transfer.curve -}}
{{- range $h := $hosts -}}
{{- /* The Secret's keys are <host>.pub and <host>.key: Secret data keys are [-._a-zA-Z0-9]+. */ -}}
{{- if not (regexMatch "^[-._a-zA-Z0-9]+$" (toString $h)) -}}
{{- fail (printf "cluster.hosts name %q: the CURVE Secret holds <host>.pub and <host>.key, and Secret keys may hold only letters, digits, '-', '_' and '.'" (toString $h)) -}}
{{- end -}}
{{- end -}}
{{- /* curve.keys, when given, is the whole Secret the chart renders: no hook fills the gaps, so
       every host needs its pair there (without curve.keys the hook Job makes every pair). */ -}}
{{- if .Values.curve.keys -}}
{{- range $h := $hosts -}}
{{- $k := index $.Values.curve.keys $h -}}
{{- if not (and $k $k.public $k.secret) -}}
{{- fail (printf "curve.keys.%s: curve.keys is given but has no key pair for host %s: give curve.keys.<host>.{public,secret} for every host (%s; h3pipe keygen), or leave curve.keys empty and the chart's hook Job generates them in the cluster" $h $h (join ", " $hosts)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
