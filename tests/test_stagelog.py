"""What `make demo` and `make test` print: one line per stage (scripts/stages.sh),
and what a failed stage's log says (verl_pascal.stagelog); then scripts/demo.sh
itself with stand-ins for Podman, Ansible and the image build (no containers):
the log's path first and last, no stage output on the terminal, the failed
task and its message, the report and the next commands.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import pytest

from conftest import REPO_ROOT as REPO  # noqa: E402
from verl_pascal import stagelog

STAGES = REPO / "scripts" / "stages.sh"
STAGE_LINE = re.compile(r"^\[ *\d+s\] (?P<title>.*) \.\.\. (?P<state>ok|failed \(\d+\))$")

# Ansible's default callback with callback_result_format = yaml (ansible.cfg), as
# ansible-playbook writes it: an ignored failure, a rescued one, then the one that
# ended the play (a command whose message is only its return code).
ANSIBLE_YAML = """
PLAY [Provision] ***************************************************************

TASK [preflight : Probe that may fail] *****************************************
[ERROR]: Task failed: Module failed: non-zero return code

fatal: [p40-box]: FAILED! => 
    changed: true
    msg: non-zero return code
    rc: 1
    stderr: 'probe: not here'
...ignoring

TASK [artifact : Download the runfile] *****************************************
fatal: [p40-box]: FAILED! => 
    changed: false
    msg: checksum mismatch

TASK [artifact : Note it] ******************************************************
ok: [p40-box] => 
    msg: rescued

TASK [conda : Create the training env] *****************************************
[ERROR]: Task failed: Module failed: non-zero return code
Origin: roles/conda/tasks/main.yml:16:7

fatal: [p40-box]: FAILED! => 
    changed: true
    cmd:
    - sh
    - -c
    - 'make-env: exit 1'
    msg: non-zero return code
    rc: 1
    stderr: |-
        Traceback (most recent call last):

        MemoryError: the box has 3 GiB
    stderr_lines: <omitted>
    stdout: ''

PLAY RECAP *********************************************************************
p40-box                    : ok=2    changed=1    unreachable=0    failed=1    skipped=0    rescued=1    ignored=1
"""

# The same callback with JSON results: a loop whose two items failed.
ANSIBLE_JSON_LOOP = """
TASK [verl : Install the lock] *************************************************
changed: [p40-box] => (item=0)
failed: [p40-box] (item=py3.10) => {"ansible_loop_var": "item", "changed": true, "item": "py3.10", "msg": "no lock for Python 3.10", "rc": 3}
failed: [p40-box] (item=py3.11) => {"ansible_loop_var": "item", "changed": true, "item": "py3.11", "msg": "no lock for Python 3.11", "rc": 4}

PLAY RECAP *********************************************************************
"""

# Molecule boxes a playbook's output, colours it and wraps long lines (results are JSON there).
BOX = "  \x1b[2m\u2502\x1b[0m "
MOLECULE = "\n".join(BOX + line for line in [
    "TASK [artifact : Stop with the reason, for the",
    "  runfile] ***",
    "\x1b[0;31mfatal: [p40-box-upgrade]: FAILED! => {\"changed\": false, \"msg\": \"Artifact\x1b[0m",
    "\x1b[0;31m  cuda.run could not be fetched and verified; nothing was installed from\x1b[0m",
    "\x1b[0;31m  it.\"}\x1b[0m",
    "",
    "PLAY RECAP *****",
]) + "\n\x1b[36mINFO    \x1b[0m upgrade \u279c converge: \x1b[31mExecuted: Failed\x1b[0m\n" + \
    "\x1b[36mINFO    \x1b[0m upgrade \u279c destroy: Executed: Successful\n"

PYTEST = """============================= test session starts ==============================
tests/test_fleet.py ..F.                                                  [100%]

=================================== FAILURES ===================================
__________________________ test_workers_reach_the_head _________________________

    def test_workers_reach_the_head() -> None:
>       assert port == 6379
E       assert 6380 == 6379

