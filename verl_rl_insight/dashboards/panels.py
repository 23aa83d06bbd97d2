"""Panels and their placement, as the dicts Grafana stores (schemaVersion 39, Grafana 11).

Every PromQL query filters on the run with ``RUN`` (regex matchers: the project and experiment
variables are multi-select); every TraceQL query with ``TRACE_RUN``.
"""

from collections.abc import Sequence
from typing import Any

from verl_rl_insight.contract.naming import METRIC_PREFIX
from verl_rl_insight.dashboards.attempts import BY_ATTEMPT, RUN_MATCHERS, per_attempt
from verl_rl_insight.dashboards.attempts import EXP as EXP
from verl_rl_insight.dashboards.traceql import RUN_FILTER

# a panel, row, query target, variable or whole dashboard being built: a JSON object as Grafana
# stores it (its values any JSON: the builders write them, generate.py reads them back)
Panel = dict[str, object]
PROM = {"type": "prometheus", "uid": "rl-insight-prometheus"}
TEMPO = {"type": "tempo", "uid": "rl-insight-tempo"}
RUN = RUN_MATCHERS
TRACE_RUN = RUN_FILTER  # raw strings, anchored: see dashboards/traceql.py
M = METRIC_PREFIX
RATE = "[$__rate_interval]"  # the window of every rate() and increase() on a panel
PERCENT_UNITS = {"percentunit": 1, "percent": 100}  # unit -> the largest value it can show


class Layout:
    """Places panels left to right, 24 columns wide, hands out panel ids, and nests the panels of
    a collapsed row inside it (what Grafana stores for a collapsed row)."""

    def __init__(self) -> None:
        self.panels: list[dict[str, Any]] = []
        self.x, self.y, self.row_height, self.next_id = 0, 0, 0, 1
        self._into = self.panels

    def add(self, panel: dict[str, Any], w: int = 12, h: int = 8) -> None:
        if self.x + w > 24:
            self.x, self.y = 0, self.y + self.row_height
            self.row_height = 0
        panel.update(id=self.next_id, gridPos={"x": self.x, "y": self.y, "w": w, "h": h})
        self.next_id += 1
        self.x += w
        self.row_height = max(self.row_height, h)
        self._into.append(panel)

    def row(self, title: str, collapsed: bool = False) -> None:
        self.x, self.y = 0, self.y + self.row_height
        self.row_height = 1
        self._into = self.panels
        row: dict[str, Any] = {"type": "row", "title": title, "collapsed": collapsed, "panels": []}
        self.add(row, w=24, h=1)
        if collapsed:
            self._into = row["panels"]


def every_panel(dashboard: Any) -> Any:
    """Every panel, those inside collapsed rows included."""
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", ())


def target(expr: str, legend: str, ref: str = "A", fmt: str | None = None) -> Panel:
    t: Panel = {"datasource": PROM, "expr": expr, "legendFormat": legend, "refId": ref}
    if fmt:
        t["format"] = fmt
    return t


def timeseries(
    title: str,
    targets: Sequence[tuple[str, str]],
    unit: str = "short",
    thresholds: Sequence[tuple[float, str]] | None = None,
    description: str = "",
    stack: bool = False,
) -> Panel:
    """A time series panel; a percent unit gets its axis bounded (0 to 1, or 0 to 100)."""
    defaults: dict[str, Any] = {"unit": unit}
    if unit in PERCENT_UNITS:
        defaults.update(min=0, max=PERCENT_UNITS[unit])
    panel: Panel = {
        "type": "timeseries",
        "title": title,
        "datasource": PROM,
        "description": description,
        "targets": [target(e, leg, chr(65 + i)) for i, (e, leg) in enumerate(targets)],
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": {
            "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
            "tooltip": {"mode": "multi", "sort": "desc"},
        },
    }
    if thresholds:
        defaults["thresholds"] = {
            "mode": "absolute",
            "steps": [{"color": "green", "value": None}] + [{"color": c, "value": v} for v, c in thresholds],
        }
        defaults["custom"] = {"thresholdsStyle": {"mode": "line+area"}}
    if stack:
        defaults["custom"] = {
            **defaults.get("custom", {}),
            "stacking": {"mode": "normal", "group": "A"},
            "fillOpacity": 20,
        }
    return panel


def heatmap(title: str, expr: str, unit: str, description: str = "") -> Panel:
    """A latency heatmap from histogram buckets (``sum by (le) (rate(..._bucket))``)."""
    return {
        "type": "heatmap",
        "title": title,
        "datasource": PROM,
        "description": description,
        "targets": [target(expr, "{{le}}", fmt="heatmap")],
        "options": {
            "calculate": False,
            "yAxis": {"unit": unit},
            "cellGap": 1,
            "color": {"mode": "scheme", "scheme": "Oranges", "steps": 64},
        },
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
    }


XY_PLUGIN_VERSION = "11.2.0"  # the XY chart's current options (mapping / series), as Grafana 11 saves them


