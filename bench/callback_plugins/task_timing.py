# A callback for bench/rerun.py: one JSON line per task and host (its role,
# name, status and seconds) into the file VERL_PASCAL_TASK_TIMING names.
# The bench enables it with ANSIBLE_CALLBACK_PLUGINS and ANSIBLE_CALLBACKS_ENABLED;
# nothing else loads it.
from __future__ import annotations

DOCUMENTATION = """
name: task_timing
type: aggregate
short_description: one JSON line per task and host, with its role and seconds (bench/rerun.py)
description:
  - Writes each task's role, name, file, status (ok, changed, skipped, failed, unreachable) and the
    seconds from the task's start to the host's result, one JSON line each, into the file that the
    VERL_PASCAL_TASK_TIMING environment variable names; a last line holds the play recap.
requirements:
  - VERL_PASCAL_TASK_TIMING set to a writable path
"""

import json
import os
import time
from typing import Any, Dict, Optional

from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "task_timing"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        path = os.environ.get("VERL_PASCAL_TASK_TIMING", "")
        self._out = open(path, "a", encoding="utf-8") if path else None
        self._task: Any = None
        self._started = 0.0
        self._play_start = time.monotonic()

    def _write(self, record: Dict[str, Any]) -> None:
        if self._out is not None:
            self._out.write(json.dumps(record) + "\n")
            self._out.flush()

    def _start(self, task: Any) -> None:
        self._task = task
        self._started = time.monotonic()

    def v2_playbook_on_task_start(self, task: Any, is_conditional: bool) -> None:
        self._start(task)

    def v2_playbook_on_handler_task_start(self, task: Any) -> None:
        self._start(task)

    def _result(self, result: Any, status: str) -> None:
        task = result._task
        role: Optional[Any] = getattr(task, "_role", None)
        if status == "ok" and result._result.get("changed", False):
            status = "changed"
        self._write({
            "host": result._host.get_name(),
            "role": role.get_name() if role is not None else "",
            "task": task.name or task.action,
            "path": task.get_path() or "",
            "action": task.action,
            "status": status,
            "seconds": round(time.monotonic() - self._started, 3),
        })

    def v2_runner_on_ok(self, result: Any) -> None:
        self._result(result, "ok")

    def v2_runner_on_failed(self, result: Any, ignore_errors: bool = False) -> None:
        self._result(result, "ignored" if ignore_errors else "failed")

    def v2_runner_on_skipped(self, result: Any) -> None:
        self._result(result, "skipped")

    def v2_runner_on_unreachable(self, result: Any) -> None:
        self._result(result, "unreachable")

    def v2_playbook_on_stats(self, stats: Any) -> None:
        self._write({"recap": {host: stats.summarize(host) for host in sorted(stats.processed)},
                     "seconds": round(time.monotonic() - self._play_start, 3)})
        if self._out is not None:
            self._out.close()
            self._out = None
