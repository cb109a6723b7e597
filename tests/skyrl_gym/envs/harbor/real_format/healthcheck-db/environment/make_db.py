import os
import sqlite3
import sys

path = sys.argv[1]
os.makedirs(os.path.dirname(path), exist_ok=True)
db = sqlite3.connect(path)
db.execute("create table items(name text, qty integer)")
db.executemany("insert into items values (?, ?)", [("bolt", 12), ("nut", 30), ("washer", 7)])
db.commit()
