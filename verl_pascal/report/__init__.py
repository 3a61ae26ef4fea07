"""verl-pascal-report: PNG charts of a training run from its console log.

A run directory of the launch script holds ``train.log``: verl's console
logger prints one line per step, ``step:N - key:value - ...``. This package
reads those lines (``log``) and draws the charts a user on a headless box
looks at (``charts``): reward and score, response length, KL, seconds per
step with its phases, and GPU memory. It runs on the box, in the training
env, and on the controller from a copied log.
"""
