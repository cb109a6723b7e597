#!/bin/bash
# TB1 ran pytest on $TEST_DIR/test_outputs.py and parsed its output; offline there is no
# pytest to install, so each test function is called in turn (exit 0 when all pass).
cd "$TEST_DIR"
python3 - <<'PY'
import os
import sys

sys.path.insert(0, os.environ["TEST_DIR"])  # as pytest puts a test file's folder first
import test_outputs

failed = 0
for name in sorted(n for n in dir(test_outputs) if n.startswith("test_")):
    try:
        getattr(test_outputs, name)()
        print(f"PASSED {name}")
    except Exception as e:  # noqa: BLE001
        failed += 1
        print(f"FAILED {name} - {e!r}")
sys.exit(1 if failed else 0)
PY
