"""The dashboards, built by plain Python (no grafana-foundation-sdk: dicts stay readable, the
JSON is what Grafana stores, and ``--check`` can read every query back).

Every PromQL query filters on ``project`` and ``experiment_name``; every TraceQL query
constrains both too.
"""

PROM = {"type": "prometheus", "uid": "rl-insight-prometheus"}
TEMPO = {"type": "tempo", "uid": "rl-insight-tempo"}
RUN = 'project="$project",experiment_name="$experiment_name"'
M = "rl_insight_monitor_"

ENGINES = {
    "vllm": {
        "running": "vllm:num_requests_running", "waiting": "vllm:num_requests_waiting",
        "kv_cache": "vllm:kv_cache_usage_perc", "prompt_tokens": "vllm:prompt_tokens_total",
        "generation_tokens": "vllm:generation_tokens_total",
        "ttft": "vllm:time_to_first_token_seconds_bucket", "tpot": "vllm:inter_token_latency_seconds_bucket",
        "e2e": "vllm:e2e_request_latency_seconds_bucket",
        "prefix_hit_rate": "rate(vllm:prefix_cache_hits_total{%s}[$__rate_interval]) / "
                           "rate(vllm:prefix_cache_queries_total{%s}[$__rate_interval])",
    },
    "sglang": {
        "running": "sglang:num_running_reqs", "waiting": "sglang:num_queue_reqs", "kv_cache": "sglang:token_usage",
        "prompt_tokens": "sglang:prompt_tokens_total", "generation_tokens": "sglang:generation_tokens_total",
        "ttft": "sglang:time_to_first_token_seconds_bucket", "tpot": "sglang:inter_token_latency_seconds_bucket",
        "e2e": "sglang:e2e_request_latency_seconds_bucket", "prefix_hit_rate": "sglang:cache_hit_rate{%s}",
    },
}


class Layout:
    """Places panels left to right, 24 columns wide, and hands out panel ids."""

    def __init__(self):
        self.panels, self.x, self.y, self.row_height, self.next_id = [], 0, 0, 0, 1

    def add(self, panel, w=12, h=8):
        if self.x + w > 24:
            self.x, self.y = 0, self.y + self.row_height
            self.row_height = 0
        panel.update(id=self.next_id, gridPos={"x": self.x, "y": self.y, "w": w, "h": h})
        self.next_id += 1
        self.x += w
        self.row_height = max(self.row_height, h)
        self.panels.append(panel)

    def row(self, title):
        self.x, self.y = 0, self.y + self.row_height
        self.row_height = 1
        self.add({"type": "row", "title": title, "collapsed": False, "panels": []}, w=24, h=1)


def target(expr, legend, ref="A"):
    return {"datasource": PROM, "expr": expr, "legendFormat": legend, "refId": ref}


def timeseries(title, targets, unit="short", thresholds=None, description=""):
    panel = {"type": "timeseries", "title": title, "datasource": PROM, "description": description,
             "targets": [target(e, leg, chr(65 + i)) for i, (e, leg) in enumerate(targets)],
             "fieldConfig": {"defaults": {"unit": unit}, "overrides": []}}
    if thresholds:
        panel["fieldConfig"]["defaults"]["thresholds"] = {"mode": "absolute", "steps": [
            {"color": "green", "value": None}] + [{"color": c, "value": v} for v, c in thresholds]}
        panel["fieldConfig"]["defaults"]["custom"] = {"thresholdsStyle": {"mode": "line+area"}}
    return panel


def trainer(key, legend=None):
    return (f"{M}{key}{{{RUN}}}", legend or key.replace("_", "/", 1))


def step_axis(title, key):
    """A training-step x axis: Prometheus is time-only, so the value and the global step (pushed
    together, same timestamps) are joined and plotted as an XY chart."""
    return {"type": "xychart", "title": f"{title} by training step", "datasource": PROM,
            "targets": [target(f"{M}training_global_step{{{RUN}}}", "step", "A"),
                        target(f"{M}{key}{{{RUN}}}", key, "B")],
            "transformations": [{"id": "joinByField", "options": {"mode": "inner"}}],
            "options": {"seriesMapping": "auto", "dims": {"x": "step"}},
            "fieldConfig": {"defaults": {}, "overrides": []}}


