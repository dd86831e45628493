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


def test_outputs_are_kept_as_copies_when_the_runner_reuses_its_buffer():
    """Polygraphy's TrtRunner returns views of one host buffer per output, reused and resized by the next
    run (N2): a kept result must be a copy, or batch 1 is judged on batch 8's numbers."""
    buffer = np.zeros((0, 4), np.float32)

    def run(x):
        buffer.resize((len(x), 4), refcheck=False)
        buffer[:] = x.reshape(len(x), -1)[:, :4]
        return buffer

    x = np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32)
    report = verify_runner(run, x, x, FP32, batches=[1, 3, 8])
    assert report.passed and report.worst_rel_to_scale == 0.0 and report.invariance_rel_to_scale == 0.0


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


# ------------------------------------------------------------------ each rule alone fails a comparison


def test_the_finite_rule_alone_fails_a_comparison():
    """With no numeric bound at all, a NaN output still fails, and the NaN's row cannot agree on top-1."""
    ref = _reference()
    candidate = ref.copy()
    candidate[3, 0] = np.nan
    unbounded = Tolerance(max_rel_to_scale=float("inf"), min_top1_agreement=0.0)
    c = compare(ref, candidate, unbounded)
    assert not c.finite and not c.passed and c.max_abs == float("inf") and c.mean_kl == float("inf")
    assert compare(ref, ref + 1e3, unbounded).passed  # the same tolerance passes any finite output


def test_the_numeric_rule_alone_fails_a_comparison():
    """Same argmax everywhere, finite, but 1 % of the scale off."""
    ref = _reference()
    candidate = ref.copy()
    candidate[:, 6] += 1.0
    c = compare(ref, candidate, Tolerance(max_rel_to_scale=1e-4, min_top1_agreement=0.0))
    assert c.finite and c.top1_agreement == 1.0 and c.rel_to_scale == pytest.approx(0.01) and not c.passed
    assert c.max_abs == pytest.approx(1.0)


def test_the_top1_rule_alone_fails_a_comparison():
    ref = _reference()
    candidate = ref.copy()
    candidate[0, 0], candidate[0, 1] = 1.0, 50.0  # sample 0's top class moves: 49 is 49 % of the scale
    loose = Tolerance(max_rel_to_scale=1.0, min_top1_agreement=1.0)
    c = compare(ref, candidate, loose)
    assert c.finite and c.rel_to_scale == pytest.approx(0.49) and c.top1_agreement == 0.75 and not c.passed
    assert compare(ref, candidate, Tolerance(max_rel_to_scale=1.0, min_top1_agreement=0.75)).passed


def test_the_batch_rule_alone_fails_a_report():
    """Outputs identical at every batch size (invariant) but one batch off the reference."""
    ref = _reference(8)

    def run(batch):
        out = ref[: len(batch)].copy()
        if len(batch) == 8:
            out += 1.0  # 1 % of the scale, only in the largest batch
        return out

    report = verify_runner(run, np.zeros((8, 1)), ref, batches=[1, 8])
    assert not report.batches["8"].passed and report.batches["1"].passed
    assert not report.passed
    assert report.worst_rel_to_scale == pytest.approx(0.01)


@pytest.mark.parametrize("wrong", [(1,), (7,), (8,), (1, 7, 8)])
def test_any_one_batch_off_the_reference_fails_the_report(wrong):
    """The report passes only when every batch size passes: batch 1, the odd one and the largest each off alone (by
    the same 1 % of the scale in the same sample), and all of them."""
    ref = _reference(8)

    def run(batch):
        out = ref[: len(batch)].copy()
        if len(batch) in wrong:
            out[0, 3] += 1.0
        return out

    report = verify_runner(run, np.zeros((8, 1)), ref, batches=[1, 7, 8])
    assert {b: c.passed for b, c in report.batches.items()} == {str(b): b not in wrong for b in (1, 7, 8)}
    assert not report.passed and report.worst_rel_to_scale == pytest.approx(0.01)
    assert report.invariance_passed == (len(wrong) == 3)  # the same answer at every batch is invariant, if wrong


@pytest.mark.parametrize("odd_one_out", [1, 7])
def test_any_one_smaller_batch_differing_from_the_largest_breaks_invariance(odd_one_out):
    """Every batch within the tolerance of the reference (8e-4 of the scale, either way), but one smaller batch off the
    largest by twice that: the outputs depend on the batch, and the report fails; the other smaller batch, off the
    largest by 8e-4, is invariant enough."""
    ref = _reference(8)

    def run(batch):
        out = ref[: len(batch)].copy()
        if len(batch) == odd_one_out:
            out[0, 3] += 0.08
        elif len(batch) == 8:
            out[0, 3] -= 0.08
        return out

    report = verify_runner(run, np.zeros((8, 1)), ref, Tolerance(max_rel_to_scale=1e-3), batches=[1, 7, 8])
    assert all(c.passed for c in report.batches.values())
    assert not report.invariance_passed and not report.passed
    assert report.invariance_rel_to_scale == pytest.approx(1.6e-3)


