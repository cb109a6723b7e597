#!/bin/bash
set -e
python3 -c "
import os
with open('/tmp/result.tmp', 'w') as f:
    f.write('ok')
os.rename('/tmp/result.tmp', '/app/result.txt')
"
