#!/usr/bin/python3
"""A spectral layer (as in Fourier neural operators) whose complex output goes non-finite
first: its modes are divided by a temperature annealed linearly to 0.0 at step 4.

lift (Linear) -> spectral (Spectral: rfft of each row, times a complex weight per mode, over
the temperature: a complex64 output) -> back (Back: irfft, a real output) -> head (Linear).
The daemon does not read complex tensors: spectral's output is not scanned (counted in
stats.skipped.dtype), and back's complex input is not known finite.

Expected: the hooks' first anomaly is back (Back) at step 4, its complex input not finite, so
not the origin: the daemon names back first with the hooks' counts and never says its inputs
were finite.
"""
import torch
import torch.nn as nn

import common

WIDTH = 16
MODES = WIDTH // 2 + 1


class Spectral(nn.Module):
    """The row's spectrum, one complex weight per mode, over a temperature buffer."""

    def __init__(self):
        super().__init__()
        gen = torch.Generator().manual_seed(7)
        w = torch.randn(MODES, 2, generator=gen) * 0.5 + torch.tensor([1.0, 0.0])
        self.weight = nn.Parameter(torch.view_as_complex(w.contiguous()))
        self.register_buffer("temperature", torch.tensor(1.0))

    def forward(self, x):
        return torch.fft.rfft(x) * self.weight / self.temperature


class Back(nn.Module):
    def forward(self, z):
        return torch.fft.irfft(z, n=WIDTH)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lift = nn.Linear(6, WIDTH)
        self.spectral = Spectral()
        self.back = Back()
        self.head = nn.Linear(WIDTH, 1)

    def forward(self, x):
        return self.head(self.back(self.spectral(self.lift(x))))


class ComplexSpectral(common.Trainer):
    """Trainer whose spectral temperature reaches zero at step 4."""

    expected_cause = None

    def model(self):
        return Net()

    def schedule(self, model, step):
        model.spectral.temperature.fill_(max(0.0, 1.0 - step / self.fault_step))

    def batch(self, step, micro, gen):
        x = torch.randn(8, 6, generator=gen)
        return (x,), torch.randn(8, 1, generator=gen)


if __name__ == "__main__":
    common.main(ComplexSpectral())
