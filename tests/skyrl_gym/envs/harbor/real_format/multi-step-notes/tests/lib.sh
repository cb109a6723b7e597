# Shared by every step's verifier (uploaded to /tests before the step's own files).
reward() { if "$@"; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi; }
