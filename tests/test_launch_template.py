"""The PPO launch script template (templates/verl-ppo.sh.j2), rendered with the
filters Ansible gives it, then run: syntax, shellcheck, --dry-run, the vLLM
refusal on Pascal. Its --check-config against a real verl runs in Molecule."""

from __future__ import annotations

import os
import pwd
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Iterator

import pytest

from conftest import REPO_ROOT as REPO  # noqa: E402

from verl_pascal import verl_releases  # noqa: E402
from verl_pascal.launch import compose  # noqa: E402
from verl_pascal.launch import render as launch_render  # noqa: E402

PLACEBOS = ("TRITON_MAX_SHARED_MEMORY", "VLLM_DTYPE", "VLLM_NO_LONG_CTX_OPTIMIZATION", "cpu_offload", "offload_params")

BASE = {
    "ansible_managed": "Ansible managed",
    "launch_gpu_summary": "1 x Tesla P40 (24576 MiB, compute capability 6.1), profile pascal",
    "conda_env_prefix": "/opt/miniforge3/envs/verl-p40",
    "cuda_toolkit_path": "/usr/local/cuda-11.8",
    "launch_script_path": "/opt/verl-pascal/bin/verl-ppo",
    "launch_runs_dir": "/opt/verl-pascal/runs",
    "launch_data_dir": "/opt/verl-pascal/data/gsm8k",
    "launch_model_dir": "/opt/verl-pascal/models/Qwen2.5-0.5B-Instruct",
    "launch_param_offload": "False",
    "launch_actor_param_offload": "False",
    "launch_optimizer_offload": "True",
    # No host-memory check (this machine has less than the reference job needs): its own tests set it.
    "launch_host_memory_need_mib": {},
}


def render(tmp_path: Path, **overrides: object) -> Path:
    return Path(launch_render.write(str(tmp_path / "verl-ppo"), {**BASE, **overrides}))


def run(script: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(script), *args], capture_output=True, text=True, timeout=60)


# The script refuses root for anything but --dry-run: as root (CI), the tests
# that compose or run take the uid of `nobody`, in a directory it can reach.
USER_KW = {"user": pwd.getpwnam("nobody").pw_uid} if os.geteuid() == 0 else {}


@pytest.fixture
def box() -> Iterator[Path]:
    top = Path(tempfile.mkdtemp(prefix="verl-ppo-test-"))
    top.chmod(0o777)
    yield top
    shutil.rmtree(top)


def run_as_user(script: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(script), *args], capture_output=True, text=True, timeout=60, cwd="/", **USER_KW)


