"""TargetRegistry: scrape targets that trainers and users register, served to Prometheus as http_sd.

A target is (job, address) with labels. Targets registered with a TTL (what trainers do for
rollout replicas) disappear unless they are registered again within it: targets of a finished
run leave the list by themselves. ``ttl_s = 0`` targets (``rl-insight targets add``) stay, and
are kept across server restarts in ``targets.json`` under the data dir: written by a background
thread at most every ``save_interval_s`` (write to a temporary file, then rename), and at close.
"""

import builtins
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypedDict

import msgspec

from verl_rl_insight.contract.errors import BadInput, Forbidden
from verl_rl_insight.contract.naming import label_value_problem
from verl_rl_insight.contract.wire import TargetBody, field_problem
from verl_rl_insight.server.settings.prometheus_jobs import OWN_JOBS
from verl_rl_insight.server.settings.server import MAX_TARGETS_PER_RUN
from verl_rl_insight.server.stores.files import set_aside, write_atomically
from verl_rl_insight.server.stores.own_address import own_port_problem, pinned

MAX_TARGETS = 10_000
# all runs' targets together at most RUN_TARGETS_SCALE x max_targets_per_run, and a run at most half of
# what the other runs leave of that (the hub's rule for its memory, metrics/budgets.py): eight runs
# cannot each take the largest job's worth of Prometheus' scrapes, and a new run always finds room
RUN_TARGETS_SCALE = 2
RUN_TARGETS_FLOOR = 8  # ... yet every run may register this many (a small job's replicas), whatever the others hold
# the longest TTL a run credential's target may have: a run's targets leave with it (the trainer
# renews every TTL/3); targets that stay (ttl_s 0) and longer ones are for the token
RUN_MAX_TTL_S = 3600.0


class TargetError(BadInput):
    """A target that breaks a rule; the message names the field."""


