"""verl-pascal's Python code: controller tools and what runs on the boxes.

Subpackages: ``version_lock`` (the variables the playbooks read, outside
Ansible), ``prefetch`` (offline mirror, hashed locks), ``data`` (GSM8K to
verl's parquet), ``models`` (tiny random models), ``launch`` (renders the
launch script outside Ansible), ``p40_rules`` (the guard that holds a run on a
newer GPU to a P40's rules), ``patch_cli`` (the ``verl-patch`` command) and
``module_utils`` (the logic of the Ansible modules, the same files Ansible
ships to hosts). Importing this package imports nothing else: the boxes run
parts of it with only the training env's packages.
"""
