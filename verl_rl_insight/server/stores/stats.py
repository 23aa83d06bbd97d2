"""The stores' own counters, one typed record per store (as the hub's ``metrics/stats.py``): each
store increments its own (under its lock, where it has one) and reports them by name (``as_dict``)."""

from __future__ import annotations

import dataclasses

from verl_rl_insight.contract.counters import Counters


@dataclasses.dataclass(slots=True)
class RunKeysStats(Counters):
    runs: int = 0  # runs whose keys are held now
    bytes: int = 0  # what they take (booked with the server's memory)
    refused_keys: int = 0  # keys not kept: beyond max_per_run, or beyond the memory booked
    write_errors: int = 0  # a run's keys file that could not be written (the keys stay held in memory)


@dataclasses.dataclass(slots=True)
class SpanStoreStats(Counters):
    received: int = 0  # spans of a run (labelled project and experiment_name) received
    kept: int = 0  # of them, written to the run's files
    dropped: int = 0  # of them, in one request larger than a run may hold
    unlabelled: int = 0  # spans without a run's labels, not kept
    evicted_runs: int = 0  # runs whose files went at max_total_bytes or max_runs
    evicted_spans: int = 0  # spans of a run's oldest steps that went at max_run_bytes (or came after them)


@dataclasses.dataclass(slots=True)
class SpanIndexStats(Counters):
    indexed_runs: int = 0  # run indexes started (a new run, or one indexed again from its files)
    dropped_runs: int = 0  # run indexes dropped at max_bytes (indexed again when asked for)
    bytes: int = 0  # what the indexes held take now


@dataclasses.dataclass(slots=True)
class RelayStats(Counters):
    relayed: int = 0  # bodies the collector took
    dropped: int = 0  # bodies refused: the queue was full (max_bytes) or the relay closed
    failed: int = 0  # bodies the collector never took, after every attempt
