#!/usr/bin/env bash
# Tests of the helm chart (helm/dedupd): `helm lint --strict` and `helm template`
# over tests/helm/values-*.yaml, with assertions on the rendered manifests, the
# chart's refusals (values that must not render), NOTES.txt and the Grafana
# dashboard.  One line per check, then "N passed, M failed"; exit 1 on failure.
# Exit 1 when helm is not installed: scripts/deps.sh installs it (install-helm.sh).
#
# Environment: HELM (helm binary), DEDUPD_CACHE (where install-helm.sh puts it),
# DEDUPD_BIN (dedupd binary: when present, every rendered config is also checked
# with `dedupd config --dump`, which refuses unknown keys and bad values).
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=${DEDUPD_ROOT:-$(cd "$here/../.." && pwd)}
chart=$root/helm/dedupd

helm=${HELM:-}
if [ -z "$helm" ]; then
  if command -v helm >/dev/null 2>&1; then
    helm=$(command -v helm)
  elif [ -x "${DEDUPD_CACHE:-$HOME/.cache/dedupd}/bin/helm" ]; then
    helm=${DEDUPD_CACHE:-$HOME/.cache/dedupd}/bin/helm
  fi
fi
if [ -z "$helm" ] || [ ! -x "$helm" ]; then
  echo "FAIL: helm not found (HELM, PATH, ${DEDUPD_CACHE:-$HOME/.cache/dedupd}/bin/helm); scripts/deps.sh installs it (scripts/install-helm.sh): nothing was tested"
  exit 1
fi

dedupd_bin=${DEDUPD_BIN:-}
if [ -z "$dedupd_bin" ] && [ -x "$root/build/dedupd" ]; then dedupd_bin=$root/build/dedupd; fi

if [ -z "$dedupd_bin" ]; then
  echo "note: no dedupd binary (DEDUPD_BIN, build/dedupd): rendered configs are not checked by dedupd itself"
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/dedupd-helm-test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

passed=0
failed=0
ok()     { passed=$((passed + 1)); echo "ok   $1"; }
not_ok() { failed=$((failed + 1)); echo "FAIL $1"; shift; for l in "$@"; do echo "     $l"; done; }

# YAML stream -> JSON array of the non-empty documents: Debian's yq (the jq
# wrapper; scripts/deps.sh installs it).
yaml2json() {
  yq -s -c 'map(select(. != null))'
}
if ! echo 'a: 1' | yaml2json >/dev/null 2>&1; then
  echo "FAIL no YAML reader: install yq (Debian package yq; scripts/deps.sh does)"
  echo "0 passed, 1 failed"
  exit 1
fi
command -v jq >/dev/null 2>&1 || { echo "FAIL jq not found"; echo "0 passed, 1 failed"; exit 1; }

