#!/bin/sh
# Codex CLI as a skyrl command agent:
#   skyrl harbor run -p TASK --policy SPEC -o OUT \
#     --agent "command:sh $PWD/examples/harnesses/codex.sh $PWD/.venvs/npm-codex/node_modules/.bin/codex" \
#     --agent-bind examples/harnesses --agent-bind .venvs/npm-codex
#
# Runs inside the trial's sandbox. The command agent sets OPENAI_BASE_URL (this episode's
# session URL, through the only forwarded port), OPENAI_API_KEY (its session key),
# OPENAI_MODEL, SKYRL_INSTRUCTION_FILE and a fresh HOME in the sandbox's /tmp. This script
# writes Codex's config there (a custom Responses-API provider whose key is read from
# OPENAI_API_KEY; update checks, analytics, feedback, OpenTelemetry and web search off;
# no retries) and runs `codex exec` once on the instruction, its own sandbox off (ours
# confines it), outside a git repository, keeping no session files, stdin closed.
set -eu
codex=${1:-codex}
: "${OPENAI_BASE_URL:?not run as a skyrl command agent}" "${OPENAI_API_KEY:?}"
: "${SKYRL_INSTRUCTION_FILE:?}"
export CODEX_HOME="$HOME/.codex"
mkdir -p "$CODEX_HOME"
cat >"$CODEX_HOME/config.toml" <<TOML
model = "${OPENAI_MODEL:-skyrl}"
model_provider = "skyrl"
check_for_update_on_startup = false
web_search = "disabled"

[analytics]
enabled = false

[feedback]
enabled = false

[otel]
exporter = "none"

[model_providers.skyrl]
name = "skyrl"
base_url = "$OPENAI_BASE_URL"
env_key = "OPENAI_API_KEY"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0
TOML
exec "$codex" exec --strict-config --skip-git-repo-check --ephemeral \
  --sandbox danger-full-access -- "$(cat "$SKYRL_INSTRUCTION_FILE")" </dev/null
