"""Shared fixtures: small hand-made databases and the bundled benchmark."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest

SHOP = """
CREATE TABLE city (id INTEGER PRIMARY KEY, name TEXT NOT NULL, country TEXT);
CREATE TABLE person (id INTEGER PRIMARY KEY, name TEXT, age INTEGER, city_id INTEGER REFERENCES city(id));
INSERT INTO city VALUES (1, 'Oslo', 'Norway'), (2, 'Lima', 'Peru'), (3, 'Pune', NULL);
INSERT INTO person VALUES (1, 'Ann', 31, 1), (2, 'Bob', 25, 2), (3, 'Cid', 31, 1),
                          (4, 'Dee', NULL, 3), (5, 'Eve', 40, 2);
"""


def make_sqlite(path: Path, script: str = SHOP) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path)
    conn.executescript(script)
    conn.commit()
    conn.close()
    return path


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def db_root(tmp_path: Path) -> Path:
    """A Spider-layout folder with one database, `shop`."""
    make_sqlite(tmp_path / "shop" / "shop.sqlite")
    return tmp_path


@pytest.fixture(scope="session")
def bundled() -> Path:
    from skyrl_gym.envs.sql.bundled import bundled_root

    return bundled_root()
