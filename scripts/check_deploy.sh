#!/usr/bin/env bash
# Validates deploy/ offline, without a cluster or a container engine:
#   1. renders the kustomize base and the dev and prod overlays (and prod with the
#      optional KEDA component) with kustomize,
#   2. validates every rendered object strictly (unknown fields are errors) against
#      the Kubernetes OpenAPI schemas bundled in the kubernetes-validate package,
#      for STRAND_K8S_VERSION (default 1.29.0); a kind without a bundled schema fails,
#      except KEDA's ScaledObject (a CRD), which scripts/check_deploy.py checks
#      structurally,
#   3. runs scripts/check_deploy.py: the project's own rules on the rendered objects
#      (probes, resources, non-root, PDB per Deployment, Jobs run strand-admin, the HPA
#      targets the executor; in prod, authentication on and a mounted PostgreSQL CA,
#      with a self-test of that rule), a structural lint of the Dockerfile, and the shape of the
#      Grafana dashboard and the Prometheus rules.
# The tools are installed on first use into .cache/deploy-tools (git-ignored):
# kustomize with `go install` (Go module proxy), kubernetes-validate with pip into a
# virtualenv (PyPI). Both are pinned. Needs go and python3 with venv (scripts/deps.sh).
# Usage: scripts/check_deploy.sh            exit 0 when everything is valid
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"

kustomize_version=v5.0.3        # builds with Debian 12's Go 1.19 as well as newer Go
kv_version=1.37.0               # kubernetes-validate: schemas for Kubernetes 1.5 .. 1.37
k8s_version=${STRAND_K8S_VERSION:-1.29.0}
tools=${STRAND_DEPLOY_TOOLS:-$repo/.cache/deploy-tools}
mkdir -p "$tools/bin"

# ---- tools ----
kustomize=$tools/bin/kustomize
if [ ! -x "$kustomize" ] || [ ! -f "$tools/bin/.kustomize-$kustomize_version" ]; then
  command -v go >/dev/null || { echo "check_deploy: go is needed to install kustomize (scripts/deps.sh installs golang-go)" >&2; exit 2; }
  echo "check_deploy: installing kustomize $kustomize_version"
  GOTOOLCHAIN=local GOFLAGS=-mod=mod GOPATH=$tools/go GOBIN=$tools/bin GOCACHE=$tools/go-build \
    go install "sigs.k8s.io/kustomize/kustomize/v5@$kustomize_version"
  chmod -R u+w "$tools/go" 2>/dev/null || true
  touch "$tools/bin/.kustomize-$kustomize_version"
fi
venv=$tools/venv
if [ ! -x "$venv/bin/kubernetes-validate" ] || [ ! -f "$venv/.kv-$kv_version" ]; then
  echo "check_deploy: installing kubernetes-validate $kv_version"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "kubernetes-validate==$kv_version"
  touch "$venv/.kv-$kv_version"
fi

# ---- render ----
out=$(mktemp -d "${TMPDIR:-/tmp}/strand-deploy.XXXXXX")
trap 'rm -rf "$out"' EXIT
for target in base overlays/dev overlays/prod; do
  name=${target##*/}
  "$kustomize" build "deploy/k8s/$target" >"$out/$name.yaml"
done
# prod plus the optional KEDA component, rendered from a throw-away kustomization
# inside the tree (kustomize wants relative paths).
keda_dir=$tools/keda-check
mkdir -p "$keda_dir"
rel=$(python3 -c 'import os,sys; print(os.path.relpath(sys.argv[1], sys.argv[2]))' "$repo/deploy/k8s" "$keda_dir")
cat >"$keda_dir/kustomization.yaml" <<EOF
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources: [$rel/overlays/prod]
components: [$rel/components/keda-executor]
EOF
"$kustomize" build "$keda_dir" >"$out/prod-keda.yaml"

# ---- schemas (strict) ----
# The KEDA ScaledObject is split off: no bundled schema exists for a CRD.
"$venv/bin/python" - "$out/prod-keda.yaml" "$out/prod-keda-core.yaml" "$out/prod-keda-crd.yaml" <<'EOF'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
core = [d for d in docs if not d.get("apiVersion", "").startswith("keda.sh/")]
crd = [d for d in docs if d.get("apiVersion", "").startswith("keda.sh/")]
yaml.safe_dump_all(core, open(sys.argv[2], "w"))
yaml.safe_dump_all(crd, open(sys.argv[3], "w"))
EOF
fail=0
for f in base dev prod prod-keda-core; do
  log=$out/$f.validate
  if ! "$venv/bin/kubernetes-validate" --strict --quiet -k "$k8s_version" "$out/$f.yaml" >"$log" 2>&1; then
    fail=1
  fi
  # A missing schema is only a warning for kubernetes-validate; here it is an error.
  if grep -q . "$log"; then
    sed "s|^|  $f: |" "$log"
    fail=1
  fi
  echo "check_deploy: $f: $(grep -c '^kind:' "$out/$f.yaml") objects validated against Kubernetes $k8s_version"
done

# ---- project rules, Dockerfile, dashboard and alert rules ----
"$venv/bin/python" scripts/check_deploy.py --rendered "$out" --repo "$repo" || fail=1

if [ $fail -ne 0 ]; then
  echo "check_deploy: FAILED" >&2
  exit 1
fi
echo "check_deploy: passed"
