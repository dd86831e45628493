#!/usr/bin/env bash
# GPU acceptance: the half of tritonize that no machine of this project can run (no GPU, no TensorRT).
#
# Run it on a GPU box with tritonize, its tests and the TensorRT, torch-tensorrt, torch and torchvision of a Triton
# release, installed by the one command `tritonize convert releases` prints for it (docs/gpu-box.md), trtexec on
# PATH and Docker with the NVIDIA Container Toolkit:
#
#   bash benchmarks/gpu_acceptance.sh [--arch resnet50] [--weights DEFAULT] [--release YY.MM]
#                                     [--images DIR] [--out DIR] [--quick] [--builds B:P,...] [--no-serve]
#
# --release defaults to the release whose TensorRT is this Python's (`tritonize convert releases --installed`);
# the script stops before any work when there is none, when this Python or machine is not one the release's
# GPU install resolves on (`convert releases --triton-release`), or when pytest is missing.
# A release whose line has no torch-tensorrt (24.10, 25.01) skips its builds and the tests that need it, saying why.
# --builds: the builds to run (builder:precision, comma-separated); --no-serve: stop after the builds and their
# latency profiles (no repository, server, compare or perf).
# It exports the model once (with torch.export's .pt2), then builds a plan with every builder (container, trtexec,
# tensorrt, torch-tensorrt: its dynamo frontend from 2.5) for fp32, fp16 and int8 (each build runs the plan check
# against onnxruntime; --quick: one precision per builder and a short perf sweep, as `make test` runs the script on
# the stand-ins),
# runs the tests marked requires_tensorrt / requires_gpu / requires_docker (on the exported model), serves one plan with
# the NGC container next to the ONNX and TorchScript models, compares the three backends on the
# images, sweeps perf over concurrency with system shared memory, and writes one report:
# <out>/report.md. Exit code 1 when any step failed that was not an expected refusal
# (torch-tensorrt refuses INT8, FP16 on TensorRT 11 or with the mixed-precision graph's FP32 nodes, and a latency
# profile; trtexec 8.x a latency profile).
set -uo pipefail

ARCH=resnet50 WEIGHTS=DEFAULT RELEASE="" IMAGES="" OUT=gpu_acceptance SERVE=1
BUILDS="container:fp32,container:fp16,container:int8,trtexec:fp32,trtexec:fp16,trtexec:int8,tensorrt:fp32,tensorrt:fp16"
BUILDS="$BUILDS,tensorrt:int8,torch-tensorrt:fp32,torch-tensorrt:fp16,torch-tensorrt:int8"
PERF=(--models onnx_model,torch_model,trt_model --concurrency 1,4,16 --batch 8 --duration 5)
PERF_LATENCY=(--concurrency 1,4 --batch 2 --duration 5)
while [ $# -gt 0 ]; do
  case "$1" in
    --arch) ARCH=$2; shift 2 ;;
    --weights) WEIGHTS=$2; shift 2 ;;
    --release) RELEASE=$2; shift 2 ;;
    --images) IMAGES=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --builds) BUILDS=$2; shift 2 ;;
    --no-serve) SERVE=0; shift ;;
    --quick) BUILDS="container:fp16,trtexec:fp32,tensorrt:int8,torch-tensorrt:fp32"
             PERF=(--models trt_model --concurrency 1,2 --batch 2 --requests 8) PERF_LATENCY=(--concurrency 1,2 --batch 2 --requests 8)
             shift ;;
    -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
    *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
cd "$(dirname "$0")/.." || exit 2
PY=${PYTHON:-python}
TRITONIZE=("$PY" -m tritonize.cli)
if ! "$PY" -m pytest --version >/dev/null 2>&1; then
  echo "the GPU-marked tests need pytest: pip install -e \".[gpu,dev]\"" >&2
  exit 2
fi
if [ -z "$RELEASE" ]; then
  # A plan loads only in the TensorRT that built it: test the release this Python's TensorRT serves.
  if ! RELEASE=$("${TRITONIZE[@]}" convert releases --installed); then
    echo "give --release YY.MM after installing its TensorRT (the pins above)" >&2
    exit 2
  fi
