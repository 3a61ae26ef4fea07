"""Print, as JSON, what the verl role needs to know about a Python env.

Run with the env's python (standard library only, Python 3.8+):
python: "X.Y"; torch: its version or null; verl: its version or null;
verl_dir: the source tree of an editable (pip install -e) verl, or null.
"""

import json
import sys
from urllib.parse import unquote

try:
    import importlib.metadata as metadata
except ImportError:  # Python < 3.8 has no importlib.metadata
    metadata = None


def probe():
    out = {"python": "%d.%d" % sys.version_info[:2], "torch": None, "verl": None, "verl_dir": None}
    if metadata is None:
        return out
    try:
        out["torch"] = metadata.version("torch")
    except metadata.PackageNotFoundError:
        pass
    try:
        dist = metadata.distribution("verl")
    except metadata.PackageNotFoundError:
        return out
    out["verl"] = dist.version
    direct = json.loads(dist.read_text("direct_url.json") or "{}")
    url = direct.get("url", "")
    if direct.get("dir_info", {}).get("editable") and url.startswith("file://"):
        out["verl_dir"] = unquote(url[len("file://"):]).rstrip("/")
    return out


if __name__ == "__main__":
    print(json.dumps(probe()))
