{{- define "sample-operator.labels" -}}
app.kubernetes.io/name: sample-operator
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "sample-operator.selectorLabels" -}}
app.kubernetes.io/name: sample-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "sample-operator.fullname" -}}
{{- if eq .Release.Name "sample-operator" }}sample-operator{{ else }}{{ printf "%s-sample-operator" .Release.Name | trunc 63 | trimSuffix "-" }}{{ end }}
{{- end }}
