#!/usr/bin/env bash
# Builds a real istiod (pilot-discovery) from the Go module proxy into $1
# (default .tools/istio), once, with Istio's CRDs beside it: the Istio
# tests (ILB_ISTIOD, or this folder's pilot-discovery) run it out of
# cluster against the kube-apiserver of `make kube`, on loopback.
#
# istio.io/istio publishes no tagged Go module; the newest pseudo-version
# the module proxy serves builds with `go install` (its go.mod has no
# replace directives): about 460 s of CPU and 2.3 GB of memory on 2 cores.
set -euo pipefail
out="${1:-.tools/istio}"
version="${ISTIO_VERSION:-v0.0.0-20260827124520-eed52ebb66ad}"
bin="$out/pilot-discovery"
if [ -x "$bin" ] && [ -f "$out/crd-all.gen.yaml" ] && [ "$(cat "$out/version" 2>/dev/null)" = "$version" ]; then
	echo "$bin ($version) is built"
	exit 0
fi
mkdir -p "$out"
out="$(cd "$out" && pwd)"
GOBIN="$out" CGO_ENABLED=0 go install -trimpath -ldflags='-s -w' "istio.io/istio/pilot/cmd/pilot-discovery@$version"
dir="$(go mod download -json "istio.io/istio@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p')"
cp "$dir/manifests/charts/base/files/crd-all.gen.yaml" "$out/crd-all.gen.yaml"
chmod u+w "$out/crd-all.gen.yaml"
echo "$version" > "$out/version"
echo "built $out/pilot-discovery ($version)"
