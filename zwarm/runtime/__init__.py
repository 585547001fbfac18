"""How turns run: the launcher interface, the local launcher, its supervisor, processes."""
