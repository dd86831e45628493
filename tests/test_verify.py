"""verify.py on hand-made arrays whose answers are known."""

from __future__ import annotations

import numpy as np
import pytest

from tritonize.verify import FP32, Tolerance, VerificationReport, compare, verification_batches, verify_runner


def _reference(batch: int = 4, classes: int = 12) -> np.ndarray:
    """Logits with max |value| 100 (the scale) and a mean |value| far below it; sample i's top-1 is class i."""
    ref = np.full((batch, classes), 1.0)
    for i in range(batch):
        ref[i, i] = 50.0
    ref[0, -1] = -100.0  # the largest magnitude is negative: the scale is max |reference|, not max reference
    return ref


def test_identical_outputs_pass_with_zero_error():
    ref = _reference()
    c = compare(ref, ref.copy())
    assert c.passed and c.max_abs == 0 and c.rel_to_scale == 0 and c.top1_agreement == 1.0 and c.top5_overlap == 1.0
    assert c.scale == 100.0


@pytest.mark.parametrize("error, passed", [(0.9e-4, True), (1.1e-4, False)])
def test_error_is_judged_relative_to_the_largest_magnitude(error, passed):
    ref = _reference()
    candidate = ref.copy()
    candidate[2, 5] += error * 100.0  # the scale is 100
    c = compare(ref, candidate)
    assert c.rel_to_scale == pytest.approx(error) and c.passed is passed
    # Judged against the mean |value| instead, even the small error would fail.
    assert error * 100.0 / np.abs(ref).mean() > FP32.max_rel_to_scale


def test_a_flipped_top1_fails_even_within_the_numeric_tolerance():
    ref = _reference()
    ref[1, 3] = ref[1, 1] - 1e-4  # a near tie with the top-1 class
    candidate = ref.copy()
    candidate[1, 3] += 2e-4  # 2e-6 of the scale: far inside the numeric tolerance
    c = compare(ref, candidate)
    assert c.rel_to_scale < FP32.max_rel_to_scale
    assert c.top1_agreement == 0.75 and not c.passed
    assert compare(ref, candidate, Tolerance(max_rel_to_scale=1e-4, min_top1_agreement=0.75)).passed


def test_non_finite_outputs_fail():
    ref = _reference()
    candidate = ref.copy()
    candidate[0, 0] = np.inf
    c = compare(ref, candidate)
    assert not c.finite and not c.passed and c.top1_agreement == 0.0


def test_shape_mismatch_is_an_error():
    from tritonize.errors import TritonizeError

    with pytest.raises(TritonizeError, match="output shapes differ"):
        compare(_reference(4), _reference(3))


def test_batch_invariance_compares_batches_with_each_other():
    """Each batch is within tolerance of the reference, but batch 1 and batch 4 differ by twice as much:
    only a comparison between the batches themselves sees it."""
    ref = _reference(4)
    offset = 0.9e-4 * 100.0

    def run(batch: np.ndarray) -> np.ndarray:
        return ref[: len(batch)] + (offset if len(batch) == 1 else -offset)

    report = verify_runner(run, np.zeros((4, 1)), ref, batches=[1, 4])
    assert all(c.passed for c in report.batches.values())
    assert report.invariance_rel_to_scale == pytest.approx(1.8e-4, rel=1e-3)
    assert not report.invariance_passed and not report.passed


def test_report_round_trips_through_the_manifest_form():
    ref = _reference(8)
    report = verify_runner(lambda b: ref[: len(b)], np.zeros((8, 1)), ref, described="hand-made")
    assert sorted(report.batches, key=int) == ["1", "7", "8"] and report.passed
    data = report.to_dict()
    assert data["inputs"] == "hand-made" and data["batch_invariance"] == {"max_rel_to_scale": 0.0, "passed": True}
    assert VerificationReport.from_dict(data) == report


def test_verification_batches_are_one_odd_and_max():
    assert verification_batches(32) == [1, 7, 32]
    assert verification_batches(8) == [1, 7, 8]
    assert verification_batches(4) == [1, 3, 4]
    assert verification_batches(1) == [1]
