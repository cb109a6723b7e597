"""A command agent built on the OpenAI Agents SDK (`openai-agents`): chat completions API,
tracing off, one shell tool, streamed. Runs inside the episode's sandbox with the harness's
own venv (`python -m skyrl_sdk.benchmarks.harness_venv openai-agents`)."""

import asyncio
import os
import subprocess

from openai import AsyncOpenAI

from agents import (
    Agent,
    ModelSettings,
    OpenAIChatCompletionsModel,
    Runner,
    function_tool,
    set_tracing_disabled,
)

set_tracing_disabled(True)


@function_tool
def shell(command: str) -> str:
    """Run a shell command in the task's working directory and return its output.

    Args:
        command: The command line.
    """
    done = subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True, timeout=30)
    return f"{done.stdout}{done.stderr}[exit {done.returncode}]"


async def main() -> None:
    client = AsyncOpenAI(
        base_url=os.environ["OPENAI_BASE_URL"], api_key=os.environ["OPENAI_API_KEY"], max_retries=0
    )
    agent = Agent(
        name="solver",
        instructions="Solve the task with the shell tool, then say what you did.",
        tools=[shell],
        model=OpenAIChatCompletionsModel(model=os.environ["OPENAI_MODEL"], openai_client=client),
        model_settings=ModelSettings(max_tokens=int(os.environ.get("AGENT_MAX_TOKENS", "256"))),
    )
    with open(os.environ["SKYRL_INSTRUCTION_FILE"], encoding="utf-8") as f:
        instruction = f.read()
    result = Runner.run_streamed(
        agent, instruction, max_turns=int(os.environ.get("AGENT_MAX_TURNS", "10"))
    )
    events = 0
    async for _ in result.stream_events():
        events += 1
    print(f"events={events} final={result.final_output!r}")


asyncio.run(main())
