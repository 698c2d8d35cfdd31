{{/* Names and labels. */}}
{{- define "rollout.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "rollout.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "rollout.labels" -}}
{{ include "rollout.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "rollout.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The selected preset, parsed; fails the render when it is not in files/presets. */}}
{{- define "rollout.preset" -}}
{{- $body := .Files.Get (printf "files/presets/%s.yaml" .Values.preset) -}}
{{- if not $body -}}
{{- fail (printf "preset %q: no files/presets/%s.yaml in the chart" .Values.preset .Values.preset) -}}
{{- end -}}
{{- $body -}}
{{- end -}}

{{/* GPUs of each GPU role (trainer, inference): the preset's `gpus`, else 1 on cuda, else 0.
     The same rule as rollout.launch.ray.role_gpus. */}}
{{- define "rollout.roleGpus" -}}
{{- $preset := include "rollout.preset" . | fromYaml -}}
{{- if hasKey $preset "gpus" -}}
{{- if kindIs "invalid" $preset.gpus -}}{{- if hasPrefix "cuda" (toString $preset.device) -}}1{{- else -}}0{{- end -}}
{{- else -}}{{- $preset.gpus -}}{{- end -}}
{{- else if hasPrefix "cuda" (toString (default "cpu" $preset.device)) -}}1
{{- else -}}0
{{- end -}}
{{- end -}}

{{/* Whole GPUs one Ray worker requests: both GPU roles, rounded up. */}}
{{- define "rollout.workerGpus" -}}
{{- include "rollout.roleGpus" . | float64 | mulf 2.0 | ceil | int -}}
{{- end -}}

{{- define "rollout.databaseSecret" -}}
{{- if .Values.postgres.enabled -}}
{{ include "rollout.fullname" . }}-ledger
{{- else -}}
{{- required "externalDatabase.existingSecret is required when postgres.enabled is false" .Values.externalDatabase.existingSecret -}}
{{- end -}}
{{- end -}}

{{- define "rollout.databaseKey" -}}
{{- if .Values.postgres.enabled -}}database-url{{- else -}}{{ .Values.externalDatabase.key }}{{- end -}}
{{- end -}}

{{/* The environment of every rollout container: the ledger, the state folder, the blobs. */}}
{{- define "rollout.env" -}}
- name: ROLLOUT_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "rollout.databaseSecret" . }}
      key: {{ include "rollout.databaseKey" . }}
- name: ROLLOUT_STATE_DIR
  value: {{ .Values.state.mountPath | quote }}
{{- with .Values.blobs.url }}
- name: ROLLOUT_BLOB_URL
  value: {{ . | quote }}
{{- end }}
{{- with .Values.blobs.endpoint }}
- name: AWS_ENDPOINT_URL
  value: {{ . | quote }}
{{- end }}
{{- with .Values.blobs.region }}
- name: AWS_DEFAULT_REGION
  value: {{ . | quote }}
{{- end }}
{{- if .Values.blobs.credentialsSecret }}
- name: AWS_ACCESS_KEY_ID
  valueFrom:
    secretKeyRef:
      name: {{ .Values.blobs.credentialsSecret }}
      key: AWS_ACCESS_KEY_ID
- name: AWS_SECRET_ACCESS_KEY
  valueFrom:
    secretKeyRef:
      name: {{ .Values.blobs.credentialsSecret }}
      key: AWS_SECRET_ACCESS_KEY
{{- end }}
- name: POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
- name: PYTHONUNBUFFERED
  value: "1"
- name: RAY_AUTH_MODE
  value: disabled
{{- end -}}

{{- define "rollout.stateVolume" -}}
- name: state
  persistentVolumeClaim:
    claimName: {{ include "rollout.fullname" . }}-state
{{- end -}}

{{- define "rollout.stateMount" -}}
- name: state
  mountPath: {{ .Values.state.mountPath }}
{{- end -}}

{{/* A probe for roles without an HTTP port: the ledger answers. */}}
{{- define "rollout.ledgerProbe" -}}
exec:
  command:
    - python
    - -c
    - "import os, psycopg; psycopg.connect(os.environ['ROLLOUT_DATABASE_URL'], connect_timeout=5).close()"
periodSeconds: 30
timeoutSeconds: 10
failureThreshold: 10
{{- end -}}

{{- define "rollout.podSpec" -}}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
volumes:
  {{- include "rollout.stateVolume" . | nindent 2 }}
{{- end -}}
