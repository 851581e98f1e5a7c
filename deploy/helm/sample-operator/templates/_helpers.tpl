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

{{/* The image by digest when one is given, else by tag. */}}
{{- define "sample-operator.image" -}}
{{- if .Values.image.digest }}{{ printf "%s@%s" .Values.image.repository .Values.image.digest }}{{ else }}{{ printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}{{ end }}
{{- end }}

{{/* Checks of values that depend on each other, which values.schema.json cannot express. */}}
{{- define "sample-operator.validate" -}}
{{- if and (not .Values.rbac.clusterWide) (not .Values.watchNamespace) }}
{{- fail "rbac.clusterWide=false needs watchNamespace: a Role grants access in one namespace only" }}
{{- end }}
{{- if and (not .Values.rbac.clusterWide) (eq .Values.networkBackend "neutron") (not .Values.neutron.clusterId) }}
{{- fail "rbac.clusterWide=false with networkBackend=neutron needs neutron.clusterId: the default identity is read from the kube-system namespace, outside the Role" }}
{{- end }}
{{- $network := or (not .Values.controllers) (has "network" .Values.controllers) }}
{{- if and $network (not .Values.networkAddressPolicy.allowedPrefixes) (not .Values.networkAddressPolicy.anyPrefix) }}
{{- fail "networkAddressPolicy: state the prefixes tenants' Networks may use (allowedPrefixes, such as {192.168.0.0/16} for the seeds' example-network), or that any is allowed (anyPrefix=true)" }}
{{- end }}
{{- if and .Values.networkAddressPolicy.allowedPrefixes .Values.networkAddressPolicy.anyPrefix }}
{{- fail "networkAddressPolicy: allowedPrefixes and anyPrefix=true contradict each other: choose one" }}
{{- end }}
{{- if and .Values.metrics.serviceMonitor.enabled .Values.metrics.podMonitor.enabled }}
{{- fail "metrics.serviceMonitor.enabled and metrics.podMonitor.enabled: choose one, or every target is scraped twice" }}
{{- end }}
{{- with .Values.metrics }}
{{- if and .prometheusRule.enabled (not .prometheusRule.selector) (not .serviceMonitor.enabled) (not .podMonitor.enabled) }}
{{- fail "metrics.prometheusRule.enabled needs metrics.prometheusRule.selector, or a ServiceMonitor or PodMonitor whose job it can select" }}
{{- end }}
{{- end }}
{{- if and .Values.metrics.secure (not .Values.rbac.clusterWide) }}
{{- fail "metrics.secure needs rbac.clusterWide: the operator reviews scrapers' tokens with TokenReviews and SubjectAccessReviews, which only a ClusterRole grants; set metrics.secure=false (and restrict the port with networkPolicy.metricsFrom)" }}
{{- end }}
{{- if and .Values.metrics.secure .Values.metrics.podMonitor.enabled (not .Values.metrics.podMonitor.tokenSecret.name) }}
{{- fail "metrics.podMonitor.enabled with metrics.secure needs metrics.podMonitor.tokenSecret.name: a Secret with the token of a ServiceAccount in metrics.readers, which the PodMonitor sends" }}
{{- end }}
{{- with .Values.metrics }}
{{- if and .certSecret .certManager.issuer.name }}
{{- fail "metrics.certSecret and metrics.certManager.issuer.name: choose one source of the metrics certificate" }}
{{- end }}
{{- if and .secure (or .serviceMonitor.enabled .podMonitor.enabled) (not .certSecret) (not .certManager.issuer.name) (not .insecureSkipVerify) }}
{{- fail "metrics: a ServiceMonitor or PodMonitor would send Prometheus' token to a certificate it cannot verify; give one with metrics.certManager.issuer.name (cert-manager) or metrics.certSecret, or accept that with metrics.insecureSkipVerify=true" }}
{{- end }}
{{- if and .tokenAudience (not .secure) }}
{{- fail "metrics.tokenAudience needs metrics.secure: only reviewed tokens have an audience" }}
{{- end }}
{{- if and .tokenAudience .serviceMonitor.enabled (eq .serviceMonitor.tokenFile "/var/run/secrets/kubernetes.io/serviceaccount/token") }}
{{- fail "metrics.tokenAudience with metrics.serviceMonitor: Prometheus' own ServiceAccount token is issued for the API server, not for that audience; mount a projected token for it in Prometheus and set metrics.serviceMonitor.tokenFile to its path" }}
{{- end }}
{{- end }}
{{- with .Values.leaderElection }}
{{- if and .enabled (ge (int .leaseGraceSeconds) (int .leaseDurationSeconds)) }}
{{- fail "leaderElection.leaseGraceSeconds must be less than leaderElection.leaseDurationSeconds: the holder renews that long before the Lease expires" }}
{{- end }}
{{- end }}
{{- if and .Values.networkPolicy.enabled (eq .Values.networkBackend "neutron") (not .Values.networkPolicy.openstack) }}
{{- fail "networkPolicy.enabled with networkBackend=neutron needs networkPolicy.openstack: Keystone's and Neutron's endpoints, as {cidr, port}" }}
{{- end }}
{{- end }}

{{/* An alert's runbook: a link when metrics.prometheusRule.runbookURL says where
docs/runbooks.md is served, else the file and section by name. Takes (list url anchor). */}}
{{- define "sample-operator.runbook" -}}
{{- $url := index . 0 }}{{- $anchor := index . 1 }}
{{- if $url }}
runbook_url: {{ printf "%s#%s" $url $anchor | quote }}
{{- else }}
runbook: {{ printf "docs/runbooks.md#%s in the sample-operator repository" $anchor | quote }}
{{- end }}
{{- end }}

{{/* The Secret of /metrics' certificate: metrics.certSecret, or the one cert-manager keeps for
the chart's Certificate; empty for the self-signed certificate the operator makes. */}}
{{- define "sample-operator.metricsCertSecret" -}}
{{- if .Values.metrics.certSecret }}{{ .Values.metrics.certSecret }}
{{- else if .Values.metrics.certManager.issuer.name }}{{ include "sample-operator.fullname" . }}-metrics-tls
{{- end }}
{{- end }}

{{/* The name /metrics' certificate is for: the metrics Service's. */}}
{{- define "sample-operator.metricsHost" -}}
{{ printf "%s-metrics.%s.svc" (include "sample-operator.fullname" .) .Release.Namespace }}
{{- end }}

{{/* How Prometheus checks /metrics' certificate: against the CA in its Secret, or not at all
for the self-signed certificate the operator makes without one (only with
metrics.insecureSkipVerify, which validate requires). */}}
{{- define "sample-operator.metricsTLS" -}}
tlsConfig:
  {{- with include "sample-operator.metricsCertSecret" . }}
  serverName: {{ include "sample-operator.metricsHost" $ }}
  ca:
    secret:
      name: {{ . }}
      key: ca.crt
  {{- else }}
  insecureSkipVerify: true
  {{- end }}
{{- end }}

{{/* The workload policy's test of a pod template (the CEL variable named by the argument, null
     for none): privileged or escalating containers, added capabilities, host namespaces, host
     paths or ports, or an unconfined seccomp profile. */}}
{{- define "sample-operator.privileged" -}}
{{ . }} != null && ({{ . }}.containers.exists(c, (has(c.securityContext) && ((has(c.securityContext.privileged) && c.securityContext.privileged) || (has(c.securityContext.allowPrivilegeEscalation) && c.securityContext.allowPrivilegeEscalation) || (has(c.securityContext.capabilities) && has(c.securityContext.capabilities.add)) || (has(c.securityContext.seccompProfile) && c.securityContext.seccompProfile.type == 'Unconfined'))) || (has(c.ports) && c.ports.exists(p, has(p.hostPort) && p.hostPort != 0))) || (has({{ . }}.hostNetwork) && {{ . }}.hostNetwork) || (has({{ . }}.hostPID) && {{ . }}.hostPID) || (has({{ . }}.hostIPC) && {{ . }}.hostIPC) || (has({{ . }}.volumes) && {{ . }}.volumes.exists(v, has(v.hostPath))) || (has({{ . }}.securityContext) && has({{ . }}.securityContext.seccompProfile) && {{ . }}.securityContext.seccompProfile.type == 'Unconfined'))
{{- end }}
