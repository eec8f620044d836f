{{- /* SPDX-License-Identifier: Apache-2.0 */ -}}
{{/* Names and labels shared by every template. */}}

{{- define "portal.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "portal.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "portal.selector" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "portal.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "portal.secretName" -}}
{{ .Values.existingSecret | default (include "portal.fullname" .) }}
{{- end -}}

{{- define "portal.webHost" -}}
{{ include "portal.fullname" . }}-web.{{ .Release.Namespace }}.svc.cluster.local
{{- end -}}

{{/* Environment of every portal process: config from the ConfigMap, secrets from the Secret. */}}
{{- define "portal.env" -}}
- name: SECRET_KEY
  valueFrom: {secretKeyRef: {name: {{ include "portal.secretName" . }}, key: SECRET_KEY}}
- name: DATABASE_URL
  valueFrom: {secretKeyRef: {name: {{ include "portal.secretName" . }}, key: DATABASE_URL}}
- name: REDIS_URL
  valueFrom: {secretKeyRef: {name: {{ include "portal.secretName" . }}, key: REDIS_URL}}
- name: PORTAL_AGENT_JOIN_TOKEN
  valueFrom: {secretKeyRef: {name: {{ include "portal.secretName" . }}, key: PORTAL_AGENT_JOIN_TOKEN, optional: true}}
{{- end -}}

{{- /* "true" when the chart's agents join with the shared join token, "" otherwise. */ -}}
{{- define "portal.agentJoinsWithToken" -}}
{{- if and .Values.agent.enabled (eq .Values.agent.auth.method "joinToken") }}true{{ end -}}
{{- end -}}

{{- /* "true" when the chart's agents join with their projected service-account token. */ -}}
{{- define "portal.agentJoinsWithServiceAccount" -}}
{{- if and .Values.agent.enabled (eq .Values.agent.auth.method "serviceAccountToken") }}true{{ end -}}
{{- end -}}

{{- define "portal.podDefaults" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.podSecurityContext }}
securityContext: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity: {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{- define "portal.containerSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
runAsUser: 10001
capabilities: {drop: [ALL]}
seccompProfile: {type: RuntimeDefault}
{{- end -}}

{{/* The pod spec both GPU-node DaemonSets share (agent and IMEX runner). */}}
{{- define "portal.gpuNodePod" -}}
{{- $root := . -}}
hostNetwork: true
dnsPolicy: ClusterFirstWithHostNet
priorityClassName: system-node-critical
{{- with $root.Values.agent.runtimeClassName }}
runtimeClassName: {{ . }}
{{- end }}
{{- with $root.Values.imagePullSecrets }}
imagePullSecrets: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $root.Values.agent.nodeSelector }}
nodeSelector: {{- toYaml . | nindent 2 }}
{{- end }}
affinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms:
        - matchExpressions:
            - {key: nvidia.com/gpu.clique, operator: Exists}
{{- with $root.Values.agent.tolerations }}
tolerations: {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* What the NVIDIA container runtime reads: every GPU, the driver's utilities (NVML). */}}
{{- define "portal.nvidiaEnv" -}}
- {name: NVIDIA_VISIBLE_DEVICES, value: all}
- {name: NVIDIA_DRIVER_CAPABILITIES, value: utility}
{{- end -}}

{{- define "portal.webProbe" -}}
exec:
  # Over the pod's loopback, a trusted proxy (PORTAL_TRUSTED_PROXIES), saying HTTPS: the
  # portal sends plain HTTP to HTTPS on every path, health checks included, and a
  # redirect would only tell that the process answers.
  command: [python, -c, "import sys, urllib.request as u; u.urlopen(u.Request('http://127.0.0.1:{{ .root.Values.web.port }}' + sys.argv[1], headers={'Host': 'localhost', 'X-Forwarded-Proto': 'https'}), timeout=4)", {{ .path }}]
{{- end }}