def check_target(address: object, job: object, labels: object, ttl_s: object) -> TargetBody:
    """A valid target, its labels as strings: the wire schema's TargetBody decides, whoever calls
    (the API, ``rl-insight targets add``, the file kept across restarts). Numbers as label values
    become text; anything else that breaks a rule is a TargetError naming the field."""
    if isinstance(labels, dict):
        labels = {
            k: str(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v for k, v in labels.items()
        }
    try:
        body = msgspec.convert({"address": address, "job": job, "labels": labels, "ttl_s": ttl_s}, TargetBody)
    except msgspec.ValidationError as exc:
        host, _, port = address.rpartition(":") if isinstance(address, str) else ("", "", "")
        if host and port.isascii() and port.isdigit() and not 0 < int(port) < 65536:  # say which rule it broke
            raise TargetError(f"address {str(address)[:80]!r}: port {int(port)} is out of range (1-65535)") from None
        raise TargetError(field_problem(exc, "a target: address, job, labels, ttl_s")) from None
    if "job" in body.labels:
        raise TargetError("labels: invalid label name 'job' (the target's job is a field of its own)")
    for name, value in body.labels.items():
        problem = label_value_problem(value)  # text with no UTF-8 form: not a rule a schema states
        if problem:
            raise TargetError(f"labels.{name} {problem}")
    body.labels = dict(body.labels)
    return body


def check_job_not_reserved(job: object) -> None:
    """A TargetError when ``job`` is one the server's Prometheus scrapes itself (``rl_insight_hub``,
    ...): a target under that job would pass for the hub, and its fake scrape numbers for scrapes
    the store has."""
    if job in OWN_JOBS:
        raise TargetError(
            f"job {job!r} is reserved: the server's Prometheus scrapes it itself "
            f"(reserved: {', '.join(OWN_JOBS)}); give the target a job of its own"
        )


class Target(TypedDict):
    """A registered target as the API lists it."""

    job: str
    address: str
    labels: dict[str, str]
    ttl_s: float
    expires_in_s: float | None


class _Entry(TypedDict):
    labels: dict[str, str]
    ttl_s: float
    expires: float | None  # on the registry's clock; None: no expiry
    scraped: str | None  # the address Prometheus is handed: the host resolved at registration (own_address.pinned)


def _sd_group(job: str, address: str, entry: _Entry) -> dict[str, builtins.list[str] | dict[str, str]]:
    """A target in Prometheus' http_sd format: the address resolved at registration, and where the
    user gave a name for it, the name as ``instance`` (what Prometheus would have called it)."""
    scraped = entry.get("scraped") or address
    named = {"instance": address} if scraped != address else {}
    return {"targets": [scraped], "labels": {**named, **entry["labels"], "job": job}}


def check_owner(key: tuple[str, str], labels: dict[str, str], writer: tuple[str, str]) -> None:
    """Forbidden when a run credential's registration would take an address that a live target of
    another run holds (under any job), or one without a run (``rl-insight targets add``): it would
    relabel that run's engine series as the writer's, or turn a person's static target into one
    that expires."""
    owner = labels.get("project"), labels.get("experiment_name")
    if owner == writer:
        return
    whose = f"run {owner[0]}/{owner[1]}" if None not in owner else "a person (no run labels: rl-insight targets add)"
    raise Forbidden(
        f"address: {key[1][:80]!r} is a target of job {key[0][:80]!r} registered by {whose[:200]}; a run "
        f"credential adds new addresses and renews its own only (a run's target is free again once that run "
        f"removes it or its TTL runs out)"
    )


def check_run_ttl(ttl_s: float) -> None:
    """A TargetError unless a run credential's target expires within RUN_MAX_TTL_S."""
    if not 0 < ttl_s <= RUN_MAX_TTL_S:
        raise TargetError(
            f"ttl_s: a run credential's target expires, after 1 to {RUN_MAX_TTL_S:.0f} s (got {ttl_s:g}); "
            "targets that stay (ttl_s 0) take the server's token (rl-insight targets add)"
        )


def address_key(address: str) -> str:
    """An address as ownership compares it: the host's letters in one case (DNS names are)."""
    host, _, port = address.rpartition(":")
    return f"{host.lower()}:{port}"


class TargetRegistry:
    def __init__(
        self,
        store_path: Path | None = None,
        clock: Callable[[], float] = time.monotonic,
        save_interval_s: float = 0.5,
        max_per_run: int = MAX_TARGETS_PER_RUN,
        own_ports: frozenset[int] = frozenset(),
    ) -> None:
        self.max_per_run = max_per_run  # one run's targets at most (check_run_cap)
        self.own_ports = own_ports  # this server's ports: no target may be one of them here (own_address.py)
        self.store_path = store_path
        self.clock = clock
        self.save_interval_s = save_interval_s
        self.writes = 0
        self._lock = threading.Lock()
        self._targets: dict[tuple[str, str], _Entry] = {}  # (job, address) ->
        self._at: dict[str, set[tuple[str, str]]] = {}  # address_key -> the (job, address) keys there
        self._dirty = False
        self._wake = threading.Event()
        self._save_lock = threading.Lock()
        self._closed = threading.Event()  # set by close(): ends the writer's pause between two writes at once
        self._writer: threading.Thread | None = None
        self._load()

    def register(
        self,
        address: object,
        job: object,
        labels: object = None,
        ttl_s: object = 90.0,
        writer: tuple[str, str] | None = None,
    ) -> Target:
        """Add or renew a target (a heartbeat is the same call); every argument is checked here,
        whoever calls. Returns its record. ``writer``: the run of the run credential that asks
        (None: the server's token or the CLI), which may add a target or renew its own, never take
        over one that another run or a person registered (check_owner)."""
        check_job_not_reserved(job)
        target = check_target(address, job, labels or {}, ttl_s)
        job, address, labels, ttl_s = target.job, target.address, target.labels, target.ttl_s
        if writer is not None:
            check_run_ttl(ttl_s)
        scraped, ips = pinned(address)  # (resolves the host once, before the lock: checked is scraped)
        if scraped is None:
            raise TargetError(f"address: {address[:80]!r} does not resolve to an address here")
        problem = own_port_problem(address, self.own_ports, ips)
        if problem:
            raise TargetError(problem)
        with self._lock:
            self._expire()
            key = (job, address)
            previous = self._targets.get(key)
            if writer is not None:
                for held in self._at.get(address_key(address), ()):
                    check_owner(held, self._targets[held]["labels"], writer)
            if previous is None and len(self._targets) >= MAX_TARGETS:
                raise TargetError(f"at most {MAX_TARGETS} targets")
            if previous is None:
                self._check_run_cap(labels)
            expires = None if not ttl_s else self.clock() + ttl_s
            self._put(key, {"labels": labels, "ttl_s": ttl_s, "expires": expires, "scraped": scraped})
            if not ttl_s or (previous is not None and not previous["ttl_s"]):
                self._changed()
            return self._record(key)

    def _check_run_cap(self, labels: dict[str, str]) -> None:
        """Refuse a new target of a run that has ``max_per_run`` already (one run credential
        cannot fill the registry, nor Prometheus with what those targets serve)."""
        project, experiment = labels.get("project"), labels.get("experiment_name")
        if project is None or experiment is None:
            return  # not a run's (``rl-insight targets add`` of a node exporter): MAX_TARGETS holds it
        runs: dict[tuple[str, str], int] = {}
        for e in self._targets.values():
            labelled = e["labels"]
            if "project" in labelled and "experiment_name" in labelled:
                run = labelled["project"], labelled["experiment_name"]
                runs[run] = runs.get(run, 0) + 1
        held = runs.pop((project, experiment), 0)
        whole = RUN_TARGETS_SCALE * self.max_per_run
        allowed = min(self.max_per_run, max(RUN_TARGETS_FLOOR, (whole - sum(runs.values())) // 2))
        if held >= allowed:
            raise TargetError(
                f"labels: run {project[:80]!r} / {experiment[:80]!r} has {held} targets, the most it may register "
                f"now ({allowed}: at most max_targets_per_run: {self.max_per_run}, and half of what the other runs "
                f"leave of {whole} for all runs, at least {RUN_TARGETS_FLOOR}); remove some, or raise "
                "max_targets_per_run"
            )

    def remove(self, address: str, job: str) -> bool:
        with self._lock:
            removed = self._drop((job, address))
            if removed is not None and not removed["ttl_s"]:
                self._changed()
            return removed is not None

    def labels(self, job: str, address: str) -> dict[str, str]:
        """The labels of the live target ``(job, address)`` ({} when there is none): one lookup, not
        the whole list (the router reads it for every DELETE of a run credential)."""
        with self._lock:
            entry = self._targets.get((job, address))
            if entry is None or (entry["expires"] is not None and entry["expires"] <= self.clock()):
                return {}
            return dict(entry["labels"])

    def list(self) -> builtins.list[Target]:
        with self._lock:
            self._expire()
            return [self._record(key) for key in sorted(self._targets)]

    def http_sd(self) -> builtins.list[dict[str, builtins.list[str] | dict[str, str]]]:
        """The target groups in Prometheus' http_sd format (``job`` as a target label)."""
        with self._lock:
            self._expire()
            return [_sd_group(j, a, e) for (j, a), e in sorted(self._targets.items())]

    def close(self) -> None:
        """Write what is pending and stop the writer."""
        self._closed.set()
        self._wake.set()
        if self._writer is not None:
            self._writer.join(5)
        self._save()

    def _record(self, key: tuple[str, str]) -> Target:
        entry = self._targets[key]
        expires_in = None if entry["expires"] is None else round(entry["expires"] - self.clock(), 1)
        return {
            "job": key[0],
            "address": key[1],
            "labels": dict(entry["labels"]),
            "ttl_s": entry["ttl_s"],
            "expires_in_s": expires_in,
        }

    def _put(self, key: tuple[str, str], entry: _Entry) -> None:
        self._targets[key] = entry
        self._at.setdefault(address_key(key[1]), set()).add(key)

    def _drop(self, key: tuple[str, str]) -> _Entry | None:
        entry = self._targets.pop(key, None)
        there = self._at.get(address_key(key[1]))
        if there is not None:
            there.discard(key)
            if not there:
                del self._at[address_key(key[1])]
        return entry

    def _expire(self) -> None:
        now = self.clock()
        for key in [k for k, e in self._targets.items() if e["expires"] is not None and e["expires"] <= now]:
            self._drop(key)

    def _changed(self) -> None:
        if self.store_path is None:
            return
        self._dirty = True
        self._wake.set()
        if self._writer is None:
            self._writer = threading.Thread(target=self._write_loop, name="targets-writer", daemon=True)
            self._writer.start()

    def _write_loop(self) -> None:
        while not self._closed.is_set():
            self._wake.wait()
            self._wake.clear()
            if self._closed.is_set():
                return
            self._save()
            if self._closed.wait(self.save_interval_s):  # changes meanwhile go out in the next write
                return

    def _save(self) -> None:
        if self.store_path is None:
            return
        with self._save_lock:
            with self._lock:
                if not self._dirty:
                    return
                self._dirty = False
                static = [
                    {"job": j, "address": a, "labels": e["labels"], "scraped": e.get("scraped") or a}
                    for (j, a), e in sorted(self._targets.items())
                    if not e["ttl_s"]
                ]
            write_atomically(self.store_path, json.dumps(static, indent=2))
            self.writes += 1

    def _load(self) -> None:
        if self.store_path is None or not self.store_path.exists():
            return
        try:
            for item in json.loads(self.store_path.read_text()):
                target = check_target(item["address"], item["job"], item.get("labels") or {}, 0)
                scraped = item.get("scraped") if isinstance(item.get("scraped"), str) else None
                entry: _Entry = {"labels": target.labels, "ttl_s": 0, "expires": None, "scraped": scraped}
                self._put((target.job, target.address), entry)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            self._targets.clear()
            self._at.clear()
            set_aside(self.store_path, str(exc)[:200])  # the server starts; trainers register again
