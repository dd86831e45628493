"""The built-in load generator's server-side figures count exactly the window's requests.

Triton records a request's statistics when it releases the request, which can be just after the client has its
response: against the real embedded server, 11 reads in 100 made right after a response did not count it yet. The
load generator must wait for the statistics to count what it has answered, or the warm-up's (slow, cold) requests land in
the window and the window's last ones in the next level (the real-server test saw a server compute time above the
client's own latency that way, under load)."""

from types import SimpleNamespace

from tritonize.client.load import Window
from tritonize.client.perf import PerfOptions
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
    generator.workload = SimpleNamespace(info=SimpleNamespace(name="m", path="client"), model="m", batch=[0],
                                         transport="grpc", tensor_bytes_on_wire=0)
    level = generator.measure(2, PerfOptions(requests=6, duration=None, warmup=1))
    assert level.requests == 6
    assert level.server_us["compute_infer"] == WINDOW_NS / 1e3  # not the warm-up's 900 ms
