"""A part's own counters as one typed record (as the hub's ``HubStats``): each counter a field,
incremented as an attribute (``stats.dropped += 1``) under the part's own lock where it has one.

``as_dict()`` is the JSON a part reports (``/api/v1/info``), in field order; ``stats["dropped"]`` reads
one by name (a test, a summary that names it), and a name that is no counter is a KeyError."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(slots=True)
class Counters:
    """The base of each part's counters: a subclass declares them (``dropped: int = 0``)."""

    def __getitem__(self, name: str) -> int:
        if name not in self.names():
            raise KeyError(name)
        value: int = getattr(self, name)
        return value

    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(self))

    def as_dict(self) -> dict[str, int]:
        return {name: self[name] for name in self.names()}
