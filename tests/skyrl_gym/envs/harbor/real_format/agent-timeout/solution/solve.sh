#!/bin/bash
# The work is done at once, then the agent hangs past its limit: as in Harbor, the verifier
# still judges the state it left.
echo ok > /app/done.txt
sleep 600
