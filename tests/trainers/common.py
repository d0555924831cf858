"""Shared harness for the nanwatch fault-injection trainers.

Each trainer describes a small seeded CPU model (a Trainer subclass) and calls main(). The
harness owns everything else, so the three modes run the same code path:

  (no flag)  train, then print {"trace": ...}
  --wait     print "READY <pid>", block on one line of stdin (the test attaches nanwatchd
             meanwhile), train, print {"trace": ...}
  --oracle   train with forward pre-hooks and forward hooks on every module (the method users
             trust), then print one line {"oracle": {...} or null, "trace": ...}; a trainer
             with watch_backward also hooks every autograd node of each backward pass
             (Node.register_hook: the node's outputs, in the engine's order) into
             "backward_first" and records the total gradient norm of each step in "grad_norms"
  --anomaly  train each step under torch.autograd.detect_anomaly(); print {"anomaly": {node,
             output, step, iteration} or null} where it raised (the node that returned NaN)
  --live     print "LIVE <pid>" and train at once, never waiting (the daemon attaches to a run
             in flight), printing STEP n after each step (or each --progress-every N-th);
             lines on stdin, read between steps without blocking, ask for the fault
             ("FAULT <n>": at step n; "fault": 3 steps ahead; "FAULT AT <n> (now <step>)" is
             printed; --fault-step sets it from the start, as an oracle run of the same fault
             does; either way training ends --after-fault steps after it) or for a new
             optimizer ("refold": its state starts over, as in a new fold; "REFOLD AT <step>")
  --in-thread  (with the above) train in a thread started once ready: the training loop is then
             a frame entered from C after the attach, as a launcher's or loader's thread is

The hooks only observe: they return None and never touch the tensors they are given. The trace
(every loss as float.hex, a hash of the final parameters) lets a test check that the hooks, or
the daemon, changed nothing in the run.

Oracle semantics follow DESIGN.md ("Event stream"):
  step       optimizer.step() calls completed when the tensor was produced, from 0
  iteration  forward passes of the root model (the first depth-0 module that has child modules;
             until one is called, the first depth-0 module with parameters of its own, a model
             with no child modules, which a module with children then replaces in the same
             forward pass) started, minus 1; a loss module called at top level gets the last
             model forward's
  layer      path as the outermost module's named_modules() names it, "" for that module (the
             outermost module being called: a checkpointed block that the backward pass
             recomputes is outermost there)
  tensor     "output", or "output[i]" / "output[i][j]" inside a tuple or list (or of one of
             their subclasses: a namedtuple; one level of nesting, as the daemon walks them), or "output['key']" /
             "output['key'][j]" for a dict's (or a dict subclass's) value: its key when that is a
             str of 1 to 31 printable ASCII characters without quote or backslash, else its
             place, "output[i]"
  inputs     tensors among the positional and keyword arguments, one level into tuples,
             lists and dicts (and their subclasses)

The oracle line holds the first non-finite output ("first": step, iteration, layer, module,
tensor, inputs_finite, origin, contiguous, and the counts and finite range of scan()) and, as
"first_iteration", one entry of the same fields for every non-finite output of that iteration,
in call order. "contiguous" is Tensor.is_contiguous(): a view with holes or overlaps, which the
daemon reads by its span and then run by run (stats.views), is not.
"""
import argparse
import hashlib
import json
import math
import os
import select
import sys
import threading
import time

import torch
import torch.nn as nn

SEED = 1234

DTYPE_NAMES = {
    torch.float16: "float16",
    torch.float32: "float32",
    torch.float64: "float64",
    torch.bfloat16: "bfloat16",
}


