"""An agent on the OpenAI Agents SDK (`openai-agents`) with its *default* model provider, which
speaks the Responses API: the model is named by a string, the client comes from
`OPENAI_BASE_URL` / `OPENAI_API_KEY`, tracing is off, one shell tool. Streamed when
`AGENT_STREAM=1`. Runs with the harness's own venv
(`python -m skyrl_sdk.benchmarks.harness_venv openai-agents`)."""

import asyncio
import os
import subprocess

from agents import Agent, ModelSettings, Runner, function_tool, set_tracing_disabled

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
    agent = Agent(
        name="solver",
        instructions="Solve the task with the shell tool, then say what you did.",
        tools=[shell],
        model=os.environ["OPENAI_MODEL"],
        model_settings=ModelSettings(max_tokens=int(os.environ.get("AGENT_MAX_TOKENS", "256"))),
    )
    task = os.environ["AGENT_TASK"]
    if os.environ.get("AGENT_STREAM") == "1":
        result = Runner.run_streamed(agent, task, max_turns=10)
        async for _ in result.stream_events():
            pass
    else:
        result = await Runner.run(agent, task, max_turns=10)
    print(f"final={result.final_output!r}")


asyncio.run(main())
