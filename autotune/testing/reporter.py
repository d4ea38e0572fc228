"""A search reporter for tests (autotune.search.tuner.SearchReporter): it keeps every note and shows nothing."""

from __future__ import annotations


class KeptNotes:
    """The notes a search said, in order; the progress it reports is dropped."""

    def __init__(self):
        self.lines: list[str] = []

    def note(self, text: str) -> None:
        self.lines.append(text)

    def trial_started(self, *args) -> None: ...

    def prompt_done(self, *args) -> None: ...

    def trial_finished(self, *args) -> None: ...

    def race_status(self, text: str) -> None: ...
