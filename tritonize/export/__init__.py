"""Export stage: torchvision model -> TorchScript `model.pt` and ONNX `model.onnx`, each verified
against PyTorch eager before it is published, and recorded in the manifest.

    export_artifacts(spec, out, formats=("torchscript", "onnx"))
"""

from tritonize.export.exporter import ExportOptions, export_artifacts

__all__ = ["ExportOptions", "export_artifacts"]
