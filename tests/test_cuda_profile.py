"""The login-shell script of the cuda_toolkit role (/etc/profile.d/verl-pascal-cuda.sh),
rendered with Ansible's `quote` filter and sourced by a real sh: a toolkit path
with spaces or shell characters must arrive as written, and nothing in it runs."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import jinja2
import pytest
from conftest import REPO_ROOT

TEMPLATE = REPO_ROOT / "roles" / "cuda_toolkit" / "templates" / "cuda.sh.j2"


def render(path: str) -> str:
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    env.filters["quote"] = lambda s: shlex.quote(str(s))
    return env.from_string(TEMPLATE.read_text()).render(
        ansible_managed="Ansible managed", cuda_major_minor="11.8", cuda_toolkit_path=path)


@pytest.mark.parametrize("path", ["/usr/local/cuda-11.8", "/opt/my cuda/11.8", "/opt/cuda;touch $HOME/x`id`"])
def test_sourcing_sets_cuda_home_and_path_exactly(tmp_path: Path, path: str) -> None:
    script = tmp_path / "cuda.sh"
    script.write_text(render(path))
    proc = subprocess.run(["sh", "-c", '. "$1" && printf "%s\\n%s\\n" "$CUDA_HOME" "$PATH"', "sh", str(script)],
                          capture_output=True, text=True, cwd=str(tmp_path), env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    home, path_var = proc.stdout.splitlines()
    assert home == path
    assert path_var.split(":")[0] == path + "/bin"
    assert not (tmp_path / "x").exists() and list(tmp_path.iterdir()) == [script]
