#!/usr/bin/env bash
# A throwaway API server with mrguard in its admission path, for trying
# mrguard with kubectl on a workstation (docs/try-it.md). It starts etcd
# and kube-apiserver on loopback, `mrguard serve --self-signed`, installs the
# project's small MR CRDs of tests/fixtures/crds/ (the real groups and kinds
# of provider-upjet-aws and provider-nop) and two webhook configurations that
# reach mrguard by URL, then waits; Ctrl-C stops everything and deletes the
# state folder.
#
# Usage: scripts/demo-cluster.sh [--provider-kubernetes]
#        KUBEBUILDER_ASSETS=/path/with/etcd-and-kube-apiserver scripts/demo-cluster.sh
#
# --provider-kubernetes also runs a real provider, provider-kubernetes, whose
# "cloud" is this API server: its Objects' external resources are objects
# here (ConfigMaps, say). scripts/crossplane.sh builds it from its Go module
# (cached; MRGUARD_CROSSPLANE names a folder it built instead).
# Needs: kubectl, cargo (or MRGUARD=/path/to/mrguard), and Go, with which
# scripts/envtest.sh builds etcd and kube-apiserver from their Go modules
# (cached) when KUBEBUILDER_ASSETS is unset.
set -euo pipefail
cd "$(dirname "$0")/.."

provider=false
case "${1:-}" in
  "") ;;
  --provider-kubernetes) provider=true ;;
  *) echo "demo-cluster: unknown argument ${1}; usage: scripts/demo-cluster.sh [--provider-kubernetes]" >&2; exit 2 ;;
esac
if $provider; then
  xp=${MRGUARD_CROSSPLANE:-$(scripts/crossplane.sh | tail -n 1)}
  [[ -x "$xp/provider-kubernetes" ]] || { echo "demo-cluster: no executable $xp/provider-kubernetes" >&2; exit 2; }
fi

assets=${KUBEBUILDER_ASSETS:-$(scripts/envtest.sh | tail -n 1)}
for b in etcd kube-apiserver; do
  [[ -x "$assets/$b" ]] || { echo "demo-cluster: no executable $assets/$b" >&2; exit 2; }
done
command -v kubectl >/dev/null || { echo "demo-cluster: kubectl is not on PATH" >&2; exit 2; }
if [[ -z "${MRGUARD:-}" ]]; then
  cargo build --quiet --bin mrguard
  MRGUARD=target/debug/mrguard
fi

state=$(mktemp -d -t mrguard-demo.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$state"
}
trap cleanup EXIT INT TERM

# Certificates: a CA and a serving certificate for 127.0.0.1; the CA key
# also signs service-account tokens.
"$MRGUARD" certs generate --out "$state/pki" >/dev/null
echo "demo-token,admin,admin,system:masters" >"$state/tokens.csv"

# etcd 3.5 and later skip fsync on request: a demo keeps nothing.
etcd_flags=()
"$assets/etcd" --help 2>&1 | grep -q -- --unsafe-no-fsync && etcd_flags+=(--unsafe-no-fsync)

"$assets/etcd" --data-dir "$state/etcd" "${etcd_flags[@]}" \
  --listen-client-urls http://127.0.0.1:2479 --advertise-client-urls http://127.0.0.1:2479 \
  --listen-peer-urls http://127.0.0.1:2480 --initial-advertise-peer-urls http://127.0.0.1:2480 \
  --initial-cluster default=http://127.0.0.1:2480 >"$state/etcd.log" 2>&1 &
pids+=($!)

"$assets/kube-apiserver" --etcd-servers http://127.0.0.1:2479 \
  --secure-port 6443 --bind-address 127.0.0.1 --advertise-address 127.0.0.1 \
  --tls-cert-file "$state/pki/tls.crt" --tls-private-key-file "$state/pki/tls.key" \
  --token-auth-file "$state/tokens.csv" --authorization-mode RBAC \
  --service-account-issuer https://127.0.0.1 --service-cluster-ip-range 10.0.0.0/24 \
  --service-account-key-file "$state/pki/ca.crt" --service-account-signing-key-file "$state/pki/ca.key" \
  --disable-admission-plugins ServiceAccount >"$state/apiserver.log" 2>&1 &
pids+=($!)

"$MRGUARD" serve --self-signed --self-signed-ca-file "$state/mrguard-ca.crt" \
  --listen 127.0.0.1:9443 --metrics-listen 127.0.0.1:9090 >"$state/mrguard.log" 2>&1 &
