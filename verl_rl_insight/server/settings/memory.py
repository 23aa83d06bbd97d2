"""The server's one memory bound, ``memory_limit_mb``, divided into its shares here and nowhere else.

``MemoryShares`` is computed from the bound (``ServerSettings.memory_shares``); every part that holds
memory under it is given its share from that object (``compose.py``, ``app.py``), and a part built on
its own (tests, benchmarks) takes the share of the default bound (``DEFAULT_SHARES``).

The bound is divided four ways, and the four add up to the bound exactly (integer bytes, the hub's
share taking what the other three leave), so together they never exceed it:

| share          | of the bound | at 1,024 MiB | what it holds, and how it keeps to its share                         |
| -------------- | ------------ | ------------ | -------------------------------------------------------------------- |
| ``hub``        | 57/64 (rest) | 912 MiB      | the hub's latest values and history, a named scrape's body while it  |
|                |              |              | is sent, all booked beside the hub (below): booked, a push makes     |
|                |              |              | room (oldest history first) or is refused (``metrics/memory.py``)    |
| ``histories``  | 1/16         | 64 MiB       | each run's scalars by step, drawn by the explorer and walked by the  |
|                |              |              | detectors: the run touched longest ago goes (``history/``)           |
| ``curves``     | 1/32         | 32 MiB       | the explorer's kept curves answers: the oldest goes                  |
| ``span_index`` | 1/64         | 16 MiB       | where each step's spans lie, for step pages: the run asked for or    |
|                |              |              | written to longest ago goes (``stores/span_index.py``)               |

Inside the hub's share, what the server books beside the hub (``Bound.book_other``: marks, the
detectors' walks and the series they made, run keys, and those below) is at most ``beside_hub``, a
quarter of the hub's share, so the trainers' pushes always keep three quarters of it. The shares
below are caps within that quarter, not room of their own:

| share                 | of            | at 1,024 MiB | what it holds                                          |
| --------------------- | ------------- | ------------ | ------------------------------------------------------ |
| ``beside_hub``        | 1/4 of hub    | 228 MiB      | everything booked beside the hub, together             |
| ``timeline``          | = beside_hub  | 228 MiB      | the timeline's waiting spans, each run its share       |
| ``answers_in_flight`` | 1/16 of bound | 64 MiB       | answers being written (``api/writer.py``): past it 503 |
| ``histories_waiting`` | 1/32 of bound | 32 MiB       | the steps a push queued for the histories' next read   |

Not under the bound (each a fixed size of its own, see docs/limits.md): request bodies being
received (``api/parts.py``, ``BODY_BUDGET_BYTES``), the spans relayed to Tempo (``stores/span_relay.py``)
and the span store's files (disk, not memory).
"""

from __future__ import annotations

import dataclasses

MIB = 2**20
DEFAULT_MEMORY_LIMIT_MB = 1024  # ServerSettings.memory_limit_mb's default


def beside_hub(hub_bytes: int) -> int:
    """What may be booked beside the hub within the hub's share of ``hub_bytes``: a quarter of it."""
    return hub_bytes // 4


@dataclasses.dataclass(frozen=True)
class MemoryShares:
    """The shares of ``bound`` (bytes, ``memory_limit_mb``): see the module's tables."""

    bound: int

    # the shares that divide the bound between them (they add up to it); the others lie inside ``hub``
    PARTS = ("hub", "histories", "curves", "span_index")

    @classmethod
    def of_mb(cls, memory_limit_mb: float) -> MemoryShares:
        return cls(int(memory_limit_mb * MIB))

    @property
    def histories(self) -> int:
        return self.bound // 16

    @property
    def curves(self) -> int:
        return self.bound // 32

    @property
    def span_index(self) -> int:
        return self.bound // 64

    @property
    def hub(self) -> int:
        """The metric hub's limit (``Bound``): what the histories, curves and span index leave."""
        return self.bound - self.histories - self.curves - self.span_index

    @property
    def beside_hub(self) -> int:
        return beside_hub(self.hub)

    @property
    def timeline(self) -> int:
        return self.beside_hub

    @property
    def answers_in_flight(self) -> int:
        return self.bound // 16

    @property
    def histories_waiting(self) -> int:
        return self.histories // 2


DEFAULT_SHARES = MemoryShares.of_mb(DEFAULT_MEMORY_LIMIT_MB)  # for a part built on its own (tests, benchmarks)
