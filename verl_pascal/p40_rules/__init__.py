"""Hold a run on any CUDA GPU to the rules of a Tesla P40.

See :mod:`verl_pascal.p40_rules.guard`. Activated in every Python process of a run
(Ray workers included) by putting ``verl_pascal/p40_rules/site`` first on
PYTHONPATH with ``P40_RULES=1`` (see ``site/sitecustomize.py``).
"""
