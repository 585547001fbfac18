"""``zwarm serve``: zwarm's Python API over HTTP, live event streams, and a web dashboard.

The package owns the HTTP layer only; every operation is ``zwarm.api.Zwarm``'s, and the
``zwarm serve`` command that starts it is the CLI's (``zwarm.cli.serve``: the CLI imports
this package, never the reverse). Its modules: ``auth`` (the access token, Host/Origin/token
checks), ``app`` (the routes and error mapping), ``bodies`` (what requests may hold),
``streams`` (server-sent events read incrementally from the turn logs), ``openapi`` (the
API's description), and ``static/`` (the dashboard: plain files, no build step, nothing
loaded from elsewhere). Must stay true: importing this package imports nothing
(``zwarm --help`` never pays for Starlette or uvicorn).
"""
