#!/usr/bin/env bash
# Installs helm (the chart tests' only tool) from the Go module proxy:
#   go install helm.sh/helm/v3/cmd/helm@$HELM_VERSION
# into $DEDUPD_CACHE/bin (default ~/.cache/dedupd/bin).  Idempotent: quiet when
# that helm is already there.  Prints helm's path on stdout (the one line a
# caller may capture: HELM=$(scripts/install-helm.sh)).
#
# The first install downloads helm's modules and compiles it: about 9 minutes
# on a 2-core machine (measured: 537 s, 5m45s CPU; ~400 MB of module cache and
# ~700 MB of build cache); later runs return at once.
# Environment: HELM_VERSION (default below), DEDUPD_CACHE, GO (default: go).
set -euo pipefail

HELM_VERSION=${HELM_VERSION:-v3.22.0}
cache=${DEDUPD_CACHE:-$HOME/.cache/dedupd}
bindir=$cache/bin
helm=$bindir/helm
stamp=$bindir/.helm-version
go=${GO:-go}

# A helm built by `go install` reports only major.minor (`helm version` says
# "v3.22": the patch comes from release ldflags), so the exact module version
# installed is kept in a stamp file beside it.
installed_version() {
  "$helm" version --short >/dev/null 2>&1 || return 0
  cat "$stamp" 2>/dev/null || true
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
# `go install pkg@version` builds outside any module: helm's own go.mod (and
# go.sum, checked against the checksum database) decides every dependency.
# -trimpath keeps local paths out of the binary; GOTOOLCHAIN stays as set here.
if ! GOBIN="$bindir" GOFLAGS="-buildvcs=false -trimpath" \
     "$go" install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" >"$log" 2>&1; then
  tail -n 30 "$log" >&2
  echo "install-helm: go install helm.sh/helm/v3/cmd/helm@$HELM_VERSION failed" >&2
  exit 1
fi
echo "$HELM_VERSION" >"$stamp"
echo "install-helm: helm $HELM_VERSION installed in $(( $(date +%s) - start ))s" >&2
echo "$helm"
