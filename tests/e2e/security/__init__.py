"""Red-team tests: one per known way to forge a reward or escape a sandbox (issue 14)."""
