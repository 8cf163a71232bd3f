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
{{- $host := .Values.listenHost | default "0.0.0.0" -}}
{{- if contains ":" $host -}}{{- $host = printf "[%s]" $host -}}{{- end -}}
{{- $listen := dict "xds" (printf "%s:%v" $host .Values.ports.xds) "extproc" (printf "%s:%v" $host .Values.ports.extproc) "admin" (printf "%s:%v" $host .Values.ports.admin) -}}
{{- $_ := set $cfg "listen" $listen -}}
{{- /* Several replicas share their state through the API server (a Lease
and ConfigMaps in the release's namespace) unless the configuration has
an ha: section of its own. */ -}}
{{- if and (gt (int .Values.replicaCount) 1) (not (hasKey $cfg "ha")) -}}
{{- $_ := set $cfg "ha" (dict "kubernetes" dict) -}}
{{- end -}}
{{- $ha := get $cfg "ha" | default dict -}}
{{- if hasKey $ha "kubernetes" -}}
{{- $k := get $ha "kubernetes" | default dict -}}
{{- if not (get $k "namespace") -}}{{- $_ := set $k "namespace" .Release.Namespace -}}{{- end -}}
{{- if not (get $k "lease") -}}{{- $_ := set $k "lease" (include "ilb.fullname" .) -}}{{- end -}}
{{- $_ := set $ha "kubernetes" $k -}}
{{- end -}}
{{- /* Token budgets are split between the replicas (each enforces
budget / budget_split) unless the configuration sets the split. */ -}}
{{- $ten := get $cfg "tenants" | default dict -}}
{{- if and (get $ten "budgets") (not (hasKey $ten "budget_split")) -}}
{{- $_ := set $ten "budget_split" (int .Values.replicaCount) -}}
{{- $_ := set $cfg "tenants" $ten -}}
{{- end -}}
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

{{/* What Kubernetes discovery needs read access to, from the
configuration: "slices" and/or "pools" (a list, possibly empty). */}}
{{- define "ilb.discoveryKinds" -}}
{{- $cfg := include "ilb.config" . | fromYaml -}}
{{- $kinds := list -}}
{{- range $c := (get $cfg "clusters" | default list) -}}
{{- $d := get $c "discovery" | default dict -}}
{{- $k := get $d "kubernetes" | default dict -}}
{{- if and (eq (toString (get $d "type")) "kubernetes") (get $k "service") -}}{{- $kinds = append $kinds "slices" -}}{{- end -}}
{{- if and (eq (toString (get $d "type")) "kubernetes") (get $k "inference_pool") -}}{{- $kinds = append $kinds "pools" -}}{{- end -}}
{{- end -}}
{{- toYaml (uniq $kinds) -}}
{{- end -}}

{{/* The scheme of the admin port's probes: HTTPS when the configuration
serves the admin API over TLS. */}}
{{- define "ilb.adminScheme" -}}
{{- $cfg := include "ilb.config" . | fromYaml -}}
{{- if ((get $cfg "security" | default dict).admin | default dict).tls -}}HTTPS{{- else -}}HTTP{{- end -}}
{{- end -}}

{{/* The namespace of the HA Lease and ConfigMaps when the configuration
keeps its HA group in Kubernetes (ha.kubernetes), else empty. */}}
{{- define "ilb.haNamespace" -}}
{{- $cfg := include "ilb.config" . | fromYaml -}}
{{- ((get $cfg "ha" | default dict).kubernetes | default dict).namespace | default "" -}}
{{- end -}}

{{/* The ports of the endpoint pickers' listeners (sources with routing
"picker": sources[].picker.listen), a list of numbers in source order. */}}
{{- define "ilb.pickerPorts" -}}
{{- $cfg := include "ilb.config" . | fromYaml -}}
{{- $ports := list -}}
{{- range $s := (get $cfg "sources" | default list) -}}
{{- with (get $s "picker") -}}
{{- $ports = append $ports (int (last (splitList ":" (toString .listen)))) -}}
{{- end -}}
{{- end -}}
{{- toYaml $ports -}}
{{- end -}}
