#!/bin/bash
# A test suite that hangs (a server it waits for never answers): past [verifier].timeout_sec.
sleep 600
echo 1 > /logs/verifier/reward.txt