def traces(title, lane_filter, description):
    query = ('{ resource.service.name = "verl" && span.project = "$project" && '
             f'span.experiment_name = "$experiment_name"{lane_filter} }}')
    return {"type": "traces", "title": title, "datasource": TEMPO, "description": description,
            "targets": [{"datasource": TEMPO, "queryType": "traceql", "query": query, "refId": "A", "limit": 50}]}


def variables(engine_metric):
    def query(name, expr, multi=False, include_all=False):
        return {"name": name, "type": "query", "datasource": PROM, "refresh": 2, "sort": 1,
                "query": {"query": expr, "refId": name}, "definition": expr, "multi": multi,
                "includeAll": include_all}

    return [
        query("project", f"label_values({M}training_global_step, project)"),
        query("experiment_name", f'label_values({M}training_global_step{{project="$project"}}, experiment_name)'),
        *([query("replica", f"label_values({engine_metric}{{{RUN}}}, replica)", True, True)] if engine_metric else []),
        query("node", f"label_values(rl_insight_host_load1{{{RUN}}}, node)", True, True),
        query("gpu", f"label_values(DCGM_FI_DEV_GPU_UTIL{{{RUN}}}, gpu)", True, True),
    ]


def training_rows(layout):
    layout.row("Training")
    layout.add(timeseries("Reward / score", [trainer("critic_score_mean", "score mean"),
                                             trainer("critic_rewards_mean", "reward mean")]))
    layout.add(step_axis("Score", "critic_score_mean"))
    layout.add(timeseries("Losses", [trainer("actor_pg_loss", "actor pg_loss"),
                                     trainer("critic_vf_loss", "critic vf_loss"),
                                     trainer("actor_entropy", "entropy")]))
    layout.add(timeseries("Grad norm", [trainer("actor_grad_norm", "actor grad_norm")]))
    layout.add(timeseries("KL", [trainer("actor_reward_kl_penalty", "reward KL penalty"),
                                 trainer("actor_reward_kl_penalty_coeff", "KL coeff")]))
    layout.add(timeseries("Response length", [trainer("response_length_mean", "mean"),
                                              trainer("response_length_max", "max"),
                                              trainer("response_length_clip_ratio", "clip ratio")]))
    layout.add(timeseries("Throughput (tokens/s/GPU)", [trainer("perf_throughput", "throughput")]))
    layout.add(timeseries("Step timings", [(f'{{__name__=~"{M}timing_s_.*",{RUN}}}', "{{__name__}}")], unit="s"))
    layout.add(timeseries("Train / inference log-prob mismatch",
                          [trainer("training_rollout_probs_diff_mean", "probs diff mean"),
                           trainer("training_rollout_probs_diff_max", "probs diff max")],
                          thresholds=[(0.005, "orange"), (0.01, "red")],
                          description="mean < 0.005 normal; sustained > 0.01: rollout engine precision problem"),
               w=24)


def timeline_rows(layout):
    layout.row("RL state timeline")
    layout.add(traces("Trainer phases (sync view)", ' && span.state_lane_id = "trainer"',
                      "one trace per step: gen, reward, old_log_prob, ... under trainer step"), w=12, h=10)
    layout.add(traces("Rollout replicas (async view)", ' && span.state_lane_id =~ "replica_.*|rollouter"',
                      "generate calls per replica lane"), w=12, h=10)
    layout.add(timeseries("Share of time per state and lane",
                          [(f"rate(rl_insight_state_seconds_total{{{RUN}}}[$__rate_interval])", "{{lane}} {{state}}")],
                          unit="percentunit"), w=24)


def engine_rows(layout, engine):
    e = ENGINES[engine]
    sel = f'{RUN},replica=~"$replica"'
    layout.row(f"{engine} engines (per replica)")
    layout.add(timeseries("Token throughput", [
        (f"rate({e['generation_tokens']}{{{sel}}}[$__rate_interval])", "gen replica {{replica}}"),
        (f"rate({e['prompt_tokens']}{{{sel}}}[$__rate_interval])", "prompt replica {{replica}}")], unit="short"))
    layout.add(timeseries("Running / waiting requests", [(f"{e['running']}{{{sel}}}", "running {{replica}}"),
                                                         (f"{e['waiting']}{{{sel}}}", "waiting {{replica}}")]))
    layout.add(timeseries("KV cache usage", [(f"{e['kv_cache']}{{{sel}}}", "replica {{replica}}")], unit="percentunit"))
    layout.add(timeseries("Prefix cache hit rate", [(e["prefix_hit_rate"].replace("%s", sel), "replica {{replica}}")],
                          unit="percentunit"))
    latencies = (("Time to first token", "ttft"), ("Time per output token", "tpot"), ("End-to-end latency", "e2e"))
    for title, key in latencies:
        layout.add(timeseries(title, [
            (f"histogram_quantile({q}, sum by (le, replica) (rate({e[key]}{{{sel}}}[$__rate_interval])))",
             f"p{int(q * 100)} {{{{replica}}}}") for q in (0.5, 0.9, 0.99)], unit="s"), w=8)


