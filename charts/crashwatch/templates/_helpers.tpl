{{- define "crashwatch.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "crashwatch.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "crashwatch.selectorLabels" -}}
app.kubernetes.io/name: {{ include "crashwatch.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "crashwatch.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "crashwatch.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Whether http.host is a loopback address: only the Pod's own network reaches it (the kubelet's probes
with hostNetwork), never a Service. */}}
{{- define "crashwatch.loopback" -}}
{{- $host := .Values.http.host }}
{{- if or (hasPrefix "127." $host) (eq $host "localhost") (eq $host "::1") }}true{{ end }}
{{- end }}

{{- define "crashwatch.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "crashwatch.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The webhook's MutatingWebhookConfiguration (cluster-scoped: the release's namespace in its name). */}}
{{- define "crashwatch.admissionConfiguration" -}}
{{- printf "%s-%s" (include "crashwatch.fullname" .) .Release.Namespace }}
{{- end }}

{{/* The names the API server may check when it calls the webhook through the Service. */}}
{{- define "crashwatch.admissionNames" -}}
{{- $fullname := include "crashwatch.fullname" . }}
- {{ printf "%s.%s.svc" $fullname .Release.Namespace }}
- {{ printf "%s.%s" $fullname .Release.Namespace }}
- {{ $fullname }}
{{- end }}

{{/* The generated webhook certificate as JSON (ca, crt, key base64; expires, Unix seconds): the one in the
release's Secret while it has more than renewDays left, else a new CA and certificate. Made once per
render and kept in .Values, so that the Secret, the caBundle and every Pod see the same pair. */}}
{{- define "crashwatch.admissionCertificate" -}}
{{- if not (hasKey .Values "madeAdmissionCertificate") }}
{{- $fullname := include "crashwatch.fullname" . }}
{{- $settings := .Values.admission.certificate }}
{{- $kept := lookup "v1" "Secret" .Release.Namespace (printf "%s-admission" $fullname) }}
{{- $data := dig "data" dict ($kept | default dict) }}
{{- $expires := dig "metadata" "annotations" "crashwatch.dev/expires" "0" ($kept | default dict) | int64 }}
{{- $now := now | unixEpoch | int64 }}
{{- $made := dict }}
{{- if and (hasKey $data "ca.crt") (lt (add $now (mul $settings.renewDays 86400)) $expires) }}
{{- $made = dict "ca" (index $data "ca.crt") "crt" (index $data "tls.crt") "key" (index $data "tls.key") "expires" (toString $expires) }}
{{- else }}
{{- $authority := genCA (printf "%s-admission-ca" $fullname) (int $settings.days) }}
{{- $cert := genSignedCert (printf "%s.%s.svc" $fullname .Release.Namespace) nil (include "crashwatch.admissionNames" . | fromYamlArray) (int $settings.days) $authority }}
{{- $made = dict "ca" ($authority.Cert | b64enc) "crt" ($cert.Cert | b64enc) "key" ($cert.Key | b64enc) "expires" (toString (add $now (mul $settings.days 86400))) }}
{{- end }}
{{- $_ := set .Values "madeAdmissionCertificate" $made }}
{{- end }}
{{- toJson .Values.madeAdmissionCertificate }}
{{- end }}