class Trainer:
    """What a trainer describes; the harness runs it. Override model/batch, the rest as needed."""

    steps = 10  # optimizer steps
    fault_step = 4  # documentation for readers; each trainer injects its fault itself
    expected_cause = None  # the diagnosis the fault must produce (ground truth by construction)
    # which optimizer step began it, for the diagnosis' origin_step: "params_bad" (the step
    # whose update first left a parameter non-finite), "loss_min" (the step with the lowest
    # loss before the first anomaly: the divergence starts with its update), None (not checked)
    expected_origin = None
    accum = 1  # micro-batches (root forward passes) per optimizer step
    lr = 0.05

    def model(self):
        raise NotImplementedError

    def batch(self, step, micro, gen):
        """Return (inputs, target): inputs is a tuple of positional arguments of the model."""
        raise NotImplementedError

    def loss(self):
        """A loss nn.Module (called at top level) or a plain function (an object whose
        top_modules lists the modules it calls, if any)."""
        return nn.MSELoss()

    def optimizer(self, params):
        return torch.optim.SGD(params, lr=self.lr)

    def schedule(self, model, step):
        """Called before each optimizer step's micro-batches (e.g. to anneal a value)."""

    def grad_scaler(self):
        """Mixed precision: a torch.amp.GradScaler (the forward passes then run under float16
        autocast on the CPU), or None."""
        return None

    watch_backward = False  # --oracle also hooks the autograd nodes of each backward pass
    variant = None  # --variant: a trainer-defined choice (model size, nesting, ...)


def item_name(i, key):
    """output[i], or output['key'] for a dict's value whose key the daemon writes."""
    if isinstance(key, str) and 0 < len(key) < 32 and \
            all(" " <= c <= "~" and c not in "'\\" for c in key):
        return "output['%s']" % key
    return "output[%d]" % i


def attr_name(i, key):
    """output.key for an object's attribute whose name the daemon writes, else output.<i>."""
    if 0 < len(key) < 32 and key.isascii() and key.isidentifier():
        return "output.%s" % key
    return "output.<%d>" % i


def attributes(obj):
    """An object's attributes, if it keeps them in a __dict__ and is no tensor, tuple, list
    or dict (a dataclass, a torch.distributions object); else None."""
    if isinstance(obj, (torch.Tensor, tuple, list, dict)):
        return None
    d = getattr(obj, "__dict__", None)
    return d if isinstance(d, dict) else None


def output_tensors(out):
    """(name, tensor) for the tensors of a module output, walked the way the daemon walks it."""
    if isinstance(out, torch.Tensor):
        yield "output", out
        return
    if isinstance(out, dict):
        items = [(item_name(i, k), v) for i, (k, v) in enumerate(out.items())]
    elif isinstance(out, (tuple, list)):
        items = [("output[%d]" % i, v) for i, v in enumerate(out)]
    elif attributes(out) is not None:
        items = [(attr_name(i, k), v) for i, (k, v) in enumerate(attributes(out).items())]
    else:
        return
    for name, item in items:
        if isinstance(item, torch.Tensor):
            yield name, item
        elif isinstance(item, (tuple, list)):
            for j, sub in enumerate(item):
                if isinstance(sub, torch.Tensor):
                    yield "%s[%d]" % (name, j), sub


def arg_tensors(args):
    """The tensors among a call's arguments, one level into tuples, lists, dicts and other
    objects' attributes."""
    for a in args:
        items = a.values() if isinstance(a, dict) else a if isinstance(a, (tuple, list)) else \
            attributes(a).values() if attributes(a) is not None else (a,)
        yield from (t for t in items if isinstance(t, torch.Tensor))


def all_finite(tensors):
    """Every value of every floating or complex tensor finite (integers and bool always are)."""
    with torch.no_grad():
        return all(bool(torch.isfinite(t).all()) for t in tensors
                   if t.dtype in DTYPE_NAMES or t.is_complex())


def scan(t):
    """Counts and finite range of a float tensor, or None when every value is finite."""
    if t.dtype not in DTYPE_NAMES:
        return None
    with torch.no_grad():
        d = t.detach().to(torch.float64)  # exact for every dtype we watch
        nan = int(torch.isnan(d).sum())
        posinf = int((d == math.inf).sum())
        neginf = int((d == -math.inf).sum())
        if nan + posinf + neginf == 0:
            return None
        fin = d[torch.isfinite(d)]
        has = fin.numel() > 0
        return {
            "dtype": DTYPE_NAMES[t.dtype],
            "shape": list(t.shape),
            "numel": t.numel(),
            "nan": nan,
            "posinf": posinf,
            "neginf": neginf,
            "finite_min": float(fin.min()) if has else None,
            "finite_max": float(fin.max()) if has else None,
        }