tests/test_fleet.py:12: AssertionError
=========================== short test summary info ============================
FAILED tests/test_fleet.py::test_workers_reach_the_head - assert 6380 == 6379
========================= 1 failed, 3 passed in 0.52s ==========================
"""

# playbooks/report.yml's debug task, YAML results: what the demo shows after the stages.
REPORT = """
TASK [Read the GPUs] ***********************************************************
ok: [p40-box]

TASK [Print the report] ********************************************************
ok: [p40-box] => 
    msg:
    - 'GPUs: Tesla P40 (driver 550.54.15, profile pascal)'
    - 'CUDA toolkit 11.8.0 in /usr/local/cuda-11.8
        (nvcc host compiler /usr/bin/g++-11)'
    - 'Env /opt/verl-env (owner verl): {"python": "3.11.2", "verl": "0.5.0"}'

PLAY RECAP *********************************************************************
"""


def lines(text: str) -> List[str]:
    return text.splitlines(keepends=True)


# --- verl_pascal.stagelog -------------------------------------------------------


def test_the_failed_task_is_the_last_one_neither_ignored_nor_rescued_with_its_stderr() -> None:
    out = stagelog.failed_task(lines(ANSIBLE_YAML))
    assert out[0] == "failed task: conda : Create the training env (on p40-box)"
    text = "\n".join(out)
    assert "non-zero return code" in text and "MemoryError: the box has 3 GiB" in text
    assert "probe: not here" not in text and "checksum mismatch" not in text


def test_a_generic_message_alone_brings_no_stderr_but_a_real_message_stands_alone() -> None:
    only_msg = ANSIBLE_YAML.replace("msg: non-zero return code\n    rc: 1\n    stderr: |-",
                                    "msg: the env has Python 3.10, not 3.11\n    rc: 1\n    stderr: |-")
    text = "\n".join(stagelog.failed_task(lines(only_msg)))
    assert "the env has Python 3.10, not 3.11" in text and "MemoryError" not in text


def test_every_failed_item_of_a_loop_is_named_with_its_message() -> None:
    out = stagelog.failed_task(lines(ANSIBLE_JSON_LOOP))
    assert out == ["failed task: verl : Install the lock (on p40-box)",
                   "  item py3.10: no lock for Python 3.10", "  item py3.11: no lock for Python 3.11"]


def test_molecule_output_is_unboxed_unwrapped_and_read_before_its_failed_action() -> None:
    out = stagelog.reason(lines(MOLECULE))
    assert out[0] == "failed task: artifact : Stop with the reason, for the runfile (on p40-box-upgrade)"
    assert "cuda.run could not be fetched and verified; nothing was installed from it." in out[1]
    detail = stagelog.explain(lines(MOLECULE))
    assert "failed action" in detail[0] and not any("\x1b" in line or "\u2502" in line for line in detail)
    assert not any("Executed" in line for line in detail)


def test_pytest_failures_come_with_their_detail_and_the_summary() -> None:
    detail = stagelog.explain(lines("noise\n" * 100 + PYTEST))
    assert detail[0].startswith("=") and "FAILURES" in detail[0]
    assert "E       assert 6380 == 6379" in detail and detail[-1].startswith("=") and "1 failed" in detail[-1]
    assert stagelog.reason(lines(PYTEST)) == [
        "FAILED tests/test_fleet.py::test_workers_reach_the_head - assert 6380 == 6379",
        "========================= 1 failed, 3 passed in 0.52s =========================="]


def test_without_a_task_or_a_test_the_end_of_the_output_is_shown() -> None:
    output = [f"pip: file {n} was already downloaded\n" for n in range(100)] + ["debootstrap: no space left\n"]
    detail = stagelog.explain(output)
    assert detail[-1] == "debootstrap: no space left" and len(detail) == stagelog.TAIL + 1
    assert stagelog.reason(output) == []


def test_the_report_is_the_debug_messages_each_on_one_line() -> None:
    assert stagelog.report(lines(REPORT)) == [
        "GPUs: Tesla P40 (driver 550.54.15, profile pascal)",
        "CUDA toolkit 11.8.0 in /usr/local/cuda-11.8 (nvcc host compiler /usr/bin/g++-11)",
        'Env /opt/verl-env (owner verl): {"python": "3.11.2", "verl": "0.5.0"}']


def test_the_command_reads_the_stage_lines_alone(tmp_path: Path) -> None:
    log = tmp_path / "demo.log"
    # Lines are numbered as wc and sed number them: pip's progress rewrites a line with "\r".
    progress = "Downloading torch 10%\rDownloading torch 100%\n"
    log.write_text(progress + ANSIBLE_YAML + REPORT)
    first_report_line = len(lines(ANSIBLE_YAML)) + 2
    run = [sys.executable, "-m", "verl_pascal.stagelog"]
    proc = subprocess.run(run + ["reason", str(log), "--to", str(first_report_line - 1)],
                          capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.startswith("failed task: conda : Create the training env")
    proc = subprocess.run(run + ["reason", str(log), "--from", str(first_report_line)], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout == ""
    proc = subprocess.run(run + ["report", str(log), "--from", str(first_report_line)], capture_output=True, text=True)
    assert proc.stdout.splitlines()[0] == "GPUs: Tesla P40 (driver 550.54.15, profile pascal)"
    proc = subprocess.run(run + ["explain", str(log), "--to", "1"], capture_output=True, text=True)
    assert proc.stdout.splitlines()[-1] == "Downloading torch 100%"
    proc = subprocess.run(run + ["report", str(tmp_path / "missing.log")], capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "cannot read" in proc.stderr


# --- scripts/stages.sh ----------------------------------------------------------


def bash(script: str, tmp_path: Path, env: Dict[str, str] = {}) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", f'set -euo pipefail; . "{STAGES}"; stage_log="{tmp_path}/log"; {script}'],
                          capture_output=True, text=True, cwd=tmp_path, env={**os.environ, **env})


def test_a_stage_is_one_line_with_its_time_and_its_output_goes_to_the_log(tmp_path: Path) -> None:
    proc = bash("stage 'preparing stand-in artifacts' sh -c 'echo File was already downloaded; echo warn >&2'",
                tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert STAGE_LINE.match(proc.stdout.strip()) and proc.stdout.count("\n") == 1
    assert STAGE_LINE.match(proc.stdout.strip()).group("title") == "preparing stand-in artifacts"  # type: ignore
    log = (tmp_path / "log").read_text()
    assert "File was already downloaded" in log and "warn" in log


def test_a_failed_stage_says_so_and_stops_at_its_first_failed_command(tmp_path: Path) -> None:
    script = """f() { echo first; false; echo after; }
