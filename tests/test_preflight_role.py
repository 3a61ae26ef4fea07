"""The preflight role, run for real by ansible-playbook against this machine
(it only reads), with recorded nvidia-smi outputs behind a fake nvidia-smi.

Each failure case checks the message a user would read. Success cases check
the facts later roles rely on.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from verl_pascal import verl_releases, version_lock

from conftest import REPO_ROOT as REPO
from conftest import needs_ansible, run_playbook

DATA = REPO / "tests" / "data" / "nvidia-smi"

pytestmark = needs_ansible

PLAYBOOK = """
- hosts: localhost
  gather_facts: true
  gather_subset: [min]
  tasks:
    - ansible.builtin.include_role:
        name: preflight
    - ansible.builtin.copy:
        dest: "{{ out }}"
        mode: "0600"
        content: "{{ {'profile': preflight_gpu_profile,
                      'count': ansible_facts['nvidia_gpu_count'],
                      'cap': ansible_facts['nvidia_min_compute_cap'],
                      'source': ansible_facts['nvidia_compute_cap_source'],
                      'cuda': ansible_facts['nvidia_driver_cuda_check'],
                      'host_memory': preflight_host_memory} | to_json }}"
      check_mode: false
"""


def fake_nvidia_smi(tmp_path: Path, recorded: str, rc: int = 0, fallback: str | None = None) -> Path:
    """An nvidia-smi that prints a recorded output; with `fallback`, it
    rejects the compute_cap field like an old driver and answers the
    fallback query from that file."""
    script = tmp_path / "nvidia-smi"
    lines = ["#!/bin/sh"]
    if fallback:
        lines += [
            'case "$*" in *compute_cap*)',
            f"  cat '{DATA / recorded}'; exit {rc};;",
            "esac",
            f"cat '{DATA / fallback}'",
        ]
    else:
        lines += [f"cat '{DATA / recorded}'", f"exit {rc}"]
    script.write_text("\n".join(lines) + "\n")
    script.chmod(0o755)
    return script


def lock_pins() -> list[str]:
    """torch, torchvision and torchaudio as the version lock pins them, as requirements."""
    versions = yaml.safe_load((REPO / "inventory/group_vars/all/versions.yml").read_text())
    return [f"{name}=={versions[name + '_version']}" for name in ("torch", "torchvision", "torchaudio")
            if versions[name + "_version"]]


def standin_torch_lock(tmp_path: Path) -> Path:
    """A STAND-IN torch lock for the version lock's pins (the real one needs PyTorch's index):
    the pins with a made-up hash, enough for preflight's check that a lock exists and pins them."""
    versions = yaml.safe_load((REPO / "inventory/group_vars/all/versions.yml").read_text())
    minor = ".".join(str(versions["python_version"]).split(".")[:2])
    lock = tmp_path / "torch-locks" / f"torch-{versions['torch_version']}" / f"py{minor}.txt"
    lock.parent.mkdir(parents=True)
    lock.write_text("".join(f"{pin} \\\n    --hash=sha256:{'0' * 64}\n" for pin in lock_pins()))
    return lock.parent.parent


def run_preflight(tmp_path: Path, *extra: str, check: bool = False,
                  torch_locks: Path | None = None) -> tuple[subprocess.CompletedProcess[str], dict]:
    out = tmp_path / "facts.json"
    proc = run_playbook(
        tmp_path, PLAYBOOK,
        "-e", f"@{REPO / 'inventory/group_vars/all/versions.yml'}",
        "-e", f"@{REPO / 'inventory/group_vars/all/settings.yml'}",
        "-e", f"out={out}",
        "-e", f"pytorch_lock_dir={torch_locks or standin_torch_lock(tmp_path)}",
        # A model of a million parameters: this machine has less memory than the 0.5B reference job
        # needs (the host-memory tests below set their own).
        "-e", "model_parameters=1000000",
        *extra, *(["--check"] if check else []),
        env={"ANSIBLE_CONFIG": str(REPO / "ansible.cfg")}, timeout=300)
    facts = json.loads(out.read_text()) if out.exists() else {}
    return proc, facts


def smi_answering(tmp_path: Path, line: str) -> Path:
    """An nvidia-smi that answers one recorded CSV line (a case with no data file)."""
    data = tmp_path / "answer.csv"
    data.write_text(line + "\n")
    script = tmp_path / "nvidia-smi"
    script.write_text(f"#!/bin/sh\ncat '{data}'\n")
    script.chmod(0o755)
    return script


def smi(path: Path) -> str:
    return f"preflight_nvidia_smi={path}"


