"""The GPU-profile table (verl_pascal/gpu_profiles.yml) and every consumer of it.

The table is the one place that says what a GPU generation gets; these tests
fail when a consumer lists profiles, rollouts or overrides of its own.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path
from typing import Any, Dict, List

import pytest
import yaml

from verl_pascal.module_utils import nvidia_gpu, verl_patch
from verl_pascal import profiles, verl_releases
from verl_pascal.launch import compose, render

from conftest import REPO_ROOT as REPO
from conftest import run_playbook

ROWS = profiles.rows()


def spec_option(role: str, name: str) -> Dict[str, Any]:
    specs = yaml.safe_load((REPO / "roles" / role / "meta" / "argument_specs.yml").read_text())
    return specs["argument_specs"]["main"]["options"][name]


def test_rows_are_complete_and_do_not_overlap() -> None:
    nvidia_gpu.ranges_of_table(ROWS)  # raises on overlap or a bad range
    for name, row in ROWS.items():
        assert row["patch"] in verl_patch.PATCH_KINDS, name
        assert row["rollouts"] and all(isinstance(r, str) for r in row["rollouts"]), name
        assert all(isinstance(o, str) and "=" in o for o in row["overrides"]), name


@pytest.mark.parametrize(("cap", "profile"), [
    (None, "none"), ("5.2", "unsupported"), ("6.0", "pascal"), ("6.1", "pascal"), ("7.0", "volta_turing"),
    ("7.5", "volta_turing"), ("8.0", "native"), ("8.9", "native"), ("9.0", "native"), ("12.0", "native"),
])
def test_the_facts_module_places_real_gpus_by_the_table(cap: Any, profile: str) -> None:
    assert nvidia_gpu.profile_for_capability(cap, nvidia_gpu.ranges_of_table(ROWS)) == profile


def test_a_new_row_is_all_it_takes_to_add_a_profile() -> None:
    rows = {**ROWS, "blackwell_fp4": {**ROWS["native"], "capability": ["10.0", None]}}
    rows["native"] = {**ROWS["native"], "capability": ["8.0", "9.9"]}
    ranges = nvidia_gpu.ranges_of_table(rows)
    assert nvidia_gpu.profile_for_capability("10.0", ranges) == "blackwell_fp4"
    assert nvidia_gpu.profile_for_capability("9.0", ranges) == "native"


@pytest.mark.parametrize("rows", [
    {"a": {"capability": ["6.0", "7.5"]}, "b": {"capability": ["7.0", None]}},
    {"a": {"capability": ["6.0", None]}, "b": {"capability": ["9.0", None]}},
    {"a": {"capability": ["7.0", "6.0"]}},
    {"a": {"patch": "fp32"}},
    {},
])
def test_a_broken_table_is_refused(rows: Dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        nvidia_gpu.ranges_of_table(rows)


ROLE_PLAY = """
- hosts: localhost
  gather_facts: false
  tasks:
    - ansible.builtin.include_role:
        name: "{{ role }}"
