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
if [ -x "$bin" ] && [ -f "$out/crd-all.gen.yaml" ] && [ -s "$out/gateway-api-crds.yaml" ] && [ "$(cat "$out/version" 2>/dev/null)" = "$version" ]; then
	echo "$bin ($version) is built"
	exit 0
fi
mkdir -p "$out"
out="$(cd "$out" && pwd)"
GOBIN="$out" CGO_ENABLED=0 go install -trimpath -ldflags='-s -w' "istio.io/istio/pilot/cmd/pilot-discovery@$version"
dir="$(go mod download -json "istio.io/istio@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p')"
cp "$dir/manifests/charts/base/files/crd-all.gen.yaml" "$out/crd-all.gen.yaml"
chmod u+w "$out/crd-all.gen.yaml"
# The Gateway API and Inference Extension CRDs of the versions istiod
# builds with (its go.mod), for the InferencePool tests.
: > "$out/gateway-api-crds.yaml"
for mod in sigs.k8s.io/gateway-api sigs.k8s.io/gateway-api-inference-extension; do
	v="$(sed -n "s#^[[:space:]]*$mod \(v[^ ]*\).*#\1#p" "$dir/go.mod" | head -1)"
	mdir="$(go mod download -json "$mod@$v" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p')"
	for f in "$mdir"/config/crd/experimental/*.yaml "$mdir"/config/crd/bases/*.yaml; do
		case "$f" in *vap_*|*kustomization*|*'*'*) continue ;; esac
		[ -f "$f" ] || continue
		{ echo "---"; cat "$f"; } >> "$out/gateway-api-crds.yaml"
	done
done
echo "$version" > "$out/version"
echo "built $out/pilot-discovery ($version)"