# jq helpers over the rendered documents (an array of manifests).
read -r -d '' JQLIB <<'EOF'
def by_kind($k): map(select(.kind == $k));
def workload: map(select(.kind == "Deployment" or .kind == "StatefulSet"))[0];
def pod: workload.spec.template.spec;
def podmeta: workload.spec.template.metadata;
def all_containers: (pod.containers // []) + (pod.initContainers // []);
def dedupd: all_containers | map(select(.name == "dedupd"))[0];
def app: pod.containers | map(select(.name != "dedupd"));
def cm: map(select(.kind == "ConfigMap" and .data["dedupd.json"] != null
                   and (.metadata.labels.grafana_dashboard == null)))[0];
def cfg: cm.data["dedupd.json"] | fromjson;
def admin_port: (dedupd.ports | map(select(.name == "admin"))[0].containerPort);
def cfg_admin_port: ((cfg.admin.listen // "0.0.0.0:9464") | split(":") | last | tonumber);
def env($n): (dedupd.env // []) | map(select(.name == $n))[0];
# drain = shutdown.grace_ms + rebalance.grace_ms (dedupd's defaults: 20000, 60000)
def drain_s: (((cfg.shutdown.grace_ms // 20000) + (cfg.rebalance.grace_ms // 60000) + 999) / 1000 | floor);
def static_member: workload.kind == "StatefulSet";
def any_giid: [all_containers[] | (.env // [])[] | select(.name == "DEDUPD_KAFKA__GROUP__INSTANCE__ID")] | length > 0;
def sc($c; $k): (pod.securityContext // {}) as $p | ($c.securityContext // {}) | if has($k) then .[$k] else $p[$k] end;
def mount($c; $p): ($c.volumeMounts // []) | map(select(.mountPath == $p))[0];
def volume($n): (pod.volumes // []) | map(select(.name == $n))[0];
def subset($a; $b): $a | to_entries | all(.value == $b[.key]);
EOF

# check NAME JSONFILE JQ_EXPR: passes when the expression is true.
check() {
  local name=$1 json=$2 expr=$3
  if jq -e "$JQLIB $expr" "$json" >/dev/null 2>"$tmp/jq.err"; then
    ok "$name"
  else
    if [ -s "$tmp/jq.err" ]; then not_ok "$name" "jq: $expr" "$(head -c 300 "$tmp/jq.err")"
    else not_ok "$name" "jq: $expr"; fi
  fi
}

# render CASE [helm args...]: helm template into $tmp/CASE.yaml and .json.
render() {
  local case=$1; shift
  if "$helm" template rel "$chart" --namespace scrape "$@" >"$tmp/$case.yaml" 2>"$tmp/$case.err" \
     && yaml2json <"$tmp/$case.yaml" >"$tmp/$case.json" 2>>"$tmp/$case.err"; then
    ok "$case: helm template renders"
    return 0
  fi
  not_ok "$case: helm template renders" "$(tail -n 5 "$tmp/$case.err")"
  return 1
}

# refuse CASE PATTERN [helm args...]: helm template must fail, with PATTERN in the message.
refuse() {
  local case=$1 pattern=$2; shift 2
  if "$helm" template rel "$chart" "$@" >/dev/null 2>"$tmp/refuse.err"; then
    not_ok "refused: $case" "rendered, but should have failed"
  elif grep -Eq -- "$pattern" "$tmp/refuse.err"; then
    ok "refused: $case"
  else
    not_ok "refused: $case" "failed without /$pattern/:" "$(tail -n 3 "$tmp/refuse.err")"
  fi
}

# A copy of the chart whose NOTES.txt renders as a manifest (helm template skips NOTES).
notes_chart=$tmp/notes-chart
cp -r "$chart" "$notes_chart"
mv "$notes_chart/templates/NOTES.txt" "$notes_chart/NOTES.in"
printf '%s\n' 'notes: {{ tpl (.Files.Get "NOTES.in") . | toJson }}' >"$notes_chart/templates/zz-notes.yaml"

# The checks every rendering must pass.
common_checks() {
  local c=$1 j=$tmp/$1.json
  shift
  check "$c: one workload (Deployment or StatefulSet)" "$j" \
    '(map(select(.kind == "Deployment" or .kind == "StatefulSet")) | length) == 1'
  check "$c: pod runs as non-root (runAsNonRoot, runAsUser 10001)" "$j" \
    'pod.securityContext.runAsNonRoot == true and sc(dedupd; "runAsNonRoot") == true and sc(dedupd; "runAsUser") == 10001'
  check "$c: dedupd readOnlyRootFilesystem" "$j" 'dedupd.securityContext.readOnlyRootFilesystem == true'
  check "$c: dedupd allowPrivilegeEscalation false, capabilities drop ALL" "$j" \
    'dedupd.securityContext.allowPrivilegeEscalation == false and (dedupd.securityContext.capabilities.drop | index(["ALL"]) != null)'
  check "$c: seccompProfile RuntimeDefault" "$j" \
    'sc(dedupd; "seccompProfile").type == "RuntimeDefault" and pod.securityContext.seccompProfile.type == "RuntimeDefault"'
  check "$c: every container non-root, no privilege escalation" "$j" \
    'pod.securityContext.runAsNonRoot as $nr | all_containers | all((.securityContext.allowPrivilegeEscalation == false) and ((.securityContext.runAsNonRoot // $nr) == true))'
  check "$c: admin port = config admin.listen port" "$j" 'admin_port == cfg_admin_port'
  check "$c: liveness probe GET /healthz on the admin port" "$j" \
    'dedupd.livenessProbe.httpGet.path == "/healthz" and (dedupd.livenessProbe.httpGet.port == "admin" or dedupd.livenessProbe.httpGet.port == admin_port)'
  check "$c: readiness probe GET /readyz on the admin port" "$j" \
    'dedupd.readinessProbe.httpGet.path == "/readyz" and (dedupd.readinessProbe.httpGet.port == "admin" or dedupd.readinessProbe.httpGet.port == admin_port)'
  check "$c: admin listener not on loopback" "$j" '(cfg.admin.listen | test("^(127\\.|localhost|\\[::1\\])")) | not'
  check "$c: POD_NAME and instance.id (DEDUPD_INSTANCE__ID) from metadata.name" "$j" \
    'env("POD_NAME").valueFrom.fieldRef.fieldPath == "metadata.name" and env("DEDUPD_INSTANCE__ID").valueFrom.fieldRef.fieldPath == "metadata.name" and (cfg.instance.id // "") == ""'
  check "$c: group.instance.id from the pod name in a StatefulSet, none in a Deployment" "$j" \
    'if static_member then env("DEDUPD_KAFKA__GROUP__INSTANCE__ID").valueFrom.fieldRef.fieldPath == "metadata.name" else (any_giid | not) end'
  check "$c: no group.instance.id in the config (the chart decides it)" "$j" '(cfg.kafka // {}) | has("group.instance.id") | not'
  check "$c: dedupd runs run -c /etc/dedupd/dedupd.json" "$j" 'dedupd.args[0:3] == ["run", "-c", "/etc/dedupd/dedupd.json"]'
  check "$c: config ConfigMap mounted read-only at /etc/dedupd" "$j" \
    'mount(dedupd; "/etc/dedupd").readOnly == true and volume(mount(dedupd; "/etc/dedupd").name).configMap.name == cm.metadata.name'
  check "$c: ConfigMap dedupd.json is JSON objects only" "$j" '(cfg | type) == "object" and (cfg | to_entries | all(.value | type == "object"))'
  check "$c: no secret key in the ConfigMap" "$j" \
    '(cfg.broker.sasl_password // "") == "" and (cfg.api.token // "") == "" and ((cfg.kafka // {}) | keys | all(test("password|secret") | not))'
  check "$c: credentials only from secretKeyRef (no literal secret env)" "$j" \
    'all_containers | map(.env // []) | add | map(select(.name | test("PASSWORD|TOKEN|SECRET"))) | all(.value == null and .valueFrom.secretKeyRef.name != null)'
  check "$c: store on a writable volume at store.path" "$j" \
    '(cfg.store.path | startswith("/var/lib/dedupd/")) and mount(dedupd; "/var/lib/dedupd").name == "data" and (mount(dedupd; "/var/lib/dedupd").readOnly // false) == false'
  check "$c: writable /tmp emptyDir" "$j" 'volume(mount(dedupd; "/tmp").name).emptyDir != null'
  check "$c: resources requests and limits (cpu, memory)" "$j" \
    'dedupd.resources.requests.cpu != null and dedupd.resources.requests.memory != null and dedupd.resources.limits.cpu != null and dedupd.resources.limits.memory != null'
  check "$c: terminationGracePeriodSeconds > shutdown.grace_ms + rebalance.grace_ms" "$j" 'pod.terminationGracePeriodSeconds > drain_s'
  check "$c: PodDisruptionBudget selects the pods" "$j" \
    '(by_kind("PodDisruptionBudget") | length) == 1 and subset(by_kind("PodDisruptionBudget")[0].spec.selector.matchLabels; podmeta.labels)'
  check "$c: Prometheus scrape annotations (scrape, port, path)" "$j" \
    'podmeta.annotations["prometheus.io/scrape"] == "true" and podmeta.annotations["prometheus.io/port"] == (admin_port | tostring) and podmeta.annotations["prometheus.io/path"] == "/metrics"'
  check "$c: Service exposes the admin port only" "$j" \
    '(by_kind("Service") | length) == 1 and (by_kind("Service")[0].spec.ports | length) == 1 and by_kind("Service")[0].spec.ports[0].port == admin_port and subset(by_kind("Service")[0].spec.selector; podmeta.labels)'
  check "$c: selector labels on the pods" "$j" 'subset(workload.spec.selector.matchLabels; podmeta.labels)'
  check "$c: checksum/config annotation rolls pods on config change" "$j" '(podmeta.annotations["checksum/config"] | length) == 64'
  check "$c: no service links (no injected DEDUPD_* variables)" "$j" 'pod.enableServiceLinks == false'
  check "$c: no service account token mounted" "$j" 'pod.automountServiceAccountToken == false'

  if [ -n "$dedupd_bin" ]; then
    jq -r "$JQLIB cm.data[\"dedupd.json\"]" "$j" >"$tmp/$c.dedupd.json"
    if DEDUPD_KAFKA__GROUP__INSTANCE__ID=rel-dedupd-0 POD_NAME=rel-dedupd-0 \
         "$dedupd_bin" config -c "$tmp/$c.dedupd.json" --dump >"$tmp/$c.dump" 2>"$tmp/$c.dump.err"; then
      ok "$c: dedupd accepts the rendered config (config --dump)"
    else
      not_ok "$c: dedupd accepts the rendered config (config --dump)" "$(head -c 300 "$tmp/$c.dump.err")"
    fi
  fi

  if "$helm" template rel "$notes_chart" --namespace scrape "$@" --show-only templates/zz-notes.yaml \
       >"$tmp/$c.notes" 2>"$tmp/$c.notes.err" \
     && grep -q 'terminationGracePeriodSeconds=' "$tmp/$c.notes"; then
    ok "$c: NOTES.txt renders"
  else
    not_ok "$c: NOTES.txt renders" "$(tail -n 3 "$tmp/$c.notes.err")"
  fi
}

# no_secret_values CASE VALUES...: none of these strings in a ConfigMap or the workload.
no_secret_values() {
  local c=$1; shift
  local v leaked=()
  for v in "$@"; do
    if jq -e --arg v "$v" '[.[] | select(.kind != "Secret")] | tostring | contains($v)' "$tmp/$c.json" >/dev/null; then
      leaked+=("$v")
    fi
  done
  if [ "${#leaked[@]}" -eq 0 ]; then ok "$c: no secret value outside the Secret"
  else not_ok "$c: no secret value outside the Secret" "leaked: ${leaked[*]}"; fi
}

# ---- lint ---------------------------------------------------------------------------
for vf in "$here"/values-*.yaml; do
  name=$(basename "$vf" .yaml)
  if "$helm" lint --strict "$chart" -f "$vf" >"$tmp/lint.out" 2>&1; then
    ok "lint --strict: $name"
  else
    not_ok "lint --strict: $name" "$(grep -E 'ERROR|WARNING|Error' "$tmp/lint.out" | head -n 5)"
  fi
done

# ---- sidecar (default mode) ------------------------------------------------------------
c=sidecar
if render $c -f "$here/values-$c.yaml"; then
  common_checks $c -f "$here/values-$c.yaml"
  j=$tmp/$c.json
  check "$c: Deployment with an emptyDir store" "$j" 'workload.kind == "Deployment" and volume("data").emptyDir != null'
  check "$c: app container first, with its image, command and env" "$j" \
    'pod.containers[0].name == "app" and pod.containers[0].image == "registry.example/scraper:2.3.1" and pod.containers[0].command == ["/usr/local/bin/scraper"] and (pod.containers[0].env | map(.name) | index(["SCRAPER_WORKERS"]) != null)'
  check "$c: two containers (app + dedupd)" "$j" '(pod.containers | map(.name)) == ["app", "dedupd"]'
  check "$c: app reaches the job API on 127.0.0.1:9465" "$j" \
    '(app[0].env | map(select(.name == "DEDUPD_API_URL"))[0].value) == "http://127.0.0.1:9465" and cfg.api.listen == "127.0.0.1:9465"'
  check "$c: app gets the API token from the Secret" "$j" \
    '(app[0].env | map(select(.name == "DEDUPD_API_TOKEN"))[0].valueFrom.secretKeyRef) == {"name": "rel-dedupd", "key": "api-token"}'
  check "$c: SASL password and API token env from secretKeyRef" "$j" \
    'env("DEDUPD_BROKER__SASL_PASSWORD").valueFrom.secretKeyRef == {"name": "rel-dedupd", "key": "broker-sasl-password"} and env("DEDUPD_API__TOKEN").valueFrom.secretKeyRef == {"name": "rel-dedupd", "key": "api-token"}'
  check "$c: Secret created with both keys (base64)" "$j" \
    '(by_kind("Secret") | length) == 1 and (by_kind("Secret")[0].data["broker-sasl-password"] | @base64d) == "s3cr3t-SASL-value-7f1c" and (by_kind("Secret")[0].data["api-token"] | @base64d) == "tok-API-value-93ab"'
  check "$c: checksum/secret annotation" "$j" '(podmeta.annotations["checksum/secret"] | length) == 64'
  check "$c: kafka.* passes through to the config" "$j" 'cfg.kafka["security.protocol"] == "sasl_ssl" and cfg.broker.sasl_username == "dedupd"'
  check "$c: default terminationGracePeriodSeconds = 20 s shutdown + 60 s rebalance + 15 s" "$j" 'pod.terminationGracePeriodSeconds == 95'
  check "$c: Deployment: a dynamic member (no group.instance.id)" "$j" 'workload.kind == "Deployment" and (any_giid | not)'
  check "$c: dashboard ConfigMap labelled grafana_dashboard" "$j" \
    '(map(select(.kind == "ConfigMap" and .metadata.labels.grafana_dashboard == "1")) | length) == 1 and (map(select(.metadata.labels.grafana_dashboard == "1"))[0].data["dedupd.json"] | fromjson | .title) == "dedupd"'
  no_secret_values $c "s3cr3t-SASL-value-7f1c" "tok-API-value-93ab"
fi

# ---- standalone ------------------------------------------------------------------------
c=standalone
if render $c -f "$here/values-$c.yaml"; then
  common_checks $c -f "$here/values-$c.yaml"
  j=$tmp/$c.json
  check "$c: dedupd is the only container" "$j" '(pod.containers | map(.name)) == ["dedupd"] and (pod.initContainers // []) == []'
  check "$c: Deployment with 3 replicas" "$j" 'workload.kind == "Deployment" and workload.spec.replicas == 3'
  check "$c: Deployment renders no group.instance.id anywhere" "$j" \
    '(any_giid | not) and (tostring | test("GROUP__INSTANCE__ID|group\\.instance\\.id") | not)'
  check "$c: no Secret and no secret env without credentials" "$j" \
    '(by_kind("Secret") | length) == 0 and env("DEDUPD_BROKER__SASL_PASSWORD") == null and env("DEDUPD_API__TOKEN") == null'
  check "$c: no dashboard ConfigMap by default" "$j" '(map(select(.metadata.labels.grafana_dashboard != null)) | length) == 0'
fi

# ---- StatefulSet with a PVC --------------------------------------------------------------
c=statefulset
if render $c -f "$here/values-$c.yaml"; then
  common_checks $c -f "$here/values-$c.yaml"
  j=$tmp/$c.json
  check "$c: StatefulSet, no Deployment" "$j" 'workload.kind == "StatefulSet" and (by_kind("Deployment") | length) == 0'
  check "$c: PVC template 'data' (20Gi, fast-ssd, RWO) mounted as the store" "$j" \
    '(workload.spec.volumeClaimTemplates | length) == 1 and workload.spec.volumeClaimTemplates[0].metadata.name == "data" and workload.spec.volumeClaimTemplates[0].spec.resources.requests.storage == "20Gi" and workload.spec.volumeClaimTemplates[0].spec.storageClassName == "fast-ssd" and workload.spec.volumeClaimTemplates[0].spec.accessModes == ["ReadWriteOnce"]'
  check "$c: no emptyDir store volume" "$j" 'volume("data") == null'
  check "$c: fsGroup 10001 makes the PVC writable" "$j" 'pod.securityContext.fsGroup == 10001'
  check "$c: serviceName is the (headless) metrics Service" "$j" \
    'workload.spec.serviceName == by_kind("Service")[0].metadata.name and by_kind("Service")[0].spec.clusterIP == "None"'
  check "$c: PVC retention policy" "$j" 'workload.spec.persistentVolumeClaimRetentionPolicy == {"whenDeleted": "Retain", "whenScaled": "Retain"}'
  check "$c: terminationGracePeriodSeconds derived from grace_ms 45000 (45 + 60 + 15)" "$j" 'pod.terminationGracePeriodSeconds == 120'
  check "$c: 2 replicas" "$j" 'workload.spec.replicas == 2'
  check "$c: static member: group.instance.id = the pod name (downward API)" "$j" \
    'env("DEDUPD_KAFKA__GROUP__INSTANCE__ID") == {"name": "DEDUPD_KAFKA__GROUP__INSTANCE__ID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}'
fi

# ---- existing Secret -----------------------------------------------------------------------
c=existing-secret
if render $c -f "$here/values-$c.yaml"; then
  common_checks $c -f "$here/values-$c.yaml"
  j=$tmp/$c.json
  check "$c: the chart creates no Secret" "$j" '(by_kind("Secret") | length) == 0'
  check "$c: env from the existing Secret's keys" "$j" \
    'env("DEDUPD_BROKER__SASL_PASSWORD").valueFrom.secretKeyRef == {"name": "dedupd-credentials", "key": "sasl-password", "optional": true} and env("DEDUPD_API__TOKEN").valueFrom.secretKeyRef == {"name": "dedupd-credentials", "key": "api-token", "optional": true}'
  check "$c: app token from the existing Secret" "$j" \
    '(app[0].env | map(select(.name == "DEDUPD_API_TOKEN"))[0].valueFrom.secretKeyRef.name) == "dedupd-credentials"'
fi

# ---- custom resources, explicit grace, native sidecar, other admin port ---------------------
c=resources
if render $c -f "$here/values-$c.yaml"; then
  common_checks $c -f "$here/values-$c.yaml"
  j=$tmp/$c.json
  check "$c: dedupd resources as given" "$j" \
    'dedupd.resources == {"requests": {"cpu": "500m", "memory": "768Mi"}, "limits": {"cpu": "3", "memory": "2Gi"}}'
  check "$c: app resources as given" "$j" 'app[0].resources == {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}}'
  check "$c: terminationGracePeriodSeconds 150 as given" "$j" 'pod.terminationGracePeriodSeconds == 150'
  check "$c: native sidecar (init container, restartPolicy Always)" "$j" \
    '(pod.initContainers | map(.name)) == ["dedupd"] and pod.initContainers[0].restartPolicy == "Always" and (pod.containers | map(.name)) == ["app"]'
  check "$c: admin port 9500 in container, probes, annotation and Service" "$j" \
    'admin_port == 9500 and podmeta.annotations["prometheus.io/port"] == "9500" and by_kind("Service")[0].spec.ports[0].port == 9500'
fi

# ---- StatefulSet on an emptyDir (static membership without a PVC), 4 replicas ------------
c=statefulset-emptydir
if render $c --set mode=standalone --set workload=StatefulSet --set replicaCount=4; then
  common_checks $c --set mode=standalone --set workload=StatefulSet --set replicaCount=4
  j=$tmp/$c.json
  check "$c: StatefulSet with 4 replicas" "$j" 'workload.kind == "StatefulSet" and workload.spec.replicas == 4'
  check "$c: emptyDir store, no PVC template" "$j" 'volume("data").emptyDir != null and (workload.spec.volumeClaimTemplates // []) == []'
  check "$c: group.instance.id = the pod name" "$j" 'env("DEDUPD_KAFKA__GROUP__INSTANCE__ID").valueFrom.fieldRef.fieldPath == "metadata.name"'
  check "$c: headless Service" "$j" 'by_kind("Service")[0].spec.clusterIP == "None" and workload.spec.serviceName == by_kind("Service")[0].metadata.name'
fi

# ---- replicas left to an HPA (null) --------------------------------------------------------
c=replicas-null
if render $c --set mode=standalone --set replicaCount=null; then
  check "$c: no replicas field" "$tmp/$c.json" 'workload.spec | has("replicas") | not'
fi
c=replicas-sidecar
if render $c -f "$here/values-sidecar.yaml" --set replicaCount=6; then
  check "$c: sidecar pods follow replicaCount (6)" "$tmp/$c.json" 'workload.spec.replicas == 6 and (pod.containers | length) == 2'
fi

# ---- the grace covers both drains (rebalance.grace_ms given) ---------------------------------
# (not checked by `dedupd config --dump`: a dedupd without scale-out refuses the option)
c=rebalance-grace
if render $c --set mode=standalone --set config.shutdown.grace_ms=30000 --set config.rebalance.grace_ms=90500; then
  check "$c: terminationGracePeriodSeconds = ceil(30 + 90.5) + 15 = 136" "$tmp/$c.json" 'pod.terminationGracePeriodSeconds == 136'
  check "$c: grace > shutdown.grace_ms + rebalance.grace_ms" "$tmp/$c.json" 'pod.terminationGracePeriodSeconds > drain_s and drain_s == 121'
fi
refuse "terminationGracePeriodSeconds within shutdown + rebalance grace" 'terminationGracePeriodSeconds=100 must exceed the drain period' \
  --set mode=standalone --set terminationGracePeriodSeconds=100 --set config.shutdown.grace_ms=30000 --set config.rebalance.grace_ms=90000

# The chart's defaults of the two graces are dedupd's.
if [ -n "$dedupd_bin" ]; then
  "$dedupd_bin" config --doc >"$tmp/config-doc.md" 2>/dev/null || true
  for opt_def in shutdown.grace_ms=20000 rebalance.grace_ms=60000; do
    opt=${opt_def%%=*} def=${opt_def#*=}
    got=$(awk -F'|' -v o="\`$opt\`" '{n=$2; gsub(/ /, "", n)} n == o {v=$5; gsub(/[ `]/, "", v); print v}' "$tmp/config-doc.md")
    if [ -z "$got" ]; then echo "note: dedupd does not know $opt yet: the chart assumes dedupd's default will be $def"
    elif [ "$got" = "$def" ]; then ok "the chart's default $opt = dedupd's ($def)"
    else not_ok "the chart's default $opt = dedupd's" "chart $def, dedupd $got (_helpers.tpl dedupd.drainSeconds, test_chart.sh drain_s)"; fi
  done
fi

# ---- refusals -----------------------------------------------------------------------------
refuse "terminationGracePeriodSeconds below the drain period" 'terminationGracePeriodSeconds=10 must exceed' \
  --set mode=standalone --set terminationGracePeriodSeconds=10
refuse "terminationGracePeriodSeconds equal to the drain period" 'must exceed the drain period' \
  --set mode=standalone --set terminationGracePeriodSeconds=90 --set config.shutdown.grace_ms=30000
refuse "api.token in config (ConfigMap)" 'config.api.token is a secret' \
  --set mode=standalone --set config.api.token=abc
refuse "broker.sasl_password in config" 'config.broker.sasl_password is a secret' \
  --set mode=standalone --set config.broker.sasl_password=abc
refuse "kafka sasl.password in config" 'config.kafka.sasl.password is a secret' \
  --set mode=standalone --set 'config.kafka.sasl\.password=abc'
refuse "proxy URL with a password in config" 'proxy URL carries a password' \
  --set mode=standalone --set 'config.proxy.exits[0]=http://u:p@proxy:8000'
refuse "admin.listen on loopback" 'is loopback' \
  --set mode=standalone --set config.admin.listen=127.0.0.1:9464
refuse "store.path outside the volume" 'must be under persistence.mountPath' \
  --set mode=standalone --set config.store.path=/data/store
refuse "sidecar mode without app.image" 'needs app.image'
refuse "unknown mode" 'sidecar.*standalone' --set mode=daemon
refuse "fixed instance.id with several replicas" 'instance.id is set' \
  --set mode=standalone --set replicaCount=2 --set config.instance.id=x
refuse "fixed instance.id (the chart sets the pod name)" 'config.instance.id is set' \
  --set mode=standalone --set config.instance.id=x
refuse "kafka group.instance.id in config" 'config.kafka.group.instance.id is set' \
  --set mode=standalone --set 'config.kafka.group\.instance\.id=x'
refuse "static membership env in a Deployment" 'DEDUPD_KAFKA__GROUP__INSTANCE__ID in a Deployment.*KIP-345' \
  --set mode=standalone --set 'env[0].name=DEDUPD_KAFKA__GROUP__INSTANCE__ID' --set 'env[0].value=x'
refuse "a PVC with workload=Deployment" 'persistence.enabled=true needs workload=StatefulSet' \
  --set mode=standalone --set persistence.enabled=true --set workload=Deployment
refuse "unknown workload (schema)" 'workload' \
  --set mode=standalone --set workload=DaemonSet
refuse "misspelled top-level value (schema)" "additional properties 'persistance'" \
  --set mode=standalone --set persistance.enabled=true

# ---- dashboard ------------------------------------------------------------------------------
dash=$chart/dashboards/dedupd.json
if jq -e '.panels | length > 0' "$dash" >/dev/null 2>&1; then
  ok "dashboard: valid JSON with panels"
  exprs=$(jq -r '[.. | objects | select(has("expr")) | .expr] | join("\n")' "$dash")
  missing=()
  for m in dedupd_jobs_total dedupd_fetch_attempts_total dedupd_rotations_total \
           dedupd_fetched_bytes_total dedupd_results_total dedupd_job_attempts_bucket \
           dedupd_lease_recoveries_total dedupd_outbox_pending dedupd_consumer_lag_messages \
           dedupd_ops_inflight dedupd_index_entries dedupd_index_complete dedupd_ready dedupd_fast_path_decisions_total \
           dedupd_dlq_total dedupd_conflicts_reported_total; do
    grep -q "$m" <<<"$exprs" || missing+=("$m")
  done
  if [ "${#missing[@]}" -eq 0 ]; then ok "dashboard: every metric charted"
  else not_ok "dashboard: every metric charted" "missing: ${missing[*]}"; fi
  for h in dedupd_job_latency_seconds dedupd_fetch_duration_seconds; do
    if grep -q "histogram_quantile(0.5, sum by (le) (rate(${h}_bucket" <<<"$exprs" \
       && grep -q "histogram_quantile(0.99, sum by (le) (rate(${h}_bucket" <<<"$exprs"; then
      ok "dashboard: p50 and p99 of $h"
    else
      not_ok "dashboard: p50 and p99 of $h"
    fi
  done
  check "dashboard: duplicate ratio = duplicates / all jobs" "$dash" \
    '[.panels[] | select(.title == "Duplicate ratio") | .targets[0].expr | test("outcome=~\"duplicate\\|duplicate_inflight\"") and test("\\) / \\(sum\\(rate\\(dedupd_jobs_total")] | length == 2 and all'
  check "dashboard: every target uses the datasource variable" "$dash" \
    '[.panels[] | select(.type != "row") | .datasource.uid] | all(. == "${datasource}")'
  check "dashboard: panel ids unique" "$dash" '[.panels[].id] | length == (unique | length)'
else
  not_ok "dashboard: valid JSON with panels" "$dash"
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
