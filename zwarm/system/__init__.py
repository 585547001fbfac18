"""The operating system as zwarm needs it, below everything that runs a turn: process identity
(``procs``: a process known by pid, start time, boot and marker; ``boot``: this boot's id and
clock, and ``ProcRef``, the identity a turn records), ``files`` (how one file is read and
written: atomically, privately, never through a link; every flock) and ``notify`` (how waits
sleep: inotify, else stat-keyed polls); ``prctl`` (the prctl calls on zwarm's own process).

Owns: every direct question to the kernel about processes, files and file changes.
Must stay true: nothing here imports the model, the store or anything above them (only
``zwarm.errors``, the bottom layer): the model and the store are built on it.
"""
