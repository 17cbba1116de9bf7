{{/* Names and labels shared by every template. */}}
{{- define "grove-temporal.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "grove-temporal.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "grove-temporal.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name: name an existing ServiceAccount when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "grove-temporal.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: worker
{{- end -}}

{{- define "grove-temporal.labels" -}}
{{ include "grove-temporal.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The rules of a document in files/ (symlinks to deploy/clusterrole.yaml and deploy/role.yaml: one source). */}}
{{- define "grove-temporal.rulesOf" -}}
{{- $first := index (regexSplit "(?m)^---\\s*$" (.Files.Get .file) -1) 0 -}}
{{- toYaml (fromYaml $first).rules -}}
{{- end -}}

{{- define "grove-temporal.apiKeySecret" -}}
{{- if .Values.temporal.apiKey.existingSecret -}}
{{- .Values.temporal.apiKey.existingSecret -}}
{{- else if .Values.temporal.apiKey.value -}}
{{- printf "%s-temporal-api-key" (include "grove-temporal.fullname" .) -}}
{{- end -}}
{{- end -}}