fi
# Its GPU install, and where it resolves: a Python or machine outside them stops the script here (N34).
"${TRITONIZE[@]}" convert releases --triton-release "$RELEASE" || exit 2
# No torch-tensorrt targets some releases' TensorRT (their line has none): its builds and tests are skipped (N36).
TORCH_TRT=$("$PY" -c 'import sys; from tritonize.releases import release_info as r; print(r(sys.argv[1]).torch_tensorrt_pip or "")' "$RELEASE")
mkdir -p "$OUT/logs"
OUT=$(cd "$OUT" && pwd)
# A run in the --out of an earlier one keeps its export (up to date) and images, never its plans or repositories:
# they would be counted in this run's report.
rm -rf "$OUT"/art-* "$OUT"/models* "$OUT"/perf*
REPORT="$OUT/report.md"
ROWS=()
UNEXPECTED=0

# step NAME EXPECT CMD...: run CMD, log its output, add a report row. EXPECT: a text whose presence in the
# output makes a failure an expected refusal ("-" for none).
step() {
  local name=$1 expect=$2; shift 2
  local log="$OUT/logs/${name//[^A-Za-z0-9_.-]/_}.log" start end code result
  start=$(date +%s.%N)
  "$@" >"$log" 2>&1
  code=$?
  end=$(date +%s.%N)
  if [ $code -eq 0 ]; then
    result=ok
  elif [ "$expect" != - ] && grep -q -- "$expect" "$log"; then
    result="refused (expected)"
  else
    result="FAIL (exit $code)"
    UNEXPECTED=1
  fi
  local detail
  # cut counts bytes: iconv drops a character it cut in two, which would leave report.md invalid UTF-8
  detail=$(grep -E "✓|error:|passed|failed|agree|READY" "$log" | tail -n 2 | tr '\n|' '  ' | cut -c1-200 | iconv -c -f UTF-8 -t UTF-8)
  ROWS+=("| $name | $result | $(awk "BEGIN { printf \"%.1f\", $end - $start }") | $detail |")
  echo "$name: $result"
  return $code
}

if [ -z "$IMAGES" ]; then  # 14 crops of matplotlib's bundled photo, as the tests use
  IMAGES="$OUT/images"
  mkdir -p "$IMAGES"
  "$PY" - "$IMAGES" <<'EOF'
import sys
import matplotlib.cbook as cbook
from PIL import Image, ImageOps
with cbook.get_sample_data("grace_hopper.jpg") as f:
    photo = Image.open(f).convert("RGB")
w, h = photo.size
boxes = [(0, 0, 1.0), (0, 0, 0.6), (0.4, 0, 0.6), (0, 0.4, 0.6), (0.4, 0.4, 0.6), (0.2, 0.2, 0.5), (0.1, 0.3, 0.7)]
for n, (left, top, size) in enumerate(boxes):
    crop = photo.crop((int(left * w), int(top * h), int((left + size) * w), int((top + size) * h)))
    crop.save(f"{sys.argv[1]}/photo_{2 * n:02d}.jpg")
    ImageOps.mirror(crop).save(f"{sys.argv[1]}/photo_{2 * n + 1:02d}.jpg")
EOF
fi
COUNT=$(find "$IMAGES" -maxdepth 1 -type f | wc -l)
CALIB=$(( COUNT > 40 ? 32 : COUNT * 2 / 3 ))

{
  echo "# tritonize GPU acceptance ($(date -u +%Y-%m-%dT%H:%MZ))"
  echo
  echo "- tritonize: $(git rev-parse --short HEAD 2>/dev/null || echo '?'); model $ARCH ($WEIGHTS); Triton release $RELEASE"
  echo "- GPU: $("$PY" -c 'from tritonize.machine import gpu_facts; print(gpu_facts())')"
  echo "- TensorRT (Python): $("$PY" -c 'import tensorrt; print(tensorrt.__version__)' 2>/dev/null || echo 'not installed')"
  echo "- trtexec: $(trtexec --help 2>/dev/null | grep -o 'TensorRT v[0-9]*\]\( \[b[0-9]*\]\)\?' | head -n1 || echo 'not on PATH')"
  echo "- torch-tensorrt: $("$PY" -c 'import torch_tensorrt; print(torch_tensorrt.__version__)' 2>/dev/null || echo 'not installed')"
  docker=$(docker version --format '{{.Server.Version}}' 2>/dev/null)
  echo "- Docker: ${docker:-no engine}"
  echo "- images: $IMAGES ($COUNT; $CALIB calibrate INT8, the rest are held out for the checks)"
} >"$REPORT"

step export - "${TRITONIZE[@]}" export --arch "$ARCH" --weights "$WEIGHTS" --artifacts "$OUT/base" --max-batch 32 \
  --format all
# On the GPU box a skipped GPU test means a missing part: count it as a failure. They run on the model exported
# above (TRITONIZE_TEST_ARTIFACTS, tests/conftest.py small_artifacts).
MARKED="requires_tensorrt or requires_gpu or requires_docker"
[ -n "$TORCH_TRT" ] || MARKED="($MARKED) and not requires_torch_tensorrt"
step gpu-tests - env TRITONIZE_TEST_ARTIFACTS="$OUT/base" bash -c 'out=$("$0" -m pytest -p no:logging -q -rs \
  --basetemp "$1" -m "$2"); code=$?; echo "$out"
  if grep -q skipped <<<"$out"; then exit 1; fi; exit $code' "$PY" "$OUT/tests" "$MARKED"
if [ -z "$TORCH_TRT" ]; then
  ROWS+=("| torch-tensorrt builds and tests | skipped (expected) | - | no torch-tensorrt targets Triton $RELEASE's TensorRT (its line has none) |")
  echo "torch-tensorrt builds and tests: skipped (expected): no torch-tensorrt targets Triton $RELEASE's TensorRT"
  BUILDS=$(tr ',' '\n' <<<"$BUILDS" | grep -v '^torch-tensorrt:' | paste -sd, -)
fi

# --triton-release auto picks the release whose TensorRT is this box's, and names its pins.
rm -rf "$OUT/art-auto" && cp -r "$OUT/base" "$OUT/art-auto"
step "convert trt --triton-release auto (dry run)" - env RELEASE="$RELEASE" bash -c \
  '"$@" 2>&1 | tee /dev/stderr | grep -q "auto: Triton $RELEASE,"' bash "${TRITONIZE[@]}" convert trt --artifacts "$OUT/art-auto" --triton-release auto --dry-run

SERVED=""
BUILDERS=()
for build in ${BUILDS//,/ }; do
  builder=${build%%:*} precision=${build#*:}
  [[ " ${BUILDERS[*]-} " == *" $builder "* ]] || BUILDERS+=("$builder")
  art="$OUT/art-$builder-$precision"
  rm -rf "$art" && cp -r "$OUT/base" "$art"
  calib=()
  [ "$precision" = int8 ] && calib=(--calib-images "$IMAGES" --calib-count "$CALIB")
  if step "convert $builder $precision" "cannot honour" "${TRITONIZE[@]}" convert trt --artifacts "$art" \
      --builder "$builder" --precision "$precision" --triton-release "$RELEASE" --max-batch 32 ${calib[@]+"${calib[@]}"}; then
    # Serve the container's FP16 plan when it built (it matches the release by construction), else the first plan.
    if [ -z "$SERVED" ] || [ "$builder-$precision" = container-fp16 ]; then SERVED=$art; fi
  fi
done

# torch-tensorrt's frontend: dynamo (the .pt2) where the installed version has it, its engine names read from the
# engine; the plan is repository-built and loaded in the serving image like the others.
if [ -f "$OUT/art-torch-tensorrt-fp32/model.plan" ]; then
  step "torch-tensorrt frontend (fp32)" - "$PY" -c '
import json, sys, torch_tensorrt
plan = json.load(open(sys.argv[1]))["artifacts"]["tensorrt"]
has = hasattr(getattr(torch_tensorrt, "dynamo", None), "convert_exported_program_to_serialized_trt_engine")
print(plan["torch_tensorrt"], plan["input_name"], plan["output_name"])
sys.exit(0 if plan["torch_tensorrt"]["frontend"] == ("dynamo" if has else "torchscript") else 1)' \
    "$OUT/art-torch-tensorrt-fp32/manifest.json"
  step "repo build + check --in-image (torch-tensorrt fp32)" - env RELEASE="$RELEASE" bash -c '"$@" repo build "$0/models-torch-tensorrt" \
    --artifacts "$0/art-torch-tensorrt-fp32" --force && "$@" repo check "$0/models-torch-tensorrt" \
    --artifacts "$0/art-torch-tensorrt-fp32" --triton-release "$RELEASE" --in-image' "$OUT" "${TRITONIZE[@]}"
fi

if [ "$SERVE" = 0 ]; then
  ROWS+=("| serve / compare / perf | skipped (expected) | - | --no-serve |")
elif [ -n "$SERVED" ]; then
  MODELS="$OUT/models"
  step "repo build ($(basename "$SERVED"))" - "${TRITONIZE[@]}" repo build "$MODELS" --artifacts "$SERVED" --force
  step "repo check" - "${TRITONIZE[@]}" repo check "$MODELS" --artifacts "$SERVED" --triton-release "$RELEASE"
  # Precision as a fact: every built plan's layer precisions were read from its engine (manifest `layers`).
  step "layer precisions recorded" - "$PY" -c '
import json, pathlib, sys
found = {}
for manifest in sorted(pathlib.Path(sys.argv[1]).glob("art-*/manifest.json")):
    plan = json.loads(manifest.read_text())["artifacts"].get("tensorrt", {})
    if plan.get("status") == "built":
        found[manifest.parent.name] = plan.get("layers")
        print(manifest.parent.name, (plan.get("layers") or {}).get("counts", "unknown"))
missing = [name for name, layers in found.items() if layers is None and "torch-tensorrt" not in name]
print("passed" if found and not missing else f"failed: no layer precisions for {missing or chr(42)}")
sys.exit(1 if missing or not found else 0)' "$OUT"
  # Proven in the serving image: its trtexec loads the repository's plan and runs one batch against onnxruntime.
  step "repo check --in-image ($RELEASE)" - "${TRITONIZE[@]}" repo check "$MODELS" --artifacts "$SERVED" \
    --triton-release "$RELEASE" --in-image
  # CUDA graphs: the same plan in a repository with --cuda-graphs, linted against the plan's profile.
  step "repo build --cuda-graphs" - "${TRITONIZE[@]}" repo build "$OUT/models-graphs" --artifacts "$SERVED" \
    --force --cuda-graphs
  step "repo check (cuda graphs)" - "${TRITONIZE[@]}" repo check "$OUT/models-graphs" --artifacts "$SERVED"
  # execution_context_allocation_strategy: written for a release from 25.05, refused (expected) for an older one.
  step "repo build --context-memory on-profile-change" "does not read execution_context_allocation_strategy" \
    "${TRITONIZE[@]}" repo build "$OUT/models-memory" --artifacts "$SERVED" --force --context-memory on-profile-change
  # One GPU kind per box: its plan is found for its own compute capability, and a kind it lacks is named.
  CC=$("$PY" -c 'from tritonize.machine import gpu_facts; print(gpu_facts().get("compute_capability", ""))')
  step "repo check --gpu-cc (this GPU, $CC)" - "${TRITONIZE[@]}" repo check "$MODELS" --artifacts "$SERVED" --gpu-cc "${CC:-0.0}"
  step "repo check --gpu-cc 1.0 names the missing plan" "no plan for this GPU's compute capability 1.0" \
    "${TRITONIZE[@]}" repo check "$MODELS" --artifacts "$SERVED" --gpu-cc 1.0
  read -r HTTP GRPC METRICS < <("$PY" -c 'from tritonize.serve.process import choose_ports as c; p = c("127.0.0.1", None, None, None); print(p.http, p.grpc, p.metrics)')
  SERVE_LOG="$OUT/logs/serve.log"
  "${TRITONIZE[@]}" serve "$MODELS" --engine docker --triton-release "$RELEASE" --http-port "$HTTP" \
    --grpc-port "$GRPC" --metrics-port "$METRICS" --ready-timeout 900 >"$SERVE_LOG" 2>&1 &
  SERVER=$!
  step "serve (docker, $RELEASE)" - bash -c "for i in \$(seq 900); do grep -q '^log ' '$SERVE_LOG' && grep -q 'trt_model *READY' '$SERVE_LOG' && exit 0; kill -0 $SERVER 2>/dev/null || exit 1; sleep 1; done; exit 1"
  step "client compare (3 backends)" - "${TRITONIZE[@]}" client compare "$IMAGES"/* --models onnx_model,torch_model,trt_model \
    --min-top1-agreement 0.9 --url "127.0.0.1:$GRPC"
  step "client perf (sweep, shared memory)" - "${TRITONIZE[@]}" client perf "${PERF[@]}" --shared-memory system --url "127.0.0.1:$GRPC" --output-dir "$OUT/perf"
  kill -TERM "$SERVER" 2>/dev/null
  wait "$SERVER" 2>/dev/null
  # A second, latency optimization profile: built and checked in both profiles by every builder that can (trtexec
  # 8.x and torch-tensorrt refuse it, expected), served with a latency instance group (instance_group.profile),
  # linted against the plan's recorded profiles, and small batches served through it.
  LATENCY=""
  FP16="$OUT/base"  # artifacts whose FP16 ONNX is prepared and verified already: the builds reuse it
  for art in "$OUT"/art-*-fp16; do [ -f "$art/model_fp16.onnx" ] && FP16=$art; done
  for builder in ${BUILDERS[@]+"${BUILDERS[@]}"}; do
    art="$OUT/art-latency-$builder"
    rm -rf "$art" && cp -r "$FP16" "$art"
    if step "convert $builder --latency-profile 1,2,4" "makes one optimization profile\|builds one optimization profile" \
        "${TRITONIZE[@]}" convert trt --artifacts "$art" --builder "$builder" --precision fp16 --triton-release "$RELEASE" \
        --max-batch 32 --latency-profile 1,2,4; then
      [ -z "$LATENCY" ] && LATENCY=$art
    fi
  done
  if [ -n "$LATENCY" ]; then
    step "repo build --latency-instances 1" - "${TRITONIZE[@]}" repo build "$OUT/models-latency" --artifacts "$LATENCY" \
      --force --latency-instances 1
    step "repo check (instance_group.profile)" - "${TRITONIZE[@]}" repo check "$OUT/models-latency" --artifacts "$LATENCY" \
      --triton-release "$RELEASE"
    "${TRITONIZE[@]}" serve "$OUT/models-latency" --engine docker --triton-release "$RELEASE" --http-port "$HTTP" \
      --grpc-port "$GRPC" --metrics-port "$METRICS" --ready-timeout 900 >"$OUT/logs/serve-latency.log" 2>&1 &
    SERVER=$!
    step "serve (latency profile)" - bash -c "for i in \$(seq 900); do grep -q 'trt_model *READY' '$OUT/logs/serve-latency.log' && exit 0; kill -0 $SERVER 2>/dev/null || exit 1; sleep 1; done; exit 1"
    step "client compare (latency profile)" - "${TRITONIZE[@]}" client compare "$IMAGES"/* --models onnx_model,trt_model \
      --min-top1-agreement 0.9 --url "127.0.0.1:$GRPC"
    step "client perf (batch 2, latency instances)" - "${TRITONIZE[@]}" client perf --models trt_model "${PERF_LATENCY[@]}" \
      --url "127.0.0.1:$GRPC" --output-dir "$OUT/perf-latency"
    kill -TERM "$SERVER" 2>/dev/null
    wait "$SERVER" 2>/dev/null
  fi
else
  ROWS+=("| serve / compare / perf | FAIL | - | no builder produced a plan |")
  UNEXPECTED=1
fi

{
  echo
  echo "| step | result | seconds | detail |"
  echo "|---|---|---|---|"
  printf '%s\n' ${ROWS[@]+"${ROWS[@]}"}
  echo
  echo "Logs: $OUT/logs/; each plan's manifest entry (verification figures, GPU, TensorRT version): $OUT/art-*/manifest.json;"
  echo "perf CSV and plot: $OUT/perf/."
} >>"$REPORT"
echo "report: $REPORT"
exit $UNEXPECTED
