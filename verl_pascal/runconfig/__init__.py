"""A composed verl configuration, judged on a box before a run (box-side code, installed into the training env).

- ``check``: ``python -m verl_pascal.runconfig.check`` refuses a rollout the
  box's GPUs cannot run and has the installed verl validate the configuration
  (its config dataclasses, its batch-size rules).
- ``rollouts``: every rollout the configuration holds (the actor's, the reward
  model's, the distillation teachers', any other), resolved as the job will
  resolve it; what only the job knows (``${oc.env:...}``) cannot choose one.
- ``compose``: ``python -m verl_pascal.runconfig.compose`` composes the
  configuration with verl's Hydra (``main_ppo --cfg job``, in the same
  process) and judges it with ``check``; the launch script runs it for every
  composition (``--check-config`` and before a run).
"""
