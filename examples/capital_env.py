import skyrl_gym
from skyrl_gym import ToolEnv
from skyrl_gym.tool_env import Tooling
from skyrl_sdk.tools import tool

CAPITALS = {"France": "Paris", "Japan": "Tokyo", "Peru": "Lima"}


@tool
def capital(country: str) -> str:
    """Look up the capital of a country.

    Args:
        country: The country's English name.
    """
    return CAPITALS.get(country, "unknown country")


class CapitalEnv(ToolEnv):
    """Find a country's capital with the `capital` tool, then call `answer`."""

    required_fields = ("country",)
    system_prompt = "Answer questions about capitals: use the capital tool, then answer."

    def __init__(self, tasks=None, tool_format="xml"):  # or "hermes", "openai"
        tasks = tasks or [{"task_id": c, "country": c} for c in CAPITALS]
        super().__init__(tasks, Tooling.build([capital], tool_format, self.system_prompt))

    def prompt(self, task):
        return f"What is the capital of {task['country']}?"

    def score(self, task, answer):
        return float(answer.strip() == CAPITALS[task["country"]])


skyrl_gym.register("capitals", CapitalEnv, description="Capitals via a tool.", max_turns=4)
env = skyrl_gym.make("capitals")
env.reset(options={"task": {"task_id": "pe", "country": "Peru"}})
observation, *_ = env.step("<capital>Peru</capital>")
assert observation == [{"role": "user", "content": "<observation>\nLima\n</observation>"}]
_, reward, terminated, _, _ = env.step("<answer>Lima</answer>")
assert (reward, terminated) == (1.0, True)
skyrl_gym.check_env(lambda: skyrl_gym.make("capitals"))
