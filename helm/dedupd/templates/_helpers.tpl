{{/* Names ------------------------------------------------------------------ */}}

{{- define "dedupd.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Full name: release-name-dedupd, or the release name when it already contains the chart name. */}}
{{- define "dedupd.fullname" -}}
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

{{- define "dedupd.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "dedupd.selectorLabels" -}}
app.kubernetes.io/name: {{ include "dedupd.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "dedupd.labels" -}}
helm.sh/chart: {{ include "dedupd.chart" . }}
{{ include "dedupd.selectorLabels" . }}
app.kubernetes.io/version: {{ include "dedupd.imageTag" . | quote }}
app.kubernetes.io/component: {{ .Values.mode }}
app.kubernetes.io/part-of: dedupd
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "dedupd.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "dedupd.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "dedupd.imageTag" -}}
{{- default .Chart.AppVersion .Values.image.tag -}}
{{- end -}}

{{- define "dedupd.image" -}}
{{- printf "%s:%s" .Values.image.repository (include "dedupd.imageTag" .) -}}
{{- end -}}

{{/* workload, or when empty: StatefulSet with a PVC per pod (persistence.enabled), else Deployment. */}}
{{- define "dedupd.workloadKind" -}}
{{- if .Values.workload -}}{{ .Values.workload }}
{{- else if .Values.persistence.enabled -}}StatefulSet
{{- else -}}Deployment
{{- end -}}
{{- end -}}

{{- define "dedupd.statefulSet" -}}
{{- if eq (include "dedupd.workloadKind" .) "StatefulSet" -}}true{{- end -}}
{{- end -}}

{{/* replicas: of the workload, left out when replicaCount is null (an HPA or your own scaling decides). */}}
{{- define "dedupd.replicas" -}}
{{- if not (kindIs "invalid" .Values.replicaCount) }}
replicas: {{ .Values.replicaCount }}
{{- end }}
{{- end -}}

{{/* Config -------------------------------------------------------------------- */}}

{{/* The effective config: .Values.config with the chart's defaults filled in (values win). */}}
{{- define "dedupd.configDict" -}}
{{- $cfg := deepCopy (default (dict) .Values.config) -}}
{{- $mount := trimSuffix "/" .Values.persistence.mountPath -}}
{{- $defaults := dict
      "admin" (dict "listen" "0.0.0.0:9464")
      "store" (dict "path" (printf "%s/store" $mount))
      "tail" (dict "store_path" (printf "%s/tail" $mount)) -}}
{{- toJson (merge $cfg $defaults) -}}
{{- end -}}

{{- define "dedupd.configJson" -}}
{{- include "dedupd.configDict" . | fromJson | toPrettyJson -}}
{{- end -}}

{{/* Port of admin.listen (ADDR:PORT, [v6]:PORT). */}}
{{- define "dedupd.adminPort" -}}
{{- $cfg := include "dedupd.configDict" . | fromJson -}}
{{- $listen := toString (dig "admin" "listen" "0.0.0.0:9464" $cfg) -}}
{{- $port := regexFind "[0-9]+$" $listen -}}
{{- if or (not $port) (not (contains ":" $listen)) -}}
{{- fail (printf "config.admin.listen %q: expected ADDR:PORT (e.g. 0.0.0.0:9464)" $listen) -}}
{{- end -}}
{{- $port -}}
{{- end -}}

{{/* Port of api.listen, empty when the job API is off. */}}
{{- define "dedupd.apiPort" -}}
{{- $cfg := include "dedupd.configDict" . | fromJson -}}
{{- $listen := toString (dig "api" "listen" "127.0.0.1:9465" $cfg) -}}
{{- regexFind "[0-9]+$" $listen -}}
{{- end -}}

{{/* Drain period in whole seconds: ceil((shutdown.grace_ms + rebalance.grace_ms) / 1000).
     On SIGTERM dedupd finishes its ops in flight (shutdown.grace_ms), then leaves the
     group: the revoke drains and writes release records (rebalance.grace_ms).  The
     defaults are dedupd's (docs/CONFIG.md; tests/helm checks them against
     `dedupd config --doc` once dedupd knows both options). */}}
{{- define "dedupd.drainSeconds" -}}
{{- $cfg := include "dedupd.configDict" . | fromJson -}}
{{- $ms := add (int64 (dig "shutdown" "grace_ms" 20000 $cfg)) (int64 (dig "rebalance" "grace_ms" 60000 $cfg)) -}}
{{- div (add $ms 999) 1000 -}}
{{- end -}}

{{/* terminationGracePeriodSeconds: the value when set (> drain), else drain + margin. */}}
{{- define "dedupd.terminationGracePeriodSeconds" -}}
{{- $drain := int64 (include "dedupd.drainSeconds" .) -}}
{{- $set := int64 (default 0 .Values.terminationGracePeriodSeconds) -}}
{{- if gt $set 0 -}}
{{- if le $set $drain -}}
{{- fail (printf "terminationGracePeriodSeconds=%d must exceed the drain period, config.shutdown.grace_ms + config.rebalance.grace_ms (%ds): dedupd would be killed while it drains" $set $drain) -}}
{{- end -}}
{{- $set -}}
{{- else -}}
{{- add $drain (int64 .Values.terminationGraceMarginSeconds) -}}
{{- end -}}
{{- end -}}

{{/* Secret ---------------------------------------------------------------------- */}}

{{- define "dedupd.secretName" -}}
{{- default (include "dedupd.fullname" .) .Values.secret.existingSecret -}}
{{- end -}}

{{/* Whether the chart creates the Secret (no existingSecret and some data). */}}
{{- define "dedupd.createSecret" -}}
{{- if not .Values.secret.existingSecret -}}
{{- range $k, $v := .Values.secret.data -}}{{- if $v -}}true{{- end -}}{{- end -}}
{{- end -}}
{{- end -}}

{{/* Whether the Secret holds (or may hold) the value of one key. */}}
{{- define "dedupd.secretHasKey" -}}
{{- $key := index . 1 -}}
{{- with index . 0 -}}
{{- if .Values.secret.existingSecret -}}true
{{- else if index (default (dict) .Values.secret.data) $key -}}true
{{- end -}}
{{- end -}}
{{- end -}}

{{/* env entries of the Secret's credentials (sorted by variable name). */}}
{{- define "dedupd.secretEnv" -}}
{{- $root := . -}}
{{- range $name, $key := .Values.secret.env }}
{{- if include "dedupd.secretHasKey" (list $root $key) }}
- name: {{ $name }}
  valueFrom:
    secretKeyRef:
      name: {{ include "dedupd.secretName" $root }}
      key: {{ $key }}
      {{- if $root.Values.secret.existingSecret }}
      optional: true
      {{- end }}
{{- end }}
{{- end }}
{{- end -}}

{{/* Validation ----------------------------------------------------------------------- */}}

{{- define "dedupd.validate" -}}
{{- $cfg := include "dedupd.configDict" . | fromJson -}}
{{- if not (has .Values.mode (list "sidecar" "standalone")) -}}
{{- fail (printf "mode %q: expected sidecar or standalone" .Values.mode) -}}
{{- end -}}
{{- if and (eq .Values.mode "sidecar") (not .Values.app.image) -}}
{{- fail "mode=sidecar needs app.image (your own container); set mode=standalone to run dedupd alone" -}}
{{- end -}}
{{- if and .Values.nativeSidecar (ne .Values.mode "sidecar") -}}
{{- fail "nativeSidecar=true needs mode=sidecar" -}}
{{- end -}}
{{- if not (has (include "dedupd.workloadKind" .) (list "Deployment" "StatefulSet")) -}}
{{- fail (printf "workload %q: expected Deployment or StatefulSet (or empty)" .Values.workload) -}}
{{- end -}}
{{- if and .Values.persistence.enabled (not (include "dedupd.statefulSet" .)) -}}
{{- fail "persistence.enabled=true needs workload=StatefulSet (a PVC per pod); leave workload empty or set it to StatefulSet" -}}
{{- end -}}
{{- /* static membership: the chart alone decides it (StatefulSet: the pod name) */ -}}
{{- if hasKey (default (dict) (get $cfg "kafka")) "group.instance.id" -}}
{{- fail "config.kafka.group.instance.id is set: the chart sets static membership itself (workload=StatefulSet: the pod name; a Deployment must not use it, KIP-345)" -}}
{{- end -}}
{{- if not (include "dedupd.statefulSet" .) -}}
{{- range (concat (default (list) .Values.env) (default (list) .Values.app.env)) -}}
{{- if eq (toString (get . "name")) "DEDUPD_KAFKA__GROUP__INSTANCE__ID" -}}
{{- fail "env DEDUPD_KAFKA__GROUP__INSTANCE__ID in a Deployment: its pod names change on every rollout and a static member sends no LeaveGroup (KIP-345), so its partitions would sit idle for session.timeout.ms; use workload=StatefulSet" -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- /* secrets never go to the ConfigMap */ -}}
{{- range $path := list "broker.sasl_password" "api.token" -}}
{{- $parts := splitList "." $path -}}
{{- if dig (index $parts 0) (index $parts 1) "" $cfg -}}
{{- fail (printf "config.%s is a secret: put it in secret.data (or existingSecret), never in config (the ConfigMap)" $path) -}}
{{- end -}}
{{- end -}}
{{- range $k, $v := (default (dict) (get $cfg "kafka")) -}}
{{- if regexMatch "(password|secret)" (lower $k) -}}
{{- fail (printf "config.kafka.%s is a secret: pass it through the Secret (secret.env: DEDUPD_KAFKA__%s), never in config" $k (upper (replace "." "__" $k))) -}}
{{- end -}}
{{- end -}}
{{- range $exit := (dig "proxy" "exits" (list) $cfg) -}}
{{- if regexMatch "^[a-zA-Z0-9+.-]+://[^/@]*:[^/@]*@" (toString $exit) -}}
{{- fail "config.proxy.exits: a proxy URL carries a password; keep credentials out of the ConfigMap" -}}
{{- end -}}
{{- end -}}
{{- range $name, $key := .Values.secret.env -}}
{{- if not (hasPrefix "DEDUPD_" $name) -}}
{{- fail (printf "secret.env: %q is not a dedupd option variable (DEDUPD_<SECTION>__<KEY>)" $name) -}}
{{- end -}}
{{- end -}}
{{- /* probes and Prometheus reach the pod IP */ -}}
{{- $admin := toString (dig "admin" "listen" "" $cfg) -}}
{{- if regexMatch "^(127\\.|localhost:|\\[::1\\]:)" $admin -}}
{{- fail (printf "config.admin.listen %q is loopback: kubelet probes and Prometheus reach the pod IP (use 0.0.0.0:PORT)" $admin) -}}
{{- end -}}
{{- $mount := printf "%s/" (trimSuffix "/" .Values.persistence.mountPath) -}}
{{- $store := toString (dig "store" "path" "" $cfg) -}}
{{- if not (hasPrefix $mount $store) -}}
{{- fail (printf "config.store.path %q must be under persistence.mountPath %q (the only writable volume for the store)" $store $mount) -}}
{{- end -}}
{{- if dig "instance" "id" "" $cfg -}}
{{- fail "config.instance.id is set: the chart sets instance.id to each pod's name (DEDUPD_INSTANCE__ID), so that no two pods share one; leave it empty" -}}
{{- end -}}
{{- $_ := include "dedupd.adminPort" . -}}
{{- $_ := include "dedupd.terminationGracePeriodSeconds" . -}}
{{- end -}}

{{/* Pod template -------------------------------------------------------------------- */}}

{{- define "dedupd.dedupdContainer" -}}
- name: dedupd
  image: {{ include "dedupd.image" . | quote }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  {{- if .Values.nativeSidecar }}
  restartPolicy: Always
  {{- end }}
  args:
    - run
    - -c
    - /etc/dedupd/dedupd.json
    {{- range .Values.extraArgs }}
    - {{ . | quote }}
    {{- end }}
  ports:
    - name: admin
      containerPort: {{ include "dedupd.adminPort" . }}
      protocol: TCP
  env:
    - name: POD_NAME
      valueFrom:
        fieldRef:
          fieldPath: metadata.name
    - name: POD_NAMESPACE
      valueFrom:
        fieldRef:
          fieldPath: metadata.namespace
    # instance.id (lease owners; transactional.id under exactly_once): the pod name.
    - name: DEDUPD_INSTANCE__ID
      valueFrom:
        fieldRef:
          fieldPath: metadata.name
    {{- if include "dedupd.statefulSet" . }}
    # Static membership (KIP-345), StatefulSet only: the pod name is stable, so a
    # restarted pod rejoins as the same member and gets its partitions back
    # without a rebalance.  (Never in a Deployment: its pod names change on
    # every rollout and a static member sends no LeaveGroup, so the partitions
    # of a replaced pod would sit idle for session.timeout.ms.)
    - name: DEDUPD_KAFKA__GROUP__INSTANCE__ID
      valueFrom:
        fieldRef:
          fieldPath: metadata.name
    {{- end }}
    {{- with include "dedupd.secretEnv" . | trim }}
    {{- . | nindent 4 }}
    {{- end }}
    {{- with .Values.env }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with .Values.envFrom }}
  envFrom:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  livenessProbe:
    httpGet:
      path: /healthz
      port: admin
    {{- toYaml .Values.livenessProbe | nindent 4 }}
  readinessProbe:
    httpGet:
      path: /readyz
      port: admin
    {{- toYaml .Values.readinessProbe | nindent 4 }}
  resources:
    {{- toYaml .Values.resources | nindent 4 }}
  securityContext:
    {{- toYaml .Values.securityContext | nindent 4 }}
  volumeMounts:
    - name: config
      mountPath: /etc/dedupd
      readOnly: true
    - name: data
      mountPath: {{ .Values.persistence.mountPath }}
    {{- if .Values.tmp.enabled }}
    - name: tmp
      mountPath: /tmp
    {{- end }}
    {{- with .Values.extraVolumeMounts }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
{{- end -}}

{{- define "dedupd.appContainer" -}}
{{- $apiPort := include "dedupd.apiPort" . -}}
- name: {{ .Values.app.name }}
  image: {{ .Values.app.image | quote }}
  imagePullPolicy: {{ .Values.app.imagePullPolicy }}
  {{- with .Values.app.command }}
  command:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.app.args }}
  args:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- $apiEnv := and .Values.app.injectApiEnv $apiPort }}
  {{- $tokenKey := index .Values.secret.env "DEDUPD_API__TOKEN" }}
  {{- $token := and $apiEnv $tokenKey (include "dedupd.secretHasKey" (list . $tokenKey)) }}
  {{- if or $apiEnv .Values.app.env }}
  env:
    {{- if $apiEnv }}
    # dedupd's job API, on the pod's loopback.
    - name: DEDUPD_API_URL
      value: {{ printf "http://127.0.0.1:%s" $apiPort | quote }}
    {{- end }}
    {{- if $token }}
    - name: DEDUPD_API_TOKEN
      valueFrom:
        secretKeyRef:
          name: {{ include "dedupd.secretName" . }}
          key: {{ $tokenKey }}
          {{- if .Values.secret.existingSecret }}
          optional: true
          {{- end }}
    {{- end }}
    {{- with .Values.app.env }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- end }}
  {{- with .Values.app.envFrom }}
  envFrom:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.app.ports }}
  ports:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.app.livenessProbe }}
  livenessProbe:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.app.readinessProbe }}
  readinessProbe:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.app.resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.app.securityContext }}
  securityContext:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.app.volumeMounts }}
  volumeMounts:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}

