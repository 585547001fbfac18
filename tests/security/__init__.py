"""Fault-injection suite (issue 5): see README.md in this directory."""
