"""Fixture: does some work, then fails in a nested call (or exits with argv[1] as its status)."""

import sys

import torch


def inner():
    raise ValueError("boom from the script")


def outer():
    torch.ones(16, 16).relu()
    inner()


if __name__ == "__main__":
    torch.ones(4, 4).sum()
    if len(sys.argv) > 1:
        arg = sys.argv[1]
        sys.exit(int(arg) if arg.lstrip("-").isdigit() else arg)
    outer()
