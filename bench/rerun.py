"""Re-runs of a provisioned box: the second converge of site.yml, and the switch between two verl releases.

What a user pays for `ansible-playbook site.yml` on a box it already
provisioned (after a reboot, from cron to prove nothing drifted), and for
`playbooks/upgrade-verl.yml` between two releases the box already holds.
The box is the default scenario's: a container started from the image its
verify keeps (`localhost/verl-pascal-converged:<hash>`, scripts/lib.sh), or,
when there is none, from the base image, prepared and converged here first
(about 10 minutes on 2 cores). Around it, what the scenario has
(bench/rerun_env.sh: the stand-ins on a local mirror, SSH through `podman
exec`), and the repository's ansible.cfg, as a user runs it.

1. One converge (brings the box to this checkout; not timed as the result).
2. The second converge, timed: seconds, tasks, changed, per role and the
   slowest tasks (a callback, bench/callback_plugins/task_timing.py).
3. With --switch A B: upgrade-verl.yml to B (installs it beside A), then the
   switches back to A and again to B, both releases installed, timed.

Prints a table, then one JSON line. Asserts nothing (a changed count other than
0 is printed as it is).

    .venv/bin/python -m bench.rerun                       # the second converge
    .venv/bin/python -m bench.rerun --switch 0.5.0 0.6.1  # and the switch
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import string
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any, Dict, List, Optional, Sequence

import yaml

REPO = Path(__file__).resolve().parent.parent
TOP = 15


@dataclass
class RoleTime:
    role: str
    tasks: int = 0
    skipped: int = 0
    seconds: float = 0.0


@dataclass
class Run:
    """One ansible-playbook run, as the timing callback saw it."""
    label: str
    seconds: float
    rc: int
    #: The machine's 1-minute load average as the run started (other work on it slows the run).
    load: float = 0.0
    tasks: int = 0
    changed: int = 0
    skipped: int = 0
    failed: int = 0
    roles: List[RoleTime] = field(default_factory=list)
    top: List[Dict[str, Any]] = field(default_factory=list)


def read_records(path: Path) -> List[Dict[str, Any]]:
    """The callback's task records (the recap line left out)."""
    if not path.exists():
        return []
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in records if "task" in r]


def summarize(label: str, seconds: float, rc: int, records: Sequence[Dict[str, Any]], load: float = 0.0) -> Run:
    """Tasks run (ok or changed, as the play recap counts them), changed, skipped; per role and the slowest."""
    run = Run(label=label, seconds=round(seconds, 1), rc=rc, load=round(load, 2))
    roles: Dict[str, RoleTime] = {}
    for r in records:
        role = roles.setdefault(r["role"] or "(play)", RoleTime(r["role"] or "(play)"))
        role.seconds += r["seconds"]
        if r["status"] == "skipped":
            run.skipped += 1
            role.skipped += 1
            continue
        run.tasks += 1
        role.tasks += 1
        run.changed += r["status"] == "changed"
        run.failed += r["status"] in ("failed", "unreachable")
    run.roles = sorted(roles.values(), key=lambda t: -t.seconds)
    for role in run.roles:
        role.seconds = round(role.seconds, 2)
    slowest = sorted(records, key=lambda r: -r["seconds"])[:TOP]
    run.top = [{k: r[k] for k in ("role", "task", "status", "seconds")} for r in slowest]
    return run


def print_run(run: Run, out: IO[str] = sys.stdout) -> None:
    print(f"\n## {run.label}: {run.seconds} s, {run.tasks} tasks run ({run.changed} changed), "
          f"{run.skipped} skipped, {run.failed} failed, exit {run.rc}; load {run.load} at the start", file=out)
    print(f"{'role':<14} {'tasks':>5} {'skipped':>7} {'seconds':>8} {'s/task':>7}", file=out)
    for role in run.roles:
        per = role.seconds / role.tasks if role.tasks else 0.0
        print(f"{role.role:<14} {role.tasks:>5} {role.skipped:>7} {role.seconds:>8.2f} {per:>7.2f}", file=out)
    print(f"slowest {len(run.top)} tasks:", file=out)
    for t in run.top:
        print(f"  {t['seconds']:>6.2f}  {t['status']:<8} {t['role'] or '(play)'}: {t['task']}", file=out)