handle() { echo "handled"; stage_explain; exit 0; }
stage_on_failure=handle
stage 'building' f"""
    proc = bash(script, tmp_path)
    out = proc.stdout.splitlines()
    assert STAGE_LINE.match(out[0]).group("state") == "failed (1)"  # type: ignore[union-attr]
    assert out[1] == "handled" and "first" in out[2:] and "after" not in proc.stdout + (tmp_path / "log").read_text()


def test_a_stage_here_sets_the_callers_variables(tmp_path: Path) -> None:
    proc = bash("f() { answer=42; }; stage --here 'reading' f; echo \"answer=$answer\"", tmp_path)
    assert proc.stdout.splitlines()[-1] == "answer=42"


def test_kept_lines_reach_the_terminal_without_colours(tmp_path: Path) -> None:
    script = r"""stage_keep='^=+ .* in [0-9.]+s'
stage unit printf 'tests/test_a.py ....\n\033[32m===== 4 passed in 1.20s =====\033[0m\n'"""
    out = bash(script, tmp_path).stdout.splitlines()
    assert out[0] == "===== 4 passed in 1.20s =====" and STAGE_LINE.match(out[1]) and len(out) == 2


# --- scripts/demo.sh with stand-ins -----------------------------------------------


def executable(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def demo(tmp_path: Path) -> Path:
    """A copy of demo.sh and stages.sh beside stand-ins for lib.sh, setup, make, Podman and Ansible."""
    clone = tmp_path / "clone"
    (clone / "scripts").mkdir(parents=True)
    for name in ("demo.sh", "stages.sh"):
        shutil.copy2(REPO / "scripts" / name, clone / "scripts" / name)
    executable(clone / "scripts" / "setup-host.sh", "#!/bin/sh\necho 'setup-host: installing podman'\n")
    (clone / "scripts" / "lib.sh").write_text(f"""
