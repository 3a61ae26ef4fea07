"""module_utils/pip_index.py: pip's index, simple API pages, and the exact file's URL (nothing is built)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Dict

import pytest

from verl_pascal.module_utils import pip_index as pi


from conftest import ANSIBLE, run_ansible_module  # noqa: E402
from prefetch_server import Upstream, simple_page  # noqa: E402

A, B = "a" * 64, "b" * 64


@pytest.fixture
def no_pip_config(monkeypatch: pytest.MonkeyPatch) -> None:
    """pip sees no configuration file and no PIP_* variable of this machine."""
    for name in list(os.environ):
        if name.startswith("PIP_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)


# --- what pip is configured with ------------------------------------------------

def test_index_url_comes_from_pip_and_its_environment(no_pip_config, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple/")
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "http://127.0.0.1:9/more/ http://127.0.0.1:9/simple/")
    config = pi.pip_index_config(sys.executable)
    assert config.index_url == "http://127.0.0.1:9/simple/"
    assert config.urls == ["http://127.0.0.1:9/simple/", "http://127.0.0.1:9/more/"]  # each index once, pip's first
    assert pi.pip_index_url(sys.executable) == "http://127.0.0.1:9/simple/"


def test_index_url_comes_from_pips_config_file(no_pip_config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nindex-url = http://127.0.0.1:9/from-global/\n"
                    "[download]\nindex-url = http://127.0.0.1:9/from-download/\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    assert pi.pip_index_url(sys.executable) == "http://127.0.0.1:9/from-download/"  # pip download's own section wins


def test_pip_without_an_index_is_an_error(no_pip_config, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    with pytest.raises(pi.PipIndexError, match="configured with no index"):
        pi.pip_index_config(sys.executable)


def test_interpreter_without_pip_or_missing(tmp_path: Path) -> None:
    def no_pip(cmd, **kwargs):
        return subprocess.CompletedProcess(cmd, 1, "", "Traceback ...\nModuleNotFoundError: No module named 'pip'\n")

    with pytest.raises(pi.PipIndexError, match="is pip installed for it.*No module named 'pip'"):
        pi.pip_index_config("/opt/py/bin/python3", run=no_pip)
    with pytest.raises(pi.PipIndexError, match="cannot run .*no-python-here"):
        pi.pip_index_config(str(tmp_path / "no-python-here"))


# --- names and pages ----------------------------------------------------------

def test_pep503_names_and_versions() -> None:
    assert pi.normalize("Foo.Bar__baz-Qux") == "foo-bar-baz-qux"
    assert pi.project_url("http://h/simple", "Verl") == "http://h/simple/verl/"
    assert pi.project_url("http://h/simple/", "antlr4_python3.runtime") == "http://h/simple/antlr4-python3-runtime/"
    assert pi.version_of("verl-0.5.0.tar.gz", "verl") == "0.5.0"
    assert pi.version_of("antlr4-python3-runtime-4.9.3.tar.gz", "antlr4_python3_runtime") == "4.9.3"
    assert pi.version_of("verl-0.5.0-py2.py3-none-any.whl", "verl") == "0.5.0"
    assert pi.version_of("verlx-0.5.0.tar.gz", "verl") is None


def test_html_page_links_are_absolute_with_their_hashes() -> None:
    page = (f'<html><body><a href="../../files/verl-0.5.0.tar.gz#sha256={A}">verl-0.5.0.tar.gz</a>\n'
            '<a href="https://files.example.org/p/verl-0.4.1.tar.gz" data-requires-python="&gt;=3.8">x</a>\n'
            '<a href="/packages/torch-2.6.0%2Bcu118-cp310-cp310-linux_x86_64.whl#sha256=' + B.upper() + '">t</a>\n'
            '<a name="no-href">nothing</a></body></html>')
    links = pi.parse_project_page(page, "text/html; charset=utf-8", "http://127.0.0.1:8/simple/verl/")
    assert [(link.filename, link.url, link.hashes) for link in links] == [
        ("verl-0.5.0.tar.gz", "http://127.0.0.1:8/files/verl-0.5.0.tar.gz", {"sha256": A}),
        ("verl-0.4.1.tar.gz", "https://files.example.org/p/verl-0.4.1.tar.gz", {}),
        ("torch-2.6.0+cu118-cp310-cp310-linux_x86_64.whl",
         "http://127.0.0.1:8/packages/torch-2.6.0%2Bcu118-cp310-cp310-linux_x86_64.whl", {"sha256": B}),
    ]
    based = pi.parse_html_page('<base href="http://mirror:1/dl/"><a href="verl-0.5.0.tar.gz">v</a>', "http://h/simple/verl/")
    assert based[0].url == "http://mirror:1/dl/verl-0.5.0.tar.gz"


def test_json_page_pep691() -> None:
    body = json.dumps({"meta": {"api-version": "1.1"}, "name": "verl", "files": [
        {"filename": "verl-0.5.0.tar.gz", "url": "../../files/verl-0.5.0.tar.gz", "hashes": {"sha256": A}},
        {"filename": "verl-0.5.0-py3-none-any.whl", "url": "http://elsewhere/w.whl", "hashes": {}},
    ]})
    links = pi.parse_project_page(body, "application/vnd.pypi.simple.v1+json", "http://127.0.0.1:8/simple/verl/")
    assert [(link.filename, link.url, link.hashes) for link in links] == [
        ("verl-0.5.0.tar.gz", "http://127.0.0.1:8/files/verl-0.5.0.tar.gz", {"sha256": A}),
        ("verl-0.5.0-py3-none-any.whl", "http://elsewhere/w.whl", {}),
    ]
    with pytest.raises(pi.PipIndexError, match="not a PEP 691 project page"):
        pi.parse_project_page('{"files": [{"url": "x"}]}', "application/vnd.pypi.simple.v1+json", "http://h/")


def test_credentials_are_sent_but_never_shown() -> None:
    url, auth = pi._without_credentials("https://me:s%40cret@127.0.0.1:8443/simple/verl/")
    assert url == "https://127.0.0.1:8443/simple/verl/" and auth == "Basic bWU6c0BjcmV0"  # me:s@cret
    assert pi.redact("https://me:s%40cret@127.0.0.1:8443/simple/") == "https://me:***@127.0.0.1:8443/simple/"
    assert pi.redact("http://127.0.0.1/simple/") == "http://127.0.0.1/simple/"
    assert pi._keep_credentials("http://me:pw@h/simple/verl/", "http://h/simple/verl/") == "http://me:pw@h/simple/verl/"
    assert pi._keep_credentials("http://me:pw@h/simple/verl/", "http://other/verl/") == "http://other/verl/"


# --- finding the file on a served index ----------------------------------------

def index_files() -> Dict[str, bytes]:
    return {
        "simple/verl/": simple_page({"verl-0.4.1.tar.gz": B, "verl-0.5.0-py3-none-any.whl": None,
                                     "verl-0.5.0.tar.gz": A}),
        "json/verl/": json.dumps({"files": [{"filename": "verl-0.5.0.tar.gz", "url": "/dl/verl-0.5.0.tar.gz",
                                             "hashes": {"sha256": A}}]}).encode(),
        "other/verl/": simple_page({"verl-0.3.0.tar.gz": None}),
    }


def test_finds_the_exact_file_on_a_pep503_index() -> None:
    with Upstream(index_files()) as server:
        found = pi.find_file([f"{server.url}/simple"], "verl", "verl-0.5.0.tar.gz", A)
        assert found == pi.Found(f"{server.url}/files/verl-0.5.0.tar.gz", f"{server.url}/simple",
                                 f"{server.url}/simple/verl/", A)
        assert [name for name, _, _ in server.log] == ["simple/verl/"]  # one page read, no file opened


def test_finds_the_file_on_a_pep691_json_index() -> None:
    with Upstream(index_files(), {"json/verl/": {"type": "application/vnd.pypi.simple.v1+json"}}) as server:
        found = pi.find_file([f"{server.url}/json/"], "VERL", "verl-0.5.0.tar.gz")
        assert found.url == f"{server.url}/dl/verl-0.5.0.tar.gz" and found.sha256 == A


def test_a_later_index_is_tried_when_the_first_lacks_the_file() -> None:
    with Upstream(index_files()) as server:
        found = pi.find_file([f"{server.url}/nothing/", f"{server.url}/other/", f"{server.url}/simple/"],
                             "verl", "verl-0.5.0.tar.gz")
        assert found.index_url == f"{server.url}/simple/"


def test_page_hash_that_contradicts_the_lock_stops_before_the_download() -> None:
    with Upstream(index_files()) as server:
        with pytest.raises(pi.HashMismatch) as caught:
            pi.find_file([f"{server.url}/simple/", f"{server.url}/other/"], "verl", "verl-0.5.0.tar.gz", B)
    message = str(caught.value)
    assert "verl-0.5.0.tar.gz" in message and f"the lock expects {B}, the index lists {A}" in message


def test_file_not_listed_names_the_files_of_that_version() -> None:
    with Upstream(index_files()) as server:
        with pytest.raises(pi.FileNotListed) as caught:
            pi.find_file([f"{server.url}/simple/"], "verl", "verl-0.5.0.zip")
        assert str(caught.value) == (f"verl-0.5.0.zip is not listed on {server.url}/simple/verl/; for version 0.5.0 "
                                     "it lists: verl-0.5.0-py3-none-any.whl, verl-0.5.0.tar.gz")
        with pytest.raises(pi.FileNotListed, match=r"it lists no file of version 9\.9; versions listed: 0\.4\.1, 0\.5\.0$"):
            pi.find_file([f"{server.url}/simple/"], "verl", "verl-9.9.tar.gz")


def test_missing_project_and_unreachable_index() -> None:
    with Upstream(index_files()) as server:
        with pytest.raises(pi.ProjectNotFound, match=r"project page not found: .*/simple/no-such/ \(HTTP 404\); "
                                                     r"the index .* has no project 'no-such'"):
            pi.find_file([f"{server.url}/simple/"], "No_Such", "no_such-1.0.tar.gz")
    with Upstream({}, {"simple/verl/": {"status": 503}}) as failing:
        with pytest.raises(pi.PipIndexError, match="HTTP 503 .* from http://127.0.0.1:.*/simple/verl/"):
            pi.find_file([f"{failing.url}/simple/"], "verl", "verl-0.5.0.tar.gz")
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(pi.IndexUnreachable, match=f"cannot reach the package index at http://127.0.0.1:{port}/simple/verl/"):
        pi.find_file([f"http://127.0.0.1:{port}/simple/"], "verl", "verl-0.5.0.tar.gz")


def test_file_index(tmp_path: Path) -> None:
    """A file: index of pip's configuration (a directory tree of index.html pages)."""
    (tmp_path / "simple" / "verl").mkdir(parents=True)
    (tmp_path / "simple" / "verl" / "index.html").write_bytes(simple_page({"verl-0.5.0.tar.gz": None}, prefix=""))
    found = pi.find_file([(tmp_path / "simple").as_uri()], "verl", "verl-0.5.0.tar.gz")
    assert found.url == (tmp_path / "simple" / "verl" / "verl-0.5.0.tar.gz").as_uri()
    with pytest.raises(pi.ProjectNotFound):
        pi.find_file([(tmp_path / "simple").as_uri()], "other", "other-1.tar.gz")


# --- the Ansible module ---------------------------------------------------------

@pytest.mark.skipif(ANSIBLE is None, reason="ansible is not installed")
def test_ansible_module_returns_the_url_and_fails_with_the_reason(tmp_path: Path, no_pip_config,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    with Upstream(index_files()) as server:
        monkeypatch.setenv("PIP_INDEX_URL", f"{server.url}/simple/")  # the module asks pip (this Python's)
        result = run_ansible_module(tmp_path, "pip_index_file",
                                    f"python={sys.executable} name=verl filename=verl-0.5.0.tar.gz sha256={A}", "--check")
        assert result.get("failed") is not True, result
        assert result["changed"] is False and result["url"] == f"{server.url}/files/verl-0.5.0.tar.gz"
        assert result["index_url"] == f"{server.url}/simple/" and result["index_sha256"] == A
        result = run_ansible_module(tmp_path, "pip_index_file",
                                    f"index_url={server.url}/other/ name=verl filename=verl-0.5.0.tar.gz")
        assert result["failed"] is True
        assert result["msg"] == (f"verl-0.5.0.tar.gz is not listed on {server.url}/other/verl/; it lists no file of "
                                 "version 0.5.0; versions listed: 0.3.0")
