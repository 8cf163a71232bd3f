#!/usr/bin/env bash
# Builds a real kube-apiserver from the Go module proxy into $1 (default
# .tools/kube), once: the Kubernetes tests (ILB_KUBE_APISERVER, or this
# folder's kube-apiserver) start it on loopback over Debian's etcd.
#
# k8s.io/kubernetes cannot be `go install`ed: its go.mod replaces its
# staging modules (k8s.io/api, k8s.io/apiserver, ...) with folders of its
# own tree. A scratch module that requires it and replaces each of those
# with the published k8s.io/<name> v0.<minor>.<patch> builds
# k8s.io/kubernetes/cmd/kube-apiserver: about 510 s of CPU and 2.4 GB of
# memory on 2 cores, a 114 MiB binary.
set -euo pipefail
out="${1:-.tools/kube}"
version="${KUBE_VERSION:-v1.37.2}"
staging="v0.${version#v1.}"
bin="$out/kube-apiserver"
if [ -x "$bin" ] && [ "$(cat "$out/version" 2>/dev/null)" = "$version" ]; then
	echo "$bin ($version) is built"
	exit 0
fi
mkdir -p "$out/src"
out="$(cd "$out" && pwd)"
cd "$out/src"
gomod="$(go mod download -json "k8s.io/kubernetes@$version" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",*$/\1/p')"
{
	echo "module ilb.local/kubeapiserver"
	echo
	echo "go 1.26"
	echo
	echo "require k8s.io/kubernetes $version"
	echo
	# Every staging replace of k8s.io/kubernetes's go.mod, pointed at the
	# published module of the same release.
	sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/src/k8s.io/[a-z0-9-]*$#replace \1 => \1 '"$staging"'#p' "$gomod"
} > go.mod
cat > tools.go <<'GO'
//go:build tools

package tools

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
GO
GOFLAGS=-mod=mod go mod tidy -e >/dev/null 2>&1 || true
GOFLAGS=-mod=mod go build -trimpath -ldflags='-s -w' -o "$out/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
echo "$version" > "$out/version"
echo "built $out/kube-apiserver ($version)"
