"""The `swe` env: SWE-bench instances in sandboxed repositories (see `env.py`)."""
