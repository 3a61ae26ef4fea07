"""A composed verl configuration, judged on a box before a run (box-side code, installed into the training env).

- ``check``: ``python -m verl_pascal.runconfig.check`` refuses a rollout the
  box's GPUs cannot run and has the installed verl validate the configuration
  (its config dataclasses, its batch-size rules); the launch script runs it
  after every composition (``--check-config`` and before a run).
"""
