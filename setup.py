# The project's metadata is in pyproject.toml; this file only declares the one C extension, which
# is optional: without a C compiler the install still succeeds and matching/lines.py falls back
# to its pure-Python twins.
from setuptools import Extension, setup

setup(ext_modules=[Extension("matching._lines", ["matching/_lines.c"], optional=True)])
