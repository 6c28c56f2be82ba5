{{/*
Labels on every object: the app name config/default uses, and Helm's own,
so `helm ls` and label queries find what the release installed.
*/}}
{{- define "svm.labels" -}}
app.kubernetes.io/name: svm
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{/*
The controller's pods: the same two labels as config/manager, and nothing
that varies by release, since a Deployment's selector is immutable and a
cluster moving from the kustomize manifests to the chart keeps its pods.
*/}}
{{- define "svm.selectorLabels" -}}
app.kubernetes.io/name: svm
app.kubernetes.io/component: controller
{{- end }}

{{- define "svm.controllerLabels" -}}
{{ include "svm.labels" . }}
app.kubernetes.io/component: controller
{{- end }}

{{- define "svm.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end }}
