"""The search's decisions on a given performance landscape (what each config serves at each concurrency),
without a server: which config wins, where a sweep stops, when a lead is believed, budget and resuming."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from tritonclient.grpc import model_config_pb2 as pb

from tritonize.tune.search import Candidate, Search, Space, Trial, TuneOptions, baseline, median_trial

BUDGET_MS = 100.0


def base_config() -> pb.ModelConfig:
    cfg = pb.ModelConfig(name="onnx_model", platform="onnxruntime_onnx", max_batch_size=32)
    cfg.instance_group.add(count=1, kind=pb.ModelInstanceGroup.KIND_CPU)
    cfg.dynamic_batching.max_queue_delay_microseconds = 100
    cfg.dynamic_batching.preferred_batch_size.extend([4, 8, 16, 32])
    return cfg


def throughput_of(candidate: Candidate, concurrency: int) -> tuple[float, float]:
    """A landscape: 2 instances x 1 thread serve most; a 1 ms queue delay helps a little; more clients raise
    throughput until 4, and latency follows Little's law (throughput, p99 ms)."""
    rate = {(1, 2): 60.0, (1, 1): 45.0, (2, 1): 80.0, (2, 2): 70.0}[(candidate.instances, candidate.threads)]
    rate *= 1.1 if candidate.queue_delay_us == 1000 else 1.0
    rate *= min(concurrency, 4) / 4
    return rate, 1000 * concurrency / rate * 1.2


DEFAULT_KEY = "i1_t2_d100_p4-8-16-32"  # base_config() as a candidate, on 2 cores


class Landscape:
    def __init__(self, lie_in_checks: bool = False):
        self.calls: list[tuple] = []
        self.lie_in_checks = lie_in_checks  # the sweeps' leads are noise: back to back, every challenger is slower

    def __call__(self, candidate: Candidate, concurrency: int, round_: int, phase: str) -> Trial:
        self.calls.append((phase, candidate.key, concurrency, round_))
        rate, p99 = throughput_of(candidate, concurrency)
        if self.lie_in_checks and phase == "check" and candidate.key != DEFAULT_KEY:
            rate *= 0.5
        return Trial(phase, candidate.key, candidate.instances, candidate.threads, candidate.queue_delay_us,
                     "-".join(map(str, candidate.preferred)) or "none", concurrency, round_, rate, p99 / 2, p99 * 0.8,
                     p99, p99 / 2, 0.0, 0.0, 1.0, 100, "test landscape", "now")


def search(measure, space=None, budget_s=600.0) -> Search:
    options = TuneOptions(model="onnx_model", p99_ms=BUDGET_MS, duration=1.0)
    space = space or Space(instances=(1, 2), threads=(1, 2), queue_delay_us=(0, 100, 1000), preferred=((), (4, 8, 16, 32)),
                           concurrency=(1, 2, 4, 8))
    base = base_config()
    return Search(options, base, baseline(base, cores=2), space, measure, deadline=time.monotonic() + budget_s)


def test_the_winner_is_the_highest_throughput_within_the_p99_budget():
    landscape = Landscape()
    s = search(landscape)
    winner = s.run()
    assert (winner.instances, winner.threads, winner.queue_delay_us) == (2, 1, 1000)
    throughput, concurrency = s.scores[winner.key]
    assert concurrency == 4 and throughput == pytest.approx(88.0)  # c8 would serve no more and break the budget
    # A sweep stops at the first level over the budget: the winner's c8 (109 ms); 1 x 1 thread is over at c1.
    assert ("search", winner.key, 8, 0) in landscape.calls
    assert [c[2] for c in landscape.calls if c[1] == "i1_t1_d100_p4-8-16-32"] == [1]
    assert s.default == Candidate(1, 2, 100, (4, 8, 16, 32)) and s.scores[s.default.key] == (60.0, 4)
    confirm = s.confirm(winner)
    assert len(confirm["default"]) == len(confirm["winner"]) == 2


def test_a_lead_that_does_not_hold_back_to_back_is_not_taken():
    s = search(Landscape(lie_in_checks=True))
    winner = s.run()
    assert winner.instances == 1 and s.checks >= 1


def test_the_budget_bounds_the_search_and_the_same_trials_resume_it():
    first = Landscape()
    bounded = search(first, budget_s=0.0)
    assert bounded.run() == bounded.default and bounded.stopped and not first.calls

    complete = search(first)
    winner = complete.run()
    complete.confirm(winner)
    again = Landscape()
    resumed = search(again)
    resumed.cached = {(t.phase, t.config, t.concurrency, t.round): t for t in complete.trials}
    assert resumed.run() == winner and resumed.confirm(winner) and not again.calls  # nothing measured twice

    wider = Space(instances=(1, 2), threads=(1, 2), queue_delay_us=(0, 100, 1000, 5000), preferred=((), (4, 8, 16, 32)),
                  concurrency=(1, 2, 4, 8))
    extended = search(again, space=wider)
    extended.cached = {(t.phase, t.config, t.concurrency, t.round): t for t in complete.trials}
    extended.run()
    assert again.calls and {c[1] for c in again.calls if c[0] == "search"} == {"i2_t1_d5000_p4-8-16-32"}


