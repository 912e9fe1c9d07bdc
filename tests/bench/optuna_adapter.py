#!/usr/bin/python3
"""Drives Optuna's TPE sampler over a benchmark table for bench_tuners, one JSON object per line.

Requests on stdin, one reply line each on stdout:
  {"cmd":"new_study","seed":S,"space":{"knob":["v1","v2",...],...},"enqueue":{"knob":"v",...}}  -> {"ok":true}
  {"cmd":"ask"}                                           -> {"number":N,"params":{"knob":"v",...}}
  {"cmd":"tell","number":N,"state":"complete","value":X}  -> {"ok":true}   (X: log step time, minimized)
  {"cmd":"tell","number":N,"state":"fail"}                -> {"ok":true}   (OOM or invalid: TrialState.FAIL)
End of input ends the process. Run with Debian's /usr/bin/python3 (python3-optuna 3.1.0).
"""
import json
import sys

import optuna

optuna.logging.set_verbosity(optuna.logging.WARNING)


def main():
    study = None
    space = {}
    pending = {}
    for line in sys.stdin:
        if not line.strip():
            continue
        msg = json.loads(line)
        cmd = msg["cmd"]
        if cmd == "new_study":
            # Default TPE settings, as an Optuna user would run it; the seed makes runs repeatable.
            sampler = optuna.samplers.TPESampler(seed=int(msg["seed"]))
            study = optuna.create_study(direction="minimize", sampler=sampler)
            space = msg["space"]
            pending = {}
            if msg.get("enqueue"):
                study.enqueue_trial(msg["enqueue"])
            reply = {"ok": True}
        elif cmd == "ask":
            trial = study.ask()
            params = {name: trial.suggest_categorical(name, values) for name, values in space.items()}
            pending[trial.number] = trial
            reply = {"number": trial.number, "params": params}
        elif cmd == "tell":
            trial = pending.pop(msg["number"])
            if msg["state"] == "complete":
                study.tell(trial, float(msg["value"]))
            else:
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
            reply = {"ok": True}
        else:
            reply = {"ok": False, "error": "unknown cmd " + cmd}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
