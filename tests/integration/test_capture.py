"""Captures and tools/nanwatch-repro.

The capture cases (capture_*, host and [trixie]) run their trainer as uid 65534 under
`nanwatchd --capture-dir`, and check the capture against the oracle's first origin (the oracle
records digests of that call's inputs, parameters, buffers and output while its hooks run): the
directory name, the diagnosis's capture path, the manifest (layer, class, step, iteration,
tensor names, dtypes, shapes), modes 0700/0600 and ownership by that user, every .npy's header
and size (read here) and values (loaded with numpy, hashed, compared to the oracle's); then
tools/nanwatch-repro, run as that user with the environment's Python, must reproduce the
non-finite output with the oracle's NaN/+Inf/-Inf counts. capture_standard: a frozen
BatchNorm1d (torch.nn); capture_custom: div_zero's TempScale, whose zero temperature is a
buffer (instructions without --class-from, exit 3; reproduced with it); capture_children:
MultiheadAttention, whose out_proj child the manifest lists and the repro refuses (exit 2);
capture_none: no capture when the first anomaly is not an origin; capture_budget: a
200-byte budget leaves tensors out, no file holds more, the manifest says truncated and the
repro refuses it (exit 2).
"""
import json
import os
import re
import struct
import subprocess

from nwcapture import (CAPTURE_USER, as_user, capture_dir, install_repro, run_repro,
                       watch_capture)
from nwharness import Fail, last_json, oracle_of
from nwchecks import HOST_AND_ROOTS, check_anomalies, environments, listing


NPY_DTYPES = {"float32": "<f4", "float64": "<f8", "float16": "<f2", "bfloat16": "<u2",
              "int64": "<i8", "int32": "<i4", "int16": "<i2", "int8": "|i1", "uint8": "|u1",
              "bool": "|b1"}


