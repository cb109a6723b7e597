"""Build the bundled offline Text-to-SQL benchmark: four SQLite databases and their questions.

    python -m skyrl_gym.envs.sql.bundled.build --out DIR

writes the Spider layout: `DIR/database/<db_id>/<db_id>.sqlite`, `DIR/dev.json` (Spider
format plus `difficulty`), `DIR/tasks.jsonl` (task rows of the `sql` env), `DIR/gold.sql`
(`SQL<TAB>db_id` per line) and `DIR/tables.json`-free schemas (read from the databases).

The data is generated from a fixed seed, so every build is identical. The databases look like
real ones: foreign keys, NULLs, ISO dates, and ties in prices, counts and ratings. Each question
is checked while building: its gold query must run and return at least one row.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import tempfile
from collections.abc import Callable
from datetime import date, datetime, timedelta
from pathlib import Path

from skyrl_gym.envs.sql.bundled.questions import QUESTIONS, Question
from skyrl_gym.tasks import TaskRow

FIRST = [
    "Ava", "Liam", "Noah", "Emma", "Olivia", "Mia", "Lucas", "Sofia", "Mateo", "Aria", "Ethan",
    "Chloe", "Hiro", "Yuki", "Priya", "Arjun", "Fatima", "Omar", "Lena", "Jonas", "Ingrid",
    "Pierre", "Camille", "Diego", "Lucia", "Wei", "Mei", "Kofi", "Amara", "Sven",
]  # fmt: skip
LAST = [
    "Smith", "Garcia", "Müller", "Rossi", "Kim", "Tanaka", "Patel", "Singh", "Nguyen", "Silva",
    "Martin", "Dubois", "Kowalski", "Haddad", "Okafor", "Larsen", "Novak", "Costa", "Chen", "Brown",
]  # fmt: skip
CITIES = [
    ("Berlin", "Germany"), ("Munich", "Germany"), ("Paris", "France"), ("Lyon", "France"),
    ("Madrid", "Spain"), ("Tokyo", "Japan"), ("Osaka", "Japan"), ("Toronto", "Canada"),
    ("Austin", "USA"), ("Boston", "USA"), ("Seattle", "USA"), ("Lagos", "Nigeria"),
]  # fmt: skip


def _day(rng: random.Random, start: date, end: date) -> str:
    return (start + timedelta(days=rng.randrange((end - start).days + 1))).isoformat()


def _name(rng: random.Random) -> str:
    return f"{rng.choice(FIRST)} {rng.choice(LAST)}"


# ---- retail -------------------------------------------------------------------------------------

RETAIL_SCHEMA = """
CREATE TABLE customers (
  customer_id INTEGER PRIMARY KEY,
  first_name TEXT NOT NULL,
  last_name TEXT NOT NULL,
  email TEXT,
  city TEXT NOT NULL,
  country TEXT NOT NULL,
  signup_date TEXT NOT NULL,
  loyalty_tier TEXT
);
CREATE TABLE categories (
  category_id INTEGER PRIMARY KEY,
  name TEXT NOT NULL UNIQUE
);
CREATE TABLE products (
  product_id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  category_id INTEGER NOT NULL REFERENCES categories(category_id),
  price REAL NOT NULL,
  stock INTEGER NOT NULL,
  discontinued INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE orders (
  order_id INTEGER PRIMARY KEY,
  customer_id INTEGER NOT NULL REFERENCES customers(customer_id),
  order_date TEXT NOT NULL,
  status TEXT NOT NULL,
  shipping_city TEXT
);
CREATE TABLE order_items (
  order_id INTEGER NOT NULL REFERENCES orders(order_id),
  product_id INTEGER NOT NULL REFERENCES products(product_id),
  quantity INTEGER NOT NULL,
  unit_price REAL NOT NULL,
  PRIMARY KEY (order_id, product_id)
);
CREATE TABLE reviews (
  review_id INTEGER PRIMARY KEY,
  product_id INTEGER NOT NULL REFERENCES products(product_id),
  customer_id INTEGER NOT NULL REFERENCES customers(customer_id),
  rating INTEGER NOT NULL CHECK (rating BETWEEN 1 AND 5),
  review_date TEXT NOT NULL,
  comment TEXT
);
"""

CATEGORIES = ["Electronics", "Books", "Kitchen", "Garden", "Toys", "Sports", "Beauty", "Office"]
PRODUCT_WORDS = {
    "Electronics": ["Headphones", "Charger", "Webcam", "Speaker", "Monitor"],
    "Books": ["Cookbook", "Atlas", "Novel", "Guide", "Biography"],
    "Kitchen": ["Kettle", "Pan", "Knife Set", "Blender", "Mug"],
    "Garden": ["Hose", "Shovel", "Planter", "Seeds", "Gloves"],
    "Toys": ["Puzzle", "Kite", "Robot", "Blocks", "Doll"],
    "Sports": ["Yoga Mat", "Dumbbell", "Ball", "Racket", "Bottle"],
    "Beauty": ["Lotion", "Shampoo", "Perfume"],
    "Office": ["Stapler", "Notebook"],
}
PRICES = [4.99, 9.99, 12.5, 19.99, 24.99, 29.99, 49.99, 79.0, 99.99, 149.0]


def build_retail(conn: sqlite3.Connection, rng: random.Random) -> None:
    conn.executescript(RETAIL_SCHEMA)
    tiers = ["gold", "silver", "bronze", None, None]
    for cid in range(1, 61):
        first, last = rng.choice(FIRST), rng.choice(LAST)
        city, country = rng.choice(CITIES)
        email = None if rng.random() < 0.15 else f"{first.lower()}.{cid}@example.com"
        conn.execute(
            "INSERT INTO customers VALUES (?,?,?,?,?,?,?,?)",
            (cid, first, last, email, city, country,
             _day(rng, date(2020, 1, 1), date(2023, 12, 31)), rng.choice(tiers)),
        )  # fmt: skip
    for i, name in enumerate(CATEGORIES, 1):
        conn.execute("INSERT INTO categories VALUES (?,?)", (i, name))
    pid = 0
    for cat_id, cat in enumerate(CATEGORIES, 1):
        for word in PRODUCT_WORDS[cat]:
            pid += 1
            conn.execute(
                "INSERT INTO products VALUES (?,?,?,?,?,?)",
                (pid, f"{rng.choice(['Classic', 'Pro', 'Eco', 'Mini'])} {word}", cat_id,
                 rng.choice(PRICES), rng.choice([0, 5, 12, 30, 30, 75]), int(rng.random() < 0.1)),
            )  # fmt: skip
    prices = dict(conn.execute("SELECT product_id, price FROM products"))
    statuses = ["delivered"] * 6 + ["shipped", "shipped", "cancelled", "pending"]
    for oid in range(1, 301):
        cid = rng.randint(1, 60)
        city = conn.execute("SELECT city FROM customers WHERE customer_id=?", (cid,)).fetchone()[0]
        conn.execute(
            "INSERT INTO orders VALUES (?,?,?,?,?)",
            (oid, cid, _day(rng, date(2022, 1, 1), date(2024, 6, 30)), rng.choice(statuses),
             None if rng.random() < 0.05 else city),
        )  # fmt: skip
        for product in rng.sample(sorted(prices), rng.randint(1, 4)):
            unit = prices[product] if rng.random() < 0.8 else round(prices[product] * 0.9, 2)
            conn.execute(
                "INSERT INTO order_items VALUES (?,?,?,?)",
                (oid, product, rng.choice([1, 1, 1, 2, 2, 3, 5]), unit),
            )
    comments = ["Great value", "Broke after a week", "As described", None, None, "Would buy again"]
    for rid in range(1, 151):
        conn.execute(
            "INSERT INTO reviews VALUES (?,?,?,?,?,?)",
            (rid, rng.randint(1, pid), rng.randint(1, 60), rng.choice([1, 2, 3, 4, 4, 5, 5, 5]),
             _day(rng, date(2022, 3, 1), date(2024, 6, 30)), rng.choice(comments)),
        )  # fmt: skip


# ---- university ---------------------------------------------------------------------------------

UNIVERSITY_SCHEMA = """
CREATE TABLE departments (
  dept_id INTEGER PRIMARY KEY,
  name TEXT NOT NULL UNIQUE,
  building TEXT NOT NULL,
  budget REAL NOT NULL
);
CREATE TABLE instructors (
  instructor_id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  dept_id INTEGER NOT NULL REFERENCES departments(dept_id),
  salary INTEGER NOT NULL,
  hire_date TEXT NOT NULL
);
CREATE TABLE students (
  student_id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  major_dept_id INTEGER REFERENCES departments(dept_id),
  enrollment_year INTEGER NOT NULL,
  gpa REAL,
  birth_date TEXT NOT NULL
);
CREATE TABLE courses (
  course_id TEXT PRIMARY KEY,
  title TEXT NOT NULL,
  dept_id INTEGER NOT NULL REFERENCES departments(dept_id),
  credits INTEGER NOT NULL,
  instructor_id INTEGER REFERENCES instructors(instructor_id)
);
CREATE TABLE enrollments (
  student_id INTEGER NOT NULL REFERENCES students(student_id),
  course_id TEXT NOT NULL REFERENCES courses(course_id),
  semester TEXT NOT NULL,
  grade TEXT,
  PRIMARY KEY (student_id, course_id, semester)
);
CREATE TABLE prerequisites (
  course_id TEXT NOT NULL REFERENCES courses(course_id),
  prereq_id TEXT NOT NULL REFERENCES courses(course_id),
  PRIMARY KEY (course_id, prereq_id)
);
"""

DEPARTMENTS = [
    ("Computer Science", "CS", "Turing Hall", 1_200_000),
    ("Mathematics", "MATH", "Noether Hall", 800_000),
    ("Physics", "PHYS", "Curie Hall", 950_000),
    ("History", "HIST", "Gibbon Hall", 400_000),
    ("Biology", "BIO", "Darwin Hall", 950_000),
    ("Economics", "ECON", "Keynes Hall", 600_000),
]
COURSE_TOPICS = ["Introduction", "Methods", "Seminar", "Advanced Topics", "Laboratory"]
SEMESTERS = ["2022-Fall", "2023-Spring", "2023-Fall", "2024-Spring"]


def build_university(conn: sqlite3.Connection, rng: random.Random) -> None:
    conn.executescript(UNIVERSITY_SCHEMA)
    for i, (name, _, building, budget) in enumerate(DEPARTMENTS, 1):
        conn.execute("INSERT INTO departments VALUES (?,?,?,?)", (i, name, building, budget))
    for iid in range(1, 25):
        conn.execute(
            "INSERT INTO instructors VALUES (?,?,?,?,?)",
            (iid, _name(rng), (iid - 1) % 6 + 1, rng.choice([65_000, 72_000, 80_000, 95_000, 110_000]),
             _day(rng, date(2005, 1, 1), date(2023, 8, 31))),
        )  # fmt: skip
    for sid in range(1, 121):
        conn.execute(
            "INSERT INTO students VALUES (?,?,?,?,?,?)",
            (sid, _name(rng), None if rng.random() < 0.1 else rng.randint(1, 6),
             rng.choice([2020, 2021, 2022, 2023]),
             None if rng.random() < 0.08 else rng.choice([2.0, 2.5, 2.8, 3.0, 3.3, 3.5, 3.7, 4.0]),
             _day(rng, date(1998, 1, 1), date(2005, 12, 31))),
        )  # fmt: skip
    courses = []
    for dept_id, (_, code, _, _) in enumerate(DEPARTMENTS, 1):
        for k, topic in enumerate(COURSE_TOPICS):
            course_id = f"{code}{100 + 100 * (k // 2) + k}"
            instructor = (
                None
                if rng.random() < 0.1
                else rng.choice([i for i in range(1, 25) if (i - 1) % 6 + 1 == dept_id])
            )
            conn.execute(
                "INSERT INTO courses VALUES (?,?,?,?,?)",
                (course_id, f"{topic} in {DEPARTMENTS[dept_id - 1][0]}", dept_id,
                 rng.choice([3, 3, 4, 6]), instructor),
            )  # fmt: skip
            courses.append((course_id, dept_id, k))
    for course_id, dept_id, k in courses:
        if k > 0:
            prereq = next(c for c, d, j in courses if d == dept_id and j == 0)
            conn.execute("INSERT INTO prerequisites VALUES (?,?)", (course_id, prereq))
    grades = ["A", "A", "B", "B", "B", "C", "C", "D", "F", None]
    for sid in range(1, 121):
        for course_id, _, _ in rng.sample(courses, rng.randint(0, 6)):
            conn.execute(
                "INSERT INTO enrollments VALUES (?,?,?,?)",
                (sid, course_id, rng.choice(SEMESTERS), rng.choice(grades)),
            )


# ---- flights ------------------------------------------------------------------------------------

FLIGHTS_SCHEMA = """
CREATE TABLE airports (
  code TEXT PRIMARY KEY,
  name TEXT NOT NULL,
  city TEXT NOT NULL,
  country TEXT NOT NULL,
  elevation_ft INTEGER
);
CREATE TABLE airlines (
  airline_id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  iata TEXT NOT NULL UNIQUE,
  country TEXT NOT NULL,
  founded_year INTEGER
);
CREATE TABLE flights (
  flight_id INTEGER PRIMARY KEY,
  airline_id INTEGER NOT NULL REFERENCES airlines(airline_id),
  flight_no TEXT NOT NULL,
  origin TEXT NOT NULL REFERENCES airports(code),
  destination TEXT NOT NULL REFERENCES airports(code),
  departure TEXT NOT NULL,
  arrival TEXT NOT NULL,
  distance_km INTEGER NOT NULL,
  status TEXT NOT NULL,
  delay_min INTEGER
);
CREATE TABLE passengers (
  passenger_id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  nationality TEXT NOT NULL,
  birth_date TEXT NOT NULL,
  frequent_flyer_no TEXT
);
CREATE TABLE bookings (
  booking_id INTEGER PRIMARY KEY,
  passenger_id INTEGER NOT NULL REFERENCES passengers(passenger_id),
  flight_id INTEGER NOT NULL REFERENCES flights(flight_id),
  seat_class TEXT NOT NULL,
  price REAL NOT NULL,
  booked_at TEXT NOT NULL
);
"""

AIRPORTS = [
    ("BER", "Berlin Brandenburg", "Berlin", "Germany", 157),
    ("MUC", "Munich", "Munich", "Germany", 1487),
    ("CDG", "Charles de Gaulle", "Paris", "France", 392),
    ("MAD", "Adolfo Suárez Madrid-Barajas", "Madrid", "Spain", 2001),
    ("HND", "Haneda", "Tokyo", "Japan", 35),
    ("YYZ", "Toronto Pearson", "Toronto", "Canada", 569),
    ("BOS", "Logan", "Boston", "USA", 20),
    ("SEA", "Seattle-Tacoma", "Seattle", "USA", 433),
    ("LOS", "Murtala Muhammed", "Lagos", "Nigeria", None),
]
AIRLINES = [
    (1, "Lufthansa", "LH", "Germany", 1953),
    (2, "Air France", "AF", "France", 1933),
    (3, "Iberia", "IB", "Spain", 1927),
    (4, "Japan Airlines", "JL", "Japan", 1951),
    (5, "Air Canada", "AC", "Canada", 1937),
    (6, "Alaska Airlines", "AS", "USA", 1932),
    (7, "Skyhop", "SH", "USA", None),
]


def build_flights(conn: sqlite3.Connection, rng: random.Random) -> None:
    conn.executescript(FLIGHTS_SCHEMA)
    conn.executemany("INSERT INTO airports VALUES (?,?,?,?,?)", AIRPORTS)
    conn.executemany("INSERT INTO airlines VALUES (?,?,?,?,?)", AIRLINES)
    codes = [a[0] for a in AIRPORTS]
    for fid in range(1, 201):
        airline = rng.randint(1, 6)  # airline 7 never flies: a LEFT JOIN case
        origin, destination = rng.sample(codes, 2)
        departure = datetime(2024, 1, 1, 6) + timedelta(hours=rng.randrange(0, 24 * 90, 3))
        distance = rng.choice([450, 600, 900, 1200, 2500, 6000, 9000])
        arrival = departure + timedelta(minutes=30 + distance // 12)
        status = rng.choice(["on_time"] * 6 + ["delayed"] * 3 + ["cancelled"])
        delay = (
            rng.choice([15, 30, 45, 90, 180])
            if status == "delayed"
            else (None if status == "cancelled" else 0)
        )
        conn.execute(
            "INSERT INTO flights VALUES (?,?,?,?,?,?,?,?,?,?)",
            (fid, airline, f"{AIRLINES[airline - 1][2]}{100 + fid}", origin, destination,
             departure.isoformat(sep=" "), arrival.isoformat(sep=" "), distance, status, delay),
        )  # fmt: skip
    for pid in range(1, 101):
        conn.execute(
            "INSERT INTO passengers VALUES (?,?,?,?,?)",
            (pid, _name(rng), rng.choice(CITIES)[1], _day(rng, date(1950, 1, 1), date(2010, 12, 31)),
             None if rng.random() < 0.6 else f"FF{10000 + pid}"),
        )  # fmt: skip
    prices = {
        "economy": [89.0, 120.0, 199.0, 250.0],
        "business": [600.0, 900.0, 1500.0],
        "first": [2500.0],
    }
    classes = ["economy"] * 7 + ["business"] * 2 + ["first"]
    for bid in range(1, 401):
        seat = rng.choice(classes)
        conn.execute(
            "INSERT INTO bookings VALUES (?,?,?,?,?,?)",
            (bid, rng.randint(1, 100), rng.randint(1, 200), seat, rng.choice(prices[seat]),
             _day(rng, date(2023, 10, 1), date(2024, 3, 1))),
        )  # fmt: skip


# ---- library ------------------------------------------------------------------------------------

LIBRARY_SCHEMA = """
CREATE TABLE authors (
  author_id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  birth_year INTEGER,
  nationality TEXT
);
CREATE TABLE books (
  book_id INTEGER PRIMARY KEY,
  title TEXT NOT NULL,
  author_id INTEGER NOT NULL REFERENCES authors(author_id),
  genre TEXT NOT NULL,
  published_year INTEGER NOT NULL,
  pages INTEGER,
  isbn TEXT UNIQUE
);
CREATE TABLE members (
  member_id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  joined_date TEXT NOT NULL,
  membership TEXT NOT NULL,
  city TEXT NOT NULL
);
CREATE TABLE loans (
  loan_id INTEGER PRIMARY KEY,
  book_id INTEGER NOT NULL REFERENCES books(book_id),
  member_id INTEGER NOT NULL REFERENCES members(member_id),
  loan_date TEXT NOT NULL,
  due_date TEXT NOT NULL,
  return_date TEXT
);
"""

GENRES = ["Fantasy", "Mystery", "Science", "History", "Poetry", "Romance"]
TITLE_A = [
    "Silent",
    "Hidden",
    "Last",
    "Golden",
    "Broken",
    "Northern",
    "Secret",
    "Endless",
    "Quiet",
    "Lost",
]
TITLE_B = [
    "River",
    "Garden",
    "Empire",
    "Letter",
    "Machine",
    "Winter",
    "Harbor",
    "Voyage",
    "Orchard",
    "Tide",
]


def build_library(conn: sqlite3.Connection, rng: random.Random) -> None:
    conn.executescript(LIBRARY_SCHEMA)
    for aid in range(1, 26):
        conn.execute(
            "INSERT INTO authors VALUES (?,?,?,?)",
            (aid, _name(rng), None if rng.random() < 0.1 else rng.randint(1900, 1990),
             None if rng.random() < 0.15 else rng.choice(CITIES)[1]),
        )  # fmt: skip
    titles = [f"The {a} {b}" for a in TITLE_A for b in TITLE_B]
    rng.shuffle(titles)
    for bid in range(1, 81):
        conn.execute(
            "INSERT INTO books VALUES (?,?,?,?,?,?,?)",
            (bid, titles[bid - 1], rng.randint(1, 22),  # authors 23-25 have no books
             rng.choice(GENRES), rng.randint(1950, 2023),
             None if rng.random() < 0.1 else rng.choice([120, 240, 320, 320, 480, 640]),
             f"978-{rng.randrange(10**9):09d}"),
        )  # fmt: skip
    for mid in range(1, 51):
        conn.execute(
            "INSERT INTO members VALUES (?,?,?,?,?)",
            (mid, _name(rng), _day(rng, date(2018, 1, 1), date(2023, 12, 31)),
             rng.choice(["standard", "standard", "premium"]), rng.choice(CITIES[:6])[0]),
        )  # fmt: skip
    for lid in range(1, 301):
        loan = date(2023, 1, 1) + timedelta(days=rng.randrange(540))
        due = loan + timedelta(days=21)
        back = rng.random()
        returned = None if back < 0.12 else (loan + timedelta(days=rng.randint(1, 35))).isoformat()
        conn.execute(
            "INSERT INTO loans VALUES (?,?,?,?,?,?)",
            (lid, rng.randint(1, 80), rng.randint(1, 50), loan.isoformat(), due.isoformat(), returned),
        )  # fmt: skip


BUILDERS: dict[str, Callable[[sqlite3.Connection, random.Random], None]] = {
    "retail": build_retail,
    "university": build_university,
    "flights": build_flights,
    "library": build_library,
}
"""db_id -> function that creates its tables and rows."""
SEED = 20_240_601


def build_database(db_id: str, path: Path) -> None:
    """Create one database file (written aside, then renamed into place)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    os.close(fd)
    conn = sqlite3.connect(tmp)
    try:
        conn.execute("PRAGMA foreign_keys = ON")
        BUILDERS[db_id](conn, random.Random(f"{SEED}-{db_id}"))
        conn.commit()
        problems = conn.execute("PRAGMA foreign_key_check").fetchall()
        if problems:
            raise RuntimeError(f"{db_id}: foreign key violations {problems[:3]}")
    finally:
        conn.close()
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def task_rows(questions: list[Question] = QUESTIONS) -> list[TaskRow]:
    """The questions as `sql` task rows (databases referenced relative to the build folder)."""
    rows = []
    for i, q in enumerate(questions):
        row: TaskRow = {
            "task_id": f"bundled-{i:03d}",
            "index": i,
            "question": q.question,
            "db_id": q.db_id,
            "gold_sql": q.sql,
            "difficulty": q.difficulty,
            "db": f"database/{q.db_id}/{q.db_id}.sqlite",
        }
        if q.wrong:
            row["wrong_sql"] = q.wrong
        rows.append(row)
    return rows


def build(out: str | Path, *, check: bool = True) -> Path:
    """Build everything under `out`; return it. With `check`, every gold query must run and
    return rows, and every known-wrong query must differ from gold."""
    out = Path(out)
    for db_id in BUILDERS:
        build_database(db_id, out / "database" / db_id / f"{db_id}.sqlite")
    rows = task_rows()
    if check:
        _check(out, rows)
    dev = [
        {"db_id": r["db_id"], "question": r["question"], "query": r["gold_sql"],
         "difficulty": r["difficulty"]}
        for r in rows
    ]  # fmt: skip
    _write(out / "dev.json", json.dumps(dev, indent=1, ensure_ascii=False))
    _write(out / "tasks.jsonl", "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    _write(out / "gold.sql", "".join(f"{r['gold_sql']}\t{r['db_id']}\n" for r in rows))
    return out


def _write(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def _check(out: Path, rows: list[TaskRow]) -> None:
    from skyrl_gym.envs.sql.metrics import Metric, execution_match
    from skyrl_sdk.tools.sqldb import open_database

    dbs = {db_id: open_database(out / "database" / db_id / f"{db_id}.sqlite") for db_id in BUILDERS}
    try:
        for row in rows:
            db = dbs[str(row["db_id"])]
            gold = db.execute(str(row["gold_sql"]), timeout_s=10)
            if not gold.ok or not gold.rows:
                raise RuntimeError(
                    f"{row['task_id']}: gold query {'returned no rows' if gold.ok else 'failed: ' + gold.message}"
                )
            if "wrong_sql" in row:
                for metric in Metric:
                    result = execution_match(
                        metric, str(row["wrong_sql"]), str(row["gold_sql"]), [db]
                    )
                    if result.correct:
                        raise RuntimeError(
                            f"{row['task_id']}: wrong_sql matches gold under {metric}"
                        )
    finally:
        for db in dbs.values():
            db.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="output folder")
    args = parser.parse_args()
    out = build(args.out)
    print(f"built {len(QUESTIONS)} questions over {len(BUILDERS)} databases in {out}")


if __name__ == "__main__":
    main()
