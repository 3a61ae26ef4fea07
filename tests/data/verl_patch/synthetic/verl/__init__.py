"""A synthetic verl package: odd but valid forms of the sites verl_patch rewrites."""
