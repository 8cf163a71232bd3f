{{/* The release's full name, at most 63 characters. */}}
{{- define "ilb.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "ilb.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "ilb.labels" -}}
{{ include "ilb.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "ilb.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "ilb.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The namespaces ILB reads replicas in. */}}
{{- define "ilb.watchNamespaces" -}}
{{- if .Values.rbac.namespaces -}}
{{- toYaml .Values.rbac.namespaces -}}
{{- else -}}
{{- toYaml (list .Release.Namespace) -}}
{{- end -}}
{{- end -}}

{{/* ILB's configuration: configYAML or config, templated (the release's
namespace may appear), with listen: set to the chart's ports. */}}
{{- define "ilb.config" -}}
{{- $cfg := dict -}}
{{- if .Values.configYAML -}}
{{- $cfg = tpl .Values.configYAML . | fromYaml -}}
{{- if hasKey $cfg "Error" -}}
{{- fail (printf "configYAML is not YAML: %s" (get $cfg "Error")) -}}
{{- end -}}
{{- else -}}
{{- $cfg = tpl (toYaml .Values.config) . | fromYaml -}}
{{- end -}}
{{- $listen := dict "xds" (printf "0.0.0.0:%v" .Values.ports.xds) "extproc" (printf "0.0.0.0:%v" .Values.ports.extproc) "admin" (printf "0.0.0.0:%v" .Values.ports.admin) -}}
{{- $_ := set $cfg "listen" $listen -}}
{{- $sec := get $cfg "security" | default dict -}}
{{- $adm := get $sec "admin" | default dict -}}
{{- if not (or (get $adm "tls") (get $adm "token_file")) -}}
{{- $_ := set $adm "token_file" "/etc/ilb/admin/token" -}}
{{- $_ := set $sec "admin" $adm -}}
{{- $_ := set $cfg "security" $sec -}}
{{- end -}}
{{- toYaml $cfg -}}
{{- end -}}

{{/* The Secret holding the admin API's token (key "token"). */}}
{{- define "ilb.adminSecret" -}}
{{- default (printf "%s-admin" (include "ilb.fullname" .)) .Values.adminToken.existingSecret -}}
{{- end -}}
