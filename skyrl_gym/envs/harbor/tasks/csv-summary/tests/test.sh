#!/bin/bash
# Multi-metric reward: `reward` (all regions right) and `regions_correct` (fraction).
python3 - <<'PY'
import json
want = {"north": 200.45, "south": 95.25, "east": 50.0, "west": 300.99}
try:
    got = json.load(open("/app/summary.json"))
except Exception as e:
    print("cannot read /app/summary.json:", e)
    got = {}
right = sum(1 for k, v in want.items()
            if isinstance(got.get(k), int | float) and abs(got[k] - v) < 0.005)
exact = right == len(want) and set(got) == set(want)
print("got", got)
json.dump({"reward": float(exact), "regions_correct": right / len(want)},
          open("/logs/verifier/reward.json", "w"))
PY
