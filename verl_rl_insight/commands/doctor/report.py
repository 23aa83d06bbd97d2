"""The checklist's lines (ok, PROBLEM with its fix, skipped), and quiet third-party logging while it runs."""

import contextlib
import logging
import warnings
from collections.abc import Iterator
from typing import TextIO

from verl_rl_insight.commands.printable import printable


class Report:
    """The checklist's lines; what a check shows of a server's answer is made printable here."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.problems = 0

    def ok(self, what: str, detail: str = "") -> None:
        print(printable(f"ok       {what}" + (f": {detail}" if detail else "")), file=self.out)

    def problem(self, what: str, detail: str, fix: str) -> None:
        self.problems += 1
        print(printable(f"PROBLEM  {what}: {detail}"), printable(f"         fix: {fix}"), sep="\n", file=self.out)

    def skip(self, what: str, why: str) -> None:
        print(printable(f"skipped  {what}: {why}"), file=self.out)


@contextlib.contextmanager
def third_party_quiet() -> Iterator[None]:
    """No log record or Python warning of WARNING or below while the block runs (verl, Hydra and Ray
    log theirs on import: "No supported accelerator detected"); doctor's own lines are printed, not logged."""
    before = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(before)
