"""module_utils/box_state.py: the one read a role makes on a re-run, and the rules by which a changing task is skipped.

A task is skipped only when its files entry is as wanted, so every way a file
can drift from what the task leaves must show up in ``differs``: another
content, owner, group or mode, a link pointing elsewhere, a file where none
belongs, one file deep in a tree owned by someone else, a changed file of a
tree whose sha256 a stamp records. Each test breaks one such thing.
"""

from __future__ import annotations

import os
import pwd
import re
import sys
from pathlib import Path
from typing import Any, Dict

import pytest

from verl_pascal.module_utils import box_state as bs
from verl_pascal.module_utils import env_probe
from conftest import needs_ansible, run_playbook

ME = pwd.getpwuid(os.getuid()).pw_name
OTHER_UID = str(os.getuid() + 4242)  # an owner this test's files never have (digits: a uid)
ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: gives one file another owner")


def source() -> str:
    return Path(env_probe.__file__).read_text()


def inspect(**request: Any) -> Dict[str, Any]:
    return bs.inspect_box(request, source)


def differs(path: Path, **spec: Any) -> Dict[str, str]:
    return inspect(files={"it": {"path": str(path), **spec}})["why"]


# ---- files entries -------------------------------------------------------------------------

def test_a_file_as_the_task_leaves_it_is_not_listed(tmp_path: Path) -> None:
    f = tmp_path / "hook.sh"
    f.write_text("export CUDA_HOME=/usr/local/cuda-11.8\n")
    f.chmod(0o644)
    assert differs(f, content="export CUDA_HOME=/usr/local/cuda-11.8\n", owner=ME, mode="0644") == {}


@pytest.mark.parametrize("change, reason", [
    (lambda f: f.write_text("export CUDA_HOME=/opt/elsewhere\n"), "its content differs"),
    (lambda f: f.write_text("export CUDA_HOME=/usr/local/cuda-11.8\n# edited\n"), "its content differs"),
    (lambda f: f.chmod(0o600), "its mode is 0600, not 0644"),
    (lambda f: f.unlink(), "it is missing"),
    (lambda f: (f.unlink(), f.mkdir()), "it is not a regular file"),
])
def test_a_changed_file_is_listed_with_why(tmp_path: Path, change: Any, reason: str) -> None:
    f = tmp_path / "hook.sh"
    f.write_text("export CUDA_HOME=/usr/local/cuda-11.8\n")
    f.chmod(0o644)
    change(f)
    assert differs(f, content="export CUDA_HOME=/usr/local/cuda-11.8\n", mode="0644") == {"it": reason}


def test_a_file_of_another_owner_is_listed(tmp_path: Path) -> None:
    f = tmp_path / "marker"
    f.write_text("x")
    assert "not " + OTHER_UID in differs(f, content="x", owner=OTHER_UID)["it"]


def test_an_owner_not_created_yet_is_listed_not_an_error(tmp_path: Path) -> None:
    f = tmp_path / "marker"
    f.write_text("x")
    assert differs(f, content="x", owner="verl-pascal-no-such-user") == {
        "it": "its owner verl-pascal-no-such-user does not exist yet"}


def test_a_copied_binary_is_compared_by_sha256(tmp_path: Path) -> None:
    f = tmp_path / "tools.whl"
    f.write_bytes(b"\x00wheel")
    assert differs(f, sha256=bs.file_sha256(str(f))) == {}
    f.write_bytes(b"\x00wheeL")
    assert differs(f, sha256="0" * 64) == {"it": "its sha256 differs"}


def test_links_directories_and_absent_paths(tmp_path: Path) -> None:
    (tmp_path / "gcc").symlink_to("/usr/bin/gcc-11")
    (tmp_path / "dir").mkdir()
    (tmp_path / "installer.run").write_text("x")
    why = inspect(files={
        "link_ok": {"path": str(tmp_path / "gcc"), "state": "link", "src": "/usr/bin/gcc-11"},
        "link_elsewhere": {"path": str(tmp_path / "gcc"), "state": "link", "src": "/usr/bin/gcc-12"},
        "not_a_link": {"path": str(tmp_path / "dir"), "state": "link", "src": "/x"},
        "dir_ok": {"path": str(tmp_path / "dir"), "state": "directory"},
        "dir_is_a_link": {"path": str(tmp_path / "gcc"), "state": "directory"},
        "gone": {"path": str(tmp_path / "nothing"), "state": "absent"},
        "still_there": {"path": str(tmp_path / "installer.run"), "state": "absent"},
    })["why"]
    assert why == {"link_elsewhere": "it points at /usr/bin/gcc-11, not /usr/bin/gcc-12",
                   "not_a_link": "it is not a symbolic link",
                   "dir_is_a_link": "it is not a directory",
                   "still_there": "it exists"}