def digest(t):
    """sha256 of a tensor's values in C order, as a capture's .npy holds them (bfloat16 as its
    raw bits)."""
    with torch.no_grad():
        t = t.detach().contiguous()
        if t.dtype == torch.bfloat16:
            t = t.view(torch.int16)
        return hashlib.sha256(t.numpy().tobytes()).hexdigest()


def described(name, t):
    return {"name": name, "dtype": str(t.dtype).replace("torch.", ""), "shape": list(t.shape),
            "sha256": digest(t)}


class Oracle:
    """Forward hooks on every module: finds the first non-finite module output."""

    def __init__(self, harness, roots):
        self.harness = harness
        self.names = {}  # id(module) -> {id(outermost): path}
        self.stack = []  # (module, inputs_finite) of the calls in progress
        self.root = None
        self.root_flat = False  # the root has no child modules: see pre_hook
        self.forwards = 0
        self.first = None
        self.first_iteration = []
        self.later = {}  # iteration -> its first anomaly, after the first anomalous iteration
        self.capture = None  # the first anomaly's call, when it is an origin, as captured
        self.handles = []
        for root in roots:
            for path, mod in root.named_modules():
                self.names.setdefault(id(mod), {}).setdefault(id(root), path)
                self.handles.append(mod.register_forward_pre_hook(self.pre_hook))
                self.handles.append(mod.register_forward_hook(self.hook))
        self.unhooked = set()
        self.handles.append(nn.modules.module.register_module_forward_pre_hook(self.any_call))
        # Forward pre-hooks see no keyword arguments in torch 1.x: Module.__call__ hands them
        # to the module's pre-hook (this run is the oracle's own; no daemon watches it)
        self.kwargs_of = (None, {})
        call = nn.Module.__call__
        oracle = self

        def observed_call(module, *args, **kwargs):
            oracle.kwargs_of = (module, kwargs)
            return call(module, *args, **kwargs)

        nn.Module.__call__ = observed_call

    def any_call(self, module, inputs):
        if id(module) not in self.names:
            self.unhooked.add(type(module).__name__)

    def pre_hook(self, module, inputs):
        if not self.stack:
            kids = next(module.children(), None) is not None
            if kids and module is not self.root and (self.root is None or self.root_flat):
                # a flat model called before it began this forward pass already
                if not self.root_flat:
                    self.forwards += 1
                self.root, self.root_flat = module, False
            elif self.root is None and next(module.parameters(recurse=False), None) is not None:
                self.root, self.root_flat = module, True
                self.forwards += 1
            elif module is self.root:
                self.forwards += 1
        kwargs = self.kwargs_of[1] if self.kwargs_of[0] is module else {}
        self.kwargs_of = (None, {})
        tensors = list(arg_tensors(list(inputs) + list(kwargs.values())))
        self.stack.append((module, all_finite(tensors), kwargs))

    def hook(self, module, inputs, output):
        mod, inputs_finite, kwargs = self.stack.pop()
        assert mod is module, "module calls not nested"
        outer = self.stack[0][0] if self.stack else module
        iteration = self.forwards - 1
        later = self.first is not None and iteration != self.first["iteration"]
        if later and iteration in self.later:
            return None
        for tensor, t in output_tensors(output):
            found = scan(t)
            if found is None:
                continue
            layer = self.path_in(outer, module)
            contiguous = t.is_contiguous()
            # the module's own parameters, as they are while its output is produced
            params_finite = all_finite(list(module.parameters(recurse=False)))
            entry = dict(step=self.harness.steps_done, iteration=iteration,
                         layer=layer, module=type(module).__name__, tensor=tensor,
                         inputs_finite=inputs_finite, params_finite=params_finite,
                         origin=inputs_finite and params_finite,
                         contiguous=contiguous, **found)
            if later:
                # at most one event per later iteration: its first non-finite output
                self.later[iteration] = entry
                return None
            self.first_iteration.append(entry)
            if self.first is None and entry["origin"]:
                self.capture = self.captured(module, inputs, kwargs, tensor, t)
            if self.first is None:
                # an outermost module that is not the model: a loss module called on its own
                self.first = dict(entry, outside_model=layer == "" and module is not self.root)
        return None

    def path_in(self, outer, module):
        """module's path in the outermost module being called: a root's, or another's (a
        checkpointed block recomputed from within the backward pass is outermost there)."""
        if id(outer) not in self.names.get(id(module), {}):
            for path, mod in outer.named_modules():
                self.names.setdefault(id(mod), {}).setdefault(id(outer), path)
        return self.names[id(module)].get(id(outer), "?")

    def captured(self, module, inputs, kwargs, tensor, out):
        """What nanwatchd --capture-dir must write for the first anomaly's call (an origin):
        its positional and keyword tensor
        inputs (one level into tuples and lists), own parameters and buffers, and the bad
        output tensor, with digests of their values at this moment."""
        found = []
        for i, arg in enumerate(inputs):
            if isinstance(arg, torch.Tensor):
                found.append(dict(described("input[%d]" % i, arg), role="input"))
            elif type(arg) in (tuple, list):
                found += [dict(described("input[%d][%d]" % (i, j), a), role="input")
                          for j, a in enumerate(arg) if isinstance(a, torch.Tensor)]
        for key, arg in kwargs.items():
            if isinstance(arg, torch.Tensor):
                found.append(dict(described(key, arg), role="kwarg"))
            elif type(arg) in (tuple, list):
                found += [dict(described("%s[%d]" % (key, j), a), role="kwarg")
                          for j, a in enumerate(arg) if isinstance(a, torch.Tensor)]
        found += [dict(described(n, p), role="param")
                  for n, p in module.named_parameters(recurse=False)]
        found += [dict(described(n, b), role="buffer")
                  for n, b in module.named_buffers(recurse=False)]
        found.append(dict(described(tensor, out), role="output"))
        return {"tensors": found, "nargs": len(inputs)}

    def loss(self, t):
        """The tensor backward() starts from: a non-finite loss is the first anomaly when no
        module output was non-finite before it (a loss computed outside any module)."""
        found = scan(t)
        if found is None or self.first is not None:
            return
        self.first = dict(step=self.harness.steps_done, iteration=self.forwards - 1,
                          phase="loss", layer=None, module=None, tensor="loss",
                          inputs_finite=None, params_finite=None, origin=True,
                          contiguous=True, **found)

    def result(self):
        for h in self.handles:
            h.remove()
        if self.unhooked:
            sys.exit("oracle: modules called outside the hooked trees: %s" %
                     ", ".join(sorted(self.unhooked)))
        if self.first is None:
            return None
        return dict(self.first, first_iteration=self.first_iteration,
                    later=[self.later[i] for i in sorted(self.later)], capture=self.capture)


