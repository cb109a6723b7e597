from pathlib import Path


def test_count_file_exists() -> None:
    assert Path("/app/count.txt").is_file()


def test_count_is_right() -> None:
    words = Path("/app/words.txt").read_text().splitlines()
    assert Path("/app/count.txt").read_text().strip() == str(len(words))