class Clock:
    """Time as the measurements spend it: each trial costs its window and the overhead tune budgets for it."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def timed(landscape, clock: Clock, duration: float = 1.0):
    from tritonize.tune.search import OVERHEAD_S

    def measure(candidate, concurrency, round_, phase):
        clock.now += duration + OVERHEAD_S
        return landscape(candidate, concurrency, round_, phase)
    return measure


RESERVE_S = 34.0  # what tune keeps for the final back-to-back comparison at --duration 1 (2 rounds x 2 x 8.5 s)


def budgeted(landscape, budget_s: float) -> tuple[Search, Clock]:
    clock = Clock()
    s = search(timed(landscape, clock))
    s.clock, s.deadline, s.reserve = clock, clock.now + budget_s, RESERVE_S
    return s, clock


@pytest.mark.parametrize("budget_s", [64.0, 30.0])
def test_a_config_that_served_more_than_the_default_wins_whatever_the_budget_left(budget_s):
    """2 x 1 thread serves 80 infer/s within the p99 budget (at concurrency 4), the default 60. With 64 s, the time
    kept for the final comparison used to end the search in 2 x 1's sweep; it is kept only once a challenger
    leads: the sweep ends, the check runs, 2 x 1 wins and is confirmed. With 30 s the budget ends in that sweep
    (8 trials of 3.5 s: the default's 4, 1 x 1's 1, 2 x 1's first 3): 2 x 1 is still the best measured, and the
    report says it was not measured back to back. Never "the default config is the best found"."""
    from tritonize.tune.report import to_text
    from tritonize.tune.run import TuneResult

    landscape = Landscape()
    s, clock = budgeted(landscape, budget_s)
    winner = s.run()
    assert (winner.instances, winner.threads) == (2, 1) and s.scores[winner.key] == (80.0, 4)
    confirm = s.confirm(winner)
    result = TuneResult("onnx_model", s.options, "test landscape", Path("config.pbtxt"), s.default, winner,
                        dict(s.scores), {k: median_trial(v) for k, v in confirm.items() if v}, s.stopped,
                        verdict=s.verdict(winner))
    text = to_text(result)
    assert "the default config is the best found" not in text
    if budget_s == 30.0:
        assert [c[1:3] for c in landscape.calls[-3:]] == [("i2_t1_d100_p4-8-16-32", n) for n in (1, 2, 4)]
        assert ("2 instance(s) x 1 threads, queue delay 100 us, preferred 4,8,16,32 served 80.0 infer/s within p99 "
                "100 ms in its sweep, the default 60.0; the budget ended before they were measured back to back") in text
    else:
        assert s.checks == 1 and len(confirm["winner"]) == 2 and "winner / default, measured back to back: 1.33x" in text


def test_the_search_spends_the_budget_the_confirmation_would_have_needed_while_the_default_holds():
    """Nothing beats the default back to back: the final comparison is not needed, so the search goes on into the
    time kept for it, and leaves less than one trial of the budget unspent."""
    landscape = Landscape(lie_in_checks=True)
    s, clock = budgeted(landscape, budget_s=60.0)
    assert s.run() == s.default and s.stopped
    assert s.deadline - clock.now < 1.0 + 2.5  # one trial's cost
    assert len(landscape.calls) > (60.0 - RESERVE_S) // 3.5


def test_the_default_stays_only_with_the_reason_when_a_measured_config_served_more():
    s = search(Landscape(lie_in_checks=True))
    winner = s.run()
    assert winner == s.default
    assert s.verdict(winner) == ("the default stays: 2 instance(s) x 1 threads, queue delay 100 us, preferred 4,8,16,32 "
                                 "served 80.0 infer/s in its sweep, the default 60.0, but not 3 % more back to back")
    fastest = search(Landscape(), space=Space(instances=(1,), threads=(1, 2), queue_delay_us=(100,),
                                               preferred=((4, 8, 16, 32),), concurrency=(1, 2, 4, 8)))
    assert fastest.run() == fastest.default
    assert fastest.verdict(fastest.default) == "the default config is the best found"


def test_the_winners_star_is_drawn_on_top_of_the_defaults_marker(tmp_path):
    """When the default wins, both markers are at one point: the star above, the diamond hollow around it."""
    from tritonize.tune.report import search_figure
    from tritonize.tune.run import TuneResult

    s = search(Landscape(lie_in_checks=True))
    winner = s.run()
    result = TuneResult("onnx_model", s.options, "test landscape", Path("config.pbtxt"), s.default, winner,
                        dict(s.scores), {}, s.stopped, verdict=s.verdict(winner))
    figure = search_figure(result, s.trials)
    markers = {c.get_label().split(":")[0]: c for c in figure.axes[0].collections if c.get_label()[:7] in ("default", "winner:")}
    default, star = markers["default"], markers["winner"]
    assert (default.get_offsets() == star.get_offsets()).all()  # the same point
    assert star.get_zorder() > default.get_zorder() and not default.get_facecolor()[..., 3].any()  # on top; a hollow diamond