class BackwardOracle:
    """Hooks every autograd node reachable from the loss (Node.register_hook sees the node's
    outputs, the gradients it returns, as the engine runs it) and finds the first node whose
    output holds NaN/Inf; the layer is the innermost module whose output had that node as
    grad_fn (forward hooks), None for a node made outside module outputs."""

    def __init__(self, harness, roots):
        self.harness = harness
        self.made_by = {}  # grad_fn node -> module path (innermost module first)
        self.first = None
        self.norms = []
        names = {}
        for root in roots:
            for path, mod in root.named_modules():
                names.setdefault(id(mod), path)
        self.names = names
        self.handles = [mod.register_forward_hook(self.forward_hook)
                        for root in roots for _, mod in root.named_modules()]

    def forward_hook(self, module, inputs, output):
        for _, t in output_tensors(output):
            fn = t.grad_fn
            if fn is not None and fn not in self.made_by:
                self.made_by[fn] = (self.names[id(module)], type(module).__name__)
        return None

    def before_backward(self, loss, iteration):
        seen, todo, hooks = set(), [loss.grad_fn], []
        while todo:
            fn = todo.pop()
            if fn is None or fn in seen:
                continue
            seen.add(fn)
            hooks.append(fn.register_hook(self.node_hook(fn, iteration)))
            todo.extend(f for f, _ in fn.next_functions)
        self.hooks = hooks

    def node_hook(self, fn, iteration):
        def hook(grad_inputs, grad_outputs):
            if self.first is not None:
                return None
            for i, g in enumerate(grad_inputs):
                if g is None:
                    continue
                found = scan(g)
                if found is None:
                    continue
                layer, module = self.made_by.get(fn, (None, None))
                self.first = dict(step=self.harness.steps_done, iteration=iteration,
                                  phase="backward", node=type(fn).__name__,
                                  tensor="grad[%d]" % i, layer=layer, module=module, **found)
                break
            return None
        return hook

    def after_backward(self, params):
        for h in self.hooks:
            h.remove()
        self.made_by = {}
        with torch.no_grad():
            grads = [p.grad for p in params if p.grad is not None]
            sq = sum(float(g.double().pow(2).sum()) for g in grads)
        self.norms.append(dict(step=self.harness.steps_done, norm=math.sqrt(sq),
                               params=len(grads)))

    def result(self):
        for h in self.handles:
            h.remove()
        return self.first


