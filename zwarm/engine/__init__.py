"""The session engine: the life cycle of sessions and turns, the same for every agent."""
