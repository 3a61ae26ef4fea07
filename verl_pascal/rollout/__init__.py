"""A rollout that runs on Pascal GPUs: Hugging Face ``generate`` in fp32.

From verl 0.6 on, verl builds only vLLM and SGLang rollouts, and neither runs
below compute capability 7.0. This package is the project's own rollout for
those releases (box-side code, installed into the training env):

- ``generate``: the generation core, on torch and transformers alone: fp32,
  the ``sdpa`` attention, KV cache, left-padded prompt batches, stop at EOS,
  verl's sampling settings, and the batch layout verl's trainer reads.
- ``engine``: the model, built around the FSDP actor's weights for one
  generation and dropped after it (no second copy kept between steps).
- ``verl_adapter``: verl's rollout interface (0.6.x, sync); importing it
  registers the rollout as ``("hf", "sync")``. The launch script names it in
  ``VERL_USE_EXTERNAL_MODULES`` for the releases whose folder says so.
- ``server``: the core of a generation server for verl's async rollouts
  (0.7 on): concurrent requests batched, each sampling with its own seeded
  generator (so its tokens do not depend on the batch), token ids and
  log-probs out, new weights taken without a copy, the model released for
  training.
- ``replica``: verl's async rollout interface (0.7 on); importing it registers
  the server as the rollout ``hf`` in verl's ``RolloutReplicaRegistry``. Its
  batches run in the FSDP worker that holds the weights.
- ``check``: ``python -m verl_pascal.rollout.check`` builds the rollout through
  verl's registries on a box (sync or async, as the installed verl has it) and compares what it generates with the model's own
  output (``playbooks/verify.yml`` runs it).
"""
