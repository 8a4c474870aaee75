"""The one registry mechanism: a :class:`Registry` of named entries, used by every pluggable part.

Scores (``pcmr.similarity``), re-weightings and matchings (``pcmr.inference``), losses
(``pcmr.losses``), datasets (``pcmr.data``) and search backends (``pcmr.search``) are each one
``Registry``. An entry is registered under its ``name`` attribute (or a name given explicitly), a
second entry under a taken name is refused, an unknown name raises one error that names the registry,
suggests the near miss and lists the accepted names (:func:`pcmr.suggest.unknown_name`)::

    LOSSES: Registry[LossEntry] = Registry("loss")
    LOSSES.register(LossEntry("pcme", ...))
    LOSSES.get("pcmee")  # ValueError: unknown loss 'pcmee' (did you mean 'pcme'?); expected one of: pcme

:meth:`Registry.names` lists the entries in registration order, or, for a registry built with
``order``, sorted by that key of each entry (a property of the registered thing, e.g. a score's
``listing_rank``), ties broken by name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar, overload

from pcmr.suggest import unknown_name

__all__ = ["Registry", "every_registry"]

T = TypeVar("T")
E = TypeVar("E")

_ALL: list[Registry[Any]] = []


class Registry(Generic[T]):
    """Entries of one kind by name.

    Args:
        kind: what an entry is, in messages (``"similarity"``, ``"loss"``, ``"dataset"``).
        order: the sort key of an entry for :meth:`names` (ties by name); None: registration order.
        error: the exception class of an unknown name (a ``ValueError`` subclass, e.g. ``DataError``).
        check_name: called with each new name before it is registered; raises on a name the registry
            refuses beyond a taken one (e.g. the re-rankers' ``+``).
    """

    def __init__(self, kind: str, *, order: Callable[[T], Any] | None = None,
                 error: type[Exception] = ValueError, check_name: Callable[[str], None] | None = None) -> None:
        self.kind = kind
        self._order = order
        self._error = error
        self._check_name = check_name
        self._entries: dict[str, T] = {}
        _ALL.append(self)

    @overload
    def register(self, entry: E, *, name: str | None = None) -> E: ...

    @overload
    def register(self, entry: None = None, *, name: str | None = None) -> Callable[[E], E]: ...

    def register(self, entry: Any = None, *, name: str | None = None) -> Any:
        """Register ``entry`` under ``name`` (default: ``entry.name``) and return it, so it also works
        as a class decorator (``@REGISTRY.register``); without ``entry``, a decorator registering its
        argument under ``name``. ValueError for an empty, refused or taken name."""
        if entry is None:
            return lambda thing: self.register(thing, name=name)
        key = name if name is not None else getattr(entry, "name", None)
        if not isinstance(key, str) or not key:
            raise ValueError(f"a {self.kind} needs a non-empty name, got {key!r}")
        if key in self._entries:
            raise ValueError(f"{self.kind} name {key!r} is already registered")
        if self._check_name is not None:
            self._check_name(key)
        self._entries[key] = entry
        return entry

    def unregister(self, name: str) -> None:
        """Remove ``name`` (a test's throw-away entry); KeyError-free when it is not registered."""
        self._entries.pop(name, None)

    def names(self) -> list[str]:
        """Every registered name, in the registry's listing order."""
        if self._order is None:
            return list(self._entries)
        order = self._order
        return sorted(self._entries, key=lambda key: (order(self._entries[key]), key))

    def get(self, name: str) -> T:
        """The entry called ``name``; the registry's error naming its kind, the near miss and the accepted
        names otherwise."""
        if not isinstance(name, str) or name not in self._entries:
            raise self._error(unknown_name(self.kind, str(name), self.names()))
        return self._entries[name]

    def find(self, name: object) -> T | None:
        """The entry called ``name``, or None."""
        return self._entries.get(name) if isinstance(name, str) else None

    def items(self) -> list[tuple[str, T]]:
        """``(name, entry)`` pairs in listing order."""
        return [(key, self._entries[key]) for key in self.names()]

    def values(self) -> list[T]:
        """The entries in listing order."""
        return [self._entries[key] for key in self.names()]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {self.names()})"


def every_registry() -> list[Registry[Any]]:
    """Every :class:`Registry` created so far (each registry is created once, at import of its module)."""
    return list(_ALL)