{{- define "dedupd.podTemplate" -}}
metadata:
  labels:
    {{- include "dedupd.selectorLabels" . | nindent 4 }}
    app.kubernetes.io/component: {{ .Values.mode }}
    {{- with .Values.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  annotations:
    checksum/config: {{ include "dedupd.configJson" . | sha256sum }}
    {{- if include "dedupd.createSecret" . }}
    checksum/secret: {{ toJson .Values.secret.data | sha256sum }}
    {{- end }}
    {{- if .Values.metrics.podAnnotations }}
    prometheus.io/scrape: "true"
    prometheus.io/port: {{ include "dedupd.adminPort" . | quote }}
    prometheus.io/path: /metrics
    {{- end }}
    {{- with .Values.podAnnotations }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  serviceAccountName: {{ include "dedupd.serviceAccountName" . }}
  automountServiceAccountToken: {{ .Values.serviceAccount.automountServiceAccountToken }}
  # No Service environment variables (a Service named "dedupd" would put DEDUPD_*
  # variables into the environment, dedupd's own prefix).
  enableServiceLinks: false
  # Above the drain period (config.shutdown.grace_ms + config.rebalance.grace_ms =
  # {{ include "dedupd.drainSeconds" . }}s): the first SIGTERM makes dedupd finish its ops in flight, leave
  # the group (the revoke drains and releases what did not finish), flush and commit.
  terminationGracePeriodSeconds: {{ include "dedupd.terminationGracePeriodSeconds" . }}
  securityContext:
    {{- toYaml .Values.podSecurityContext | nindent 4 }}
  {{- with .Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.priorityClassName }}
  priorityClassName: {{ . }}
  {{- end }}
  {{- if .Values.nativeSidecar }}
  initContainers:
    {{- include "dedupd.dedupdContainer" . | nindent 4 }}
  {{- end }}
  containers:
    {{- if eq .Values.mode "sidecar" }}
    {{- include "dedupd.appContainer" . | nindent 4 }}
    {{- end }}
    {{- if not .Values.nativeSidecar }}
    {{- include "dedupd.dedupdContainer" . | nindent 4 }}
    {{- end }}
  volumes:
    - name: config
      configMap:
        name: {{ include "dedupd.fullname" . }}
    {{- if not .Values.persistence.enabled }}
    - name: data
      emptyDir:
        {{- with .Values.persistence.emptyDir.medium }}
        medium: {{ . }}
        {{- end }}
        {{- with .Values.persistence.emptyDir.sizeLimit }}
        sizeLimit: {{ . }}
        {{- end }}
    {{- end }}
    {{- if .Values.tmp.enabled }}
    - name: tmp
      emptyDir:
        sizeLimit: {{ .Values.tmp.sizeLimit }}
    {{- end }}
    {{- with .Values.extraVolumes }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with .Values.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.topologySpreadConstraints }}
  topologySpreadConstraints:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}
