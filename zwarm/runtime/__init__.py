"""The processes that run a turn, above the engine: the supervisor (one session's turns, or
with ``--turn`` one turn), the fork server that forks supervisors ready-made (its requester's
side is the local launcher's: ``zwarm.launchers.forking``), ``watch`` (the supervisor's stall
watchdog and budget check while an agent streams) and ``hooks`` (what runs when a session
ends).

Owns: the process entry points (``python -I -m zwarm.runtime.<name>``).
Must stay true: these modules sit above the engine and below the API; none builds the facade
(``zwarm.api``), and nothing below them imports them (a launcher names the supervisor's module
only in the argv it starts).
"""
