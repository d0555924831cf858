#!/usr/bin/env python3
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""Hang test of libnanwatch_cupti.so's launch path under PyTorch, in the launch mode the
environment selects (NANWATCH_CUPTI_LAUNCH=callback|interpose; CUDA_INJECTION64_PATH loads
the library). This process plays the daemon (tests/gpu/nwring.py): after each of its own
launches it writes a request for the tensor just made, so that the library enqueues a scan
before the next launch, as it would for a module output.

  one_thread   LAUNCHES launches round-robin over STREAMS streams from one thread; every
               BAD_EVERY-th output holds one NaN
  threads      STREAMS threads, one stream each, LAUNCHES / STREAMS launches each, NaNs alike
  graph        a CUDA graph captured from 200 launches with requests written during the
               capture (the library must not enqueue into a capture), replayed 20 times,
               then one ordinary launch and request
Checks: nothing hangs (faulthandler dumps every stack after WATCHDOG s; the caller's
timeout kills), the training values are right (scans never disturb stream order), the
library's results name exactly the bad outputs (each NaN once, by seq), and its stats count
the capture. Prints one JSON line; exit 1 when a check fails.
"""
import faulthandler
import json
import os
import sys
import threading
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nwring  # noqa: E402

LAUNCHES, STREAMS, BAD_EVERY, WATCHDOG = 10000, 4, 97, 75


def run_stream(ring, stream, n, start, bad_seqs, lock):
    """n launches on one stream, each output requested; returns the checksum it expects."""
    base = torch.ones(1024, device="cuda")
    nanbase = base.clone()
    nanbase[7] = float("nan")
    keep = []
    with torch.cuda.stream(stream):
        for i in range(n):
            bad = (start + i) % BAD_EVERY == 0
            y = (nanbase if bad else base) + (i % 5)  # one kernel
            seq = ring.put(y.data_ptr(), y.numel(), nwring.DT_F32, y.device.index)
            if bad:
                with lock:
                    bad_seqs.add(seq)
            if i % 1000 == 999:
                keep.append(y)  # some outputs outlive the loop, like activations
    stream.synchronize()
    return sum(float(k[0]) for k in keep), sum(1 + (i % 5) for i in range(999, n, 1000))


def one_thread(ring, bad_seqs):
    streams = [torch.cuda.Stream() for _ in range(STREAMS)]
    base = torch.ones(1024, device="cuda")
    nanbase = base.clone()
    nanbase[7] = float("nan")
    acc = [torch.zeros(1024, device="cuda") for _ in streams]
    t0 = time.perf_counter()
    for i in range(LAUNCHES):
        s = i % STREAMS
        bad = i % BAD_EVERY == 0
        with torch.cuda.stream(streams[s]):
            y = (nanbase if bad else base) + 1.0
            seq = ring.put(y.data_ptr(), y.numel(), nwring.DT_F32, y.device.index)
            if bad:
                bad_seqs.add(seq)
            else:
                acc[s].add_(y)  # a second kernel, depending on the first
                ring.put(acc[s].data_ptr(), acc[s].numel(), nwring.DT_F32, 0)
    enq = time.perf_counter() - t0
    torch.cuda.synchronize()
    good = [sum(1 for i in range(LAUNCHES) if i % STREAMS == s and i % BAD_EVERY)
            for s in range(STREAMS)]
    values_ok = all(float(acc[s][0]) == 2.0 * good[s] for s in range(STREAMS))
    return {"launches": LAUNCHES, "enqueue_s": round(enq, 3), "values_ok": values_ok,
            "bad": len(bad_seqs)}


def threads(ring, bad_seqs):
    lock = threading.Lock()
    out, ths = [None] * STREAMS, []
    n = LAUNCHES // STREAMS

    def work(k):
        out[k] = run_stream(ring, torch.cuda.Stream(), n, k * n, bad_seqs, lock)

    t0 = time.perf_counter()
    for k in range(STREAMS):
        ths.append(threading.Thread(target=work, args=(k,)))
        ths[-1].start()
    for t in ths:
        t.join()
    return {"launches": n * STREAMS, "s": round(time.perf_counter() - t0, 3),
            "values_ok": all(o is not None and o[0] == o[1] for o in out)}


def graph(ring):
    x = torch.ones(1024, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm up outside the capture
        y = x + 1
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = x
        for _ in range(200):
            y = y + 1
            ring.put(y.data_ptr(), y.numel(), nwring.DT_F32, 0)
    for _ in range(20):
        g.replay()
    z = y * 2  # an ordinary launch after the replays
    seq = ring.put(z.data_ptr(), z.numel(), nwring.DT_F32, 0)
    z2 = z + 0  # the launch before which that request is scanned
    torch.cuda.synchronize()
    return {"captured": 200, "replays": 20, "values_ok": float(y[0]) == 201.0 and
            float(z2[0]) == 402.0, "after_seq": seq}


def main():
    faulthandler.dump_traceback_later(WATCHDOG, exit=False)
    torch.zeros(1, device="cuda").sum().item()
    ring = nwring.Ring()
    link = nwring.Link(ring)
    res = {"mode_env": os.environ.get("NANWATCH_CUPTI_LAUNCH"), "ready": link.ready}
    bad1, bad2 = set(), set()
    res["one_thread"] = one_thread(ring, bad1)
    res["threads"] = threads(ring, bad2)
    before = link.wait_stats(5) or {}
    res["graph"] = graph(ring)
    bad = bad1 | bad2
    link.wait_results(lambda rs: bad <= {r["seq"] for r in rs}, 30)
    stats = link.wait_stats(5) or {}
    got = {r["seq"] for r in link.results if r["nan"]}
    res.update(stats=stats, notices=link.notices, results=len(link.results),
               bad_expected=len(bad), bad_found=len(got & bad),
               unexpected_bad=sorted(got - bad)[:10], requests=ring.head)
    res["graph"]["capturing_counted"] = stats.get("capturing", 0) - before.get("capturing", 0)
    res["ok"] = (res["one_thread"]["values_ok"] and res["threads"]["values_ok"] and
                 res["graph"]["values_ok"] and got == bad and
                 res["graph"]["capturing_counted"] > 0)
    faulthandler.cancel_dump_traceback_later()
    link.close()
    print(json.dumps(res, sort_keys=True), flush=True)
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
