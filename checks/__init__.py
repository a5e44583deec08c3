"""Checks: one module per concern, each a set of small functions that return findings.

Nothing here imports `doctor`, torch, torch_npu, vllm, verl or ray: what the target interpreter
has is learned by `checks.probe`, which runs it in a subprocess with a timeout.
"""