def test_batch_invariance_is_measured_against_the_largest_batch_not_the_reference():
    """Every batch is off the reference by the same amount: each batch fails, yet the outputs do not depend
    on the batch, so invariance passes with zero difference."""
    ref = _reference(8)
    report = verify_runner(lambda b: ref[: len(b)] + 0.5, np.zeros((8, 1)), ref, batches=[1, 7, 8])
    assert report.invariance_passed and report.invariance_rel_to_scale == 0.0
    assert not report.passed and report.worst_rel_to_scale == pytest.approx(0.005)


def test_report_takes_the_worst_batch_of_each_figure():
    """Batch 1 has the worst numeric error, batch 4 the worst top-1 and top-5: each figure is that batch's."""
    row = np.array([50.0, 49.9, 10.0, 9.0, 7.0, 6.95, 1.0, -100.0])  # near ties at ranks 1/2 and 5/6
    ref = np.stack([row] * 4)

    def run(batch):
        out = ref[: len(batch)].copy()
        if len(batch) == 1:
            out[0, 6] += 2.0  # 2 % of the scale, no rank change
        else:
            out[3, 1] += 0.2  # sample 3: class 1 becomes the top-1
            out[3, 5] += 0.1  # and class 5 takes class 4's place in the top-5
        return out

    report = verify_runner(run, np.zeros((4, 1)), ref, Tolerance(max_rel_to_scale=1.0, min_top1_agreement=0.0),
                           batches=[1, 4])
    assert report.worst_rel_to_scale == pytest.approx(0.02)
    assert report.top1_agreement == 0.75
    assert report.top5_overlap == pytest.approx(1 - 0.2 / 4)
    assert report.passed  # the tolerance allows all of it
    assert report.summary() == "rel err 2.0e-02 of scale, top-1 75%, top-5 95%, batch-invariant yes"
    assert report.invariance_rel_to_scale == pytest.approx(0.02)  # batch 1's sample 0 against batch 4's


# ------------------------------------------------------------------ the figures themselves


def test_top5_overlap_counts_shared_classes_in_any_order():
    ref = np.arange(10, dtype=np.float64)[None].repeat(2, axis=0)  # top-5: 9, 8, 7, 6, 5
    candidate = ref.copy()
    candidate[0, [5, 9]] = candidate[0, [9, 5]]  # same five classes, another order
    candidate[1, 0] = 100.0  # class 0 enters the top-5, class 5 leaves it
    c = compare(ref, candidate, Tolerance(max_rel_to_scale=100.0, min_top1_agreement=0.0))
    assert c.top5_overlap == pytest.approx((1.0 + 0.8) / 2)
    assert c.top1_agreement == 0.0  # row 0's argmax is now 5, row 1's is 0


def test_fewer_than_five_classes_compare_over_all_of_them():
    ref = np.array([[3.0, 2.0, 1.0]])
    c = compare(ref, ref[:, ::-1].copy(), Tolerance(max_rel_to_scale=10.0, min_top1_agreement=0.0))
    assert c.top5_overlap == 1.0 and c.top1_agreement == 0.0 and c.max_abs == 2.0 and c.scale == 3.0


def test_kl_divergence_of_known_distributions():
    """KL(p || q) with p = softmax(log [0.5, 0.5]) and q = softmax(log [0.9, 0.1]): a known number."""
    ref = np.log(np.array([[0.5, 0.5]]))
    candidate = np.log(np.array([[0.9, 0.1]]))
    c = compare(ref, candidate, Tolerance(max_rel_to_scale=10.0, min_top1_agreement=0.0))
    expected = 0.5 * np.log(0.5 / 0.9) + 0.5 * np.log(0.5 / 0.1)
    assert c.mean_kl == pytest.approx(expected, rel=1e-12)
    assert compare(ref, ref.copy()).mean_kl == 0.0


def test_an_all_zero_reference_has_scale_one():
    """A zero scale would divide by zero: the error is then absolute."""
    ref = np.zeros((2, 4))
    c = compare(ref, ref + 5e-5)
    assert c.scale == 1.0 and c.rel_to_scale == pytest.approx(5e-5) and c.passed
    assert not compare(ref, ref + 2e-4, Tolerance(max_rel_to_scale=1e-4, min_top1_agreement=0.0)).passed


def test_outputs_are_compared_per_sample_whatever_their_shape():
    ref = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    c = compare(ref, ref.reshape(2, 12))
    assert c.batch == 2 and c.passed and c.top1_agreement == 1.0


