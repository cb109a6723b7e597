import importlib.util

spec = importlib.util.spec_from_file_location("stats", "/app/stats.py")
stats = importlib.util.module_from_spec(spec)
spec.loader.exec_module(stats)

cases = [
    (stats.mean, [], None),
    (stats.median, [], None),
    (stats.mean, [1, 2, 3, 4], 2.5),
    (stats.median, [3, 1, 2], 2),
    (stats.median, [4, 1, 3, 2], 2.5),
    (stats.median, [7], 7),
    (stats.median, [10, -5, 0, 5, 100, 3], 4.0),
]
ok = True
for fn, arg, want in cases:
    try:
        got = fn(list(arg))
    except Exception as e:
        got = f"{type(e).__name__}: {e}"
    good = got == want if want is None else isinstance(got, int | float) and abs(got - want) < 1e-9
    print(fn.__name__, arg, "ok" if good else f"FAILED: got {got!r}, want {want!r}")
    ok &= good
raise SystemExit(0 if ok else 1)
