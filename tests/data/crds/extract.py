"""Write one CRD version's openAPIV3Schema as compact JSON (sorted keys), the form kept here.

    python extract.py CRD.yaml VERSION OUT.json [--trim-inferenceservice]

--trim-inferenceservice keeps the InferenceService schema small (KServe's is 637 KB): every field
tritonize writes keeps its full schema (spec.predictor with `model`, replica counts, the service account);
these are replaced by open objects, `{"type": "object", "x-kubernetes-preserve-unknown-fields": true}`:
spec.canary/explainer/transformer, status, and in spec.predictor the pod-level fields and
per-framework containers a triton predictor does not use (TRIMMED_PREDICTOR_FIELDS).
"""

import json
import sys

import yaml

OPEN = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
TRIMMED_PREDICTOR_FIELDS = ("workerSpec", "volumes", "initContainers", "containers", "affinity", "xgboost", "triton",
                            "tensorflow", "sklearn", "pytorch", "pmml", "paddle", "onnx", "lightgbm", "huggingface")


def main(crd_path: str, version: str, out: str, trim: bool = False) -> None:
    with open(crd_path) as f:
        crd = yaml.safe_load(f)
    schema = next(v for v in crd["spec"]["versions"] if v["name"] == version)["schema"]["openAPIV3Schema"]
    if trim:
        spec = schema["properties"]["spec"]["properties"]
        for name in ("canary", "explainer", "transformer"):
            spec[name] = dict(OPEN)
        schema["properties"]["status"] = dict(OPEN)
        for name in TRIMMED_PREDICTOR_FIELDS:
            spec["predictor"]["properties"][name] = dict(OPEN)
    with open(out, "w") as f:
        f.write(json.dumps(schema, separators=(",", ":"), sort_keys=True) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:4], trim="--trim-inferenceservice" in sys.argv[4:])
