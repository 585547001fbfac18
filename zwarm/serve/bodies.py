"""What the HTTP API accepts: the request bodies of ``zwarm serve``, made from the requests.

Owns which fields of ``SpawnRequest`` and ``MessageRequest`` (``zwarm.model.requests``, where
their types, bounds and help are declared) the HTTP API offers: ``SPAWN`` and ``MESSAGE``,
each field it leaves out named with why; ``BEST_OF``, a best-of set's (``POST /api/sets``).
``Spawn``, ``BestOf`` and ``Message`` are generated from those
lists (``requests.subset``), and the OpenAPI description from them, so neither can drift.
``Merges`` is the body that queues sessions for the merge queue (``Zwarm.enqueue_merge``):
no check command and no ``no_check``, which are the user's (``[merge] check``), never a
client's. Must stay true: a body is a JSON object with exactly these keys (an unknown key,
a wrong type or a value out of bounds is refused before anything runs); every value is
checked again by ``zwarm.api.Zwarm``, which these only pass on.
"""

from typing import Annotated, Any

import msgspec
from msgspec import Meta

from zwarm.model import requests
from zwarm.model.requests import MessageRequest, SpawnRequest

SPAWN = (
    "task", "adapter", "model", "cwd", "name", "timeout", "context", "dangerous", "notify",
    "worktree", "branch", "base", "host", "launcher", "launcher_option", "after", "after_any",
    "group", "priority", "account", "max_cost", "max_tokens", "stall", "source",
)  # fmt: skip
SPAWN_LEFT_OUT = {
    "detached": "a server is not a session's agent: what it starts has no parent to leave",
    "run": "set by zwarm orchestrate for its own sessions, never by a client",
    "sandbox": "zwarm's sandbox is the trusted config's ([sandbox] mode) or the user's at the "
    "command line (spawn --sandbox), never a client's to turn off",
    **dict.fromkeys(
        ("best_of", "agents", "models", "check", "check_timeout", "protect", "set_budget"),
        "a best-of set's: a set is started by its own call (Zwarm.best_of), not a session's",
    ),
}
MESSAGE = ("message", "context", "timeout")
MESSAGE_LEFT_OUT: dict[str, str] = {}

# a best-of set (POST /api/sets): the task, where, the set's own fields and the caps
BEST_OF = (
    "task", "cwd", "base", "best_of", "agents", "models", "check", "check_timeout", "protect",
    "set_budget", "timeout", "context", "group", "priority", "max_cost", "max_tokens", "stall",
    "source",
)  # fmt: skip

Spawn = requests.subset(SpawnRequest, "Spawn", SPAWN, {"source": "serve"})
BestOf = requests.subset(SpawnRequest, "BestOf", BEST_OF, {"source": "serve"})
Message = requests.subset(MessageRequest, "Message", MESSAGE)


def spawn_request(body: Any) -> SpawnRequest:
    """The ``SpawnRequest`` a decoded ``Spawn`` body asks for."""
    req: SpawnRequest = requests.to_request(SpawnRequest, body)
    # false is "not asked": the agent's [<agent>] dangerous applies, as for the CLI's flag
    return msgspec.structs.replace(req, dangerous=req.dangerous or None)


def best_of_request(body: Any) -> SpawnRequest:
    """The ``SpawnRequest`` of a set a decoded ``BestOf`` body asks for."""
    req: SpawnRequest = requests.to_request(SpawnRequest, body)
    return req


def message_request(body: Any) -> MessageRequest:
    """The ``MessageRequest`` a decoded ``Message`` body asks for."""
    req: MessageRequest = requests.to_request(MessageRequest, body)
    return req


Ref = Annotated[str, Meta(min_length=1, max_length=200)]


class Merges(msgspec.Struct, forbid_unknown_fields=True):
    """Queue ``sessions`` (finished worktree sessions, in order) for merging into ``target``
    (default: the main worktree's branch), ``priority`` higher first; ``send``: an ejected
    session gets its review comment as its next turn; ``run``: process the queue now."""

    sessions: Annotated[list[Ref], Meta(min_length=1, max_length=100)]
    target: Annotated[str, Meta(min_length=1, max_length=200)] | None = None
    priority: Annotated[int, Meta(ge=-1000, le=1000)] = 0
    send: bool = False
    run: bool = True
