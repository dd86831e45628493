"""Every PromQL expression the project ships, in one place: Triton's metric names, the recording rules
and the alerts. The rules file, the Grafana dashboard, `monitor --serve` and the screenshot in docs/monitoring.md
read them from here.

Triton 2.51 exports cumulative counters per model and version (no `_total` suffix; durations in
microseconds) and machine-wide CPU and memory gauges. The rules never aggregate target labels away:
`rate()` keeps every label and only `reason` is summed out of the failure counter, so series scraped
from Kubernetes pods keep their `namespace` and `pod` labels, which an HPA on a custom metric needs.
Every rule reads one scrape job's series (`job`: "triton" in the monitoring bundle, a PodMonitor's
"<namespace>/<name>" on Kubernetes), so the rule groups of two deployments never write the same series.
"""

from __future__ import annotations

from dataclasses import dataclass

# Triton's metric families (tritonserver --metrics-port, 2.51).
SUCCESS = "nv_inference_request_success"  # requests; a batch-8 request counts 1
FAILURE = "nv_inference_request_failure"  # requests, by `reason` (OTHER, BACKEND, CANCELED, REJECTED)
INFERENCES = "nv_inference_count"  # images; a batch-8 request counts 8
EXECUTIONS = "nv_inference_exec_count"  # batches the server ran
REQUEST_US = "nv_inference_request_duration_us"  # end to end inside the server
QUEUE_US = "nv_inference_queue_duration_us"
COMPUTE_INPUT_US = "nv_inference_compute_input_duration_us"
COMPUTE_INFER_US = "nv_inference_compute_infer_duration_us"
COMPUTE_OUTPUT_US = "nv_inference_compute_output_duration_us"
PENDING = "nv_inference_pending_request_count"  # gauge: requests waiting now
CPU_UTILIZATION = "nv_cpu_utilization"  # gauge 0-1, the whole machine's
CPU_MEMORY_USED = "nv_cpu_memory_used_bytes"  # gauge, the whole machine's (not the server's RSS)
CPU_MEMORY_TOTAL = "nv_cpu_memory_total_bytes"

JOB = "triton"  # the scrape job of the Triton metrics endpoints in prometheus.yml
WINDOW = "1m"  # needs at least two scrapes: keep the scrape interval at 30 s or less


def rate(metric: str, job: str = JOB) -> str:
    return f'rate({metric}{{job="{job}"}}[{WINDOW}])'


def per_request(metric: str, job: str = JOB) -> str:
    """Average per successful request; no series while a model has no requests (rather than NaN).
    Failed executions add no duration (measured), so successes are the right denominator."""
    return f"{rate(metric, job)} / ({rate(SUCCESS, job)} > 0)"


@dataclass(frozen=True)
class RecordingRule:
    record: str
    expr: str


@dataclass(frozen=True)
class Alert:
    name: str
    expr: str
    duration: str  # Prometheus' `for:`
    severity: str
    summary: str  # Prometheus template


REQUEST_RATE = "model:nv_inference_request:rate1m"
FAILURE_RATE = "model:nv_inference_request_failure:rate1m"
INFERENCE_RATE = "model:nv_inference_count:rate1m"
REQUEST_AVG = "model:nv_inference_request_duration_us:avg1m"
QUEUE_AVG = "model:nv_inference_queue_duration_us:avg1m"
COMPUTE_INPUT_AVG = "model:nv_inference_compute_input_duration_us:avg1m"
COMPUTE_INFER_AVG = "model:nv_inference_compute_infer_duration_us:avg1m"
COMPUTE_OUTPUT_AVG = "model:nv_inference_compute_output_duration_us:avg1m"
QUEUE_COMPUTE_RATIO = "model:nv_inference_queue_compute:ratio1m"
BATCH_SIZE = "model:nv_inference_batch_size:avg1m"

def recording_rules(job: str = JOB) -> tuple[RecordingRule, ...]:
    """The recording rules over the series of scrape job `job`."""
    failures = f"sum without (reason) ({rate(FAILURE, job)})"
    return (
        RecordingRule(REQUEST_RATE, f"{rate(SUCCESS, job)} + {failures}"),  # requests/s, succeeded or failed
        RecordingRule(FAILURE_RATE, failures),
        RecordingRule(INFERENCE_RATE, rate(INFERENCES, job)),  # images/s
        RecordingRule(REQUEST_AVG, per_request(REQUEST_US, job)),  # us in the server per request
        RecordingRule(QUEUE_AVG, per_request(QUEUE_US, job)),
        RecordingRule(COMPUTE_INPUT_AVG, per_request(COMPUTE_INPUT_US, job)),
        # Every request of a batch records the whole execution: this is the time of the batch it ran in.
        RecordingRule(COMPUTE_INFER_AVG, per_request(COMPUTE_INFER_US, job)),
        RecordingRule(COMPUTE_OUTPUT_AVG, per_request(COMPUTE_OUTPUT_US, job)),
        # Queue time / compute time, above 1 when the model cannot keep up: the signal NVIDIA's Triton
        # autoscaling tutorial scales on (triton:queue_compute:ratio), in its form. clamp_min(..., 1) only
        # bites below 1 us of compute per second, i.e. when idle, where it gives 0 instead of no series,
        # so an HPA still sees the metric and can scale down.
        RecordingRule(QUEUE_COMPUTE_RATIO, f"{rate(QUEUE_US, job)} / clamp_min({rate(COMPUTE_INFER_US, job)}, 1)"),
        RecordingRule(BATCH_SIZE, f"{rate(INFERENCES, job)} / ({rate(EXECUTIONS, job)} > 0)"),  # inferences / executions
    )


RECORDING_RULES = recording_rules()


def alerts(queue_alert_us: float, job: str = JOB) -> tuple[Alert, ...]:
    """The alerts on scrape job `job` (its recording rules' series and its targets)."""
    return (
        Alert("TritonModelFailingRequests", f'{FAILURE_RATE}{{job="{job}"}} > 0', "1m", "warning",
              "{{ $labels.model }} v{{ $labels.version }} on {{ $labels.instance }} fails "
              "{{ $value | humanize }} requests/s"),
        Alert("TritonQueueTimeHigh", f'{QUEUE_AVG}{{job="{job}"}} > {queue_alert_us:g}', "5m", "warning",
              "{{ $labels.model }} requests on {{ $labels.instance }} wait {{ $value | humanize }}us "
              "in the queue on average"),
        Alert("TritonServerDown", f'up{{job="{job}"}} == 0', "1m", "critical",
              "Triton metrics endpoint {{ $labels.instance }} does not answer"),
    )


def selector(metric: str, **matchers: str) -> str:
    """`metric{label=~"regex", ...}`."""
    inside = ", ".join(f'{label}=~"{regex}"' for label, regex in matchers.items())
    return f"{metric}{{{inside}}}" if inside else metric
