#!/bin/bash
cat > /app/wordfreq.py <<'PY'
import collections
import re
import sys

text = open(sys.argv[1], encoding="utf-8", errors="replace").read().lower()
counts = collections.Counter(re.findall(r"[a-z]+", text))
for word, count in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[: int(sys.argv[2])]:
    print(word, count)
PY