class Box:
    """The container, its inventory, and the ansible-playbook runs against it."""

    def __init__(self, instance: str, work: Path, env: Dict[str, str]) -> None:
        self.instance = instance
        self.work = work
        self.env = env
        self.inventory = work / "inventory"
        self.runs = 0

    def start(self, image: str) -> None:
        """Start the container as Molecule's podman driver does, with the default scenario's platform."""
        platform = yaml.safe_load((REPO / ".config/molecule/config.yml").read_text())["platforms"][0]
        volumes = [_expand(v, {**os.environ, **self.env}) for v in platform["volumes"]]
        subprocess.run(["podman", "rm", "-f", self.instance], check=True, capture_output=True)
        subprocess.run(["podman", "run", "-d", "--name", self.instance, "--hostname", self.instance,
                        "--network", platform["network"], *[a for v in volumes for a in ("-v", v)],
                        image, *platform["command"].split()], check=True, capture_output=True)

    def remove(self) -> None:
        subprocess.run(["podman", "rm", "-f", self.instance], check=False, capture_output=True)

    def write_inventory(self) -> None:
        """The scenario's inventory: the real group_vars, the generated host_vars."""
        (self.inventory / "host_vars").mkdir(parents=True, exist_ok=True)
        (self.inventory / "hosts.yml").write_text(yaml.safe_dump({"all": {"hosts": {self.instance: None}}}))
        link = self.inventory / "group_vars"
        if not link.is_symlink():
            link.symlink_to(REPO / "inventory" / "group_vars")

    @property
    def host_vars(self) -> Path:
        return self.inventory / "host_vars" / f"{self.instance}.yml"

    def play(self, label: str, playbook: str, *extra: str) -> Run:
        """Run a playbook against the box, from the repository root with its ansible.cfg; time it."""
        self.runs += 1
        timing = self.work / f"run{self.runs}.jsonl"
        log = self.work / f"run{self.runs}.log"
        timing.unlink(missing_ok=True)
        with tempfile.TemporaryDirectory(prefix="vp-cp-") as control, log.open("w") as out:
            env = {**os.environ, **self.env,
                   "ANSIBLE_CALLBACK_PLUGINS": str(REPO / "bench" / "callback_plugins"),
                   "ANSIBLE_CALLBACKS_ENABLED": "task_timing",
                   "VERL_PASCAL_TASK_TIMING": str(timing),
                   # A connection of its own, as a run from cron has: none left open by the run before.
                   "ANSIBLE_SSH_CONTROL_PATH_DIR": control,
                   "PATH": f"{REPO / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
            load = os.getloadavg()[0]
            start = time.monotonic()
            rc = subprocess.run([str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", str(self.inventory),
                                 *extra, playbook], cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT).returncode
            seconds = time.monotonic() - start
        run = summarize(label, seconds, rc, read_records(timing), load)
        if rc != 0:
            print(f"{label}: ansible-playbook exited {rc}; see {log}", file=sys.stderr)
        return run


def _expand(value: str, env: Dict[str, str]) -> str:
    """${VAR} in the scenario's platform, from the environment rerun_env.sh printed."""
    try:
        return string.Template(value).substitute(env)
    except (KeyError, ValueError) as err:
        raise SystemExit(f"bench/rerun.py: cannot expand {value!r} of .config/molecule/config.yml: {err}") from err


def image_exists(image: str) -> bool:
    return subprocess.run(["podman", "image", "exists", image], check=False).returncode == 0


def newest_converged_image() -> Optional[str]:
    """The newest image the default scenario's verify kept, whatever checkout it came from."""
    out = subprocess.run(["podman", "images", "--sort", "created", "--format", "{{.Repository}}:{{.Tag}}",
                          "localhost/verl-pascal-converged"], check=True, capture_output=True, text=True).stdout
    images = [line for line in out.splitlines() if line.strip()]
    return images[0] if images else None


def choose_image(wanted: str, env: Dict[str, str]) -> Optional[str]:
    """--image, else this checkout's converged image, else the newest one; None: converge from the base image."""
    if wanted:
        if not image_exists(wanted):
            raise SystemExit(f"bench/rerun.py: no image {wanted} (podman images lists the converged ones)")
        return wanted
    if image_exists(env["VERL_PASCAL_CONVERGED_IMAGE"]):
        return env["VERL_PASCAL_CONVERGED_IMAGE"]
    return newest_converged_image()


def start_env(instance: str, host_vars: Path, log: Path) -> "subprocess.Popen[str]":
    """bench/rerun_env.sh, up until its stdin closes; its first stdout line is the environment."""
    host_vars.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as err:
        return subprocess.Popen([str(REPO / "bench" / "rerun_env.sh"), instance, str(host_vars)], cwd=REPO,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True)


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--instance", default="rerun-bench",
                        help="the container's name (default: rerun-bench; removed first, and at the end)")
    parser.add_argument("--image", default="",
                        help="the converged image to start from (default: this checkout's, else the newest)")
    parser.add_argument("--runs", type=int, default=1, help="timed second converges, one after the other (default 1)")
    parser.add_argument("--switch", nargs=2, metavar=("A", "B"), default=None,
                        help="also time upgrade-verl.yml from A to B and back, both installed (A: the box's verl)")
    parser.add_argument("--work", type=Path, default=REPO / ".cache" / "bench-rerun",
                        help="logs and the inventory (default: .cache/bench-rerun)")
    parser.add_argument("--keep", action="store_true", help="leave the container running")
    parser.add_argument("--reuse", action="store_true",
                        help="time the box a --keep run left, as it is: no new container, no first converge")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be 1 or more")
    if args.switch and args.switch[0] == args.switch[1]:
        parser.error("--switch needs two different releases")
    return args


