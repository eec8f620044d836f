#!/usr/bin/env bash
# Build upstream's control plane (etcd, kube-apiserver, kube-scheduler,
# kube-controller-manager), the kubelet (the suite's real nodes) and kubelet-dra
# (the kubelet's DRA side alone, from its own packages) from tools/kubeplane into a
# cache keyed by the
# Kubernetes version and the module's content, and print the bin directory.
# Nothing is built when the binaries are already there; Go's own build cache
# makes a rebuild after a small change cheap. With --check it builds nothing
# and exits 1 when a build is needed.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
module="$root/tools/kubeplane"
binaries=(etcd kube-apiserver kube-scheduler kube-controller-manager kubelet kubelet-dra)

version="$(awk '$1 == "k8s.io/kubernetes" { print $2; exit }' "$module/go.mod")"
digest="$(cd "$module" && cat go.mod go.sum $(find cmd -name '*.go' | sort) | sha256sum | cut -c1-12)"
cache="${KUBE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/domain-portal/kube}"
bin="$cache/$version-$digest/bin"

complete() {
    local name
    for name in "${binaries[@]}"; do
        [[ -x "$bin/$name" ]] || return 1
    done
}

if complete; then
    echo "$bin"
    exit 0
fi
# --check: only say whether a build is needed (exit 1, nothing built).
[[ "${1:-}" == --check ]] && exit 1

command -v go >/dev/null || { echo "kube_build: go is not on PATH" >&2; exit 1; }
mkdir -p "$cache"
exec 9>"$cache/.build.lock"
flock 9
# Another build may have finished while this one waited for the lock.
if complete; then
    echo "$bin"
    exit 0
fi

minor="${version#v1.}"
minor="${minor%%.*}"
pkg=k8s.io/component-base/version
ldflags="-s -w -X $pkg.gitVersion=$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"

staging="$(mktemp -d "$cache/.staging.XXXXXX")"
chmod 755 "$staging"
trap 'rm -rf "$staging"' EXIT
started=$SECONDS
echo "kube_build: building Kubernetes $version (control plane, kubelet) into $bin" >&2
(
    cd "$module"
    CGO_ENABLED=0 GOFLAGS="-trimpath -mod=readonly -buildvcs=false" \
        go build -p "${KUBE_BUILD_JOBS:-2}" -ldflags "$ldflags" -o "$staging/" ./cmd/...
)
mkdir -p "$(dirname "$bin")"
rm -rf "$bin"
mv "$staging" "$bin"
trap - EXIT
echo "kube_build: built in $((SECONDS - started)) s" >&2
echo "$bin"
