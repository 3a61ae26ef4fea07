"""A rollout that runs on Pascal GPUs: Hugging Face ``generate`` in fp32.

From verl 0.6 on, verl builds only vLLM and SGLang rollouts, and neither runs
below compute capability 7.0. This package is the project's own rollout for
those releases (box-side code, installed into the training env):

- ``generate``: the generation core, on torch and transformers alone: fp32,
  the ``sdpa`` attention, KV cache, left-padded prompt batches, stop at EOS,
  verl's sampling settings, and the batch layout verl's trainer reads.
"""
