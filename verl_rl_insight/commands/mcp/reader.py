"""The server's HTTP API as the tools read it: the explorer's answers (the same the run page and
``rl-insight diagnose`` show), with one credential, each error the CLI's one line. A run
credential's reader sees its own run only: the runs list holds it alone, another run is refused,
and the run answer names no other run."""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from pydantic import JsonValue

from verl_rl_insight.commands.api import call_json
from verl_rl_insight.commands.checks import CliError
from verl_rl_insight.commands.mcp.access import Checks, Credential, Refused
from verl_rl_insight.contract import paths
from verl_rl_insight.contract.runs import Run

Json = dict[str, JsonValue]
CELLS = 100_000  # values the server puts in one curves answer before it strides (explorer/curves.py)
MAX_KEYS = 64  # keys in one curves request (explorer/params.py)


def _object(value: object, what: str) -> Json:
    if not isinstance(value, dict):
        raise Refused(f"the server's {what} answer is not a JSON object")
    return value


class Reader:
    def __init__(self, base: str, credential: Credential, checks: Checks) -> None:
        self.base = base
        self.credential = credential
        self._checks = checks

    def check(self) -> None:
        """Refused unless the server takes this reader's credential (asked at most every CHECKED_FOR_S)."""
        self._checks.check(self.base, self.credential)

    def _call(self, method: str, path: str, query: Mapping[str, str | int] | None, body: str | None = None) -> Json:
        self.check()
        url = self.base + path + ("?" + urllib.parse.urlencode(query) if query else "")
        try:
            answer = call_json(method, url, self.credential.secret, body)  # names as they are, not escaped
        except CliError as exc:
            fix = self.credential.fix() if "(401)" in str(exc) or "(403)" in str(exc) else exc.fix
            raise Refused(str(exc) + (f"; {fix}" if fix else "")) from None
        return _object(answer, path)

    def get(self, path: str, **query: str | int) -> Json:
        return self._call("GET", path, query)

    def post(self, path: str, body: Json) -> Json:
        return self._call("POST", path, None, json.dumps(body))

    def _run_query(self, run: Run, **more: str | int) -> dict[str, str | int]:
        self.credential.own(run)
        return {"project": run[0], "experiment_name": run[1], **more}

    def runs(self) -> list[Json]:
        rows = self.get(paths.EXPLORER_RUNS).get("runs")
        listed = [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []
        mine = self.credential.run
        if self.credential.is_run_credential:
            return [r for r in listed if (r.get("project"), r.get("experiment")) == mine]
        return listed

    def run(self, run: Run, diff_from: str | None = None) -> Json:
        query = self._run_query(run, **({"diff_from": diff_from} if diff_from else {}))
        answer = self.get(paths.EXPLORER_RUN, **query)
        if self.credential.is_run_credential:
            answer["others"] = []  # the project's other runs: not this credential's to know
        return answer

    def step(self, run: Run, step: int) -> Json:
        return self.get(paths.EXPLORER_STEP, **self._run_query(run, step=step))

    def samples(self, run: Run, step: int) -> Json:
        return self.get(paths.EXPLORER_SAMPLES, **self._run_query(run, step=step))

    def curves(self, run: Run, keys: Sequence[str], first: int | None, last: int | None) -> CurveData:
        """Every key's values on the range's steps, asked in as many requests as keep each answer
        unstrided (past CELLS values the server takes every n-th step: a spike would be lost before
        the budget's buckets could keep it)."""
        steps_range = f"{'' if first is None else first}:{'' if last is None else last}"
        data = CurveData([], {}, {}, 1)
        todo = list(keys)
        size = 1  # the first request learns how many steps the range holds
        while todo:
            chunk, todo = todo[:size], todo[size:]
            ranged = {"steps": steps_range} if steps_range != ":" else {}
            answer = self.get(paths.EXPLORER_CURVES, **self._run_query(run, keys=",".join(chunk), **ranged))
            steps, series, odd = answer.get("steps"), answer.get("series"), answer.get("nonfinite") or {}
            if not isinstance(steps, list) or not isinstance(series, dict) or not isinstance(odd, dict):
                raise Refused("the server's curves answer has no steps or series")
            data.steps[:] = [int(s) for s in steps if isinstance(s, int)]
            for key in chunk:
                values = series.get(key)
                data.series[key] = [_number(v) for v in values] if isinstance(values, list) else []
                places = odd.get(key)
                data.nonfinite[key] = [i for i in places if isinstance(i, int)] if isinstance(places, list) else []
            stride = answer.get("stride")
            data = data._replace(stride=max(data.stride, stride if isinstance(stride, int) else 1))
            size = max(1, min(MAX_KEYS, CELLS // max(1, len(data.steps))))
        return data


def _number(value: JsonValue) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


class CurveData(NamedTuple):
    steps: list[int]
    series: dict[str, list[float | None]]  # key -> its value at each of steps (None: not logged, or not finite)
    nonfinite: dict[str, list[int]]  # key -> the places in steps where the trainer logged NaN or an infinity
    stride: int  # 1, or every how many steps the server kept one (a range of over CELLS steps)
