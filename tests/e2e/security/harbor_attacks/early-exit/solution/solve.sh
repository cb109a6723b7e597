#!/bin/bash
# Attack: greet.sh, which the verifier runs with its own uid, writes reward 1 and fails:
# `set -e` stops test.sh before its verdict, with a status Harbor ignores.
cat > /app/greet.sh <<'GREET'
#!/bin/bash
echo 1 > /logs/verifier/reward.txt
exit 1
GREET
chmod +x /app/greet.sh
echo "failer written"
