"""The folders here are task fixtures, not test modules: their tests/ (the verifier's pytest
files, run inside a trial's sandbox) are never collected by the project's own pytest run."""

collect_ignore_glob = ["*/*"]