{{/* The watcher's Pod template, for the Deployment and the shards' StatefulSet alike. */}}
{{- define "crashwatch.podTemplate" -}}
metadata:
  labels:
    {{- include "crashwatch.selectorLabels" . | nindent 4 }}
    {{- with .shardSet }}
    app.kubernetes.io/component: {{ . | quote }}
    {{- end }}
    {{- with .Values.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with .Values.podAnnotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
spec:
  serviceAccountName: {{ include "crashwatch.serviceAccountName" . }}
  {{- with .Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.priorityClassName }}
  priorityClassName: {{ . }}
  {{- end }}
  affinity:
    {{- if .Values.affinity }}
    {{- toYaml .Values.affinity | nindent 4 }}
    {{- else }}
    podAntiAffinity:
      preferredDuringSchedulingIgnoredDuringExecution:
        - weight: 100
          podAffinityTerm:
            topologyKey: kubernetes.io/hostname
            labelSelector:
              matchLabels:
                {{- include "crashwatch.selectorLabels" . | nindent 16 }}
    {{- end }}
  {{- with .Values.topologySpreadConstraints }}
  topologySpreadConstraints:
    {{- range . }}
    - {{ toYaml (merge (deepCopy .) (dict "labelSelector" (dict "matchLabels" (include "crashwatch.selectorLabels" $ | fromYaml)))) | nindent 6 | trim }}
    {{- end }}
  {{- end }}
  {{- with .Values.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- if .Values.hostNetwork }}
  # the node's network: the Pod reaches what listens on the node (an API server on its loopback) and
  # the Service names still resolve through the cluster's DNS
  hostNetwork: true
  dnsPolicy: ClusterFirstWithHostNet
  {{- end }}
  terminationGracePeriodSeconds: {{ .Values.terminationGracePeriodSeconds }}
  securityContext:
    {{- toYaml .Values.podSecurityContext | nindent 4 }}
  containers:
    - name: crashwatch
      image: "{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}"
      imagePullPolicy: {{ .Values.image.pullPolicy }}
      {{- if or .Values.shards.enabled .Values.extraEnv }}
      env:
        {{- if .Values.shards.enabled }}
        - name: SHARD_INDEX
          valueFrom:
            fieldRef:
              fieldPath: metadata.labels['apps.kubernetes.io/pod-index']
        {{- end }}
        {{- with .Values.extraEnv }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- end }}
      args:
        - run
        {{- range .Values.namespaces }}
        - --namespace
        - {{ . | quote }}
        {{- else }}
        - --all-namespaces
        {{- end }}
        - --output
        - json
        - --log-format
        - {{ .Values.logFormat }}
        - --http-address
        {{- $host := .Values.http.host }}
        - {{ printf "%s:%d" (ternary (printf "[%s]" $host) $host (contains ":" $host)) (int .Values.http.port) | quote }}
        {{- if and .Values.events .Values.eventLogs }}
        - --event-logs
        {{- end }}
        {{- if not .Values.events }}
        - --events=false
        {{- end }}
        {{- if not .Values.readCauses }}
        - --read-causes=false
        {{- end }}
        {{- if .Values.shards.enabled }}
        - --shard-index
        - $(SHARD_INDEX)
        - --shard-count
        - {{ .Values.shards.count | quote }}
        {{- end }}
        {{- if .Values.leaderElection.enabled }}
        - --leader-elect
        - --leader-election-id
        - {{ include "crashwatch.fullname" . }}
        - --leader-elect-lease-duration
        - {{ .Values.leaderElection.leaseDuration }}
        - --leader-elect-renew-deadline
        - {{ .Values.leaderElection.renewDeadline }}
        - --leader-elect-retry-period
        - {{ .Values.leaderElection.retryPeriod }}
        {{- end }}
        {{- if .Values.admission.enabled }}
        - --admission-address
        - {{ printf ":%d" (int .Values.admission.port) | quote }}
        - --tls-cert-file
        - /etc/crashwatch/admission/tls.crt
        - --tls-private-key-file
        - /etc/crashwatch/admission/tls.key
        - --admission-wait
        - {{ .Values.admission.wait }}
        # checked against what the Pod serves: a caBundle that does not sign it is said, not silent
        - --admission-configuration
        - {{ include "crashwatch.admissionConfiguration" . }}
        {{- if .Values.admission.clientCA }}
        - --tls-client-ca-file
        - /etc/crashwatch/admission-client-ca/ca.crt
        {{- end }}
        {{- end }}
        {{- range .Values.extraArgs }}
        - {{ . | quote }}
        {{- end }}
      ports:
        - name: http
          containerPort: {{ .Values.http.port }}
        {{- if .Values.admission.enabled }}
        - name: admission
          containerPort: {{ .Values.admission.port }}
        {{- end }}
      {{- if .Values.admission.enabled }}
      volumeMounts:
        - name: admission
          mountPath: /etc/crashwatch/admission
          readOnly: true
        {{- if .Values.admission.clientCA }}
        - name: admission-client-ca
          mountPath: /etc/crashwatch/admission-client-ca
          readOnly: true
        {{- end }}
      {{- end }}
      # ready once every watch has listed, leader or not; alive while the process answers
      readinessProbe:
        httpGet:
          path: /readyz
          port: http
          {{- with .Values.http.host }}
          host: {{ . | quote }}
          {{- end }}
        periodSeconds: 5
      livenessProbe:
        httpGet:
          path: /healthz
          port: http
          {{- with .Values.http.host }}
          host: {{ . | quote }}
          {{- end }}
        periodSeconds: 20
        failureThreshold: 3
      resources:
        {{- toYaml .Values.resources | nindent 8 }}
      securityContext:
        {{- toYaml .Values.securityContext | nindent 8 }}
  {{- if .Values.admission.enabled }}
  # the certificate's files are read again when they change (a renewal, a new render): no restart needed
  volumes:
    - name: admission
      secret:
        secretName: {{ if eq .Values.admission.certificate.source "secret" }}{{ .Values.admission.certificate.secretName }}{{ else }}{{ include "crashwatch.fullname" . }}-admission{{ end }}
    {{- if .Values.admission.clientCA }}
    - name: admission-client-ca
      configMap:
        name: {{ include "crashwatch.fullname" . }}-admission-client-ca
    {{- end }}
  {{- end }}
{{- end }}

{{/* What the watcher reads and writes in the namespaces it watches: a ClusterRole's rules (every
namespace) or each watched namespace's Role's. */}}
{{- define "crashwatch.watchRules" -}}
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list", "watch"]
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["list", "watch"]
- apiGroups: ["nvidia.com"]
  resources: ["dynamographdeployments", "dynamocomponentdeployments"]
  verbs: ["get", "list", "watch"]
{{- if .Values.rbac.leaderWorkerSets }}
- apiGroups: ["leaderworkerset.x-k8s.io"]
  resources: ["leaderworkersets"]
  verbs: ["list", "watch"]
{{- end }}
- apiGroups: ["nvidia.com"]
  resources: ["dynamographdeployments/status", "dynamocomponentdeployments/status"]
  verbs: ["patch"]
{{- if .Values.events }}
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- end }}
{{- /* one grant for the crashed runs' output: the causes (readCauses) and --event-logs' last lines */}}
{{- if or .Values.readCauses (and .Values.events .Values.eventLogs) }}
- apiGroups: [""]
  resources: ["pods", "pods/log"]
  verbs: ["get"]
{{- end }}
{{- end }}
