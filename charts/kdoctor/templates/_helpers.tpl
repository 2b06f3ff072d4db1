{{/*
Labels Helm adds to every object's metadata, next to the labels of manifests/ (selectors and
pod templates keep only the latter, so an install made with kubectl can be taken over).
*/}}
{{- define "kdoctor.helmLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}

{{/* The one image. */}}
{{- define "kdoctor.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* The Service the default agent's Ingress routes to. */}}
{{- define "kdoctor.agentIngressService" -}}
{{- if .Values.feature.enableIPv4 }}kdoctor-agent-ipv4{{ else }}kdoctor-agent-ipv6{{ end }}
{{- end }}
