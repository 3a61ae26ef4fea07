"""The logic of the project's Ansible modules (library/), standard library only.

Ansible ships these files to hosts as ``ansible.module_utils.NAME``; the
verl_pascal package reaches the same files as ``verl_pascal.module_utils``.
"""
