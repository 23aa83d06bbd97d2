"""The names the readers look for: verl's own range names for the RL phases, the collectives'
names in each backend's traces, and what a trace's path says of its step, rank and node."""

from __future__ import annotations

import re
from pathlib import Path

from verl_rl_insight.contract import verl_phases
from verl_rl_insight.contract.verl_phases import (
    FIT_LOOP,
    FORWARD_BACKWARD,
    GEN,
    SAVE_CHECKPOINT,
    TESTING,
    TRAIN_BATCH,
    UPDATE_ACTOR,
)

# verl 0.9.1 marks a phase in two places: the trainer's ``marked_timer(name)`` (NVTX / MSTX ranges
# on the driver) and the workers' ``DistProfiler.annotate(role=...)`` (torch ``record_function`` /
# NVTX / MSTX ranges on each rank; older workers used the method names): contract/verl_phases.py
# names them all. Each is shown under the trainer's name, the one ``timing_s/<name>`` has. Validation
# and checkpoint saving are not read as phases: a trace's analysis compares the ranks' share of a
# step's training work, and verl runs those two only on the steps test_freq / save_freq name.
NOT_READ = (TESTING, SAVE_CHECKPOINT)
PHASE_OF: dict[str, str] = {name: phase for name, phase in verl_phases.PHASE_OF.items() if phase not in NOT_READ}
# a trace with none of verl's marks: torch's own ``ProfilerStep#N`` ranges (``prof.step()``) are its phase
TORCH_STEP = "ProfilerStep"
# the order a step runs them in (verl's fit loop), for printing: the ranks' own parts of a training
# worker's update (train_batch, forward_backward) beside update_actor
_READ = tuple(phase for phase in FIT_LOOP if phase not in NOT_READ)
_AT = _READ.index(UPDATE_ACTOR)
ORDER: tuple[str, ...] = (*_READ[:_AT], TRAIN_BATCH, UPDATE_ACTOR, FORWARD_BACKWARD, *_READ[_AT + 1 :])

# a folder of the official layout named after a rollout replica: its traces are the gen phase
ROLLOUT_DIR = re.compile(r"^(?:agent_loop_)?rollout(?:_replica)?_?(\d+)?$")

_COLLECTIVE_PREFIXES = ("nccl", "gloo:", "c10d::", "hccl", "hcom_", "nccl:")
_OPS = (
    ("allreduce", "all-reduce"),
    ("allgather", "all-gather"),
    ("reducescatter", "reduce-scatter"),
    ("alltoall", "all-to-all"),
    ("broadcast", "broadcast"),
    ("barrier", "barrier"),
    ("sendrecv", "send/recv"),
    ("send", "send/recv"),
    ("recv", "send/recv"),
    ("reduce", "reduce"),
    ("gather", "gather"),
    ("scatter", "scatter"),
)


def collective(name: str) -> str | None:
    """The collective an event is ('all-reduce', ...), or None when it is not one.

    NCCL kernels (``ncclDevKernel_AllReduce_Sum_f32_RING_LL``), NCCL / gloo ranges
    (``nccl:all_reduce``, ``gloo:all_reduce``: from enqueue to completion, so the wait for the
    slowest peer is inside), ``c10d::`` ops and HCCL / HCOM ops (``hcom_allReduce_``)."""
    low = name.lower()
    if not low.startswith(_COLLECTIVE_PREFIXES) or low.startswith("ncclcomm"):
        return None
    plain = re.sub(r"[^a-z]", "", low.split("::", 1)[-1].split(":", 1)[-1])
    plain = plain.removeprefix("nccldevkernel").removeprefix("ncclkernel").removeprefix("hcom").removeprefix("hccl")
    for needle, op in _OPS:
        if plain.startswith(needle) or (needle in plain and len(needle) > 6):
            return op
    return "collective"


_STEP = re.compile(r"(?:^|[_/.-])(?:global_)?step[_-]?(\d+)(?=$|[_/.-])")
_RANK = re.compile(r"(?:^|_)rank[_-]?(\d+)(?:-of-\d+)?(?=$|[_.])")
_HOST_TORCH = re.compile(r"^(.+)_\d+\.\d+\.pt\.trace\.json(?:\.gz)?$")
_HOST_ASCEND = re.compile(r"^(.+)_\d+_\d+_ascend_pt$")


def step_in(path: Path) -> int | None:
    """The RL step a path names (verl 0.9.1's ``..._step120_rank3-of-8_...`` file name, or a
    ``step_120`` / ``global_step_120`` folder), or None."""
    for part in (path.name, *(p.name for p in path.parents)):
        found = _STEP.search(part)
        if found:
            return int(found.group(1))
    return None


def rank_in(path: Path) -> int | None:
    """The rank a file name carries (``rank3-of-8``, ``prof_rank-0_031904``), or None."""
    found = _RANK.search(path.name.replace("prof_", ""))
    return int(found.group(1)) if found else None


def node_in(path: Path) -> str | None:
    """The host a file or folder name carries: torch's default ``<host>_<pid>.<ns>.pt.trace.json``
    and torch_npu's ``<host>_<pid>_<ms>_ascend_pt``; None when the name has none."""
    for part in (path.name, *(p.name for p in path.parents)):
        for pattern in (_HOST_TORCH, _HOST_ASCEND):
            found = pattern.match(part)
            if found and found.group(1) != "xxx":
                return found.group(1)
    return None


def phase_of_path(path: Path) -> str | None:
    """The phase a file stands for as a whole: the official layout's role folder
    (``actor_update/prof_rank-0_*.json.gz``, ``agent_loop_rollout_replica_0/...``) or verl 0.9.1's
    discrete-mode file name (``actor_actor_update_step3_rank0-of-2_...``)."""
    for part in (*(p.name for p in path.parents), path.name):
        if part in PHASE_OF:
            return PHASE_OF[part]
        if ROLLOUT_DIR.match(part):
            return GEN
    stem = path.name.split("_step")[0]
    for name in sorted(PHASE_OF, key=len, reverse=True):
        if stem.endswith(name) and len(name) > 4:
            return PHASE_OF[name]
    return None


def replica_in(path: Path) -> int | None:
    """The rollout replica a folder names (``agent_loop_rollout_replica_0``), or None."""
    for parent in path.parents:
        found = ROLLOUT_DIR.match(parent.name)
        if found and found.group(1) is not None:
            return int(found.group(1))
    return None