def anomaly_node(message):
    """("LogBackward0", 0) from detect_anomaly's "Function 'LogBackward0' returned nan values
    in its 0th output."; None if it is not that error."""
    import re
    m = re.search(r"Function '(\w+)' returned nan values in its (\d+)(?:st|nd|rd|th) output",
                  message)
    return (m.group(1), int(m.group(2))) if m else None


def loss_roots(model, loss_fn):
    """The modules called at top level: the model, a loss module, or the modules a plain loss
    function calls itself (its top_modules)."""
    if isinstance(loss_fn, nn.Module):
        return [model, loss_fn]
    return [model] + list(getattr(loss_fn, "top_modules", ()))


def forward_site(model, loss_fn, messages):
    """From detect_anomaly's "Traceback of forward call that caused the error": the innermost
    frame outside torch (file:line, function), and the module class whose forward() holds that
    line with the paths of its instances (op_module None: a line outside every forward)."""
    import inspect
    import re
    tb = [m for m in messages if "Traceback of forward call" in m]
    frames = re.findall(r'File "([^"]+)", line (\d+), in (\S+)', tb[-1]) if tb else []
    tdir = os.path.dirname(torch.__file__)
    frames = [f for f in frames if not os.path.abspath(f[0]).startswith(tdir)]
    if not frames:
        return dict(op_line=None, op_module=None, op_layers=[])
    path, line, func = frames[-1][0], int(frames[-1][1]), frames[-1][2]
    roots = loss_roots(model, loss_fn)
    holder, layers = None, []
    for root in roots:
        for name, m in root.named_modules():
            fwd = type(m).forward
            try:
                src, first = inspect.getsourcelines(fwd)
                fpath = inspect.getsourcefile(fwd)
            except (OSError, TypeError):
                continue
            if os.path.abspath(fpath) == os.path.abspath(path) and \
                    first <= line < first + len(src):
                holder = type(m).__name__
                layers.append(name)
    return dict(op_line="%s:%d" % (os.path.basename(path), line), op_func=func,
                op_module=holder, op_layers=layers)


