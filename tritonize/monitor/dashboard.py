"""The dashboard's panels, as data, and the Grafana dashboard JSON made from them. The
screenshot in docs/monitoring.md (monitor/render.py) draws the same panels with matplotlib."""

from __future__ import annotations

from dataclasses import dataclass

from tritonize.monitor import promql as q

DATASOURCE_VARIABLE = "datasource"
UID = "tritonize-triton"

# Dashboard variables, as regex matchers on every query.
_MODEL = {"instance": "$instance", "model": "$model"}
_SERVER = {"instance": "$instance"}


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str  # Grafana legend format: {{label}} is replaced by the series' label


@dataclass(frozen=True)
class Panel:
    title: str
    unit: str  # Grafana unit id
    queries: tuple[Query, ...]
    description: str = ""


def _per_model(record: str, what: str = "") -> Query:
    return Query(q.selector(record, **_MODEL), "{{model}} v{{version}}" + (f" {what}" if what else ""))


PANELS = (
    Panel("Throughput", "reqps", (_per_model(q.REQUEST_RATE, "requests"), _per_model(q.INFERENCE_RATE, "inferences")),
          "Requests/s (succeeded or failed) and inferences (images)/s per model."),
    Panel("Latency per request: queue / compute input / infer / output", "µs", (
        _per_model(q.QUEUE_AVG, "queue"), _per_model(q.COMPUTE_INPUT_AVG, "compute input"),
        _per_model(q.COMPUTE_INFER_AVG, "compute infer"), _per_model(q.COMPUTE_OUTPUT_AVG, "compute output"),
        _per_model(q.REQUEST_AVG, "total in server"),
    ), "Average over 1 minute. Compute infer is the time of the batch a request ran in."),
    Panel("Batch size the server ran (inferences / executions)", "short", (_per_model(q.BATCH_SIZE),),
          "Above the clients' request batch when dynamic batching combines requests."),
    Panel("Queue time / compute time", "short", (_per_model(q.QUEUE_COMPUTE_RATIO),),
          "Above 1 the model cannot keep up: add instances or replicas (NVIDIA's autoscaling signal)."),
    Panel("Failed requests", "reqps", (_per_model(q.FAILURE_RATE),),
          "Failures inside the model or the scheduler; requests rejected before the model count nowhere."),
    Panel("Pending requests", "short", (Query(q.selector(q.PENDING, **_MODEL), "{{model}} v{{version}}"),),
          "Requests waiting in the queue now."),
    Panel("Server CPU utilization", "percentunit", (Query(q.selector(q.CPU_UTILIZATION, **_SERVER), "{{instance}}"),),
          "The whole machine's CPU use, as Triton reports it."),
    Panel("Server memory", "bytes", (
        Query(q.selector(q.CPU_MEMORY_USED, **_SERVER), "{{instance}} used"),
        Query(q.selector(q.CPU_MEMORY_TOTAL, **_SERVER), "{{instance}} total"),
    ), "The whole machine's memory, as Triton reports it (not the server's own RSS)."),
)

VARIABLE_QUERIES = {
    "instance": f'label_values({q.SUCCESS}{{job="{q.JOB}"}}, instance)',
    "model": f'label_values({q.SUCCESS}{{instance=~"$instance"}}, model)',
}


def grafana_dashboard() -> dict:
    """A Grafana dashboard (schema 39) of PANELS, two per row, on the data source chosen in its
    `datasource` variable."""
    datasource = {"type": "prometheus", "uid": f"${{{DATASOURCE_VARIABLE}}}"}
    panels = []
    for i, panel in enumerate(PANELS):
        panels.append({
            "id": i + 1,
            "type": "timeseries",
            "title": panel.title,
            "description": panel.description,
            "datasource": datasource,
            "gridPos": {"h": 8, "w": 12, "x": 12 * (i % 2), "y": 8 * (i // 2)},
            "fieldConfig": {"defaults": {"unit": panel.unit, "min": 0}, "overrides": []},
            "options": {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                        "tooltip": {"mode": "multi", "sort": "desc"}},
            "targets": [{"refId": chr(ord("A") + j), "datasource": datasource, "expr": query.expr,
                         "legendFormat": query.legend, "range": True}
                        for j, query in enumerate(panel.queries)],
        })
    variables = [{
        "name": DATASOURCE_VARIABLE, "label": "Data source", "type": "datasource", "query": "prometheus",
        "current": {}, "hide": 0, "refresh": 1, "regex": "", "options": [],
    }] + [{
        "name": name, "label": name.capitalize(), "type": "query", "datasource": datasource,
        "definition": query, "query": {"query": query, "refId": f"{name}-values"},
        "includeAll": True, "allValue": ".+", "multi": True, "current": {"text": "All", "value": "$__all"},
        "refresh": 2, "sort": 1, "hide": 0, "regex": "", "options": [],
    } for name, query in VARIABLE_QUERIES.items()]
    return {
        "uid": UID,
        "title": "Triton models (tritonize)",
        "tags": ["triton", "tritonize"],
        "timezone": "browser",
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "refresh": "10s",
        "time": {"from": "now-30m", "to": "now"},
        "templating": {"list": variables},
        "annotations": {"list": []},
        "panels": panels,
    }