def npy_header(path):
    """(descr, shape, header length, file size) of a .npy file, read without numpy."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x93NUMPY\x01\x00":
        raise Fail("%s is not a .npy 1.0 file" % path)
    hlen = 10 + data[8] + 256 * data[9]
    head = data[10:hlen].decode("latin-1")
    m = re.match(r"^\{'descr': '([^']+)', 'fortran_order': False, 'shape': \(([0-9, ]*)\), \}"
                 r" *\n$", head)
    if hlen % 64 or not m:
        raise Fail("%s: bad header %r" % (path, head))
    shape = [int(x) for x in m.group(2).replace(" ", "").split(",") if x]
    return m.group(1), shape, hlen, len(data)


def check_capture_files(ctx, path, man):
    """Modes, owner, sizes, and that every .npy is the array the manifest describes."""
    st = os.lstat(path)
    if not os.path.isdir(path) or os.path.islink(path) or st.st_mode & 0o777 != 0o700 or \
            (st.st_uid, st.st_gid) != (CAPTURE_USER, CAPTURE_USER):
        raise Fail("capture dir %s: mode %o owner %d:%d, want 700 %d:%d" % (
            path, st.st_mode & 0o777, st.st_uid, st.st_gid, CAPTURE_USER, CAPTURE_USER))
    files = sorted(os.listdir(path))
    listed = sorted([e["file"] for e in man["tensors"] if e["file"]] + ["manifest.json"])
    if files != listed:
        raise Fail("capture holds %s, the manifest lists %s" % (files, listed))
    data = 0
    for name in files:
        st = os.lstat(os.path.join(path, name))
        if st.st_mode & 0o7777 != 0o600 or (st.st_uid, st.st_gid) != (CAPTURE_USER,
                                                                         CAPTURE_USER):
            raise Fail("%s: mode %o owner %d:%d, want 600 %d:%d" % (
                name, st.st_mode & 0o7777, st.st_uid, st.st_gid, CAPTURE_USER, CAPTURE_USER))
    for e in man["tensors"]:
        if not e["file"]:
            continue
        descr, shape, hlen, size = npy_header(os.path.join(path, e["file"]))
        n = 1
        for d in e["shape"]:
            n *= d
        want = n * int(NPY_DTYPES[e["dtype"]][2:])
        if descr != NPY_DTYPES[e["dtype"]] or shape != e["shape"] or size - hlen != want or \
                e["bytes"] != want:
            raise Fail("%s: %s %s with %d data bytes; manifest %s %s %d bytes" % (
                e["file"], descr, shape, size - hlen, e["dtype"], e["shape"], e["bytes"]))
        data += want
    if data > man["max_bytes"] or man["bytes"] != data:
        raise Fail("capture data %d bytes, manifest bytes %d, budget %d" % (
            data, man["bytes"], man["max_bytes"]))
    return data


def numpy_digests(ctx, path, man):
    """sha256 of each file's values as numpy loads them (the host's numpy)."""
    script = ("import hashlib, json, sys, numpy as np\n"
              "out = {}\n"
              "for f in sys.argv[2:]:\n"
              "    a = np.load(sys.argv[1] + '/' + f, allow_pickle=False)\n"
              "    out[f] = [hashlib.sha256(np.ascontiguousarray(a).view(np.uint8)"
              ".tobytes()).hexdigest(), list(a.shape)]\n"
              "print(json.dumps(out))\n")
    files = [e["file"] for e in man["tensors"] if e["file"]]
    r = subprocess.run([ctx.python, "-c", script, path] + files, capture_output=True,
                       text=True, timeout=120)
    if r.returncode != 0:
        raise Fail("numpy cannot load the capture: %s" % r.stderr[-500:])
    return json.loads(r.stdout)


def find_capture(ctx, dirpath, events, pid, oracle):
    """The one capture directory, named after the first origin, and the diagnosis naming it."""
    made = os.listdir(dirpath)
    want = "%d-step%d-%s" % (pid, oracle["step"], oracle["layer"] or "root")
    if made != [want]:
        raise Fail("capture directory holds %s, want [%r]" % (made, want))
    diags = [ev for ev in events if ev["event"] == "diagnosis"]
    inside = os.path.join(dirpath, want)
    if len(diags) != 1 or diags[0].get("capture") != inside:
        raise Fail("diagnosis capture %r, want %r" % (
            [d.get("capture") for d in diags], inside))
    with open(os.path.join(inside, "manifest.json"), encoding="utf-8") as f:
        return inside, json.load(f)


def check_manifest(man, oracle, pid, complete=True):
    """Manifest against the oracle's first origin: layer, class, step, tensors and values."""
    diffs = ["%s %r, oracle %r" % (f, man[f], oracle[f])
             for f in ("step", "iteration", "layer", "module", "tensor") if man[f] != oracle[f]]
    if man["pid"] != pid or man["schema"] != "nanwatch-capture/1":
        diffs.append("pid/schema %r/%r" % (man["pid"], man["schema"]))
    truth = oracle["capture"]
    if man["nargs"] != truth["nargs"]:
        diffs.append("nargs %r, oracle %r" % (man["nargs"], truth["nargs"]))
    got = [(e["role"], e["name"], e["dtype"], e["shape"]) for e in man["tensors"]]
    want = [(t["role"], t["name"], t["dtype"], t["shape"]) for t in truth["tensors"]]
    if got != want:
        diffs.append("tensors %s, oracle %s" % (got, want))
    if man["truncated"] is complete:
        diffs.append("truncated %r" % man["truncated"])
    if diffs:
        raise Fail("manifest differs: " + "; ".join(diffs))


def check_values(ctx, path, man, oracle):
    """Every written file holds exactly the values the oracle saw at that call."""
    digests = numpy_digests(ctx, path, man)
    by_name = {(t["role"], t["name"]): t for t in oracle["capture"]["tensors"]}
    for e in man["tensors"]:
        if not e["file"]:
            continue
        t = by_name[(e["role"], e["name"])]
        if digests[e["file"]] != [t["sha256"], t["shape"]]:
            raise Fail("%s (%s) differs from the oracle's values at the call" % (
                e["file"], e["name"]))


