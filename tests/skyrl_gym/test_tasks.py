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


def test_task_row_requires_only_task_id_and_documents_every_key_of_the_bundled_rows():
    """`TaskRow` is a TypedDict: `task_id` required, and every field a bundled env's rows (and
    its generators') carry is one of its documented optional keys."""
    from skyrl_gym.envs.harbor.env import task_rows as harbor_rows
    from skyrl_gym.envs.lookup import make_tasks as lookup_rows
    from skyrl_gym.envs.lookup_chat import make_tasks as lookup_chat_rows
    from skyrl_gym.envs.math.env import bundled_tasks as math_rows
    from skyrl_gym.envs.python.env import bundled_tasks as python_rows
    from skyrl_gym.envs.search.env import bundled_tasks as search_rows
    from skyrl_gym.envs.sql.bundled import bundled_tasks as sql_rows
    from skyrl_gym.envs.sql_basic.env import bundled_tasks as sql_basic_rows
    from skyrl_gym.envs.terminal.env import bundled_tasks as terminal_rows
    from skyrl_gym.envs.terminal_gen.env import task_rows as terminal_gen_rows
    from skyrl_gym.tasks import TaskRow, seed_task

    assert TaskRow.__required_keys__ == {"task_id"}
    declared = TaskRow.__required_keys__ | TaskRow.__optional_keys__
    sources = {
        "harbor": harbor_rows(),
        "lookup": lookup_rows(),
        "lookup_chat": lookup_chat_rows(),
        "math": math_rows(),
        "python": python_rows(),
        "search": search_rows(),
        "sql": sql_rows(),
        "sql_basic": sql_basic_rows(),
        "terminal": terminal_rows(),
        "terminal_gen": terminal_gen_rows(per_family=1),
        "seed": [seed_task(3)],
    }
    for name, rows in sources.items():
        assert rows, name
        undeclared = {key for row in rows for key in row} - declared
        assert not undeclared, f"{name} rows carry undocumented keys {sorted(undeclared)}"


def test_a_row_keeps_the_keys_it_brings_beyond_the_documented_ones():
    """A TypedDict is a dict at runtime: a key `TaskRow` does not declare reaches the env."""
    from skyrl_gym.envs.lookup import LookupEnv

    row = {"task_id": "x", "key": "a", "value": "1", "my_field": {"nested": [1, 2]}}
    env = LookupEnv(tasks=[row])
    env.reset(options={"task": row})
    assert env.task is row
    assert env.task["my_field"] == {"nested": [1, 2]}