def test_softmax_and_topk_known_answers():
    from tritonize.verify import softmax, topk

    p = softmax(np.array([[0.0, np.log(3.0)], [1000.0, 1000.0]]))  # no overflow at large logits
    np.testing.assert_allclose(p, [[0.25, 0.75], [0.5, 0.5]], rtol=1e-12)
    np.testing.assert_array_equal(topk(np.array([[0.1, 0.9, 0.5, 0.7]]), 3), [[1, 3, 2]])
    np.testing.assert_array_equal(topk(np.array([[0.1, 0.9]]), 5), [[1, 0]])


def test_verification_inputs_are_normalized_uniform_pixels():
    from tritonize.verify import verification_inputs

    x = verification_inputs((3, 4, 5), 2, mean=(0.5, 0.25, 0.0), std=(0.5, 0.25, 1.0), seed=3)
    pixels = np.random.default_rng(3).random((2, 3, 4, 5), dtype=np.float32)
    assert x.shape == (2, 3, 4, 5) and x.dtype == np.float32
    np.testing.assert_allclose(x[:, 0], (pixels[:, 0] - 0.5) / 0.5, rtol=1e-6)
    np.testing.assert_allclose(x[:, 1], (pixels[:, 1] - 0.25) / 0.25, rtol=1e-6)
    np.testing.assert_array_equal(x[:, 2], pixels[:, 2])
    np.testing.assert_array_equal(verification_inputs((3, 4, 5), 2, (0.5,) * 3, (0.5,) * 3, seed=3),
                                  verification_inputs((3, 4, 5), 2, (0.5,) * 3, (0.5,) * 3, seed=3))


@pytest.mark.parametrize("max_batch, expected", [(2, [1, 2]), (3, [1, 3]), (5, [1, 5]), (6, [1, 5, 6]),
                                                  (7, [1, 7]), (9, [1, 7, 9])])
def test_verification_batches_small_maxima(max_batch, expected):
    assert verification_batches(max_batch) == expected


def test_comparison_round_trips_rounded_to_nine_digits():
    from tritonize.verify import Comparison

    c = compare(_reference(), _reference() + 1 / 3)
    data = c.to_dict()
    assert data["max_abs"] == round(1 / 3, 9) and data["batch"] == 4 and data["passed"] is False
    assert Comparison.from_dict(data) == Comparison(**data)


def test_an_error_exactly_at_the_tolerance_passes():
    """Powers of two keep the figures exact: 2**-6 on a scale of 128 is exactly 2**-13."""
    ref = np.zeros((1, 4))
    ref[0, 0] = 128.0
    candidate = ref.copy()
    candidate[0, 1] = 2.0**-6
    assert compare(ref, candidate, Tolerance(max_rel_to_scale=2.0**-13)).passed
    assert not compare(ref, candidate, Tolerance(max_rel_to_scale=2.0**-14)).passed


def test_float32_outputs_are_compared_in_float64():
    """Near float32's limit the difference itself would overflow in float32."""
    ref = np.array([[3e38, 0.0]], dtype=np.float32)
    candidate = np.array([[-3e38, 0.0]], dtype=np.float32)
    c = compare(ref, candidate, Tolerance(max_rel_to_scale=10.0, min_top1_agreement=0.0))
    assert c.finite and c.max_abs == pytest.approx(6e38, rel=1e-6) and c.rel_to_scale == pytest.approx(2.0, rel=1e-6)


def test_kl_is_the_mean_over_samples_and_survives_underflow():
    """A probability that underflows to 0 (a logit 1000 below the top) gives a finite, large KL."""
    ref = np.array([[0.0, -1000.0], [0.0, 0.0]])
    candidate = np.array([[-1000.0, 0.0], [0.0, 0.0]])
    c = compare(ref, candidate, Tolerance(max_rel_to_scale=10.0, min_top1_agreement=0.0))
    assert np.isfinite(c.mean_kl) and c.mean_kl == pytest.approx(-np.log(1e-300) / 2)  # the second sample adds 0


def test_a_single_batch_has_nothing_to_be_invariant_against():
    ref = _reference(4)
    report = verify_runner(lambda b: ref[: len(b)], np.zeros((4, 1)), ref, batches=[4])
    assert report.invariance_passed and report.invariance_rel_to_scale == 0.0 and list(report.batches) == ["4"]


def test_summary_says_when_outputs_depend_on_the_batch():
    ref = _reference(4)
    report = verify_runner(lambda b: ref[: len(b)] + (1.0 if len(b) == 1 else 0.0), np.zeros((4, 1)), ref,
                           batches=[1, 4])
    assert report.summary() == "rel err 1.0e-02 of scale, top-1 100%, top-5 100%, batch-invariant NO"
    assert not report.invariance_passed and not report.passed
