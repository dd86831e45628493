"""Export stage: torchvision model -> TorchScript `model.pt`, ONNX `model.onnx` (and, when asked, torch.export's
`model.pt2`), each verified against PyTorch eager before it is published, and recorded in the manifest.

    export_artifacts(spec, out, ExportOptions(formats=("torchscript", "onnx", "exported_program")))
"""

from tritonize import _callable_package
from tritonize.export.exporter import ExportOptions, export_artifacts

__all__ = ["ExportOptions", "export_artifacts"]
_callable_package(__name__)  # tritonize.export(model, ...) is tritonize.api.export
