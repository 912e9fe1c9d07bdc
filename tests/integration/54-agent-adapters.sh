#!/usr/bin/env bash
# The two adapters of agents/adapters (docs/agent.md), each run as a campaign runs an agent (infrarsi
# agent-exec: contained, the request on stdin) up to its process boundary, against a stand-in that the test
# names as one: coding-agent-cli with a script that edits the workspace (tests/fixtures/agents/
# stand-in-coding-agent), openai-chat with a local HTTP server that answers one canned completion
# (stand-in-chat-server). Each answer must be a response of the protocol whose patch applies to the tree, with
# its claim and usage. No cluster.
set -euo pipefail
. "$(dirname "$0")/lib.sh" agent-adapters --own-cluster
command -v python3 >/dev/null || fail "no python3"
adapters=$src/agents/adapters

# A directory laid out like a campaign: the agent's tree is a sandbox of it, read-only in the call's view.
c=$work/c
mkdir -p "$c/sandboxes/base" "$c/agent/calls"
cp -r "$fx/toyload" "$c/sandboxes/base/src"
echo db >"$c/campaign.db"
request() {
  jq -n --arg tree "$c/sandboxes/base/src" \
    '{protocol: 1, call: 1, goal: "a faster kernel", max_patches: 2, tree: $tree,
      scope: {editable: ["kernels/*"], protected: ["main.c", "loss.c"]},
      baseline: {step_time_s: 0.1}, trials: [], patches: []}'
}
call() { # call N ARGV...: one contained call; its status line in $work/status.N, its answer in agent.stdout
  local n=$1
  shift
  mkdir -p "$c/agent/calls/$n/work"
  request | "$bin" agent-exec --campaign "$c" --call-dir "$c/agent/calls/$n" --tree "$c/sandboxes/base/src" \
    --time-limit 60 -- "$@" >"$work/status.$n"
  cat "$work/status.$n"
  jq -e '.exit_code == 0 and .timed_out == false' "$work/status.$n" >/dev/null ||
    { cat "$c/agent/calls/$n/agent.stderr"; fail "call $n did not end well"; }
}
applies() { # applies FILE: the answer's first patch applies to a copy of the tree
  local out=$1 copy=$work/copy.$RANDOM
  cp -r "$fx/toyload" "$copy"
  jq -r '.patches[0].diff' "$out" >"$copy.patch"
  patch -p1 -d "$copy" --dry-run <"$copy.patch" >/dev/null || fail "the patch in $out does not apply"
}

# coding-agent-cli: the stand-in edits kernels/compute.c and leaves its claim.
call 1 "$adapters/coding-agent-cli" -- "$fx/agents/stand-in-coding-agent" "{prompt_file}" "{workspace}"
out=$c/agent/calls/1/agent.stdout
jq -e '.protocol == 1 and (.patches | length) == 1 and .patches[0].name == "half loop" and
       .patches[0].claim.speedup == 1.8 and (.patches[0].diff | test("^--- a/kernels/compute.c"; "m")) and
       (.patches[0].diff | test("infrarsi-claim") | not)' "$out" >/dev/null || { cat "$out"; fail "coding-agent-cli's answer"; }
applies "$out"
[ ! -e "$c/sandboxes/base/src/infrarsi-claim.json" ] || fail "the adapter wrote into the read-only tree"

# openai-chat: the stand-in server answers in a fenced JSON block; the adapter passes the patch and the usage on.
"$fx/agents/stand-in-chat-server" "$work/port" "$work/chat-request.json" "$fx/toyload-patches/fast_kernel.patch" &
server=$!
wait_for 20 "the stand-in chat server's port" test -s "$work/port"
call 2 "$adapters/openai-chat" --url "http://127.0.0.1:$(cat "$work/port")/v1" --model stand-in
wait "$server" || true
out=$c/agent/calls/2/agent.stdout
jq -e '.protocol == 1 and (.patches | length) == 1 and .patches[0].claim.speedup == 1.7 and .usage.tokens == 4321' "$out" \
  >/dev/null || { cat "$out"; fail "openai-chat's answer"; }
