"""A static HTML report of trajectories: one self-contained page, no server, no scripts needed.

Each episode shows its header (id, reward, stop reason, trainability), the conversation
(messages, tool calls, parse errors, per-turn rewards and timings), and the token view of
every training segment: one span per token, green for sampled tokens (loss mask 1, hover for
the logprob and policy version), grey for prompt and observation tokens (mask 0).
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable, Sequence

from skyrl_sdk.agents.trajectory import Trajectory

Decode = Callable[[Sequence[int]], str]

_CSS = """
body{font-family:system-ui,sans-serif;margin:1.5rem;color:#222;background:#fafafa}
h1{font-size:1.4rem} .episode{background:#fff;border:1px solid #ddd;border-radius:6px;
margin:1rem 0;padding:.5rem 1rem} summary{cursor:pointer;font-weight:600}
.badge{display:inline-block;padding:0 .4rem;border-radius:4px;margin-left:.4rem;font-size:.85rem}
.done{background:#d4f5d4}.error{background:#f8d0d0}.other{background:#f3e8c4}
.msg{border-left:4px solid #ccc;margin:.4rem 0;padding:.2rem .6rem;white-space:pre-wrap;
font-family:ui-monospace,monospace;font-size:.85rem}
.role-system{border-color:#b07cc6}.role-user{border-color:#4a9fd8}.role-tool{border-color:#d8a64a}
.role-assistant{border-color:#3aa35b;background:#f2fbf4}
.meta{color:#666;font-size:.8rem} .calls{color:#8a5a00;font-size:.8rem}
.perr{color:#b00020;font-size:.8rem}
.tokens{font-family:ui-monospace,monospace;font-size:.8rem;line-height:1.7;white-space:pre-wrap;
word-break:break-all;border:1px solid #eee;padding:.4rem}
.tok{border-radius:2px;padding:0 1px;margin:0 1px 0 0}
.m0{background:#eee;color:#555}.m1{background:#c7efcf;color:#0b4f1c}
table.summary{border-collapse:collapse} table.summary td,table.summary th{border:1px solid #ddd;
padding:.2rem .6rem;text-align:left}
"""


def _esc(text: str) -> str:
    return html.escape(text, quote=True)


def render_html(
    trajectories: Sequence[Trajectory], *, decode: Decode | None = None, title: str = "trajectories"
) -> str:
    """The report page for `trajectories`. `decode` turns one id into text (ids shown otherwise)."""
    n = len(trajectories)
    mean = sum(t.reward for t in trajectories) / n if n else 0.0
    successes = sum(t.success for t in trajectories)
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>{_esc(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{_esc(title)}</h1>",
        "<table class='summary'><tr><th>episodes</th><th>mean reward</th>"
        "<th>success rate</th></tr>",
        f"<tr><td id='n-episodes'>{n}</td><td id='mean-reward'>{mean:.3f}</td>",
        # A rate, with the count it comes from: a bare count reads as a rate on small pages.
        f"<td id='success-rate'>{successes / n if n else 0.0:.0%} ({successes}/{n})</td>"
        "</tr></table>",
    ]
    parts.extend(_episode(t, decode) for t in trajectories)
    parts.append("</body></html>")
    return "".join(parts)


def _episode(t: Trajectory, decode: Decode | None) -> str:
    kind = (
        "done" if t.stop_reason.value == "done" else "error" if t.stop_reason.is_error else "other"
    )
    head = (
        f"<summary>{_esc(t.episode_id)}"
        f"<span class='badge {kind} stop-reason'>{_esc(t.stop_reason.value)}</span>"
        f"<span class='badge other'>reward <span class='reward'>{t.reward:g}</span></span>"
        f"<span class='badge other'>{len(t.turns)} turns</span>"
        f"<span class='badge {'done' if t.trainable else 'other'}'>"
        f"{'trainable' if t.trainable else 'text-only'}</span></summary>"
    )
    body = [
        f"<div class='meta'>task {_esc(t.task_id)} · env {_esc(t.env_id)} · policy "
        f"{_esc(t.policy)} · {t.duration_s:.2f} s</div>"
    ]
    if t.error:
        body.append(f"<div class='perr'>error: {_esc(t.error)}</div>")
    body.extend(_message(m) for m in t.prompt_messages)
    for turn in t.turns:
        meta = (
            f"turn {turn.index} · reward {turn.reward:g} · {len(turn.token_ids)} tokens · "
            f"{turn.finish_reason.value} · llm {turn.llm_s * 1000:.0f} ms · env "
            f"{turn.env_s * 1000:.0f} ms"
        )
        body.append(_message({"role": "assistant", "content": turn.action}, meta))
        if turn.tool_calls:
            calls = "; ".join(
                f"{c.name}({json.dumps(c.arguments, ensure_ascii=False)})" for c in turn.tool_calls
            )
            body.append(f"<div class='calls'>tool calls: {_esc(calls)}</div>")
        if turn.parse_error is not None:
            body.append(
                f"<div class='perr'>parse error ({_esc(turn.parse_error.kind.value)}): "
                f"{_esc(turn.parse_error.message)}</div>"
            )
        body.extend(_message(m) for m in turn.observation)
    for index, segment in enumerate(t.segments):
        body.append(f"<h4>tokens, segment {index} ({_esc(segment.start.value)})</h4>")
        body.append(_tokens(t, index, decode))
    return f"<details class='episode' data-episode='{_esc(t.episode_id)}' open>{head}{''.join(body)}</details>"


def _message(m: dict, meta: str = "") -> str:
    role = str(m.get("role", "?"))
    label = f"{role}{' · ' + meta if meta else ''}"
    return (
        f"<div class='msg role-{_esc(role)}'><div class='meta'>{_esc(label)}</div>"
        f"{_esc(str(m.get('content', '')))}</div>"
    )


def _tokens(t: Trajectory, segment: int, decode: Decode | None) -> str:
    spans = []

    def span(token: int, mask: int, tip: str) -> None:
        text = decode([token]) if decode is not None else f"[{token}]"
        spans.append(f"<span class='tok m{mask}' title='{_esc(tip)}'>{_esc(text)}</span>")

    for token in t.segments[segment].prompt_ids:
        span(token, 0, f"id {token} · prompt")
    for turn in (x for x in t.turns if x.segment == segment):
        for i, token in enumerate(turn.token_ids):
            lp = turn.logprobs[i] if turn.logprobs is not None else None
            tip = f"id {token} · logprob {lp:.4f}" if lp is not None else f"id {token}"
            span(token, 1, f"{tip} · v{turn.policy_versions[i]} · turn {turn.index}")
        for token in turn.observation_ids:
            span(token, 0, f"id {token} · observation")
    return f"<div class='tokens'>{''.join(spans)}</div>"
