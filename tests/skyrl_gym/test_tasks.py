import json

import pytest

from skyrl_gym.tasks import TaskError, load_tasks, validate_task


def test_round_trip(tmp_path):
    rows = [{"task_id": "a", "q": 1}, {"task_id": 2, "q": "ü"}]
    text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    (tmp_path / "t.jsonl").write_text(text, encoding="utf-8")
    assert load_tasks(tmp_path / "t.jsonl", ["q"]) == rows


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (['{"task_id": "a", "q": 1}', "{not json"], r"t.jsonl:2: not valid JSON"),
        (
            ['{"task_id": "a", "q": 1}', '{"task_id": "a", "q": 2}'],
            r"t.jsonl:2: duplicate task_id 'a'",
        ),
        (['{"q": 1}'], r"t.jsonl:1: .*no usable 'task_id'"),
        (['{"task_id": true}'], r"no usable 'task_id'"),
        (["[1, 2]"], r"must be a JSON object, got list"),
        (['{"task_id": "x"}'], r"t.jsonl:1: task 'x' is missing field\(s\) 'q'"),
    ],
)
def test_malformed_datasets_name_file_line_and_field(tmp_path, lines, message):
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(TaskError, match=message):
        load_tasks(path, ["q"])


def test_missing_file_and_blank_lines(tmp_path):
    with pytest.raises(TaskError, match="dataset not found"):
        load_tasks(tmp_path / "missing.jsonl")
    path = tmp_path / "t.jsonl"
    path.write_text("\n" + json.dumps({"task_id": "a"}) + "\n\n")
    assert len(load_tasks(path)) == 1


def test_validate_task_rejects_non_dicts():
    with pytest.raises(TaskError, match="got str"):
        validate_task("row")
