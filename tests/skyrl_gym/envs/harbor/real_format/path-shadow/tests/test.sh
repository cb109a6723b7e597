#!/bin/bash
python3 -c 'print(int(open("/app/answer.txt").read().strip() == "right"))' > /logs/verifier/reward.txt