def write_npy(path, values):
    """A float32 vector as .npy 1.0, written here (no numpy in the runner)."""
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (%d,), }" % len(values)
    header += " " * (63 - (10 + len(header)) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        f.write(struct.pack("<%df" % len(values), *values))


# Names a target controls, as a capture's manifest carries them: escape sequences (clear the
# screen, set the title, colours), a C1 CSI, and bidi controls that reorder the line.
EVIL = ["a\x1b[2J", "b\x1b]0;owned\x07", "c\x9b31m", "d\u202eevil", "e\u2066f\u2069",
        "g\u200fh\u061c"]
HIDDEN_CHARS = "".join(chr(c) for c in list(range(0x20)) + list(range(0x7f, 0xa0)) +
                       [0x61c, 0x200e, 0x200f] + list(range(0x202a, 0x202f)) +
                       list(range(0x2066, 0x206a))).replace("\n", "")


def repro_raw(ctx, inside, *args):
    argv = as_user(ctx, ctx.env.argv(install_repro(ctx), *args, inside))
    r = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=120)
    out, err = r.stdout.decode("utf-8"), r.stderr.decode("utf-8")
    ctx.log("repro exit %d: %r" % (r.returncode, (out + err)[-300:]))
    bad = sorted({"U+%04X" % ord(c) for c in out + err if c in HIDDEN_CHARS})
    if bad:
        raise Fail("nanwatch-repro %s printed raw control characters %s: %r" %
                   (" ".join(args), ", ".join(bad), (out + err)[-300:]))
    return r.returncode, out, err


@environments(*HOST_AND_ROOTS)
def test_repro_names(ctx):
    """nanwatch-repro prints the manifest's names (from the target) with terminal and bidi
    controls neutralised, in its result, its instructions and its errors; --json stays exact."""
    path, inside = capture_dir(ctx)
    cap = os.path.join(path, "cap")
    os.mkdir(cap, 0o755)
    write_npy(os.path.join(cap, "input0.npy"), [1.0, float("nan"), -2.0, 3.0])
    write_npy(os.path.join(cap, "output.npy"), [1.0, float("nan"), 0.0, 3.0])
    vec = {"dtype": "float32", "shape": [4], "strides": [1], "storage_offset": 0, "bytes": 16,
           "skipped": None}
    man = {"schema": "nanwatch-capture/1", "pid": 1, "comm": "python3", "step": 3,
           "iteration": 3, "layer": "".join(EVIL), "module": "ReLU",
           "class_module": "torch.nn.modules.activation", "tensor": "output", "nargs": 1,
           "tensors": [dict(vec, role="input", name="input0", index=[0], file="input0.npy"),
                       dict(vec, role="output", name="output", index=[], file="output.npy")],
           "params_none": [], "buffers_none": [], "children": [], "attrs": {"inplace": False},
           "truncated": False}

    def write(m):
        with open(os.path.join(cap, "manifest.json"), "w") as f:
            json.dump(m, f)
    write(man)
    rc, out, _ = repro_raw(ctx, inside + "/cap")
    if rc != 0 or "reproduced" not in out or "a?[2Jb?]0;owned?c?31md?evile?f?g?h? (ReLU)" \
            not in out:
        raise Fail("repro of a ReLU with a hostile layer name: exit %d, %r" % (rc, out))
    rc, out, _ = repro_raw(ctx, inside + "/cap", "--json")
    layer = (last_json(out, "layer") or {}).get("layer")  # torch's UCX may print a line first
    if rc != 0 or layer != man["layer"]:
        raise Fail("--json does not carry the layer name exactly: %r" % out)
    write(dict(man, module="Net" + EVIL[0] + EVIL[3], class_module="__main__",
               attrs={"k" + EVIL[1]: "v" + EVIL[4]}))
    rc, out, _ = repro_raw(ctx, inside + "/cap")
    if rc != 3 or "import Neta?[2Jd?evil" not in out or "m.kb?]0;owned? = " not in out:
        raise Fail("instructions for a hostile class name: exit %d, %r" % (rc, out))
    write(dict(man, tensors=man["tensors"] + [dict(vec, role="param", name="w" + EVIL[5],
                                                   index=[], file=None)]))
    rc, _, err = repro_raw(ctx, inside + "/cap")
    if rc != 2 or "lacks wg?h?" not in err:
        raise Fail("error naming a hostile parameter: exit %d, %r" % (rc, err))


