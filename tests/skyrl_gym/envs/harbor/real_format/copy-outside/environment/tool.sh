#!/bin/sh
cat /data/numbers.txt