"""


def test_the_roles_list_no_profile_or_rollout_of_their_own() -> None:
    """argument_specs declare the variables; their values are checked against the table, which names them once."""
    for role, name in [("preflight", "preflight_profile"), ("verl", "preflight_gpu_profile"), ("launch", "launch_rollout")]:
        assert "choices" not in spec_option(role, name), f"{role}: {name} repeats the table's names as choices"


def run_role(tmp_path: Path, role: str, *extra: str) -> subprocess.CompletedProcess:
    return run_playbook(tmp_path, ROLE_PLAY, "-e", f"role={role}",
                        "-e", f"@{REPO / 'inventory/group_vars/all/versions.yml'}",
                        "-e", f"@{REPO / 'inventory/group_vars/all/settings.yml'}",
                        # preflight's plan of a box of its own, which both roles require
                        "-e", json.dumps({"fleet": {"nnodes": 1, "n_gpus_per_node": 1, "memory_mib": 24576}}),
                        *extra, env={"ANSIBLE_CONFIG": str(REPO / "ansible.cfg")}, timeout=300)


@pytest.mark.parametrize(("role", "var", "first_task"), [
    ("verl", "preflight_gpu_profile", "Check the GPU profile is a row"),
    ("launch", "launch_rollout", "Check the rollout is one the GPU-profile table offers"),
])
def test_a_name_the_table_does_not_have_stops_the_role_at_its_first_task_naming_the_tables(
        tmp_path: Path, role: str, var: str, first_task: str) -> None:
    # the launch role's rollout is judged on a box whose profile is a row
    proc = run_role(tmp_path, role, "-e", "preflight_gpu_profile=pascal", "-e", f"{var}=turbo")
    out = proc.stdout
    assert proc.returncode != 0 and f"{var} is turbo" in out, out[-2000:]
    tasks = [line for line in out.splitlines() if line.startswith("TASK [") and "Validating arguments" not in line
             and "include_role" not in line]
    assert len(tasks) == 1 and first_task in tasks[0], tasks
    offered = sorted(ROWS) if role == "verl" else sorted({r for row in ROWS.values() for r in row["rollouts"]})
    assert all(name in out for name in offered), (offered, out[-1500:])


def test_the_patcher_patches_what_the_table_says() -> None:
    """verl-patch takes the patch kind from the table: fp32 rows patch, none rows keep verl as released."""
    from verl_pascal import patch_cli

    assert patch_cli.parse_args(["--source", "x", "--profile", "pascal"]).profile == "pascal"
    with pytest.raises(SystemExit):
        patch_cli.parse_args(["--source", "x", "--profile", "kepler"])
    assert {row["patch"] for row in ROWS.values()} == set(verl_patch.PATCH_KINDS)


def launch_overrides(profile: str, tmp_path: Path, version: str) -> List[str]:
    """The Hydra overrides the rendered launch script passes (its --dry-run)."""
    script = render.write(str(tmp_path / f"verl-ppo-{profile}"),
                          {"preflight_gpu_profile": profile, "launch_model_dir": "/opt/verl-pascal/models/m",
                           "verl_version": version})
    proc = subprocess.run([script, "--dry-run"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return shlex.split(proc.stdout)[3:]  # after python -m verl.trainer.main_ppo


def verl_check_overrides(profile: str, tmp_path: Path, version: str) -> List[str]:
    """The overrides the verl role's pre-activation check composes, as Ansible evaluates them."""
    book = tmp_path / "check.yml"
    book.write_text(yaml.safe_dump([{
        "hosts": "localhost", "gather_facts": False,
        "tasks": [
            {"ansible.builtin.include_vars": str(REPO / "roles/verl/defaults/main.yml")},
            {"ansible.builtin.include_vars": str(REPO / "roles/verl/vars/main.yml")},
            {"ansible.builtin.copy": {"content": "{{ verl_check_overrides | to_json }}", "dest": str(tmp_path / "o")}},
        ],
    }]))
    proc = run_playbook(tmp_path, book,
                        "-e", f"@{REPO / 'inventory/group_vars/all/settings.yml'}",
                        "-e", f"verl_pascal_root={REPO}", "-e", f"preflight_gpu_profile={profile}",
                        "-e", f"verl_version={version}",
                        # preflight's plan of a box of its own: a cluster of one node with one GPU
                        "-e", json.dumps({"fleet": {"nnodes": 1, "n_gpus_per_node": 1}}), timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads((tmp_path / "o").read_text())


@pytest.mark.parametrize("version", ["0.5.0", "0.9.1"])
@pytest.mark.parametrize("profile", list(ROWS))
def test_the_verl_check_composes_what_the_launch_script_runs(profile: str, tmp_path: Path, version: str) -> None:
    """The check before a release goes active composes, against the new tree, what the GPU profile and
    the release add to every run, as the launch script runs it: the profile's rollout and overrides
    under the keys the release reads (0.9.1 moved the critic's), the release's helper-process sizes and
    own keys; only the data and model paths are placeholders."""
    launch = launch_overrides(profile, tmp_path, version)
    check = verl_check_overrides(profile, tmp_path, version)
    row = ROWS[profile]
    release = verl_releases.read(version)
    box = {"nnodes": 1, "n_gpus_per_node": 1}
    fitted = compose.fitted_overrides(row, release, box)
    placeholders = [o for o in check if "/nonexistent/" in o]
    assert len(placeholders) == 4 and check == placeholders + fitted
    # The script's command ends with the same part (its rollout: launch_rollout where the profile offers it).
    assert launch[-len(fitted):] == compose.fitted_overrides(row, release, box, rollout="hf")
    assert set(compose.release_keys(row["overrides"], release)) <= set(fitted)
    for old in release.get("key_renames", {}):  # nothing under a key the release moved away from
        assert not [o for o in launch + check if old in o], old