def test_a_dangling_link_is_not_absent(tmp_path: Path) -> None:
    (tmp_path / "stale").symlink_to(tmp_path / "gone")
    assert differs(tmp_path / "stale", state="absent") == {"it": "it exists"}


@pytest.mark.parametrize("spec, message", [
    ({"path": "relative/path", "content": ""}, "absolute path"),
    ({"path": "/x", "state": "present"}, "state must be one of"),
    ({"path": "/x"}, "needs its content or its sha256"),
    ({"path": "/x", "content": "a", "sha256": "b"}, "needs its content or its sha256"),
    ({"path": "/x", "state": "link"}, "a link needs its src"),
    ({"path": "/x", "state": "tree"}, "a tree needs its owner"),
    ({"path": "/x", "content": "", "mode": 644}, "octal string"),
    ({"path": "/x", "content": "", "owenr": "root"}, "unknown key(s) owenr"),
])
def test_a_bad_entry_is_refused_naming_it(spec: Dict[str, Any], message: str) -> None:
    with pytest.raises(bs.BoxStateError, match="files.hook: .*" + message.replace("(", r"\(").replace(")", r"\)")):
        inspect(files={"hook": spec})


# ---- trees: what file with recurse: true sets ---------------------------------------------

def make_env(tmp_path: Path) -> Path:
    """A venv's shape: lib64 -> lib, bin/python3 -> a file outside, a package below lib."""
    env = tmp_path / "env"
    (env / "lib" / "python3.11" / "site-packages" / "torch").mkdir(parents=True)
    (env / "lib" / "python3.11" / "site-packages" / "torch" / "__init__.py").write_text("")
    (env / "lib64").symlink_to("lib")
    (env / "bin").mkdir()
    outside = tmp_path / "usr-bin-python3"
    outside.write_text("")
    (env / "bin" / "python3").symlink_to(outside)
    return env