def measure(box: Box, image: Optional[str], args: argparse.Namespace) -> Dict[str, Any]:
    """The runs, in order; what the JSON line holds."""
    result: Dict[str, Any] = {"bench": "rerun", "date": datetime.date.today().isoformat(),
                              "image": image or "(converged here)", "cores": os.cpu_count()}
    if not args.reuse:
        if image is None:
            box.start(box.env["VERL_PASCAL_IMAGE"])
            print_run(box.play("prepare", "molecule/shared/prepare.yml"))
        else:
            box.start(image)
        first = box.play("first converge", "site.yml")
        print_run(first)
        result["first_converge"] = asdict(first)
    result["second_converge"] = []
    for n in range(args.runs):
        run = box.play(f"second converge {n + 1}", "site.yml")
        print_run(run)
        result["second_converge"].append(asdict(run))
    if args.switch:
        a, b = args.switch
        steps = [(f"install verl {b}", b), (f"switch to verl {a}", a), (f"switch to verl {b}", b)]
        result["switch"] = []
        for label, version in steps:
            run = box.play(label, "playbooks/upgrade-verl.yml", "-e", json.dumps({"verl_version": version}))
            print_run(run)
            result["switch"].append(asdict(run))
    return result


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    box = Box(args.instance, args.work.resolve(), {})
    box.write_inventory()
    env_proc = start_env(args.instance, box.host_vars, args.work / "rerun_env.log")
    try:
        assert env_proc.stdout is not None
        line = env_proc.stdout.readline()
        if not line:
            raise SystemExit(f"bench/rerun_env.sh stopped; see {args.work / 'rerun_env.log'}")
        box.env = json.loads(line)
        image = "(reused)" if args.reuse else choose_image(args.image, box.env)
        result = measure(box, image, args)
    finally:
        if not (args.keep or args.reuse):
            box.remove()
        if env_proc.stdin is not None:
            env_proc.stdin.close()
        env_proc.wait()
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
