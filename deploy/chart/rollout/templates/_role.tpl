{{/*
One role as a Deployment running `rollout ARGS...` in the platform's image.
Called with a dict: root (the chart context), component, args, replicas, resources, and
optionally port (an HTTP port: probes on `probePath`, else TCP), probePath, waitForRun (an
init container that waits until the release's run exists), extraEnv.
*/}}
{{- define "rollout.roleDeployment" -}}
{{- $root := .root -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ include "rollout.fullname" $root }}-{{ .component }}
  labels:
    {{- include "rollout.labels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ .component }}
spec:
  replicas: {{ .replicas | default 1 }}
  selector:
    matchLabels:
      {{- include "rollout.selectorLabels" $root | nindent 6 }}
      app.kubernetes.io/component: {{ .component }}
  template:
    metadata:
      labels:
        {{- include "rollout.selectorLabels" $root | nindent 8 }}
        app.kubernetes.io/component: {{ .component }}
    spec:
      {{- include "rollout.podSpec" $root | nindent 6 }}
      {{- if .waitForRun }}
      initContainers:
        - name: wait-for-run
          image: {{ include "rollout.image" $root }}
          imagePullPolicy: {{ $root.Values.image.pullPolicy }}
          securityContext:
            {{- toYaml $root.Values.containerSecurityContext | nindent 12 }}
          command: ["sh", "-c"]
          args:
            - until rollout runs show "$RUN" >/dev/null 2>&1; do echo "waiting for run $RUN"; sleep 10; done
          env:
            {{- include "rollout.env" $root | nindent 12 }}
            - name: RUN
              value: {{ $root.Values.run | quote }}
          resources:
            {{- toYaml $root.Values.presetsJob.resources | nindent 12 }}
          volumeMounts:
            {{- include "rollout.stateMount" $root | nindent 12 }}
      {{- end }}
      containers:
        - name: {{ .component }}
          image: {{ include "rollout.image" $root }}
          imagePullPolicy: {{ $root.Values.image.pullPolicy }}
          securityContext:
            {{- toYaml $root.Values.containerSecurityContext | nindent 12 }}
          args:
            {{- toYaml .args | nindent 12 }}
          env:
            {{- include "rollout.env" $root | nindent 12 }}
            {{- with .extraEnv }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          {{- if .port }}
          ports:
            - name: http
              containerPort: {{ .port }}
          readinessProbe:
            {{- if .probePath }}
            httpGet:
              path: {{ .probePath }}
              port: http
            {{- else }}
            tcpSocket:
              port: http
            {{- end }}
            periodSeconds: 5
            timeoutSeconds: 5
          livenessProbe:
            {{- if .probePath }}
            httpGet:
              path: {{ .probePath }}
              port: http
            {{- else }}
            tcpSocket:
              port: http
            {{- end }}
            initialDelaySeconds: 60
            periodSeconds: 15
            timeoutSeconds: 5
            failureThreshold: 6
          {{- else }}
          readinessProbe:
            {{- include "rollout.ledgerProbe" $root | nindent 12 }}
          livenessProbe:
            {{- include "rollout.ledgerProbe" $root | nindent 12 }}
          {{- end }}
          resources:
            {{- toYaml .resources | nindent 12 }}
          volumeMounts:
            {{- include "rollout.stateMount" $root | nindent 12 }}
{{- end -}}

{{/* A Service in front of a role's HTTP port. */}}
{{- define "rollout.roleService" -}}
apiVersion: v1
kind: Service
metadata:
  name: {{ include "rollout.fullname" .root }}-{{ .component }}
  labels:
    {{- include "rollout.labels" .root | nindent 4 }}
    app.kubernetes.io/component: {{ .component }}
spec:
  type: {{ .type | default "ClusterIP" }}
  selector:
    {{- include "rollout.selectorLabels" .root | nindent 4 }}
    app.kubernetes.io/component: {{ .component }}
  ports:
    - name: http
      port: {{ .port }}
      targetPort: http
{{- end -}}
