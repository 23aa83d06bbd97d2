"""The HTTP paths, defined once: the server's own routes (what the route table serves, what the trainer,
the commands and the agent interface call), OTLP's traces path, and the parts of Prometheus' and
Alertmanager's HTTP APIs the server and the commands call. A path is spelled here and imported
everywhere else (tests/test_layout.py holds that for every ``/api/v1``, ``/api/v2`` and ``/v1/traces``).
"""

from typing import Final

API: Final = "/api/v1"

# the server's own routes (server/api/routes.py declares who may call each)
METRICS: Final = "/metrics"
HEALTHY: Final = "/-/healthy"
READY: Final = "/-/ready"
OPENAPI: Final = "/openapi.json"
PUSH: Final = f"{API}/push"
STREAMS: Final = f"{API}/streams"
HUB: Final = f"{API}/hub"
INFO: Final = f"{API}/info"
SERVICES: Final = f"{API}/services"
TARGETS: Final = f"{API}/targets"
SERVICE_DISCOVERY: Final = f"{API}/sd"
ALERTS: Final = f"{API}/alerts"
SILENCES: Final = f"{API}/silences"
SPANS: Final = f"{API}/spans"
SPAN_RUNS: Final = f"{API}/spans/runs"
TIMELINE_LAST_STEP: Final = f"{API}/timeline/last_step"
PROFILES: Final = f"{API}/profiles"
PROFILE_REPORT: Final = f"{API}/profiles/report"
RUNS: Final = f"{API}/runs"
RUN_MARKS: Final = f"{API}/runs/marks"
RUN_CARD: Final = f"{API}/runs/card"
RUN_KEYS: Final = f"{API}/runs/keys"
RUN_REVOKE: Final = f"{API}/runs/revoke"
RUN_IMPORT: Final = f"{API}/runs/import"
RUN_IMPORTS: Final = f"{API}/runs/imports"
EXPLORER: Final = f"{API}/explorer"
EXPLORER_RUNS: Final = f"{EXPLORER}/runs"
EXPLORER_RUN: Final = f"{EXPLORER}/run"
EXPLORER_CURVES: Final = f"{EXPLORER}/curves"
EXPLORER_STEP: Final = f"{EXPLORER}/step"
EXPLORER_SAMPLES: Final = f"{EXPLORER}/samples"
# OTLP/HTTP's traces path (the OpenTelemetry protocol): the server takes spans here as Tempo does,
# and relays them to Tempo's where Tempo runs
OTLP_TRACES: Final = "/v1/traces"
# the explorer's pages (the run explorer, a run, a step) and their static files
PAGE_RUNS: Final = "/runs"
EXPLORER_STATIC: Final = "/static/explorer/"

# Prometheus' HTTP API (https://prometheus.io/docs/prometheus/latest/querying/api/) and its readiness
# (management API: https://prometheus.io/docs/prometheus/latest/management_api/)
PROMETHEUS_READY: Final = "/-/ready"
PROMETHEUS_QUERY: Final = "/api/v1/query"
PROMETHEUS_QUERY_RANGE: Final = "/api/v1/query_range"
PROMETHEUS_SERIES: Final = "/api/v1/series"
PROMETHEUS_NAMES: Final = "/api/v1/label/__name__/values"
PROMETHEUS_TARGETS: Final = "/api/v1/targets"
PROMETHEUS_ALERTS: Final = "/api/v1/alerts"
PROMETHEUS_BUILD_INFO: Final = "/api/v1/status/buildinfo"
PROMETHEUS_CONFIG: Final = "/api/v1/status/config"
PROMETHEUS_DELETE_SERIES: Final = "/api/v1/admin/tsdb/delete_series"

# Alertmanager's HTTP API v2 (https://github.com/prometheus/alertmanager/blob/main/api/v2/openapi.yaml)
ALERTMANAGER_READY: Final = "/-/ready"
ALERTMANAGER_ALERTS: Final = "/api/v2/alerts"
ALERTMANAGER_SILENCES: Final = "/api/v2/silences"
ALERTMANAGER_SILENCE: Final = "/api/v2/silence"  # /<id>: one silence, to delete it