class Harness:
    def __init__(self, trainer, args):
        self.trainer = trainer
        self.args = args
        self.steps_done = 0
        self.skipped = []  # steps whose update the GradScaler skipped
        self.scaler = None
        self.losses = []
        self.loss_steps = []  # the step of each loss (one per micro-batch)
        self.params_bad_step = None

    def params_digest(self, model):
        h = hashlib.sha256()
        for name, p in model.named_parameters():
            h.update(name.encode())
            h.update(p.detach().contiguous().numpy().tobytes())
        return h.hexdigest()

    def run(self):
        torch.manual_seed(SEED)
        torch.set_num_threads(1)
        torch.use_deterministic_algorithms(True)
        t = self.trainer
        self.fault_told = self.args.fault_step is not None  # training ends after the fault
        if self.fault_told:
            t.fault_step = self.args.fault_step
        if self.args.variant is not None:
            t.variant = self.args.variant
        model = t.model()
        loss_fn = t.loss()
        opt = t.optimizer(model.parameters())
        self.scaler = t.grad_scaler()
        roots = loss_roots(model, loss_fn)
        oracle = Oracle(self, roots) if self.args.oracle else None
        self.oracle = oracle
        self.backward_oracle = BackwardOracle(self, roots) \
            if self.args.oracle and t.watch_backward else None
        self.model = model
        self.iterations = 0
        if self.args.live:
            print("LIVE %d" % os.getpid(), flush=True)
        if self.args.wait:
            print("READY %d" % os.getpid(), flush=True)
            if not sys.stdin.readline():
                sys.exit("trainer: stdin closed before go")
        steps = self.args.steps if self.args.steps is not None else t.steps
        if self.args.anomaly:
            return self.run_anomaly(model, loss_fn, opt, steps)
        if self.args.in_thread:
            # entered from C (the thread's start) after the wait: a frame the daemon saw begin
            th = threading.Thread(target=self.train_loop, args=(model, loss_fn, opt, steps))
            th.start()
            th.join()
        else:
            self.train_loop(model, loss_fn, opt, steps)
        self.finish(model, oracle)

    def train_loop(self, model, loss_fn, opt, steps):
        step = 0
        while step < self.last_step(steps):
            if self.args.live:
                opt = self.read_request(step, model, opt)
            self.train_step(model, loss_fn, opt, step)
            step += 1
            every = self.args.progress_every
            if self.args.progress or (every and self.steps_done % every == 0) or \
                    (self.args.live and not every):
                print("STEP %d" % self.steps_done, flush=True)
            if self.args.pace:
                time.sleep(self.args.pace)

    def finish(self, model, oracle):
        trace = {"steps": self.steps_done, "losses": self.losses, "loss_steps": self.loss_steps,
                 "params_sha256": self.params_digest(model), "skipped": self.skipped}
        line = {"trace": trace}
        if oracle is not None:
            found = oracle.result()
            if found is not None:
                found["expected_cause"] = self.trainer.expected_cause
                found["origin_step"] = self.origin_step(found)
            line = {"oracle": found, "trace": trace}
            if self.backward_oracle is not None:
                line["backward_first"] = self.backward_oracle.result()
                line["grad_norms"] = self.backward_oracle.norms
        print(json.dumps(line, sort_keys=True), flush=True)
        time.sleep(self.args.linger)

    def last_step(self, steps):
        if not self.fault_told:
            return steps
        return min(steps, self.trainer.fault_step + self.args.after_fault)

    def read_request(self, step, model, opt):
        """Take a request line from stdin if one is there (never blocks); the optimizer to
        step with."""
        if sys.stdin.closed or not select.select([sys.stdin], [], [], 0)[0]:
            return opt
        line = sys.stdin.readline()
        if not line:
            sys.stdin.close()
        elif line.strip() == "refold":
            opt = self.trainer.optimizer(model.parameters())
            print("REFOLD AT %d" % step, flush=True)
        elif line.startswith("FAULT ") or line.strip() == "fault":
            words = line.split()
            self.trainer.fault_step = int(words[1]) if len(words) > 1 else step + 3
            self.fault_told = True
            print("FAULT AT %d (now %d)" % (self.trainer.fault_step, step), flush=True)
        return opt

    def run_anomaly(self, model, loss_fn, opt, steps):
        """Each step under detect_anomaly: where it raises, that node returned NaN; its
        warning's forward traceback gives the line that made the node, and the module whose
        forward holds that line (op_module, and op_layers: the paths of that class's modules)."""
        import warnings
        found = None
        for step in range(steps):
            try:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    with torch.autograd.detect_anomaly():
                        self.train_step(model, loss_fn, opt, step)
            except RuntimeError as e:
                node = anomaly_node(str(e))
                if node is None:
                    raise
                found = dict(node=node[0], output=node[1], step=self.steps_done,
                             iteration=self.iterations - 1)
                found.update(forward_site(model, loss_fn, [str(w.message) for w in caught]))
                break
        print(json.dumps({"anomaly": found, "trace": None}, sort_keys=True), flush=True)

    def train_step(self, model, loss_fn, opt, step):
        t = self.trainer
        t.schedule(model, step)
        opt.zero_grad()
        scaler = self.scaler
        for micro in range(t.accum):
            gen = torch.Generator().manual_seed(SEED * 1000 + step * 16 + micro)
            inputs, target = t.batch(step, micro, gen)
            if scaler is not None:
                with torch.autocast("cpu", dtype=torch.float16):
                    out = model(*inputs)
                    loss = loss_fn(out, target) / t.accum
                self.iterations += 1
                if self.oracle is not None:
                    self.oracle.loss(loss)
                scaler.scale(loss).backward()
                self.losses.append(float(loss).hex())
                self.loss_steps.append(self.steps_done)
                continue
            out = model(*inputs)
            self.iterations += 1
            loss = loss_fn(out, target) / t.accum
            if self.oracle is not None:
                self.oracle.loss(loss)
            if self.backward_oracle is not None:
                self.backward_oracle.before_backward(loss, self.iterations - 1)
            loss.backward()
            if self.backward_oracle is not None:
                self.backward_oracle.after_backward(list(model.parameters()))
            self.losses.append(float(loss).hex())
            self.loss_steps.append(self.steps_done)
        if scaler is not None:
            # the scaler skips the update when the scaled gradients overflowed, and backs off
            scale = scaler.get_scale()
            scaler.step(opt)
            scaler.update()
            if scaler.get_scale() < scale:
                self.skipped.append(self.steps_done)
        else:
            opt.step()
        if self.oracle is not None and self.params_bad_step is None and \
                not all_finite(list(model.parameters())):
            self.params_bad_step = self.steps_done
        self.steps_done += 1

    def origin_step(self, found):
        """Ground truth for the diagnosis' origin_step (see Trainer.expected_origin)."""
        how = self.trainer.expected_origin
        if how == "params_bad":
            return self.params_bad_step
        if how == "loss_min":
            before = [(float.fromhex(v), i) for i, v in enumerate(self.losses[:found["iteration"]])]
            return self.loss_steps[min(before)[1]] if before else None
        return None


