{{/*
A stage Deployment (encoder, one sampler pool, decoder).  Call with
(dict "root" $ "component" "sampler" "pool" NAME "v" POOL_VALUES "ports" PORTS).
*/}}
{{- define "h3pipe.stageDeployment" -}}
{{- $root := .root -}}
{{- $sel := dict "root" $root "component" .component "pool" .pool -}}
{{- $grace := include "h3pipe.stopGrace" (dict "root" $root "v" .v) -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ include "h3pipe.stageName" $sel }}
  labels:
    {{- include "h3pipe.labels" $root | nindent 4 }}
    {{- include "h3pipe.componentLabels" $sel | nindent 4 }}
spec:
  {{- /* With keda.enabled a ScaledObject owns the replica count of the sampler and decoder
         Deployments (not of a pool in a GPU group: h3pipe.inGpuGroup): a replicas field here
         would reset it at every helm upgrade. */}}
  {{- if not (and $root.Values.keda.enabled (has .component (list "sampler" "decoder"))
                  (not (include "h3pipe.inGpuGroup" (dict "root" $root "name" .pool "shares" .v.sharesGpusWith)))) }}
  replicas: {{ .v.replicas }}
  {{- end }}
  strategy:
    type: Recreate
  selector:
    matchLabels:
      {{- include "h3pipe.selectorLabels" $sel | nindent 6 }}
  template:
    metadata:
      labels:
        {{- include "h3pipe.selectorLabels" $sel | nindent 8 }}
        h3pipe.io/metrics: "true"
      annotations:
        checksum/config: {{ include (print $root.Template.BasePath "/configmap.yaml") $root | sha256sum }}
    spec:
      {{- with $root.Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      securityContext:
        {{- toYaml $root.Values.podSecurityContext | nindent 8 }}
      {{- /* The pool's longest stage time and a margin (h3pipe.stopGrace): a pod the HPA or
             a rollout removes finishes its task first, or hands it back just before SIGKILL. */}}
      terminationGracePeriodSeconds: {{ $grace }}
      nodeSelector:
        {{- if .v.nodeSelector }}
        {{- toYaml .v.nodeSelector | nindent 8 }}
        {{- else }}
        kubernetes.io/hostname: {{ .v.host }}
        {{- end }}
      {{- with .v.affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with .v.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      containers:
        - name: {{ .component }}
          image: {{ include "h3pipe.image" (dict "root" $root "component" .component) }}
          imagePullPolicy: {{ $root.Values.image.pullPolicy }}
          args:
            {{- include "h3pipe.serviceArgs" (dict "root" $root "ports" .ports) | nindent 12 }}
            - --host={{ .v.host }}
            - --pool={{ .pool }}
          env:
            - name: H3PIPE_STATE
              value: /var/lib/h3pipe/state
            - name: H3PIPE_HEALTH_PORT
              value: {{ .ports.health | quote }}
            # The worker hands its task back when it cannot finish within this (the pod's grace).
            - name: H3PIPE_STOP_GRACE_S
              value: {{ $grace | quote }}
            {{- include "h3pipe.redisEnv" (dict "root" $root "user" .component) | nindent 12 }}
          ports:
            - name: metrics
              containerPort: {{ .ports.metrics }}
            - name: health
              containerPort: {{ .ports.health }}
          # Stop claiming at once (SIGTERM: the service stops claiming and finishes its task; the
          # kubelet's own SIGTERM after this changes nothing); the grace counts from here.
          lifecycle:
            preStop:
              exec:
                command: ["/bin/sh", "-c", "kill -TERM 1"]
          {{- include "h3pipe.probes" $root | nindent 10 }}
          securityContext:
            {{- toYaml $root.Values.containerSecurityContext | nindent 12 }}
          resources:
            {{- $res := deepCopy (default (dict) .v.resources) -}}
            {{- if gt (int .v.gpus) 0 -}}
            {{- $limits := default (dict) $res.limits -}}
            {{- $_ := set $limits "nvidia.com/gpu" (int .v.gpus) -}}
            {{- $_ := set $res "limits" $limits -}}
            {{- end }}
            {{- toYaml $res | nindent 12 }}
          volumeMounts:
            {{- include "h3pipe.volumeMounts" $root | nindent 12 }}
        {{- include "h3pipe.redisTunnel" $root | nindent 8 }}
      volumes:
        {{- include "h3pipe.volumes" (dict "root" $root "user" .component) | nindent 8 }}
{{- end -}}
