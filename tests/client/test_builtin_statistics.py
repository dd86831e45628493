"""The built-in load generator's server-side figures count exactly the window's requests.

Triton records a request's statistics when it releases the request, which can be just after the client has its
response: against the real embedded server, 11 reads in 100 made right after a response did not count it yet. The
load generator must wait for the statistics to count what it has answered, or the warm-up's (slow, cold) requests land in
the window and the window's last ones in the next level (the real-server test saw a server compute time above the
client's own latency that way, under load)."""

from types import SimpleNamespace

from tritonize.client.load import Window
from tritonize.client.perf import PerfOptions, PerfReport
from tritonize.client.perf.load_generators import BuiltinGenerator

WARM_NS, WINDOW_NS = 900_000_000, 10_000_000  # a cold warm-up request, a warm one


class LaggingServer:
    """Statistics that show an answered request only from the second read after it was answered."""

    def __init__(self):
        self.answered: list[int] = []  # compute ns of each answered request
        self.shown = 0

    def statistics(self, name):
        done = self.answered[:self.shown]
        self.shown = len(self.answered)
        n, ns = len(done), sum(done)
        return {"success": (n, ns), "queue": (n, 0), "compute_input": (n, 0), "compute_infer": (n, ns),
                "compute_output": (n, 0), "executions": (n, n)}


class Load:
    def __init__(self, server):
        self.server = server

    def run(self, concurrency, warmup, seconds, count, limit, between):
        self.server.answered += [WARM_NS] * (concurrency * warmup)
        between()
        self.server.answered += [WINDOW_NS] * count
        return Window([(0.0, 0.02)] * count, 0.1, 0, None, count)


def test_the_window_counts_its_own_requests_when_the_statistics_lag():
    server = LaggingServer()
    generator = object.__new__(BuiltinGenerator)
    generator.connection, generator.load, generator.regions = server, Load(server), None
    generator.workload = SimpleNamespace(info=SimpleNamespace(name="m", path="client", steps=(), classifier="m"),
                                         model="m", batch=[0], transport="grpc", tensor_bytes_on_wire=0)
    level = generator.measure(2, PerfOptions(requests=6, duration=None, warmup=1))
    assert level.requests == 6
    assert level.server_us["compute_infer"] == WINDOW_NS / 1e3  # not the warm-up's 900 ms


class ReloadingServer:
    """A model reloaded in the middle of the window (its stub crashed, the supervisor loaded it again): its counters
    start again from zero and, by the window's end, count more requests than before the window, at other times."""

    def __init__(self):
        self.answered: list[int] = []  # compute ns of each request the model's current load answered

    def statistics(self, name):
        n, ns = len(self.answered), sum(self.answered)
        return {"success": (n, ns), "queue": (n, 0), "compute_input": (n, 0), "compute_infer": (n, ns),
                "compute_output": (n, 0), "executions": (n, n)}


class ReloadingLoad(Load):
    def run(self, concurrency, warmup, seconds, count, limit, between):
        self.server.answered += [WARM_NS] * 100  # a server that has been serving a while
        between()
        self.server.answered += [WINDOW_NS] * 10
        self.server.answered = [WINDOW_NS] * (count - 10)  # reloaded: counting from zero again
        return Window([(0.0, 0.02)] * count, 0.1, 1, "UNAVAILABLE: Stub process 'm_0_0' is not healthy.", count)


def _numbers(value):
    if isinstance(value, dict):
        for item in value.values():
            yield from _numbers(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _numbers(item)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        yield value


def test_a_level_with_a_reload_in_it_says_so_and_records_no_server_time(monkeypatch):
    """The statistics of a reloaded model start again: the difference across the window was recorded as it came
    (`compute_infer: -4094249.1` in perf.json after a stub crash mid-level). The split is unknown, and the level says why."""
    import tritonize.client.perf.load_generators as generators

    monkeypatch.setattr(generators, "RECORD_WAIT_S", 0.05)  # the counts never catch up: do not wait 2 s for them
    server = ReloadingServer()
    generator = object.__new__(BuiltinGenerator)
    generator.connection, generator.load, generator.regions = server, ReloadingLoad(server), None
    generator.workload = SimpleNamespace(info=SimpleNamespace(name="m", path="client", steps=(), classifier="m"),
                                         model="m", batch=[0], transport="grpc", tensor_bytes_on_wire=0)
    level = generator.measure(2, PerfOptions(requests=300, duration=None, warmup=1))
    assert level.requests == 300 and level.failures == 1
    assert min(_numbers(level.to_dict())) >= 0, level.server_us
    assert level.server_us is None and level.server_batches is None
    assert level.server_note == "the statistics of m started again during the level (it was reloaded): the server's " \
                                "split of the time is unknown"
    assert "m at concurrency 2: the statistics of m started again" in PerfReport("u", PerfOptions(), levels=[level]).to_text()
