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
{{- $hosts := list -}}
{{- range $h := .Values.cluster.hosts -}}
{{- $hosts = append $hosts $h.name -}}
{{- /* One DaemonSet serves every host with one hostPort: the hosts' transfer_port is
       transfer.port (the chart fills it in); a host that gives another one is an error. */ -}}
{{- if and (hasKey $h "transfer_port") (ne (int $h.transfer_port) (int $.Values.transfer.port)) -}}
{{- fail (printf "cluster.hosts[%s].transfer_port %v differs from transfer.port %v: the transfer DaemonSet listens on transfer.port on every node; drop transfer_port from cluster.hosts (the chart sets it from transfer.port)" $h.name $h.transfer_port $.Values.transfer.port) -}}
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
{{- if and .Values.transfer.enabled .Values.cluster.transfer.curve (not .Values.curve.existingSecret) -}}
{{- range $h := $hosts -}}
{{- $k := index $.Values.curve.keys $h -}}
{{- if not (and $k $k.public $k.secret) -}}
{{- fail (printf "curve.keys.%s: cluster.transfer.curve is on, so the transfer service of every host needs its CURVE key pair: give curve.keys.<host>.{public,secret} for %s (h3pipe keygen), or curve.existingSecret (a Secret with <host>.pub and <host>.key), or set cluster.transfer.curve=false" $h (join ", " $hosts)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