def main(trainer):
    ap = argparse.ArgumentParser(description=type(trainer).__doc__)
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--wait", action="store_true",
                      help="print READY <pid>, wait for a line on stdin, then train")
    mode.add_argument("--oracle", action="store_true",
                      help="find the first non-finite module output with forward hooks")
    mode.add_argument("--live", action="store_true",
                      help="print LIVE <pid> and train at once; take requests on stdin")
    mode.add_argument("--anomaly", action="store_true",
                      help="train under torch.autograd.detect_anomaly(); report where it raised")
    ap.add_argument("--steps", type=int, help="optimizer steps (default %d)" % trainer.steps)
    ap.add_argument("--progress", action="store_true", help="print STEP n after each step")
    ap.add_argument("--pace", type=float, default=0.0, help="seconds to sleep after each step")
    ap.add_argument("--progress-every", type=int, default=0, metavar="N",
                    help="print STEP n after every N-th step")
    ap.add_argument("--fault-step", type=int, help="the step whose batch carries the fault")
    ap.add_argument("--after-fault", type=int, default=3, metavar="N",
                    help="steps trained after the fault step (default %(default)s)")
    ap.add_argument("--variant", help="a trainer-defined choice")
    ap.add_argument("--linger", type=float, default=0.0, metavar="S",
                    help="seconds to stay alive after printing the trace")
    ap.add_argument("--in-thread", action="store_true",
                    help="train in a thread started once ready (after --wait's line)")
    Harness(trainer, ap.parse_args()).run()
