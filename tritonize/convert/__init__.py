"""Convert stage: the ONNX export -> a TensorRT plan with one batch profile, precision prepared
(FP16 mixed precision, INT8 Q/DQ) and verified on the CPU first, a `convert.sh` reproducer always.

    convert_trt(artifacts_dir, ConvertOptions(profile=Profile(1, 16, 32), precision="fp16"))
"""

from tritonize.convert.options import BuilderName, ConvertOptions, Precision, Profile
from tritonize.convert.trt import convert_trt

__all__ = ["BuilderName", "ConvertOptions", "Precision", "Profile", "convert_trt"]
