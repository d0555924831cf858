#!/usr/bin/python3
"""Trains flat out (--live), and replaces itself with /bin/sleep when told "FAULT n" (at step
n): the process, and its pid, go on running a program that is not Python. A daemon watching it
must notice the exec, detach (reason target_exec) and leave the new program alone.
"""
import os

import torch
import torch.nn as nn

import common


class ExecAfter(common.Trainer):
    """Small MLP; at fault_step, execs /bin/sleep 30."""

    steps = 1000000
    fault_step = None  # until told (FAULT n on stdin, or --fault-step)

    def model(self):
        return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))

    def schedule(self, model, step):
        if step == self.fault_step:
            os.execv("/bin/sleep", ["sleep", "30"])

    def batch(self, step, micro, gen):
        x = torch.randn(4, 4, generator=gen)
        return (x,), x[:, :1]


if __name__ == "__main__":
    common.main(ExecAfter())
