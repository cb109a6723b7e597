import sys

with open("/logs/verifier/reward.txt", "w") as f:
    f.write("1\n" if sys.argv[1:] == ["hello"] else "0\n")
