#!/bin/bash
# reward.json: `reward` 1 only when everything is right; `removed` / `kept` are partial scores.
python3 - <<'PY'
import json, os
root = "/app/build"
must_go = ["src/objs/main.o", "src/objs/util.o", "cache/a/b/x.tmp", "cache/y.tmp",
           "src/objs", "cache/a/b", "cache/a", "cache"]
must_stay = ["src/main.c", "docs/index.md", "docs/notes.tmp.md", "keep-empty-not/.keep",
             "report.tmp.bak", "src", "docs", "keep-empty-not", ""]
removed = sum(not os.path.lexists(os.path.join(root, p)) for p in must_go) / len(must_go)
kept = sum(os.path.lexists(os.path.join(root, p)) for p in must_stay) / len(must_stay)
print("removed", removed, "kept", kept)
json.dump({"reward": float(removed == 1 and kept == 1), "removed": removed, "kept": kept},
          open("/logs/verifier/reward.json", "w"))
PY
