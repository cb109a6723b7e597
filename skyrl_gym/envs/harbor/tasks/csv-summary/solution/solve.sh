#!/bin/bash
python3 - <<'PY'
import csv, json
totals = {}
with open("/app/sales.csv") as f:
    for row in csv.DictReader(f):
        totals[row["region"]] = totals.get(row["region"], 0.0) + float(row["amount"])
json.dump({k: round(v, 2) for k, v in totals.items()}, open("/app/summary.json", "w"), indent=2)
PY
