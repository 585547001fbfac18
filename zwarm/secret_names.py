"""Which names look secret: the one rule (``looks_secret``) by which every part of zwarm that
must keep secret values out of what it writes or shows (the orchestrator's redaction, gemini's
copied settings, what ``zwarm trust`` prints) recognises them.

Owns ``SECRET_NAME``. Must stay true: this module imports only ``re`` (it sits below every
other module); a name is judged by itself, never by its value.
"""

import re

# an api key or any other key (``OPENAI_KEY``, ``key``; not ``keyBindings`` or ``MONKEY``), a
# token, secret, password, credential or auth value (not ``AUTHOR``)
SECRET_NAME = re.compile(
    r"api[_-]?key|(?:^|[_.-])key(?:$|[_.-])|token|secret|passw|credential|authoriz|auth(?!or)", re.I
)


def looks_secret(name: str) -> bool:
    """Whether a variable or setting called ``name`` holds a secret, by its name."""
    return SECRET_NAME.search(name) is not None
