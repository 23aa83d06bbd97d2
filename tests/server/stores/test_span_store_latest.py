"""Keep the latest, not the first: a run whose spans exceed its bound in the server's span store
loses its oldest steps (spans and samples alike), never its newest. The spans are the trainer's
own: verl's phase timers (through the trainer patch) and the trainer's ``state`` spans, exported by
the trainer's OTLP exporter to a real server (``POST /v1/traces``); ``rl-insight timeline summary``
shows the steps kept, the bound and what was evicted."""

import json
import time

import pytest

from tests.helpers import rl_insight, wait_for
from tests.server.stores.test_timeline_store import STEP_SPANS, otlp
from tests.trainer.test_state_timeline import one_training_step
from verl_rl_insight.server.stores.spans import SpanStore

STEPS = 40
REQUESTS = 12  # generate calls a step (one span per request, as the agent loop's are)
BOUND = 96 * 1024  # the run's bound here (64 MiB on a server): about 15 of the 40 steps fit


@pytest.fixture
def server(tmp_path):
    from verl_rl_insight.server.api.asgi import Api
    from verl_rl_insight.server.api.http_server import HttpServer
    from verl_rl_insight.server.api.parts import ApiParts, Startup
    from verl_rl_insight.server.metrics.hub import MetricHub

    store = SpanStore(tmp_path / "spans", max_run_bytes=BOUND)
    api = Api(ApiParts(MetricHub(), startup=Startup(spans=store), info=lambda: {"spans_kept_by_hub": True}))
    http_server = HttpServer(api, "127.0.0.1", 0).start()
    yield f"http://127.0.0.1:{http_server.port}", store
    http_server.stop()
    api.close()


def a_long_run(url, monkeypatch):
    """STEPS trainer steps, each with its phases, REQUESTS generate calls and a samples span."""
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", url)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", url + "/v1/traces")
    from verl.trainer.ppo import ray_trainer

    import verl_rl_insight

    verl_rl_insight.init("p", "long")
    for step in range(1, STEPS + 1):
        for i in range(REQUESTS):
            with verl_rl_insight.state("rollout generate", lane=f"replica_{i % 4}", step=step, request=f"r{i}"):
                pass
        with verl_rl_insight.state("samples", lane="samples", step=step, samples=6):
            pass
        one_training_step(ray_trainer.marked_timer, step)
    verl_rl_insight.finish()


def steps_in(store):
    lines = store.read("p", "long").splitlines()
    return [json.loads(line)["attributes"].get("verl.step") for line in lines]


def test_a_long_run_over_its_bound_keeps_its_last_steps_whole(server, monkeypatch):
    url, store = server
    a_long_run(url, monkeypatch)
    wait_for(lambda: STEPS in steps_in(store), 20, what="the last step's spans")
    time.sleep(1.5)  # the exporter's last batches
    [run] = store.runs()
    kept = steps_in(store)
    assert run["bytes"] <= BOUND and run["max_bytes"] == BOUND
    assert run["evicted_steps"] > 0 and run["evicted_spans"] > 0
    oldest, gone = run["oldest_step"], run["evicted_through_step"]
    assert oldest == gone + 1 and run["newest_step"] == STEPS and run["evicted_steps"] == gone
    assert set(kept) == set(range(oldest, STEPS + 1))  # the newest steps, nothing older
    spans_a_step = REQUESTS + 1 + 3  # generate calls, the samples span, step / gen / update_actor
    assert all(kept.count(step) == spans_a_step for step in range(oldest, STEPS + 1))  # each step whole
    samples = [json.loads(x) for x in store.read("p", "long").splitlines()]
    assert {s["attributes"]["verl.step"] for s in samples if s["attributes"]["state_lane_id"] == "samples"} == set(
        range(oldest, STEPS + 1)
    )
    assert run["evicted_spans"] == gone * spans_a_step and run["spans"] == len(kept)

    summary = rl_insight("timeline", "summary", "--project", "p", "--experiment", "long", "--server", url)
    assert summary.returncode == 0, summary.stderr
    rows = [line.split()[0] for line in summary.stdout.splitlines()[1:] if line[:1].isdigit()]
    assert rows == [str(s) for s in range(oldest, STEPS + 1)]
    assert (
        f"the server keeps steps {oldest}-{STEPS} of this run (96 KiB a run; the oldest {gone} steps evicted, "
        f"through step {gone}, {gone * spans_a_step} spans)" in summary.stdout
    )
    as_json = json.loads(
        rl_insight("timeline", "summary", "--project", "p", "--experiment", "long", "--server", url, "--json").stdout
    )
    assert as_json["kept"]["oldest_step"] == oldest and as_json["kept"]["evicted_steps"] == gone


def test_a_late_span_of_an_evicted_step_is_not_kept_and_the_index_survives_a_restart(tmp_path):
    store = SpanStore(tmp_path, max_run_bytes=4000)  # a request of STEP_SPANS' first two: 470 bytes
    for step in range(1, 30):
        store.add(otlp([(n, lane, step, *rest) for n, lane, _, *rest in STEP_SPANS[:2]]))
    [run] = store.runs()
    gone = run["evicted_through_step"]
    assert gone is not None and run["bytes"] <= 4000 and run["newest_step"] == 29
    store.add(otlp([(n, lane, gone, *rest) for n, lane, _, *rest in STEP_SPANS[:2]]))  # late, for an evicted step
    assert gone not in {json.loads(x)["attributes"]["verl.step"] for x in store.read("p", "e").splitlines()}
    store.close()
    again = SpanStore(tmp_path, max_run_bytes=4000)
    assert again.runs() == store.runs() and again.read("p", "e") == store.read("p", "e")
