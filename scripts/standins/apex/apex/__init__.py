"""verl-pascal STAND-IN for NVIDIA apex (CI only)."""

try:
    from apex._build_info import BUILD_INFO
except ImportError:  # a source checkout that was never built
    BUILD_INFO = {}