def test_a_tree_is_walked_as_file_recurse_follows_it(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    paths = [p for p, _, _ in bs.tree_ids(str(env))]
    site = env / "lib" / "python3.11" / "site-packages"
    # Every entry, links themselves, and each link's target one level deep: bin/python3's file
    # outside the tree, lib64's lib (the same directory, by the path file joins: env/lib).
    assert set(paths) == {str(p) for p in [env, env / "lib", env / "lib" / "python3.11", site, site / "torch",
                                           site / "torch" / "__init__.py", env / "lib64", env / "bin",
                                           env / "bin" / "python3", tmp_path / "usr-bin-python3"]}
    # lib64 leads back into the tree: what is below lib is not walked a second time.
    assert paths.count(str(site / "torch" / "__init__.py")) == 1


def test_a_tree_owned_throughout_is_as_wanted(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    assert bs.tree_reason(str(env), ME, None) is None


def test_a_tree_of_another_owner_is_listed(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    assert differs(env, state="tree", owner=OTHER_UID)["it"].startswith(str(env) + " is owned by")


@ROOT_ONLY
def test_one_file_deep_in_the_tree_of_another_owner_is_found(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    deep = env / "lib" / "python3.11" / "site-packages" / "torch" / "__init__.py"
    os.chown(deep, 0, 0)
    for top in (env, tmp_path):  # a file owned by root under a tree the user owns
        os.chown(top, 4242, 4242)
    for p in env.rglob("*"):
        if p != deep:
            os.lchown(p, 4242, 4242)
    os.chown(tmp_path / "usr-bin-python3", 4242, 4242)
    assert differs(env, state="tree", owner="4242", group="4242") == {"it": f"{deep} is owned by 0:0, not 4242:4242"}


@ROOT_ONLY
def test_the_target_of_a_link_in_the_tree_is_checked_too(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    for p in [env, *env.rglob("*")]:
        os.lchown(p, 4242, 4242)
    # bin/python3 -> a file outside the tree, still root's: file (follow: true) would chown it.
    assert differs(env, state="tree", owner="4242") == {
        "it": f"{tmp_path / 'usr-bin-python3'} is owned by 0:0, not 4242"}


def test_a_tree_that_is_missing_or_a_file_is_listed(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    why = inspect(files={"missing": {"path": str(tmp_path / "none"), "state": "tree", "owner": ME},
                         "file": {"path": str(tmp_path / "file"), "state": "tree", "owner": ME}})["why"]
    assert why == {"missing": "it is missing", "file": "it is not a directory"}


# ---- digests of a tree: a stamp's proof that the tree is the one checked ----------------------

def make_tree(tmp_path: Path) -> Path:
    tree = tmp_path / "verl-0.5.0"
    (tree / "verl" / "workers").mkdir(parents=True)
    (tree / "verl" / "workers" / "dp_actor.py").write_text("autocast(dtype=torch.float32, enabled=False)\n")
    (tree / "verl" / "__pycache__").mkdir()
    (tree / "verl" / "__pycache__" / "x.pyc").write_bytes(b"1")
    (tree / ".verl-pascal-checked").write_text("{}")
    return tree


EXCLUDE = ["__pycache__", "*.egg-info", ".verl-pascal-checked"]


@pytest.mark.parametrize("change", [
    lambda t: (t / "verl" / "workers" / "dp_actor.py").write_text("autocast(dtype=torch.bfloat16)\n"),
    lambda t: (t / "verl" / "workers" / "new.py").write_text(""),
    lambda t: (t / "verl" / "workers" / "dp_actor.py").unlink(),
    lambda t: (t / "verl" / "workers" / "dp_actor.py").rename(t / "verl" / "dp_actor.py"),
    lambda t: (t / "verl" / "link").symlink_to("workers"),
])
def test_any_change_to_a_tree_changes_its_digest(tmp_path: Path, change: Any) -> None:
    tree = make_tree(tmp_path)
    before = bs.tree_digest(str(tree), EXCLUDE)
    change(tree)
    assert bs.tree_digest(str(tree), EXCLUDE) != before


def test_excluded_names_leave_the_digest_alone(tmp_path: Path) -> None:
    tree = make_tree(tmp_path)
    before = bs.tree_digest(str(tree), EXCLUDE)
    (tree / "verl" / "__pycache__" / "y.pyc").write_bytes(b"2")
    (tree / ".verl-pascal-checked").write_text('{"tree": "..."}')
    (tree / "verl.egg-info").mkdir()
    assert bs.tree_digest(str(tree), EXCLUDE) == before
    assert bs.tree_digest(str(tmp_path / "none"), EXCLUDE) is None


# ---- the rest of a read ----------------------------------------------------------------------

def test_reads_globs_hashes_users_and_commands(tmp_path: Path) -> None:
    (tmp_path / "marker").write_text("abc\n")
    (tmp_path / "apex-0.1-py3-none-any.whl").write_bytes(b"w")
    got = inspect(read={"marker": str(tmp_path / "marker"), "none": str(tmp_path / "none")},
                  glob={"wheel": str(tmp_path / "apex-*.whl"), "no": str(tmp_path / "x*")},
                  sha256={"wheel": str(tmp_path / "apex-0.1-py3-none-any.whl"), "none": str(tmp_path / "none")},
                  users=[ME, "verl-pascal-no-such-user"],
                  commands={"echo": {"argv": ["sh", "-c", "echo out; echo err >&2; exit 3"]},
                            "none": {"argv": [str(tmp_path / "no-such-command")]}})
    assert got["read"] == {"marker": "abc\n", "none": None}
    assert got["glob"] == {"wheel": [str(tmp_path / "apex-0.1-py3-none-any.whl")], "no": []}
    assert got["sha256"]["none"] is None and len(got["sha256"]["wheel"]) == 64
    assert got["users"]["verl-pascal-no-such-user"] is None
    assert got["users"][ME]["uid"] == os.getuid() and got["users"][ME]["home_exists"] in (True, False)
    assert got["commands"]["echo"] == {"rc": 3, "stdout": "out\n", "stderr": "err\n"}
    assert got["commands"]["none"]["rc"] is None and got["commands"]["none"]["stderr"]


@ROOT_ONLY
def test_a_command_runs_as_the_user_named() -> None:
    got = inspect(commands={"id": {"argv": ["id", "-un"], "user": "nobody"}})
    assert got["commands"]["id"]["stdout"].strip() == "nobody"


def test_the_env_probe_runs_in_the_envs_own_python(tmp_path: Path) -> None:
    got = inspect(python={"env": {"python": sys.executable, "versions": ["pytest", "verl-pascal-no-such-dist"],
                                  "pins": ["pytest==0.0.1"], "intact": ["pytest"]},
                          "gone": {"python": str(tmp_path / "bin" / "python")}})["python"]
    env = got["env"]
    assert env["python"] == "%d.%d.%d" % sys.version_info[:3]
    assert env["versions"]["pytest"] == pytest.__version__ and env["versions"]["verl-pascal-no-such-dist"] is None
    assert env["missing_pins"] == ["pytest==0.0.1"]
    assert env["damaged"] == {} and len(env["files_sha256"]["pytest"]) == 64
    assert got["gone"] == {"error": f"{tmp_path / 'bin' / 'python'} does not exist"}


def test_the_env_probe_of_a_user_not_created_yet_says_so() -> None:
    got = inspect(python={"env": {"python": sys.executable, "user": "verl-pascal-no-such-user"}})["python"]
    assert got["env"] == {"error": "user verl-pascal-no-such-user does not exist"}


def test_links_are_planned_as_link_tree_would(tmp_path: Path) -> None:
    src, dest = tmp_path / "cudnn", tmp_path / "cuda"
    (src / "lib").mkdir(parents=True)
    (src / "include").mkdir()
    (src / "lib" / "libcudnn.so.8.9.7").write_bytes(b"so")
    (src / "lib" / "libcudnn.so.8").symlink_to("libcudnn.so.8.9.7")
    (src / "include" / "cudnn_version.h").write_text("#define CUDNN_MAJOR 8\n")
    (dest / "lib64").mkdir(parents=True)
    (dest / "include").mkdir()
    spec = {"src": str(src), "dest": str(dest), "dirs": {"include": "include", "lib": "lib64"}}
    assert len(inspect(links={"cudnn": spec})["links"]["cudnn"]["actions"]) == 3
    os.link(src / "lib" / "libcudnn.so.8.9.7", dest / "lib64" / "libcudnn.so.8.9.7")
    os.link(src / "include" / "cudnn_version.h", dest / "include" / "cudnn_version.h")
    (dest / "lib64" / "libcudnn.so.8").symlink_to("libcudnn.so.8.9.7")
    assert inspect(links={"cudnn": spec})["links"]["cudnn"] == {"actions": []}
    (dest / "lib64" / "libcudnn.so.8").unlink()  # one link removed: found
    assert inspect(links={"cudnn": spec})["links"]["cudnn"]["actions"] == [f"symlink {dest}/lib64/libcudnn.so.8 -> libcudnn.so.8.9.7"]
    assert "error" in inspect(links={"x": {**spec, "src": str(tmp_path / "none")}})["links"]["x"]


# ---- the same verdict as the module whose task is skipped ------------------------------------

SAME_AS_FILE = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: What file with recurse would change (check mode)
      ansible.builtin.file: {path: "{{ tree }}", state: directory, owner: "4242", group: "4242", recurse: true}
      check_mode: true
      register: by_file
    - name: What box_state reads
      box_state:
        files: {env: {path: "{{ tree }}", state: tree, owner: "4242", group: "4242"}}
      register: by_box_state
    - name: Print both
      ansible.builtin.debug:
        msg: "VERDICT {{ by_file is changed }} {{ 'env' in by_box_state.differs }}"
"""


@ROOT_ONLY
@needs_ansible
@pytest.mark.parametrize("left_to_root", ["", "lib/python3.11/site-packages/torch/__init__.py", "lib64", "outside"])
def test_a_tree_differs_exactly_when_file_recurse_would_change_it(tmp_path: Path, left_to_root: str) -> None:
    top = tmp_path / "box"
    top.mkdir()
    env = make_env(top)
    for p in [env, *env.rglob("*"), top / "usr-bin-python3"]:
        os.lchown(p, 4242, 4242)
    if left_to_root:
        os.lchown(top / "usr-bin-python3" if left_to_root == "outside" else env / left_to_root, 0, 0)
    proc = run_playbook(tmp_path, SAME_AS_FILE, "-e", f"tree={env}", timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    verdict = re.search(r"VERDICT (\w+) (\w+)", proc.stdout)
    assert verdict is not None, proc.stdout
    assert [verdict.group(1), verdict.group(2)] == [str(bool(left_to_root))] * 2
