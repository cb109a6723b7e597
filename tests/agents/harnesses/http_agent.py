"""A minimal tool-calling chat agent on the standard library only (`urllib`): no side venv.

Sends the instruction, runs each `shell` tool call the model makes, sends the results back,
until the model answers without a tool call or `AGENT_MAX_TURNS` calls were made. With
`AGENT_PROBE_URL` set, it first tries that URL with its own key and prints the status."""

import json
import os
import subprocess
import urllib.error
import urllib.request

BASE = os.environ["OPENAI_BASE_URL"]
KEY = os.environ["OPENAI_API_KEY"]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "shell",
            "description": "Run a shell command.",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string"}},
                "required": ["command"],
            },
        },
    }
]


def post(url, body):
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


probe = os.environ.get("AGENT_PROBE_URL")
if probe:
    status, _ = post(
        probe + "/chat/completions",
        {
            "model": os.environ["OPENAI_MODEL"],
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 4,
        },
    )
    print(f"PROBE {status}")

messages = [{"role": "user", "content": os.environ["SKYRL_INSTRUCTION"]}]
for _ in range(int(os.environ.get("AGENT_MAX_TURNS", "5"))):
    status, reply = post(
        BASE + "/chat/completions",
        {
            "model": os.environ["OPENAI_MODEL"],
            "messages": messages,
            "tools": TOOLS,
            "max_tokens": int(os.environ.get("AGENT_MAX_TOKENS", "256")),
        },
    )
    if status != 200:
        raise SystemExit(f"model call failed: {status} {reply}")
    message = reply["choices"][0]["message"]
    messages.append({k: v for k, v in message.items() if v is not None})
    calls = message.get("tool_calls") or []
    if not calls:
        break
    for call in calls:
        command = json.loads(call["function"]["arguments"]).get("command", "")
        done = subprocess.run(
            ["/bin/sh", "-c", command], capture_output=True, text=True, timeout=30
        )
        messages.append(
            {"role": "tool", "tool_call_id": call["id"], "content": done.stdout + done.stderr}
        )
print(f"turns={sum(m['role'] == 'assistant' for m in messages)}")
