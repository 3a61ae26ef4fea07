#!/usr/bin/python
"""Ansible module: patch a verl source tree so that it runs without bf16 and FlashAttention-2."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: verl_patch
short_description: Patch verl's hard-coded bf16 autocasts, FlashAttention-2 and flash-attn imports
description:
  - Finds, by syntax (the C(ast) module), the sites where verl hard-codes what a
    GPU older than Ampere cannot do, and rewrites them in place by node position.
    C(torch.autocast(..., dtype=torch.bfloat16)) becomes
    C(torch.autocast(..., dtype=torch.float32, enabled=False)) (a no-op context);
    C(attn_implementation="flash_attention_2") becomes I(attn);
    C(from flash_attn.bert_padding import ...) falls back to pure-torch copies
    shipped as C(verl/_pascal_compat/bert_padding.py); an FSDP mixed-precision
    policy given C(torch.bfloat16) in the code (the SFT trainer) gets C(torch.float32).
  - Never touches C(verl/utils/torch_dtypes.py) or anything outside the C(verl) package.
  - Knows, per supported verl release, which sites must be found; fails if one
    is missing (upstream moved something) or if the release is not supported.
  - Idempotent (a patched tree is left byte-identical); supports check mode and
    diff mode. Writes a manifest of every changed site into the tree.
  - Writing is a transaction that survives the process being killed at any point
    (a journal in the tree, rolled forward by the next run, which also removes
    stray temporary files). In check mode an interrupted patch is reported
    (changed, with a warning), not scanned.
  - The logic lives in C(module_utils/verl_patch/), shared with C(verl-patch).
  - C(torch.compile) of the entropy is not patched; set
    C(actor_rollout_ref.actor.use_torch_compile=False) instead.
options:
  source:
    description:
      - The verl source tree (an unpacked sdist), a site-packages directory, or the C(verl) package directory.
    type: path
    required: true
  profile:
    description:
      - The GPU profile's name (a row of verl_pascal/gpu_profiles.yml), recorded in the tree.
    type: str
    default: pascal
  patch:
    description:
      - What the profile's row asks for. C(fp32) patches every site (fp32, no FlashAttention-2).
      - C(none) changes nothing and fails on a tree that was patched.
    type: str
    choices: [fp32, none]
    required: true
  attn:
    description: Attention implementation written where verl hard-codes FlashAttention-2.
    type: str
    choices: [sdpa, eager]
    default: sdpa
  version:
    description:
      - The verl release the tree holds, whose patch-site table O(sites) is.
    type: str
    default: ""
  sites:
    description:
      - "The sites the patcher must find in O(version), C({file: {kind: minimum count}}): the
        C(patch_sites) of the release's folder, verl_pascal/releases/verl-X/release.yml."
      - Without it (or when the tree holds another version) the release counts as unsupported.
    type: dict
  allow_unsupported:
    description:
      - Patch a verl release without a patch-site table (no release folder).
        Meant for adding a release to the table, not for production.
    type: bool
    default: false
author: verl-pascal
"""

EXAMPLES = r"""
- name: Patch the unpacked verl sdist for a Tesla P40
  verl_patch:
    source: /opt/verl-pascal/src/verl-0.5.0
    profile: pascal
    patch: fp32
    attn: sdpa
  register: verl_patched

- name: Show what a change of attention would do, without doing it
  verl_patch:
    source: /opt/verl-pascal/src/verl-0.5.0
    patch: fp32
    attn: eager
  check_mode: true
  diff: true
"""

RETURN = r"""
verl_version:
  description: The verl release found in the tree.
  returned: always
  type: str
  sample: "0.5.0"
manifest:
  description: Path of the manifest the engine writes into the tree when it changes something.
  returned: always
  type: str
  sample: /opt/verl-pascal/src/verl-0.5.0/verl/.verl_pascal_patch.json
sites:
  description: Every site found; state is pending (changed by this run, or would be in check mode), patched or kept.
  returned: always
  type: list
  elements: dict
  sample:
    - file: verl/workers/actor/dp_actor.py
      line: 100
      col: 13
      end_line: 100
      end_col: 79
      kind: autocast_bf16
      state: pending
      before: torch.autocast(device_type=self.device_name, dtype=torch.bfloat16)
      after: torch.autocast(device_type=self.device_name, dtype=torch.float32, enabled=False)
counts:
  description: Number of sites found per kind.
  returned: always
  type: dict
  sample: {autocast_bf16: 6, attn_implementation: 7, bert_padding_import: 13}
files_changed:
  description: Files (relative to the source) changed, or that would be in check mode.
  returned: always
  type: list
  elements: str
recovered:
  description: Files (relative to the source) this run wrote to complete a patch an earlier run left interrupted.
  returned: always
  type: list
  elements: str
interrupted:
  description: In check mode, the journal of an interrupted patch that a run without check mode completes; else null.
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.verl_patch import ATTN_CHOICES, PATCH_KINDS, VerlPatchError, patch_tree


def _ship_compat_module() -> None:  # pragma: no cover - never called
    """Never called: naming the compat module makes AnsiballZ ship it (importing it needs torch).

    The engine reads ``verl_pascal_compat/bert_padding.py`` as data and copies it
    into the verl tree.
    """
    from ansible.module_utils.verl_pascal_compat import bert_padding  # noqa: F401


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "source": {"type": "path", "required": True},
            "profile": {"type": "str", "default": "pascal"},
            "patch": {"type": "str", "choices": list(PATCH_KINDS), "required": True},
            "sites": {"type": "dict", "default": None},
            "version": {"type": "str", "default": ""},
            "attn": {"type": "str", "choices": list(ATTN_CHOICES), "default": "sdpa"},
            "allow_unsupported": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        releases = {p["version"]: p["sites"]} if p["sites"] is not None else {}
        plan = patch_tree(
            p["source"], p["profile"], p["attn"], module.check_mode, p["allow_unsupported"], p["patch"], releases
        )
    except (VerlPatchError, OSError) as exc:
        module.fail_json(msg=str(exc))
    data = plan.to_dict()
    result = {
        "changed": plan.changed,
        "verl_version": plan.verl_version,
        "manifest": plan.manifest_path,
        "sites": data["sites"],
        "counts": data["counts"],
        "files_changed": data["files_changed"],
        "recovered": data["recovered"],
        "interrupted": data["interrupted"],
    }
    if module._diff and plan.changes:
        result["diff"] = plan.diffs()
    for warning in plan.warnings:
        module.warn(warning)
    if plan.interrupted:
        module.warn(
            "an interrupted patch is pending (journal %s); a run without check mode completes it" % plan.interrupted
        )
    if plan.recovered:
        module.warn("completed a patch an earlier run left interrupted (%d file(s))" % len(plan.recovered))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
