#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module: NVIDIA GPU and driver facts from nvidia-smi.

Thin wrapper: the logic lives in module_utils/nvidia_gpu.py (unit-tested).
"""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: nvidia_gpu_facts
short_description: Gather NVIDIA GPU, compute capability and driver facts
description:
  - Runs C(nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total,memory.free
    --format=csv,noheader,nounits) and returns one entry per GPU.
  - Older drivers (R470 and before) reject the C(compute_cap) field; the query is then re-run
    without it and the compute capability comes from a table of product names
    (RV(ansible_facts.nvidia_compute_cap_source) is then V(name_table)).
  - With two GPUs or more, runs C(nvidia-smi topo -p2p r) to tell whether every pair reaches
    the other peer to peer (RV(ansible_facts.nvidia_p2p_ok)).
  - Derives the build profile of the host from the lowest compute capability and
    O(profiles) (a profile's name, or C(unsupported), C(none), C(unknown)),
    whether bf16 is native, and whether the driver runs the requested CUDA toolkit.
  - Does not fail when there is no GPU, no driver or no nvidia-smi, or when the driver
    is too old; it reports that in the facts, for a later assert to word. It fails only
    when nvidia-smi prints output it cannot parse, when it does not answer within
    O(timeout) (a hung driver or GPU; the message says what to check), or when
    O(cuda_version) is unknown.
version_added: "0.1.0"
author:
  - verl-pascal contributors
options:
  nvidia_smi:
    description:
      - Path or name of the nvidia-smi binary. A bare name is looked up in E(PATH)
        and the usual system directories.
    type: str
    default: nvidia-smi
  cuda_version:
    description:
      - CUDA toolkit version (V(11.8) or V(11.8.0)) to check the driver against; the
        verdict is in RV(ansible_facts.nvidia_driver_cuda_check).
      - Set to an empty string to skip the check (the fact is then V(null)).
    type: str
    default: "11.8"
  profiles:
    description:
      - The rows of the GPU-profile table (verl_pascal/gpu_profiles.yml), by profile name.
        The module reads each row's C(capability), V([lowest, highest]) compute capability,
        both inclusive (a V(null) highest means "and newer"). Rows must not overlap.
    type: dict
    required: true
  timeout:
    description:
      - Seconds each nvidia-smi call may take. A hung driver or GPU makes nvidia-smi hang
        forever; after this the module kills it and fails, saying what to check.
    type: int
    default: 30
attributes:
  check_mode:
    support: full
    description: Only reads; runs the same in check mode.
  diff_mode:
    support: none
  facts:
    support: full
notes:
  - Never trust C(torch.cuda.is_bf16_supported()) on Pascal or Volta; it reports
    emulated bf16. Use RV(ansible_facts.nvidia_bf16_supported).
  - R580 is the last NVIDIA driver branch that supports Pascal GPUs.
requirements:
  - nvidia-smi (from the NVIDIA driver) on the managed host, for any GPU facts
"""

EXAMPLES = r"""
- name: Gather NVIDIA GPU facts
  nvidia_gpu_facts:
    profiles: "{{ (lookup('ansible.builtin.file', 'verl_pascal/gpu_profiles.yml') | from_yaml).profiles }}"

- name: Check the driver against CUDA 12.6, with nvidia-smi at a custom path
  nvidia_gpu_facts:
    profiles: {pascal: {capability: ["6.0", "6.9"]}, native: {capability: ["7.0", null]}}
    nvidia_smi: /usr/local/nvidia/bin/nvidia-smi
    cuda_version: "12.6"
    timeout: 60

- name: Require a Pascal or newer GPU and a driver that runs CUDA 11.8
  ansible.builtin.assert:
    that:
      - ansible_facts.nvidia_driver_found
      - ansible_facts.nvidia_gpu_profile in ['pascal', 'volta_turing', 'native']
      - ansible_facts.nvidia_driver_cuda_check.ok
    fail_msg: "{{ ansible_facts.nvidia_smi_error or ansible_facts.nvidia_driver_cuda_check.message }}"
"""

