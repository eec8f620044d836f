#!/usr/bin/env bash
# Build containerd, ctr and containerd-shim-runc-v2 for the suite's real nodes from
# containerd's Go module (pinned with its checksum in tools/containerd/module.txt) into a
# cache keyed by the version and the content of that file and this script, and print the
# bin directory. The module cannot be `go install`ed (its go.mod has exclude directives), so
# the Go toolchain downloads it into its module cache and the three commands are built from
# there. Nothing is built when the binaries are already there. With --check it builds
# nothing and exits 1 when a build is needed.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
pin="$root/tools/containerd/module.txt"
binaries=(containerd ctr containerd-shim-runc-v2)

read -r module version sum < <(grep -v '^#' "$pin" | grep .)
digest="$(cat "$pin" "$0" | sha256sum | cut -c1-12)"
cache="${KUBE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/domain-portal/kube}"
bin="$cache/containerd-$version-$digest/bin"

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
[[ "${1:-}" == --check ]] && exit 1

command -v go >/dev/null || { echo "containerd_build: go is not on PATH" >&2; exit 1; }
mkdir -p "$cache"
exec 9>"$cache/.build.lock"
flock 9
if complete; then
    echo "$bin"
    exit 0
fi

started=$SECONDS
echo "containerd_build: building containerd $version into $bin" >&2
info="$(cd "$cache" && GOFLAGS=-mod=mod go mod download -json "$module@$version")"
got="$(sed -n 's/^[[:space:]]*"Sum": "\(.*\)",*$/\1/p' <<<"$info")"
dir="$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p' <<<"$info")"
if [[ "$got" != "$sum" ]]; then
    echo "containerd_build: $module@$version has checksum $got, $pin pins $sum" >&2
    exit 1
fi

staging="$(mktemp -d "$cache/.staging.XXXXXX")"
chmod 755 "$staging"
trap 'rm -rf "$staging"' EXIT
pkg="$module/version"
ldflags="-s -w -X $pkg.Version=$version -X $pkg.Revision=module -X $pkg.Package=github.com/containerd/containerd"
(
    cd "$dir"
    # No cgo: the btrfs snapshotter (cgo only) is left out, as in containerd's static builds.
    export CGO_ENABLED=0 GOFLAGS="-trimpath -mod=readonly -buildvcs=false"
    jobs="${KUBE_BUILD_JOBS:-2}"
    go build -p "$jobs" -tags "urfave_cli_no_docs osusergo netgo static_build" \
        -ldflags "$ldflags" -o "$staging/" ./cmd/containerd ./cmd/ctr
    go build -p "$jobs" -tags "urfave_cli_no_docs osusergo netgo static_build no_grpc" \
        -ldflags "$ldflags" -o "$staging/" ./cmd/containerd-shim-runc-v2
)
mkdir -p "$(dirname "$bin")"
rm -rf "$bin"
mv "$staging" "$bin"
trap - EXIT
echo "containerd_build: built in $((SECONDS - started)) s" >&2
echo "$bin"
