{{/* Chart name, truncated to the 63 characters of a DNS label. */}}
{{- define "mrguard.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Base name of every object. Kept at 50 characters so that the derived names
("<fullname>-leader", "<fullname>-audit", "<fullname>-tls") stay within 63.
*/}}
{{- define "mrguard.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "mrguard.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "mrguard.selectorLabels" -}}
app.kubernetes.io/name: {{ include "mrguard.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "mrguard.labels" -}}
helm.sh/chart: {{ include "mrguard.chart" . }}
{{ include "mrguard.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: mrguard
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "mrguard.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "mrguard.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* Names the controller is told about; RBAC restricts itself to them. */}}
{{- define "mrguard.tlsSecretName" -}}
{{- printf "%s-tls" (include "mrguard.fullname" .) }}
{{- end }}

{{- define "mrguard.leaseName" -}}
{{- printf "%s-leader" (include "mrguard.fullname" .) }}
{{- end }}

{{- define "mrguard.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}
{{- end }}

{{/*
The namespaceSelector of both webhooks: never kube-system, never the
release namespace (mrguard must not gate its own recovery), plus any
namespace listed in values.
*/}}
{{- define "mrguard.namespaceSelector" -}}
{{- $excluded := concat (list "kube-system" .Release.Namespace) .Values.webhooks.excludeNamespaces | uniq -}}
matchExpressions:
  - key: kubernetes.io/metadata.name
    operator: NotIn
    values:
      {{- toYaml $excluded | nindent 6 }}
  {{- with .Values.webhooks.namespaceSelector.matchExpressions }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- with .Values.webhooks.namespaceSelector.matchLabels }}
matchLabels:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/*
The live webhook named .webhook inside the live configuration (.kind,
.name), as JSON; "{}" when absent or when rendering offline (helm
template, --dry-run=client), where lookup returns nothing.
*/}}
{{- define "mrguard.liveWebhook" -}}
{{- $found := dict }}
{{- $obj := lookup "admissionregistration.k8s.io/v1" .kind "" .name }}
{{- if $obj }}
{{- range ($obj.webhooks | default list) }}
{{- if eq .name $.webhook }}
{{- $found = . }}
{{- end }}
{{- end }}
{{- end }}
{{- toJson $found }}
{{- end }}

{{/*
caBundle and rules of one webhook, as JSON {"caBundle": "...", "rules": [...]}.
The controller owns both after install (server-side apply, field manager
"mrguard"); an upgrade carries the live values over so that it never leaves a
wrong CA or empty rules. On first install there is no caBundle, and the rules
come from values (webhooks.initialRules).
*/}}
{{- define "mrguard.webhookOwnedFields" -}}
{{- $live := include "mrguard.liveWebhook" . | fromJson }}
{{- $caBundle := "" }}
{{- with $live.clientConfig }}
{{- $caBundle = .caBundle | default "" }}
{{- end }}
{{- $rules := $live.rules | default .initialRules | default list }}
{{- toJson (dict "caBundle" $caBundle "rules" $rules) }}
{{- end }}

{{/*
Seconds in a duration as `mrguard serve` reads it (500ms, 30s, 10m, 1h; a
bare number is seconds), printed as a plain number for PromQL.
*/}}
{{- define "mrguard.durationSeconds" -}}
{{- $s := toString . | trim }}
{{- $num := regexFind "^[0-9]+(\\.[0-9]+)?" $s }}
{{- $unit := trimPrefix $num $s | default "s" }}
{{- $factors := dict "ms" 0.001 "s" 1.0 "m" 60.0 "h" 3600.0 }}
{{- if or (not $num) (not (hasKey $factors $unit)) }}
{{- fail (printf "%q is not a duration like 500ms, 30s, 10m or 1h" $s) }}
{{- end }}
{{- mulf (float64 $num) (get $factors $unit) }}
{{- end }}

{{/* Labels and annotations of one alert (.alert, .severity, .summary, .description, .base, .extra). */}}
{{- define "mrguard.alertMeta" -}}
labels:
  severity: {{ .severity }}
  {{- with .extra }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
annotations:
  summary: {{ .summary | quote }}
  description: {{ .description | quote }}
  runbook: {{ printf "docs/troubleshooting.md#%s" (lower .alert) | quote }}
  {{- with .base }}
  runbook_url: {{ printf "%s#%s" . (lower $.alert) | quote }}
  {{- end }}
{{- end }}

{{- /*
CEL that is true when the request's user matches one of the configuration's
exemptUsernames globs ('*' any run of characters, '?' one character), or ""
when there are none. Each glob becomes an anchored regular expression. The
API server leaves an empty username out of `request` (omitempty), and reading
an absent field is an error, hence the has().
*/}}
{{- define "mrguard.exemptUserCel" -}}
{{- $terms := list }}
{{- range (.Values.config.exemptUsernames | default list) }}
{{- if or (contains "'" .) (contains "\\" .) }}
{{- fail (printf "webhooks.matchConditions: exemptUsernames glob %q contains a quote or a backslash, which the chart cannot put in a CEL expression" .) }}
{{- end }}
{{- $re := printf "^%s$" (regexQuoteMeta . | replace "\\*" ".*" | replace "\\?" ".") }}
{{- $terms = append $terms (printf "request.userInfo.username.matches('%s')" ($re | replace "\\" "\\\\")) }}
{{- end }}
{{- if $terms }}
{{- printf "has(request.userInfo.username) && (%s)" (join " || " $terms) }}
{{- end }}
{{- end }}

{{- /*
"true" when the webhooks carry matchConditions (webhooks.matchConditions.enabled).
*/}}
{{- define "mrguard.matchConditionsOn" -}}
{{- if .Values.webhooks.matchConditions.enabled }}true{{ end }}
{{- end }}

{{- /*
matchConditions of a webhook (.hook: "mutating" or "validating") when they
are on (mrguard.matchConditionsOn):
- is-managed-resource: the object (the old one on DELETE) has
  spec.forProvider. mrguard allows anything else untouched and silently
  (SPEC section 1), so the API server need not call it. Presence only: an
  object whose forProvider is not an object still reaches the webhook, which
  is the safe direction.
- when exemptUsernames is not empty, exempt users' writes never reach the
  webhook. The validating webhook still sees their DELETEs, so
  deletion-protection and paused-delete hold for everyone.
*/}}
{{- define "mrguard.matchConditions" -}}
{{- if include "mrguard.matchConditionsOn" .root }}
{{- $exempt := include "mrguard.exemptUserCel" .root }}
{{- $mr := "object != null && has(object.spec) && has(object.spec.forProvider)" }}
matchConditions:
{{- if eq .hook "validating" }}
  - name: is-managed-resource
    expression: {{ printf "request.operation == 'DELETE' ? (oldObject != null && has(oldObject.spec) && has(oldObject.spec.forProvider)) : (%s)" $mr | quote }}
{{- if $exempt }}
  - name: not-exempt-user-or-delete
    expression: {{ printf "request.operation == 'DELETE' || !(%s)" $exempt | quote }}
{{- end }}
{{- else }}
  - name: is-managed-resource
    expression: {{ $mr | quote }}
{{- if $exempt }}
  - name: not-exempt-user
    expression: {{ printf "!(%s)" $exempt | quote }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{- /*
admission.inProcess as "auto" or "off": an unquoted `off` in a values file
is YAML 1.1's false, which means off too.
*/}}
{{- define "mrguard.inProcess" -}}
{{- $v := .Values.admission.inProcess -}}
{{- if or (eq (toString $v) "false") (eq (toString $v) "off") -}}off
{{- else if eq (toString $v) "auto" -}}auto
{{- else -}}
{{- fail (printf "admission.inProcess must be auto or off, not %v" $v) -}}
{{- end -}}
{{- end }}

{{- /*
The failurePolicy of validate.mrguard.io: webhooks.validating.failurePolicy
when set; empty means by mode: Ignore with admission.inProcess auto (the
rules that must never be skipped then run in the API server), Fail with off.
*/}}
{{- define "mrguard.validatingFailurePolicy" -}}
{{- .Values.webhooks.validating.failurePolicy | default (ternary "Ignore" "Fail" (eq (include "mrguard.inProcess" .) "auto")) -}}
{{- end }}
