"""Generates the message classes from proto/berth/v1 (berth/_gen.py) before
setuptools looks for the package berth.v1; they are never checked in.
pyproject.toml holds the rest."""

import importlib.util
from pathlib import Path

from setuptools import setup

spec = importlib.util.spec_from_file_location(
    "berth_gen", Path(__file__).resolve().parent / "berth" / "_gen.py")
gen = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gen)
gen.ensure()

setup()
