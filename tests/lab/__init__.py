"""Helpers that lay out real situations for the check tests: interpreters with real installed
packages, an Ascend install tree, a private network namespace. They build; tests assert."""