def start_as_user(script: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([str(script), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd="/", **USER_KW)


# A STAND-IN for the env's python (no verl, no GPU here): composes a fixed
# configuration into the file it is given and accepts it (the box-side
# verl_pascal.runconfig.compose, tested in tests/test_runconfig_compose.py),
# and "trains" by recording that it ran. What it stands in for is exercised
# with the real verl in the Molecule default and upgrade scenarios.
STANDIN_PYTHON = """#!/bin/sh
here=$(dirname "$0")/..
env >"$here/seen.env"
echo "$*" >>"$here/seen.argv"
case "$1" in
  -m) [ "$2" = verl_pascal.runconfig.compose ] && { printf 'actor_rollout_ref:\n  rollout:\n    name: hf\n' >"$3"; exit 0; }
      touch "$(dirname "$0")/../../trained" ;;
esac
"""


def standin_env(box: Path) -> Path:
    env = box / "env"
    (env / "bin").mkdir(parents=True)
    python = env / "bin" / "python"
    python.write_text(STANDIN_PYTHON)
    python.chmod(0o755)
    env.chmod(0o777)  # the stand-in records what it saw, as the test user
    return env


def seen_environment(env: Path) -> dict[str, str]:
    """The environment the stand-in python last ran with: what verl would get."""
    lines = (env / "seen.env").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line)


# A head of a three-node cluster, one GPU used on each (preflight's fleet_plan).
CLUSTER = {"managed": True, "hosts": ["p40-box", "w1", "w2"], "head": "p40-box", "nnodes": 3, "n_gpus_per_node": 1}


def dry_run_args(script: Path, *args: str) -> list[str]:
    proc = run(script, "--dry-run", *args)
    assert proc.returncode == 0, proc.stderr
    return shlex.split(proc.stdout)


@pytest.mark.parametrize("profile", ["pascal", "native"])
def test_rendered_script_is_valid_bash_and_shellcheck_clean(tmp_path: Path, profile: str) -> None:
    script = render(tmp_path, preflight_gpu_profile=profile)
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not installed (make setup installs it)")
    proc = subprocess.run(["shellcheck", str(script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout


@pytest.mark.parametrize("version", ["0.5.0", "0.9.1"])
def test_dry_run_shows_the_pascal_settings(tmp_path: Path, version: str) -> None:
    """The Pascal settings, each at the key the release reads it from (0.9.1 moved the critic's)."""
    argv = dry_run_args(render(tmp_path, verl_version=version))
    release = verl_releases.read(version)
    assert argv[:3] == ["/opt/miniforge3/envs/verl-p40/bin/python", "-m", "verl.trainer.main_ppo"]
    for expected in [
        "actor_rollout_ref.rollout.name=hf",
        "actor_rollout_ref.actor.use_torch_compile=False",
        "actor_rollout_ref.model.use_remove_padding=False",
        "critic.model.use_remove_padding=False",
        "++actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=fp32",
        "++actor_rollout_ref.ref.fsdp_config.mixed_precision.reduce_dtype=fp32",
        "++critic.model.fsdp_config.mixed_precision.buffer_dtype=fp32",
        "++actor_rollout_ref.ref.fsdp_config.model_dtype=fp32",
        "actor_rollout_ref.model.enable_gradient_checkpointing=True",
        "actor_rollout_ref.actor.fsdp_config.param_offload=False",
        "actor_rollout_ref.actor.fsdp_config.optimizer_offload=True",
        "data.train_batch_size=32",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        "algorithm.use_kl_in_reward=True",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        "data.train_files=/opt/verl-pascal/data/gsm8k/train.parquet",
    ]:
        expected = compose.release_keys(expected, release)
        assert expected in argv, expected
    assert not any(p in " ".join(argv) for p in PLACEBOS)


def test_native_profile_keeps_verls_defaults(tmp_path: Path) -> None:
    argv = dry_run_args(render(tmp_path, preflight_gpu_profile="native", launch_rollout="vllm"))
    assert "actor_rollout_ref.rollout.name=vllm" in argv
    assert not any("mixed_precision" in a or "use_torch_compile" in a for a in argv)


def test_extra_arguments_pass_through_last(tmp_path: Path) -> None:
    argv = dry_run_args(render(tmp_path), "trainer.total_epochs=3", "data.train_batch_size=8")
    assert argv[-2:] == ["trainer.total_epochs=3", "data.train_batch_size=8"]


def test_dry_run_judges_nothing_and_prints_any_rollout(tmp_path: Path) -> None:
    """The refusal of vLLM on Pascal is made on the composed configuration
    (--check-config and runs; against the real verl in Molecule), never on how
    an argument is spelled."""
    argv = dry_run_args(render(tmp_path), "++actor_rollout_ref.rollout.name=vllm")
    assert argv[-1] == "++actor_rollout_ref.rollout.name=vllm"


def test_vllm_is_allowed_where_the_gpu_supports_it(tmp_path: Path) -> None:
    argv = dry_run_args(render(tmp_path, launch_min_compute_cap="8.0"), "actor_rollout_ref.rollout.name=vllm")
    assert argv[-1] == "actor_rollout_ref.rollout.name=vllm"


def test_no_placebo_variable_is_exported(tmp_path: Path) -> None:
    text = render(tmp_path).read_text()
    assert not any(p in text for p in PLACEBOS)


def test_verl_runs_with_the_training_environment_and_nothing_of_a_cluster_on_a_box_of_its_own(box: Path) -> None:
    env = standin_env(box)
    script = render(box, conda_env_prefix=str(env), launch_runs_dir=str(box / "runs"))
    assert run_as_user(script, "--check-config").returncode == 0
    seen = seen_environment(env)
    assert seen["HYDRA_FULL_ERROR"] == "1"
    assert seen["PYTORCH_CUDA_ALLOC_CONF"] == "max_split_size_mb:128"
    assert seen["CUDA_HOME"] == "/usr/local/cuda-11.8"
    assert seen["RAY_prestart_worker_first_driver"] == "0"  # no idle worker per core, read by Ray's raylet
    assert not {"NCCL_P2P_DISABLE", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "RAY_ADDRESS"} & set(seen)
    assert "trainer.nnodes=1" in dry_run_args(script) and "trainer.n_gpus_per_node=1" in dry_run_args(script)


def test_gpus_that_cannot_reach_each_other_turn_nccls_p2p_off(box: Path) -> None:
    env = standin_env(box)
    script = render(box, conda_env_prefix=str(env), launch_runs_dir=str(box / "runs"), training_env_p2p_ok=False,
                    launch_cluster={**CLUSTER, "managed": False, "hosts": ["p40-box"], "nnodes": 1, "n_gpus_per_node": 4})
    assert run_as_user(script, "--check-config").returncode == 0
    assert seen_environment(env)["NCCL_P2P_DISABLE"] == "1"
    assert "trainer.n_gpus_per_node=4" in dry_run_args(script)


def cluster_script(box: Path, host: str) -> tuple[Path, Path]:
    env = standin_env(box)
    return env, render(box, conda_env_prefix=str(env), launch_runs_dir=str(box / "runs"), launch_cluster=CLUSTER,
                       inventory_hostname=host, launch_ray_address="10.89.0.2:6379", training_env_interface="eth1")


def test_the_head_of_a_cluster_trains_across_it_and_checks_its_gpus_first(box: Path) -> None:
    env, script = cluster_script(box, "p40-box")
    argv = dry_run_args(script)
    assert "trainer.nnodes=3" in argv and "trainer.n_gpus_per_node=1" in argv
    assert run_as_user(script, "--check-config").returncode == 0
    seen = seen_environment(env)
    assert seen["RAY_ADDRESS"] == "10.89.0.2:6379"
    assert seen["NCCL_SOCKET_IFNAME"] == seen["GLOO_SOCKET_IFNAME"] == "eth1"
    proc = run_as_user(script)  # the stand-in "trains" after the check, which it passes
    assert proc.returncode == 0, proc.stderr
    calls = (env / "seen.argv").read_text().splitlines()
    check = calls.index("-m verl_pascal.cluster.check --address 10.89.0.2:6379 gpus --nnodes 3 --per-node 1")
    assert check < len(calls) - 1 and calls[-1].startswith("-m verl.trainer.main_ppo")


def test_the_head_refuses_a_run_the_cluster_cannot_hold(box: Path) -> None:
    env, script = cluster_script(box, "p40-box")
    python = env / "bin" / "python"
    python.write_text(python.read_text().replace('case "$1" in', '[ "$2" = verl_pascal.cluster.check ] && exit 1\ncase "$1" in'))
    proc = run_as_user(script)
    assert proc.returncode == 2
    assert not (box / "trained").exists() and not (box / "runs").exists()


def test_a_worker_of_a_cluster_refuses_to_start_a_run(box: Path) -> None:
    env, script = cluster_script(box, "w1")
    proc = run_as_user(script)
    assert proc.returncode == 2 and "runs start on the head, p40-box" in proc.stderr
    assert not (env / "seen.argv").exists() and not (box / "runs").exists()


@pytest.mark.parametrize("mode", [[], ["--check-config"]])
@pytest.mark.parametrize("broken", ["missing", "not executable", "bad interpreter"])
def test_an_env_whose_python_cannot_start_is_named_not_blamed_on_verl(box: Path, broken: str, mode: list[str]) -> None:
    """A broken install (the env gone, its python not executable or pointing at an interpreter
    that is gone) is said to be one: verl never saw the configuration, so it rejected nothing."""
    env = standin_env(box)
    python = env / "bin" / "python"
    if broken == "missing":
        python.unlink()
    elif broken == "not executable":
        python.chmod(0o644)
    else:
        python.write_text("#!%s/gone/bin/python\n" % box)
    proc = run_as_user(render(box, conda_env_prefix=str(env), launch_runs_dir=str(box / "runs")), *mode)
    assert proc.returncode == 1, proc.stderr
    assert (f"verl-ppo: the training env's Python ({python}) cannot start: check the env, re-run site.yml\n"
            in proc.stderr)
    assert "rejects" not in proc.stderr
    assert not (box / "trained").exists() and list((box / "runs").glob("*")) == []


def test_check_config_composes_and_judges_the_runs_overrides_in_one_python_start(box: Path) -> None:
    """One start of the env's python (each imports verl and torch) composes exactly what the run would get,
    judged against this box's compute capability, into a file removed afterwards."""
    env = standin_env(box)
    script = render(box, conda_env_prefix=str(env), launch_runs_dir=str(box / "runs"))
    proc = run_as_user(script, "--check-config", "trainer.total_epochs=3")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "verl-ppo: configuration composes with the installed verl.\n"
    (call,) = (env / "seen.argv").read_text().splitlines()
    head, _, overrides = call.partition(" -- ")
    module, composed, *options = head.split(" ")[1:]
    assert module == "verl_pascal.runconfig.compose" and options == ["--min-compute-capability", "6.1"]
    assert overrides == " ".join(dry_run_args(script, "trainer.total_epochs=3")[3:])
    assert not Path(composed).exists()


@pytest.mark.parametrize("mode", [[], ["--check-config"]])
def test_a_configuration_the_judge_refuses_stops_with_its_status_and_words(box: Path, mode: list[str]) -> None:
    env = standin_env(box)
    python = env / "bin" / "python"
    refusal = '[ "$2" = verl_pascal.runconfig.compose ] && { echo "verl-ppo: the rollout vllm needs 7.0" >&2; exit 2; }'
    python.write_text(python.read_text().replace('case "$1" in', refusal + '\ncase "$1" in'))
    proc = run_as_user(render(box, conda_env_prefix=str(env), launch_runs_dir=str(box / "runs")), *mode)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == "verl-ppo: the rollout vllm needs 7.0\n"
    assert not (box / "trained").exists() and list((box / "runs").glob("*")) == []


def test_a_run_whose_config_fails_leaves_no_run_directory(box: Path) -> None:
    script = render(box, conda_env_prefix=str(box / "no-env"), launch_runs_dir=str(box / "runs"))
    proc = run_as_user(script, "trainer.total_epochs=1")
    assert proc.returncode == 1, proc.stderr
    assert list((box / "runs").iterdir()) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="runs as root to see the refusal")
@pytest.mark.parametrize("mode", [[], ["--check-config"]])
def test_root_is_refused_before_anything_runs(box: Path, mode: list[str]) -> None:
    script = render(box, conda_env_prefix=str(standin_env(box)), launch_runs_dir=str(box / "runs"))
    proc = run(script, *mode)
    assert proc.returncode == 2
    assert "refusing to run verl as root" in proc.stderr and "sudo -u verl" in proc.stderr
    assert not (box / "runs").exists()
    assert not (box / "trained").exists()


def test_the_root_refusal_prints_a_command_that_runs_the_same_arguments(box: Path) -> None:
    """Pasted into a shell, the suggested `sudo -u verl ...` passes each argument as it was given,
    and runs nothing of what an argument holds ($(...), quotes, spaces)."""
    fake = box / "fake-root"  # `id -u` says 0, whoever runs the tests
    fake.mkdir()
    (fake / "id").write_text("#!/bin/sh\necho 0\n")  # the script asks only `id -u`
    (fake / "id").chmod(0o755)
    script = render(box, conda_env_prefix=str(standin_env(box)), launch_runs_dir=str(box / "runs"))
    args = [f"trainer.experiment_name=$(touch {box}/pasted)", "trainer.project_name='it''s' \"q\"",
            "data.x=two  words", "--allow-low-memory"]
    proc = subprocess.run([str(script), *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PATH": f"{fake}:{os.environ['PATH']}"})
    assert proc.returncode == 2 and "refusing to run verl as root" in proc.stderr
    (line,) = [l for l in proc.stderr.splitlines() if "run it as the training user: " in l]
    pasted = line.split("run it as the training user: ", 1)[1]
    assert shlex.split(pasted) == ["sudo", "-u", "verl", str(script), *args]
    ran = subprocess.run(["bash", "-c", 'sudo() { printf "%s\\0" "$@"; }\n' + pasted], capture_output=True,
                         text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split("\0")[:-1] == ["-u", "verl", str(script), *args]
    assert not (box / "pasted").exists() and not (box / "runs").exists()


def test_two_runs_started_in_the_same_second_get_two_run_directories(box: Path) -> None:
    script = render(box, conda_env_prefix=str(standin_env(box)), launch_runs_dir=str(box / "runs"))
    procs = [start_as_user(script) for _ in range(3)]
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
    dirs = sorted((box / "runs").iterdir())
    assert len(dirs) == 3
    for run_dir in dirs:
        assert (run_dir / "config.yaml").read_text().startswith("actor_rollout_ref:")
        assert "trainer.default_local_dir=%s/checkpoints" % run_dir in (run_dir / "command.sh").read_text()


@pytest.mark.parametrize("profile, rollout, actor_offload", [("pascal", "hf", "False"), ("native", "hf", "False"),
                                                            ("native", "vllm", "True")])
def test_the_actor_keeps_its_parameters_on_the_gpu_under_the_hf_rollout(
        tmp_path: Path, profile: str, rollout: str, actor_offload: str) -> None:
    """verl 0.5.0's HF rollout never loads offloaded actor parameters back (it fails on the first generate)."""
    argv = dry_run_args(render(tmp_path, verl_version="0.5.0", preflight_gpu_profile=profile, launch_rollout=rollout,
                               launch_param_offload="True", launch_actor_param_offload="True"))
    assert f"actor_rollout_ref.actor.fsdp_config.param_offload={actor_offload}" in argv
    assert "critic.model.fsdp_config.param_offload=True" in argv
    assert "actor_rollout_ref.ref.fsdp_config.param_offload=True" in argv


@pytest.mark.skipif(os.geteuid() != 0, reason="runs as root to see the override")
def test_allow_root_runs_as_root_when_asked(box: Path) -> None:
    script = render(box, conda_env_prefix=str(standin_env(box)), launch_runs_dir=str(box / "runs"))
    proc = run(script, "--allow-root")
    assert proc.returncode == 0, proc.stderr
    assert (box / "trained").exists() and len(list((box / "runs").iterdir())) == 1


def test_help_lists_every_option(tmp_path: Path) -> None:
    proc = run(render(tmp_path), "--help")
    assert proc.returncode == 0
    for option in ("--dry-run", "--check-config", "--allow-root", "HYDRA_OVERRIDE"):
        assert option in proc.stdout, option
    assert "set -euo" not in proc.stdout


def test_a_releases_own_overrides_reach_the_script_and_nothing_else_changes_with_the_version(
        tmp_path: Path) -> None:
    """A release folder's hydra_overrides are passed on every profile; a release without any (and with
    the same SFT table) renders the same script as another, so an upgrade does not rewrite it."""
    releases = {"0.5.0": {"hydra_overrides": ["+trainer.release_key=1"]}, "0.4.1": {"hydra_overrides": []}}
    argv = dry_run_args(render(tmp_path, verl_releases=releases, verl_version="0.5.0"))
    assert argv[-1] == "+trainer.release_key=1"
    folders = verl_releases.available()
    same_sft = {**folders, "0.4.1": {**folders["0.4.1"], "sft": folders["0.5.0"]["sft"]}}
    old = launch_render.render({**BASE, "verl_version": "0.4.1", "verl_releases": same_sft})
    new = launch_render.render({**BASE, "verl_version": "0.5.0", "verl_releases": same_sft})
    assert old == new and "own keys" not in new


def test_a_releases_key_renames_reach_the_templates_and_the_profiles_keys(tmp_path: Path) -> None:
    """A release that moved a key (0.8: critic.model.fsdp_config.* -> critic.fsdp.*) gets it under
    its own name, from the template's lines and from the GPU profile's overrides alike."""
    releases = {"0.5.0": {"key_renames": {"critic.model.fsdp_config.": "critic.fsdp."}}}
    argv = dry_run_args(render(tmp_path, verl_releases=releases, verl_version="0.5.0"))
    assert not [a for a in argv if "critic.model.fsdp_config." in a]
    assert "critic.fsdp.param_offload=False" in argv and "critic.fsdp.optimizer_offload=True" in argv
    assert "++critic.fsdp.mixed_precision.param_dtype=fp32" in argv  # the pascal profile's override
    plain = dry_run_args(render(tmp_path, verl_version="0.5.0"))
    assert "critic.model.fsdp_config.param_offload=False" in plain


def test_a_release_on_the_projects_rollout_registers_it_and_lets_the_actor_offload(box: Path) -> None:
    """verl 0.6.1 has no HF rollout of its own: the script exports the module that registers the
    project's, and the actor's parameters follow the offload setting (the rollout gets a copy)."""
    env = standin_env(box)
    script = render(box, verl_version="0.6.1", launch_actor_param_offload="True", conda_env_prefix=str(env))
    assert run_as_user(script, "--check-config").returncode == 0
    assert seen_environment(env)["VERL_USE_EXTERNAL_MODULES"] == "verl_pascal.rollout.verl_adapter"
    argv = dry_run_args(script)
    assert "actor_rollout_ref.actor.fsdp_config.param_offload=True" in argv
    assert "actor_rollout_ref.rollout.name=hf" in argv
    for key in ("actor", "ref"):  # 0.6's autocast dtype is configuration: fp32 on the fp32 profiles
        assert f"actor_rollout_ref.{key}.fsdp_config.dtype=fp32" in argv
    assert "actor_rollout_ref.rollout.dtype=fp32" in argv


def test_a_releases_profile_overrides_stay_off_other_profiles(tmp_path: Path) -> None:
    argv = dry_run_args(render(tmp_path, verl_version="0.6.1", preflight_gpu_profile="native", launch_rollout="vllm"))
    assert not [a for a in argv if "dtype=fp32" in a]


def test_verls_own_hf_rollout_keeps_the_actor_on_the_gpu(tmp_path: Path) -> None:
    script = render(tmp_path, verl_version="0.5.0", launch_actor_param_offload="True", launch_param_offload="True")
    assert "VERL_USE_EXTERNAL_MODULES" not in script.read_text()
    argv = dry_run_args(script)
    assert "actor_rollout_ref.actor.fsdp_config.param_offload=False" in argv
    assert "actor_rollout_ref.ref.fsdp_config.param_offload=True" in argv
    assert not [a for a in argv if a.endswith(".fsdp_config.dtype=fp32")]


@pytest.mark.parametrize("cluster, gpus, nodes", [
    ({"managed": False, "hosts": ["p40-box"], "head": "p40-box", "nnodes": 1, "n_gpus_per_node": 1}, 1, 1),
    ({"managed": False, "hosts": ["p40-box"], "head": "p40-box", "nnodes": 1, "n_gpus_per_node": 4}, 4, 1),
    (CLUSTER, 3, 3),
])
def test_verls_helper_processes_are_sized_for_the_cluster_not_a_large_server(
        tmp_path: Path, cluster: dict, gpus: int, nodes: int) -> None:
    """verl 0.9.1 starts 8 agent-loop workers, 8 reward workers, 8 TransferQueue storage units and 8
    DataLoader workers by default; the script asks for one agent-loop worker per GPU, one reward worker
    and one storage unit per node, and no DataLoader worker."""
    argv = dry_run_args(render(tmp_path, verl_version="0.9.1", launch_cluster=cluster))
    assert f"++actor_rollout_ref.rollout.agent.num_workers={gpus}" in argv
    assert f"++reward.num_workers={nodes}" in argv
    assert f"++transfer_queue.backend.SimpleStorage.num_data_storage_units={nodes}" in argv
    assert "++data.dataloader_num_workers=0" in argv
    # Each is set once: nothing of verl's default 8 is left to another spelling of the key.
    assert len([a for a in argv if "num_workers=" in a or "num_data_storage_units=" in a]) == 4


@pytest.mark.parametrize("version, keys", [
    ("0.5.0", {"data.dataloader_num_workers"}),
    ("0.8.0", {"data.dataloader_num_workers", "actor_rollout_ref.rollout.agent.num_workers", "reward.num_workers"}),
    ("0.3.0.post1", set()),  # hard-codes its DataLoader workers: no key to set
])
def test_each_release_gets_the_sizing_keys_its_folder_names(tmp_path: Path, version: str, keys: set) -> None:
    argv = dry_run_args(render(tmp_path, verl_version=version))
    assert {a.split("=")[0].lstrip("+") for a in argv if a.startswith("++") and "num_" in a} == keys


# --- Supervised fine-tuning (--sft) ------------------------------------------------------------------------

#: The releases whose folder has an sft table: verl-ppo --sft runs their SFT trainer.
SFT_VERSIONS = [v for v in verl_releases.versions() if verl_releases.read(v).get("sft")]

# A STAND-IN for the env's python in an SFT run: verl's SFT trainer's `--cfg job` prints a configuration
# (or, with $here/reject, verl's complaint), torchrun "trains" by writing what verl's checkpoint manager
# writes at the last step (the tracker, the step's huggingface/ model; with $here/no-model, no model).
SFT_STANDIN_PYTHON = """#!/bin/sh
here=$(dirname "$0")/..
echo "$*" >>"$here/seen.argv"
if [ "$3" = --cfg ]; then
  [ -e "$here/reject" ] && { echo "Could not override 'data.nokey'" >&2; exit 1; }
  printf 'data:\\n  max_length: 512\\n'
  exit 0
fi
if [ "$2" = torch.distributed.run ]; then
  for arg in "$@"; do
    case "$arg" in trainer.default_local_dir=*) ckpt=${arg#trainer.default_local_dir=} ;; esac
  done
  mkdir -p "$ckpt/global_step_3/huggingface"
  echo '{}' >"$ckpt/global_step_3/huggingface/config.json"
  [ -e "$here/no-model" ] || : >"$ckpt/global_step_3/huggingface/model.safetensors"
  echo 3 >"$ckpt/latest_checkpointed_iteration.txt"
  echo "step:3 - train/loss:0.5"
fi
"""


def sft_box(box: Path, version: str = "0.5.0") -> tuple[Path, Path]:
    """A box with the SFT stand-in python, the SFT data staged, and its launch script."""
    env = box / "env"
    (env / "bin").mkdir(parents=True)
    (env / "bin" / "python").write_text(SFT_STANDIN_PYTHON)
    (env / "bin" / "python").chmod(0o755)
    env.chmod(0o777)
    data = box / "data"
    (data / "sft").mkdir(parents=True)
    for split in ("train", "test"):
        (data / "sft" / f"{split}.parquet").write_bytes(b"PAR1")
    script = render(box, verl_version=version, conda_env_prefix=str(env), launch_runs_dir=str(box / "runs"),
                    launch_data_dir=str(data))
    return env, script


@pytest.mark.parametrize("version", SFT_VERSIONS)
def test_the_sft_mode_of_every_release_is_valid_bash_and_shellcheck_clean(tmp_path: Path, version: str) -> None:
    script = render(tmp_path, verl_version=version)
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    assert "--sft" in run(script, "--help").stdout
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not installed (make setup installs it)")
    proc = subprocess.run(["shellcheck", str(script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout


@pytest.mark.parametrize("version", SFT_VERSIONS)
def test_sft_dry_run_is_torchrun_of_the_releases_trainer_with_its_p40_keys(tmp_path: Path, version: str) -> None:
    """--sft runs the release's own SFT trainer with torchrun on this box's GPUs, on RL's model and lengths,
    the converter's files, and its folder's keys for the fp32 profile; extra overrides win."""
    sft = verl_releases.read(version)["sft"]
    script = render(tmp_path, verl_version=version,
                    launch_cluster={"managed": False, "hosts": ["p40-box"], "head": "p40-box", "nnodes": 1,
                                    "n_gpus_per_node": 2})
    argv = dry_run_args(script, "--sft", "trainer.total_epochs=3")
    assert argv[:8] == ["/opt/miniforge3/envs/verl-p40/bin/python", "-m", "torch.distributed.run", "--standalone",
                        "--nnodes=1", "--nproc_per_node=2", "-m", sft["module"]]
    overrides = argv[8:]
    for expected in [f"{sft['model_key']}=/opt/verl-pascal/models/Qwen2.5-0.5B-Instruct",
                     "data.train_files=/opt/verl-pascal/data/gsm8k/sft/train.parquet",
                     "data.val_files=/opt/verl-pascal/data/gsm8k/sft/test.parquet",
                     "data.max_length=512", "data.micro_batch_size_per_gpu=4", "trainer.logger=[console,tensorboard]",
                     *sft["overrides"], *sft["profile_overrides"]["fp32"]]:
        assert expected in overrides, expected
    assert overrides[-1] == "trainer.total_epochs=3"
    # P40 rules, however the release spells them: no padding removal (flash-attn varlen), no Liger (Triton).
    assert [o for o in overrides if o.endswith("use_remove_padding=False")]
    assert [o for o in overrides if o.endswith("use_liger=False")]
    assert not [o for o in overrides if "actor_rollout_ref" in o or "critic" in o]


def test_sft_keeps_verls_defaults_where_the_gpu_runs_them(tmp_path: Path) -> None:
    argv = dry_run_args(render(tmp_path, verl_version="0.9.1", preflight_gpu_profile="native"), "--sft")
    assert not [a for a in argv if "fp32" in a or "use_liger" in a or "use_torch_compile" in a]
    assert "checkpoint.save_contents=[model,optimizer,extra,hf_model]" in argv


def test_a_release_without_an_sft_table_says_so(tmp_path: Path) -> None:
    proc = run(render(tmp_path, verl_version="0.4.1"), "--sft", "--dry-run")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == ("verl-ppo: the installed verl has no SFT trainer verl-ppo runs "
                           "(its release folder has no sft table)\n")


@pytest.mark.parametrize("args, message", [
    (["--sft", "--algo", "grpo"], "--algo chooses the RL algorithm; --sft runs verl's SFT trainer"),
    (["--sft", "--resume"], "one of --sft, --resume, --export, --report and --tensorboard at a time"),
    (["--export", "--sft"], "one of --sft, --resume, --export, --report and --tensorboard at a time"),
])
def test_sft_is_a_run_of_its_own(tmp_path: Path, args: list[str], message: str) -> None:
    proc = run(render(tmp_path), *args)
    assert proc.returncode == 2 and proc.stderr == f"verl-ppo: {message}\n"


def test_an_sft_run_trains_in_its_own_run_directory_and_prints_the_model_rl_starts_from(box: Path) -> None:
    env, script = sft_box(box)
    proc = run_as_user(script, "--sft", "trainer.total_epochs=2")
    assert proc.returncode == 0, proc.stderr
    (run_dir,) = (box / "runs" / "sft").iterdir()
    model = run_dir / "checkpoints" / "global_step_3" / "huggingface"
    compose_call, train_call = (env / "seen.argv").read_text().splitlines()
    assert compose_call.startswith("-m verl.trainer.fsdp_sft_trainer --cfg job ")
    assert train_call.startswith("-m torch.distributed.run --standalone --nnodes=1 --nproc_per_node=1 "
                                 "-m verl.trainer.fsdp_sft_trainer ")
    assert train_call.endswith(f"trainer.total_epochs=2 trainer.default_local_dir={run_dir}/checkpoints")
    assert compose_call.split(" --cfg job ")[1] == train_call.split(" -m verl.trainer.fsdp_sft_trainer ")[1]
    assert (run_dir / "config.yaml").read_text() == "data:\n  max_length: 512\n"
    assert "step:3" in (run_dir / "train.log").read_text()
    assert shlex.split((run_dir / "command.sh").read_text())[-1] == f"trainer.default_local_dir={run_dir}/checkpoints"
    lines = proc.stdout.splitlines()
    assert lines[-2] == f"verl-ppo: the SFT model, in Hugging Face format: {model}"
    rl = shlex.split(lines[-1].split("RL from it: ", 1)[1].split("(GRPO", 1)[0])
    assert rl == [str(script), f"actor_rollout_ref.model.path={model}", f"critic.model.path={model}"]
    # RL's --resume, --export and --report never take an SFT run for one of theirs.
    for action in ("--resume", "--export", "--report"):
        other = run(script, action, "--dry-run")
        assert other.returncode == 2 and "no run under" in other.stderr, (action, other.stderr)


def test_an_sft_run_without_its_data_names_the_command_that_writes_it(box: Path) -> None:
    env, script = sft_box(box)
    shutil.rmtree(box / "data" / "sft")
    proc = run_as_user(script, "--sft")
    assert proc.returncode == 2 and not (box / "runs").exists()
    assert proc.stderr.startswith(f"verl-ppo: no SFT data at {box}/data/sft/train.parquet; write it from")
    command = proc.stderr.split("staged beside it: ", 1)[1].split("(or from", 1)[0]
    assert shlex.split(command) == [str(env / "bin" / "python"), "-m", "verl_pascal.data.cli", "--sft",
                                    "--train-file", f"{box}/data/train.parquet", "--test-file",
                                    f"{box}/data/test.parquet", "--out", f"{box}/data/sft"]


def test_an_sft_configuration_verl_rejects_stops_before_training_and_leaves_no_run_directory(box: Path) -> None:
    env, script = sft_box(box)
    (env / "reject").touch()
    for mode in ([], ["--check-config"]):
        proc = run_as_user(script, "--sft", "data.nokey=1", *mode)
        assert proc.returncode == 1, proc.stderr
        assert proc.stderr == ("Could not override 'data.nokey'\n"
                               "verl-ppo: the installed verl rejects the configuration above.\n")
        assert list((box / "runs" / "sft").glob("*")) == []
    assert "torch.distributed.run" not in (env / "seen.argv").read_text()


def test_sft_check_config_composes_with_the_release_trainer_and_keeps_nothing(box: Path) -> None:
    env, script = sft_box(box, "0.9.1")
    proc = run_as_user(script, "--sft", "--check-config")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "verl-ppo: the SFT configuration composes with the installed verl.\n"
    (call,) = (env / "seen.argv").read_text().splitlines()
    assert call == "-m verl.trainer.sft_trainer --cfg job " + " ".join(dry_run_args(script, "--sft")[8:])
    assert not (box / "runs").exists()


def test_an_sft_run_whose_trainer_wrote_no_model_says_so(box: Path) -> None:
    env, script = sft_box(box)
    (env / "no-model").touch()
    proc = run_as_user(script, "--sft")
    assert proc.returncode == 2
    assert "verl's SFT trainer wrote no Hugging Face model into" in proc.stderr
