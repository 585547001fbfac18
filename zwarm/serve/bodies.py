"""What the HTTP API accepts: the request bodies of ``zwarm serve``, as msgspec Structs.

Owns their shapes and bounds (the OpenAPI description is made from them, so it cannot drift);
a number a session keeps has the bounds meta.json's schema declares (``zwarm.model.records``).
Must stay true: a body is a JSON object with exactly these keys (an unknown key, a wrong type
or a value out of bounds is refused before anything runs); every value is checked again by
``zwarm.api.Zwarm``, which these only pass on.
"""

from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from zwarm.model.records import Count, Money, Priority, Seconds

Text = Annotated[str, Meta(min_length=1, max_length=4 << 20)]
Short = Annotated[str, Meta(min_length=1, max_length=200)]
Context = Literal["summary", "native"]
Source = Annotated[str, Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,59}$")]


class Spawn(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Start a session (as ``zwarm spawn``; the keys are its options)."""

    task: Text
    adapter: Short | None = None
    model: Short | None = None
    cwd: Annotated[str, Meta(min_length=1, max_length=4096)] | None = None
    name: Annotated[str, Meta(max_length=64)] | None = None
    timeout: Seconds | None = None  # the bounds meta.json's schema declares (records)
    context: Context | None = None
    dangerous: bool = False
    worktree: bool | None = None
    branch: Short | None = None
    base: Short | None = None
    notify: bool = False
    after: Annotated[list[Short], Meta(max_length=100)] = msgspec.field(default_factory=list)
    after_any: bool = False
    group: Annotated[str, Meta(max_length=64)] | None = None
    priority: Priority = 0
    max_cost: Money | None = None  # 0 is refused by ``Zwarm.spawn`` (a budget is positive)
    max_tokens: Count | None = None
    stall: Seconds | None = None
    source: Source = "serve"


class Message(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Continue a session (as ``zwarm inject``): the next turn, queued if one runs."""

    message: Text
    context: Context | None = None
    timeout: Seconds | None = None