def test_p40_box_gets_the_pascal_profile(tmp_path: Path) -> None:
    proc, facts = run_preflight(tmp_path, "-e", smi(fake_nvidia_smi(tmp_path, "p40.csv")))
    assert proc.returncode == 0, proc.stdout
    assert facts["profile"] == "pascal"
    assert facts["count"] == 1 and facts["cap"] == "6.1"
    assert facts["cuda"]["ok"] is True


def test_a_missing_torch_lock_stops_the_play_before_the_gpus_are_even_read(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    proc, facts = run_preflight(tmp_path, "-e", smi(fake_nvidia_smi(tmp_path, "p40.csv")),
                                torch_locks=tmp_path / "empty")
    assert proc.returncode != 0 and not facts
    assert "No hashed lock for torch" in proc.stdout and "verl-pascal-pip-lock" in proc.stdout
    assert "Read the NVIDIA GPUs" not in proc.stdout


def test_check_mode_gives_the_same_verdict(tmp_path: Path) -> None:
    proc, facts = run_preflight(tmp_path, "-e", smi(fake_nvidia_smi(tmp_path, "p40x4.csv")), check=True)
    assert proc.returncode == 0, proc.stdout
    assert facts["profile"] == "pascal" and facts["count"] == 4
    recap = proc.stdout.split("PLAY RECAP")[-1]
    assert "changed=1 " in recap  # only the test's own fact dump; preflight changes nothing


def test_mixed_box_is_judged_by_its_weakest_gpu(tmp_path: Path) -> None:
    proc, facts = run_preflight(tmp_path, "-e", smi(fake_nvidia_smi(tmp_path, "mixed-p40-t4.csv")))
    assert proc.returncode == 0, proc.stdout
    assert facts["profile"] == "pascal" and facts["cap"] == "6.1"


def test_h200_needs_no_patching(tmp_path: Path) -> None:
    proc, facts = run_preflight(tmp_path, "-e", smi(fake_nvidia_smi(tmp_path, "h200.csv")))
    assert proc.returncode == 0, proc.stdout
    assert facts["profile"] == "native"


def test_old_driver_without_compute_cap_falls_back_to_the_name_table(tmp_path: Path) -> None:
    script = fake_nvidia_smi(tmp_path, "old-driver-470.compute_cap-error.txt", rc=2, fallback="old-driver-470.csv")
    proc, facts = run_preflight(tmp_path, "-e", smi(script))
    assert proc.returncode == 0, proc.stdout
    assert facts["cap"] == "6.1" and facts["source"] == "name_table"
    assert facts["profile"] == "pascal"
    assert facts["cuda"]["mode"] == "minor_version_compat"


def test_driver_too_old_for_cuda_fails_with_what_to_do(tmp_path: Path) -> None:
    script = smi_answering(tmp_path, "Tesla P40, 6.1, 418.87.01, 24451, 24300")
    proc, _ = run_preflight(tmp_path, "-e", smi(script))
    assert proc.returncode != 0
    assert "418.87.01" in proc.stdout
    assert "520" in proc.stdout  # the branch to install


def test_no_driver_fails_and_says_the_driver_is_not_ours_to_install(tmp_path: Path) -> None:
    proc, _ = run_preflight(tmp_path, "-e", smi(fake_nvidia_smi(tmp_path, "no-driver.txt", rc=9)))
    assert proc.returncode != 0
    assert "No working NVIDIA driver" in proc.stdout
    assert "couldn't communicate with the NVIDIA driver" in proc.stdout


def test_missing_nvidia_smi_fails_like_no_driver(tmp_path: Path) -> None:
    proc, _ = run_preflight(tmp_path, "-e", smi(tmp_path / "does-not-exist"))
    assert proc.returncode != 0
    assert "No working NVIDIA driver" in proc.stdout


def test_driver_without_gpus_fails(tmp_path: Path) -> None:
    proc, _ = run_preflight(tmp_path, "-e", smi(fake_nvidia_smi(tmp_path, "no-devices.txt", rc=6)))
    assert proc.returncode != 0
    assert "no GPU" in proc.stdout or "No devices were found" in proc.stdout


def test_hung_nvidia_smi_fails_after_the_timeout_saying_what_to_check(tmp_path: Path) -> None:
    script = tmp_path / "nvidia-smi"
    script.write_text("#!/bin/sh\nexec sleep 120\n")
    script.chmod(0o755)
    started = time.monotonic()
    proc, _ = run_preflight(tmp_path, "-e", smi(script), "-e", "preflight_nvidia_smi_timeout=2")
    assert time.monotonic() - started < 100  # not the fake's 120 s
    assert proc.returncode != 0
    out = " ".join(proc.stdout.split())
    assert f"{script} did not answer within 2 s" in out
    assert "`nvidia-smi` by hand" in out and "Xid" in out and "reboot" in out


def test_a_timeout_that_is_not_a_number_fails_before_any_task(tmp_path: Path) -> None:
    proc, _ = run_preflight(tmp_path, "-e", smi(fake_nvidia_smi(tmp_path, "p40.csv")),
                            "-e", "preflight_nvidia_smi_timeout=soon")
    assert proc.returncode != 0
    assert "preflight_nvidia_smi_timeout" in proc.stdout
    assert "Read the NVIDIA GPUs" not in proc.stdout


def test_pre_pascal_gpu_is_refused(tmp_path: Path) -> None:
    script = smi_answering(tmp_path, "Tesla K80, 3.7, 470.256.02, 11441, 11300")
    proc, _ = run_preflight(tmp_path, "-e", smi(script))
    assert proc.returncode != 0
    assert "compute capability 6.0 or newer" in proc.stdout


def test_unsupported_os_is_refused_before_the_gpu_is_read(tmp_path: Path) -> None:
    proc, _ = run_preflight(
        tmp_path, "-e", smi(fake_nvidia_smi(tmp_path, "p40.csv")), "-e", '{"preflight_supported_os": {"Plan9": ["4"]}}'
    )
    assert proc.returncode != 0
    assert "is not supported" in proc.stdout and "Plan9 4" in proc.stdout
    assert "Read the NVIDIA GPUs" not in proc.stdout


def test_too_little_disk_names_the_filesystem_and_the_need(tmp_path: Path) -> None:
    need = json.dumps({"preflight_disk_requirements": [{"what": "CUDA toolkit", "path": str(tmp_path / "cuda"), "bytes": 10**18}]})
    proc, _ = run_preflight(tmp_path, "-e", smi(fake_nvidia_smi(tmp_path, "p40.csv")), "-e", need)
    assert proc.returncode != 0
    assert "Not enough free disk space" in proc.stdout and "CUDA toolkit" in proc.stdout


@pytest.mark.parametrize("installed", [False, True])
def test_the_disk_is_judged_until_what_needs_it_is_installed(tmp_path: Path, installed: bool) -> None:
    # Preflight skips the disk check only when every requirement's skip_if_exists path exists
    # (a provisioned box): a requirement whose path is missing is still judged, and refused.
    marker = tmp_path / "cuda" / "version.json"
    if installed:
        marker.parent.mkdir()
        marker.write_text("{}")
    need = json.dumps({"preflight_disk_requirements": [
        {"what": "CUDA toolkit", "path": str(tmp_path / "cuda"), "bytes": 10**18, "skip_if_exists": str(marker)}]})
    proc, _ = run_preflight(tmp_path, "-e", smi(fake_nvidia_smi(tmp_path, "p40.csv")), "-e", need)
    if installed:
        assert proc.returncode == 0, proc.stdout
    else:
        assert proc.returncode != 0 and "Not enough free disk space" in proc.stdout, proc.stdout


def test_a_profile_the_table_does_not_have_is_refused_with_the_tables_names_before_the_gpus_are_read(
        tmp_path: Path) -> None:
    proc, _ = run_preflight(tmp_path, "-e", smi(fake_nvidia_smi(tmp_path, "p40.csv")), "-e", "preflight_profile=turbo")
    assert proc.returncode != 0
    assert "preflight_profile is turbo" in proc.stdout
    assert all(name in proc.stdout for name in ("auto", *yaml.safe_load(
        (REPO / "verl_pascal/gpu_profiles.yml").read_text())["profiles"]))
    assert "Read the NVIDIA GPUs" not in proc.stdout


def test_a_profile_named_by_the_user_is_used_whatever_the_gpus_say(tmp_path: Path) -> None:
    proc, facts = run_preflight(tmp_path, "-e", smi(fake_nvidia_smi(tmp_path, "p40.csv")), "-e", "preflight_profile=native")
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert facts["profile"] == "native"


@pytest.mark.parametrize("retired", ["verl_profile", "launch_profile"])
def test_a_retired_per_role_profile_stops_the_play_naming_preflight_profile(tmp_path: Path, retired: str) -> None:
    """verl_profile and launch_profile are gone (every role reads preflight's profile): an inventory that
    still sets one is told what replaces it, never silently ignored."""
    proc, facts = run_preflight(tmp_path, "-e", smi(fake_nvidia_smi(tmp_path, "p40.csv")), "-e", f"{retired}=native")
    assert proc.returncode != 0 and facts == {}
    assert "verl_profile and launch_profile are gone" in proc.stdout and "set preflight_profile" in proc.stdout


def test_both_mirrors_set_fails_before_the_gpu_is_read(tmp_path: Path) -> None:
    mirrors = json.dumps({"artifact_mirror_url": "http://mirror.example.org:8080", "artifact_mirror_dir": str(tmp_path)})
    proc, _ = run_preflight(tmp_path, "-e", smi(fake_nvidia_smi(tmp_path, "p40.csv")), "-e", mirrors)
    assert proc.returncode != 0
    assert "Both artifact_mirror_url" in proc.stdout and "not both" in proc.stdout
    assert "Read the NVIDIA GPUs" not in proc.stdout


def mirror_dir(root: Path, files: list[str], wheels: bool = True) -> Path:
    root.mkdir()
    for name in files:
        (root / name).write_bytes(b"x")
    if wheels:
        (root / "simple" / "demo").mkdir(parents=True)
        (root / "simple" / "demo" / "demo-1.0-py3-none-any.whl").write_bytes(b"x")
    return root


def default_sdist() -> str:
    """The sdist of the release the version lock installs (verl_version), as its folder names it."""
    return str(verl_releases.read(str(version_lock.load_lock()["verl_version"]))["sdist"])


LOCK_FILES = ["cuda_11.8.0_520.61.05_linux.run", "cudnn-linux-x86_64-8.9.7.29_cuda11-archive.tar.xz",
              "Miniforge3-26.3.2-3-Linux-x86_64.sh", "apex-24.04.01.tar.gz", default_sdist()]


@pytest.mark.parametrize("check", [False, True])
def test_mirror_dir_lacking_files_names_them_and_the_prefetch_command(tmp_path: Path, check: bool) -> None:
    mirror = mirror_dir(tmp_path / "mirror", [n for n in LOCK_FILES if not n.startswith(("apex", "verl"))])
    proc, _ = run_preflight(tmp_path, "-e", smi(fake_nvidia_smi(tmp_path, "p40.csv")),
                            "-e", f"artifact_mirror_dir={mirror}", check=check)
    assert proc.returncode != 0
    out = " ".join(proc.stdout.split())
    assert f"lacks apex-24.04.01.tar.gz, {default_sdist()}" in out
    assert f"verl-pascal-prefetch --mirror {mirror} --only apex-24.04.01.tar.gz {default_sdist()}" in out
    assert "Read the NVIDIA GPUs" not in proc.stdout


def test_mirror_dir_without_wheels_says_how_to_add_them(tmp_path: Path) -> None:
    mirror = mirror_dir(tmp_path / "mirror", LOCK_FILES, wheels=False)
    proc, _ = run_preflight(tmp_path, "-e", smi(fake_nvidia_smi(tmp_path, "p40.csv")), "-e", f"artifact_mirror_dir={mirror}")
    assert proc.returncode != 0
    out = " ".join(proc.stdout.split())
    assert "has no wheels under simple/" in out and "--pip-lock" in out and "lacks" not in out


def test_complete_mirror_dir_passes(tmp_path: Path) -> None:
    mirror = mirror_dir(tmp_path / "mirror", LOCK_FILES)
    proc, facts = run_preflight(tmp_path, "-e", smi(fake_nvidia_smi(tmp_path, "p40.csv")), "-e", f"artifact_mirror_dir={mirror}")
    assert proc.returncode == 0, proc.stdout
    assert facts["profile"] == "pascal"


def test_training_as_root_is_refused_before_any_change(tmp_path: Path) -> None:
    proc, facts = run_preflight(tmp_path, "-e", smi(fake_nvidia_smi(tmp_path, "p40.csv")), "-e", "training_user=root")
    assert proc.returncode != 0
    assert "never trains as root" in proc.stdout
    assert facts == {}


def test_a_verl_release_without_a_lock_for_this_stack_is_refused_before_the_gpus_are_read(tmp_path: Path) -> None:
    """torch 2.7.1 is a stack verl 0.9.1 has no dependency lock for: preflight names the stacks it is
    locked for and the command that writes the missing lock, before anything else."""
    proc, facts = run_preflight(tmp_path, "-e", smi(fake_nvidia_smi(tmp_path, "p40.csv")), "-e", "verl_version=0.9.1",
                                "-e", "torch_version=2.7.1+cu118", "-e", "pytorch_allow_unhashed=true")
    assert proc.returncode != 0 and not facts
    text = " ".join(proc.stdout.split())
    assert "verl 0.9.1 has no dependency lock for this stack, Python 3.10 with torch 2.7.1+cu118" in text
    assert "It is locked for Python 3.10 with torch 2.6, Python 3.11 with torch 2.13" in text
    assert 'LOCK_PAIRS="3.10:2.7.1" scripts/lock-verl-deps.sh 0.9.1' in text
    assert "Read the NVIDIA GPUs" not in proc.stdout


def test_a_torch_older_than_the_release_needs_is_refused_before_the_gpus_are_read(tmp_path: Path) -> None:
    proc, facts = run_preflight(tmp_path, "-e", smi(fake_nvidia_smi(tmp_path, "p40.csv")), "-e", "verl_version=0.9.1",
                                "-e", "torch_version=2.5.1+cu118", "-e", "pytorch_allow_unhashed=true")
    assert proc.returncode != 0 and not facts
    assert "verl 0.9.1 needs torch 2.6 or newer" in " ".join(proc.stdout.split())
    assert "Read the NVIDIA GPUs" not in proc.stdout


def test_a_supported_release_on_its_stack_passes(tmp_path: Path) -> None:
    proc, facts = run_preflight(tmp_path, "-e", smi(fake_nvidia_smi(tmp_path, "p40.csv")), "-e", "verl_version=0.9.1")
    assert proc.returncode == 0, proc.stdout
    assert facts["profile"] == "pascal"


def test_a_box_without_the_memory_for_the_run_stops_with_what_fits(tmp_path: Path) -> None:
    """A model of a trillion parameters: no box here holds its offloaded copies."""
    answer = fake_nvidia_smi(tmp_path, "p40.csv")
    for check in (False, True):
        (tmp_path / str(check)).mkdir()
        proc, facts = run_preflight(tmp_path / str(check), "-e", smi(answer),
                                    "-e", "model_parameters=1000000000000", check=check)
        assert proc.returncode != 0 and not facts
        assert "localhost has" in proc.stdout and "needs about" in proc.stdout
        assert "preflight_host_memory_check: false" in proc.stdout
        assert "Check free disk space" not in proc.stdout  # it stops there, before the rest


def test_the_host_memory_check_can_be_turned_off_and_still_reports_the_need(tmp_path: Path) -> None:
    proc, facts = run_preflight(tmp_path, "-e", smi(fake_nvidia_smi(tmp_path, "p40.csv")),
                                "-e", "model_parameters=1000000000000", "-e", "preflight_host_memory_check=false")
    assert proc.returncode == 0, proc.stdout
    need = facts["host_memory"]["need_mib"]
    assert need["ppo"] > need["grpo"] > facts["host_memory"]["total_mib"]


def test_the_estimate_follows_the_release_and_the_preset_for_the_gpu(tmp_path: Path) -> None:
    """The smaller presets offload the actor's parameters too, where the rollout allows it: verl 0.9.1's
    (the project's server) does, verl 0.5.0's own HF rollout does not."""
    need = {}
    for answer in ("p40.csv", "p100.csv"):  # 24 GB: the 24 GB preset; 16 GB: the 15000 MiB one
        (tmp_path / answer).mkdir()
        smi_path = fake_nvidia_smi(tmp_path / answer, answer)
        for version in ("0.5.0", "0.9.1"):
            (tmp_path / answer / version).mkdir()
            proc, facts = run_preflight(tmp_path / answer / version, "-e", smi(smi_path),
                                        "-e", f"verl_version={version}", "-e", "model_parameters=1000000000",
                                        "-e", "preflight_host_memory_check=false")
            assert proc.returncode == 0, proc.stdout
            need[version, answer] = facts["host_memory"]["need_mib"]["ppo"]
    copy_mib = 1_000_000_000 * 4 * (2.50 / 1.84) / 1024 ** 2
    measured = {v: verl_releases.read(v)["host_memory_gib"] for v in ("0.5.0", "0.9.1")}
    assert need["0.9.1", "p40.csv"] - need["0.5.0", "p40.csv"] == pytest.approx(
        (measured["0.9.1"] - measured["0.5.0"]) * 1024, abs=2)
    assert need["0.9.1", "p100.csv"] - need["0.9.1", "p40.csv"] == pytest.approx(copy_mib, abs=2)
    assert need["0.5.0", "p100.csv"] == need["0.5.0", "p40.csv"]
