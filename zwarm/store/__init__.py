"""The state directory's records: ``sessions`` (the ``Store``: paths, names, locks,
transactions of each session's ``meta.json``), ``history`` (turns moved out of it), ``pins``
(launch facts outside the agent's reach), ``rowcache`` (the listing's cache). How one file is
read and written is ``zwarm.system.files``'."""

from zwarm.store.sessions import Store

__all__ = ["Store"]
