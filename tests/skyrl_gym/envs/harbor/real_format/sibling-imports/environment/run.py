def run_tasks(path: str) -> str:
    with open(path) as f:
        return " ".join(sorted(f.read().split()))
