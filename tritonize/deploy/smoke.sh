#!/usr/bin/env bash
# Smoke test of this bundle on a real cluster: apply triton/ and hpa/, wait until the pods are ready,
# classify a picture through the Service, then load the model from inside the cluster until the HPA
# adds a replica. Written by `tritonize deploy k8s`; nothing in it has run on a cluster where it was made.
#
#   ./smoke.sh PICTURE.jpg            (the settings below can be overridden from the environment)
#
# Needs: kubectl (context on the target cluster), curl, jq, base64; in the cluster: GPU nodes with the
# NVIDIA device plugin, the Prometheus Operator (kube-prometheus-stack), prometheus-adapter serving
# custom.metrics.k8s.io, and the Secrets from s3-secret.template.yaml and control-key-secret.template.yaml.
# Exit 0 only when every step passed.
set -euo pipefail
cd "$(dirname "$0")"

# @SETTINGS@
LOCAL_PORT="${LOCAL_PORT:-18000}"
LOAD_CONCURRENCY="${LOAD_CONCURRENCY:-32}"
SCALE_TIMEOUT_S="${SCALE_TIMEOUT_S:-900}"

picture="${1:?usage: smoke.sh PICTURE.jpg}"
fail() { echo "smoke: FAIL: $*" >&2; exit 1; }
for tool in kubectl curl jq base64; do command -v "$tool" >/dev/null || fail "needs $tool on PATH"; done
k() { kubectl --namespace "$NAMESPACE" "$@"; }

echo "== 1. prerequisites"
for crd in podmonitors.monitoring.coreos.com prometheusrules.monitoring.coreos.com; do
  kubectl get crd "$crd" >/dev/null || fail "CRD $crd is missing: install the Prometheus Operator (kube-prometheus-stack)"
done
kubectl get apiservice v1beta1.custom.metrics.k8s.io >/dev/null \
  || fail "no custom metrics API: install prometheus-adapter (the HPA reads the queue/compute ratio through it)"
k get secret "$NAME-s3" >/dev/null || fail "Secret $NAME-s3 missing: fill in s3-secret.template.yaml and kubectl apply -f it"
key=$(k get secret "$NAME-control-key" -o jsonpath='{.data.key}' | base64 -d) \
  || fail "Secret $NAME-control-key missing: fill in control-key-secret.template.yaml and kubectl apply -f it"

echo "== 2. apply"
kubectl apply -f triton/ -f hpa/

echo "== 3. wait for readiness (startup probe budget included)"
k rollout status "deployment/$NAME" --timeout="${ROLLOUT_TIMEOUT_S}s" || {
  k describe pods -l "app.kubernetes.io/instance=$NAME" | tail -40
  fail "deployment/$NAME not ready within ${ROLLOUT_TIMEOUT_S} s"
}

echo "== 4. classify through the Service"
k port-forward "service/$NAME" "$LOCAL_PORT:8000" >/dev/null 2>&1 &
forward=$!
load_pod=""
cleanup() { kill "$forward" 2>/dev/null || true; [ -z "$load_pod" ] || k delete pod "$load_pod" --wait=false >/dev/null 2>&1 || true; }
trap cleanup EXIT
for _ in $(seq 30); do curl -sf "localhost:$LOCAL_PORT/v2/health/ready" >/dev/null && break; sleep 1; done
curl -sf "localhost:$LOCAL_PORT/v2/models/$MODEL/ready" >/dev/null || fail "$MODEL is not ready behind service/$NAME"
if [ -n "$CLASSIFIER" ]; then
  top5=$(base64 -w0 "$picture" \
    | jq -Rc '{inputs: [{name: "IMAGE", datatype: "BYTES", shape: [1, 1], data: [.]}], outputs: [{name: "LOGITS", parameters: {classification: 5}}]}' \
    | curl -sf --data-binary @- "localhost:$LOCAL_PORT/v2/models/$CLASSIFIER/infer" | jq -r '.outputs[0].data[]')
  [ "$(echo "$top5" | wc -l)" = 5 ] || fail "$CLASSIFIER did not return five labels"
  echo "$top5"
else
  echo "(no ensemble for $MODEL in this repository: checked its readiness only)"
fi

echo "== 5. scale under load (perf_analyzer in the cluster, gRPC through the headless Service)"
load_pod="$NAME-smoke-load"
k delete pod "$load_pod" --ignore-not-found >/dev/null
k run "$load_pod" --image="$SDK_IMAGE" --restart=Never --command -- sh -c \
  "while true; do perf_analyzer -m $MODEL -i grpc -u $NAME-grpc:8001 -H '$KEY_HEADER:$key' --concurrency-range $LOAD_CONCURRENCY --measurement-interval 20000 || sleep 5; done"
deadline=$((SECONDS + SCALE_TIMEOUT_S))
while :; do
  replicas=$(k get hpa "$NAME" -o jsonpath='{.status.desiredReplicas}')
  echo "  desired replicas: ${replicas:-?} (metric: $(k get hpa "$NAME" -o jsonpath='{.status.currentMetrics[0].pods.current.averageValue}'))"
  [ "${replicas:-0}" -gt "$REPLICAS" ] && break
  [ "$SECONDS" -lt "$deadline" ] || {
    kubectl get --raw "/apis/custom.metrics.k8s.io/v1beta1/namespaces/$NAMESPACE/pods/*/$METRIC" || true
    fail "the HPA did not scale above $REPLICAS within ${SCALE_TIMEOUT_S} s"
  }
  sleep 15
done
k rollout status "deployment/$NAME" --timeout="${ROLLOUT_TIMEOUT_S}s" || fail "the added replicas did not become ready"
echo "smoke: PASS: ready, classified through service/$NAME, scaled to $replicas replicas under load"
