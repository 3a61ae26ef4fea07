"""verl-pascal prefetch: fill an offline artifact mirror from the version lock.

Controller-side tooling (not an Ansible module); ``verl-pascal-prefetch`` is its
command line. It reads the lock with ``verl_pascal.version_lock`` (shared with
the launch renderer). The modules:

- ``artifacts``: find every artifact in the lock (the artifact registry
  ``artifacts: {<id>: {name, url, sha256, size}}`` and the verl releases'
  sdists); the list ``PROVIDERS`` is the extension point for new kinds;
- ``fetch``: download one file (HTTP Range resume from the last byte received,
  bounded retries with exponential backoff, sha256 check, ``.part`` file
  renamed only when good; Ctrl-C keeps the ``.part``, a full disk deletes it);
- ``sdists``: the URL of a lock-pinned sdist without one (``verl_releases``),
  from the package index's simple API (``module_utils/pip_index.py``): no
  ``pip download``, so nothing runs the sdist's setup.py before its check;
- ``progress``: the per-file and total tqdm bars;
- ``pipwheels``: the pip hook (``pip download`` into a PEP 503 ``simple/`` tree);
- ``mirror``: manifest.json (a damaged one is an error that says what to do),
  SHA256SUMS and ``--verify``;
- ``cli``: argument parsing and the run (worker threads; exit 130 on Ctrl-C
  after recording what finished).
"""

__version__ = "1.0.0"
