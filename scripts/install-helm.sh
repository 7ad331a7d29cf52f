#!/usr/bin/env bash
# Installs helm (the chart tests' only tool) from the Go module proxy:
#   go install helm.sh/helm/v3/cmd/helm@$HELM_VERSION
# into $DEDUPD_CACHE/bin (default ~/.cache/dedupd/bin).  Idempotent: quiet when
# that helm is already there.  Prints helm's path on stdout (the one line a
# caller may capture: HELM=$(scripts/install-helm.sh)).
#
# The first install compiles helm from source: about 4-5 minutes on a 2-core
# machine (module download + build); later runs return at once.
# Environment: HELM_VERSION (default below), DEDUPD_CACHE, GO (default: go).
set -euo pipefail

HELM_VERSION=${HELM_VERSION:-v3.22.0}
cache=${DEDUPD_CACHE:-$HOME/.cache/dedupd}
bindir=$cache/bin
helm=$bindir/helm
stamp=$bindir/.helm-version
go=${GO:-go}

installed_version() {
  # `helm version --template` prints e.g. v3.22.0; fall back to the stamp file.
  "$helm" version --template '{{.Version}}' 2>/dev/null || cat "$stamp" 2>/dev/null || true
}

if [ -x "$helm" ] && [ "$(installed_version)" = "$HELM_VERSION" ]; then
  echo "$helm"
  exit 0
fi

if ! command -v "$go" >/dev/null 2>&1; then
  echo "install-helm: go not found (needed to build helm $HELM_VERSION from the Go module proxy)" >&2
  exit 1
fi

mkdir -p "$bindir"
log=$(mktemp "${TMPDIR:-/tmp}/dedupd-helm-install.XXXXXX")
trap 'rm -f "$log"' EXIT
echo "install-helm: building helm $HELM_VERSION with $("$go" version | awk '{print $3}') (first time: a few minutes)" >&2
start=$(date +%s)
# GOFLAGS=-mod=mod: helm's own go.mod decides the dependency versions;
# -trimpath keeps the build reproducible; GOTOOLCHAIN stays as the machine has it.
if ! GOBIN="$bindir" GOFLAGS="-buildvcs=false -trimpath" \
     "$go" install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" >"$log" 2>&1; then
  tail -n 30 "$log" >&2
  echo "install-helm: go install helm.sh/helm/v3/cmd/helm@$HELM_VERSION failed" >&2
  exit 1
fi
echo "$HELM_VERSION" >"$stamp"
echo "install-helm: helm $HELM_VERSION installed in $(( $(date +%s) - start ))s" >&2
echo "$helm"
