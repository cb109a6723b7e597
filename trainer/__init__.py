"""RL training: algorithms as pure tensor functions, and (to come) the async trainer."""
