# shellcheck shell=sh
# STAND-IN for Miniforge's etc/profile.d/conda.sh (verl-pascal, CI only):
# `conda activate ENV` and `conda deactivate` in the calling shell, in the real
# order: PATH is set first, then the env's etc/conda/activate.d/*.sh run; on
# deactivate PATH is set first, then deactivate.d/*.sh run. Every other
# subcommand goes to the stand-in conda. Never used on a real box.
export CONDA_EXE="@PREFIX@/bin/conda"
__verl_pascal_conda_run_dir() {
  for __f in "$1"/*.sh; do
    # shellcheck disable=SC1090 # the env's hooks
    [ -f "$__f" ] && . "$__f"
  done
  unset __f
}
conda() {
  case ${1:-} in
    activate)
      case ${2:-base} in
        base) __p="@PREFIX@" ;;
        /*) __p=$2 ;;
        *) __p="@PREFIX@/envs/$2" ;;
      esac
      [ -d "$__p/conda-meta" ] || { echo "EnvironmentNameNotFound: Could not find conda environment: ${2:-base}" >&2; return 1; }
      [ -n "${CONDA_PREFIX:-}" ] && conda deactivate
      export PATH="$__p/bin:$PATH"
      export CONDA_PREFIX="$__p" CONDA_DEFAULT_ENV="${2:-base}"
      __verl_pascal_conda_run_dir "$__p/etc/conda/activate.d"
      unset __p
      ;;
    deactivate)
      [ -n "${CONDA_PREFIX:-}" ] || return 0
      PATH=$(printf '%s' ":$PATH:" | sed "s|:$CONDA_PREFIX/bin:|:|; s|^:||; s|:\$||")
      export PATH
      __verl_pascal_conda_run_dir "$CONDA_PREFIX/etc/conda/deactivate.d"
      unset CONDA_PREFIX CONDA_DEFAULT_ENV
      ;;
    *) "$CONDA_EXE" "$@" ;;
  esac
}
