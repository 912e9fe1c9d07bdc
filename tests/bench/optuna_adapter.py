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

import warnings

import optuna

optuna.logging.set_verbosity(optuna.logging.WARNING)
# multivariate TPE is marked experimental in 3.1 and says so on every study.
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)


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
            # TPE with its defaults except multivariate=True (Falkner et al. 2018's joint TPE, which Optuna
            # recommends and which is both stronger on interacting knobs and much faster per ask than one
            # independent estimator per parameter); "multivariate": false gives the plain default.
            multivariate = bool(msg.get("multivariate", True))
            sampler = optuna.samplers.TPESampler(seed=int(msg["seed"]), multivariate=multivariate)
            study = optuna.create_study(direction="minimize", sampler=sampler)
            space = {
                name: optuna.distributions.CategoricalDistribution(values)
                for name, values in msg["space"].items()
            }
            pending = {}
            if msg.get("enqueue"):
                study.enqueue_trial(msg["enqueue"])
            reply = {"ok": True}
        elif cmd == "ask":
            trial = study.ask(space)
            params = {name: trial.params[name] for name in space}
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
