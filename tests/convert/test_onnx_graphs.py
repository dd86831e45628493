"""The converter's ONNX readers on graphs as real exporters write them (tests/onnx_exports.py): `convert trt --onnx`'s
network_from_onnx reads a network's names and shape as onnxruntime's session does, or refuses it in one line; the
TensorRT 8 opset gate reads the opset each exporter wrote."""

from __future__ import annotations

import pytest
from tritonclient.grpc import model_config_pb2 as pb

from tests.onnx_exports import EXPORTS, ONNX_TEST_MODELS, onnx_test_model, write
from tests.repository_builder.test_check_onnx_graphs import session_view
from tritonize.convert.engine import check_opset
from tritonize.convert.network import network_from_onnx
from tritonize.convert.prepare import TENSORRT_8_OPSET
from tritonize.errors import TritonizeError


@pytest.mark.parametrize("export", EXPORTS)
def test_network_from_onnx_reads_an_export_as_onnxruntime_does(export, tmp_path):
    path = write(export, tmp_path)
    view = session_view(path.read_bytes())
    (input_name, _, input_dims), = view["input"]
    (output_name, _, _), = view["output"]
    if "fixed-batch" in export:
        with pytest.raises(TritonizeError, match=r"has a static batch axis \(input 'input' is \[2, 3, 8, 8\]\)"):
            network_from_onnx(path)
        return
    network = network_from_onnx(path)  # (the weights of weights-as-inputs are not inputs)
    assert (network.input_name, network.output_name, list(network.input_shape)) == (input_name, output_name, input_dims[1:])


@pytest.mark.parametrize("export", EXPORTS)
def test_the_tensorrt_8_opset_gate_reads_the_opset_each_exporter_wrote(export, tmp_path):
    path = write(export, tmp_path)
    opset = int(export.split("-")[1])
    check_opset("trtexec", "10.5.0.18", path)  # TensorRT 10's parser reads them all
    if opset <= TENSORRT_8_OPSET:
        check_opset("trtexec", "8.6.3.1", path)
    else:
        with pytest.raises(TritonizeError, match=f"misreads {path.name} \\(opset {opset}\\)"):
            check_opset("trtexec", "8.6.3.1", path)


@pytest.mark.parametrize("name", ONNX_TEST_MODELS)
def test_a_graph_from_elsewhere_is_read_or_refused_in_one_line(name, tmp_path):
    """onnx's test models have a fixed batch, several inputs or an int64 input: refused, each saying why."""
    path = onnx_test_model(name)
    view = session_view(path.read_bytes())
    with pytest.raises(TritonizeError) as refused:
        network_from_onnx(path)
    message = str(refused.value)
    assert "\n" not in message
    if len(view["input"]) != 1 or len(view["output"]) != 1:
        assert message.endswith("tritonize converts networks with one input and one output")
        assert str([n for n, _, _ in view["input"]]) in message
    elif view["input"][0][1] != pb.TYPE_FP32:
        assert "tritonize converts networks with an FP32 input" in message
    else:
        assert f"has a static batch axis (input {view['input'][0][0]!r} is {view['input'][0][2]})" in message