def check_reproduced(ctx, inside, oracle, *args):
    r = run_repro(ctx, inside, "--json", *args)
    result = last_json(r.stdout, "reproduced")
    if r.returncode != 0 or result is None:
        raise Fail("nanwatch-repro exited %d: %s" % (r.returncode, (r.stdout + r.stderr)[-500:]))
    diffs = ["%s %r, oracle %r" % (f, result[f], oracle[f]) for f in ("nan", "posinf", "neginf")
             if result[f] != oracle[f]]
    if result["reproduced"] is not True or result["matches_capture"] is not True or diffs:
        raise Fail("repro result %s; %s" % (json.dumps(result), "; ".join(diffs)))


def capture_case(ctx, name, *trainer_args):
    oracle, trace = oracle_of(ctx, name, *trainer_args)
    if oracle is None or not oracle["origin"] or oracle["capture"] is None:
        raise Fail("%s --oracle has no origin anomaly first (the trainer lost its fault)" % name)
    dirpath, inside_dir = capture_dir(ctx)
    events, pid = watch_capture(ctx, name, trace, dirpath, trainer_args=trainer_args)
    check_anomalies(events, oracle, pid)
    path, man = find_capture(ctx, dirpath, events, pid, oracle)
    check_manifest(man, oracle, pid)
    data = check_capture_files(ctx, path, man)
    check_values(ctx, path, man, oracle)
    ctx.log("capture %s: %d files, %d data bytes" % (path, len(os.listdir(path)), data))
    return oracle, path, os.path.join(inside_dir, os.path.basename(path)), man


@environments(*HOST_AND_ROOTS)
def test_capture_standard(ctx):
    """A standard torch.nn layer (a frozen BatchNorm1d): captured, and nanwatch-repro rebuilds
    it and reproduces its NaN output."""
    oracle, path, inside, man = capture_case(ctx, "frozen_norm")
    attrs = man["attrs"]
    if attrs.get("eps") != 1e-5 or attrs.get("training") is not False or \
            attrs.get("num_features") != 8 or man["children"] != [] or \
            attrs.get("frozen_at") != [-1, 2 ** 40] or attrs.get("note") != "frozen statistics" or \
            man["class_module"] != "torch.nn.modules.batchnorm":
        raise Fail("attrs/class_module %s %r" % (json.dumps(attrs), man["class_module"]))
    check_reproduced(ctx, inside, oracle)


@environments(*HOST_AND_ROOTS)
def test_capture_custom(ctx):
    """A custom layer (div_zero's TempScale, whose buffer holds the zero temperature): without
    its class the repro prints how to rebuild it; with --class-from it reproduces the ±Inf."""
    oracle, path, inside, man = capture_case(ctx, "div_zero")
    r = run_repro(ctx, inside)
    if r.returncode != 3 or "--class-from" not in r.stdout or "register_buffer" not in r.stdout:
        raise Fail("repro without the class exited %d:\n%s" % (r.returncode, r.stdout[-500:]))
    check_reproduced(ctx, inside, oracle, "--class-from",
                     os.path.join(ctx.env.trainers, "div_zero.py"))


