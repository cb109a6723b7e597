#!/bin/sh
# Claude Code as a skyrl command agent:
#   skyrl harbor run -p TASK --policy SPEC -o OUT \
#     --agent "command:sh $PWD/examples/harnesses/claude_code.sh $PWD/.venvs/npm-claude-code/node_modules/.bin/claude" \
#     --agent-bind examples/harnesses --agent-bind .venvs/npm-claude-code
#
# Runs inside the trial's sandbox. The command agent exports OpenAI's variables only, so
# this script maps them: ANTHROPIC_BASE_URL is the session URL without its /v1 (Claude
# Code appends /v1/messages), ANTHROPIC_API_KEY the session key. Every model alias (and
# sub-agents) names the served model; non-essential traffic (update checks, telemetry,
# error reports) is off; IS_SANDBOX=1 lets bypassPermissions run as root (the sandbox is
# ours, Claude Code's own permission prompts would block a headless run). `claude -p`
# runs once on the instruction with a JSON result on stdout, stdin closed; HOME is the
# fresh directory the command agent made in the sandbox's /tmp.
set -eu
claude=${1:-claude}
: "${OPENAI_BASE_URL:?not run as a skyrl command agent}" "${OPENAI_API_KEY:?}"
: "${SKYRL_INSTRUCTION_FILE:?}"
model=${OPENAI_MODEL:-skyrl}
export ANTHROPIC_BASE_URL="${OPENAI_BASE_URL%/v1}"
export ANTHROPIC_API_KEY="$OPENAI_API_KEY"
export ANTHROPIC_MODEL="$model"
export ANTHROPIC_DEFAULT_HAIKU_MODEL="$model" ANTHROPIC_DEFAULT_SONNET_MODEL="$model"
export ANTHROPIC_DEFAULT_OPUS_MODEL="$model" CLAUDE_CODE_SUBAGENT_MODEL="$model"
export CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_AUTOUPDATER=1
export DISABLE_TELEMETRY=1 DISABLE_ERROR_REPORTING=1 IS_SANDBOX=1
unset OPENAI_API_KEY OPENAI_BASE_URL OPENAI_API_BASE
exec "$claude" -p "$(cat "$SKYRL_INSTRUCTION_FILE")" --model "$model" \
  --permission-mode bypassPermissions --output-format json </dev/null
