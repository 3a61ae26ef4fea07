"""The Ray cluster of a fleet, seen from a box (box-side code, installed into the training env).

- ``check``: ``python -m verl_pascal.cluster.check`` waits until every node the
  inventory names has joined the cluster with its GPUs (the ``ray_cluster``
  role), checks before a run that the cluster has the GPUs the run asks for
  (the launch script), and runs a task on each node (the fleet scenario).
"""
