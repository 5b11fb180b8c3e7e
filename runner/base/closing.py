"""`with` over an object that has a `close()`: one protocol for the run dir's driver, the
sample writer and the results store, each of which must release what it holds (a lock, a
writer thread, a database engine) however the block ends."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TypeVar

_C = TypeVar("_C", bound="Closes")


class Closes(ABC):
    """A base whose `with` block ends in `close()`, on success or on an error alike (the
    error still propagates). A subclass defines `close()` (abstract: one that does not
    cannot be made)."""

    @abstractmethod
    def close(self) -> None:
        """Releases what the object holds (a lock, a thread, an engine)."""

    def __enter__(self: _C) -> _C:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
