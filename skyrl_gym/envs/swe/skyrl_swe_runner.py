"""SWE grading's own pytest plugin, loaded with `-p skyrl_swe_runner` from a read-only directory
the harness owns (`packages.runner_plugin_dir`); never imported by the SDK itself.

While grading, the repository is not on the interpreter's start-up path (`PYTHONPATH` holds
only harness directories), so nothing in it runs before pytest. This plugin then makes the
code under test importable the way the official harness's development install does: the
repository's root (`$SKYRL_SWE_REPO`) at the end of `sys.path`. It is imported while pytest
parses its options, before any conftest.py and after plugin auto-loading was turned off.
"""

import os
import sys

_repo = os.environ.get("SKYRL_SWE_REPO")
if _repo and _repo not in sys.path:
    sys.path.append(_repo)
