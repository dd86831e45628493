"""Convert stage: the ONNX export -> a TensorRT plan with one batch profile, precision prepared
(FP16 mixed precision, INT8 Q/DQ) and verified on the CPU first, a `convert.sh` reproducer always.

    convert_trt(artifacts_dir, ConvertOptions(profile=Profile(1, 16, 32), precision="fp16"))

Its names are imported on first use: the manifest reads convert/settings.py (a plan's recorded settings) without
importing the stage.
"""

__all__ = ["BuilderName", "ConvertOptions", "Precision", "Profile", "convert_trt"]


def __getattr__(name: str):
    if name == "convert_trt":
        from tritonize.convert.trt import convert_trt

        return convert_trt
    if name in __all__:
        from tritonize.convert import options

        return getattr(options, name)
    raise AttributeError(f"module 'tritonize.convert' has no attribute {name!r}")
