#!/usr/bin/python3
"""Drives an Optuna sampler over a benchmark table for bench_tuners, one JSON object per line.

Requests on stdin, one reply line each on stdout:
  {"cmd":"new_study","seed":S,"sampler":NAME,"space":{"knob":["v1",...],...},"enqueue":{"knob":"v",...}}
                                                          -> {"ok":true}
  {"cmd":"ask"}                                           -> {"number":N,"params":{"knob":"v",...}}
                                                             or {"exhausted":true}: the sampler has nothing
                                                             left to propose (SMAC3 once it has tried every
                                                             configuration of a small space)
  {"cmd":"tell","number":N,"state":"complete","value":X}  -> {"ok":true}   (X: log step time, minimized)
  {"cmd":"tell","number":N,"state":"infeasible"}          -> {"ok":true}   (an OOM: see below)
  {"cmd":"tell","number":N,"state":"fail"}                -> {"ok":true}   (a crash: TrialState.FAIL)
  {"cmd":"tell","number":N,"state":"invalid"}             -> {"ok":true}   (a combination outside the table:
                                                             for tpe-cl and gp a violated constraint, so the
                                                             sampler learns the region for free; GPSampler
                                                             ignores failed trials and would propose the same
                                                             point again; for tpe and smac as "fail")
End of input ends the process.

Samplers (NAME):
  tpe      multivariate TPE, an OOM a failed trial (what the 3.1 peer always did; works with Debian's 3.1);
  tpe-cl   multivariate TPE with the constant liar (pending trials of a batch count) and constraints_func: an
           OOM is a completed trial with a violated constraint and the worst value seen so far;
  gp       GPSampler with constraints_func, the OOM told as for tpe-cl (Optuna >= 4.2, needs torch);
  smac     SMAC3's HyperparameterOptimizationFacade (random forest, log EI), the baseline in its initial
           design, an OOM a crashed trial (SMAC has no constraints; crash cost: the worst value seen).
"""
import json
import sys

import warnings

import optuna

optuna.logging.set_verbosity(optuna.logging.WARNING)
# multivariate TPE, the constant liar and constraints are marked experimental and say so on every study.
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
warnings.filterwarnings("ignore", category=UserWarning)


class SmacStudy:
    """The few calls of an Optuna study the loop below makes, over SMAC3's ask/tell."""

    def __init__(self, seed, space, enqueue):
        import logging
        import tempfile

        from ConfigSpace import Categorical, Configuration, ConfigurationSpace
        from smac import HyperparameterOptimizationFacade, Scenario

        logging.getLogger("smac").setLevel(logging.ERROR)
        cs = ConfigurationSpace(seed=seed)
        cs.add([Categorical(name, values) for name, values in space.items()])
        self.dir = tempfile.TemporaryDirectory(prefix="bench-smac-")
        scenario = Scenario(cs, deterministic=True, n_trials=100000, seed=seed, output_directory=self.dir.name)
        extra = [Configuration(cs, values=enqueue)] if enqueue else []
        design = HyperparameterOptimizationFacade.get_initial_design(scenario, additional_configs=extra)
        self.smac = HyperparameterOptimizationFacade(scenario, lambda c, seed=0: 0.0, initial_design=design,
                                                     overwrite=True, logging_level=40)
        self.pending = {}
        self.number = 0
        self.exhausted = False

    def ask(self):
        from smac.main.exceptions import ConfigurationSpaceExhaustedException

        if self.exhausted:
            return None, None
        try:
            info = self.smac.ask()
        except (ConfigurationSpaceExhaustedException, StopIteration):
            # StopIteration: SMAC's trial generator ends after it has raised the exhaustion once.
            self.exhausted = True
            return None, None
        self.number += 1
        self.pending[self.number] = info
        return self.number, {k: str(v) for k, v in dict(info.config).items()}

    def tell(self, number, value, crashed):
        from smac.runhistory.dataclasses import TrialValue
        from smac.runhistory.enumerations import StatusType

        info = self.pending.pop(number)
        status = StatusType.CRASHED if crashed else StatusType.SUCCESS
        self.smac.tell(info, TrialValue(cost=value, status=status))


def set_constraint(trial, value, own):
    if own:
        trial.set_constraint("memory", value)
    else:
        trial.set_user_attr("constraint", [value])


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
            name = msg.get("sampler", "tpe")
            seed = int(msg["seed"])
            # Optuna >= 5 reads constraints a trial sets (Trial.set_constraint); 4.x needs constraints_func.
            own = hasattr(optuna.trial.Trial, "set_constraint")
            constraints = {} if own else {"constraints_func": lambda t: t.user_attrs.get("constraint", [-1.0])}
            if name == "smac":
                study = SmacStudy(seed, msg["space"], msg.get("enqueue"))
                worst = None
                sys.stdout.write(json.dumps({"ok": True}) + "\n")
                sys.stdout.flush()
                continue
            if name == "tpe":
                sampler = optuna.samplers.TPESampler(seed=seed, multivariate=multivariate)
            elif name == "tpe-cl":
                sampler = optuna.samplers.TPESampler(seed=seed, multivariate=True, constant_liar=True,
                                                     **constraints)
            elif name == "gp":
                sampler = optuna.samplers.GPSampler(seed=seed, **constraints)
            else:
                raise ValueError("unknown sampler " + name)
            worst = None
            study = optuna.create_study(direction="minimize", sampler=sampler)
            space = {
                name: optuna.distributions.CategoricalDistribution(values)
                for name, values in msg["space"].items()
            }
            pending = {}
            if msg.get("enqueue"):
                study.enqueue_trial(msg["enqueue"])
            reply = {"ok": True}
        elif cmd == "ask" and isinstance(study, SmacStudy):
            number, params = study.ask()
            reply = {"exhausted": True} if number is None else {"number": number, "params": params}
        elif cmd == "tell" and isinstance(study, SmacStudy):
            if msg["state"] == "complete":
                value = float(msg["value"])
                worst = value if worst is None else max(worst, value)
                study.tell(msg["number"], value, False)
            else:
                study.tell(msg["number"], worst if worst is not None else 0.0, True)
            reply = {"ok": True}
        elif cmd == "ask":
            trial = study.ask(space)
            params = {name: trial.params[name] for name in space}
            pending[trial.number] = trial
            reply = {"number": trial.number, "params": params}
        elif cmd == "tell":
            trial = pending.pop(msg["number"])
            if msg["state"] == "complete":
                value = float(msg["value"])
                worst = value if worst is None else max(worst, value)
                if name in ("tpe-cl", "gp"):
                    set_constraint(trial, -1.0, own)
                study.tell(trial, value)
            elif msg["state"] in ("infeasible", "invalid") and name in ("tpe-cl", "gp"):
                set_constraint(trial, 1.0, own)
                study.tell(trial, worst if worst is not None else 0.0)
            else:
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
            reply = {"ok": True}
        else:
            reply = {"ok": False, "error": "unknown cmd " + cmd}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