RETURN = r"""
ansible_facts:
  description: GPU and driver facts.
  returned: always
  type: complex
  contains:
    nvidia_gpus:
      description: One entry per GPU, in nvidia-smi order.
      returned: always
      type: list
      elements: dict
      sample:
        - index: 0
          name: Tesla P40
          compute_cap: "6.1"
          driver_version: 535.183.01
          memory_total_mib: 24576
          memory_free_mib: 24438
    nvidia_gpu_count:
      description: Number of GPUs.
      returned: always
      type: int
      sample: 1
    nvidia_driver_version:
      description: Driver version (from the first GPU); null without GPUs.
      returned: always
      type: str
      sample: 535.183.01
    nvidia_driver_found:
      description: Whether nvidia-smi ran and talked to a loaded driver.
      returned: always
      type: bool
      sample: true
    nvidia_min_compute_cap:
      description: Lowest compute capability over all GPUs; null without GPUs or when one is unknown.
      returned: always
      type: str
      sample: "6.1"
    nvidia_gpu_profile:
      description: >-
        Build profile: the name of the O(profiles) row that covers the lowest compute
        capability, V(unsupported) (no row covers it), V(none) (no GPU), V(unknown) (a GPU
        of unknown capability).
      returned: always
      type: str
      sample: pascal
    nvidia_bf16_supported:
      description: True only when every GPU has native bf16 (compute capability 8.0+).
      returned: always
      type: bool
      sample: false
    nvidia_compute_cap_source:
      description: Where compute capabilities came from, V(nvidia-smi) or V(name_table); null without GPUs.
      returned: always
      type: str
      sample: nvidia-smi
    nvidia_smi_error:
      description: Why nvidia-smi gave no GPUs (missing, driver not loaded, no devices); null otherwise.
      returned: always
      type: str
      sample: null
    nvidia_p2p_ok:
      description:
        - True when every pair of GPUs reads V(OK) in C(nvidia-smi topo -p2p r) (always with one GPU).
        - False when a pair cannot reach the other directly, or the matrix could not be read;
          the launch role then turns NCCL's P2P transport off on the box.
      returned: always
      type: bool
      sample: false
    nvidia_p2p_blocked:
      description: The pairs that are not V(OK), with their status.
      returned: always
      type: list
      elements: str
      sample: ["GPU0-GPU1: NS"]
    nvidia_p2p_error:
      description: Why the P2P matrix could not be read; null otherwise.
      returned: always
      type: str
      sample: null
    nvidia_driver_cuda_check:
      description: Verdict on the driver for O(cuda_version); null when O(cuda_version) is empty.
      returned: always
      type: dict
      contains:
        ok:
          description: True for modes V(full) and V(minor_version_compat).
          type: bool
        mode:
          description: V(full), V(minor_version_compat), V(too_old) or V(no_driver).
          type: str
        message:
          description: What it means and what to do.
          type: str
        required_full:
          description: Minimum driver for full support of that CUDA version.
          type: str
        required_minor_compat:
          description: Minimum driver under CUDA minor-version compatibility.
          type: str
        cuda_version:
          description: The CUDA major.minor checked.
          type: str
        driver_version:
          description: The driver version checked, null without a driver.
          type: str
      sample:
        ok: true
        mode: full
        message: Driver 535.183.01 fully supports CUDA 11.8 (>= 520.61.05).
        required_full: 520.61.05
        required_minor_compat: 450.80.02
        cuda_version: "11.8"
        driver_version: 535.183.01
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.nvidia_gpu import (
    NvidiaSmiParseError,
    NvidiaSmiTimeout,
    driver_supports_cuda,
    P2pFacts,
    gather,
    gather_p2p,
    no_driver_facts,
    ranges_of_table,
    runner,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            nvidia_smi=dict(type="str", default="nvidia-smi"),
            cuda_version=dict(type="str", default="11.8"),
            timeout=dict(type="int", default=30),
            profiles=dict(type="dict", required=True),
        ),
        supports_check_mode=True,
    )
    nvidia_smi = module.params["nvidia_smi"]
    cuda_version = module.params["cuda_version"]
    timeout = module.params["timeout"]
    if timeout < 1:
        module.fail_json(msg="timeout must be 1 second or more, not %d" % timeout)
    try:
        profiles = ranges_of_table(module.params["profiles"])
    except ValueError as exc:
        module.fail_json(msg="profiles: %s" % exc)

    if os.path.isabs(nvidia_smi):
        path = nvidia_smi if os.access(nvidia_smi, os.X_OK) else None
    else:
        path = module.get_bin_path(nvidia_smi)

    p2p = P2pFacts(ok=True)
    if path is None:
        facts = no_driver_facts(
            "%s not found (no NVIDIA driver installed?)" % nvidia_smi
        )
    else:
        run = runner(timeout, dict(os.environ, LC_ALL="C"))
        try:
            facts = gather(run, path)
            p2p = gather_p2p(run, path, facts.gpu_count)
        except NvidiaSmiParseError as exc:
            module.fail_json(
                msg="Cannot parse nvidia-smi output: %s" % exc, line=exc.line
            )
        except NvidiaSmiTimeout as exc:
            module.fail_json(msg=str(exc), timeout=timeout)

    for warning in facts.warnings:
        module.warn(warning)

    result = facts.to_facts(profiles)
    result.update(p2p.to_facts())
    result["nvidia_driver_cuda_check"] = None
    if cuda_version:
        try:
            check = driver_supports_cuda(facts.driver_version, cuda_version)
        except ValueError as exc:
            module.fail_json(msg="cuda_version: %s" % exc)
        result["nvidia_driver_cuda_check"] = check.to_dict()

    module.exit_json(changed=False, ansible_facts=result)


if __name__ == "__main__":
    main()
