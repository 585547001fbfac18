"""SSH hosts: turns run on a machine zwarm reaches over ssh (``[hosts.NAME]``, issue 35).

``hosts`` owns the hosts' config (the ``[hosts.NAME]`` family: ``HOSTS``), the one shared
connection per host (``Connection``: an OpenSSH ControlMaster) and the remote zwarm's version
check; the launcher itself is this package's (exported here once it exists). Must stay true:
importing this package is cheap (the config asks for its declarations on every load).
"""
