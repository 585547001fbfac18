"""``python -m zwarm``: the same entry point as the ``zwarm`` console script."""

from zwarm.cli import run

run()
