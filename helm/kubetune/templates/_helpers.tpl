{{/*
Names, labels and computed values shared by the chart's templates.
*/}}

{{/* The chart name (nameOverride wins), cut to 63 characters. */}}
{{- define "kubetune.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The base of object names: fullnameOverride, else the release name, plus the chart name unless the release name holds it. */}}
{{- define "kubetune.fullname" -}}
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

{{/* Name of the Deployment, Service and (cluster) roles of the operator. */}}
{{- define "kubetune.operatorName" -}}
{{- printf "%s-operator" (include "kubetune.fullname" .) }}
{{- end }}

{{- define "kubetune.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kubetune.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{/* The labels of every object of the release, beside its component's selector labels. */}}
{{- define "kubetune.releaseLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: kubetune
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "kubetune.labels" -}}
{{ include "kubetune.selectorLabels" . }}
{{ include "kubetune.releaseLabels" . }}
{{- end }}

{{/* Name of the dashboard's Deployment, Service, ServiceAccount and (cluster) roles. */}}
{{- define "kubetune.dashboardName" -}}
{{- printf "%s-dashboard" (include "kubetune.fullname" .) }}
{{- end }}

{{- define "kubetune.dashboardSelectorLabels" -}}
app.kubernetes.io/name: {{ include "kubetune.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: dashboard
{{- end }}

{{- define "kubetune.dashboardLabels" -}}
{{ include "kubetune.dashboardSelectorLabels" . }}
{{ include "kubetune.releaseLabels" . }}
{{- end }}

{{- define "kubetune.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "kubetune.operatorName" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "kubetune.keySecretName" -}}
{{- default (printf "%s-collector-key" (include "kubetune.fullname" .)) .Values.collector.keySecret.name }}
{{- end }}

{{/* The URL trial pods report results to: collector.url, else this chart's Service. */}}
{{- define "kubetune.collectorURL" -}}
{{- default (printf "http://%s.%s.svc:%d" (include "kubetune.operatorName" .) .Release.Namespace (int .Values.collector.port)) .Values.collector.url }}
{{- end }}

{{- define "kubetune.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{- define "kubetune.trialImage" -}}
{{- printf "%s:%s" .Values.trials.image.repository (default .Chart.AppVersion .Values.trials.image.tag) }}
{{- end }}

{{/*
Rules for the Experiments, Trials, pods and events the operator works on, each with the calls
that need it (operator/kubetune_operator/handlers.py and kube.py, and kopf itself).
*/}}
{{- define "kubetune.workloadRules" -}}
# kopf watches Experiments and patches its finalizer and progress annotations onto them.
- apiGroups: [kubetune.io]
  resources: [experiments]
  verbs: [list, watch, patch]
# Kube.patch_experiment_status (and handlers._mark).
- apiGroups: [kubetune.io]
  resources: [experiments/status]
  verbs: [patch]
# Kube.list_trials when an Experiment's controller (re)starts (list); Kube._create_trial (create, then
# get after a 409). Trials are not watched: the operator keeps their state itself.
- apiGroups: [kubetune.io]
  resources: [trials]
  verbs: [get, list, create]
# Kube._patch_trial_status.
- apiGroups: [kubetune.io]
  resources: [trials/status]
  verbs: [patch]
# kopf's index of trial pods (list, watch); Kube._create_pod, Kube._delete_pod.
- apiGroups: [""]
  resources: [pods]
  verbs: [list, watch, create, delete]
# LogStreams (logstream.py) follows the log of each container trial's pod: its results are read from it.
- apiGroups: [""]
  resources: [pods/log]
  verbs: [get]
# The Experiments' journals (kubetune_operator.journal): Kube.list_journal when a controller
# (re)starts, Kube.write_journal (create, patch; delete what a snapshot covers).
- apiGroups: [""]
  resources: [configmaps]
  verbs: [list, create, patch, delete]
# Each trial attempt's collector token Secret: Kube._create_secret before its pod, Kube._delete_secret
# once the attempt ended. No get, list, watch or update: the operator cannot read or change Secrets.
- apiGroups: [""]
  resources: [secrets]
  verbs: [create, delete]
# The headless Service of each gang attempt (trials with workers): Kube._create_service before its pods
# (list by name: whose one of that name is, when it exists), Kube._delete_gang_objects once the attempt ended.
- apiGroups: [""]
  resources: [services]
  verbs: [create, delete, list]
# The scheduler's PodGroup of each gang attempt when trials.gangScheduling is podgroup: Kube._create_podgroup,
# Kube._delete_gang_objects.
- apiGroups: [scheduling.k8s.io]
  resources: [podgroups]
  verbs: [create, delete, list]
# kopf.event / kopf.warn on Experiments and Trials.
- apiGroups: [""]
  resources: [events]
  verbs: [create]
{{- if .Values.katib.enabled }}
# Katib's API, served (katib_handlers.py): kopf's daemon per Katib Experiment (list, watch, patch for its
# finalizer and progress; get each pass), its status (patch); the mirrored Katib Trials (list, create; status).
- apiGroups: [kubeflow.org]
  resources: [experiments]
  verbs: [get, list, watch, patch]
- apiGroups: [kubeflow.org]
  resources: [experiments/status, trials/status]
  verbs: [patch]
- apiGroups: [kubeflow.org]
  resources: [trials]
  verbs: [list, create]
# The trial template of a Katib trialTemplate.configMap: read once per Katib Experiment's daemon (get).
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get]
# The kubetune Experiment that runs a Katib Experiment: get each pass, create once, patch its budget.
- apiGroups: [kubetune.io]
  resources: [experiments]
  verbs: [get, create]
{{- end }}
{{- end }}
