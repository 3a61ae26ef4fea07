"""verl-pascal prefetch: fill an offline artifact mirror from the version lock.

Controller-side tooling (not an Ansible module); ``bin/prefetch`` is its
command line. The modules:

- ``lock``: read the lock the playbook reads (inventory/group_vars/all/*.yml),
  apply ``--var`` overrides and render simple ``{{ var }}`` references;
- ``artifacts``: find every artifact in the lock (``<name>_url`` +
  ``<name>_sha256``, and lists of ``{url, sha256}`` mappings); the list
  ``PROVIDERS`` is the extension point for new kinds of artifacts;
- ``fetch``: download one file (HTTP Range resume, bounded retries with
  exponential backoff, sha256 check, ``.part`` file renamed only when good);
- ``progress``: the per-file and total tqdm bars;
- ``pipwheels``: the pip hook (``pip download`` into a PEP 503 ``simple/`` tree);
- ``mirror``: manifest.json, SHA256SUMS and ``--verify``;
- ``cli``: argument parsing and the run.
"""

__version__ = "1.0.0"
