#!/bin/bash
python3 - <<'PY'
import configparser
expected = {
    "server": {"host": "0.0.0.0", "port": "8080", "workers": "4"},
    "app": {"name": "inventory", "debug": "false", "log_level": "info"},
    "database": {"url": "sqlite:////app/data.db", "pool_size": "5"},
    "cache": {"ttl": "300"},
}
ok = 1
try:
    cfg = configparser.ConfigParser()
    cfg.read_string(open("/app/server.ini").read())
    got = {s: dict(cfg[s]) for s in cfg.sections()}
    print("got:", got)
    ok = int(got == expected)
except Exception as e:
    print("error:", e)
    ok = 0
open("/logs/verifier/reward.txt", "w").write(f"{ok}\n")
PY
