"""verl-doctor: pre-flight checks, log explanation and a self-healing launcher for verl GRPO."""
__version__ = "0.1.0"
