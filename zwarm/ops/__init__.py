"""The operations behind ``zwarm.api.Zwarm``, one job per module.

``Zwarm`` (``zwarm.api``) is the one public Python API: a facade that holds the state dir,
the config and the managers, and hands each operation to its module here: ``starting`` (what
``spawn`` settles first), ``listing`` (every session as a row), ``reading`` (``show``,
``trajectory``, ``logs``), ``following`` (a growing turn log, for the live views),
``waiting`` (``wait``, ``wait_turn``), ``removal`` (``kill``, ``rm``), ``review`` (``diff``,
``comment``, ``merge``, ``apply``), ``bestof`` (best-of sets: start, compare, pick, a
follow-up to every attempt) and ``checks`` (what a new turn is refused for, before
anything starts). Each takes the ``Zwarm`` it works for as its first argument. Must stay
true: nothing outside ``zwarm.api``, ``zwarm.ops`` and the engine reads the store
(``Zwarm.store``): the front ends (cli, serve, the orchestrator) go through ``Zwarm``'s
methods; no module here imports a front end.
"""