@environments("host", "forky")
def test_capture_attribute(ctx):
    """A layer that returns a dataclass (dict_output --variant head): its logits field is
    captured as output.logits, the manifest says it is an attribute, and nanwatch-repro,
    given the class, picks that field of the rebuilt layer's output and reproduces the ±Inf."""
    oracle, path, inside, man = capture_case(ctx, "dict_output", "--variant", "head")
    out = [e for e in man["tensors"] if e["role"] == "output"]
    if man["tensor"] != "output.logits" or [(e["name"], e["attribute"], e["index"], e["file"])
                                            for e in out] != [("output.logits", True, [1],
                                                               "output1.npy")]:
        raise Fail("tensor %r, outputs %s" % (man["tensor"], json.dumps(out)))
    check_reproduced(ctx, inside, oracle, "--class-from",
                     os.path.join(ctx.env.trainers, "dict_output.py"))


@environments(*HOST_AND_ROOTS)
def test_capture_children(ctx):
    """MultiheadAttention (mha_tuple): a tuple output's first item, three positional inputs and
    key_padding_mask= by keyword;
    its out_proj child is listed, and the repro refuses to rebuild it generically."""
    oracle, path, inside, man = capture_case(ctx, "mha_tuple")
    if man["children"] != ["out_proj"] or man["attrs"].get("num_heads") != 2:
        raise Fail("children %r, attrs %s" % (man["children"], json.dumps(man["attrs"])))
    r = run_repro(ctx, inside)
    if r.returncode != 2 or "out_proj" not in r.stderr:
        raise Fail("repro of a layer with children exited %d: %s" % (r.returncode, r.stderr))


@environments(*HOST_AND_ROOTS)
def test_capture_none(ctx):
    """nonfinite_params: the first anomaly is not an origin (its weights were already bad), so
    nothing is captured, though a later output of that iteration (the root model's, whose own
    input is the finite batch) counts as one; the diagnosis says capture null."""
    oracle, trace = oracle_of(ctx, "nonfinite_params")
    later = [a for a in oracle["first_iteration"][1:] if a["origin"]]
    if oracle["origin"] or oracle["capture"] is not None or not later:
        raise Fail("oracle: first origin %r, later origins %s: the case lost its point" % (
            oracle["origin"], listing([(a["layer"], a["module"], a["tensor"]) for a in later])))
    dirpath, _ = capture_dir(ctx)
    events, pid = watch_capture(ctx, "nonfinite_params", trace, dirpath)
    check_anomalies(events, oracle, pid)
    diags = [ev for ev in events if ev["event"] == "diagnosis"]
    if os.listdir(dirpath) or [d["capture"] for d in diags] != [None]:
        raise Fail("capture made: %s, diagnosis capture %s" % (
            os.listdir(dirpath), [d.get("capture") for d in diags]))


@environments(*HOST_AND_ROOTS)
def test_capture_budget(ctx):
    """A budget of 200 bytes: the tensors that fit are written, the rest listed as skipped,
    the manifest says truncated, no file holds more, and the repro refuses the capture."""
    oracle, trace = oracle_of(ctx, "frozen_norm")
    dirpath, inside_dir = capture_dir(ctx)
    events, pid = watch_capture(ctx, "frozen_norm", trace, dirpath, "--capture-max-mb",
                                "%.12f" % (200 / 1048576))
    path, man = find_capture(ctx, dirpath, events, pid, oracle)
    check_manifest(man, oracle, pid, complete=False)
    data = check_capture_files(ctx, path, man)
    skipped = [e["name"] for e in man["tensors"] if e["skipped"] == "budget"]
    if man["max_bytes"] not in (199, 200) or not skipped or not 0 < data <= man["max_bytes"]:
        raise Fail("budget %r, data %d, skipped %s" % (man["max_bytes"], data, skipped))
    check_values(ctx, path, man, oracle)
    r = run_repro(ctx, os.path.join(inside_dir, os.path.basename(path)))
    if r.returncode != 2 or "truncated" not in r.stderr:
        raise Fail("repro of a truncated capture exited %d: %s" % (r.returncode, r.stderr))
