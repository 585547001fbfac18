"""The processes that run a turn, above the engine: the supervisor (one session's turns, or
with ``--turn`` one turn), the fork server that forks supervisors ready-made and
``forking`` (asking it, and checking its answer), ``watch`` (the supervisor's stall watchdog
and budget check while an agent streams) and ``hooks`` (what runs when a session ends).

Owns: the process entry points (``python -I -m zwarm.runtime.<name>``).
Must stay true: these modules sit above the engine and below the API; none builds the facade.
"""
