"""The state directory on disk: ``files`` (how one file is read and written), ``sessions``
(the ``Store``: paths, names, locks, transactions of each session's ``meta.json``)."""

from zwarm.store.files import atomic_write, file_key, write_private
from zwarm.store.sessions import Store

__all__ = ["Store", "atomic_write", "file_key", "write_private"]
