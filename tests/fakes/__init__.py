"""Test doubles for zwarm: scripted fake LLM servers for the real agent CLIs (``llm.py``)."""