def transfer_queue_rows(layout):
    layout.row("TransferQueue")
    requests = f"sum by (project, experiment_name) (rate(tq_controller_request_total{{{RUN}}}[$__rate_interval]))"
    errors = f"sum by (project, experiment_name) (rate(tq_controller_request_errors_total{{{RUN}}}[$__rate_interval]))"
    layout.add(timeseries("Requests", [(requests, "requests"),
                                       (f"{errors} or 0 * {requests}", "errors")]))   # a 0 line, not none
    layout.add(timeseries("Controller memory", [(f"tq_controller_memory_rss_bytes{{{RUN}}}", "rss")], unit="bytes"))


def hardware_rows(layout):
    gpu = f'{RUN},gpu=~"$gpu"'
    node = f'{RUN},node=~"$node"'
    layout.row("Hardware")
    layout.add(timeseries("GPU utilization", [(f"DCGM_FI_DEV_GPU_UTIL{{{gpu}}}", "{{Hostname}} gpu {{gpu}}")],
                          unit="percent"))
    layout.add(timeseries("GPU memory used", [(f"DCGM_FI_DEV_FB_USED{{{gpu}}} / (DCGM_FI_DEV_FB_USED{{{gpu}}} + "
                                               f"DCGM_FI_DEV_FB_FREE{{{gpu}}})", "{{Hostname}} gpu {{gpu}}")],
                          unit="percentunit", thresholds=[(0.95, "red")]))
    layout.add(timeseries("GPU power", [(f"DCGM_FI_DEV_POWER_USAGE{{{gpu}}}", "{{Hostname}} gpu {{gpu}}")],
                          unit="watt"))
    layout.add(timeseries("GPU temperature", [(f"DCGM_FI_DEV_GPU_TEMP{{{gpu}}}", "{{Hostname}} gpu {{gpu}}")],
                          unit="celsius"))
    layout.add(timeseries("Host CPU", [(f"rl_insight_host_cpu_utilization_percent{{{node}}}", "{{node}}")],
                          unit="percent"))
    layout.add(timeseries("Host memory used", [(f"rl_insight_host_memory_used_bytes{{{node}}}", "{{node}}")],
                          unit="bytes"))
    layout.add(timeseries("Host network", [
        (f"rl_insight_host_network_receive_bytes_per_second{{{node}}}", "rx {{node}}"),
        (f"rl_insight_host_network_transmit_bytes_per_second{{{node}}}", "tx {{node}}")], unit="Bps"))
    layout.add(timeseries("Host disk", [
        (f"rl_insight_host_disk_read_bytes_per_second{{{node}}}", "read {{node}}"),
        (f"rl_insight_host_disk_written_bytes_per_second{{{node}}}", "write {{node}}")], unit="Bps"))


def dashboard(uid, title, layout, engine_metric):
    return {"uid": uid, "title": title, "tags": ["rl-insight", "verl"], "timezone": "browser", "schemaVersion": 39,
            "refresh": "10s", "time": {"from": "now-1h", "to": "now"}, "editable": False,
            "templating": {"list": variables(engine_metric)}, "panels": layout.panels,
            "annotations": {"list": []}}


def build():
    """{file name: dashboard} for everything under grafana/dashboards/."""
    out = {}
    for engine in ("vllm", "sglang"):
        layout = Layout()
        timeline_rows(layout)
        training_rows(layout)
        engine_rows(layout, engine)
        transfer_queue_rows(layout)
        hardware_rows(layout)
        uid = f"verl_trainer_v1_with_{engine}_engine"
        out[f"{uid}.json"] = dashboard(uid, f"verl trainer v1 with {engine} engine", layout, ENGINES[engine]["running"])
    layout = Layout()
    hardware_rows(layout)
    out["rl_insight_hardware.json"] = dashboard("rl_insight_hardware", "RL-Insight hardware", layout, None)
    return out
