{{- /* SPDX-License-Identifier: Apache-2.0 */ -}}
{{/* Names and labels shared by every template. */}}

{{- /* The chart's name, or nameOverride. */ -}}
{{- define "portal.name" -}}
{{- .Values.nameOverride | default .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}

{{- /* Every object's name prefix (50 characters: room for -imex-runner and the pod suffix). */ -}}
{{- define "portal.fullname" -}}
{{- $name := include "portal.name" . -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" -}}
{{- else if contains $name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "portal.labels" -}}
app.kubernetes.io/name: {{ include "portal.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "portal.selector" -}}
app.kubernetes.io/name: {{ include "portal.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "portal.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- /* The node DaemonSets' image: agent.image where set, else the portal's. */ -}}
{{- define "portal.agentImage" -}}
{{ .Values.agent.image.repository | default .Values.image.repository }}:{{ .Values.agent.image.tag | default .Values.image.tag | default .Chart.AppVersion }}
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
{{- with .Values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
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

{{/* The pod spec both GPU-node DaemonSets share (agent and IMEX runner): dict "root" and
"tolerations" (the agent's, or the runner's). */}}
{{- define "portal.gpuNodePod" -}}
{{- $root := .root -}}
hostNetwork: true
dnsPolicy: ClusterFirstWithHostNet
{{- with $root.Values.agent.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with $root.Values.agent.runtimeClassName }}
runtimeClassName: {{ . }}
{{- end }}
{{- with $root.Values.imagePullSecrets }}
imagePullSecrets: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $root.Values.agent.nodeSelector }}
nodeSelector: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $root.Values.agent.affinity }}
affinity: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .tolerations }}
tolerations: {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* What the NVIDIA container runtime reads: every GPU, the driver's utilities (NVML). */}}
{{- define "portal.nvidiaEnv" -}}
- {name: NVIDIA_VISIBLE_DEVICES, value: all}
- {name: NVIDIA_DRIVER_CAPABILITIES, value: utility}
{{- end -}}

{{- /* ALLOWED_HOSTS: the configured names, localhost and the web Service's names. */ -}}
{{- define "portal.allowedHosts" -}}
{{- $name := include "portal.fullname" . -}}
{{- $service := list (printf "%s-web" $name) (printf "%s-web.%s.svc" $name .Release.Namespace) (include "portal.webHost" .) -}}
{{- join "," (concat .Values.allowedHosts (list "localhost") $service) -}}
{{- end -}}
