"""The search's decisions on a given performance landscape (what each config serves at each concurrency),
without a server: which config wins, where a sweep stops, when a lead is believed, budget and resuming."""

from __future__ import annotations

import time

import pytest
from tritonclient.grpc import model_config_pb2 as pb

from tritonize.tune.search import Candidate, Search, Space, Trial, TuneOptions, baseline

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


class Landscape:
    def __init__(self, lie_in_checks: bool = False):
        self.calls: list[tuple] = []
        self.lie_in_checks = lie_in_checks  # the sweep's lead is noise: back to back, the challenger is slower

    def __call__(self, candidate: Candidate, concurrency: int, round_: int, phase: str) -> Trial:
        self.calls.append((phase, candidate.key, concurrency, round_))
        rate, p99 = throughput_of(candidate, concurrency)
        if self.lie_in_checks and phase == "check" and candidate.instances == 2:
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
