"""Render templates/verl-ppo.sh.j2 outside Ansible (GPU benchmarks, tests)."""
