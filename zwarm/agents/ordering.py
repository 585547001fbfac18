"""Steps in the order the agent started them, for parsers that learn an item's step only
when it ends (a command's exit code comes with its result).

Owns ``InOrder``: a parser gives it each started item's place (``open``), fills the place
when the item ends (``close``), adds every other step (``add``), and takes the steps that no
open item precedes (``ready``); at the end of the log, ``finish`` puts what never ended in
its place. Must stay true:
- every step comes out once, in the order the items were started and the other steps came;
- memory is bounded: at most ``HOLD_STEPS`` steps wait behind an open item; past that, the
  oldest open item is given up where it started (as its parser says an unended one looks),
  and its end, if it ever comes, is a step of its own where it comes;
- stdlib only, cheap when nothing is open (parsers test ``held`` first).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

Step = dict[str, Any]

HOLD_STEPS = 10_000  # steps held behind an open item before it is given up as still running


class _Place:
    """Where an open item's steps go, once it ends (``steps``)."""

    __slots__ = ("key", "steps")

    def __init__(self, key: str) -> None:
        self.key = key
        self.steps: list[Step] | None = None


class InOrder:
    """The steps of one log, held while an item started before them is still open."""

    __slots__ = ("_unended", "held")

    def __init__(self, unended: Callable[[str], list[Step]]) -> None:
        # steps and open items' places, in order; empty when nothing waits (parsers test it)
        self.held: deque[Step | _Place] = deque()
        self._unended = unended  # an open item's steps, as it looks unended (and forgets it)

    def open(self, key: str) -> None:
        self.held.append(_Place(key))

    def close(self, key: str, steps: list[Step]) -> bool:
        """Item ``key`` ended with ``steps``, put in its place; False if it has none."""
        for place in self.held:
            if type(place) is _Place and place.steps is None and place.key == key:
                place.steps = steps
                return True
        return False

    def has(self, key: str) -> bool:
        """Whether item ``key`` has its place (and has not ended)."""
        return any(type(p) is _Place and p.steps is None and p.key == key for p in self.held)

    def add(self, step: Step) -> None:
        self.held.append(step)

    def ready(self) -> Iterator[Step]:
        """The steps no open item precedes, taken out (the oldest open item is given up
        first when too many wait behind it)."""
        held = self.held
        if len(held) > HOLD_STEPS:
            for place in held:
                if type(place) is _Place and place.steps is None:
                    place.steps = self._unended(place.key)
                    break
        while held:
            first = held[0]
            if type(first) is dict:
                yield held.popleft()  # type: ignore[misc]  # a Step
            elif first.steps is not None:  # type: ignore[union-attr]
                yield from held.popleft().steps  # type: ignore[union-attr, misc]
            else:
                return

    def finish(self) -> Iterator[Step]:
        """Everything held, an item that never ended in its place."""
        for place in self.held:
            if type(place) is dict:
                yield place
            else:
                assert isinstance(place, _Place)
                yield from place.steps if place.steps is not None else self._unended(place.key)
        self.held.clear()
