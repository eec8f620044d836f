#!/usr/bin/env bash
# The system packages the test suite drives, from Debian, installed when missing: Chromium
# (browser tests), Prometheus and promtool (scrape and alert-rule tests), iproute2 (`ip
# netns`: the agent ↔ portal network cut), openssl (the test cluster's certificates) and
# redis-server (the private Redis). Run by
# `make test` and .ci/run. Without root it only says what is missing.
# The real nodes' tests (tests/kube/test_real_node*.py) also need runc, the CNI plugins
# (containernetworking-plugins) and busybox-static, whose /bin/busybox makes the nodes'
# image; their kubelet and containerd are built from Go modules (scripts/kube_build.sh,
# scripts/containerd_build.sh).
set -euo pipefail
missing=()
command -v redis-server >/dev/null || missing+=(redis-server)
command -v chromium >/dev/null || missing+=(chromium)
command -v ip >/dev/null || missing+=(iproute2)
# The Kubernetes tests' control plane certificates (testbed/kube/cluster.py).
command -v openssl >/dev/null || missing+=(openssl)
{ command -v promtool >/dev/null && command -v prometheus >/dev/null; } || missing+=(prometheus)
[ -x /usr/sbin/runc ] || missing+=(runc)
[ -x /usr/lib/cni/bridge ] || missing+=(containernetworking-plugins)
dpkg-query -W -f='${Status}' busybox-static 2>/dev/null | grep -q "ok installed" \
  || missing+=(busybox-static)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "system_deps: missing ${missing[*]} (apt-get install them as root); their tests skip" >&2
  exit 0
fi
echo "system_deps: installing ${missing[*]} from Debian…" >&2
apt-get update -qq
# Prometheus without its recommends (node exporter, alertmanager).
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
