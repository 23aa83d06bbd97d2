"""Marks, as a run credential may abuse them: text with format, invisible or bidirectional
characters (U+061C, U+00AD, U+202E, tag characters...) is a 400 naming ``text``; re-marking one
step in a loop (each change rewrites marks.json with fsync) is cut to a few changes a second per
run with 429 and Retry-After, while another run marks as it pleases. Real server on loopback."""

import json
import sys
import time
import unicodedata
import urllib.error
import urllib.request

import pytest

from verl_rl_insight.contract import run_credential
from verl_rl_insight.contract.marks import MARK_TEXT_PATTERN, MARK_WRITES_BURST, MAX_MARK_WRITES_PER_RUN_S
from verl_rl_insight.server.api.asgi import Api
from verl_rl_insight.server.api.http_server import HttpServer
from verl_rl_insight.server.api.parts import ApiParts
from verl_rl_insight.server.metrics.hub import MetricHub
from verl_rl_insight.server.stores.marks import MarkStore

TOKEN = "marks-t0ken-4d2e"


@pytest.fixture
def server(tmp_path):
    hub = MetricHub()
    marks = MarkStore(tmp_path / "marks.json")
    api = Api(ApiParts(hub, token=TOKEN, marks=marks))
    http_server = HttpServer(api, "127.0.0.1", 0).start()
    yield f"http://127.0.0.1:{http_server.port}", tmp_path / "marks.json"
    http_server.stop()
    api.close()


def mark(url, credential, text="data stage 2", experiment="e", step=3):
    body = json.dumps({"project": "p", "experiment_name": experiment, "step": step, "text": text}).encode()
    headers = {"Authorization": f"Bearer {credential}", "Content-Type": "application/json"}
    request = urllib.request.Request(url + "/api/v1/runs/marks", data=body, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read(), response.headers
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), exc.headers


@pytest.mark.parametrize(
    "char",
    ["\u061c", "\u00ad", "\u202e", "\U000e0041", "\U000e007f", "\u2066", "\u034f", "\u180e", "\ufe0f", "\u3164"],
    ids=lambda c: f"U+{ord(c):04X}",
)
def test_text_with_a_format_or_invisible_character_is_a_400_naming_text(server, char):
    url, path = server
    status, answer, _ = mark(url, run_credential.mint(TOKEN, "p", "e"), text=f"lr {char}drop")
    assert status == 400 and json.loads(answer)["error"].startswith("text "), answer
    assert "format" in json.loads(answer)["error"] and not path.exists()


def test_every_format_character_unicode_knows_is_refused_and_ordinary_text_is_not():
    import re

    pattern = re.compile(MARK_TEXT_PATTERN)
    kept = [c for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)) == "Cf" and pattern.search(chr(c))]
    assert kept == []
    for text in ("lr 1e-6 → 2e-6", "学习率 halved", "curriculum: longer prompts 🚀", "עברית and English"):
        assert pattern.search(text), text


def test_re_marking_one_step_in_a_loop_gets_429_with_retry_after_and_another_run_is_not_held(server):
    url, _ = server
    attacker = run_credential.mint(TOKEN, "p", "e")
    started, statuses, waits = time.monotonic(), [], set()
    for i in range(60):  # bounded: 60 requests, a couple of seconds
        status, _, headers = mark(url, attacker, text=f"rewrite {i}")
        statuses.append(status)
        if status == 429:
            waits.add(headers.get("retry-after"))
    elapsed = time.monotonic() - started
    allowed = MARK_WRITES_BURST + MAX_MARK_WRITES_PER_RUN_S * elapsed + 1
    assert statuses.count(200) <= allowed and statuses.count(200) >= MARK_WRITES_BURST
    assert statuses.count(429) >= 60 - allowed and set(statuses) == {200, 429}
    assert waits == {"1"}
    # another run (the token, a person) marks at once; the attacker's run after the wait it was told
    assert mark(url, TOKEN, experiment="other", text="honest")[0] == 200
    time.sleep(1.0)
    assert mark(url, attacker, text="after the wait")[0] == 200
