"""Models: loading (hub, local, packaged GGUF, random), architecture adapters and generation."""