root={clone}; cache=$root/.cache; VERL_PASCAL_STANDINS=$cache/standins VERL_PASCAL_IMAGE=debian12
VERL_PASCAL_APT_CACHE=$cache/apt VERL_PASCAL_BOX_PIP_CACHE=$cache/pip VERL_PASCAL_BOX_PIP_MOUNT=/var/cache/pip
exit_commands=()
run_exit_commands() {{ local c; for c in "${{exit_commands[@]}}"; do eval "$c" || true; done; }}
at_exit() {{ exit_commands=("$*" "${{exit_commands[@]}}"); trap run_exit_commands EXIT; }}
build_test_inputs() {{ echo "File was already downloaded (verl $1)"; }}
start_mirror() {{ mirror_url=http://127.0.0.1:1; at_exit "echo mirror stopped >/dev/null"; }}
standin_host_vars() {{ echo "artifact_mirror_url: $mirror_url"; }}
""")
    bin_dir = clone / "bin"
    bin_dir.mkdir()
    executable(bin_dir / "make", "#!/bin/sh\necho 'pip: Location is ignored'\n")
    executable(bin_dir / "podman", "#!/bin/sh\necho \"podman $*\" >>\"$DEMO_CALLS\"\n")
    executable(bin_dir / "ansible-inventory",
               "#!/bin/sh\necho '{\"verl_version\": \"0.5.0\", \"training_user\": \"verl\"}'\n")
    (tmp_path / "site.log").write_text(ANSIBLE_YAML)
    (tmp_path / "report.log").write_text(REPORT)
    executable(bin_dir / "ansible-playbook", f"""#!/bin/sh
case "$*" in
  *report.yml*) cat "{tmp_path}/report.log" ;;
  *) cat "{tmp_path}/site.log"; [ -n "$DEMO_SITE_FAILS" ] && exit 2 ;;
esac
exit 0
""")
    return clone


def run_demo(clone: Path, **env: str) -> subprocess.CompletedProcess:
    path = f"{clone / 'bin'}:{os.environ['PATH']}"
    return subprocess.run(["bash", str(clone / "scripts" / "demo.sh")], capture_output=True, text=True,
                          env={**os.environ, "PATH": path, "VENV": str(Path(sys.executable).parent.parent),
                               "DEMO_CALLS": str(clone / "calls"), **env})


def test_the_demo_prints_its_stages_the_report_and_the_next_commands(demo: Path) -> None:
    proc = run_demo(demo)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout.splitlines()
    log = demo / ".cache" / "demo" / "demo.log"
    assert str(log) in out[0] and str(log) in out[-1]
    stages = [STAGE_LINE.match(line) for line in out if STAGE_LINE.match(line)]
    assert all(m.group("state") == "ok" for m in stages) and len(stages) == 7  # type: ignore[union-attr]
    assert "for verl 0.5.0" in stages[3].group("title")  # type: ignore[union-attr]
    assert "  GPUs: Tesla P40 (driver 550.54.15, profile pascal)" in out
    assert any("verl-ppo --dry-run" in line and "-u verl" in line for line in out)
    assert any("verl-ppo --check-config" in line for line in out)
    noise = ("File was already downloaded", "Location is ignored", "setup-host: installing", "TASK [")
    assert not any(word in proc.stdout for word in noise)
    assert all(word in log.read_text() for word in noise)
    assert "podman rm -f -t 0 verl-pascal-demo" in (demo / "calls").read_text()
    assert re.match(r"make demo: done in \d+s\.$", out[-2])


def test_a_failed_demo_names_its_stage_task_message_and_log(demo: Path) -> None:
    proc = run_demo(demo, DEMO_SITE_FAILS="1")
    assert proc.returncode != 0
    out = proc.stdout.splitlines()
    failed = [line for line in out if STAGE_LINE.match(line) and "failed" in line]
    assert len(failed) == 1 and "site.yml" in failed[0]
    assert "failed task: conda : Create the training env (on p40-box)" in out
    assert any("MemoryError: the box has 3 GiB" in line for line in out)
    assert str(demo / ".cache" / "demo" / "demo.log") in out[-1]
    assert "What was installed" not in proc.stdout


# --- scripts/test.sh with stand-ins for make and Molecule ---------------------------


@pytest.fixture
def lanes(tmp_path: Path) -> Path:
    """A copy of test.sh and stages.sh beside a make whose unit tests fail and a Molecule whose offline scenario does."""
    clone = tmp_path / "clone"
    (clone / "scripts").mkdir(parents=True)
    (clone / "bin").mkdir()
    for name in ("test.sh", "stages.sh"):
        shutil.copy2(REPO / "scripts" / name, clone / "scripts" / name)
    (tmp_path / "pytest.log").write_text(PYTEST)
    executable(clone / "bin" / "make", f"""#!/bin/sh
