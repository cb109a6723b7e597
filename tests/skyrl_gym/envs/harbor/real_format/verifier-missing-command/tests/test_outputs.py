from pathlib import Path


def test_status() -> None:
    assert Path("/app/status.txt").read_text().strip() == "ready"
