"""How many sequences (prompt x response) a run trains on a step: what lets the explorer draw two runs
by samples seen rather than by step when their batch sizes differ.

From what every step logged where it can: ``perf/total_num_tokens`` over ``prompt_length/mean +
response_length/mean`` (``contract/verl_keys.py``), taken only where every step gives the same whole
number (what the run trained on, measured; a card that says otherwise is named beside it); else from the
run's card (verl's ``data.train_batch_size`` x ``actor_rollout_ref.rollout.n``). A multi-turn agent run,
whose logged lengths are not what its token count sums, or a run whose batch changes from step to step,
without a card gives no number, and says why.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

from verl_rl_insight.contract.redaction import Json
from verl_rl_insight.contract.verl_keys import (
    PROMPT_LENGTH_MEAN,
    RESPONSE_LENGTH_MEAN,
    ROLLOUT_N,
    TOTAL_TOKENS,
    TRAIN_BATCH_SIZE,
)
from verl_rl_insight.server.explorer.keys import series_of
from verl_rl_insight.server.history.run_history import RunHistory

# a step's quotient is taken as a whole number when it lies this close to one (the logged means are floats:
# real runs give 256.001 and 5119.98): an absolute floor, and a share of the number for the big batches
ABSOLUTE_SLACK = 0.05
RELATIVE_SLACK = 1e-5
MAX_PER_STEP = 10**8  # more sequences a step than any cluster trains on: a card or a log that lies


class SamplesSeen(NamedTuple):
    per_step: int | None  # sequences a step; None: not known, ``source`` says why
    source: str  # where the number comes from, or why there is none


def _config_int(config: Mapping[str, Json], path: tuple[str, ...]) -> int | None:
    node: Json = dict(config)
    for part in path:
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    if isinstance(node, bool) or not isinstance(node, (int, float)) or node != int(node) or node < 1:
        return None
    return int(node)


def from_card(card: Mapping[str, Json] | None) -> SamplesSeen | None:
    """The number the run's card gives (its ``config``), None when the card does not hold both keys."""
    config = card.get("config") if card is not None else None
    if not isinstance(config, dict):
        return None
    batch, n = _config_int(config, TRAIN_BATCH_SIZE), _config_int(config, ROLLOUT_N)
    if batch is None or n is None or batch * n > MAX_PER_STEP:
        return None
    return SamplesSeen(batch * n, f"card: {'.'.join(TRAIN_BATCH_SIZE)} {batch} x {'.'.join(ROLLOUT_N)} {n}")


def from_logged(
    tokens: Sequence[tuple[int, float]], prompt: Sequence[tuple[int, float]], response: Sequence[tuple[int, float]]
) -> SamplesSeen:
    """The number every step's logged keys give ([(step, value)] each), or None with the reason."""
    lengths = {step: value for step, value in prompt}
    answers = {step: value for step, value in response}
    counts: list[tuple[int, float]] = []
    for step, total in tokens:
        length = lengths.get(step, float("nan")) + answers.get(step, float("nan"))
        if length > 0 and total > 0:
            counts.append((step, total / length))
    if not counts:
        return SamplesSeen(None, f"neither a card nor {TOTAL_TOKENS} with the prompt and response lengths")
    first_step, first = counts[0]
    whole = round(first)
    for step, count in counts:
        if abs(count - whole) > max(ABSOLUTE_SLACK, RELATIVE_SLACK * whole):
            return SamplesSeen(
                None,
                f"{TOTAL_TOKENS} / ({PROMPT_LENGTH_MEAN} + {RESPONSE_LENGTH_MEAN}) is {first:.2f} at step "
                f"{first_step} and {count:.2f} at step {step}: not one batch size (multi-turn or dynamic "
                "batches); send the run's card",
            )
    if whole < 1 or whole > MAX_PER_STEP:
        return SamplesSeen(None, f"{TOTAL_TOKENS} gives {whole} sequences a step: not a batch size")
    return SamplesSeen(
        whole, f"logged: {TOTAL_TOKENS} / ({PROMPT_LENGTH_MEAN} + {RESPONSE_LENGTH_MEAN}) at {len(counts)} steps"
    )


def of_run(history: RunHistory | None, card: Mapping[str, Json] | None) -> SamplesSeen:
    """The run's sequences a step (``card``: the card as the run sent it): what its steps logged where
    that is one whole number (what it trained, measured), else what its card configured."""
    carded = from_card(card)
    if history is None:
        return carded or SamplesSeen(None, "no step of the run is here")
    logged = from_logged(
        *(history.series(series_of(k)) for k in (TOTAL_TOKENS, PROMPT_LENGTH_MEAN, RESPONSE_LENGTH_MEAN))
    )
    if logged.per_step is None:
        return carded or logged
    if carded is not None and carded.per_step != logged.per_step:
        return SamplesSeen(logged.per_step, f"{logged.source}; its {carded.source} = {carded.per_step}")
    return logged