case "$2" in
  unit) echo "tests/test_fleet.py ..F."; cat "{tmp_path}/pytest.log"; exit 1 ;;
  *) echo "WARNING: Location 'file:///simple/$2/' is ignored" ;;
esac
""")
    (tmp_path / "molecule.log").write_text(MOLECULE)
    executable(clone / "scripts" / "molecule.sh", f"""#!/bin/bash
[[ $1 == --inputs-only ]] && {{ echo "File was already downloaded verl-0.5.0.tar.gz"; exit 0; }}
printf '\\033[36mINFO    \\033[0m %s \\u279c converge: Executing\\n' "$3"
[[ $3 == offline ]] && {{ cat "{tmp_path}/molecule.log"; exit 1; }}
printf '\\033[36mINFO    \\033[0m %s \\u279c converge: Executed: Successful\\n' "$3"
printf '%s                  : actions=6  successful=6  failed=0\\n' "$3"
""")
    return clone


def test_the_lanes_show_stages_and_summaries_and_every_failure_without_the_noise(lanes: Path) -> None:
    proc = subprocess.run(["bash", str(lanes / "scripts" / "test.sh")], capture_output=True, text=True,
                          env={**os.environ, "PATH": f"{lanes / 'bin'}:{os.environ['PATH']}",
                               "VENV": str(Path(sys.executable).parent.parent)})
    assert proc.returncode != 0
    out = proc.stdout.splitlines()
    logs = lanes / ".cache" / "test"
    assert str(logs / "main.log") in out[0] and str(logs / "main.log") in out[-1]
    assert "[main] ========================= 1 failed, 3 passed in 0.52s ==========================" in out
    assert any(re.match(r"^\[upgrade\] INFO +upgrade \u279c converge: Executed: Successful$", line) for line in out)
    assert any(re.match(r"^\[upgrade\] upgrade +: actions=6 ", line) for line in out)
    states = {m.group("title"): m.group("state") for m in (STAGE_LINE.match(line.split("] ", 1)[1]) for line in out
                                                          if line.startswith(("[main] [", "[upgrade] [")))
              if m}
    assert states == {"setup": "ok", "venv": "ok", "lint": "ok", "unit": "failed (1)", "inputs": "ok",
                      "molecule upgrade": "ok", "molecule offline": "failed (1)"}
    # The failed test's detail and the failed task's message are on the terminal; the task last of all.
    assert "E       assert 6380 == 6379" in out
    assert any(line.startswith("failed task: artifact : Stop with the reason") for line in out[-4:])
    assert "Location" not in proc.stdout and "already downloaded" not in proc.stdout
    assert "already downloaded" in (logs / "upgrade.log").read_text()
