# The metadata lives in pyproject.toml (PEP 621); this file only keeps `python setup.py ...` working.
from setuptools import setup

setup()