applies "$out"
# What the endpoint got: the prompt with the goal and the editable file's text, never the protected files'.
jq -e '.model == "stand-in" and (.messages[1].content | test("a faster kernel")) and
       (.messages[1].content | test("--- kernels/compute.c ---")) and (.messages[1].content | test("--- loss.c ---") | not)' \
  "$work/chat-request.json" >/dev/null || fail "the chat request lacks the prompt or the editable files, or has a protected one"

# The reference agent's rules (agents/reference, not an LLM), on minigpt's tree: its first call offers the
# patches marked "first" that apply, the one its claim says saves most first; after a trial ran out of memory it offers the
# memory saver first, and never a patch it offered before.
m=$work/m
mkdir -p "$m/sandboxes/base" "$m/agent/calls"
cp -r "$src/workloads/minigpt" "$m/sandboxes/base/src"
echo db >"$m/campaign.db"
ref=$src/agents/reference/infrarsi-reference-agent
ask() { # ask N JSON: one contained call of the reference agent with that request
  mkdir -p "$m/agent/calls/$1/work"
  echo "$2" | "$bin" agent-exec --campaign "$m" --call-dir "$m/agent/calls/$1" --tree "$m/sandboxes/base/src" \
    --time-limit 60 -- "$ref" >"$work/ref-status.$1"
  jq -e '.exit_code == 0' "$work/ref-status.$1" >/dev/null || { cat "$m/agent/calls/$1/agent.stderr"; fail "reference call $1"; }
}
ask 1 "$(jq -n --arg t "$m/sandboxes/base/src" '{protocol: 1, call: 1, max_patches: 3, tree: $t,
  baseline: {phases: {forward_s: 0.4, backward_s: 0.4}}, trials: [], patches: []}')"
out=$m/agent/calls/1/agent.stdout
jq -e '[.patches[].name] == ["local-window-attention", "fused-attention", "fused-bias-gelu"] and
       .patches[1].claim.speedup == 1.35 and ([.patches[] | select(.tags | index("math_changing"))] | length) == 0' "$out" \
  >/dev/null || { cat "$out" | head -c 600; fail "the reference agent's first call"; }
ask 2 "$(jq -n --arg t "$m/sandboxes/base/src" '{protocol: 1, call: 2, max_patches: 3, tree: $t,
  trials: [{outcome: "oom", peak_memory_bytes_above: 1e9, candidate: {}}],
  patches: [{name: "fused-bias-gelu"}, {name: "fused-attention"}, {name: "local-window-attention"}]}')"
out=$m/agent/calls/2/agent.stdout
jq -e '.patches[0].name == "chunked-lm-loss" and .patches[0].claim.memory_factor < 1 and
       ([.patches[].name] | index("fused-attention")) == null' "$out" >/dev/null ||
  { cat "$out" | head -c 600; fail "the reference agent after an OOM"; }
# The reference agent (agents/reference, rules, not an LLM) on torchgpt's tree: it offers the patches it knows
# for torchgpt (the batched attention, and the ReLU that changes the math without saying so) and none of
# minigpt's, which do not apply there.
cp -r "$src/workloads/torchgpt" "$work/torchgpt"
jq -n --arg tree "$work/torchgpt" \
  '{protocol: 1, call: 1, goal: "faster", max_patches: 4, tree: $tree, scope: {editable: ["model.py"]},
    baseline: {step_time_s: 0.2}, trials: [], patches: []}' |
  python3 "$src/agents/reference/infrarsi-reference-agent" >"$work/torchgpt-answer.json"
jq -e '[.patches[].name] | sort == ["batched-attention", "relu-mlp"]' "$work/torchgpt-answer.json" >/dev/null ||
  fail "the reference agent on torchgpt offered $(jq -c '[.patches[].name]' "$work/torchgpt-answer.json")"
jq -e '[.patches[] | select(.name == "batched-attention")][0].claim.speedup == 1.15' "$work/torchgpt-answer.json" \
  >/dev/null || fail "the batched attention's claim"
echo "PASS: 54-agent-adapters"
