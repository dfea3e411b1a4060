"""Configuration: the models YAML and the evaluation profile, validated and typed.

Nothing here imports torch or model code, so validating a file is fast and the analyse
and render stages can read a run's configuration on a machine without torch.
"""
from .models import ModelSpec, RunConfig, default_config, load_config, parse_config
from .profile import ContaminationConfig, LPPConfig, MUIConfig, Profile, builtin_profiles, load_profile
from .profile_tasks import TaskConfig
from .sae import SAEConfig, check_sae

__all__ = ["ModelSpec", "RunConfig", "default_config", "load_config", "parse_config", "Profile", "TaskConfig",
           "MUIConfig", "LPPConfig", "ContaminationConfig", "load_profile", "builtin_profiles",
           "SAEConfig", "check_sae"]
