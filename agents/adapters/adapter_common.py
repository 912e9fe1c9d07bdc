"""What both adapters share: reading the request, the prompt from prompt.md, the response."""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def read_request():
    return json.load(sys.stdin)


def _compact(value, limit=6000):
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= limit else text[:limit] + " ... (cut)"


def prompt(request):
    with open(os.path.join(HERE, "prompt.md")) as f:
        template = f.read()
    scope = request.get("scope", {})
    trials = [{k: t.get(k) for k in ("candidate", "outcome", "step_time_s", "step_time_s_at_least",
                                      "peak_memory_bytes", "peak_memory_bytes_above", "violation", "build_error")
               if k in t} for t in request.get("trials", [])]
    return template.format(goal=request.get("goal") or "a faster training step",
                           editable=", ".join(scope.get("editable", [])),
                           protected=", ".join(scope.get("protected", [])) or "(none)",
                           baseline=_compact(request.get("baseline", {})),
                           trials=_compact(trials),
                           patches=_compact(request.get("patches", [])),
                           max_patches=request.get("max_patches", 1))


def respond(patches, tokens=0, cost=0.0, model=""):
    json.dump({"protocol": 1, "patches": patches, "knob_priors": [],
               "usage": {"tokens": int(tokens), "cost": float(cost), "model": model}}, sys.stdout)
    sys.stdout.write("\n")
