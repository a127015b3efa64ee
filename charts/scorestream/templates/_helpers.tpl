{{- define "scorestream.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "scorestream.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "scorestream.selectorLabels" -}}
app.kubernetes.io/name: {{ include "scorestream.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{/*
The labels every job's NetworkPolicy admits the operator by (scorestream/naming.py
OPERATOR_POD_LABELS; tests/test_chart.py checks they agree): fixed, never from nameOverride or
fullnameOverride. On the pod template only: a Deployment's selector cannot change on upgrade.
*/}}
{{- define "scorestream.operatorPodLabels" -}}
scorestream.dev/component: operator
{{- end -}}

{{- define "scorestream.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "scorestream.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "scorestream.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "scorestream.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The namespaces watched in namespaced mode: the list given, else the release's own. */}}
{{- define "scorestream.namespaces" -}}
{{- $ns := .Values.watch.namespaces | default (list .Release.Namespace) -}}
{{- toJson $ns -}}
{{- end -}}

{{/* scorestream/naming.py OPERATOR_LEASE (tests/test_chart.py checks they agree). */}}
{{- define "scorestream.leaseName" -}}scorestream-operator{{- end -}}

{{- define "scorestream.leaderElection" -}}
{{- if or .Values.leaderElection.enabled (gt (int .Values.replicaCount) 1) -}}
true
{{- end -}}
{{- end -}}

{{/*
What the operator may do, and nothing else (tests/test_chart.py audits it against the requests the
operator makes). Kubernetes lets a subject create a Role only with permissions it holds itself,
so the driver's Role (operator/desired.py DRIVER_RULES: pods and configmaps) is included too.
The operator's children are made by server-side apply: a `patch` request, which the API server
authorizes as `create` too where the object does not exist yet.
*/}}
{{- define "scorestream.rules" -}}
- apiGroups: ["scorestream.dev"]
  resources: ["modelservings"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["scorestream.dev"]
  resources: ["modelservings/status"]
  verbs: ["patch"]
# Never called: the OwnerReferencesPermissionEnforcement admission plugin requires it to create
# children whose owner reference has blockOwnerDeletion (foreground deletion waits for them).
- apiGroups: ["scorestream.dev"]
  resources: ["modelservings/finalizers"]
  verbs: ["update"]
- apiGroups: [""]
  resources: ["serviceaccounts", "services"]
  verbs: ["get", "list", "watch", "create", "patch"]
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get", "list", "watch", "create", "patch", "delete", "deletecollection"]
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch", "create", "delete", "deletecollection"]
# get: the Kafka Secret a spec names, and the job's control token; create: the control token's
# Secret, made once per resource (operator/control.py), never patched.
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get", "create"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
# delete: a StatefulSet an older operator rendered with what no update may change (its
# podManagementPolicy) is deleted with its pods orphaned and made anew (operator/reconciler.py).
- apiGroups: ["apps"]
  resources: ["statefulsets"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["rbac.authorization.k8s.io"]
  resources: ["roles", "rolebindings"]
  verbs: ["get", "list", "watch", "create", "patch"]
- apiGroups: ["networking.k8s.io"]
  resources: ["networkpolicies"]
  verbs: ["get", "list", "watch", "create", "patch"]
# spec.kafka.strimziTopics: the KafkaTopics Strimzi's Topic Operator makes topics from.
- apiGroups: ["kafka.strimzi.io"]
  resources: ["kafkatopics"]
  verbs: ["get", "create", "patch"]
{{- end -}}

