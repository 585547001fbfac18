"""zwarm's data model: statuses, usage, turn outcomes, the session record and its schema.

Owns the shape of everything zwarm stores and prints: ``status`` (statuses, state groups,
failure reasons), ``records`` (the typed session record), ``schema`` (decoding, migrations,
encoding of ``meta.json``), ``steps`` (the normalized trajectory step), ``rows`` (the schema
of a session's listing row, for rows read back from the listing's cache), ``requests`` (what
a caller asks to start: every spawn and follow-up option, which every front end is made
from). Must stay true: nothing here imports anything of zwarm's outside ``zwarm.model`` but
``zwarm.system.boot`` (the process identity ``ProcRef`` a turn records, and the boot facts one
migration step converts against): the model sits below every other layer but ``system``'s
bottom module.
"""

from zwarm.model.records import QueuedMessage, Session, Turn, TurnOutcome, Usage
from zwarm.model.schema import SCHEMA_VERSION
from zwarm.model.status import ACTIVE, FINISHED, RUNS, WAITING, Reason, Status
from zwarm.system.boot import ProcRef

USAGE_KEYS = (
    "input_tokens",
    "cached_input_tokens",
    "output_tokens",
    "reasoning_tokens",
    "total_tokens",
)

__all__ = [
    "ACTIVE",
    "FINISHED",
    "RUNS",
    "SCHEMA_VERSION",
    "USAGE_KEYS",
    "WAITING",
    "ProcRef",
    "QueuedMessage",
    "Reason",
    "Session",
    "Status",
    "Turn",
    "TurnOutcome",
    "Usage",
]
