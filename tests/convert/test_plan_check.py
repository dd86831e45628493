"""The plan check's name rule: the engine's I/O must be exactly what its builder says, because the
manifest records those names and `repo build` serves them."""

from __future__ import annotations

import pytest

from tritonize.convert.plan_check import check_engine_io
from tritonize.errors import TritonizeError


def test_engine_names_match():
    check_engine_io(["input_0"], ["output_0"], ("input_0", "output_0"))


@pytest.mark.parametrize("inputs,outputs", [(["input_0"], ["output_0"]), (["input"], ["output", "extra"]), ([], ["output"])])
def test_other_names_are_refused(inputs, outputs):
    with pytest.raises(TritonizeError, match="the plan has inputs"):
        check_engine_io(inputs, outputs, ("input", "output"))
