{{/* The chart's name: nameOverride, else `karpenter`. */}}
{{- define "karpenter.name" -}}
{{- .Values.nameOverride | default .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Object names: fullnameOverride; else the release name when it already holds the chart's
name; else `<release>-<name>`. At most 63 characters. */}}
{{- define "karpenter.fullname" -}}
{{- $name := .Values.nameOverride | default .Chart.Name -}}
{{- $full := printf "%s-%s" .Release.Name $name -}}
{{- if .Values.fullnameOverride -}}
{{- $full = .Values.fullnameOverride -}}
{{- else if contains $name .Release.Name -}}
{{- $full = .Release.Name -}}
{{- end -}}
{{- $full | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The labels that select the controller's pods. */}}
{{- define "karpenter.selectorLabels" -}}
app.kubernetes.io/name: {{ include "karpenter.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Labels of every object. */}}
{{- define "karpenter.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "karpenter.selectorLabels" . }}
{{- with .Chart.AppVersion }}
app.kubernetes.io/version: {{ . | quote }}
{{- end }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.additionalLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The ServiceAccount the controller runs as. */}}
{{- define "karpenter.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- .Values.serviceAccount.name | default (include "karpenter.fullname" .) -}}
{{- else -}}
{{- .Values.serviceAccount.name | default "default" -}}
{{- end -}}
{{- end -}}

{{/* repository:tag[@digest]; the tag defaults to the chart's appVersion. */}}
{{- define "karpenter.controller.image" -}}
{{- $img := .Values.controller.image -}}
{{- $ref := printf "%s:%s" $img.repository ($img.tag | default .Chart.AppVersion | toString) -}}
{{- with $img.digest -}}
{{- $ref = printf "%s@%s" $ref . -}}
{{- end -}}
{{- $ref -}}
{{- end -}}

{{- define "karpenter.controller.containerName" -}}
{{- .Values.controller.containerName | default "controller" -}}
{{- end -}}

{{/* metadata.annotations from additionalAnnotations and any more given as `extra`. */}}
{{- define "karpenter.annotations" -}}
{{- $all := merge (dict) (.extra | default dict) (.root.Values.additionalAnnotations | default dict) -}}
{{- with $all -}}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end -}}
{{- end -}}

{{/* A deep copy of `terms` in which every item without a labelSelector (found at `key`, or the
item itself when `key` is empty) gets one matching the controller's pods. */}}
{{- define "karpenter.withSelectors" -}}
{{- $selector := dict "matchLabels" (include "karpenter.selectorLabels" .root | fromYaml) -}}
{{- $out := list -}}
{{- range $item := deepCopy (.terms | default list) -}}
{{- $target := $item -}}
{{- if $.key -}}{{- $target = get $item $.key -}}{{- end -}}
{{- if not (hasKey $target "labelSelector") -}}
{{- $_ := set $target "labelSelector" $selector -}}
{{- end -}}
{{- $out = append $out $item -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}

{{/* The pods' affinity with selectors filled into pod (anti-)affinity terms. */}}
{{- define "karpenter.affinity" -}}
{{- $affinity := deepCopy .Values.affinity -}}
{{- range $kind := list "podAffinity" "podAntiAffinity" -}}
{{- with get $affinity $kind -}}
{{- $terms := . -}}
{{- with .requiredDuringSchedulingIgnoredDuringExecution -}}
{{- $_ := set $terms "requiredDuringSchedulingIgnoredDuringExecution" (include "karpenter.withSelectors" (dict "root" $ "terms" . "key" "") | fromYamlArray) -}}
{{- end -}}
{{- with .preferredDuringSchedulingIgnoredDuringExecution -}}
{{- $_ := set $terms "preferredDuringSchedulingIgnoredDuringExecution" (include "karpenter.withSelectors" (dict "root" $ "terms" . "key" "podAffinityTerm") | fromYamlArray) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- toYaml $affinity -}}
{{- end -}}

{{/* FEATURE_GATES as upstream's chart writes it: every gate, `Name=value`, comma-separated. */}}
{{- define "karpenter.featureGates" -}}
{{- $g := .Values.settings.featureGates -}}
{{- $pairs := list -}}
{{- range $name, $key := dict "ReservedCapacity" "reservedCapacity" "SpotToSpotConsolidation" "spotToSpotConsolidation" "NodeRepair" "nodeRepair" "NodeOverlay" "nodeOverlay" "StaticCapacity" "staticCapacity" "CapacityBuffer" "capacityBuffer" -}}
{{- $pairs = append $pairs (printf "%s=%v" $name (get $g $key)) -}}
{{- end -}}
{{- join "," $pairs -}}
{{- end -}}
