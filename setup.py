"""Package layout only (metadata is in pyproject.toml).

The top-level folders `agents/`, `tools/`, `sandboxes/`, `trainer/` and `benchmarks/` install as
`skyrl_sdk.<folder>`; `skyrl_gym/` keeps its own name.
"""

from setuptools import find_packages, setup

MAPPED = ("agents", "tools", "sandboxes", "trainer", "benchmarks")

package_dir = {"skyrl_gym": "skyrl_gym", "skyrl_sdk": "skyrl_sdk"}
packages = ["skyrl_sdk", *(p for p in find_packages(include=["skyrl_gym", "skyrl_gym.*"]))]
for folder in MAPPED:
    package_dir[f"skyrl_sdk.{folder}"] = folder
    packages.append(f"skyrl_sdk.{folder}")
    packages += [f"skyrl_sdk.{folder}.{sub}" for sub in find_packages(where=folder)]

setup(packages=packages, package_dir=package_dir)