def step_axis(title: str, key: str, unit: str = "short", description: str = "") -> Panel:
    """A training-step x axis, a line per experiment and attempt (a restart from step 1 is two lines,
    an import's "<run> 1 imported"): Prometheus is time-only, so the value and the global step (pushed
    together, same timestamps) come as tables, merged on time, run and attempt, split, drawn as XY.
    11,000 points at most (Prometheus' limit): at 24 h, steps shorter than 8 s share a point."""
    step = target(f"{BY_ATTEMPT} ({per_attempt(f'{M}training_global_step{{{RUN}}}')})", "step", "A", fmt="table")
    value = target(f"{BY_ATTEMPT} ({per_attempt(f'{M}{key}{{{RUN}}}')})", key, "B", fmt="table")
    return {
        "type": "xychart",
        "pluginVersion": XY_PLUGIN_VERSION,
        "title": f"{title} by training step",
        "datasource": PROM,
        "description": description or f"{key} against the global step, one line per experiment and attempt",
        "maxDataPoints": 11000,
        "targets": [step, value],
        "transformations": [
            {"id": "merge", "options": {}},
            {"id": "organize", "options": {"renameByName": {"Value #A": "step", "Value #B": key}}},
            {
                "id": "partitionByValues",
                "options": {
                    "fields": ["experiment_name", "attempt", "imported"],  # imported: absent on live rows
                    "keepFields": False,
                    "naming": {"asLabels": False},
                },
            },
        ],
        "options": {
            "mapping": "auto",
            "series": [
                {
                    "x": {"field": {"matcher": {"id": "byName", "options": "step"}}},
                    "y": {"field": {"matcher": {"id": "byName", "options": key}}},
                }
            ],
            "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
            "tooltip": {"mode": "single"},
        },
        "fieldConfig": {"defaults": {"unit": unit, "custom": {"show": "lines"}}, "overrides": []},
    }


def lanes_query(lanes: str) -> str:
    """TraceQL for the selected runs' spans on the lanes whose state_lane_id matches ``lanes``
    (a regex, anchored), with the attributes the panels show."""
    return (
        f'{{ resource.service.name = "verl" && {TRACE_RUN} && span.state_lane_id =~ `^({lanes})$` }} '
        "| select(span.state_name, span.state_lane_id, span.verl.step)"
    )


def traceql_spans(query: str, limit: int, spss: int) -> Panel:
    """A Tempo target: the spans a TraceQL search finds (``limit`` traces, ``spss`` spans a span set)."""
    return {"datasource": TEMPO, "queryType": "traceql", "query": query, "refId": "A", "limit": limit, "spss": spss,
            "tableType": "spans"}  # fmt: skip


def traceql_table(title: str, query: str, description: str, limit: int = 100, spss: int = 50) -> Panel:
    """What a TraceQL search returns, newest first, one row per span: shown the way Grafana shows a
    search (a table whose trace IDs open the trace), never in a Traces panel, which renders one
    trace by its ID."""
    return {
        "type": "table",
        "title": title,
        "datasource": TEMPO,
        "description": description,
        "targets": [traceql_spans(query, limit, spss)],
        "options": {"showHeader": True, "sortBy": [{"displayName": "Start time", "desc": True}]},
        "fieldConfig": {"defaults": {}, "overrides": []},
    }


def spans_table(title: str, lanes: str, description: str) -> Panel:
    """The spans of the lanes matching ``lanes`` (a TraceQL regex)."""
    return traceql_table(title, lanes_query(lanes), description)


SAMPLE_FIELDS = ("verl.step", "sample.kind", "sample.rank", "sample.score", "sample.length", "sample.mismatch")
SAMPLE_TEXT = ("sample.finish_reason", "sample.data_source", "sample.prompt", "sample.response")


def samples_table(title: str, description: str) -> dict[str, Any]:
    """The rollouts the samples plugin kept (lane ``samples``): one row each, with their text."""
    select = ", ".join(f"span.{name}" for name in SAMPLE_FIELDS + SAMPLE_TEXT)
    query = (
        f'{{ resource.service.name = "verl" && {TRACE_RUN} && span.state_lane_id = "samples" && '
        f'span.sample.kind != "" }} | select({select})'
    )
    panel: dict[str, Any] = spans_table(title, "samples", description)
    panel["targets"][0]["query"] = query
    panel["options"]["sortBy"] = [{"displayName": "verl.step", "desc": True}]
    return panel


