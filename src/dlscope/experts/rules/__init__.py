"""One module per rule (or small family of rules); each registers itself with ``registry.rule``."""
