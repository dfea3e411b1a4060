"""The built-in evaluation profiles (YAML), shipped as ``reporter.profile_files``."""
