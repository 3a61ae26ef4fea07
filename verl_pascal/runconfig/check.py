"""Judge a composed verl configuration before a run starts (the launch script's ``compose``).

    python -m verl_pascal.runconfig.check COMPOSED.yaml --min-compute-capability 6.1

``COMPOSED.yaml`` is what ``python -m verl.trainer.main_ppo --cfg job ...``
printed: every override applied, nothing checked. Two judgements follow,
in this order:

1. **The rollouts.** Below compute capability 7.0 only the HF rollout runs
   (vLLM, SGLang and the others need 7.0 or newer): every rollout the
   configuration holds (the actor's, the reward model's, the distillation
   teachers', any other ``rollout`` section) must be ``hf`` as the job will
   resolve it, and a name the job reads where it runs (``${oc.env:...}``,
   which hydra.job.env_set or Ray's runtime_env may set there) is refused:
   exit 2 (:mod:`verl_pascal.runconfig.rollouts`). From 7.0 any rollout runs;
   the actor's name must still be readable. An unreadable one exits 1.
2. **verl's own validation**, where the installed release has one
   (``verl.utils.config.validate_config``, verl 0.6 on): it turns the actor's
   and the critic's sections into verl's config dataclasses, so a key that
   the release does not have (one that composed only because ``++`` added
   it) is refused here, not at the first step on a GPU, and it checks the
   batch sizes against the GPUs. It needs the model directory (verl reads
   the model's config); where the model is not staged yet it is skipped,
   saying so. A rejection exits 1.

Exit 0 when the configuration may run. Messages go to stderr, prefixed
``verl-ppo:`` as the launch script's own.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Callable, Optional, Sequence

from verl_pascal.runconfig import rollouts

PREFIX = "verl-ppo:"
#: Compute capability from which rollouts other than HF run.
SERVER_ROLLOUTS_FROM = (7, 0)


def say(message: str) -> None:
    print(f"{PREFIX} {message}", file=sys.stderr)


def capability(text: str) -> tuple:
    """``6.1`` -> (6, 1); a malformed value is argparse's error (it names the option), never a traceback."""
    major, _, minor = text.partition(".")
    if not (major.isdigit() and (minor.isdigit() or not minor)):
        raise argparse.ArgumentTypeError(f"expected a compute capability such as 6.1, not {text!r}")
    return int(major), int(minor or 0)


def capability_text(text: str) -> str:
    capability(text)
    return text


def actor_rollout_readable(cfg: Any) -> rollouts.Verdict:
    """From compute capability 7.0 any rollout runs: the actor's must only be set and resolve here."""
    from omegaconf import OmegaConf

    key = rollouts.dotted(rollouts.ACTOR)
    try:
        rollout = OmegaConf.select(cfg, key, throw_on_resolution_failure=True)
    except Exception as exc:  # an interpolation that does not resolve
        return rollouts.Verdict(1, (f"cannot read {key} from the composed configuration: {str(exc).splitlines()[0]}",))
    if rollout is None:
        return rollouts.Verdict(1, (f"cannot read {key} from the composed configuration.",))
    return rollouts.Verdict(0)


def rollout_verdict(cfg: Any, min_compute_capability: str) -> rollouts.Verdict:
    """Whether this box runs every rollout of ``cfg``."""
    if capability(min_compute_capability) >= SERVER_ROLLOUTS_FROM:
        return actor_rollout_readable(cfg)
    return rollouts.judge(cfg, min_compute_capability)


def critic_in_use(cfg: Any) -> bool:
    """Whether the run builds a critic, as verl decides it: ``critic.enable`` where set, else GAE (PPO) only."""
    from omegaconf import OmegaConf

    enable = OmegaConf.select(cfg, "critic.enable")
    if enable is not None:
        return bool(enable)
    return OmegaConf.select(cfg, "algorithm.adv_estimator", default="gae") == "gae"


def model_staged(cfg: Any) -> Optional[str]:
    """The model directories the run reads that are not there yet (None: all are); GRPO reads no critic's."""
    from omegaconf import OmegaConf

    keys = ["actor_rollout_ref.model.path"] + (["critic.model.path"] if critic_in_use(cfg) else [])
    paths = [OmegaConf.select(cfg, key) for key in keys]
    absent = [str(p) for p in paths if p and not os.path.isfile(os.path.join(str(p), "config.json"))]
    return ", ".join(sorted(set(absent))) or None


def verl_validator() -> Optional[Callable[[Any], None]]:
    """verl's validation of a whole configuration, where the installed release has one."""
    try:
        from verl.trainer.ppo.utils import need_critic
        from verl.utils.config import validate_config
    except ImportError:
        return None

    def validate(cfg: Any) -> None:
        # What needs a reference policy, as every release with validate_config decides it.
        use_ref = bool(cfg.algorithm.get("use_kl_in_reward", False) or cfg.actor_rollout_ref.actor.use_kl_loss)
        validate_config(cfg, use_reference_policy=use_ref, use_critic=need_critic(cfg))

    return validate


def judge(path: str, min_compute_capability: str,
          validator: Callable[[], Optional[Callable[[Any], None]]] = verl_validator) -> int:
    from omegaconf import OmegaConf

    cfg = OmegaConf.load(path)
    verdict = rollout_verdict(cfg, min_compute_capability)
    for line in verdict.lines:
        say(line)
    if verdict.status:
        return verdict.status
    validate = validator()
    if validate is None:
        return 0
    absent = model_staged(cfg)
    if absent:
        say(f"verl's own validation of the configuration reads the model, which is not at {absent} yet: skipped.")
        return 0
    try:
        validate(cfg)
    except Exception as exc:  # verl raises what its dataclasses and asserts raise
        say(f"verl rejects the configuration: {type(exc).__name__}: {exc}")
        return 1
    return 0


def parser(description: str, composed_help: str) -> argparse.ArgumentParser:
    """The command line of this module and of ``verl_pascal.runconfig.compose``: the file and the capability."""
    command = argparse.ArgumentParser(description=description)
    command.add_argument("composed", help=composed_help)
    command.add_argument("--min-compute-capability", required=True, type=capability_text,
                         help="the box's lowest, as major.minor")
    return command


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parser(__doc__.split("\n\n")[0], "the configuration main_ppo --cfg job printed").parse_args(argv)
    return judge(args.composed, args.min_compute_capability)


if __name__ == "__main__":
    raise SystemExit(main())
