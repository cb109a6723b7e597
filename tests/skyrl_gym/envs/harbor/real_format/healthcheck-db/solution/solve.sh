#!/bin/bash
python3 -c "import sqlite3; print(sqlite3.connect('/app/data/inventory.db').execute('select sum(qty) from items').fetchone()[0])" > /app/answer.txt