# Tempo's spans table (tableType "spans") -> one row per lane, each span drawn from its start to
# its end: the structure of the official RL-Insight timeline, in Grafana 11's classic JSON.
TIMELINE_TRANSFORMATIONS: list[dict[str, Any]] = [
    {
        "id": "calculateField",
        "options": {
            "mode": "binary",
            "alias": "duration_ms",
            "binary": {"left": "Duration", "operator": "/", "right": "1000000"},
        },
    },
    {
        "id": "calculateField",
        "options": {
            "mode": "reduceRow",
            "alias": "End time",
            "reduce": {"reducer": "sum", "include": ["Start time", "duration_ms"]},
        },
    },
    {
        "id": "extractFields",
        "options": {
            "source": "state_lane_id",
            "format": "regexp",
            "replace": False,
            "regExp": "/^(?<lane_prefix>.+?)(?:[_-](?<lane_number>\\d+))?$/",
        },
    },
    {
        "id": "convertFieldType",
        "options": {
            "fields": {},
            "conversions": [
                {"targetField": "Start time", "destinationType": "time"},
                {"targetField": "End time", "destinationType": "time"},
                {"targetField": "lane_number", "destinationType": "number"},
            ],
        },
    },
    {"id": "sortBy", "options": {"fields": {}, "sort": [{"field": "lane_number"}]}},
    {"id": "sortBy", "options": {"fields": {}, "sort": [{"field": "lane_prefix"}]}},
    {
        "id": "organize",
        "options": {
            "includeByName": {},
            "indexByName": {},
            "renameByName": {},
            "excludeByName": {
                name: True
                for name in (
                    "Trace ID",
                    "Trace Service",
                    "Trace Name",
                    "Span ID",
                    "Name",
                    "Duration",
                    "duration_ms",
                    "lane_prefix",
                    "lane_number",
                    "verl.step",
                    "traceIdHidden",
                )
            },
        },
    },
    {"id": "partitionByValues", "options": {"fields": ["state_lane_id"], "keepFields": False}},
]
# state name (what verl times) -> colour, by regex: generation, training, scoring, checkpoints
STATE_COLOURS = (
    (".*gen.*", "blue"),
    (".*update_actor.*|.*update_critic.*", "green"),
    (".*old_log_prob.*|.*log_prob.*", "yellow"),
    (".*ref.*", "purple"),
    (".*reward.*|.*adv.*|.*values.*", "orange"),
    (".*update_weights.*", "super-light-blue"),
    (".*checkpoint.*", "grey"),
    (".*testing.*", "red"),
    (".*switch_wait.*", "light-yellow"),  # separate_async: the trainer waits for its rollout to hand over
    (".*switch_to.*", "light-blue"),  # separate_async: the GPUs switch between rollout and training
)


def state_timeline(title: str, lanes: str, description: str) -> dict[str, Any]:
    """Lanes ``lanes`` (a regex of state_lane_id) as rows of a Grafana state timeline: each span a
    bar from its start to its end, coloured by what it is; where a lane has no span it is idle."""
    query = lanes_query(lanes)
    mappings = [
        {"type": "regex", "options": {"pattern": pattern, "result": {"color": colour, "index": i}}}
        for i, (pattern, colour) in enumerate(STATE_COLOURS)
    ]
    return {
        "type": "state-timeline",
        "title": title,
        "datasource": TEMPO,
        "description": description,
        "targets": [traceql_spans(query, limit=10000, spss=100)],
        "transformations": TIMELINE_TRANSFORMATIONS,
        "options": {
            "mergeValues": True,
            "showValue": "auto",
            "alignValue": "left",
            "rowHeight": 0.9,
            "perPage": 64,
            "legend": {"showLegend": True, "displayMode": "list", "placement": "bottom"},
            "tooltip": {"mode": "single", "sort": "none"},
        },
        "fieldConfig": {
            "defaults": {
                "color": {"mode": "thresholds"},
                "thresholds": {"mode": "absolute", "steps": [{"color": "green", "value": None}]},
                "mappings": mappings,
                "custom": {
                    "fillOpacity": 70,
                    "lineWidth": 0,
                    "spanNulls": False,
                    "insertNulls": False,
                    "hideFrom": {"legend": False, "tooltip": False, "viz": False},
                },
            },
            "overrides": [],
        },
    }


def trace_view(title: str, description: str) -> Panel:
    """One trace, by the ID in the ``trace_id`` variable (copy it from a spans table)."""
    return {
        "type": "traces",
        "title": title,
        "datasource": TEMPO,
        "description": description,
        "targets": [{"datasource": TEMPO, "queryType": "traceql", "query": "${trace_id}", "refId": "A"}],
    }


def variables(engine_metric: str | None) -> list[Panel]:
    def query(name: str, expr: str, multi: bool = True, include_all: bool = False) -> Panel:
        return {
            "name": name,
            "type": "query",
            "datasource": PROM,
            "refresh": 2,
            "sort": 1,
            "query": {"query": expr, "refId": name},
            "definition": expr,
            "multi": multi,
            "includeAll": include_all,
        }

    return [
        query("project", f"label_values({M}training_global_step, project)"),
        query("experiment_name", f'label_values({M}training_global_step{{project=~"$project"}}, experiment_name)'),
        *([query("replica", f"label_values({engine_metric}{{{RUN}}}, replica)", True, True)] if engine_metric else []),
        query("node", f"label_values(rl_insight_host_load1{{{RUN}}}, node)", True, True),
        query("gpu", f'label_values(DCGM_FI_DEV_GPU_UTIL{{{RUN},Hostname=~"$node"}}, gpu)', True, True),
        {
            "name": "trace_id",
            "type": "textbox",
            "label": "trace ID",
            "query": "",
            "description": "a trace ID from a timeline table: the 'Selected trace' panel shows it",
        },
    ]