pids+=($!)

export KUBECONFIG="$state/kubeconfig"
kubectl config set-cluster demo --server https://127.0.0.1:6443 \
  --certificate-authority "$state/pki/ca.crt" --embed-certs >/dev/null
kubectl config set-credentials admin --token demo-token >/dev/null
kubectl config set-context demo --cluster demo --user admin >/dev/null
kubectl config use-context demo >/dev/null

for _ in $(seq 60); do
  kubectl get --raw /readyz >/dev/null 2>&1 && [[ -s "$state/mrguard-ca.crt" ]] && break
  sleep 1
done
kubectl get --raw /readyz >/dev/null || { tail -20 "$state/apiserver.log" >&2; exit 1; }

# --validate=false: an API server older than 1.25 does not know the CRDs'
# x-kubernetes-validations, and drops them.
kubectl apply --validate=false -f tests/fixtures/crds/ >/dev/null
kubectl wait --for condition=Established crd --all --timeout 60s >/dev/null

ca=$(base64 -w0 "$state/mrguard-ca.crt")
groups='["s3.aws.upbound.io", "ec2.aws.upbound.io", "account.aws.upbound.io"]'
if $provider; then
  groups='["s3.aws.upbound.io", "ec2.aws.upbound.io", "account.aws.upbound.io", "kubernetes.crossplane.io", "kubernetes.m.crossplane.io"]'
  # The provider's CRDs, of its module version. The cluster-scoped Object's
  # conversion webhook names a Service that does not exist here.
  for f in "$xp"/crds/provider/*.yaml; do
    awk '/^  conversion:/{skip=1; next} skip && /^  [a-z]/{skip=0} !skip' "$f" | kubectl apply -f - >/dev/null
  done
  kubectl wait --for condition=Established crd --all --timeout 60s >/dev/null
  # Its credentials: this API server, as the admin.
  kubectl create namespace crossplane-system >/dev/null
  kubectl -n crossplane-system create secret generic cloud-kubeconfig \
    --from-file=kubeconfig="$KUBECONFIG" >/dev/null
  kubectl apply -f - >/dev/null <<EOF
apiVersion: kubernetes.crossplane.io/v1alpha1
kind: ProviderConfig
metadata: {name: default}
spec:
  credentials: {source: Secret, secretRef: {namespace: crossplane-system, name: cloud-kubeconfig, key: kubeconfig}}
---
apiVersion: kubernetes.m.crossplane.io/v1alpha1
kind: ClusterProviderConfig
metadata: {name: default}
spec:
  credentials: {source: Secret, secretRef: {namespace: crossplane-system, name: cloud-kubeconfig, key: kubeconfig}}
EOF
  KUBECONFIG="$KUBECONFIG" TLS_SERVER_CERTS_DIR="$state/pki" "$xp/provider-kubernetes" \
    --webhook-port 9543 --metrics-bind-address 127.0.0.1:9580 --health-probe-bind-addr 127.0.0.1:9581 \
    --poll 1m >"$state/provider-kubernetes.log" 2>&1 &
  pids+=($!)
fi
kubectl apply -f - >/dev/null <<EOF
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {name: mrguard}
webhooks:
  - name: mutate.mrguard.io
    clientConfig: {url: "https://127.0.0.1:9443/mutate", caBundle: "$ca"}
    rules: [{apiGroups: $groups, apiVersions: ["*"], resources: ["*"], operations: [CREATE, UPDATE]}]
    admissionReviewVersions: [v1]
    sideEffects: None
    failurePolicy: Ignore
    reinvocationPolicy: IfNeeded
    timeoutSeconds: 2
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: mrguard}
webhooks:
  - name: validate.mrguard.io
    clientConfig: {url: "https://127.0.0.1:9443/validate", caBundle: "$ca"}
    rules: [{apiGroups: $groups, apiVersions: ["*"], resources: ["*"], operations: [CREATE, UPDATE, DELETE]}]
    admissionReviewVersions: [v1]
    sideEffects: None
    failurePolicy: Fail
    timeoutSeconds: 5
EOF

cat <<EOF
The demo cluster is ready. In another shell:

  export KUBECONFIG=$KUBECONFIG
  kubectl apply -f examples/manifests/

Logs: $state/{apiserver,etcd,mrguard$($provider && echo ,provider-kubernetes)}.log
Ctrl-C stops everything and deletes $state.
EOF
wait "${pids[@]}"
